"""TrainJob status -> Flyte phase and a message that says why (the Trainer v2 sibling of the PyTorchJob table).

A TrainJob has only three condition types (`Suspended`, `Complete`, `Failed`) and no Created or Running condition:
a running job has no true condition at all. So the phase comes from two places, in this order:

1. `status.conditions`, only those whose status is "True" (a terminal one wins: `TERMINAL_CONDITIONS`), by the
   table `CONDITIONS`: Complete is SUCCEEDED, Suspended is QUEUED, Failed is decided by the rule every kind shares
   (`status.failed_job_status`: retryable unless the task's own error document says it is not), and an unknown type
   is still running (and logged), never an error;
2. `status.jobsStatus`, the entry of the torch runtime's replicated job `node` (`NODE_PHASES`). Its counts are child
   Jobs, not nodes (Trainer v2.3 `JobStatus`: `ready` is the number of Jobs whose ready and completed pods reach the
   Job's pod count); the torch runtime's `node` is one Job of `numNodes` pods. A ready Job means every node is up
   (RUNNING), an active one that some are still starting (INITIALIZING); a Job that failed or succeeded before the
   Trainer wrote the TrainJob's condition means the nodes ran and the outcome is on its way (RUNNING).

A job with neither was never turned into a JobSet: QUEUED while the Trainer controller may still pick it up, and a
permanent FAILED after `BackendConfig.trainjob_pickup_timeout_s` (a missing runtime or an unbuildable JobSet only
shows as an Event). Pods explain failures (the earliest failing node) and stuck starts (an image that cannot be
pulled past `BackendConfig.image_pull_grace_s` is a permanent FAILED). Pods are named `node-<index>` from their
completion index. A job whose spec holds it (`spec.suspend: true`, Kueue or an admin) is QUEUED until a terminal
condition says otherwise, and is never timed out. Pure: (job, pods, config, now, error documents) in, `JobStatus` out.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, Optional

from flyteidl.core.execution_pb2 import TaskExecution

from backend_plugin.config import BackendConfig
from backend_plugin.kinds.trainjob import TrainJobSettings
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
    failure_phase,
    fatal_waiting,
    not_picked_up,
    pending_reason,
    pod_name,
    replica_failures,
)
from backend_plugin.task_errors import ErrorReport
from pytorch_contract.k8s_names import COMPLETION_INDEX_LABEL, JOBSET_RESTART_ATTEMPT_LABEL

KUEUE_FRAMEWORK = "trainer.kubeflow.org/trainjob"
"""This kind's name in Kueue's `integrations.frameworks` (Kueue then admits the job whole, not its pods)."""

__all__ = [
    "TERMINAL_CONDITIONS",
    "CONDITIONS",
    "NODE_PHASES",
    "trainjob_status",
    "suspended",
    "needs_pods",
    "needs_error_report",
    "node_status",
    "node_index",
    "node_name",
]

logger = logging.getLogger(__name__)

TERMINAL_CONDITIONS = ("Failed", "Complete")  # checked first: a terminal condition wins over Suspended

# jobsStatus[name=node] with no true condition -> Flyte phase (first matching row wins); the counts are child Jobs.
NODE_PHASES: tuple[tuple[str, Phase], ...] = (
    ("failed", TaskExecution.RUNNING),  # the nodes' Job failed: the Trainer is about to write Failed
    ("ready", TaskExecution.RUNNING),  # ready >= 1: every node of the Job is up and training
    ("succeeded", TaskExecution.RUNNING),  # the nodes' Job succeeded: the Trainer is about to write Complete
    ("active", TaskExecution.INITIALIZING),  # active >= 1, ready = 0: some node pending, pulling or starting
)


def node_status(job: Mapping[str, Any]) -> Mapping[str, Any]:
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


def suspended(job: Mapping[str, Any]) -> bool:
    """Whether the job's spec holds it (`spec.suspend: true`).

    Args:
        job: the TrainJob as read from the API.

    Returns:
        True for a suspended job.
    """
    spec = job.get("spec") or {}
    return isinstance(spec, Mapping) and spec.get("suspend") is True


def needs_pods(job: Mapping[str, Any]) -> bool:
    """Whether `trainjob_status` needs the job's pods (a failed job's root cause; a start that may be stuck).

    Args:
        job: the TrainJob as read from the API.

    Returns:
        True for a Failed job, for one whose node Job is active but not ready (a node starting, or restarting in
        place), and for one whose node Job counts nothing (not created yet, or ended and not counted yet).
    """
    ctype = deciding_type(job, TERMINAL_CONDITIONS)
    if ctype == "Failed":
        return True
    if ctype is not None or suspended(job):
        return False
    node = node_status(job)
    counts = [int(node.get(key) or 0) for key in ("active", "ready", "failed", "succeeded")]
    # active and not ready: a node starting, or one waiting to restart in place; nothing counted: a node Job not
    # created yet, or one that ended and is not counted failed or succeeded yet (the pods tell which)
    return (counts[0] > 0 and counts[1] == 0) or (bool(node) and not any(counts))


def needs_error_report(job: Mapping[str, Any]) -> bool:
    """Whether `trainjob_status` needs the task's error documents (the job failed: they decide retryable or not).

    Args:
        job: the TrainJob as read from the API.

    Returns:
        True when the deciding condition is Failed.
    """
    return deciding_type(job, TERMINAL_CONDITIONS) == "Failed"


def node_index(pod: Mapping[str, Any]) -> Optional[int]:
    """A TrainJob pod's node index: its completion index (label, else annotation).

    Args:
        pod: a pod of the TrainJob's JobSet.

    Returns:
        The index, or None when the pod carries none.
    """
    meta = pod.get("metadata") or {}
    raw = (meta.get("labels") or {}).get(COMPLETION_INDEX_LABEL) or (meta.get("annotations") or {}).get(
        COMPLETION_INDEX_LABEL
    )
    return int(raw) if raw is not None and str(raw).isdigit() else None


def node_name(pod: Mapping[str, Any]) -> str:
    """A TrainJob pod's name in messages: `node-<index>`.

    Args:
        pod: a pod of the TrainJob's JobSet.

    Returns:
        e.g. `node-1`; the pod's name when it has no completion index.
    """
    index = node_index(pod)
    return pod_name(pod) if index is None else f"node-{index}"


class _Read(NamedTuple):
    """What one evaluation of a TrainJob reads: the job, its name for messages, its pods, the deciding condition,
    the `node` entry of `jobsStatus`, and the task's error documents."""

    job: Mapping[str, Any]
    name: str
    nodes: Sequence[Mapping[str, Any]]
    condition: Optional[Mapping[str, Any]]
    node: Mapping[str, Any]
    errors: Optional[ErrorReport]

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
    headline = f"TrainJob {read.name} failed ({read.reason or 'Failed'}): {read.text or 'the JobSet failed'}"
    return failed_job_status(headline, replica_failures(read.nodes, node_name), read.errors, condition=read.ctype)


