"""Job status -> Flyte phase and a message that says why.

Two layers:

- **Target-neutral rules** (any Kubeflow job, PyTorchJob or TrainJob): `replica_failures` reads pods into failure
  facts; `failed_job_status` decides whether a job that ran and failed is retried (the rule below) and writes the
  message from the task's own error document; `never_started_status` and `start_explanation` fail a job whose
  pods were never created, saying why.
- **The PyTorchJob table** (`CONDITION_PHASES`): the training operator's condition types -> Flyte phases. Only
  conditions whose status is "True" count; a terminal one (Failed, Succeeded) wins, otherwise the latest by
  lastTransitionTime (list order breaks ties). An unknown condition type means "still running" plus a log line,
  never an error.

Retryable or permanent (what Flyte's `retries` apply to: `RETRYABLE_FAILED` is retried, `FAILED` is not):

| what happened | phase |
| --- | --- |
| the system stopped a replica (OOMKilled, a signal, eviction, node loss) before any task error | RETRYABLE_FAILED |
| the task raised `FlyteRecoverableException` (its error document says RECOVERABLE) | RETRYABLE_FAILED |
| the task raised any other exception (error document NON_RECOVERABLE) | FAILED |
| the job failed and no error document can be read (none written, or unreadable) | RETRYABLE_FAILED |
| an image or container-config error outlasted `image_pull_grace_s` | FAILED |
| the pods were never created within `job_start_timeout_s` (invalid pod, quota, webhook) | FAILED |
| the operator never picked the job up within `operator_pickup_timeout_s` | FAILED |

Flyte's Go plugin reports every `Failed` job as retryable; for a job whose replicas exit 0 after writing an error
document it follows the document's kind (propeller reads it). We read the document for a failed job too, so the
user's exception is the message and a non-recoverable one is not retried in vain.

Everything here is pure: (job, pods, config, now, and what the connector read: error documents, events).
`needs_pods`, `needs_error_report` and `needs_events` say when the caller must read more, so a steady running job
costs one API call per poll.
"""

from __future__ import annotations

import datetime
import logging
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Optional

from flyteidl.core.execution_pb2 import TaskExecution

from backend_plugin.config import BackendConfig
from backend_plugin.task_errors import ErrorReport, TaskError
from backend_plugin.timestamps import EPOCH, parse_time

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

# Pod status reasons for a pod the system stopped (not the task): eviction, preemption, node shutdown or loss.
SYSTEM_POD_REASONS = frozenset({"Evicted", "Preempted", "NodeLost", "Shutdown", "Terminated", "NodeShutdown"})
# Kubelet / scheduler event reasons that explain a job whose pods were never created or never started.
_START_EVENT_REASONS = ("FailedCreatePod", "FailedCreateService", "FailedCreate", "FailedScheduling")
_EVENTS_SHOWN = 3
# Seconds of clock slack when comparing a replica's termination time (whole seconds) with an error's timestamp.
_CLOCK_SLACK_S = 1.0


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


def true_conditions(job: dict) -> list[dict]:
    """The job's conditions with status "True", oldest first (by lastTransitionTime, then list order).

    Args:
        job: the PyTorchJob as read from the API.

    Returns:
        The true conditions, sorted.
    """
    conditions = (job.get("status") or {}).get("conditions") or []
    indexed = [(i, c) for i, c in enumerate(conditions) if isinstance(c, dict) and c.get("status") == "True"]

    def key(item: tuple[int, dict]) -> tuple[datetime.datetime, int]:
        return parse_time(item[1].get("lastTransitionTime")) or EPOCH, item[0]

    return [c for _, c in sorted(indexed, key=key)]


def deciding_condition(job: dict, terminal: Sequence[str] = TERMINAL_CONDITIONS) -> dict | None:
    """The condition that decides the phase: a true terminal one first, else the latest true one.

    Args:
        job: the PyTorchJob (or, with its `terminal` types, the TrainJob) as read from the API.
        terminal: the terminal condition types, in the order they win.

    Returns:
        The deciding condition, or None when no condition is true.
    """
    conditions = true_conditions(job)
    for ctype in terminal:
        for c in reversed(conditions):
            if c.get("type") == ctype:
                return c
    return conditions[-1] if conditions else None


