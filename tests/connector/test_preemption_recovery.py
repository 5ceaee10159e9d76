"""The connector recovers an attempt whose job failed because of a preemption (`backend_plugin.connector.recovery`):
it deletes the failed job (its uid as the precondition, its kind's propagation) and creates it again under the same
name, reporting RUNNING, bounded by `preemption_recoveries`, the count kept on the new job. Never for an OOM kill, a
user's exception or a failure nobody disrupted. Against the fake API server, through the real kubernetes client, for
every kind."""

from __future__ import annotations

import datetime
import shutil
import threading
import time
from pathlib import Path

import pytest
from flyteidl.core.execution_pb2 import TaskExecution

from backend_plugin.config import BackendConfig
from backend_plugin.connector.recovery import (
    ATTEMPT_UID_ANNOTATION,
    EVIDENCE_WAIT_S,
    RECOVERIES_ANNOTATION,
    copy_for_recovery,
    of_attempt,
)
from backend_plugin.errors import ConfigError
from backend_plugin.status import fresh_errors, preemption_cause
from backend_plugin.targets.pytorchjob.status import replica_name
from backend_plugin.targets.registry import KINDS
from backend_plugin.task_errors import ErrorReport, parse_error_document
from pytorch_contract.preemption import FILE_NAME, PreemptionRecord
from tests.connector.helpers import execution_metadata, load_template, make_connector
from tests.fakeapi.objects import condition, replica_pod
from tests.targets.conftest import Kind, facts_of

NS = "flytesnacks-development"
T0 = datetime.datetime(2025, 1, 1, tzinfo=datetime.timezone.utc)
JOB = {"metadata": {"name": "job", "namespace": NS}}


