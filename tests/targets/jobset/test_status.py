"""The JobSet status table, case by case (pure: job + pods + config + now -> phase and message)."""

from __future__ import annotations

import datetime
from typing import Any, Optional

import pytest
from flyteidl.core.execution_pb2 import TaskExecution

from backend_plugin.config import BackendConfig
from backend_plugin.targets.jobset.status import (
    current_pods,
    jobset_status,
    needs_error_report,
    needs_events,
    needs_pods,
    replica_name,
    restarts_text,
)
from tests.targets.jobset.facts import pod

NOW = datetime.datetime(2025, 1, 1, 0, 10, tzinfo=datetime.timezone.utc)
CONFIG = BackendConfig()


def cond(ctype: str, status: str = "True", reason: str = "", message: str = "", at: str = "2025-01-01T00:05:00Z"):
    return {"type": ctype, "status": status, "reason": reason, "message": message or f"{ctype} {reason}".strip(),
            "lastTransitionTime": at}  # fmt: skip


def jobset(
    conditions: tuple = (),
    jobs: Optional[dict[str, dict]] = None,
    created: str = "2025-01-01T00:09:00Z",
    restarts: int = 0,
    counted: int = 0,
    **spec: Any,
) -> dict:
    """A JobSet of a master and a worker Job (3 pods) as the API answers it."""
    status: dict = {"conditions": list(conditions)}
    if jobs is not None:
        status["replicatedJobsStatus"] = [
            {"name": n, "ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0, **c}
            for n, c in jobs.items()
        ]
    if restarts:
        status["restarts"], status["restartsCountTowardsMax"] = restarts, counted
    return {
        "kind": "JobSet",
        "metadata": {"name": "j", "namespace": "ns", "creationTimestamp": created},
        "spec": {
            "replicatedJobs": [{"name": "master", "replicas": 1}, {"name": "worker", "replicas": 1}],
            "failurePolicy": {"maxRestarts": 6},
            **spec,
        },  # fmt: skip
        "status": status,
    }


ALL_READY = {"master": {"ready": 1, "active": 1}, "worker": {"ready": 1, "active": 1}}
STARTING = {"master": {"active": 1}, "worker": {"active": 1}}

CASES = [
    pytest.param(jobset(), TaskExecution.QUEUED, "waiting for the JobSet controller", id="new"),
    pytest.param(jobset(jobs={"master": {}, "worker": {}}), TaskExecution.QUEUED, "waiting for pods", id="seen"),
    pytest.param(
        jobset(jobs=STARTING), TaskExecution.INITIALIZING, "starting pods (child Jobs ready: master 0/1", id="starting"
    ),  # fmt: skip
    pytest.param(
        jobset(jobs=ALL_READY),
        TaskExecution.RUNNING,
        "running (child Jobs ready: master 1/1, worker 1/1)",
        id="running",
    ),  # fmt: skip
    pytest.param(
        jobset(jobs={"master": {"ready": 1, "active": 1}, "worker": {"succeeded": 1}}),
        TaskExecution.RUNNING,
        "worker 1/1",
        id="workers-done-master-running",
    ),
    # the JobSet controller counts a child Job failed before it applies its failure policy (the Failed or
    # RestartingJobSet condition): the job ran and carries on or ends, it does not start again (seen on the real
    # controllers: the worker's Job failed while the master's ran)
    pytest.param(
        jobset(jobs={"master": {"ready": 1, "active": 1}, "worker": {"failed": 1}}),
        TaskExecution.RUNNING,
        "a child Job failed (worker); the JobSet controller applies its failure policy (child Jobs ready: master 1/1,"
        " worker 0/1)",
        id="a-child-job-failed-no-condition-yet",
    ),
    pytest.param(
        jobset(
            (cond("Suspended", reason="SuspendedJobs", message="jobset is suspended"),), {"master": {}}, suspend=True
        ),
        TaskExecution.QUEUED,
        "suspended, waiting for admission: jobset is suspended",
        id="suspended",
    ),
    pytest.param(
        jobset((cond("Suspended", "False", "ResumeJobs"),), STARTING),
        TaskExecution.INITIALIZING,
        "starting pods",
        id="resumed-false-ignored",
    ),
    pytest.param(
        jobset(
            (
                cond(
                    "RestartingJobSet",
                    reason="FailurePolicy_Preempted",
                    message="applying RestartJobSetAndIgnore"
                    "MaxRestarts failure policy action (first failed job: j-worker-0)",
                ),
            ),
            STARTING,
            restarts=1,
        ),
        TaskExecution.RUNNING,
        "restarting: a pod was disrupted (preemption, eviction or host maintenance) or stopped at a preemption's "
        "agreed step; not counted toward maxRestarts: applying",
        id="restarting-after-preemption",
    ),
    pytest.param(
        jobset(
            (
                cond(
                    "RestartingJobSet",
                    reason="DefaultFailurePolicy",
                    message="applying RestartJobSet failure policy action (first failed job: j-worker-0)",
                ),
            ),
            STARTING,
            restarts=2,
            counted=2,
        ),
        TaskExecution.RUNNING,
        "restarting: applying RestartJobSet failure policy action (first failed job: j-worker-0) (restarted 2 times, "
        "2 counted toward maxRestarts 6)",
        id="restarting-counted",
    ),
    pytest.param(
        jobset((cond("RestartingJobSet", "False", "JobsReady"),), ALL_READY, restarts=1, counted=1),
        TaskExecution.RUNNING,
        "running (child Jobs ready: master 1/1, worker 1/1) (restarted once, 1 counted toward maxRestarts 6)",
        id="restarted-and-running-again",
    ),
    pytest.param(
        jobset(
            (
                cond("Suspended", at="2025-01-01T00:01:00Z"),
                cond("Completed", reason="AllJobsCompleted", message="jobset completed successfully"),
            ),
            ALL_READY,
        ),  # fmt: skip
        TaskExecution.SUCCEEDED,
        "jobset completed successfully",
        id="completed-wins",
    ),
    pytest.param(
        jobset(
            (
                cond(
                    "Failed",
                    reason="ReachedMaxRestarts",
                    message="jobset failed due to reaching max number of restarts (first failed job: j-worker-0)",
                ),
            ),
            ALL_READY,
            restarts=6,
            counted=6,
        ),
        TaskExecution.RETRYABLE_FAILED,
        "JobSet ns/j failed (ReachedMaxRestarts): jobset failed due to reaching max number of restarts (first failed "
        "job: j-worker-0). (restarted 6 times, 6 counted toward maxRestarts 6)",
        id="failed-after-restarts",
    ),
    pytest.param(
        jobset((cond("Paused"),), ALL_READY), TaskExecution.RUNNING, "unknown condition 'Paused'", id="unknown"
    ),
    pytest.param(
        jobset((cond("StartupPolicyCompleted", reason="InOrderStartupPolicyCompleted"),), ALL_READY),
        TaskExecution.RUNNING,
        "running (child Jobs",
        id="startup-policy-reads-the-jobs",
    ),
    pytest.param(
        jobset(created="2025-01-01T00:00:00Z"),
        TaskExecution.FAILED,
        "has no status 600s after creation (jobset_pickup_timeout_s=300): the JobSet controller may not be installed",
        id="never-picked-up",
    ),
    pytest.param(
        jobset(created="2025-01-01T00:00:00Z", suspend=True),
        TaskExecution.QUEUED,
        "suspended, waiting for admission: spec.suspend",
        id="suspended-never-times-out",
    ),
]


@pytest.mark.parametrize("job, phase, fragment", CASES)
def test_status_table(job: dict, phase: int, fragment: str):
    status = jobset_status(job, [], CONFIG, NOW)
    assert (status.phase, fragment in status.message) == (phase, True), status.message


def test_a_jobset_whose_pods_never_appear_fails_with_its_events():
    job = jobset(jobs={"master": {}, "worker": {}}, created="2025-01-01T00:00:00Z")
    assert needs_events(job, CONFIG, NOW) and not needs_events(job, CONFIG, NOW - datetime.timedelta(minutes=5))
    event = {"type": "Warning", "reason": "JobCreationFailed", "message": 'Job.batch "j-worker-0" is invalid: x',
             "lastTimestamp": "2025-01-01T00:00:30Z"}  # fmt: skip
    status = jobset_status(job, [], CONFIG, NOW, events=[event])
    assert status.phase == TaskExecution.FAILED
    assert "has not started 600s after creation (jobset_start_timeout_s=600)" in status.message
    assert 'JobCreationFailed: Job.batch "j-worker-0" is invalid: x' in status.message
    assert "kubectl describe jobs -n ns -l jobset.sigs.k8s.io/jobset-name=j" in status.message
    # a JobSet that ran once (its pods were restarted) is not "never started"
    assert not needs_events(jobset(jobs={"master": {}, "worker": {}}, created="2025-01-01T00:00:00Z", restarts=1),
                            CONFIG, NOW)  # fmt: skip
    off = BackendConfig.from_dict({"jobset_start_timeout_s": None})
    assert jobset_status(job, [], off, NOW).phase == TaskExecution.QUEUED


def test_image_that_never_pulls_is_a_permanent_failure_naming_the_pod():
    job = jobset(jobs=STARTING, created="2025-01-01T00:00:00Z")
    stuck = pod(job, 1, "Pending", waiting={"reason": "ImagePullBackOff", "message": "pull access denied"})
    stuck["status"]["startTime"] = "2025-01-01T00:00:10Z"
    status = jobset_status(job, [pod(job, 0, role="master"), stuck], CONFIG, NOW)
    assert status.phase == TaskExecution.FAILED and "worker-1" in status.message, status.message


def test_pods_are_listed_only_to_explain():
    assert needs_pods(jobset((cond("Failed"),), ALL_READY)) and needs_error_report(jobset((cond("Failed"),)))
    assert needs_pods(jobset(jobs=STARTING))
    for quiet in (jobset(jobs=ALL_READY), jobset((cond("Completed"),)), jobset(), jobset({"master": {}}, suspend=True)):
        assert not needs_pods(quiet) and not needs_error_report(quiet)


def test_the_root_cause_is_the_current_runs_earliest_failing_pod():
    """A restart leaves the previous run's pods until they are deleted: the current run's failure is the cause."""
    job = jobset((cond("Failed", reason="FailJobSetFailurePolicyAction", message="applying FailJobSet"),), restarts=1,
                 counted=1)  # fmt: skip
    old = pod(job, 0, "Failed", attempt=0, terminated={"exitCode": 137, "reason": "OOMKilled",
                                                       "finishedAt": "2025-01-01T00:02:00Z"})  # fmt: skip
    new = pod(job, 1, "Failed", attempt=1, terminated={"exitCode": 1, "reason": "Error",
                                                       "finishedAt": "2025-01-01T00:08:00Z"})  # fmt: skip
    assert current_pods(job, [old, new]) == [new]
    status = jobset_status(job, [old, new], CONFIG, NOW)
    assert "Root cause: worker-1 (pytorch): exit code 1" in status.message and "OOMKilled" not in status.message


def test_pod_names_in_messages():
    job = jobset()
    assert replica_name(pod(job, 3)) == "worker-3" and replica_name(pod(job, 0, role="master")) == "master-0"
    assert replica_name({"metadata": {"name": "p"}}) == "p"
    assert restarts_text(job) == ""


def test_a_pod_that_failed_before_its_job_is_counted_failed_is_the_job_ending():
    """Seen on the real controllers: the worker's pod failed (its Job's backoffLimit is 0), and for a moment its Job
    counts neither active nor failed while the master's still runs: the JobSet is about to apply its failure policy,
    not starting again."""
    job = jobset(jobs={"master": {"ready": 1, "active": 1}, "worker": {}})
    failed = pod(job, 1, phase="Failed", terminated={"exitCode": 1, "reason": "Error",
                                                     "finishedAt": "2025-01-01T00:09:00Z"})  # fmt: skip
    status = jobset_status(job, [pod(job, 0, role="master"), failed], CONFIG, NOW)
    assert status.phase == TaskExecution.RUNNING, status.message
    assert status.message.startswith("a pod failed (worker-1 (pytorch): exit code 1); the JobSet controller applies")
    # a pod of the previous run is not this run's failure
    old = pod(job, 1, phase="Failed", attempt=1, terminated={"exitCode": 1, "reason": "Error"})
    restarted = jobset(jobs={"master": {"ready": 1, "active": 1}, "worker": {"active": 1}}, restarts=2, counted=0)
    assert jobset_status(restarted, [old], CONFIG, NOW).phase == TaskExecution.INITIALIZING
