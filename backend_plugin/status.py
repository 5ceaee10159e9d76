"""What every job kind's status reader shares: job status -> Flyte phase, the pieces of it that do not depend on
the kind, and the rule for a job that failed.

Each kind reads its own conditions with its own table (`backend_plugin.targets.<kind>.status`) and calls these
public pieces: `deciding_condition` (a true terminal condition wins, else the latest true one), `replica_failures`
(pods into failure facts), `failed_job_status` (retryable or permanent, and the message, from the task's own error
document), `never_started_status` and `start_explanation` (a job whose pods were never created), `fatal_waiting`
and `pending_reason` (pods stuck or waiting), `not_picked_up` (a job its controller never answered). Pods are named
in messages by the kind's `ReplicaNamer` (`worker-1`, `node-0`); without one, by the pod's name.

Retryable or permanent (what Flyte's `retries` apply to: `RETRYABLE_FAILED` is retried, `FAILED` is not):

| what happened | phase |
| --- | --- |
| the system stopped a replica (OOMKilled, a signal, eviction, node loss) before any task error | RETRYABLE_FAILED |
| the task raised `FlyteRecoverableException` (its error document says RECOVERABLE) | RETRYABLE_FAILED |
| the task raised any other exception (error document NON_RECOVERABLE) | FAILED |
| the job failed and no error document can be read (none written, or unreadable) | RETRYABLE_FAILED |
| an image or container-config error outlasted `image_pull_grace_s` | FAILED |
| the pods were never created within `job_start_timeout_s` (invalid pod, quota, webhook) | FAILED |
| the job's controller never picked the job up within its pickup timeout | FAILED |

Flyte's Go plugin reports every `Failed` job as retryable; for a job whose replicas exit 0 after writing an error
document it follows the document's kind (propeller reads it). We read the document for a failed job too, so the
user's exception is the message and a non-recoverable one is not retried in vain.

Everything here is pure: (job, pods, config, now, and what the connector read: error documents, events).
"""

from __future__ import annotations

import datetime
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from flyteidl.core.execution_pb2 import TaskExecution

from backend_plugin.config import BackendConfig
from backend_plugin.kube.timestamps import EPOCH, parse_time
from backend_plugin.task_errors import ErrorReport, TaskError
from pytorch_contract.preemption import ERROR_PREFIX, PREEMPTED_EXIT_CODE

__all__ = [
    "Phase",
    "JobStatus",
    "ReplicaNamer",
    "ReplicaFailure",
    "pod_name",
    "true_conditions",
    "deciding_condition",
    "deciding_type",
    "condition_text",
    "job_age",
    "failure_phase",
    "replica_failures",
    "earliest_failure",
    "disruption_reason",
    "stopped_for_preemption",
    "disruption_text",
    "preemption_cause",
    "fresh_errors",
    "DISRUPTION_CONDITION",
    "DISRUPTION_REASONS",
    "failed_job_status",
    "never_started_status",
    "start_explanation",
    "warning_events",
    "fatal_waiting",
    "pending_reason",
    "accelerator_keys",
    "not_picked_up",
    "FATAL_WAITING_REASONS",
    "SYSTEM_POD_REASONS",
    "MESSAGE_LIMIT",
]

Phase = int
"""A flyteidl `TaskExecution.Phase` value."""

ReplicaNamer = Callable[[Mapping[str, Any]], str]
"""A kind's name of one of its pods in messages (`worker-1`, `node-0`), from the pod's labels."""

# Container waiting reasons that never heal by waiting (after the grace period the job fails).
FATAL_WAITING_REASONS = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError"}
)
MESSAGE_LIMIT = 1000  # characters of a container termination message kept in a phase message