def _complete(read: _Read) -> JobStatus:
    return JobStatus(TaskExecution.SUCCEEDED, read.text or "completed", read.ctype)


def _suspended(read: _Read) -> JobStatus:
    return JobStatus(TaskExecution.QUEUED, f"suspended, waiting for admission: {read.text or read.reason}", read.ctype)


def _unknown(read: _Read) -> JobStatus:
    logger.warning("TrainJob %s has unknown condition %r; reporting it as running", read.name, read.ctype)
    text = read.text or read.reason
    return JobStatus(TaskExecution.RUNNING, f"running (unknown condition {read.ctype!r}: {text})", read.ctype)


# TrainJob condition type (Kubeflow Trainer v2, only those whose status is "True") -> how it is reported. A terminal
# one wins (`TERMINAL_CONDITIONS`); any other type is unknown: still running, and a log line (`_unknown`).
CONDITIONS: dict[str, Callable[[_Read], JobStatus]] = {
    "Failed": _failed,  # FAILED or RETRYABLE_FAILED: the rule every kind shares (`status.failed_job_status`)
    "Complete": _complete,  # SUCCEEDED: the JobSet's success policy was met
    "Suspended": _suspended,  # QUEUED: spec.suspend (Kueue, an admin): waits for admission, no nodes
}


def trainjob_status(
    job: Mapping[str, Any],
    pods: Optional[Sequence[Mapping[str, Any]]],
    config: BackendConfig,
    now: datetime.datetime,
    errors: Optional[ErrorReport] = None,
) -> JobStatus:
    """Flyte phase and message of a TrainJob: its spec's hold, else its deciding condition (`CONDITIONS`), else its
    nodes (`NODE_PHASES`).

    Args:
        job: the TrainJob as read from the API.
        pods: its pods (label `jobset.sigs.k8s.io/jobset-name`), or None when they were not listed.
        config: supplies `trainjob_pickup_timeout_s` and `image_pull_grace_s`.
        now: the current time (timezone-aware).
        errors: the task's error documents when the job failed (`needs_error_report`); None when not read. They
            decide retryable or permanent by the same rule as a PyTorchJob's (`status.failed_job_status`).

    Returns:
        The phase, a message saying why, and the deciding condition type ("" when jobsStatus decided).
    """
    meta = job.get("metadata") or {}
    name = f"{meta.get('namespace', '?')}/{meta.get('name', '?')}"
    condition = deciding_condition(job, TERMINAL_CONDITIONS)
    read = _Read(job, name, pods or [], condition, node_status(job), errors)
    if read.ctype not in TERMINAL_CONDITIONS and suspended(job):
        why = condition_text(condition) if condition is not None and read.ctype == "Suspended" else ""
        return JobStatus(TaskExecution.QUEUED, f"suspended, waiting for admission: {why or 'spec.suspend'}", read.ctype)
    if condition is not None:
        return CONDITIONS.get(read.ctype, _unknown)(read)
    if not read.node:
        return _not_picked_up(job, name, config, now)
    return _from_nodes(read, config, now)