def at(seconds: float, base: datetime.datetime = T0) -> str:
    return (base + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def disrupted(pod: dict, reason: str = "EvictionByEvictionAPI") -> dict:
    """`pod` with the condition Kubernetes sets before it ends a pod for the cluster's sake."""
    conditions = [{"type": "DisruptionTarget", "status": "True", "reason": reason, "message": "Eviction API"}]
    pod.setdefault("status", {})["conditions"] = conditions
    return pod


def ended(rtype: str, index: int, seconds: float, **term) -> dict:
    return replica_pod(JOB, rtype, index, phase="Failed",
                       container_state={"terminated": {"finishedAt": at(seconds), **term}})  # fmt: skip


# --- what counts as a preemption (pure) ------------------------------------------------------------------------------


def test_an_evicted_pod_and_its_peers_stopped_at_the_agreed_step_are_a_preemption():
    pods = [ended("Master", 0, 11, exitCode=200), disrupted(ended("Worker", 0, 12, exitCode=200)),
            ended("Worker", 1, 11, exitCode=200)]  # fmt: skip
    cause = preemption_cause(pods, ErrorReport(), False, replica_name)
    assert cause == (
        "worker-0 (DisruptionTarget EvictionByEvictionAPI: evicted through the Eviction API (a node "
        "drain, the cluster autoscaler, a descheduler))"
    )


def test_every_rank_stopped_at_the_agreed_step_without_a_disruption_is_a_preemption():
    # a pod deleted with its grace (a spot node's shutdown deletes pods; no DisruptionTarget): its ranks and their
    # peers stop at the agreed step and exit 200
    pods = [ended("Master", 0, 11, exitCode=200), ended("Worker", 0, 11, exitCode=200)]
    assert preemption_cause(pods, ErrorReport(), False, replica_name) == (
        "master-0, worker-0 stopped at the agreed step (exit code 200)"
    )


def test_a_disrupted_pod_killed_after_its_grace_is_still_a_preemption():
    pods = [disrupted(ended("Worker", 0, 40, exitCode=137)), ended("Master", 0, 12, exitCode=200)]
    assert preemption_cause(pods, ErrorReport(), False, replica_name).startswith("worker-0 (DisruptionTarget")


@pytest.mark.parametrize(
    "pods",
    [
        [ended("Worker", 0, 10, exitCode=137, reason="OOMKilled"), ended("Master", 0, 11, exitCode=200)],
        [disrupted(ended("Worker", 0, 10, exitCode=137, reason="OOMKilled"))],
        [ended("Worker", 0, 10, exitCode=137), ended("Master", 0, 11, exitCode=200)],
        [ended("Worker", 0, 10, exitCode=143)],
        [ended("Worker", 0, 10, exitCode=1), ended("Master", 0, 11, exitCode=200)],
        [ended("Worker", 0, 10, exitCode=1), disrupted(ended("Master", 0, 60, exitCode=200))],
        [{**replica_pod(JOB, "Worker", 0, phase="Failed"), "status": {"phase": "Failed", "reason": "Evicted"}}],
    ],
    ids=["oom-killed", "oom-killed-even-if-disrupted", "sigkill-nobody-disrupted", "sigterm-without-disruption",
         "user-exit-1-first", "user-exit-1-before-a-later-eviction", "evicted-without-disruption-condition"],
)  # fmt: skip
def test_what_is_not_a_preemption(pods):
    assert preemption_cause(pods, ErrorReport(), True, replica_name) is None


def test_a_users_error_raised_before_the_disruption_is_not_a_preemption(flytekit_errors):
    document = flytekit_errors["recoverable_worker"]
    error = parse_error_document(document.read_bytes(), document.name)
    error = type(error)(**{**error.__dict__, "timestamp": T0 + datetime.timedelta(seconds=5)})
    pods = [disrupted(ended("Worker", 0, 10, exitCode=200)), ended("Master", 0, 10, exitCode=200)]
    assert preemption_cause(pods, ErrorReport((error,)), False, replica_name) is None
    # the same pods with no error document are a preemption
    assert preemption_cause(pods, ErrorReport(), False, replica_name) is not None


def test_the_record_alone_says_preemption_only_where_no_pod_says_otherwise():
    assert preemption_cause([], ErrorReport(), True) is not None
    assert preemption_cause([], ErrorReport(), False) is None


def test_fresh_errors_keep_only_this_runs_documents(flytekit_errors):
    document = flytekit_errors["user"]
    error = parse_error_document(document.read_bytes(), document.name)
    old = type(error)(**{**error.__dict__, "timestamp": T0})
    new = type(error)(**{**error.__dict__, "timestamp": T0 + datetime.timedelta(seconds=100)})
    kept = fresh_errors(ErrorReport((old, new)), T0 + datetime.timedelta(seconds=50))
    assert kept is not None and kept.errors == (new,)


def test_the_copy_keeps_spec_labels_and_annotations_and_drops_what_the_server_wrote():
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": "j", "namespace": NS, "uid": "u-2", "resourceVersion": "9", "generation": 1,
                        "creationTimestamp": at(0), "deletionTimestamp": at(9), "finalizers": ["foregroundDeletion"],
                        "managedFields": [{}], "labels": {"a": "b"}, "annotations": {"x": "y"},
                        "ownerReferences": [{"uid": "o"}]},
           "spec": {"runPolicy": {}}, "status": {"conditions": []}}  # fmt: skip
    body = copy_for_recovery(job, 2, "u-1")
    assert body == {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                    "metadata": {"name": "j", "namespace": NS, "labels": {"a": "b"},
                                 "annotations": {"x": "y", RECOVERIES_ANNOTATION: "2", ATTEMPT_UID_ANNOTATION: "u-1"}},
                    "spec": {"runPolicy": {}}}  # fmt: skip
    assert of_attempt({**body, "metadata": {**body["metadata"], "uid": "u-3"}}, "u-1")
    assert not of_attempt({"metadata": {"uid": "u-3"}}, "u-1") and of_attempt({"metadata": {"uid": "u-1"}}, "u-1")


@pytest.mark.parametrize("value", [-1, 101, "3", 1.5, True])
def test_the_bound_is_checked(value):
    with pytest.raises(ConfigError, match="preemption_recoveries"):
        BackendConfig.from_dict({"preemption_recoveries": value})


