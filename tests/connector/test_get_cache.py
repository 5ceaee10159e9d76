"""`get` with the watch cache on (`watch_cache`), against the fake API server, and the same requests as before with
it off; the served connector's async `get`; pod lists in pages."""

from __future__ import annotations

import asyncio
import time

import pytest
from flyteidl.core.execution_pb2 import TaskExecution

from backend_plugin.config import BackendConfig, ConfigError
from backend_plugin.connector import JobConnector, ServedJobConnector
from backend_plugin.connector.answers import POD_PAGE
from tests.connector.helpers import execution_metadata, load_template, make_connector
from tests.fakeapi.objects import condition, replica_pod

NS = "flytesnacks-development"
RUNNING = {
    "conditions": [condition("Created"), condition("Running")],
    "replicaStatuses": {"Master": {"active": 1}, "Worker": {"active": 2}},  # all replicas up: no pods to read
}


def wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


@pytest.fixture
def cached(fake_api):
    connector = make_connector(fake_api.client, watch_cache=True)
    yield connector
    connector.close()


def create(connector, tmp_path, execution: str = "abc123"):
    return connector.create(load_template(), str(tmp_path / execution), None, execution_metadata(execution))


def reads(server) -> list[str]:
    """The single GETs and LISTs since the log was reset (watches apart)."""
    return [f"{r.verb} {r.resource}" for r in server.requests if r.verb in ("get", "list")]


def test_steady_gets_are_answered_from_the_watch_without_api_requests(fake_api, cached, tmp_path):
    server, _ = fake_api
    meta = create(cached, tmp_path)
    server.set_job_status(NS, meta.name, RUNNING)
    assert cached.get(meta).phase == TaskExecution.RUNNING  # starts the namespace's watch; a GET fills the gap
    wait_for(lambda: cached.cache(cached.target()).stats(NS).get("synced"))
    server.reset_log()
    for _ in range(20):
        assert cached.get(meta).phase == TaskExecution.RUNNING
    assert reads(server) == []
    server.set_job_status(NS, meta.name, {"conditions": [condition("Created"), condition("Succeeded")]})
    wait_for(lambda: cached.get(meta).phase == TaskExecution.SUCCEEDED)
    assert reads(server) == []  # the change came by the watch


def test_a_job_the_cache_does_not_hold_yet_is_read_and_fed(fake_api, cached, tmp_path):
    server, _ = fake_api
    first = create(cached, tmp_path, "first")
    cached.get(first)
    wait_for(lambda: cached.cache(cached.target()).stats(NS).get("synced"))
    second = create(cached, tmp_path, "second")
    server.set_job_status(NS, second.name, RUNNING)
    cache = cached.cache(cached.target())
    server.reset_log()
    resource = cached.get(second)
    # Either the watch delivered the new job first (no request) or the cache did not hold it yet (one GET, fed back).
    assert resource.phase in (TaskExecution.RUNNING, TaskExecution.QUEUED)
    assert reads(server) in ([], ["get pytorchjobs"])
    wait_for(lambda: cache.get(NS, second.name) is not None)
    assert cache.get(NS, second.name)["metadata"]["uid"] == second.uid


def test_fallback_get_feeds_the_cache_while_the_watch_is_not_synced(fake_api, cached, tmp_path):
    server, _ = fake_api
    meta = create(cached, tmp_path)
    server.set_job_status(NS, meta.name, RUNNING)
    server.forbid("list", "pytorchjobs")  # the cache can never sync: every get falls back to a GET
    server.reset_log()
    for _ in range(3):
        assert cached.get(meta).phase == TaskExecution.RUNNING
    assert reads(server).count("get pytorchjobs") == 3


def test_a_deleted_job_seen_by_the_watch_is_confirmed_by_one_get(fake_api, cached, tmp_path):
    server, _ = fake_api
    meta = create(cached, tmp_path)
    server.set_job_status(NS, meta.name, RUNNING)
    cached.get(meta)
    cache = cached.cache(cached.target())
    wait_for(lambda: cache.get(NS, meta.name) is not None)
    server.remove_job(NS, meta.name)
    wait_for(lambda: cache.is_deleted(NS, meta.name))
    server.reset_log()
    resource = cached.get(meta)
    assert resource.phase == TaskExecution.RETRYABLE_FAILED
    assert "no longer exists" in resource.message and resource.custom_info["deleted"] is True
    assert reads(server) == ["get pytorchjobs"]  # a DELETED is a hint; the 404 is the verdict


def test_a_replaced_job_is_still_told_apart_by_uid(fake_api, cached, tmp_path):
    server, _ = fake_api
    meta = create(cached, tmp_path)
    cached.get(meta)
    cache = cached.cache(cached.target())
    wait_for(lambda: cache.get(NS, meta.name) is not None)
    stored = server.get_job(NS, meta.name)
    server.remove_job(NS, meta.name)
    stored["metadata"].pop("uid")
    stored["metadata"].pop("resourceVersion", None)
    replacement = server.put_job(stored)
    wait_for(lambda: (cache.get(NS, meta.name) or {}).get("metadata", {}).get("uid") == replacement["metadata"]["uid"])
    resource = cached.get(meta)
    assert resource.phase == TaskExecution.RETRYABLE_FAILED
    assert resource.custom_info["replaced_by"] == replacement["metadata"]["uid"]