# Pod status reasons for a pod the system stopped (not the task): eviction, preemption, node shutdown or loss.
SYSTEM_POD_REASONS = frozenset({"Evicted", "Preempted", "NodeLost", "Shutdown", "Terminated", "NodeShutdown"})
DISRUPTION_CONDITION = "DisruptionTarget"
"""The pod condition Kubernetes (1.26+) sets on a pod it is about to stop for the cluster's sake, before the SIGTERM:
its `reason` says who. A `podFailurePolicy` can match it (`onPodConditions`)."""

DISRUPTION_REASONS = {
    "PreemptionByScheduler": "preempted by the scheduler for a pod of higher priority",
    "EvictionByEvictionAPI": "evicted through the Eviction API (a node drain, the cluster autoscaler, a descheduler)",
    "DeletionByTaintManager": "deleted by the taint manager (its node got a NoExecute taint: a node going away)",
    "TerminationByKubelet": "ended by the kubelet (a node shutdown, or node pressure)",
    "DeletionByPodGC": "deleted by the pod garbage collector (its node is gone)",
}
"""The `DisruptionTarget` reasons Kubernetes writes (`k8s.io/api/core/v1`, `PodReason...`), explained for messages;
any other reason is said as given."""

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


def pod_name(pod: Mapping[str, Any]) -> str:
    """The default `ReplicaNamer`: the pod's own name.

    Args:
        pod: a pod dict as read from the API.

    Returns:
        `metadata.name`, or "?".
    """
    return str((pod.get("metadata") or {}).get("name", "?"))


def true_conditions(job: Mapping[str, Any]) -> list[dict]:
    """The job's conditions with status "True", oldest first (by lastTransitionTime, then list order).

    Args:
        job: the job as read from the API.

    Returns:
        The true conditions, sorted.
    """
    conditions = (job.get("status") or {}).get("conditions") or []
    if not isinstance(conditions, list):
        return []
    indexed = [(i, c) for i, c in enumerate(conditions) if isinstance(c, dict) and c.get("status") == "True"]

    def key(item: tuple[int, dict]) -> tuple[datetime.datetime, int]:
        return parse_time(item[1].get("lastTransitionTime")) or EPOCH, item[0]

    return [c for _, c in sorted(indexed, key=key)]


def deciding_condition(job: Mapping[str, Any], terminal: Sequence[str]) -> dict | None:
    """The condition that decides the phase: a true terminal one first, else the latest true one.

    Args:
        job: the job as read from the API.
        terminal: the kind's terminal condition types, in the order they win.

    Returns:
        The deciding condition, or None when no condition is true.
    """
    conditions = true_conditions(job)
    for ctype in terminal:
        for c in reversed(conditions):
            if c.get("type") == ctype:
                return c
    return conditions[-1] if conditions else None


def deciding_type(job: Mapping[str, Any], terminal: Sequence[str]) -> Optional[str]:
    """The type of `deciding_condition`, or None when no condition is true.

    Args:
        job: the job as read from the API.
        terminal: the kind's terminal condition types, in the order they win.

    Returns:
        The condition type.
    """
    condition = deciding_condition(job, terminal)
    return None if condition is None else str(condition.get("type"))


def condition_text(condition: Mapping[str, Any]) -> str:
    """A condition's message, else its reason ("" when it has neither).

    Args:
        condition: one condition.

    Returns:
        The text.
    """
    return str(condition.get("message") or condition.get("reason") or "")


def job_age(job: Mapping[str, Any], now: datetime.datetime) -> float:
    """Seconds since the job was created (0 when its creation time is unknown).

    Args:
        job: the job as read from the API.
        now: the current time (timezone-aware).

    Returns:
        The age, never negative.
    """
    created = parse_time((job.get("metadata") or {}).get("creationTimestamp"))
    return max(0.0, (now - created).total_seconds()) if created else 0.0


