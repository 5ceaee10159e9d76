"""The connector names a disruption on every kind: a pod with condition `DisruptionTarget` is named with its reason
and as not the task's failure, and a pod that exited 200 as stopped at a preemption's agreed step; a failure that is
neither (the task's exit 1, a SIGKILL, an OOM kill, a `DisruptionTarget` that is not True) is never called one."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from flyteidl.core.execution_pb2 import TaskExecution

from backend_plugin.config import BackendConfig
from backend_plugin.status import DISRUPTION_REASONS, disruption_text, replica_failures
from backend_plugin.targets.jobset.status import jobset_status
from backend_plugin.targets.pytorchjob.status import job_status, replica_name
from backend_plugin.targets.trainjob.status import node_name, trainjob_status
from backend_plugin.task_errors import ErrorReport, TaskError
from tests.fakeapi.objects import node_pod, replica_pod
from tests.targets.jobset import facts as jobset_facts
from tests.targets.jobset.test_status import cond, jobset

NOW = datetime.datetime(2025, 1, 1, 0, 10, tzinfo=datetime.timezone.utc)
CONFIG = BackendConfig()
PYTORCHJOB = {
    "metadata": {"name": "j", "namespace": "ns", "creationTimestamp": "2025-01-01T00:00:00Z"},
    "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 2}}},
}


def disrupted(reason: str = "PreemptionByScheduler", status: str = "True") -> list[dict]:
    return [{"type": "DisruptionTarget", "status": status, "reason": reason,
             "message": "Kubernetes' words", "lastTransitionTime": "2025-01-01T00:05:00Z"}]  # fmt: skip


def ended(code: int, at: str = "2025-01-01T00:05:10Z") -> dict[str, Any]:
    return {"terminated": {"exitCode": code, "reason": "Error", "startedAt": "2025-01-01T00:01:00Z", "finishedAt": at}}


def with_conditions(pod: dict, conditions: list[dict]) -> dict:
    pod["status"]["conditions"] = conditions
    return pod


def recoverable_system() -> ErrorReport:
    when = datetime.datetime(2025, 1, 1, 0, 5, 9, tzinfo=datetime.timezone.utc)
    summary = "PreemptedError: preempted: rank 1 (pod j-worker-1) got SIGTERM; every rank stopped after step 37"
    return ErrorReport((TaskError("RECOVERABLE", "SYSTEM", "SYSTEM", summary, "j-worker-1", when, "error.pb"),))


@pytest.mark.parametrize("reason", [*DISRUPTION_REASONS, "SomeNewReason", ""])
def test_each_reason_is_named_as_given(reason: str):
    pod = replica_pod(PYTORCHJOB, "Worker", 1, conditions=disrupted(reason))
    text = disruption_text([pod], replica_name)
    assert text.startswith("worker-1 is disrupted (DisruptionTarget") and text.endswith("not the task's failure")
    if reason:
        assert f"DisruptionTarget {reason}" in text
        assert DISRUPTION_REASONS.get(reason, "") in text
    else:
        assert "no reason given" in text


def test_the_peers_that_stopped_at_the_agreed_step_are_not_failures():
    pods = [
        replica_pod(PYTORCHJOB, "Master", 0, phase="Failed", container_state=ended(200)),
        replica_pod(PYTORCHJOB, "Worker", 0, phase="Failed", container_state=ended(200)),
        replica_pod(
            PYTORCHJOB,
            "Worker",
            1,
            phase="Failed",
            container_state=ended(200, "2025-01-01T00:05:12Z"),
            conditions=disrupted("EvictionByEvictionAPI"),
        ),  # fmt: skip
    ]
    text = disruption_text(pods, replica_name)
    assert text.startswith("worker-1 is disrupted (DisruptionTarget EvictionByEvictionAPI: evicted through")
    assert "master-0, worker-0 stopped at the agreed step for a preemption (exit code 200), not a failure" in text
    failures = replica_failures(pods, replica_name)
    # the disrupted pod leads although its peers exited two seconds before it: it is why they stopped
    assert [f.replica for f in failures] == ["worker-1", "master-0", "worker-0"]
    assert all(f.system for f in failures)
    assert "disrupted (DisruptionTarget EvictionByEvictionAPI" in failures[0].description
    assert "stopped at the agreed step for a preemption, not the task's failure" in failures[1].description


@pytest.mark.parametrize(
    "state, conditions",
    [
        pytest.param(ended(1), None, id="the-task-raised"),
        pytest.param(ended(137), None, id="sigkill"),
        pytest.param(ended(143), None, id="sigterm-without-the-api"),
        pytest.param(ended(20), None, id="exit-20"),
        pytest.param(ended(1), disrupted(status="False"), id="disruption-target-false"),
        pytest.param({"running": {}}, None, id="running"),
    ],
)
def test_no_false_positives(state: dict, conditions):
    pod = replica_pod(PYTORCHJOB, "Worker", 1, phase="Failed" if "terminated" in state else "Running",
                      container_state=state, conditions=conditions)  # fmt: skip
    assert disruption_text([pod], replica_name) == ""
    for failure in replica_failures([pod], replica_name):
        assert "disrupted" not in failure.description and "agreed step" not in failure.description
        assert failure.preemption == ""


def test_pytorchjob_restarting_under_exit_code_names_the_preempted_pod():
    job = {**PYTORCHJOB, "status": {"conditions": [
        {"type": "Running", "status": "False", "lastTransitionTime": "2025-01-01T00:05:00Z"},
        {"type": "Restarting", "status": "True", "reason": "PyTorchJobRestarting", "lastTransitionTime":
         "2025-01-01T00:05:11Z", "message": "job j is restarting because Worker replica(s) failed."},
    ], "startTime": "2025-01-01T00:00:02Z"}}  # fmt: skip
    pods = [
        replica_pod(PYTORCHJOB, "Master", 0, phase="Failed", container_state=ended(200)),
        replica_pod(PYTORCHJOB, "Worker", 0, container_state={"running": {}}),  # already recreated
        replica_pod(PYTORCHJOB, "Worker", 1, phase="Failed", container_state=ended(200), conditions=disrupted()),
    ]
    status = job_status(job, pods, CONFIG, NOW)
    assert status.phase == TaskExecution.RUNNING
    assert status.message.startswith(
        "restarting replicas: worker-1 is disrupted (DisruptionTarget PreemptionByScheduler: preempted by the "
        "scheduler for a pod of higher priority), not the task's failure; master-0 stopped at the agreed step"
    ), status.message


def test_pytorchjob_failed_under_never_is_retryable_and_says_why():
    job = {**PYTORCHJOB, "status": {"conditions": [
        {"type": "Failed", "status": "True", "reason": "PyTorchJobFailed", "lastTransitionTime":
         "2025-01-01T00:05:13Z", "message": "PyTorchJob ns/j has failed because 3 Worker replica(s) failed."},
    ], "startTime": "2025-01-01T00:00:02Z"}}  # fmt: skip
    pods = [
        replica_pod(PYTORCHJOB, "Master", 0, phase="Failed", container_state=ended(200)),
        replica_pod(
            PYTORCHJOB,
            "Worker",
            1,
            phase="Failed",
            container_state=ended(200, "2025-01-01T00:05:12Z"),
            conditions=disrupted("DeletionByTaintManager"),
        ),  # fmt: skip
    ]
    status = job_status(job, pods, CONFIG, NOW, errors=recoverable_system())
    assert status.phase == TaskExecution.RETRYABLE_FAILED
    assert "Root cause: worker-1 (pytorch): exit code 200; disrupted (DisruptionTarget DeletionByTaintManager: " \
        "deleted by the taint manager" in status.message  # fmt: skip


def test_a_jobset_restart_after_a_preemption_names_the_pod_of_the_previous_run():
    job = jobset((cond("RestartingJobSet", reason="FailurePolicy_Preempted", message="applying RestartJobSetAndIgnore"
                       "MaxRestarts failure policy action (first failed job: j-worker-0)"),),  # fmt: skip
                 jobs={"master": {"active": 1}, "worker": {"active": 1}}, restarts=1)  # fmt: skip
    before = [
        with_conditions(
            jobset_facts.pod(job, 1, "Failed", terminated=ended(200)["terminated"]), disrupted("TerminationByKubelet")
        ),  # fmt: skip
        jobset_facts.pod(job, 0, "Failed", role="master", terminated=ended(200)["terminated"]),
    ]
    now = [
        jobset_facts.pod(job, 0, "Pending", role="master", attempt=1),
        jobset_facts.pod(job, 1, "Pending", attempt=1),
    ]
    status = jobset_status(job, before + now, CONFIG, NOW)
    assert status.phase == TaskExecution.RUNNING
    assert status.message.startswith(
        "restarting: worker-1 is disrupted (DisruptionTarget TerminationByKubelet: ended by the kubelet"
    ), status.message
    assert "master-0 stopped at the agreed step for a preemption (exit code 200), not a failure; not counted toward " \
        "maxRestarts: applying RestartJobSetAndIgnoreMaxRestarts" in status.message  # fmt: skip
    # a restart the budget paid for does not speak of a preemption, whatever the old pods show
    counted = jobset((cond("RestartingJobSet", reason="DefaultFailurePolicy", message="applying RestartJobSet"),),
                     jobs={"master": {"active": 1}}, restarts=1, counted=1)  # fmt: skip
    assert "disrupted" not in jobset_status(counted, before + now, CONFIG, NOW).message


def test_a_trainjob_that_failed_for_a_preemption_names_the_node():
    job = {"kind": "TrainJob", "metadata": {"name": "j", "namespace": "ns", "creationTimestamp":
           "2025-01-01T00:00:00Z"}, "spec": {"trainer": {"numNodes": 2}}, "status": {"conditions": [
           {"type": "Failed", "status": "True", "reason": "FailedJobs", "message": "jobset failed",
            "lastTransitionTime": "2025-01-01T00:05:13Z"}]}}  # fmt: skip
    pods = [with_conditions(node_pod(job, 1, "Failed", terminated=ended(200)["terminated"]),
                            disrupted("PreemptionByScheduler")),  # fmt: skip
            node_pod(job, 0, "Failed", terminated=ended(200)["terminated"])]  # fmt: skip
    status = trainjob_status(job, pods, CONFIG, NOW, errors=recoverable_system())
    assert status.phase == TaskExecution.RETRYABLE_FAILED
    assert "node-1 (node): exit code 200; disrupted (DisruptionTarget PreemptionByScheduler" in status.message
    assert node_name(pods[1]) == "node-0"


@pytest.mark.parametrize("reason", ["SuspendedJobs", ""])
def test_a_suspended_jobset_is_queued(reason: str):
    conditions = (cond("Suspended", reason=reason, message="jobset is suspended"),) if reason else ()
    job = jobset(conditions, jobs={"master": {"suspended": 1}, "worker": {"suspended": 1}}, suspend=True)
    status = jobset_status(job, [], CONFIG, NOW)
    assert status.phase == TaskExecution.QUEUED and status.message.startswith("suspended, waiting for admission")
    # resumed (Kueue admitted it): spec.suspend false, the Suspended condition False
    resumed = jobset((cond("Suspended", "False", "ResumeJobs", "jobset is resumed"),),
                     jobs={"master": {"ready": 1}, "worker": {"ready": 1}}, suspend=False)  # fmt: skip
    assert jobset_status(resumed, [], CONFIG, NOW).phase == TaskExecution.RUNNING
