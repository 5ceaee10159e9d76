"""The TrainJob status table, case by case (pure: job + pods + config + now -> phase and message)."""

from __future__ import annotations

import datetime

import pytest
from flyteidl.core.execution_pb2 import TaskExecution

from backend_plugin.config import BackendConfig
from backend_plugin.status import failure_phase
from backend_plugin.targets.trainjob.status import needs_pods, trainjob_status

NOW = datetime.datetime(2025, 1, 1, 0, 10, tzinfo=datetime.timezone.utc)
CONFIG = BackendConfig()


def cond(ctype: str, status: str = "True", reason: str = "", at: str = "2025-01-01T00:05:00Z") -> dict:
    return {"type": ctype, "status": status, "reason": reason, "message": f"{ctype} {reason}".strip(),
            "lastTransitionTime": at}  # fmt: skip


def job(conditions=(), node=None, created="2025-01-01T00:09:00Z") -> dict:
    status: dict = {"conditions": list(conditions)}
    if node is not None:
        status["jobsStatus"] = [{"name": "node", **node}]
    return {
        "kind": "TrainJob",
        "metadata": {"name": "j", "namespace": "ns", "creationTimestamp": created},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 3}},
        "status": status,
    }


CASES = [
    pytest.param(job(), TaskExecution.QUEUED, "waiting for the Kubeflow Trainer controller", id="new"),
    pytest.param(job([cond("Suspended", reason="Suspended")]), TaskExecution.QUEUED, "suspended", id="suspended"),
    # jobsStatus counts the child Jobs of the replicated job `node` (Trainer v2.3 `JobStatus`: `ready` is "the number
    # of child Jobs where the number of ready pods and completed pods is greater than or equal to the total expected
    # pod count"), one Job of numNodes pods in the torch runtime, not the nodes (seen on the real controllers)
    pytest.param(
        job([cond("Suspended", "False", "Resumed")], {"active": 1, "ready": 0}),
        TaskExecution.INITIALIZING,
        "starting nodes (3 nodes, not all ready yet)",
        id="resumed-false-ignored-starting",
    ),
    pytest.param(
        job(node={"active": 1, "ready": 1}), TaskExecution.RUNNING, "running (3 nodes, all ready)", id="running"
    ),  # fmt: skip
    pytest.param(job(node={"active": 0, "ready": 0}), TaskExecution.QUEUED, "waiting for nodes", id="jobset-idle"),
    # the JobSet counts the nodes' Job failed (or succeeded) before the Trainer writes the TrainJob's condition: the
    # nodes ran, the outcome is being written (not QUEUED again, as a TrainJob that never started)
    pytest.param(
        job(node={"active": 0, "ready": 0, "failed": 1}),
        TaskExecution.RUNNING,
        "the nodes' Job failed (3 nodes); waiting for the Trainer",
        id="node-job-failed-no-condition-yet",
    ),
    pytest.param(
        job(node={"active": 0, "ready": 0, "succeeded": 1}),
        TaskExecution.RUNNING,
        "the nodes' Job succeeded (3 nodes); waiting for the Trainer",
        id="node-job-succeeded-no-condition-yet",
    ),
    pytest.param(
        job([cond("Suspended", at="2025-01-01T00:01:00Z"), cond("Complete", reason="JobSetCompleted")]),
        TaskExecution.SUCCEEDED,
        "Complete",
        id="complete-wins",
    ),
    pytest.param(
        job([cond("Failed", reason="DeadlineExceeded")]),
        TaskExecution.RETRYABLE_FAILED,
        "failed (DeadlineExceeded)",
        id="failed-retryable",
    ),
    pytest.param(job([cond("Paused")]), TaskExecution.RUNNING, "unknown condition 'Paused'", id="unknown"),
    pytest.param(
        job(created="2025-01-01T00:00:00Z"),
        TaskExecution.FAILED,
        "trainjob_pickup_timeout_s=300",
        id="no-jobset-permanent",
    ),
]


@pytest.mark.parametrize("trainjob, phase, fragment", CASES)
def test_status_table(trainjob: dict, phase: int, fragment: str):
    status = trainjob_status(trainjob, None, CONFIG, NOW)
    assert status.phase == phase, status.message
    assert fragment in status.message