def failure_phase(ran: bool) -> Phase:
    """The rule for failed jobs (the contract's, the same for every kind): retryable when it ran, permanent when it
    cannot.

    A job that ran and failed (user code, OOMKilled, a lost node, a deadline) may succeed on another attempt, so it
    is RETRYABLE_FAILED and Flyte's retry budget decides. A job that can never run (invalid spec, an image that does
    not exist past the grace period, a runtime that cannot be rendered) would fail the same way every time, so it is
    a permanent FAILED and no retry is spent on it.

    Args:
        ran: whether the job's pods ran.

    Returns:
        `TaskExecution.RETRYABLE_FAILED` or `TaskExecution.FAILED`.
    """
    return TaskExecution.RETRYABLE_FAILED if ran else TaskExecution.FAILED


def not_picked_up(
    job: Mapping[str, Any], now: datetime.datetime, timeout_s: float, waiting: str, gave_up: Callable[[float], str]
) -> JobStatus:
    """A job its controller has not answered yet (no status): QUEUED, then a permanent FAILED past `timeout_s`.

    Args:
        job: the job as read from the API.
        now: the current time.
        timeout_s: the kind's pickup timeout.
        waiting: the QUEUED message (the age is appended).
        gave_up: the FAILED message for an age in seconds.

    Returns:
        The status.
    """
    age = job_age(job, now)
    if age >= timeout_s:
        return JobStatus(failure_phase(ran=False), gave_up(age))
    return JobStatus(TaskExecution.QUEUED, f"{waiting} ({age:.0f}s)")


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
    preemption: str = ""
    """`"disrupted"`: the pod carries `DisruptionTarget`; `"stopped"`: its ranks stopped at a preemption's agreed
    step (exit code `PREEMPTED_EXIT_CODE`); "" otherwise."""


def replica_failures(
    pods: Sequence[Mapping], namer: ReplicaNamer = pod_name, last_state: bool = False
) -> list[ReplicaFailure]:
    """The failed replicas among `pods`, earliest first (those without a time last).

    Args:
        pods: pod dicts as read from the API (any kind's replicas; items that are not dicts are passed over).
        namer: the kind's name of a pod in messages.
        last_state: read the containers' previous termination (a restarted container) instead of the current one.

    Returns:
        One `ReplicaFailure` per failed pod, system kills first within the same second; pods being deleted do not
        count as killed by the system.
    """
    failures = [
        f for f in (_pod_failure(p, namer, last_state) for p in pods if isinstance(p, Mapping)) if f is not None
    ]
    latest = datetime.datetime.max.replace(tzinfo=datetime.timezone.utc)
    # Termination times have whole seconds: within one, a replica the system killed goes first (its peers' errors
    # are the consequence of losing it).
    failures.sort(key=lambda f: (f.when or latest, not f.system))
    # A preemption stops every pod at the same step: the disrupted pod is the cause of its peers' agreed stop, even
    # when they exited before it did.
    first = next((i for i, f in enumerate(failures) if f.preemption == "disrupted"), None)
    if first is not None and all(f.preemption == "stopped" for f in failures[:first]):
        failures.insert(0, failures.pop(first))
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


def never_started_status(
    what: str,
    age_s: float,
    timeout_s: float,
    explanation: str,
    condition: str = "",
    setting: str = "job_start_timeout_s",
) -> JobStatus:
    """FAILED (not retried: a new attempt would hit the same wall) for a job whose pods were never created.

    Args:
        what: the job, as its kind names it (`<kind> <namespace>/<name>`).
        age_s: seconds since it was created.
        timeout_s: the configured limit.
        explanation: why, from `start_explanation`.
        condition: the deciding condition type.
        setting: the limit's key (`job_start_timeout_s`; `operator_pickup_timeout_s` for a job with no condition).

    Returns:
        The status.
    """
    return JobStatus(
        TaskExecution.FAILED,
        f"{what} has not started {age_s:.0f}s after creation ({setting}={timeout_s:g}): the training "
        f"operator could not create its pods. {explanation}",
        condition,
    )


