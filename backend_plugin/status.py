"""PyTorchJob status -> Flyte phase and a message that says why.

One table (`CONDITION_PHASES`) maps the training operator's condition types to Flyte phases. Only conditions whose
status is "True" count; a terminal one (Failed, Succeeded) wins, otherwise the latest by lastTransitionTime (list
order breaks ties). An unknown condition type means "still running" plus a log line, never an error.

On top of the table, pods explain what the conditions do not:
- a Failed job names the earliest failing replica and why (OOMKilled, exit code, signal, eviction);
- a queued job names the pod's reason (Unschedulable with the scheduler's message, ImagePullBackOff, ...) and fails
  once an image or container-config error outlasts `BackendConfig.image_pull_grace_s`;
- a job the operator never touched (no conditions) fails after `BackendConfig.operator_pickup_timeout_s`.

`job_status` is a pure function of (job, pods, config, now); `needs_pods` says when the caller must list pods, so a
steady running job costs one API call per poll.
"""

from __future__ import annotations

import datetime
import logging
import signal
from dataclasses import dataclass
from typing import Any

from flyteidl.core.execution_pb2 import TaskExecution

from backend_plugin.config import BackendConfig

logger = logging.getLogger(__name__)

Phase = int  # a flyteidl TaskExecution.Phase value

# PyTorchJob condition type (kubeflow training operator, `JobConditionType`) -> Flyte phase.
CONDITION_PHASES: dict[str, Phase] = {
    "Created": TaskExecution.QUEUED,  # accepted by the operator; pods created but not all running yet
    "Suspended": TaskExecution.QUEUED,  # runPolicy.suspend (Kueue, admin hold): waits for admission, no pods
    "Running": TaskExecution.RUNNING,  # replicas running (the operator's own definition, master first)
    "Restarting": TaskExecution.RUNNING,  # replicas being restarted under OnFailure/ExitCode within backoffLimit
    "Succeeded": TaskExecution.SUCCEEDED,  # master (or all workers, master-less) exited 0
    "Failed": TaskExecution.FAILED,  # a replica failed past its restart policy / backoffLimit / deadline
}
TERMINAL_CONDITIONS = ("Failed", "Succeeded")  # checked first: a terminal condition wins over any later one

# Container waiting reasons that never heal by waiting (after the grace period the job fails).
FATAL_WAITING_REASONS = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError"}
)
MESSAGE_LIMIT = 1000  # characters of a container termination message kept in a phase message


@dataclass(frozen=True)
class JobStatus:
    """The outcome of one status evaluation.

    Attributes:
        phase: flyteidl `TaskExecution.Phase`.
        message: why the job is in that phase, for the Flyte UI.
        condition: the condition type that decided (or "" when none did).
    """

    phase: Phase
    message: str
    condition: str = ""


def parse_time(value: Any) -> datetime.datetime | None:
    """Parse a Kubernetes RFC 3339 timestamp ("2025-01-01T00:00:00Z").

    Args:
        value: the timestamp as read from the API (any type).

    Returns:
        An aware datetime (UTC when the string has no zone); None for missing or malformed values.
    """
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.timezone.utc)


def true_conditions(job: dict) -> list[dict]:
    """The job's conditions with status "True".

    Args:
        job: the PyTorchJob as read from the API.

    Returns:
        The true conditions, oldest first (by lastTransitionTime, then list order).
    """
    conditions = (job.get("status") or {}).get("conditions") or []
    indexed = [(i, c) for i, c in enumerate(conditions) if isinstance(c, dict) and c.get("status") == "True"]
    epoch = datetime.datetime.min.replace(tzinfo=datetime.timezone.utc)

    def key(item: tuple[int, dict]) -> tuple[datetime.datetime, int]:
        return parse_time(item[1].get("lastTransitionTime")) or epoch, item[0]

    return [c for _, c in sorted(indexed, key=key)]


def deciding_condition(job: dict) -> dict | None:
    """The condition that decides the phase.

    Args:
        job: the PyTorchJob as read from the API.

    Returns:
        A true terminal condition first, else the latest true one; None if no condition is true.
    """
    conditions = true_conditions(job)
    for ctype in TERMINAL_CONDITIONS:
        for c in reversed(conditions):
            if c.get("type") == ctype:
                return c
    return conditions[-1] if conditions else None


def expected_replicas(job: dict) -> int:
    """Total replicas the spec asks for.

    Args:
        job: the PyTorchJob dict.

    Returns:
        Master + Worker replicas.
    """
    specs = (job.get("spec") or {}).get("pytorchReplicaSpecs") or {}
    return sum(int((s or {}).get("replicas", 1)) for s in specs.values())