def test_image_that_never_pulls_is_a_permanent_failure_naming_the_node():
    pod = {
        "metadata": {"name": "j-node-0-2-abcde", "creationTimestamp": "2025-01-01T00:00:00Z",
                     "labels": {"batch.kubernetes.io/job-completion-index": "2"}},
        "status": {"containerStatuses": [{"name": "node", "state": {"waiting": {"reason": "ErrImagePull"}}}]},
    }  # fmt: skip
    status = trainjob_status(job(node={"active": 3, "ready": 0}), [pod], CONFIG, NOW)
    assert status.phase == TaskExecution.FAILED
    assert "node-2 cannot start: ErrImagePull" in status.message


def test_pods_are_listed_only_to_explain():
    assert needs_pods(job([cond("Failed")]))
    assert needs_pods(job(node={"active": 2, "ready": 0}))
    assert not needs_pods(job(node={"active": 3, "ready": 3}))
    assert not needs_pods(job([cond("Complete")]))
    assert not needs_pods(job())


def test_failure_rule():
    assert failure_phase(ran=True) == TaskExecution.RETRYABLE_FAILED
    assert failure_phase(ran=False) == TaskExecution.FAILED


# --- the contract's failure rule on a TrainJob: the task's own error document decides ----------------------------


def _node(index: int, **status: object) -> dict:
    return {
        "metadata": {"name": f"j-node-0-{index}-abcde", "creationTimestamp": "2025-01-01T00:09:10Z",
                     "labels": {"batch.kubernetes.io/job-completion-index": str(index)}},
        "status": {"phase": "Running", "containerStatuses": [{"name": "node", **status}]},
    }  # fmt: skip


FAILED_ONCE = {"exitCode": 1, "reason": "Error", "finishedAt": "2025-01-01T00:09:40Z"}


def test_nodes_that_ran_are_never_reported_as_queued_or_starting_again():
    """Seen on the real controllers: the torch runtime's node pods restart in place (`restartPolicy: OnFailure`), and
    while a failed node waits out its back-off the node Job is active and not ready; when the Job has failed, there is
    a moment when it counts neither active nor failed. Neither is a job starting or queued again: the nodes ran."""
    crash_loop = _node(2, state={"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s"}},
                       lastState={"terminated": FAILED_ONCE}, restartCount=1)  # fmt: skip
    restarting = trainjob_status(job(node={"active": 1, "ready": 0}), [_node(0, state={"running": {}}), crash_loop],
                                 CONFIG, NOW)  # fmt: skip
    assert restarting.phase == TaskExecution.RUNNING, restarting.message
    assert restarting.message.startswith("restarting nodes (3 nodes): node-2 (node): exit code 1"), restarting.message
    ended = job(node={"active": 0, "ready": 0, "failed": 0, "succeeded": 0})
    assert needs_pods(ended)
    status = trainjob_status(ended, [_node(2, state={"terminated": FAILED_ONCE})], CONFIG, NOW)
    assert status.phase == TaskExecution.RUNNING, status.message
    assert status.message.startswith("the nodes ended (3 nodes): node-2 (node): exit code 1; waiting for the Trainer")
    # before any node ran, it is what it was: waiting
    assert trainjob_status(ended, [], CONFIG, NOW).phase == TaskExecution.QUEUED
    starting = trainjob_status(job(node={"active": 1, "ready": 0}), [_node(0, state={"running": {}})], CONFIG, NOW)
    assert starting.phase == TaskExecution.INITIALIZING, starting.message


def test_nodes_starting_again_after_a_jobset_restart_are_the_job_running():
    """Seen on the real controllers: a failing node made the JobSet restart; its new pods (labelled with the restart
    attempt) waited to start while the node Job counted nothing, and GetTask went from RUNNING back to QUEUED."""

    def again(index: int, attempt: str, **status: object) -> dict:
        pod = _node(index, **status)
        pod["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] = attempt
        return pod

    pending = {"state": {"waiting": {"reason": "ContainerCreating"}}}
    nothing = job(node={"active": 0, "ready": 0, "failed": 0, "succeeded": 0})
    status = trainjob_status(nothing, [again(i, "1", **pending) for i in range(3)], CONFIG, NOW)
    assert status.phase == TaskExecution.RUNNING, status.message
    assert status.message == "restarting nodes (3 nodes; the JobSet's restart 1, none started yet)"
    starting = trainjob_status(job(node={"active": 3, "ready": 0}), [again(i, "2", **pending) for i in range(3)],
                               CONFIG, NOW)  # fmt: skip
    assert starting.phase == TaskExecution.RUNNING and "the JobSet's restart 2" in starting.message, starting.message
    # the first run's pods (attempt 0) are still a job starting, as before
    first = trainjob_status(nothing, [again(i, "0", **pending) for i in range(3)], CONFIG, NOW)
    assert first.phase == TaskExecution.QUEUED, first.message