def start_explanation(
    events: Optional[Sequence[Mapping]],
    pods: Sequence[Mapping],
    events_problem: str = "",
    namer: ReplicaNamer = pod_name,
) -> str:
    """Why a job's pods were not created or did not start, from its events and pods.

    Args:
        events: core/v1 Events whose involvedObject is the job (None: not read).
        pods: the job's pods.
        events_problem: why the events could not be read (an RBAC denial, ...), "" when they could.
        namer: the kind's name of a pod in messages.

    Returns:
        A sentence or two for a phase message.
    """
    parts = []
    warnings = warning_events(events or ())
    if warnings:
        shown = "; ".join(f"{e.get('reason', '?')}: {_event_message(e)}" for e in warnings[:_EVENTS_SHOWN])
        more = f" (and {len(warnings) - _EVENTS_SHOWN} more)" if len(warnings) > _EVENTS_SHOWN else ""
        parts.append(f"Events: {shown}{more}")
    pending = pending_reason(pods, namer)
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


def disruption_reason(pod: Mapping[str, Any]) -> Optional[str]:
    """The reason of the pod's true `DisruptionTarget` condition.

    Args:
        pod: a pod dict as read from the API.

    Returns:
        The reason ("" when the condition has none), or None when the pod carries no true `DisruptionTarget`.
    """
    for c in (pod.get("status") or {}).get("conditions") or ():
        if isinstance(c, Mapping) and c.get("type") == DISRUPTION_CONDITION and c.get("status") == "True":
            return str(c.get("reason") or "")
    return None


def _disruption_words(reason: str) -> str:
    explained = DISRUPTION_REASONS.get(reason)
    if not reason:
        return f"{DISRUPTION_CONDITION}, no reason given"
    return f"{DISRUPTION_CONDITION} {reason}: {explained}" if explained else f"{DISRUPTION_CONDITION} {reason}"


def stopped_for_preemption(pod: Mapping[str, Any], last_state: bool = False) -> bool:
    """Whether a container of the pod exited `PREEMPTED_EXIT_CODE`: its ranks stopped at a preemption's agreed step.

    Args:
        pod: a pod dict as read from the API.
        last_state: read the containers' previous termination (a container restarted in place).

    Returns:
        True when one did.
    """
    for c in _containers(pod):
        term = ((c.get("lastState") if last_state else c.get("state")) or {}).get("terminated") or {}
        if term.get("exitCode") == PREEMPTED_EXIT_CODE:
            return True
    return False


def disruption_text(pods: Sequence[Mapping], namer: ReplicaNamer = pod_name) -> str:
    """What a preemption did to the job's pods, for a RUNNING or RETRYABLE message ("" when it did nothing seen).

    Reads only the pods given (no request of its own): a pod with a true `DisruptionTarget` condition is named with
    its reason, and pods whose container exited `PREEMPTED_EXIT_CODE` (now, or before an in-place restart) as stopped
    at the agreed step; neither is the task's failure.

    Args:
        pods: the job's pods (items that are not dicts are passed over).
        namer: the kind's name of a pod in messages.

    Returns:
        e.g. `worker-1 is disrupted (DisruptionTarget PreemptionByScheduler: preempted by the scheduler for a pod of
        higher priority), not the task's failure; master-0, worker-0 stopped at the agreed step for a preemption
        (exit code 200)`.
    """
    disrupted, stopped = [], []
    for pod in pods:
        if not isinstance(pod, Mapping):
            continue
        reason = disruption_reason(pod)
        if reason is not None:
            disrupted.append(f"{namer(pod)} is disrupted ({_disruption_words(reason)})")
        elif stopped_for_preemption(pod) or stopped_for_preemption(pod, last_state=True):
            stopped.append(namer(pod))
    parts = []
    if disrupted:
        parts.append(f"{', '.join(sorted(disrupted))}, not the task's failure")
    if stopped:
        parts.append(f"{', '.join(sorted(stopped))} stopped at the agreed step for a preemption (exit code "
                     f"{PREEMPTED_EXIT_CODE}), not a failure")  # fmt: skip
    return "; ".join(parts)


