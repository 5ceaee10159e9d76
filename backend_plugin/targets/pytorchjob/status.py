"""PyTorchJob status -> Flyte phase and a message that says why: the training operator's table.

`CONDITION_PHASES`: the operator's condition types -> Flyte phases. Only conditions whose status is "True" count;
a terminal one (Failed, Succeeded) wins, otherwise the latest by lastTransitionTime (list order breaks ties). An
unknown condition type means "still running" plus a log line, never an error. A job whose spec holds it
(`runPolicy.suspend: true`, Kueue or an admin) is QUEUED until a terminal condition says otherwise, whatever else its
conditions say (the operator keeps `Created` until it sees the suspension), and is never timed out.

A failed job's phase and message follow the rule every kind shares (`backend_plugin.status.failed_job_status`);
pods are named `<replica type>-<index>` from the operator's labels. `needs_pods`, `needs_error_report` and
`needs_events` say when the caller must read more, so a steady running job costs one API call per poll. Pure.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, Optional

from flyteidl.core.execution_pb2 import TaskExecution

from backend_plugin.config import BackendConfig
from backend_plugin.kinds.pytorchjob import PyTorchJobSettings
from backend_plugin.status import (
    JobStatus,
    Phase,
    accelerator_keys,
    condition_text,
    deciding_condition,
    deciding_type,
    disruption_text,
    earliest_failure,
    failed_job_status,
    fatal_waiting,
    job_age,
    never_started_status,
    not_picked_up,
    pending_reason,
    pod_name,
    replica_failures,
    start_explanation,
    warning_events,
)
from backend_plugin.task_errors import ErrorReport
from pytorch_contract.k8s_names import REPLICA_INDEX_LABEL, REPLICA_TYPE_LABEL

KUEUE_FRAMEWORK = "kubeflow.org/pytorchjob"
"""This kind's name in Kueue's `integrations.frameworks` (Kueue then admits the job whole, not its pods)."""

__all__ = [
    "CONDITION_PHASES",
    "TERMINAL_CONDITIONS",
    "replica_name",
    "expected_replicas",
    "active_replicas",
    "suspended",
    "needs_pods",
    "needs_error_report",
    "needs_events",
    "job_status",
]

logger = logging.getLogger(__name__)

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


def replica_name(pod: Mapping[str, Any]) -> str:
    """A PyTorchJob pod's name in messages: `<replica type>-<index>` from the operator's labels.

    Args:
        pod: a pod dict as read from the API.

    Returns:
        e.g. `worker-1`; the pod's name when it has no replica labels.
    """
    labels = (pod.get("metadata") or {}).get("labels") or {}
    rtype, index = labels.get(REPLICA_TYPE_LABEL), labels.get(REPLICA_INDEX_LABEL)
    if rtype is not None and index is not None:
        return f"{str(rtype).lower()}-{index}"
    return pod_name(pod)


def expected_replicas(job: Mapping[str, Any]) -> int:
    """Total replicas the spec asks for (Master + Worker).

    Args:
        job: the PyTorchJob.

    Returns:
        The sum of `replicas` over the replica specs (1 where a spec omits it).
    """
    specs = (job.get("spec") or {}).get("pytorchReplicaSpecs") or {}
    return sum(int((s or {}).get("replicas", 1)) for s in specs.values())


def active_replicas(job: Mapping[str, Any]) -> int:
    """Replicas the operator reports as active in `status.replicaStatuses`.

    Args:
        job: the PyTorchJob as read from the API.

    Returns:
        The sum of `active` over the replica statuses.
    """
    statuses = (job.get("status") or {}).get("replicaStatuses") or {}
    return sum(int((s or {}).get("active") or 0) for s in statuses.values())


def suspended(job: Mapping[str, Any]) -> bool:
    """Whether the job's spec holds it (`runPolicy.suspend: true`).

    Args:
        job: the PyTorchJob as read from the API.

    Returns:
        True for a suspended job.
    """
    run_policy = (job.get("spec") or {}).get("runPolicy") or {}
    return isinstance(run_policy, Mapping) and run_policy.get("suspend") is True


def needs_pods(job: Mapping[str, Any]) -> bool:
    """Whether `job_status` needs the job's pods to explain the state (else one GET per poll is enough).

    Args:
        job: the PyTorchJob as read from the API.

    Returns:
        True for Failed, Restarting and Created jobs and for Running jobs with fewer active replicas than
        requested; False for succeeded, suspended, steady running jobs and jobs without conditions.
    """
    ctype = deciding_type(job, TERMINAL_CONDITIONS)
    if ctype not in TERMINAL_CONDITIONS and suspended(job):
        return False
    if ctype in ("Failed", "Restarting", "Created"):
        return True
    if ctype == "Running":
        return active_replicas(job) < expected_replicas(job)
    return False


def needs_error_report(job: Mapping[str, Any]) -> bool:
    """Whether `job_status` needs the task's error documents (the job failed: they decide retryable or not).

    Args:
        job: the PyTorchJob as read from the API.

    Returns:
        True when the deciding condition is Failed.
    """
    return deciding_type(job, TERMINAL_CONDITIONS) == "Failed"


def needs_events(job: Mapping[str, Any], config: BackendConfig, now: datetime.datetime) -> bool:
    """Whether the job has not started past `job_start_timeout_s`, so `job_status` needs its events to say why.

    Args:
        job: the PyTorchJob as read from the API.
        config: supplies `job_start_timeout_s`.
        now: the current time (timezone-aware).

    Returns:
        True for a job whose deciding condition is Created, created at least `job_start_timeout_s` ago (a suspended
        job never is: it waits for admission on purpose). With or without `status.startTime`: training-operator
        v1.9 sets it at its first reconcile, before any pod is created, so only the pods and the events tell
        (`started`). Also for a job with no condition past `operator_pickup_timeout_s`: v1.9 writes none while the
        API server refuses its pods, and its `FailedCreate` events tell that from an operator that is not there.
    """
    if suspended(job):
        return False
    ctype = deciding_type(job, TERMINAL_CONDITIONS)
    if ctype is None:  # no condition past the pickup timeout: the operator's refused creates, or no operator
        return job_age(job, now) >= config.kind(PyTorchJobSettings).pickup_timeout_s
    timeout = config.kind(PyTorchJobSettings).start_timeout_s
    if timeout is None or ctype != "Created":
        return False
    return job_age(job, now) >= timeout


def started(job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], events: Optional[Sequence[Mapping]]) -> bool:
    """Whether the operator got the job's pods created (they may still wait for a node: that is not this check's).

    Not started: no `status.startTime` (operators before v1.9 set it once the pods are created); or, with one,
    fewer pods than the spec's replicas and a `FailedCreate` warning event (training-operator v1.9 sets `startTime`
    at its first reconcile whether its pod creates succeed or not, and records each refused create as that event:
    an invalid pod, an exhausted ResourceQuota, a webhook's denial). Without that event (events not readable, or a
    pod missing for a moment while the operator creates it again) the job counts as started: this check fails a job
    for good, so it needs the operator's own word.

    Args:
        job: the PyTorchJob as read from the API.
        pods: its pods.
        events: its events (None: not read).

    Returns:
        True when it started.
    """
    if not (job.get("status") or {}).get("startTime"):
        return False
    live = [p for p in pods if isinstance(p, Mapping) and not (p.get("metadata") or {}).get("deletionTimestamp")]
    if len(live) >= expected_replicas(job):
        return True
    return not _create_refused(events)


def _create_refused(events: Optional[Sequence[Mapping]]) -> bool:
    """Whether the operator recorded a refused pod create (a `FailedCreate...` warning event)."""
    return any(str(e.get("reason", "")).startswith("FailedCreate") for e in warning_events(events or ()))


class _Read(NamedTuple):
    """What one evaluation of a PyTorchJob reads: the job, its name for messages, its pods, the deciding condition,
    the config and the time, and what was read for a failed or unstarted job."""

    job: Mapping[str, Any]
    name: str
    pods: Sequence[Mapping[str, Any]]
    condition: Mapping[str, Any]
    config: BackendConfig
    now: datetime.datetime
    errors: Optional[ErrorReport]
    events: Optional[Sequence[Mapping[str, Any]]]
    events_problem: str

    @property
    def ctype(self) -> str:
        return str(self.condition.get("type"))

    @property
    def text(self) -> str:
        return condition_text(self.condition)

    @property
    def phase(self) -> Phase:
        return CONDITION_PHASES[self.ctype]


def _failed(read: _Read) -> JobStatus:
    headline = read.text or f"PyTorchJob {read.name} failed"
    return failed_job_status(headline, replica_failures(read.pods, replica_name), read.errors, condition=read.ctype)


def _succeeded(read: _Read) -> JobStatus:
    return JobStatus(read.phase, read.text or "succeeded", read.ctype)


def _suspended(read: _Read) -> JobStatus:
    return JobStatus(read.phase, f"suspended, waiting for admission: {read.text or 'runPolicy.suspend'}",
                     read.ctype)  # fmt: skip


def _restarting(read: _Read) -> JobStatus:
    # A preemption first: under `ExitCode` the operator recreates a pod that exited 200 (a new pod, its failure in
    # `state` until then), under `OnFailure` the kubelet restarts its container (the failure in `lastState`).
    restart = disruption_text(read.pods, replica_name) or earliest_failure(read.pods, replica_name, last_state=True)
    return JobStatus(read.phase, f"restarting replicas{': ' + restart if restart else ''}", read.ctype)


def _created(read: _Read) -> JobStatus:
    if needs_events(read.job, read.config, read.now) and not started(read.job, read.pods, read.events):
        return _not_started(read)
    pending = pending_reason(read.pods, replica_name, accelerator_keys(read.config), KUEUE_FRAMEWORK)
    message = f"waiting for replicas to start: {pending}" if pending else "pods created"
    return JobStatus(read.phase, message, read.ctype)


def _not_started(read: _Read) -> JobStatus:
    """Created, not started past `job_start_timeout_s`: its events say why (a gang job may wait for its PodGroup)."""
    job, age = read.job, job_age(read.job, read.now)
    explanation = start_explanation(read.events, read.pods, read.events_problem, replica_name)
    gang = bool(((job.get("spec") or {}).get("runPolicy") or {}).get("schedulingPolicy"))
    if gang and not _has_failure_evidence(read.events, read.pods):
        message = f"waiting for the gang scheduler to admit the job's PodGroup ({age:.0f}s, no pods yet; {explanation})"
        return JobStatus(read.phase, message, read.ctype)
    timeout = float(read.config.kind(PyTorchJobSettings).start_timeout_s or 0)
    return never_started_status(f"PyTorchJob {read.name}", age, timeout, explanation, read.ctype)


def _running(read: _Read) -> JobStatus:
    counts = f"{active_replicas(read.job)}/{expected_replicas(read.job)} replicas active"
    # the pods are read only while a replica is missing (`needs_pods`), never on a steady poll
    pending = pending_reason(read.pods, replica_name, accelerator_keys(read.config), KUEUE_FRAMEWORK)
    notes = [n for n in (disruption_text(read.pods, replica_name), pending) if n]
    return JobStatus(read.phase, f"running ({counts}); {'; '.join(notes)}" if notes else f"running ({counts})",
                     read.ctype)  # fmt: skip


# How each condition of `CONDITION_PHASES` is reported; a job that is Created, Running or Restarting is first checked
# for a replica that can never start (`fatal_waiting`).
_REPORTS: dict[str, Callable[[_Read], JobStatus]] = {
    "Failed": _failed,
    "Succeeded": _succeeded,
    "Suspended": _suspended,
    "Created": _created,
    "Running": _running,
    "Restarting": _restarting,
}
_ACTIVE = ("Created", "Running", "Restarting")


def job_status(
    job: Mapping[str, Any],
    pods: Optional[Sequence[Mapping[str, Any]]],
    config: BackendConfig,
    now: datetime.datetime,
    errors: Optional[ErrorReport] = None,
    events: Optional[Sequence[Mapping[str, Any]]] = None,
    events_problem: str = "",
) -> JobStatus:
    """Flyte phase and message of a PyTorchJob: its spec's hold, else its deciding condition (`CONDITION_PHASES`).

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
    condition = deciding_condition(job, TERMINAL_CONDITIONS)
    ctype = "" if condition is None else str(condition.get("type"))
    if ctype not in TERMINAL_CONDITIONS and suspended(job):
        why = condition_text(condition) if condition is not None and ctype == "Suspended" else ""
        return JobStatus(TaskExecution.QUEUED, f"suspended, waiting for admission: {why or 'runPolicy.suspend'}", ctype)
    if condition is None:
        if needs_events(job, config, now) and _create_refused(events):
            # training-operator v1.9 writes no condition at all while the API server refuses its pod creates: the
            # operator is there (its FailedCreate events say so), and the job will not start
            timeout = float(config.kind(PyTorchJobSettings).pickup_timeout_s)
            refused = start_explanation(events, pods or [], events_problem, replica_name)
            explanation = f"It wrote no condition. {refused}"
            return never_started_status(f"PyTorchJob {name}", job_age(job, now), timeout, explanation, "",
                                        "operator_pickup_timeout_s")  # fmt: skip
        return _not_picked_up(job, name, config, now)
    if ctype not in _REPORTS:
        logger.warning("PyTorchJob %s has unknown condition %r; reporting it as running", name, ctype)
        text = condition_text(condition)
        return JobStatus(TaskExecution.RUNNING, f"running (unknown condition {ctype!r}: {text})", ctype)
    read = _Read(job, name, pods or [], condition, config, now, errors, events, events_problem)
    stuck = fatal_waiting(read.pods, job, config, now, replica_name) if ctype in _ACTIVE else None
    if stuck is not None:
        return JobStatus(TaskExecution.FAILED, stuck, ctype)
    return _REPORTS[ctype](read)


def _has_failure_evidence(events: Optional[Sequence[Mapping]], pods: Sequence[Mapping]) -> bool:
    return _create_refused(events) or bool(replica_failures(pods))


def _not_picked_up(job: Mapping[str, Any], name: str, config: BackendConfig, now: datetime.datetime) -> JobStatus:
    ns = (job.get("metadata") or {}).get("namespace", "?")
    timeout = config.kind(PyTorchJobSettings).pickup_timeout_s
    return not_picked_up(
        job,
        now,
        timeout,
        "waiting for the Kubeflow training operator to pick up the job",
        lambda age: (
            f"PyTorchJob {name} has no status {age:.0f}s after creation (operator_pickup_timeout_s={timeout:g}): the "
            f"Kubeflow training operator may not be installed, or it does not watch namespace {ns!r}. Check "
            "`kubectl get deployment -A -l control-plane=kubeflow-training-operator`."
        ),
    )
