"""The PyTorchJob condition table and the messages that say why (pure: job, pods, config, now)."""

from __future__ import annotations

import datetime

import pytest
from flyteidl.core.execution_pb2 import TaskExecution as TE

from backend_plugin.config import BackendConfig
from backend_plugin.targets.pytorchjob.status import job_status, needs_pods
from tests.fakeapi.objects import condition, replica_pod

CREATED = "2025-01-01T00:00:00Z"
T0 = datetime.datetime(2025, 1, 1, tzinfo=datetime.timezone.utc)
CONFIG = BackendConfig.from_dict(dict(image_pull_grace_s=120, operator_pickup_timeout_s=300))


def job(conditions=(), replica_statuses=None, workers=2, start_time="2025-01-01T00:00:02Z"):
    status = {"conditions": list(conditions)}
    if replica_statuses is not None:
        status["replicaStatuses"] = replica_statuses
    if start_time:
        status["startTime"] = start_time
    return {
        "metadata": {"name": "j", "namespace": "ns", "creationTimestamp": CREATED},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": workers}}},
        "status": status,
    }


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


J = job()
UNSCHEDULABLE = replica_pod(J, "Worker", 0, phase="Pending", start_time=None, conditions=[
    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
     "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}])  # fmt: skip


def waiting(reason, message=""):
    pod = replica_pod(
        J, "Master", 0, phase="Pending", container_state={"waiting": {"reason": reason, "message": message}}
    )
    pod["metadata"]["creationTimestamp"] = CREATED
    return pod


def terminated(rtype, index, finished, **term):
    state = {"terminated": {"finishedAt": finished, **term}}
    return replica_pod(J, rtype, index, phase="Failed", container_state=state)


# (id, conditions, pods, seconds after creation, expected phase, substring of the message)
CASES = [
    ("created-queued", [condition("Created")], [], 10, TE.QUEUED, "pods created"),
    ("suspended-queued", [condition("Created"), condition("Suspended", message="held by kueue")], [], 10, TE.QUEUED,
     "suspended, waiting for admission: held by kueue"),
    ("running-running", [condition("Created"), condition("Running")], [], 10, TE.RUNNING, "running"),
    ("restarting-running", [condition("Restarting")], [], 10, TE.RUNNING, "restarting replicas"),
    ("succeeded-succeeded", [condition("Running", "False"), condition("Succeeded", message="done")], [], 10,
     TE.SUCCEEDED, "done"),
    ("failed-retryable", [condition("Failed", message="PyTorchJob j is failed.")], [], 10, TE.RETRYABLE_FAILED,
     "PyTorchJob j is failed."),
    ("unknown-running", [condition("Frobnicated")], [], 10, TE.RUNNING, "unknown condition 'Frobnicated'"),
    ("false-status-ignored", [condition("Created"), condition("Failed", "False")], [], 10, TE.QUEUED, "pods created"),
    ("unknown-status-ignored", [condition("Running"), condition("Succeeded", "Unknown")], [], 10, TE.RUNNING,
     "running"),
    ("latest-by-transition-time", [condition("Running", at="2025-01-01T00:05:00Z"),
                                   condition("Created", at="2025-01-01T00:00:01Z")], [], 400, TE.RUNNING, "running"),
    ("terminal-wins-over-later", [condition("Failed", message="boom", at="2025-01-01T00:01:00Z"),
                                  condition("Running", at="2025-01-01T00:05:00Z")], [], 400, TE.RETRYABLE_FAILED,
     "boom"),
    ("pending-unschedulable", [condition("Created")], [UNSCHEDULABLE], 600, TE.QUEUED,
     "worker-0 Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu."),
    ("pending-image-backoff-within-grace", [condition("Created")], [waiting("ImagePullBackOff", "Back-off pulling")],
     60, TE.QUEUED, "master-0 ImagePullBackOff: Back-off pulling"),
    ("image-pull-fails-after-grace", [condition("Created")], [waiting("ErrImagePull", "manifest unknown")], 121,
     TE.FAILED, "replica master-0 cannot start: ErrImagePull: manifest unknown"),
    ("invalid-image-fails-after-grace", [condition("Created")], [waiting("InvalidImageName")], 130, TE.FAILED,
     "InvalidImageName"),
    ("config-error-fails-after-grace", [condition("Running")], [waiting("CreateContainerConfigError",
     'secret "creds" not found')], 500, TE.FAILED, 'CreateContainerConfigError: secret "creds" not found'),
    ("operator-missing-waits", [], [], 299, TE.QUEUED, "waiting for the Kubeflow training operator"),
    ("operator-missing-times-out", [], [], 300, TE.FAILED, "the Kubeflow training operator may not be installed"),
    ("oom-killed-root-cause", [condition("Failed", message="PyTorchJob j is failed.")],
     [terminated("Master", 0, "2025-01-01T00:03:00Z", exitCode=1, reason="Error"),
      terminated("Worker", 1, "2025-01-01T00:02:00Z", exitCode=137, reason="OOMKilled")], 400, TE.RETRYABLE_FAILED,
     "Root cause: worker-1 (pytorch): OOMKilled, exit code 137, signal SIGKILL (the container exceeded its memory"),
    ("exit-code-root-cause", [condition("Failed", message="failed.")],
     [terminated("Worker", 0, "2025-01-01T00:02:00Z", exitCode=3, reason="Error", message="ValueError: bad lr")], 400,
     TE.RETRYABLE_FAILED, "worker-0 (pytorch): exit code 3; last output: ValueError: bad lr"),
    ("evicted-root-cause", [condition("Failed", message="failed.")],
     [{**replica_pod(J, "Worker", 0, phase="Failed"), "status": {"phase": "Failed", "reason": "Evicted",
       "message": "The node was low on resource: memory."}}], 400, TE.RETRYABLE_FAILED,
     "worker-0: pod Evicted: The node was low on resource: memory."),
]  # fmt: skip


@pytest.mark.parametrize(("conditions", "pods", "age", "phase", "message"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_status_table(conditions, pods, age, phase, message):
    status = job_status(job(conditions, replica_statuses={"Master": {"active": 1}}), pods, CONFIG, at(age))
    assert status.phase == phase
    assert message in status.message


def test_earliest_failing_replica_is_named_first():
    pods = [
        terminated("Worker", 0, "2025-01-01T00:09:00Z", exitCode=1),
        terminated("Master", 0, "2025-01-01T00:01:00Z", exitCode=2),
    ]
    status = job_status(job([condition("Failed", message="x")]), pods, CONFIG, at(900))
    assert "Root cause: master-0 (pytorch): exit code 2 (first of 2 failed replicas)" in status.message


@pytest.mark.parametrize(
    ("conditions", "statuses", "expected"),
    [
        ([condition("Running")], {"Master": {"active": 1}, "Worker": {"active": 2}}, False),
        ([condition("Running")], {"Master": {"active": 1}, "Worker": {"active": 1}}, True),
        ([condition("Created")], {}, True),
        ([condition("Failed")], {}, True),
        ([condition("Succeeded")], {}, False),
        ([condition("Suspended")], {}, False),
        ([], {}, False),
    ],
    ids=["steady-running", "running-short-a-replica", "created", "failed", "succeeded", "suspended", "no-conditions"],
)
def test_needs_pods_only_when_they_explain_something(conditions, statuses, expected):
    assert needs_pods(job(conditions, replica_statuses=statuses)) is expected


def test_a_suspended_job_the_operator_shows_as_created_is_queued_and_never_timed_out():
    """The operator keeps `Created` (and no start time) until it sees the suspension; `tests/targets/test_every_kind.py`
    has what every kind does with a suspended job."""
    held = job([condition("Created")], start_time=None)
    held["spec"]["runPolicy"] = {"suspend": True}
    config = BackendConfig.from_dict(dict(job_start_timeout_s=600, operator_pickup_timeout_s=300))
    status = job_status(held, None, config, at(7200))
    assert status.phase == TE.QUEUED and status.message.startswith("suspended, waiting for admission")
    assert not needs_pods(held)


def test_a_pod_kueue_gates_as_a_workload_of_its_own_says_what_kueue_lacks():
    """A job's pods carry the queue label; where Kueue does not manage the job's kind, its `pod` integration gates each
    pod as a Workload of its own (no gang admission). GetTask names the gate and the integration to enable."""
    gated = replica_pod(J, "Master", 0, phase="Pending", start_time=None, conditions=[
        {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
         "message": "Scheduling is blocked due to non-empty scheduling gates"}])  # fmt: skip
    gated["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    status = job_status(job([condition("Created")]), [gated], CONFIG, at(30))
    assert status.phase == TE.QUEUED
    gate = "master-0 SchedulingGated: Scheduling is blocked due to non-empty scheduling gates (gates: "
    assert gate in status.message
    assert "kubeflow.org/pytorchjob" in status.message and "Workload of its own" in status.message
    other = {**gated, "spec": {**gated["spec"], "schedulingGates": [{"name": "example.com/quota"}]}}
    said = job_status(job([condition("Created")]), [other], CONFIG, at(30)).message
    assert "(gates: example.com/quota)" in said and "Kueue" not in said