def fresh_errors(errors: Optional[ErrorReport], since: Optional[datetime.datetime]) -> Optional[ErrorReport]:
    """The error documents of one run of the job: those raised at or after `since` (its creation; a document without
    a timestamp counts), so that what an earlier run of the same attempt left under the output prefix (a run the
    connector created again after a preemption) is not taken for this run's error.

    Args:
        errors: the documents read, or None when they were not read.
        since: when this run's job was created; None keeps every document.

    Returns:
        The report with only this run's documents (the same report when nothing is older).
    """
    if errors is None or since is None:
        return errors
    kept = tuple(e for e in errors.errors if e.timestamp is None
                 or (e.timestamp - since).total_seconds() >= -_CLOCK_SLACK_S)  # fmt: skip
    if len(kept) == len(errors.errors):
        return errors
    return ErrorReport(kept, errors.problem, errors.skipped)


def _oom_or_kill(pod: Mapping[str, Any]) -> Optional[str]:
    """Why a failed pod rules a preemption out: a container the OOM killer ended (reason `OOMKilled`), or one killed
    by SIGKILL (exit 137) on a pod that is neither disrupted nor being deleted, which is how a container killed for its
    memory ends where the runtime writes no reason (with cgroup v2 the whole container is killed). None otherwise."""
    disrupted = disruption_reason(pod) is not None
    deleting = bool((pod.get("metadata") or {}).get("deletionTimestamp"))
    for c in _containers(pod):
        for state in (c.get("state"), c.get("lastState")):
            term = (state or {}).get("terminated") or {}
            if term.get("reason") == "OOMKilled":
                return f"{pod_name(pod)} ({c.get('name', '?')}) was OOMKilled"
            if term.get("exitCode") == 137 and not disrupted and not deleting:
                return f"{pod_name(pod)} ({c.get('name', '?')}) was killed (exit code 137) without a disruption"
    return None


def preemption_cause(
    pods: Sequence[Mapping[str, Any]],
    errors: Optional[ErrorReport],
    preempted_by_record: bool,
    namer: ReplicaNamer = pod_name,
) -> Optional[str]:
    """Why a failed job failed, when a preemption is the whole of it: the job may then be created again without
    charging the task (the connector's recovery); None when anything else had a part in it.

    A preemption, as `pytorch_contract.preemption` defines what it leaves: a pod with a true `DisruptionTarget`
    condition (Kubernetes' eviction, scheduler preemption, taint manager, kubelet, pod GC), a container that exited
    `PREEMPTED_EXIT_CODE` (its ranks stopped at the agreed step after a SIGTERM, the deleted pod's and its peers'),
    an error document of this run that says so, or this run's preemption record (`preempted_by_record`). Never a
    preemption: a container the OOM killer ended, a SIGKILL (137) of a pod nobody disrupted or deleted (an OOM kill
    where the reason is not written), and a task error raised before the system stopped a replica (the user's own
    failure; `failed_job_status`'s rule). The earliest failure (`replica_failures`' order) must be the preemption.

    Args:
        pods: the failed job's pods.
        errors: this run's error documents (`fresh_errors`), None when not read.
        preempted_by_record: whether this run's preemption record was found.
        namer: the kind's name of a pod in messages.

    Returns:
        e.g. `worker-1 (DisruptionTarget EvictionByEvictionAPI: evicted through the Eviction API ...)`, or
        `master-0, worker-0, worker-1 stopped at the agreed step (exit code 200)`; None when it was not (only) a
        preemption.
    """
    pods = [p for p in pods if isinstance(p, Mapping)]
    if any(_oom_or_kill(p) for p in pods):
        return None
    failures = replica_failures(pods, namer)
    error = errors.earliest if errors is not None else None
    preempted_doc = error is not None and error.recoverable and ERROR_PREFIX in error.message
    if error is not None and not preempted_doc and _killed_before(failures, error) is None:
        return None  # the task's own error came first
    if failures and not failures[0].preemption:
        return None  # the earliest failure is not a preemption's
    disrupted = [(namer(p), disruption_reason(p)) for p in pods if disruption_reason(p) is not None]
    if disrupted:
        return ", ".join(f"{name} ({_disruption_words(reason or '')})" for name, reason in sorted(disrupted))
    stopped = sorted(namer(p) for p in pods if stopped_for_preemption(p))
    if stopped:
        return f"{', '.join(stopped)} stopped at the agreed step (exit code {PREEMPTED_EXIT_CODE})"
    if failures:
        return None
    if preempted_doc or preempted_by_record:
        return "a rank got SIGTERM and every rank stopped at the agreed step (the task's preemption record)"
    return None