@pytest.mark.parametrize("value", [0, 3, 100])
def test_valid_bounds(value):
    assert BackendConfig.from_dict({"preemption_recoveries": value}).status.preemption_recoveries == value


# --- through the connector, on the fake API server -------------------------------------------------------------------


@pytest.fixture(params=KINDS, ids=[t.config_name for t in KINDS])
def kind(request):
    return Kind(request.param, facts_of(request.param))


SLOW = {"api_timeout_s": 10.0, "api_get_budget_s": 30.0, "api_create_budget_s": 30.0, "api_delete_budget_s": 30.0}
"""Room for the fake server's validation of each create (a TrainJob's renders its node pod) on a loaded machine."""


def connector_for(fake_api, kind: Kind, **config):
    return make_connector(fake_api.client, target=kind.name, **{**SLOW, **config})


def write_record(prefix: Path, requested_at: float, step: int = 4) -> None:
    record = PreemptionRecord(stopped_at=step, checkpoint_step=step, signal="SIGTERM", rank=1, pod="w-0",
                              requested_at=requested_at, grace_s=30.0, resume_known=True,
                              resumes_from=step)  # fmt: skip
    prefix.mkdir(parents=True, exist_ok=True)
    (prefix / FILE_NAME).write_bytes(record.to_json())


def preempt(server, kind: Kind, name: str, **term) -> dict:
    """Fail the job of `name` as a preemption ends it: pod 1 evicted (DisruptionTarget), pod 0 stopped at the agreed
    step (exit 200), the job's condition Failed; `term` overrides pod 1's termination."""
    job = server.get_job(NS, name, plural=kind.target.plural)
    now = datetime.datetime.now(datetime.timezone.utc)
    server.put_pod(kind.pod(job, 0, "Failed", terminated={"exitCode": 200, "finishedAt": at(0, now)}))
    server.put_pod(disrupted(kind.pod(job, 1, "Failed", terminated={"exitCode": 200, "finishedAt": at(1, now),
                                                                    **term})))  # fmt: skip
    failed = condition("Failed", reason="FailedJobs", message="the job failed.")
    server.set_job_status(NS, name, {"conditions": [failed]}, kind.target.plural)
    return job


def create(connector, prefix: Path):
    return connector.create(load_template("sdk_seed_gpu"), str(prefix), None, execution_metadata())


def test_a_preempted_job_is_created_again_and_the_task_stays_running(fake_api, kind, tmp_path):
    server, _ = fake_api
    connector = connector_for(fake_api, kind)
    prefix = tmp_path / "0"
    meta = create(connector, prefix)
    first = preempt(server, kind, meta.name)
    write_record(prefix, time.time())

    recovering = connector.get(meta)
    assert recovering.phase == TaskExecution.RUNNING, recovering.message
    assert recovering.message.startswith("recovering from a preemption of "), recovering.message
    assert "(DisruptionTarget EvictionByEvictionAPI" in recovering.message
    assert "resumes from the checkpoint of step 4; recovery 1 of at most 3; not charged to the task's retries" in (
        recovering.message
    )
    (delete,) = server.calls(verb="delete", resource=kind.target.plural)
    assert delete.propagation == kind.target.declaration.delete_propagation
    assert delete.precondition_uid == first["metadata"]["uid"]

    created = connector.get(meta)  # the job is gone (and its pods): created again
    assert created.phase == TaskExecution.RUNNING and "the job is created again" in created.message, created.message
    again = server.get_job(NS, meta.name, plural=kind.target.plural)
    assert again["metadata"]["uid"] != first["metadata"]["uid"]
    assert again["metadata"]["annotations"][RECOVERIES_ANNOTATION] == "1"
    assert again["metadata"]["annotations"][ATTEMPT_UID_ANNOTATION] == meta.uid
    assert again["spec"] == first["spec"] and again["metadata"]["labels"] == first["metadata"]["labels"]
    (post,) = [r for r in server.calls(verb="create", resource=kind.target.plural)][1:]
    assert post.status == 201 and post.query.get("fieldValidation") == ["Strict"]

    waiting = connector.get(meta)  # its controller has not picked it up: the phase does not go back
    assert waiting.phase == TaskExecution.RUNNING, waiting.message
    assert waiting.message.startswith("created again after a preemption (recovery 1 of at most 3, not charged")
    server.set_job_status(NS, meta.name, kind.running(again), kind.target.plural)
    assert connector.get(meta).phase == TaskExecution.RUNNING
    server.set_job_status(NS, meta.name, {"conditions": [condition(kind.SUCCEEDED)]}, kind.target.plural)
    assert connector.get(meta).phase == TaskExecution.SUCCEEDED


