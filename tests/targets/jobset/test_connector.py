"""The connector tracks JobSets as propeller calls it: CreateTask, GetTask polls and DeleteTask through flytekit's
`AsyncConnectorService`, against the fake API server (which validates every JobSet it is sent: its CRD, its webhook's
rules, the typed models, its child Jobs) through the real kubernetes client. The JobSet controller's status is written
as it writes it (`replicatedJobsStatus`, its conditions, its restart counters)."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backend_plugin.admission import SPEC_DIGEST_ANNOTATION
from backend_plugin.config import BackendConfig
from backend_plugin.connector import ServedJobConnector
from tests.connector.helpers import Propeller, load_template
from tests.fakeapi.fixtures import fake_api  # noqa: F401
from tests.fakeapi.server import FakeKubeApi
from tests.targets.jobset.facts import pod

NS = "flytesnacks-development"
JOBSETS = "jobsets"
FAST = {"api_backoff_initial_s": 0.01, "api_backoff_max_s": 0.05}


@pytest.fixture
def propeller(fake_api) -> Iterator[Any]:  # noqa: F811 - the fixture imported above
    """`make(**config)`: propeller's calls to a served connector creating JobSets (the watch cache off unless
    asked)."""
    made: list[ServedJobConnector] = []

    def make(**config: Any) -> Propeller:
        settings = {"target": "jobset", "watch_cache": False, **FAST, **config}
        connector = ServedJobConnector(
            config=BackendConfig.from_dict(settings), api_client_factory=lambda: fake_api.client
        )
        made.append(connector)
        return Propeller(fake_api.server, connector)

    yield make
    for connector in made:
        connector.close()


def name_of(meta: bytes) -> str:
    return str(json.loads(meta)["name"])


def jobs_status(master: dict, worker: dict) -> list[dict]:
    zero = {"ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0}
    return [{"name": "master", **zero, **master}, {"name": "worker", **zero, **worker}]


def cond(ctype: str, reason: str, message: str, status: str = "True") -> dict:
    return {"type": ctype, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": "2025-01-01T00:05:00Z"}  # fmt: skip


READY = jobs_status({"ready": 1, "active": 1}, {"ready": 1, "active": 1})


def test_create_track_and_delete_a_jobset(propeller, tmp_path: Path) -> None:
    p = propeller()
    server: FakeKubeApi = p.server
    meta = p.create(tmp_path, template=load_template("sdk_seed_gpu"))
    (job,) = server.jobs(JOBSETS)
    name = name_of(meta)
    assert (job["kind"], job["metadata"]["name"]) == ("JobSet", name)
    assert SPEC_DIGEST_ANNOTATION in job["metadata"]["annotations"]
    # the kind's installed CRD is read before its first create, then the JobSet it accepts is created
    crd = ("get", "customresourcedefinitions", 200)
    assert [(r.verb, r.resource, r.status) for r in server.requests] == [crd, ("create", JOBSETS, 201)]
    assert (tmp_path / "abc123" / "inputs.pb").exists()
    steps = [
        ({}, "QUEUED", "waiting for the JobSet controller"),
        ({"replicatedJobsStatus": jobs_status({"active": 1}, {"active": 1})}, "INITIALIZING", "starting pods"),
        ({"replicatedJobsStatus": READY}, "RUNNING", "running (child Jobs ready: master 1/1, worker 1/1)"),
        (
            {
                "replicatedJobsStatus": jobs_status({"active": 1}, {"failed": 1}),
                "conditions": [
                    cond(
                        "RestartingJobSet",
                        "FailurePolicy_Preempted",
                        "applying RestartJobSetAndIgnore"
                        f"MaxRestarts failure policy action (first failed job: {name}-worker-0)",
                    )
                ],
                "restarts": 1,
            },  # fmt: skip
            "RUNNING",
            "restarting: a pod was disrupted (preemption, eviction or host maintenance) or stopped at a "
            "preemption's agreed "
            "step; not counted",
        ),
        (
            {
                "replicatedJobsStatus": jobs_status({"succeeded": 1}, {"ready": 1}),
                "restarts": 1,
                "conditions": [cond("Completed", "AllJobsCompleted", "jobset completed successfully")],
            },  # fmt: skip
            "SUCCEEDED",
            "jobset completed successfully (restarted once, 0 counted toward maxRestarts 0)",
        ),
    ]
    for status, phase, fragment in steps:
        server.set_job_status(NS, name, status, JOBSETS)
        answer = p.get(meta)
        assert (answer.name, fragment in answer.message) == (phase, True), answer
    assert p.delete(meta).code is None and server.jobs(JOBSETS) == []
    assert p.delete(meta).code is None  # deleting again is success
    deletes = [(r.verb, r.status) for r in server.requests if r.verb == "delete"]
    assert deletes == [("delete", 200), ("delete", 404)]


def test_a_suspended_jobset_is_queued_for_admission(propeller, tmp_path: Path) -> None:
    p = propeller(suspend=True)
    meta = p.create(tmp_path, template=load_template("hand_cpu"))
    (job,) = p.server.jobs(JOBSETS)
    assert job["spec"]["suspend"] is True
    p.server.set_job_status(NS, name_of(meta), {"conditions": [cond("Suspended", "SuspendedJobs",
                                                                   "jobset is suspended")]}, JOBSETS)  # fmt: skip
    answer = p.get(meta)
    assert (answer.name, answer.message) == ("QUEUED", "suspended, waiting for admission: jobset is suspended")


def test_a_failed_jobset_names_the_failed_rank_and_follows_its_error_document(
    propeller, tmp_path: Path, flytekit_errors
) -> None:
    """The task's own error document (a ValueError written by flytekit on the pod `job-worker-1`): a permanent
    failure naming the user's exception and the pod, as on every kind."""
    p = propeller()
    meta = p.create(tmp_path, template=load_template("sdk_seed_gpu"))
    (job,) = p.server.jobs(JOBSETS)
    document = flytekit_errors["user_worker"]
    shutil.copy(document, tmp_path / "abc123" / document.name)
    failed = pod(job, 1, "Failed", terminated={"exitCode": 1, "reason": "Error", "finishedAt": "2025-01-01T00:04:00Z",
                                               "message": "ValueError: bad shard"})  # fmt: skip
    failed["metadata"]["name"] = "job-worker-1"  # the pod flytekit's document names
    p.server.put_pod(failed)
    p.server.put_pod(pod(job, 0, role="master"))
    p.server.set_job_status(NS, name_of(meta), {
        "replicatedJobsStatus": jobs_status({"active": 1}, {"failed": 1}), "terminalState": "Failed",
        "conditions": [cond("Failed", "FailJobSetFailurePolicyAction", "applying FailJobSet failure policy action "
                            f"(first failed job: {name_of(meta)}-worker-0)")]}, JOBSETS)  # fmt: skip
    p.server.reset_log()
    answer = p.get(meta)
    assert answer.name == "FAILED", answer
    assert answer.message.startswith("worker-1 failed: ValueError"), answer.message
    assert "failed (FailJobSetFailurePolicyAction)" in answer.message
    assert "Root cause: worker-1 (pytorch): exit code 1" in answer.message
    assert [(r.verb, r.resource) for r in p.server.requests] == [("get", JOBSETS), ("list", "pods")]