def expected_replicas(job: dict) -> int:
    """Total replicas the spec asks for (Master + Worker).

    Args:
        job: the PyTorchJob.

    Returns:
        The sum of `replicas` over the replica specs (1 where a spec omits it).
    """
    specs = (job.get("spec") or {}).get("pytorchReplicaSpecs") or {}
    return sum(int((s or {}).get("replicas", 1)) for s in specs.values())


def active_replicas(job: dict) -> int:
    """Replicas the operator reports as active in `status.replicaStatuses`.

    Args:
        job: the PyTorchJob as read from the API.

    Returns:
        The sum of `active` over the replica statuses.
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


def needs_error_report(job: dict) -> bool:
    """Whether `job_status` needs the task's error documents (the job failed: they decide retryable or not).

    Args:
        job: the PyTorchJob as read from the API.

    Returns:
        True when the deciding condition is Failed.
    """
    condition = deciding_condition(job)
    return condition is not None and condition.get("type") == "Failed"


def needs_events(job: dict, config: BackendConfig, now: datetime.datetime) -> bool:
    """Whether the job has not started past `job_start_timeout_s`, so `job_status` needs its events to say why.

    Args:
        job: the PyTorchJob as read from the API.
        config: supplies `job_start_timeout_s`.
        now: the current time (timezone-aware).

    Returns:
        True for a job whose deciding condition is Created, without `status.startTime`, created at least
        `job_start_timeout_s` ago (a suspended job never is: it waits for admission on purpose).
    """
    if config.job_start_timeout_s is None:
        return False
    condition = deciding_condition(job)
    if condition is None or condition.get("type") != "Created":
        return False
    if (job.get("status") or {}).get("startTime"):
        return False
    return _age(job, now) >= config.job_start_timeout_s


def job_status(
    job: dict,
    pods: Optional[list[dict]],
    config: BackendConfig,
    now: datetime.datetime,
    errors: Optional[ErrorReport] = None,
    events: Optional[list[dict]] = None,
    events_problem: str = "",
) -> JobStatus:
    """Flyte phase and message of a PyTorchJob.

    Args:
        job: the PyTorchJob as read from the API.
        pods: its pods (label `training.kubeflow.org/job-name`), or None when they were not listed.
        config: supplies `operator_pickup_timeout_s`, `image_pull_grace_s` and `job_start_timeout_s`.
        now: the current time (timezone-aware).
        errors: the task's error documents when the job failed (`needs_error_report`); None when not read.
        events: the job's events when it has not started in time (`needs_events`); None when not read.
        events_problem: why the events could not be read (e.g. RBAC), "" when they could or were not needed.

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
        headline = _text(condition) or f"PyTorchJob {name} failed"
        return failed_job_status(headline, replica_failures(pods), errors, condition=ctype)
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
        if needs_events(job, config, now):
            explanation = start_explanation(events, pods, events_problem)
            gang = bool(((job.get("spec") or {}).get("runPolicy") or {}).get("schedulingPolicy"))
            if gang and not _has_failure_evidence(events, pods):
                return JobStatus(
                    phase,
                    f"waiting for the gang scheduler to admit the job's PodGroup ({_age(job, now):.0f}s, no pods "
                    f"yet; {explanation})",
                    ctype,
                )
            return never_started_status(
                f"PyTorchJob {name}", _age(job, now), float(config.job_start_timeout_s or 0), explanation, ctype
            )
        return JobStatus(phase, f"waiting for replicas to start: {pending}" if pending else "pods created", ctype)
    counts = f"{active_replicas(job)}/{expected_replicas(job)} replicas active"
    return JobStatus(phase, f"running ({counts}); {pending}" if pending else f"running ({counts})", ctype)


# --------------------------------------------------------------------------------------------------------------
# Target-neutral rules: a job that ran and failed, a job that never started


