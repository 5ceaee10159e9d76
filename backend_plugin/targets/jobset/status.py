"""JobSet status -> Flyte phase and a message that says why: the JobSet controller's table.

The phase comes from two places, in this order:

1. `status.conditions`, only those whose status is "True" (a terminal one wins: `TERMINAL_CONDITIONS`), by the table
   `CONDITIONS`: Completed is SUCCEEDED, Failed is decided by the rule every kind shares (`status.failed_job_status`:
   retryable unless the task's own error document says it is not), Suspended is QUEUED, RestartingJobSet is RUNNING
   (a restart by the failure policy is the job carrying on, never a failure), and an unknown type is still running
   (and logged), never an error;
2. `status.replicatedJobsStatus`, the child Jobs of each replicated job: a failed one is RUNNING (the controller
   counts it before it applies its failure policy: the job ends or restarts, it does not start again), all ready (or
   done) is RUNNING, some with active pods is INITIALIZING, none yet is QUEUED.

A JobSet without `replicatedJobsStatus` was never seen by the JobSet controller: QUEUED, then a permanent FAILED after
`jobset_pickup_timeout_s`. One the controller has seen whose pods never appear (a child Job the API server refuses
shows only as a `JobCreationFailed` event) is failed after `jobset_start_timeout_s` with its warning events. Pods
explain failures (the earliest failing pod of the current run, `restart-attempt` = `status.restarts`) and stuck
starts (an image that cannot be pulled past `image_pull_grace_s` is a permanent FAILED). Pods are named
`<role>-<index>` from their replicated job and completion index (`worker-1`), as the training operator names a
PyTorchJob's. A job whose spec holds it (`spec.suspend: true`, Kueue or an admin) is QUEUED until a terminal condition
says otherwise, and is never timed out. Every message says how often the JobSet restarted (`status.restarts`, and
how many of those count toward `maxRestarts`). Pure: (job, pods, config, now, what was read) in, `JobStatus` out.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, Optional

from flyteidl.core.execution_pb2 import TaskExecution

from backend_plugin.config import BackendConfig
from backend_plugin.kinds.jobset import JobSetSettings
from backend_plugin.status import (
    JobStatus,
    accelerator_keys,
    condition_text,
    deciding_condition,
    deciding_type,
    disruption_text,
    earliest_failure,
    failed_job_status,
    failure_phase,
    fatal_waiting,
    job_age,
    not_picked_up,
    pending_reason,
    pod_name,
    replica_failures,
    start_explanation,
)
from backend_plugin.task_errors import ErrorReport
from pytorch_contract.k8s_names import (
    COMPLETION_INDEX_LABEL,
    JOBSET_NAME_LABEL,
    JOBSET_REPLICATED_JOB_LABEL,
    JOBSET_RESTART_ATTEMPT_LABEL,
)

KUEUE_FRAMEWORK = "jobset.x-k8s.io/jobset"
"""This kind's name in Kueue's `integrations.frameworks` (Kueue then admits the job whole, not its pods)."""

__all__ = [
    "TERMINAL_CONDITIONS",
    "CONDITIONS",
    "jobset_status",
    "suspended",
    "needs_pods",
    "needs_error_report",
    "needs_events",
    "replicated_jobs",
    "current_pods",
    "pod_role_index",
    "replica_name",
    "restarts_text",
]

logger = logging.getLogger(__name__)

TERMINAL_CONDITIONS = ("Failed", "Completed")  # checked first: a terminal condition wins over any later one
_PREEMPTED_REASON = "FailurePolicy_Preempted"  # RestartingJobSet's reason after the writer's `Preempted` rule


def replicated_jobs(job: Mapping[str, Any]) -> Optional[list[Mapping[str, Any]]]:
    """`status.replicatedJobsStatus`: the controller's counts of child Jobs per replicated job.

    Args:
        job: the JobSet as read from the API.

    Returns:
        The entries (dicts only), or None when the controller has written none (it has not seen the JobSet).
    """
    entries = (job.get("status") or {}).get("replicatedJobsStatus")
    if not isinstance(entries, list):
        return None
    return [e for e in entries if isinstance(e, Mapping)]


def _expected_jobs(job: Mapping[str, Any]) -> dict[str, int]:
    """Child Jobs per replicated job, as the spec asks (replicas, 1 where unset)."""
    out = {}
    for rjob in (job.get("spec") or {}).get("replicatedJobs") or []:
        if isinstance(rjob, Mapping):
            replicas = rjob.get("replicas", 1)
            out[str(rjob.get("name"))] = replicas if isinstance(replicas, int) else 1
    return out


def _count(entry: Mapping[str, Any], key: str) -> int:
    value = entry.get(key)
    return value if isinstance(value, int) else 0


def suspended(job: Mapping[str, Any]) -> bool:
    """Whether the job's spec holds it (`spec.suspend: true`).

    Args:
        job: the JobSet as read from the API.

    Returns:
        True for a suspended job.
    """
    spec = job.get("spec") or {}
    return isinstance(spec, Mapping) and spec.get("suspend") is True


def _progress(job: Mapping[str, Any]) -> tuple[int, int, int]:
    """(jobs ready or done, jobs with active pods, jobs expected) over every replicated job."""
    entries = replicated_jobs(job) or []
    ready = sum(_count(e, "ready") + _count(e, "succeeded") for e in entries)
    active = sum(_count(e, "active") for e in entries)
    return ready, active, sum(_expected_jobs(job).values())


def _started(job: Mapping[str, Any]) -> bool:
    """Whether any child Job has had a pod: active, ready or finished."""
    keys = ("ready", "succeeded", "failed", "active")
    return any(_count(e, k) for e in replicated_jobs(job) or [] for k in keys) or bool(_restarts(job)[0])


def needs_pods(job: Mapping[str, Any]) -> bool:
    """Whether `jobset_status` needs the job's pods (a failed job's root cause; a start that may be stuck).

    Args:
        job: the JobSet as read from the API.

    Returns:
        True for a Failed job and for one with active pods not all ready yet.
    """
    ctype = deciding_type(job, TERMINAL_CONDITIONS)
    if ctype == "Failed":
        return True
    if ctype in ("Completed", "Suspended") or suspended(job) or replicated_jobs(job) is None:
        return False
    ready, active, expected = _progress(job)
    return active > 0 and ready < expected


def needs_error_report(job: Mapping[str, Any]) -> bool:
    """Whether `jobset_status` needs the task's error documents (the job failed: they decide retryable or not).

    Args:
        job: the JobSet as read from the API.

    Returns:
        True when the deciding condition is Failed.
    """
    return deciding_type(job, TERMINAL_CONDITIONS) == "Failed"


def needs_events(job: Mapping[str, Any], config: BackendConfig, now: datetime.datetime) -> bool:
    """Whether the JobSet has not started past `jobset_start_timeout_s`, so `jobset_status` needs its events to say
    why.

    Args:
        job: the JobSet as read from the API.
        config: supplies `jobset_start_timeout_s`.
        now: the current time (timezone-aware).

    Returns:
        True for a JobSet the controller has seen, with no condition and no pod ever, created at least
        `jobset_start_timeout_s` ago (a suspended one never is: it waits for admission on purpose).
    """
    timeout = config.kind(JobSetSettings).start_timeout_s
    if timeout is None or suspended(job) or replicated_jobs(job) is None:
        return False
    if deciding_type(job, TERMINAL_CONDITIONS) is not None or _started(job):
        return False
    return job_age(job, now) >= timeout


def pod_role_index(pod: Mapping[str, Any]) -> Optional[tuple[str, int]]:
    """A JobSet pod's replicated job and completion index, from its labels (else annotations).

    Args:
        pod: a pod of the JobSet.

    Returns:
        (`worker`, 1), or None when the pod carries neither.
    """
    meta = pod.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    role = labels.get(JOBSET_REPLICATED_JOB_LABEL) or annotations.get(JOBSET_REPLICATED_JOB_LABEL)
    raw = labels.get(COMPLETION_INDEX_LABEL) or annotations.get(COMPLETION_INDEX_LABEL)
    if not role or raw is None or not str(raw).isdigit():
        return None
    return str(role), int(raw)


def replica_name(pod: Mapping[str, Any]) -> str:
    """A JobSet pod's name in messages: `<role>-<index>`, as a PyTorchJob's replica is named.

    Args:
        pod: a pod of the JobSet.

    Returns:
        e.g. `worker-1`; the pod's name when it carries no role or index.
    """
    found = pod_role_index(pod)
    return pod_name(pod) if found is None else f"{found[0]}-{found[1]}"


def current_pods(job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The pods of the JobSet's current run (`restart-attempt` = `status.restarts`): a restart leaves the previous
    run's pods behind until they are deleted, and a root cause or a stuck start is the current run's.

    Args:
        job: the JobSet as read from the API.
        pods: its pods (items that are not dicts are passed over).

    Returns:
        The pods labelled with the current restart attempt, and those without the label.
    """
    attempt = str(_restarts(job)[0])
    return [pod for pod in pods if isinstance(pod, Mapping) and _attempt(pod) in (None, attempt)]