def _from_nodes(read: _Read, config: BackendConfig, now: datetime.datetime) -> JobStatus:
    """A job with no true condition: its `jobsStatus` entry (`NODE_PHASES`), or its pods when they are stuck."""
    stuck = fatal_waiting(read.nodes, read.job, config, now, node_name)
    if stuck is not None:
        return JobStatus(failure_phase(ran=False), stuck)
    expected = int(((read.job.get("spec") or {}).get("trainer") or {}).get("numNodes") or 1)
    nodes = f"{expected} node{'s' if expected != 1 else ''}"
    row = next((key for key, _ in NODE_PHASES if int(read.node.get(key) or 0) > 0), "")
    phase = dict(NODE_PHASES).get(row, TaskExecution.QUEUED)
    if row in ("failed", "succeeded"):
        return JobStatus(phase, f"the nodes' Job {row} ({nodes}); waiting for the Trainer controller to write the "
                                "TrainJob's outcome")  # fmt: skip
    # a node that failed: restarted in place (its previous run in lastState), or ended before its Job was counted
    failure = earliest_failure(read.nodes, node_name) or earliest_failure(read.nodes, node_name, last_state=True)
    if row == "active" and failure:
        return JobStatus(TaskExecution.RUNNING, f"restarting nodes ({nodes}): {failure}")
    if not row and (failure or any(_ran(pod) for pod in read.nodes)):
        detail = f": {failure}" if failure else ""
        waiting = "waiting for the Trainer controller to write the TrainJob's outcome"
        return JobStatus(TaskExecution.RUNNING, f"the nodes ended ({nodes}){detail}; {waiting}")
    restart = _restart_attempt(read.nodes)
    if row == "active":
        pending = pending_reason(read.nodes, node_name, accelerator_keys(config), KUEUE_FRAMEWORK)
        if restart:
            return JobStatus(TaskExecution.RUNNING, f"restarting nodes ({nodes}; the JobSet's restart {restart}, not "
                                                    f"all ready yet){'; ' + pending if pending else ''}")  # fmt: skip
        return JobStatus(phase, f"starting nodes ({nodes}, not all ready yet){'; ' + pending if pending else ''}")
    if not row:
        if restart:
            return JobStatus(TaskExecution.RUNNING, f"restarting nodes ({nodes}; the JobSet's restart {restart}, "
                                                    "none started yet)")  # fmt: skip
        return JobStatus(phase, f"waiting for nodes ({nodes}, none started yet)")
    disrupted = disruption_text(read.nodes, node_name)  # only where the nodes were read (never a steady poll)
    return JobStatus(phase, f"running ({nodes}, all ready){'; ' + disrupted if disrupted else ''}")


def _restart_attempt(pods: Sequence[Mapping[str, Any]]) -> int:
    """The highest JobSet restart attempt the nodes' pods are labelled with (`jobset.sigs.k8s.io/restart-attempt`,
    which JobSet sets on every pod it recreates): above 0, the nodes ran before and are starting again after a
    restart of the whole JobSet, which is the job running, not queued or starting (seen on the real controllers:
    GetTask went from RUNNING back to QUEUED while the new nodes waited to start)."""
    attempts = [((pod.get("metadata") or {}).get("labels") or {}).get(JOBSET_RESTART_ATTEMPT_LABEL) for pod in pods]
    return max((int(a) for a in attempts if isinstance(a, str) and a.isdigit()), default=0)


def _ran(pod: Mapping[str, Any]) -> bool:
    """Whether a node's container ran (a terminated state, now or before a restart)."""
    for c in (pod.get("status") or {}).get("containerStatuses") or []:
        if isinstance(c, Mapping) and (
            (c.get("state") or {}).get("terminated") or (c.get("lastState") or {}).get("terminated")
        ):
            return True
    return False


def _not_picked_up(job: Mapping[str, Any], name: str, config: BackendConfig, now: datetime.datetime) -> JobStatus:
    meta = job.get("metadata") or {}
    ns, job_name = meta.get("namespace", "?"), meta.get("name", "?")
    runtime = ((job.get("spec") or {}).get("runtimeRef") or {}).get("name", "?")
    timeout = config.kind(TrainJobSettings).pickup_timeout_s
    return not_picked_up(
        job,
        now,
        timeout,
        "waiting for the Kubeflow Trainer controller to create nodes",
        lambda age: (
            f"TrainJob {name} has no condition and no node status {age:.0f}s after creation "
            f"(trainjob_pickup_timeout_s={timeout:g}): the Kubeflow Trainer controller may not be installed, the "
            f"runtime {runtime!r} may not exist, or its JobSet could not be created. Check "
            f"`kubectl get events -n {ns} --field-selector involvedObject.name={job_name}` and "
            "`kubectl get clustertrainingruntimes`."
        ),
    )