@dataclass(frozen=True)
class ReplicaFailure:
    """One replica pod's failure, as the pod status tells it.

    Attributes:
        replica: the replica's name (`worker-1`), or the pod name when the pod has no replica labels.
        pod: the pod's name.
        when: when its container finished (or the pod failed), None when unknown.
        description: `worker-1 (pytorch): OOMKilled, exit code 137, ...` for messages.
        system: the system stopped it (OOMKilled, killed by a signal, evicted, preempted, node lost), as opposed to
            the task's own error (a non-zero exit after it raised).
    """

    replica: str
    pod: str
    when: Optional[datetime.datetime]
    description: str
    system: bool


def replica_failures(pods: Sequence[Mapping], last_state: bool = False) -> list[ReplicaFailure]:
    """The failed replicas among `pods`, earliest first (those without a time last).

    Args:
        pods: pod dicts as read from the API (any target: PyTorchJob or TrainJob replicas).
        last_state: read the containers' previous termination (a restarted container) instead of the current one.

    Returns:
        One `ReplicaFailure` per failed pod, system kills first within the same second; pods being deleted do not
        count as killed by the system.
    """
    failures = [f for f in (_pod_failure(p, last_state) for p in pods) if f is not None]
    latest = datetime.datetime.max.replace(tzinfo=datetime.timezone.utc)
    # Termination times have whole seconds: within one, a replica the system killed goes first (its peers' errors
    # are the consequence of losing it).
    failures.sort(key=lambda f: (f.when or latest, not f.system))
    return failures


def failed_job_status(
    headline: str,
    failures: Sequence[ReplicaFailure],
    errors: Optional[ErrorReport],
    condition: str = "Failed",
    names: Optional[Mapping[str, str]] = None,
) -> JobStatus:
    """Phase and message of a job that ran and failed: retryable unless the task itself said it is not.

    The rule (see the module docstring): a replica the system killed before any task error, a recoverable task
    error, and a failure without a readable error document are RETRYABLE_FAILED; a non-recoverable task error is
    FAILED. The message leads with the task's own exception when there is one, then the job's headline and the
    earliest failing replica, then the traceback's tail.

    Args:
        headline: the job's own failure text (the operator's Failed condition message).
        failures: `replica_failures` of the job's pods (empty when the pods were not listed or are gone).
        errors: the error documents read from the output prefix; None when they were not read.
        condition: the deciding condition type, for `JobStatus.condition`.
        names: pod name -> replica name, to name the error document's worker (from `failures` when None).

    Returns:
        The status.
    """
    error = errors.earliest if errors is not None else None
    killed = _killed_before(failures, error)
    if error is not None and killed is None:
        # the replica that wrote the root-cause error leads (termination times have whole seconds)
        failures = sorted(failures, key=lambda f: f.pod != error.worker)
    replica_line = _replica_line(failures)
    job_line = f"{headline} Root cause: {replica_line}" if replica_line else headline
    notes = []
    if errors is not None and errors.problem:
        notes.append(f"the task's error document could not be read: {errors.problem}")
    if errors is not None and errors.skipped:
        notes.append(f"{errors.skipped} more error documents were not read")
    note = f" ({'; '.join(notes)})" if notes else ""
    if error is None or killed is not None:
        if killed is not None and error is not None:
            why = (
                f"{killed.replica} was stopped by the system before any task error, a retryable failure; the other "
                f"replicas then failed with: {error.summary}"
            )
        elif errors is None:
            why = "a retryable failure; the task's error document was not read"
        elif errors.problem:
            why = "a retryable failure: the task's own error could not be read"
        else:
            why = "no error document: the replicas stopped before the task could report one; a retryable failure"
        return JobStatus(TaskExecution.RETRYABLE_FAILED, f"{job_line} ({why}){note}", condition)
    who = _worker_name(error, failures, names)
    if error.recoverable:
        verdict = "a recoverable error: Flyte retries the task while it has retries left"
        phase = TaskExecution.RETRYABLE_FAILED
    else:
        verdict = (
            f"a non-recoverable {error.origin.lower()} error: Flyte does not retry it (raise flytekit's "
            "FlyteRecoverableException for errors worth retrying)"
        )
        phase = TaskExecution.FAILED
    message = f"{who} failed: {error.summary} ({verdict}). {job_line}{note}"
    trace = error.trace_tail
    if trace:
        message += f"\n--- traceback ({who}, {error.source}) ---\n{trace}"
    return JobStatus(phase, message, condition)


