"""TrainJob status -> Flyte phase and a message that says why (the Trainer v2 sibling of `status.py`).

A TrainJob has only three condition types (`Suspended`, `Complete`, `Failed`) and no Created or Running condition:
a running job has no true condition at all. So the phase comes from two places, in this order:

1. `status.conditions`, only those whose status is "True" (`CONDITION_PHASES`; a terminal one wins);
2. `status.jobsStatus`, the entry of the torch runtime's replicated job `node` (`NODE_PHASES`): pods active with none
   ready are starting (INITIALIZING), a ready pod means the nodes are up (RUNNING).

A job with neither was never turned into a JobSet: QUEUED while the Trainer controller may still pick it up, and a
permanent FAILED after `BackendConfig.trainjob_pickup_timeout_s` (a missing runtime or an unbuildable JobSet only
shows as an Event). Pods explain failures (the earliest failing node) and stuck starts (an image that cannot be
pulled past `BackendConfig.image_pull_grace_s` is a permanent FAILED); a job that ran and failed is decided by the same
rule as a PyTorchJob (`status.failed_job_status`: retryable unless the task's own error document says it is not),
and one that can never run is a permanent FAILED (`failure_phase(ran=False)`). Pure: (job, pods, config, now,
error documents) in, `JobStatus` out.
"""

from __future__ import annotations

import datetime
import logging
from typing import Optional

from flyteidl.core.execution_pb2 import TaskExecution

from backend_plugin.config import BackendConfig
from backend_plugin.status import (
    JobStatus,
    _fatal_waiting,
    _pending_reason,
    deciding_condition,
    failed_job_status,
    replica_failures,
)
from backend_plugin.task_errors import ErrorReport
from backend_plugin.timestamps import parse_time

__all__ = [
    "CONDITION_PHASES",
    "NODE_PHASES",
    "JOBSET_NAME_LABEL",
    "COMPLETION_INDEX_LABEL",
    "failure_phase",
    "trainjob_status",
    "needs_pods",
    "needs_error_report",
    "needs_events",
    "node_status",
    "node_pods",
]

logger = logging.getLogger(__name__)

Phase = int

JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
"""Label of every pod of the JobSet a TrainJob creates (the JobSet is named after the TrainJob)."""
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
"""The node index of a pod (its Indexed Job completion index; `PET_NODE_RANK` is read from it)."""

# TrainJob condition type (trainer.kubeflow.org/v1alpha1) -> Flyte phase; only conditions with status "True" count.
CONDITION_PHASES: dict[str, Phase] = {
    "Complete": TaskExecution.SUCCEEDED,  # copied from the JobSet: every node's Job completed
    "Failed": TaskExecution.RETRYABLE_FAILED,  # copied from the JobSet (FailedJobs, DeadlineExceeded, ...): it ran
    "Suspended": TaskExecution.QUEUED,  # spec.suspend (Kueue, admin hold): no pods until resumed
}
TERMINAL_CONDITIONS = ("Failed", "Complete")  # checked first: a terminal condition wins over Suspended

# jobsStatus[name=node] with no true condition -> Flyte phase (first matching row wins).
NODE_PHASES: tuple[tuple[str, Phase], ...] = (
    ("ready", TaskExecution.RUNNING),  # ready >= 1: nodes are up and training
    ("active", TaskExecution.INITIALIZING),  # active >= 1, ready = 0: pods pending, pulling or starting
)


