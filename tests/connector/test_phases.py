"""A task's phase never goes back from RUNNING (`backend_plugin.connector.phases`): the moments of a real run that
look, in one snapshot, like a job not started yet are answered RUNNING, in the snapshot's words, until the job ends."""

from __future__ import annotations

from flyteidl.core.execution_pb2 import TaskExecution

from backend_plugin.connector.metadata import Answer, JobMetadata
from backend_plugin.connector.phases import Started
from backend_plugin.targets.registry import BY_CONFIG
from tests.connector.helpers import execution_metadata, load_template, make_connector
from tests.targets.conftest import Kind, facts_of

NS = "flytesnacks-development"


def meta(name: str = "a", uid: str = "u1") -> JobMetadata:
    return JobMetadata(namespace=NS, name=name, uid=uid)


def test_a_phase_before_running_after_running_is_running_in_its_own_words():
    started = Started()
    queued = Answer(TaskExecution.QUEUED, "waiting for nodes (3 nodes, none started yet)")
    assert started.hold(meta(), queued) == queued  # never running: as it is
    assert started.hold(meta(), Answer(TaskExecution.RUNNING, "running")).phase == TaskExecution.RUNNING
    for phase in (TaskExecution.QUEUED, TaskExecution.INITIALIZING, TaskExecution.WAITING_FOR_RESOURCES):
        held = started.hold(meta(), Answer(phase, "waiting for nodes"))
        assert (held.phase, held.message) == (TaskExecution.RUNNING, "was running; now waiting for nodes")
    # another attempt of the name (another uid) is its own
    assert started.hold(meta(uid="u2"), queued).phase == TaskExecution.QUEUED
    # an ending is as it is, and the attempt is let go
    assert started.hold(meta(), Answer(TaskExecution.SUCCEEDED, "done")).phase == TaskExecution.SUCCEEDED
    assert started.hold(meta(), queued).phase == TaskExecution.QUEUED


def test_the_memory_is_bounded_the_oldest_let_go_first():
    started = Started(max_held=2)
    for name in ("a", "b", "c"):
        started.hold(meta(name), Answer(TaskExecution.RUNNING, "running"))
    queued = Answer(TaskExecution.QUEUED, "q")
    assert started.hold(meta("a"), queued).phase == TaskExecution.QUEUED
    assert started.hold(meta("c"), queued).phase == TaskExecution.RUNNING


def test_a_trainjob_whose_nodes_went_before_the_failure_was_counted_stays_running(fake_api, tmp_path):
    # seen on the real controllers: the node Job failed and its pods were being deleted, and every count of the
    # TrainJob's `jobsStatus` was 0 until the JobSet and the Trainer counted the failure (GetTask said QUEUED)
    server, _ = fake_api
    kind = Kind(BY_CONFIG["trainjob"], facts_of(BY_CONFIG["trainjob"]))
    connector = make_connector(fake_api.client, target="trainjob", api_timeout_s=10.0, api_get_budget_s=30.0,
                               api_create_budget_s=30.0)  # fmt: skip
    job_meta = connector.create(load_template("sdk_seed_gpu"), str(tmp_path / "0"), None, execution_metadata())
    plural = kind.target.plural
    nothing = {"jobsStatus": [{"name": "node", "active": 0, "ready": 0, "failed": 0, "succeeded": 0}]}
    server.set_job_status(NS, job_meta.name, nothing, plural)
    first = connector.get(job_meta)
    assert first.phase == TaskExecution.QUEUED, first.message  # before it ran: as it is
    server.set_job_status(NS, job_meta.name, kind.running(server.get_job(NS, job_meta.name, plural=plural)), plural)
    assert connector.get(job_meta).phase == TaskExecution.RUNNING
    server.set_job_status(NS, job_meta.name, nothing, plural)
    again = connector.get(job_meta)
    assert again.phase == TaskExecution.RUNNING, again.message
    assert again.message.startswith("was running; now waiting for nodes (3 nodes, none started yet)"), again.message
    # a job suspended again (Kueue's preemption) waits for admission: QUEUED, as docs/faults.md says
    held = server.get_job(NS, job_meta.name, plural=plural)
    held["spec"]["suspend"] = True
    server.put_job(held, plural)
    suspended = connector.get(job_meta)
    assert suspended.phase == TaskExecution.QUEUED, suspended.message
    assert suspended.message.startswith("suspended, waiting for admission"), suspended.message


def test_a_suspended_pytorchjob_is_held_by_its_spec():
    from backend_plugin.connector.phases import held_by_spec

    assert held_by_spec({"spec": {"runPolicy": {"suspend": True}}}) and held_by_spec({"spec": {"suspend": True}})
    assert not held_by_spec({"spec": {"runPolicy": {"suspend": False}}}) and not held_by_spec(None)