def never_started_status(what: str, age_s: float, timeout_s: float, explanation: str, condition: str = "") -> JobStatus:
    """FAILED (not retried: a new attempt would hit the same wall) for a job whose pods were never created.

    Args:
        what: the job, e.g. `PyTorchJob ns/name`.
        age_s: seconds since it was created.
        timeout_s: the configured limit (`job_start_timeout_s`).
        explanation: why, from `start_explanation`.
        condition: the deciding condition type.

    Returns:
        The status.
    """
    return JobStatus(
        TaskExecution.FAILED,
        f"{what} has not started {age_s:.0f}s after creation (job_start_timeout_s={timeout_s:g}): the training "
        f"operator could not create its pods. {explanation}",
        condition,
    )


def start_explanation(events: Optional[Sequence[Mapping]], pods: Sequence[Mapping], events_problem: str = "") -> str:
    """Why a job's pods were not created or did not start, from its events and pods.

    Args:
        events: core/v1 Events whose involvedObject is the job (None: not read).
        pods: the job's pods.
        events_problem: why the events could not be read (an RBAC denial, ...), "" when they could.

    Returns:
        A sentence or two for a phase message.
    """
    parts = []
    warnings = _warning_events(events or ())
    if warnings:
        shown = "; ".join(f"{e.get('reason', '?')}: {_event_message(e)}" for e in warnings[:_EVENTS_SHOWN])
        more = f" (and {len(warnings) - _EVENTS_SHOWN} more)" if len(warnings) > _EVENTS_SHOWN else ""
        parts.append(f"Events: {shown}{more}")
    pending = _pending_reason(list(pods))
    if pending:
        parts.append(f"Pods: {pending}")
    if events_problem:
        parts.append(
            f"The job's events could not be read ({events_problem}); `kubectl describe` the job to see why its pods "
            "were not created"
        )
    elif events is not None and not warnings:
        parts.append(
            "No warning events were recorded for the job (events expire after an hour); check the operator's log and "
            "the namespace's ResourceQuotas and admission webhooks"
        )
    return ". ".join(parts) + "." if parts else "No events were read."


# --------------------------------------------------------------------------------------------------------------
# Helpers


def _text(condition: dict) -> str:
    return str(condition.get("message") or condition.get("reason") or "")


def _age(job: dict, now: datetime.datetime) -> float:
    created = parse_time((job.get("metadata") or {}).get("creationTimestamp"))
    return max(0.0, (now - created).total_seconds()) if created else 0.0


def _not_picked_up(job: dict, name: str, config: BackendConfig, now: datetime.datetime) -> JobStatus:
    age = _age(job, now)
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


def _replica(pod: Mapping) -> str:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    rtype, index = labels.get("training.kubeflow.org/replica-type"), labels.get("training.kubeflow.org/replica-index")
    if rtype is not None and index is not None:
        return f"{rtype.lower()}-{index}"
    return str((pod.get("metadata") or {}).get("name", "?"))


def _containers(pod: Mapping) -> list[dict]:
    status = pod.get("status") or {}
    return list(status.get("initContainerStatuses") or []) + list(status.get("containerStatuses") or [])


def _signal_of(term: Mapping) -> Optional[int]:
    code = term.get("exitCode")
    return term.get("signal") or (code - 128 if isinstance(code, int) and 128 < code < 160 else None)


def _describe_termination(term: dict) -> str:
    reason = term.get("reason") or ""
    code = term.get("exitCode")
    sig = _signal_of(term)
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