def _attempt(pod: Mapping[str, Any]) -> Optional[str]:
    label = ((pod.get("metadata") or {}).get("labels") or {}).get(JOBSET_RESTART_ATTEMPT_LABEL)
    return None if label is None else str(label)


def _restarts(job: Mapping[str, Any]) -> tuple[int, int, Optional[int]]:
    """(restarts, those counted toward maxRestarts, maxRestarts or None)."""
    status = job.get("status") or {}
    policy = (job.get("spec") or {}).get("failurePolicy") or {}
    limit = policy.get("maxRestarts", 0) if isinstance(policy, Mapping) else None
    return (
        _count(status, "restarts"),
        _count(status, "restartsCountTowardsMax"),
        limit if isinstance(limit, int) else None,
    )


def restarts_text(job: Mapping[str, Any]) -> str:
    """How often the JobSet restarted, for messages ("" when it never did).

    Args:
        job: the JobSet as read from the API.

    Returns:
        e.g. `restarted 3 times, 1 counted toward maxRestarts 6`.
    """
    restarts, counted, limit = _restarts(job)
    if not restarts:
        return ""
    times = "once" if restarts == 1 else f"{restarts} times"
    budget = f" {limit}" if limit is not None else ""
    return f"restarted {times}, {counted} counted toward maxRestarts{budget}"