def failure_phase(ran: bool) -> Phase:
    """The rule for failed jobs (the contract's, target-neutral): retryable when it ran, permanent when it cannot.

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


def node_status(job: dict) -> dict:
    """`status.jobsStatus` entry of the replicated job `node` (empty when the JobSet has not reported yet).

    Args:
        job: the TrainJob as read from the API.

    Returns:
        `{name, ready, succeeded, failed, active, suspended}` with missing counts absent.
    """
    for entry in (job.get("status") or {}).get("jobsStatus") or []:
        if isinstance(entry, dict) and entry.get("name") == "node":
            return entry
    return {}


def _deciding(job: dict) -> Optional[dict]:
    return deciding_condition(job, TERMINAL_CONDITIONS)


def needs_pods(job: dict) -> bool:
    """Whether `trainjob_status` needs the job's pods (a failed job's root cause; a start that may be stuck).

    Args:
        job: the TrainJob as read from the API.

    Returns:
        True for a Failed job and for one whose nodes are active but none ready.
    """
    condition = _deciding(job)
    if condition is not None:
        return condition.get("type") == "Failed"
    node = node_status(job)
    return int(node.get("active") or 0) > 0 and int(node.get("ready") or 0) == 0


def needs_error_report(job: dict) -> bool:
    """Whether `trainjob_status` needs the task's error documents (the job failed: they decide retryable or not).

    Args:
        job: the TrainJob as read from the API.

    Returns:
        True when the deciding condition is Failed.
    """
    condition = _deciding(job)
    return condition is not None and condition.get("type") == "Failed"


def needs_events(job: dict, config: BackendConfig, now: datetime.datetime) -> bool:
    """Whether `trainjob_status` needs the job's events: never (see its `events` argument).

    Args:
        job: the TrainJob as read from the API.
        config: the backend config.
        now: the current time.

    Returns:
        False.
    """
    return False


def node_pods(pods: Optional[list[dict]]) -> list[dict]:
    """The pods named as nodes: copies labelled so that messages say `node-<index>` (from the completion index).

    Args:
        pods: the JobSet's pods.

    Returns:
        The pods, each a shallow copy with replica-type/index labels added.
    """
    out = []
    for pod in pods or []:
        meta = dict(pod.get("metadata") or {})
        labels = dict(meta.get("labels") or {})
        index = labels.get(COMPLETION_INDEX_LABEL) or (meta.get("annotations") or {}).get(COMPLETION_INDEX_LABEL)
        if index is not None:
            labels.setdefault("training.kubeflow.org/replica-type", "node")
            labels.setdefault("training.kubeflow.org/replica-index", str(index))
        meta["labels"] = labels
        out.append({**pod, "metadata": meta})
    return out


def trainjob_status(
    job: dict,
    pods: Optional[list[dict]],
    config: BackendConfig,
    now: datetime.datetime,
    errors: Optional[ErrorReport] = None,
    events: Optional[list[dict]] = None,
    events_problem: str = "",
) -> JobStatus:
    """Flyte phase and message of a TrainJob.

    Args:
        job: the TrainJob as read from the API.
        pods: its pods (label `jobset.sigs.k8s.io/jobset-name`), or None when they were not listed.
        config: supplies `trainjob_pickup_timeout_s` and `image_pull_grace_s`.
        now: the current time (timezone-aware).
        errors: the task's error documents when the job failed (`needs_error_report`); None when not read. They
            decide retryable or permanent by the same rule as a PyTorchJob's (`status.failed_job_status`).
        events: unused (a TrainJob without a JobSet is caught by `trainjob_pickup_timeout_s`); accepted so that every
            target's status reader has one signature.
        events_problem: unused, as `events`.

    Returns:
        The phase, a message saying why, and the deciding condition type ("" when jobsStatus decided).
    """
    meta = job.get("metadata") or {}
    name = f"{meta.get('namespace', '?')}/{meta.get('name', '?')}"
    nodes = node_pods(pods)
    condition = _deciding(job)
    node = node_status(job)
    expected = int(((job.get("spec") or {}).get("trainer") or {}).get("numNodes") or 1)
    if condition is not None:
        ctype = str(condition.get("type"))
        text = str(condition.get("message") or "")
        reason = str(condition.get("reason") or "")
        if ctype == "Failed":
            headline = f"TrainJob {name} failed ({reason or 'Failed'}): {text or 'the JobSet failed'}"
            return failed_job_status(headline, replica_failures(nodes), errors, condition=ctype)
        if ctype == "Complete":
            return JobStatus(TaskExecution.SUCCEEDED, text or "completed", ctype)
        if ctype == "Suspended":
            return JobStatus(TaskExecution.QUEUED, f"suspended, waiting for admission: {text or reason}", ctype)
        logger.warning("TrainJob %s has unknown condition %r; reporting it as running", name, ctype)
        return JobStatus(TaskExecution.RUNNING, f"running (unknown condition {ctype!r}: {text or reason})", ctype)
    if not node:
        return _not_picked_up(job, name, config, now)
    stuck = _fatal_waiting(nodes, job, config, now)
    if stuck is not None:
        return JobStatus(failure_phase(ran=False), stuck)
    ready, active = int(node.get("ready") or 0), int(node.get("active") or 0)
    counts = f"{ready}/{expected} nodes ready, {active} active"
    for key, phase in NODE_PHASES:
        if int(node.get(key) or 0) > 0:
            if phase == TaskExecution.INITIALIZING:
                pending = _pending_reason(nodes)
                return JobStatus(phase, f"starting nodes ({counts}){'; ' + pending if pending else ''}")
            return JobStatus(phase, f"running ({counts})")
    return JobStatus(TaskExecution.QUEUED, f"waiting for nodes ({counts})")


def _not_picked_up(job: dict, name: str, config: BackendConfig, now: datetime.datetime) -> JobStatus:
    created = parse_time((job.get("metadata") or {}).get("creationTimestamp"))
    age = max(0.0, (now - created).total_seconds()) if created else 0.0
    if age >= config.trainjob_pickup_timeout_s:
        ns = (job.get("metadata") or {}).get("namespace", "?")
        job_name = (job.get("metadata") or {}).get("name", "?")
        runtime = ((job.get("spec") or {}).get("runtimeRef") or {}).get("name", "?")
        return JobStatus(
            failure_phase(ran=False),
            f"TrainJob {name} has no condition and no node status {age:.0f}s after creation "
            f"(trainjob_pickup_timeout_s={config.trainjob_pickup_timeout_s:g}): the Kubeflow Trainer controller may "
            f"not be installed, the runtime {runtime!r} may not exist, or its JobSet could not be created. Check "
            f"`kubectl get events -n {ns} --field-selector involvedObject.name={job_name}`"
            f" and `kubectl get clustertrainingruntimes`.",
        )
    return JobStatus(TaskExecution.QUEUED, f"waiting for the Kubeflow Trainer controller to create nodes ({age:.0f}s)")