def _pod_failure(pod: Mapping, last_state: bool) -> Optional[ReplicaFailure]:
    """The pod's failure, or None if it did not fail."""
    meta = pod.get("metadata") or {}
    pod_name = str(meta.get("name", "?"))
    deleting = bool(meta.get("deletionTimestamp"))
    for c in _containers(pod):
        state = (c.get("lastState") if last_state else c.get("state")) or {}
        term = state.get("terminated")
        if term and (term.get("exitCode") not in (0, None) or term.get("reason") == "OOMKilled"):
            when = parse_time(term.get("finishedAt")) or parse_time(term.get("startedAt"))
            system = term.get("reason") == "OOMKilled" or (bool(_signal_of(term)) and not deleting)
            description = f"{_replica(pod)} ({c.get('name', '?')}): {_describe_termination(term)}"
            return ReplicaFailure(_replica(pod), pod_name, when, description, system)
    status = pod.get("status") or {}
    if not last_state and status.get("phase") == "Failed":
        why = status.get("reason") or "Failed"
        detail = f": {status['message']}" if status.get("message") else ""
        system = why in SYSTEM_POD_REASONS
        when = parse_time(status.get("startTime"))
        return ReplicaFailure(_replica(pod), pod_name, when, f"{_replica(pod)}: pod {why}{detail}", system)
    return None


def _replica_line(failures: Sequence[ReplicaFailure]) -> str:
    if not failures:
        return ""
    first = failures[0].description
    if len(failures) > 1:
        first += f" (first of {len(failures)} failed replicas)"
    return first


def _earliest_failure(pods: list[dict], last_state: bool = False) -> str:
    return _replica_line(replica_failures(pods, last_state))


def _killed_before(failures: Sequence[ReplicaFailure], error: Optional[TaskError]) -> Optional[ReplicaFailure]:
    """The earliest replica the system stopped no later than `error` was raised (or at all, without an error).

    A replica killed by the OOM killer or evicted writes no error document, and its peers then fail with lost-peer
    errors of their own (documents that say NON_RECOVERABLE): those are consequences, the kill is the cause.
    """
    for failure in failures:
        if not failure.system:
            continue
        if error is None or error.timestamp is None or failure.when is None:
            return failure
        if failure.pod == error.worker:
            continue
        if (failure.when - error.timestamp).total_seconds() <= _CLOCK_SLACK_S:
            return failure
    return None


def _worker_name(
    error: TaskError, failures: Sequence[ReplicaFailure], names: Optional[Mapping[str, str]] = None
) -> str:
    if not error.worker:
        return failures[0].replica if len(failures) == 1 else "the task"
    known = dict(names or {}) or {f.pod: f.replica for f in failures}
    return known.get(error.worker, error.worker)


def _warning_events(events: Sequence[Mapping]) -> list[Mapping]:
    """Warning events, most recent first, one per (reason, message)."""
    seen = set()
    out = []

    def when(e: Mapping) -> datetime.datetime:
        stamp = e.get("lastTimestamp") or e.get("eventTime") or (e.get("metadata") or {}).get("creationTimestamp")
        return parse_time(stamp) or EPOCH

    for event in sorted(events, key=when, reverse=True):
        if not isinstance(event, Mapping) or event.get("type") != "Warning":
            continue
        key = (event.get("reason"), _event_message(event))
        if key not in seen:
            seen.add(key)
            out.append(event)
    return out


def _event_message(event: Mapping) -> str:
    text = " ".join(str(event.get("message") or event.get("note") or "").split())
    return text[:MESSAGE_LIMIT]


def _has_failure_evidence(events: Optional[Sequence[Mapping]], pods: Sequence[Mapping]) -> bool:
    warnings = _warning_events(events or ())
    return any(str(e.get("reason", "")).startswith("FailedCreate") for e in warnings) or bool(replica_failures(pods))


def _waiting(pod: Mapping) -> Optional[tuple[str, str]]:
    for c in _containers(pod):
        waiting = (c.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason") not in (None, "ContainerCreating", "PodInitializing"):
            return str(waiting["reason"]), str(waiting.get("message") or "")
    return None


def _fatal_waiting(pods: list[dict], job: dict, config: BackendConfig, now: datetime.datetime) -> Optional[str]:
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


def _pending_reason(pods: list) -> str:
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