def active_replicas(job: dict) -> int:
    """Replicas the operator reports as active.

    Args:
        job: the PyTorchJob as read from the API.

    Returns:
        The sum of `status.replicaStatuses.*.active`.
    """
    statuses = (job.get("status") or {}).get("replicaStatuses") or {}
    return sum(int((s or {}).get("active") or 0) for s in statuses.values())


def needs_pods(job: dict) -> bool:
    """Whether `job_status` needs the job's pods to explain the state (else one GET per poll is enough).

    Args:
        job: the PyTorchJob as read from the API.

    Returns:
        True for Failed, Restarting and Created jobs and for Running jobs with fewer active replicas than
        requested; False for succeeded, suspended, steady running jobs and jobs without conditions.
    """
    condition = deciding_condition(job)
    if condition is None:
        return False
    ctype = condition.get("type")
    if ctype in ("Failed", "Restarting", "Created"):
        return True
    if ctype == "Running":
        return active_replicas(job) < expected_replicas(job)
    return False


def job_status(
    job: dict,
    pods: list[dict] | None,
    config: BackendConfig,
    now: datetime.datetime,
) -> JobStatus:
    """Flyte phase and message of a PyTorchJob.

    Args:
        job: the PyTorchJob as read from the API.
        pods: its pods (label `training.kubeflow.org/job-name`), or None when they were not listed.
        config: supplies `operator_pickup_timeout_s` and `image_pull_grace_s`.
        now: the current time (timezone-aware).

    Returns:
        The phase, a message saying why, and the deciding condition type.
    """
    meta = job.get("metadata") or {}
    name = f"{meta.get('namespace', '?')}/{meta.get('name', '?')}"
    pods = pods or []
    condition = deciding_condition(job)
    if condition is None:
        return _not_picked_up(job, name, config, now)
    ctype = str(condition.get("type"))
    phase = CONDITION_PHASES.get(ctype)
    if phase is None:
        logger.warning("PyTorchJob %s has unknown condition %r; reporting it as running", name, ctype)
        return JobStatus(TaskExecution.RUNNING, f"running (unknown condition {ctype!r}: {_text(condition)})", ctype)
    if ctype == "Failed":
        return JobStatus(phase, _failed_message(condition, pods), ctype)
    if ctype == "Succeeded":
        return JobStatus(phase, _text(condition) or "succeeded", ctype)
    if ctype == "Suspended":
        return JobStatus(phase, f"suspended, waiting for admission: {_text(condition) or 'runPolicy.suspend'}", ctype)
    stuck = _fatal_waiting(pods, job, config, now)
    if stuck is not None:
        return JobStatus(TaskExecution.FAILED, stuck, ctype)
    pending = _pending_reason(pods)
    if ctype == "Restarting":
        restart = _earliest_failure(pods, last_state=True)
        why = f": {restart}" if restart else ""
        return JobStatus(phase, f"restarting replicas{why}", ctype)
    if ctype == "Created":
        return JobStatus(phase, f"waiting for replicas to start: {pending}" if pending else "pods created", ctype)
    counts = f"{active_replicas(job)}/{expected_replicas(job)} replicas active"
    return JobStatus(phase, f"running ({counts}); {pending}" if pending else f"running ({counts})", ctype)


def _text(condition: dict) -> str:
    return str(condition.get("message") or condition.get("reason") or "")


def _not_picked_up(job: dict, name: str, config: BackendConfig, now: datetime.datetime) -> JobStatus:
    created = parse_time((job.get("metadata") or {}).get("creationTimestamp"))
    age = max(0.0, (now - created).total_seconds()) if created else 0.0
    if age >= config.operator_pickup_timeout_s:
        ns = (job.get("metadata") or {}).get("namespace", "?")
        return JobStatus(
            TaskExecution.FAILED,
            f"PyTorchJob {name} has no status {age:.0f}s after creation (operator_pickup_timeout_s="
            f"{config.operator_pickup_timeout_s:g}): the Kubeflow training operator may not be installed, or it does "
            f"not watch namespace {ns!r}. Check `kubectl get deployment -A -l "
            "control-plane=kubeflow-training-operator`.",
        )
    return JobStatus(
        TaskExecution.QUEUED, f"waiting for the Kubeflow training operator to pick up the job ({age:.0f}s)"
    )