def test_the_job_created_again_is_the_whole_job_not_the_watch_caches_copy(fake_api, kind, tmp_path):
    # the watch cache keeps pod templates down to their containers' names and images: a job created again from it
    # ran containers without a command (seen on the real control plane)
    server, _ = fake_api
    connector = connector_for(fake_api, kind, watch_cache=True)
    meta = create(connector, tmp_path / "0")
    first = server.get_job(NS, meta.name, plural=kind.target.plural)
    connector.get(meta)  # starts the watch
    deadline = time.monotonic() + 30
    while not server.open_watches(kind.target.plural) and time.monotonic() < deadline:
        time.sleep(0.1)
    preempt(server, kind, meta.name)
    cache = connector.service.session().cache(kind.target)
    while (cache.get(NS, meta.name) or {}).get("status", {}).get("conditions") != [
        condition("Failed", reason="FailedJobs", message="the job failed.")
    ] and time.monotonic() < deadline:
        time.sleep(0.1)
    answer = connector.get(meta)
    while "the job is created again (uid" not in answer.message and time.monotonic() < deadline:
        time.sleep(0.2)
        answer = connector.get(meta)
    assert answer.phase == TaskExecution.RUNNING and "the job is created again (uid" in answer.message, answer.message
    again = server.get_job(NS, meta.name, plural=kind.target.plural)
    assert again["spec"] == first["spec"]
    connector.close()


def test_the_created_job_waits_for_the_old_pods_to_go(fake_api, kind, tmp_path):
    server, _ = fake_api
    connector = connector_for(fake_api, kind)
    meta = create(connector, tmp_path / "0")
    job = preempt(server, kind, meta.name)
    assert connector.get(meta).phase == TaskExecution.RUNNING
    server.put_pod(kind.pod(job, 0, "Running"))  # a pod of the old job the collector has not taken yet
    waiting = connector.get(meta)
    assert "waiting for its 1 pod(s) to go before it is created again" in waiting.message, waiting.message
    assert server.get_job(NS, meta.name, plural=kind.target.plural) is None
    for pod in server.pods(NS):
        server.remove_pod(NS, pod["metadata"]["name"])
    assert "the job is created again (uid" in connector.get(meta).message
    assert server.get_job(NS, meta.name, plural=kind.target.plural) is not None


@pytest.mark.parametrize(
    ("term", "why"),
    [
        ({"exitCode": 137, "reason": "OOMKilled"}, "OOMKilled"),
        ({"exitCode": 1}, "exit code 1"),
    ],
    ids=["oom-killed", "exit-1"],
)
def test_no_recovery_for_an_oom_kill_or_the_tasks_own_exit(fake_api, kind, tmp_path, term, why):
    server, _ = fake_api
    connector = connector_for(fake_api, kind)
    meta = create(connector, tmp_path / "0")
    job = preempt(server, kind, meta.name)
    pod = kind.pod(job, 1, "Failed", terminated={"finishedAt": at(-30, datetime.datetime.now(datetime.timezone.utc)),
                                                 **term})  # fmt: skip
    server.put_pod(pod)  # the pod failed first, and nobody disrupted it
    answer = connector.get(meta)
    assert answer.phase == TaskExecution.RETRYABLE_FAILED and why in answer.message, answer.message
    assert "recover" not in answer.message
    assert server.calls(verb="delete") == [] and server.get_job(NS, meta.name, plural=kind.target.plural) is not None