def _with_restarts(job: Mapping[str, Any], text: str) -> str:
    restarts = restarts_text(job)
    return f"{text} ({restarts})" if restarts else text


class _Read(NamedTuple):
    """What one evaluation of a JobSet reads: the job, its name for messages, the current run's pods, the deciding
    condition, the config and the time, and what was read for a failed or unstarted job."""

    job: Mapping[str, Any]
    name: str
    pods: Sequence[Mapping[str, Any]]
    condition: Optional[Mapping[str, Any]]
    config: BackendConfig
    now: datetime.datetime
    errors: Optional[ErrorReport]
    events: Optional[Sequence[Mapping[str, Any]]]
    events_problem: str
    previous: Sequence[Mapping[str, Any]] = ()
    """The previous run's pods still listed (a restart deletes them; they may be terminating)."""

    @property
    def ctype(self) -> str:
        return "" if self.condition is None else str(self.condition.get("type"))

    @property
    def text(self) -> str:
        return str((self.condition or {}).get("message") or "")

    @property
    def reason(self) -> str:
        return str((self.condition or {}).get("reason") or "")


def _failed(read: _Read) -> JobStatus:
    headline = _with_restarts(read.job, f"JobSet {read.name} failed ({read.reason or 'Failed'}): "
                              f"{read.text or 'a child Job failed'}.")  # fmt: skip
    return failed_job_status(headline, replica_failures(read.pods, replica_name), read.errors, condition=read.ctype)


def _completed(read: _Read) -> JobStatus:
    return JobStatus(TaskExecution.SUCCEEDED, _with_restarts(read.job, read.text or "completed"), read.ctype)


def _suspended(read: _Read) -> JobStatus:
    return JobStatus(TaskExecution.QUEUED, f"suspended, waiting for admission: {read.text or read.reason}", read.ctype)