def test_it_adopts_its_own_jobset_after_a_lost_answer(propeller, tmp_path: Path) -> None:
    """A retried CreateTask meets the JobSet the first one made, as the server stored it: the mutating webhook's
    defaults (named rules, Recreate, AnyOrder, the group) do not make it someone else's."""
    p = propeller()
    first = p.create(tmp_path, template=load_template("hand_cpu"))
    (job,) = p.server.jobs(JOBSETS)
    spec = job["spec"]
    spec["startupPolicy"] = {"startupPolicyOrder": "AnyOrder"}
    spec["failurePolicy"]["restartStrategy"] = "Recreate"
    for rjob in spec["replicatedJobs"]:
        rjob["groupName"] = "default"
    p.server.put_job(job, JOBSETS)
    assert p.create(tmp_path, template=load_template("hand_cpu")) == first
    assert [(r.verb, r.status) for r in p.server.requests][-3:] == [("create", 201), ("create", 409), ("get", 200)]


def test_a_steady_jobset_costs_no_request_and_a_replaced_one_is_said(propeller, tmp_path: Path) -> None:
    """With the watch cache on, a running JobSet's polls are answered from memory; a JobSet of another uid under
    the same name is not ours."""
    p = propeller(watch_cache=True)
    meta = p.create(tmp_path, template=load_template("hand_cpu"))
    name = name_of(meta)
    p.server.set_job_status(NS, name, {"replicatedJobsStatus": READY}, JOBSETS)
    deadline = time.monotonic() + 15
    while True:
        p.server.reset_log()
        answer = p.get(meta)
        if answer.name == "RUNNING" and not [r for r in p.server.requests if r.verb in ("get", "list")]:
            break
        assert time.monotonic() < deadline, "never answered from the cache"
        time.sleep(0.05)
    p.server.reset_log()
    assert [p.get(meta).name for _ in range(20)] == ["RUNNING"] * 20
    assert [r for r in p.server.requests if r.verb in ("get", "list")] == []
    job = p.server.get_job(NS, name, plural=JOBSETS)
    job["metadata"]["uid"] = "another-uid"
    p.server.put_job(job, JOBSETS)
    deadline = time.monotonic() + 15
    while (answer := p.get(meta)).name == "RUNNING":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert answer.name == "RETRYABLE_FAILED" and "a different job of the same name" in answer.message, answer