def test_no_recovery_for_a_failure_without_a_disruption(fake_api, tmp_path):
    server, _ = fake_api
    kind = Kind(KINDS[0], facts_of(KINDS[0]))
    connector = connector_for(fake_api, kind)
    meta = create(connector, tmp_path / "0")
    job = server.get_job(NS, meta.name)
    server.put_pod(kind.pod(job, 0, "Failed", terminated={"exitCode": 143, "finishedAt": at(0)}))
    server.set_job_status(NS, meta.name, {"conditions": [condition("Failed", message="failed.")]})
    answer = connector.get(meta)
    assert answer.phase == TaskExecution.RETRYABLE_FAILED and "signal SIGTERM" in answer.message, answer.message
    assert server.calls(verb="delete") == []


def test_no_recovery_for_a_users_recoverable_error_raised_first(fake_api, tmp_path, flytekit_errors):
    server, _ = fake_api
    kind = Kind(KINDS[0], facts_of(KINDS[0]))
    connector = connector_for(fake_api, kind)
    prefix = tmp_path / "0"
    meta = create(connector, prefix)
    document = flytekit_errors["recoverable_worker"]
    shutil.copy(document, prefix / document.name)  # raised before the pods ended
    preempt(server, kind, meta.name)
    answer = connector.get(meta)
    assert answer.phase == TaskExecution.RETRYABLE_FAILED and "FlyteRecoverableException" in answer.message
    assert server.calls(verb="delete") == []


def test_past_the_bound_the_failure_is_flytes_saying_so(fake_api, tmp_path):
    server, _ = fake_api
    kind = Kind(KINDS[0], facts_of(KINDS[0]))
    connector = connector_for(fake_api, kind, preemption_recoveries=2)
    meta = create(connector, tmp_path / "0")
    for count in (1, 2):
        preempt(server, kind, meta.name)
        assert connector.get(meta).phase == TaskExecution.RUNNING
        assert "the job is created again (uid" in connector.get(meta).message
        job = server.get_job(NS, meta.name)
        assert job["metadata"]["annotations"][RECOVERIES_ANNOTATION] == str(count)
    preempt(server, kind, meta.name)
    answer = connector.get(meta)
    assert answer.phase == TaskExecution.RETRYABLE_FAILED, answer.message
    assert ("not recovered: the connector already created this attempt's job again 2 time(s) after a preemption "
            "(preemption_recoveries=2)") in answer.message  # fmt: skip
    off = connector_for(fake_api, kind, preemption_recoveries=0)
    assert "preemption recovery is off (preemption_recoveries=0)" in off.get(meta).message


def test_a_restarted_connector_reads_the_count_from_the_job(fake_api, tmp_path):
    server, _ = fake_api
    kind = Kind(KINDS[0], facts_of(KINDS[0]))
    meta = create(connector_for(fake_api, kind), tmp_path / "0")
    for _ in range(2):
        connector = connector_for(fake_api, kind, preemption_recoveries=2)  # a new process each time
        preempt(server, kind, meta.name)
        assert connector.get(meta).phase == TaskExecution.RUNNING
        assert connector.get(meta).phase == TaskExecution.RUNNING
    preempt(server, kind, meta.name)
    assert connector_for(fake_api, kind, preemption_recoveries=2).get(meta).phase == TaskExecution.RETRYABLE_FAILED