def _restarting(read: _Read) -> JobStatus:
    why = read.text or read.reason
    if read.reason == _PREEMPTED_REASON:
        # which pod and why, where the previous run's pods are still listed (read anyway while the restart's pods
        # start: `needs_pods`)
        who = disruption_text(read.previous, replica_name)
        who = (
            who
            or "a pod was disrupted (preemption, eviction or host maintenance) or stopped at a preemption's agreed step"
        )
        why = f"{who}; not counted toward maxRestarts: {why}"
    return JobStatus(TaskExecution.RUNNING, _with_restarts(read.job, f"restarting: {why}"), read.ctype)


def _unknown(read: _Read) -> JobStatus:
    logger.warning("JobSet %s has unknown condition %r; reporting it as running", read.name, read.ctype)
    text = read.text or read.reason
    return JobStatus(TaskExecution.RUNNING, f"running (unknown condition {read.ctype!r}: {text})", read.ctype)


# JobSet condition type (jobset.x-k8s.io/v1alpha2 `JobSetConditionType`, only those whose status is "True") -> how it
# is reported. A terminal one wins (`TERMINAL_CONDITIONS`); StartupPolicy* (an InOrder startup, which the writer never
# asks for) and no condition at all are read from the child Jobs (`_from_jobs`); any other type is unknown: still
# running, and a log line (`_unknown`).
CONDITIONS: dict[str, Callable[[_Read], JobStatus]] = {
    "Failed": _failed,  # FAILED or RETRYABLE_FAILED: the rule every kind shares (`status.failed_job_status`)
    "Completed": _completed,  # SUCCEEDED: the success policy was met (the master completed)
    "Suspended": _suspended,  # QUEUED: spec.suspend (Kueue, an admin): waits for admission, no pods
    "RestartingJobSet": _restarting,  # RUNNING: the failure policy restarts every child Job (the run goes on)
}
_FROM_JOBS = ("StartupPolicyInProgress", "StartupPolicyCompleted")


def jobset_status(
    job: Mapping[str, Any],
    pods: Optional[Sequence[Mapping[str, Any]]],
    config: BackendConfig,
    now: datetime.datetime,
    errors: Optional[ErrorReport] = None,
    events: Optional[Sequence[Mapping[str, Any]]] = None,
    events_problem: str = "",
) -> JobStatus:
    """Flyte phase and message of a JobSet: its spec's hold, else its deciding condition (`CONDITIONS`), else its
    child Jobs (`replicatedJobsStatus`).

    Args:
        job: the JobSet as read from the API.
        pods: its pods (label `jobset.sigs.k8s.io/jobset-name`), or None when they were not listed.
        config: supplies `jobset_pickup_timeout_s`, `jobset_start_timeout_s` and `image_pull_grace_s`.
        now: the current time (timezone-aware).
        errors: the task's error documents when the job failed (`needs_error_report`); None when not read. They
            decide retryable or permanent by the same rule as a PyTorchJob's (`status.failed_job_status`).
        events: the JobSet's events when it has not started in time (`needs_events`); None when not read.
        events_problem: why the events could not be read (e.g. RBAC), "" when they could or were not needed.

    Returns:
        The phase, a message saying why, and the deciding condition type ("" when the child Jobs decided).
    """
    meta = job.get("metadata") or {}
    name = f"{meta.get('namespace', '?')}/{meta.get('name', '?')}"
    condition = deciding_condition(job, TERMINAL_CONDITIONS)
    current = current_pods(job, pods or [])
    before = str(_restarts(job)[0] - 1)
    previous = [p for p in pods or [] if isinstance(p, Mapping) and _attempt(p) == before]
    read = _Read(job, name, current, condition, config, now, errors, events, events_problem, previous)
    if read.ctype not in TERMINAL_CONDITIONS and suspended(job):
        why = condition_text(condition) if condition is not None and read.ctype == "Suspended" else ""
        return JobStatus(TaskExecution.QUEUED, f"suspended, waiting for admission: {why or 'spec.suspend'}", read.ctype)
    if condition is not None and read.ctype not in _FROM_JOBS:
        if read.ctype == "RestartingJobSet":
            stuck = fatal_waiting(read.pods, job, config, now, replica_name)
            if stuck is not None:
                return JobStatus(TaskExecution.FAILED, stuck, read.ctype)
        return CONDITIONS.get(read.ctype, _unknown)(read)
    if replicated_jobs(job) is None:
        return _not_picked_up(job, name, config, now)
    return _from_jobs(read)