def _pod_failure(pod: Mapping, namer: ReplicaNamer, last_state: bool) -> Optional[ReplicaFailure]:
    """The pod's failure, or None if it did not fail. A disrupted pod (`DisruptionTarget`) and one that stopped at a
    preemption's agreed step (exit code `PREEMPTED_EXIT_CODE`) are the system's doing, and said so."""
    meta = pod.get("metadata") or {}
    name = str(meta.get("name", "?"))
    replica = namer(pod)
    deleting = bool(meta.get("deletionTimestamp"))
    reason = None if last_state else disruption_reason(pod)
    for c in _containers(pod):
        state = (c.get("lastState") if last_state else c.get("state")) or {}
        term = state.get("terminated")
        if term and (term.get("exitCode") not in (0, None) or term.get("reason") == "OOMKilled"):
            when = parse_time(term.get("finishedAt")) or parse_time(term.get("startedAt"))
            system = term.get("reason") == "OOMKilled" or (bool(_signal_of(term)) and not deleting)
            description = f"{replica} ({c.get('name', '?')}): {_describe_termination(term)}"
            preemption = ""
            if reason is not None:
                description += f"; disrupted ({_disruption_words(reason)}), not the task's failure"
                system, preemption = True, "disrupted"
            elif term.get("exitCode") == PREEMPTED_EXIT_CODE:
                description += "; stopped at the agreed step for a preemption, not the task's failure"
                system, preemption = True, "stopped"
            return ReplicaFailure(replica, name, when, description, system, preemption)
    status = pod.get("status") or {}
    if not last_state and status.get("phase") == "Failed":
        why = status.get("reason") or "Failed"
        detail = f": {status['message']}" if status.get("message") else ""
        system = why in SYSTEM_POD_REASONS or reason is not None
        when = parse_time(status.get("startTime"))
        description = f"{replica}: pod {why}{detail}"
        if reason is not None:
            description += f"; disrupted ({_disruption_words(reason)}), not the task's failure"
        return ReplicaFailure(replica, name, when, description, system, "disrupted" if reason is not None else "")
    return None


def _replica_line(failures: Sequence[ReplicaFailure]) -> str:
    if not failures:
        return ""
    first = failures[0].description
    if len(failures) > 1:
        first += f" (first of {len(failures)} failed replicas)"
    return first


def earliest_failure(pods: Sequence[Mapping], namer: ReplicaNamer = pod_name, last_state: bool = False) -> str:
    """The earliest failing replica, described for a message ("" when none failed).

    Args:
        pods: the job's pods.
        namer: the kind's name of a pod in messages.
        last_state: read the containers' previous termination (restarted containers).

    Returns:
        `worker-1 (pytorch): OOMKilled, exit code 137 ...`, with how many failed when several did.
    """
    return _replica_line(replica_failures(pods, namer, last_state))


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