def test_a_replica_that_finds_the_job_gone_waits_for_the_one_that_creates_it(fake_api, tmp_path):
    server, _ = fake_api
    kind = Kind(KINDS[0], facts_of(KINDS[0]))
    a, b = connector_for(fake_api, kind), connector_for(fake_api, kind)
    prefix = tmp_path / "0"
    meta = create(a, prefix)
    preempt(server, kind, meta.name)
    write_record(prefix, time.time() - 5)
    assert a.get(meta).phase == TaskExecution.RUNNING  # a deletes it
    waiting = b.get(meta)
    assert waiting.phase == TaskExecution.RUNNING and "another replica of the connector creates it again" in (
        waiting.message
    ), waiting.message
    assert "the job is created again (uid" in a.get(meta).message
    assert b.get(meta).phase == TaskExecution.RUNNING  # b reads the job a created: this attempt's
    write_record(prefix, time.time() - 600)  # long ago: a job gone is gone
    server.remove_job(NS, meta.name)
    assert b.get(meta).phase == TaskExecution.RETRYABLE_FAILED


def test_replicas_polling_at_once_create_one_job(fake_api, tmp_path):
    server, _ = fake_api
    kind = Kind(KINDS[0], facts_of(KINDS[0]))
    replicas = [connector_for(fake_api, kind) for _ in range(4)]
    meta = create(replicas[0], tmp_path / "0")
    preempt(server, kind, meta.name)
    write_record(tmp_path / "0", time.time())  # what the ranks that stopped write
    answers, errors = [], []

    def poll(connector) -> None:
        try:
            for _ in range(3):
                answers.append(connector.get(meta))
        except Exception as e:  # noqa: BLE001 - the test reports it
            errors.append(e)

    threads = [threading.Thread(target=poll, args=(c,)) for c in replicas]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert {a.phase for a in answers} == {TaskExecution.RUNNING}, [a.message for a in answers]
    job = server.get_job(NS, meta.name)
    assert job["metadata"]["annotations"][RECOVERIES_ANNOTATION] == "1"
    assert [r.status for r in server.calls(verb="create", resource=kind.target.plural)].count(201) == 2  # 1st + again
    assert len([r for r in server.calls(verb="delete") if r.status == 200]) == 1


def test_a_deleted_task_is_not_created_again(fake_api, tmp_path):
    server, _ = fake_api
    kind = Kind(KINDS[0], facts_of(KINDS[0]))
    connector = connector_for(fake_api, kind)
    meta = create(connector, tmp_path / "0")
    preempt(server, kind, meta.name)
    assert connector.get(meta).phase == TaskExecution.RUNNING
    connector.delete(meta)  # propeller aborts the task meanwhile
    assert connector.get(meta).phase == TaskExecution.RETRYABLE_FAILED
    assert server.get_job(NS, meta.name) is None


def test_the_record_a_deletes_sigterm_makes_the_ranks_write_is_no_preemption(fake_api, tmp_path):
    # DeleteTask on a running job: the node agent or kubelet sends each rank SIGTERM, and the ranks write a
    # preemption record as they stop (seen on the real control plane: GetTask then answered RUNNING, "recovering
    # from a preemption ... another replica of the connector creates it again", for 120 s)
    server, _ = fake_api
    kind = Kind(KINDS[0], facts_of(KINDS[0]))
    connector = connector_for(fake_api, kind)
    prefix = tmp_path / "0"
    meta = create(connector, prefix)
    job = server.get_job(NS, meta.name, plural=kind.target.plural)
    server.set_job_status(NS, meta.name, kind.running(job), kind.target.plural)
    assert connector.get(meta).phase == TaskExecution.RUNNING
    connector.delete(meta)
    write_record(prefix, time.time())
    server.remove_job(NS, meta.name)
    after = connector.get(meta)
    assert after.phase == TaskExecution.RETRYABLE_FAILED, after.message
    # the same record with no delete of ours (another replica preempted and deleted it) is still waited on
    other = connector_for(fake_api, kind)
    waiting = other.get(meta)
    assert waiting.phase == TaskExecution.RUNNING and "another replica" in waiting.message, waiting.message