def _from_jobs(read: _Read) -> JobStatus:
    """A job with no deciding condition: its child Jobs' counts, or its pods when they are stuck."""
    job = read.job
    stuck = fatal_waiting(read.pods, job, read.config, read.now, replica_name)
    if stuck is not None:
        return JobStatus(failure_phase(ran=False), stuck, read.ctype)
    ready, active, expected = _progress(job)
    expected_by_name = _expected_jobs(job)
    counts = ", ".join(
        f"{e.get('name')} {_count(e, 'ready') + _count(e, 'succeeded')}/{expected_by_name.get(str(e.get('name')), 1)}"
        for e in replicated_jobs(job) or []
    )
    counts = f"child Jobs ready: {counts}" if counts else "no child Job yet"
    failed = [str(e.get("name")) for e in replicated_jobs(job) or [] if _count(e, "failed")]
    # a pod of this run failed before its Job was counted failed (or active): the same moment, seen from the pods
    failure = earliest_failure(current_pods(job, read.pods), replica_name) if not failed else ""
    if failure:
        message = f"a pod failed ({failure}); the JobSet controller applies its failure policy ({counts})"
        return JobStatus(TaskExecution.RUNNING, _with_restarts(job, message), read.ctype)
    if failed:
        message = (
            f"a child Job failed ({', '.join(failed)}); the JobSet controller applies its failure policy ({counts})"
        )
        return JobStatus(TaskExecution.RUNNING, _with_restarts(job, message), read.ctype)
    if expected and ready >= expected:
        disrupted = disruption_text(read.pods, replica_name)  # only where the pods were read: never a steady poll
        message = f"running ({counts}){'; ' + disrupted if disrupted else ''}"
        return JobStatus(TaskExecution.RUNNING, _with_restarts(job, message), read.ctype)
    if active:
        pending = pending_reason(read.pods, replica_name, accelerator_keys(read.config), KUEUE_FRAMEWORK)
        message = f"starting pods ({counts}){'; ' + pending if pending else ''}"
        return JobStatus(TaskExecution.INITIALIZING, _with_restarts(job, message), read.ctype)
    timeout = read.config.kind(JobSetSettings).start_timeout_s
    age = job_age(job, read.now)
    if timeout is not None and not _started(job) and age >= timeout:
        meta = job.get("metadata") or {}
        explanation = start_explanation(read.events, read.pods, read.events_problem, replica_name)
        message = (
            f"JobSet {read.name} has not started {age:.0f}s after creation (jobset_start_timeout_s={timeout:g}): the "
            f"JobSet controller could not create its child Jobs or their pods. {explanation} The child Jobs' events "
            f"say more: `kubectl describe jobs -n {meta.get('namespace', '?')} -l {JOBSET_NAME_LABEL}="
            f"{meta.get('name', '?')}`."
        )
        return JobStatus(failure_phase(ran=False), message, read.ctype)
    return JobStatus(TaskExecution.QUEUED, _with_restarts(job, f"waiting for pods ({counts})"), read.ctype)


def _not_picked_up(job: Mapping[str, Any], name: str, config: BackendConfig, now: datetime.datetime) -> JobStatus:
    ns = (job.get("metadata") or {}).get("namespace", "?")
    timeout = config.kind(JobSetSettings).pickup_timeout_s
    return not_picked_up(
        job,
        now,
        timeout,
        "waiting for the JobSet controller to pick up the job",
        lambda age: (
            f"JobSet {name} has no status {age:.0f}s after creation (jobset_pickup_timeout_s={timeout:g}): the JobSet "
            f"controller may not be installed, or it does not watch namespace {ns!r}. Check "
            "`kubectl get deployment -n jobset-system jobset-controller-manager`."
        ),
    )