def warning_events(events: Sequence[Mapping]) -> list[Mapping]:
    """Warning events, most recent first, one per (reason, message).

    Args:
        events: core/v1 Events (items that are not dicts are passed over).

    Returns:
        The warnings.
    """
    seen = set()
    out = []

    def when(e: Mapping) -> datetime.datetime:
        stamp = e.get("lastTimestamp") or e.get("eventTime") or (e.get("metadata") or {}).get("creationTimestamp")
        return parse_time(stamp) or EPOCH

    for event in sorted((e for e in events if isinstance(e, Mapping)), key=when, reverse=True):
        if event.get("type") != "Warning":
            continue
        key = (event.get("reason"), _event_message(event))
        if key not in seen:
            seen.add(key)
            out.append(event)
    return out


def _event_message(event: Mapping) -> str:
    text = " ".join(str(event.get("message") or event.get("note") or "").split())
    return text[:MESSAGE_LIMIT]


def _waiting(pod: Mapping) -> Optional[tuple[str, str]]:
    for c in _containers(pod):
        waiting = (c.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason") not in (None, "ContainerCreating", "PodInitializing"):
            return str(waiting["reason"]), str(waiting.get("message") or "")
    return None


def fatal_waiting(
    pods: Sequence[Mapping],
    job: Mapping[str, Any],
    config: BackendConfig,
    now: datetime.datetime,
    namer: ReplicaNamer = pod_name,
) -> Optional[str]:
    """Why a replica can never start (an image or container-config error past `image_pull_grace_s`), or None.

    Args:
        pods: the job's pods.
        job: the job (its creation time stands in for a pod's unknown one).
        config: supplies `image_pull_grace_s`.
        now: the current time.
        namer: the kind's name of a pod in messages.

    Returns:
        The message of a permanent failure, or None while every replica may still start.
    """
    job_created = parse_time((job.get("metadata") or {}).get("creationTimestamp"))
    for pod in pods:
        waiting = _waiting(pod)
        if waiting is None or waiting[0] not in FATAL_WAITING_REASONS:
            continue
        since = parse_time((pod.get("metadata") or {}).get("creationTimestamp")) or job_created
        age = max(0.0, (now - since).total_seconds()) if since else 0.0
        if age >= config.status.image_pull_grace_s:
            reason, message = waiting
            detail = f": {message}" if message else ""
            return (
                f"replica {namer(pod)} cannot start: {reason}{detail} (still failing {age:.0f}s after the pod "
                f"was created, image_pull_grace_s={config.status.image_pull_grace_s:g}); check the image name and tag, "
                "the registry credentials (imagePullSecrets) and referenced Secrets/ConfigMaps"
            )
    return None


def accelerator_keys(config: BackendConfig) -> frozenset[str]:
    """The node labels by which an accelerator type places GPU replicas: `accelerator_label` and the labels of each
    type mapped in `accelerators` (see `GpuSettings.placement_for`).

    Args:
        config: the backend config.

    Returns:
        The label keys.
    """
    keys = {config.gpu.accelerator_label}
    for placement in config.gpu.accelerators.values():
        keys.update(placement.node_selector)
    return frozenset(keys)


# The API server's DefaultTolerationSeconds admission plugin gives every pod these (NoExecute, 300 s): they say nothing
# of where the pod may be scheduled.
_ADMISSION_TOLERATIONS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def _expression(expr: Mapping, accelerators: frozenset[str]) -> str:
    values = [str(v) for v in expr.get("values") or []]
    text = f"{expr.get('key')} {expr.get('operator')}" + (f" [{', '.join(values)}]" if values else "")
    return text + (" (the task's accelerator)" if expr.get("key") in accelerators else "")


def _asks_of_a_node(pod: Mapping, accelerators: frozenset[str]) -> str:
    """What a pod asks of a node, in the terms of its spec: its node selector, the terms of its required node
    affinity (one of which a node must match), and the NoSchedule taints it tolerates (kube-scheduler's NodeAffinity
    and TaintToleration filters, whose verdicts name none of them)."""
    spec = pod.get("spec") or {}
    wants = []
    selector = spec.get("nodeSelector") or {}
    if isinstance(selector, Mapping) and selector:
        labels = ", ".join(
            f"{k}={v}" + (" (the task's accelerator)" if k in accelerators else "") for k, v in sorted(selector.items())
        )
        wants.append(f"{labels} (nodeSelector)")
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = [
        " and ".join(_expression(e, accelerators) for e in term.get("matchExpressions") or [] if isinstance(e, Mapping))
        for term in affinity.get("nodeSelectorTerms") or []
        if isinstance(term, Mapping)
    ]
    terms = [t for t in terms if t]
    if terms:
        wants.append(" or ".join(terms))
    tolerated = []
    for t in spec.get("tolerations") or []:
        if not isinstance(t, Mapping) or t.get("key") in _ADMISSION_TOLERATIONS or t.get("effect") == "NoExecute":
            continue
        if not t.get("key"):
            tolerated.append("every taint")
        else:
            tolerated.append(f"{t['key']}={t['value']}" if t.get("value") else str(t["key"]))
    parts = [f"a node with {'; '.join(wants)}"] if wants else []
    parts.append(f"it tolerates the taints {', '.join(tolerated)}" if tolerated else "it tolerates no NoSchedule taint")
    return "the pod asks for " + "; ".join(parts) if wants else parts[-1]


KUEUE_POD_GATE = "kueue.x-k8s.io/admission"
"""The scheduling gate Kueue's `pod` integration puts on a pod it admits as a Workload of its own."""


def _gates(pod: Mapping, kueue_framework: str) -> str:
    """The scheduling gates of a gated pod, and what Kueue's means for a job's pod."""
    gates = [str(g.get("name")) for g in (pod.get("spec") or {}).get("schedulingGates") or [] if isinstance(g, Mapping)]
    if not gates:
        return ""
    said = f"gates: {', '.join(gates)}"
    if KUEUE_POD_GATE in gates:
        said += (
            "; Kueue holds this pod as a Workload of its own (its pod integration, for a pod with a queue label), "
            "so it does not manage the job's kind: a cluster that queues these jobs lists "
            f"{kueue_framework or 'the kind'} in Kueue's integrations.frameworks, and Kueue then admits the job whole"
        )
    return said


def pending_reason(
    pods: Sequence[Mapping],
    namer: ReplicaNamer = pod_name,
    accelerators: frozenset[str] = frozenset(),
    kueue_framework: str = "",
) -> str:
    """What the job's waiting pods wait for (unschedulable, a container waiting reason), "" when none waits.

    An unschedulable pod's reason is the scheduler's verdict, then what the pod asks of a node (node selector,
    required node affinity, tolerated taints: `_asks_of_a_node`), so that the task's setting behind the verdict is
    named.

    Args:
        pods: the job's pods.
        namer: the kind's name of a pod in messages.
        accelerators: the node labels of the task's accelerator (`accelerator_keys`), named as such.
        kueue_framework: the kind's name in Kueue's `integrations.frameworks`, for a pod Kueue gates on its own.

    Returns:
        `; `-separated reasons, one per waiting pod.
    """
    reasons = []
    for pod in pods:
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                asks = _asks_of_a_node(pod, accelerators) if cond.get("reason") == "Unschedulable" else ""
                asks = _gates(pod, kueue_framework) if cond.get("reason") == "SchedulingGated" else asks
                reasons.append(
                    f"{namer(pod)} {cond.get('reason') or 'unschedulable'}: {cond.get('message', '')}"
                    + (f" ({asks})" if asks else "")
                )
                break
        else:
            waiting = _waiting(pod)
            if waiting is not None:
                detail = f": {waiting[1]}" if waiting[1] else ""
                reasons.append(f"{namer(pod)} {waiting[0]}{detail}")
    return "; ".join(reasons)