def test_a_failed_job_whose_failed_pod_is_gone_waits_for_its_peers_to_tell(fake_api, tmp_path):
    # a pod deleted with its grace (a spot node's shutdown): the operator fails the job when it ends, and the pod is
    # gone; its peers are still stopping at the agreed step (seen on the real control plane: reported a retryable
    # failure before the peers' exit code 200 could be read)
    server, _ = fake_api
    kind = Kind(KINDS[0], facts_of(KINDS[0]))
    connector = connector_for(fake_api, kind)
    meta = create(connector, tmp_path / "0")
    job = server.get_job(NS, meta.name)
    now = datetime.datetime.now(datetime.timezone.utc)
    server.put_pod(kind.pod(job, 1, "Running"))
    failed = condition("Failed", message="1 Worker replica(s) failed.", at=at(0, now))
    server.set_job_status(NS, meta.name, {"conditions": [failed]})
    waiting = connector.get(meta)
    assert waiting.phase == TaskExecution.RUNNING, waiting.message
    assert "the pod that failed is gone; waiting for the others to stop" in waiting.message
    server.put_pod(kind.pod(job, 1, "Failed", terminated={"exitCode": 200, "finishedAt": at(5, now)}))
    recovering = connector.get(meta)
    assert recovering.message.startswith("recovering from a preemption of "), recovering.message
    assert "worker-1 stopped at the agreed step (exit code 200)" in recovering.message


def test_the_wait_for_evidence_is_bounded(fake_api, tmp_path):
    server, _ = fake_api
    kind = Kind(KINDS[0], facts_of(KINDS[0]))
    connector = connector_for(fake_api, kind)
    meta = create(connector, tmp_path / "0")
    job = server.get_job(NS, meta.name)
    server.put_pod(kind.pod(job, 1, "Running"))
    long_ago = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=EVIDENCE_WAIT_S + 5)
    failed = condition("Failed", message="1 Worker replica(s) failed.", at=at(0, long_ago))
    server.set_job_status(NS, meta.name, {"conditions": [failed]})
    answer = connector.get(meta)
    assert answer.phase == TaskExecution.RETRYABLE_FAILED and "waiting" not in answer.message, answer.message


def test_a_record_written_after_a_poll_listed_the_prefix_is_read(fake_api, tmp_path):
    # the spot loss of a PyTorchJob on the real control plane: the operator fails the job as soon as the pod is
    # deleted (a running pod with a deletionTimestamp counts as failed) and deletes its running peers (cleanPodPolicy
    # Running); a poll then reads the prefix while every rank is still stopping. Its listing was kept by the store's
    # client (s3fs keeps every listing), and the next poll, once the pods had ended and gone, read "no record, no
    # error document" from it: RETRYABLE_FAILED, charged to the task's retries
    from tests.connector.listing_store import listed_prefix

    server, _ = fake_api
    kind = Kind(KINDS[0], facts_of(KINDS[0]))
    connector = connector_for(fake_api, kind)
    (tmp_path / "store" / "0").mkdir(parents=True)
    with listed_prefix(tmp_path / "store") as prefix:
        meta = connector.create(load_template("sdk_seed_gpu"), f"{prefix}/0", None, execution_metadata())
        job = server.get_job(NS, meta.name)
        now = datetime.datetime.now(datetime.timezone.utc)
        for index in range(3):
            pod = kind.pod(job, index, "Running")
            pod["metadata"]["deletionTimestamp"] = at(30, now)
            server.put_pod(pod)
        failed = condition("Failed", message="1 Worker replica(s) failed.", at=at(0, now))
        server.set_job_status(NS, meta.name, {"conditions": [failed]})
        waiting = connector.get(meta)
        assert waiting.phase == TaskExecution.RUNNING, waiting.message
        assert "waiting for the others to stop" in waiting.message, waiting.message
        write_record(tmp_path / "store" / "0", time.time())  # the ranks stopped at the agreed step, and wrote it
        for pod in server.pods(NS):
            server.remove_pod(NS, pod["metadata"]["name"])  # deleted pods are gone once they end
        recovering = connector.get(meta)
        assert recovering.message.startswith("recovering from a preemption of a rank got SIGTERM"), recovering.message
        assert recovering.phase == TaskExecution.RUNNING