def test_a_created_job_reads_its_pods_through_the_cache_too(fake_api, cached, tmp_path):
    server, _ = fake_api
    meta = create(cached, tmp_path)
    job = server.get_job(NS, meta.name)
    server.set_job_status(NS, meta.name, {"conditions": [condition("Failed", message="PyTorchJob failed.")]})
    oom = {"terminated": {"reason": "OOMKilled", "exitCode": 137, "finishedAt": "2025-01-01T00:01:00Z"}}
    server.put_pod(replica_pod(job, "Worker", 1, phase="Failed", container_state=oom))
    cache = cached.cache(cached.target())
    cached.get(meta)
    wait_for(lambda: (cache.get(NS, meta.name) or {}).get("status", {}).get("conditions"))
    server.reset_log()
    resource = cached.get(meta)
    assert "worker-1 (pytorch): OOMKilled" in resource.message
    assert reads(server) == ["list pods"]  # the job from the cache, its pods (the status needs them) from the API


def test_with_the_cache_off_every_get_is_the_same_requests_as_before(fake_api, connector, tmp_path):
    server, _ = fake_api
    assert connector.config.value("watch_cache") is False
    meta = create(connector, tmp_path)
    server.set_job_status(NS, meta.name, RUNNING)
    server.reset_log()
    for _ in range(5):
        connector.get(meta)
    assert [f"{r.verb} {r.resource}" for r in server.requests] == ["get pytorchjobs"] * 5  # no list, no watch
    assert connector.cache(connector.target()) is None


def test_the_cache_is_off_without_a_managed_by_label_to_select_by(fake_api, tmp_path):
    connector = make_connector(fake_api.client, watch_cache=True, default_labels={"team": "ml"})
    assert connector.cache(connector.target()) is None


def test_pod_lists_come_in_pages(fake_api, connector, tmp_path):
    server, _ = fake_api
    meta = create(connector, tmp_path)
    job = server.get_job(NS, meta.name)
    server.set_job_status(NS, meta.name, {"conditions": [condition("Failed", message="PyTorchJob failed.")]})
    workers = POD_PAGE + 20
    for i in range(workers):
        server.put_pod(replica_pod(job, "Worker", i, phase="Running"))
    server.reset_log()
    connector.get(meta)
    pages = [r for r in server.requests if r.resource == "pods"]
    assert len(pages) == 2
    assert all(r.query.get("limit") == [str(POD_PAGE)] for r in pages)
    assert "continue" not in pages[0].query and pages[1].query.get("continue")
    assert all("labelSelector" in r.query for r in pages)


def test_served_connector_answers_from_the_cache_inline_and_falls_back_on_its_pool(fake_api, tmp_path):
    server, client = fake_api
    config = BackendConfig.from_dict(
        dict(watch_cache=True, get_threads=2, api_backoff_initial_s=0.001, api_backoff_max_s=0.002)
    )
    served = ServedJobConnector(config=config, api_client_factory=lambda: client)
    try:
        meta = create(served, tmp_path)
        server.set_job_status(NS, meta.name, RUNNING)
        # a connector that has built nothing yet answers nothing inline, and builds nothing in the event loop (this
        # one's own create built its session, and its cache may already hold the job)
        fresh = ServedJobConnector(config=config, api_client_factory=lambda: client)
        assert fresh.service.answer_from_cache(meta) is None and fresh.service.published() is None
        fresh.close()
        first = asyncio.run(served.get(meta))  # on the pool: builds the cache, a GET
        assert first.phase == TaskExecution.RUNNING
        wait_for(lambda: served.service.answer_from_cache(meta) is not None)
        server.reset_log()
        answers = asyncio.run(_many(served, meta, 50))
        assert {a.phase for a in answers} == {TaskExecution.RUNNING}
        assert reads(server) == []
        assert served.service.session().get_pool._max_workers == 2
    finally:
        served.close()


async def _many(connector: ServedJobConnector, meta, n: int) -> list:
    return list(await asyncio.gather(*(connector.get(meta) for _ in range(n))))


def test_get_threads_and_watch_cache_are_checked():
    with pytest.raises(ConfigError, match=r"get_threads=0 must be an integer from 1 to 1024"):
        BackendConfig.from_dict(dict(get_threads=0))
    with pytest.raises(ConfigError, match=r"watch_cache='yes' must be true or false"):
        BackendConfig.from_dict(dict(watch_cache="yes"))  # type: ignore[arg-type]
    assert isinstance(ServedJobConnector(config=BackendConfig()), JobConnector)