def _replica(pod: dict) -> str:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    rtype, index = labels.get("training.kubeflow.org/replica-type"), labels.get("training.kubeflow.org/replica-index")
    if rtype is not None and index is not None:
        return f"{rtype.lower()}-{index}"
    return str((pod.get("metadata") or {}).get("name", "?"))


def _containers(pod: dict) -> list[dict]:
    status = pod.get("status") or {}
    return list(status.get("initContainerStatuses") or []) + list(status.get("containerStatuses") or [])


def _describe_termination(term: dict) -> str:
    reason = term.get("reason") or ""
    code = term.get("exitCode")
    sig = term.get("signal") or (code - 128 if isinstance(code, int) and 128 < code < 160 else None)
    parts = []
    if reason and reason not in ("Error", "Completed"):
        parts.append(str(reason))
    if code is not None:
        parts.append(f"exit code {code}")
    if sig:
        try:
            parts.append(f"signal {signal.Signals(sig).name}")
        except ValueError:
            parts.append(f"signal {sig}")
    text = ", ".join(parts) or "terminated"
    if reason == "OOMKilled":
        text += " (the container exceeded its memory limit; raise per_replica_memory_limit or lower the batch size)"
    message = str(term.get("message") or "").strip()
    if message:
        text += f"; last output: {message[-MESSAGE_LIMIT:]}"
    return text


def _pod_failure(pod: dict, last_state: bool) -> tuple[datetime.datetime | None, str] | None:
    """(when, description) of the pod's failure, or None if it did not fail."""
    for c in _containers(pod):
        state = (c.get("lastState") if last_state else c.get("state")) or {}
        term = state.get("terminated")
        if term and (term.get("exitCode") not in (0, None) or term.get("reason") == "OOMKilled"):
            when = parse_time(term.get("finishedAt")) or parse_time(term.get("startedAt"))
            return when, f"{_replica(pod)} ({c.get('name', '?')}): {_describe_termination(term)}"
    status = pod.get("status") or {}
    if not last_state and status.get("phase") == "Failed":
        why = status.get("reason") or "Failed"
        detail = f": {status['message']}" if status.get("message") else ""
        return parse_time(status.get("startTime")), f"{_replica(pod)}: pod {why}{detail}"
    return None


def _earliest_failure(pods: list[dict], last_state: bool = False) -> str:
    failures = [f for f in (_pod_failure(p, last_state) for p in pods) if f is not None]
    if not failures:
        return ""
    latest = datetime.datetime.max.replace(tzinfo=datetime.timezone.utc)
    failures.sort(key=lambda f: f[0] or latest)
    first = failures[0][1]
    if len(failures) > 1:
        first += f" (first of {len(failures)} failed replicas)"
    return first


def _failed_message(condition: dict, pods: list[dict]) -> str:
    operator = _text(condition) or "failed"
    root = _earliest_failure(pods)
    return f"{operator} Root cause: {root}" if root else operator


def _waiting(pod: dict) -> tuple[str, str] | None:
    for c in _containers(pod):
        waiting = (c.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason") not in (None, "ContainerCreating", "PodInitializing"):
            return str(waiting["reason"]), str(waiting.get("message") or "")
    return None


def _fatal_waiting(pods: list[dict], job: dict, config: BackendConfig, now: datetime.datetime) -> str | None:
    job_created = parse_time((job.get("metadata") or {}).get("creationTimestamp"))
    for pod in pods:
        waiting = _waiting(pod)
        if waiting is None or waiting[0] not in FATAL_WAITING_REASONS:
            continue
        since = parse_time((pod.get("metadata") or {}).get("creationTimestamp")) or job_created
        age = max(0.0, (now - since).total_seconds()) if since else 0.0
        if age >= config.image_pull_grace_s:
            reason, message = waiting
            detail = f": {message}" if message else ""
            return (
                f"replica {_replica(pod)} cannot start: {reason}{detail} (still failing {age:.0f}s after the pod "
                f"was created, image_pull_grace_s={config.image_pull_grace_s:g}); check the image name and tag, "
                "the registry credentials (imagePullSecrets) and referenced Secrets/ConfigMaps"
            )
    return None


def _pending_reason(pods: list[dict]) -> str:
    reasons = []
    for pod in pods:
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                reasons.append(f"{_replica(pod)} {cond.get('reason') or 'unschedulable'}: {cond.get('message', '')}")
                break
        else:
            waiting = _waiting(pod)
            if waiting is not None:
                detail = f": {waiting[1]}" if waiting[1] else ""
                reasons.append(f"{_replica(pod)} {waiting[0]}{detail}")
    return "; ".join(reasons)
