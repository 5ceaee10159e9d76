"""The connector as a production controller: one engine per process, no lock on the event loop, close() closes, code
bugs surface, and log links that cost no pod list per steady poll. Each against the fake API server, through the real
kubernetes client."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from flyteidl.core.execution_pb2 import TaskExecution
from flytekit.extend.backend.base_connector import ConnectorRegistry

from backend_plugin.config import BackendConfig
from backend_plugin.connector import JobService, ServedJobConnector, register, set_api_client_factory, shared_service
from backend_plugin.targets.registry import BY_CONFIG, KINDS
from tests.connector.helpers import execution_metadata, load_template
from tests.fakeapi.objects import condition
from tests.targets.conftest import Kind, facts_of

NS = "flytesnacks-development"
LINKS = ({"name": "Logs", "template": "https://logs.example.com/{{ .namespace }}/{{ .podName }}"},)
FAST = {"api_backoff_initial_s": 0.001, "api_backoff_max_s": 0.002, "api_timeout_s": 2.0}
RUNNING = {"conditions": [condition("Created"), condition("Running")]}


def _polls(connector: Any, meta: Any, n: int, pause_s: float = 0.05) -> list:
    answers = []
    for _ in range(n):
        answers.append(asyncio.run(connector.get(meta)))
        time.sleep(pause_s)
    return answers


def _job_requests(server: Any, verb: str, plural: str = "pytorchjobs") -> list:
    return [r for r in server.requests if r.verb == verb and r.resource == plural]


# --- one engine per process -----------------------------------------------------------------------------------------


def test_the_registered_versions_share_the_processs_one_service() -> None:
    """flytekit's own kfpytorch writes task type version 0, this SDK version 1: both registered connectors are thin
    wrappers over the process's one service (Flyte 2's connector too: tests/flyte2/test_connector_inputs.py)."""
    register()  # what importing backend_plugin.connector did, in case a test registered a connector of its own
    v0, v1 = (ConnectorRegistry.get_connector("pytorch", version) for version in (0, 1))
    assert isinstance(v0, ServedJobConnector) and isinstance(v1, ServedJobConnector)
    assert v0.service is v1.service is shared_service()


def test_tasks_of_versions_0_and_1_in_one_namespace_share_one_watch(fake_api, tmp_path) -> None:
    """Polls of tasks of both versions in one namespace go through one engine: the namespace is listed and watched
    once per kind, not once per task version."""
    server, client = fake_api
    service = JobService(BackendConfig.from_dict({"watch_cache": True, **FAST}), lambda: client)
    v0, v1 = (ServedJobConnector(task_type_version=version, service=service) for version in (0, 1))
    try:
        old = v0.create(load_template("legacy_v0"), str(tmp_path / "a"), None, execution_metadata("a"))
        new = v1.create(load_template("official_container"), str(tmp_path / "b"), None, execution_metadata("b"))
        for meta in (old, new):
            server.set_job_status(NS, meta.name, RUNNING)
        for _ in range(20):  # polls of both tasks, a tenth of a second apart: the cache syncs, then answers
            answers = [asyncio.run(v0.get(old)), asyncio.run(v1.get(new))]
            assert [a.phase for a in answers] == [TaskExecution.RUNNING] * 2
            time.sleep(0.1)
        lists = {r.path for r in _job_requests(server, "list")}
        assert len(_job_requests(server, "list")) == 1, lists  # one LIST of the namespace's PyTorchJobs
        assert len({r.started for r in _job_requests(server, "watch")}) == 1
    finally:
        service.close()


# --- no lock on the event loop; close() closes ------------------------------------------------------------------------


def test_the_event_loop_never_waits_for_a_client_being_built(fake_api, tmp_path) -> None:
    """Building the API client (importing the kubernetes modules, seconds on a busy machine) or joining watch threads
    happens off the event loop: a poll that arrives meanwhile leaves the loop serving other work."""
    server, client = fake_api
    set_api_client_factory(lambda: client)
    served = ServedJobConnector(config=BackendConfig.from_dict({"watch_cache": False, **FAST}))
    try:
        meta = served.create(load_template("official_container"), str(tmp_path / "a"), None, execution_metadata("a"))
        server.set_job_status(NS, meta.name, RUNNING)
        asyncio.run(served.get(meta))

        def slow() -> Any:  # another cluster's client, slow to build
            time.sleep(3.0)
            return client

        set_api_client_factory(slow)
        building = threading.Thread(target=lambda: ServedJobConnector.__mro__[1].get(served, meta), daemon=True)
        building.start()  # a sync get builds the new client (and holds what building takes)
        time.sleep(0.3)

        async def loop_and_poll() -> float:
            ticks: list[float] = [time.monotonic()]

            async def ticker() -> None:
                while True:
                    await asyncio.sleep(0.01)
                    ticks.append(time.monotonic())

            tick = asyncio.ensure_future(ticker())
            answer = await served.get(meta)
            tick.cancel()
            assert answer.phase == TaskExecution.RUNNING
            return max(b - a for a, b in zip(ticks, ticks[1:], strict=False))

        longest_stall = asyncio.run(loop_and_poll())
        building.join(10)
        assert longest_stall < 1.0, f"the event loop stalled {longest_stall:.2f}s while a client was built"
    finally:
        set_api_client_factory(None)
        served.close()


def _threads(prefix: str) -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(prefix) and t.is_alive()]


def test_close_shuts_every_pool_and_watch(fake_api, tmp_path) -> None:
    server, client = fake_api
    config = BackendConfig.from_dict({"watch_cache": True, "get_threads": 3, **FAST})
    served = ServedJobConnector(config=config, api_client_factory=lambda: client)
    meta = served.create(load_template("official_container"), str(tmp_path / "a"), None, execution_metadata("a"))
    server.set_job_status(NS, meta.name, RUNNING)
    _polls(served, meta, 3)
    assert _threads("connector-get") and _threads("job-watch-")
    served.close()
    deadline = time.monotonic() + 10
    while (_threads("connector-get") or _threads("connector-progress") or _threads("job-watch-")) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.05)
    assert (_threads("connector-get"), _threads("connector-progress"), _threads("job-watch-")) == ([], [], [])


# --- code bugs surface ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cache", [False, True], ids=["get", "from-the-cache"])
def test_a_bug_in_a_status_reader_fails_loudly(fake_api, tmp_path, monkeypatch, cache) -> None:
    """A reader that raises KeyError is our bug: GetTask fails with it, whether the poll was answered from the cache
    or read the job; never a degraded message, nor an odd answer of the API blamed for it."""
    server, client = fake_api
    config = BackendConfig.from_dict({"watch_cache": cache, **FAST})
    served = ServedJobConnector(config=config, api_client_factory=lambda: client)
    try:
        meta = served.create(load_template("official_container"), str(tmp_path / "a"), None, execution_metadata())
        server.set_job_status(NS, meta.name, RUNNING)
        _polls(served, meta, 20 if cache else 1, 0.1)  # the cache synced: the next polls are answered from it
        target = BY_CONFIG["pytorchjob"]

        def planted(*args: Any, **kwargs: Any) -> Any:
            raise KeyError("planted")

        monkeypatch.setattr(target, "status", planted)
        with pytest.raises(KeyError, match="planted"):
            asyncio.run(served.get(meta))
    finally:
        served.close()


# --- log links without a pod list per poll ---------------------------------------------------------------------------


@pytest.fixture(params=[t for t in KINDS if t.config_name in ("trainjob", "jobset")], ids=lambda t: t.config_name)
def random_suffix_kind(request: pytest.FixtureRequest) -> Kind:
    """The kinds whose pods end in a random suffix the Job controller picks: their links need the pod list."""
    return Kind(request.param, facts_of(request.param))


def test_log_links_cost_no_pod_list_per_steady_poll(fake_api, tmp_path, random_suffix_kind) -> None:
    """With a log link configured, a running TrainJob or JobSet is answered from memory: its pods are listed once
    (for their names), not on every poll; a restart (its status changes, new pods) lists them once more, and the links
    name the new pods."""
    kind = random_suffix_kind
    server, client = fake_api
    config = BackendConfig.from_dict({"target": kind.name, "watch_cache": True, "log_links": LINKS, **FAST})
    served = ServedJobConnector(config=config, api_client_factory=lambda: client)
    try:
        meta = served.create(load_template("sdk_seed_gpu"), str(tmp_path / "a"), None, execution_metadata())
        job = server.get_job(NS, meta.name, plural=kind.target.plural)
        server.set_job_status(NS, meta.name, kind.running(job), kind.target.plural)
        first = [kind.pod(job, i) for i in range(2)]
        for pod in first:
            server.put_pod(pod)
        _polls(served, meta, 20, 0.1)  # the cache synced, the pods listed once
        server.reset_log()
        answers = _polls(served, meta, 20, 0.02)
        assert {a.phase for a in answers} == {TaskExecution.RUNNING}
        assert [r.verb for r in server.requests if r.resource in ("pods", kind.target.plural)] == []  # no request
        names = [link.uri.rsplit("/", 1)[-1] for link in answers[-1].log_links]
        assert sorted(names) == sorted(p["metadata"]["name"] for p in first)
        # a restart: the status changes and new pods replace the old ones
        for pod in first:
            server.remove_pod(NS, pod["metadata"]["name"])
        restarted = kind.running(job)
        restarted["restarts"] = 1
        second = [kind.pod(job, i, attempt=1) for i in range(2)] if kind.name == "jobset" else []
        if kind.name == "trainjob":  # a node replaced by the JobSet: another random suffix
            restarted = {"jobsStatus": [{"name": "node", "active": 2, "ready": 1}]}
            second = [{**p, "metadata": {**p["metadata"], "name": p["metadata"]["name"] + "r"}} for p in first]
        for pod in second:
            server.put_pod(pod)
        server.set_job_status(NS, meta.name, restarted, kind.target.plural)
        server.reset_log()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            answer = asyncio.run(served.get(meta))
            renamed = sorted(link.uri.rsplit("/", 1)[-1] for link in answer.log_links)
            if renamed == sorted(p["metadata"]["name"] for p in second):
                break
            time.sleep(0.05)
        assert renamed == sorted(p["metadata"]["name"] for p in second)
        _polls(served, meta, 10, 0.02)
        assert len([r for r in server.requests if r.resource == "pods"]) == 1  # once for the new status
    finally:
        served.close()


@pytest.mark.parametrize(
    ("template", "made"),
    [
        ("https://logs.example.com/{{ .namespace }}/{{ .podName }}", 1),  # names only: made once per job version
        ("https://logs.example.com/{{ .podName }}?to={{ .podUnixFinishTime }}", 5),  # a running pod's finish moves
    ],
    ids=["names", "times"],
)
def test_links_are_made_once_per_job_version_unless_they_read_a_time(fake_api, tmp_path, monkeypatch, template, made):
    server, client = fake_api
    links = ({"name": "Logs", "template": template},)
    config = BackendConfig.from_dict({"watch_cache": False, "log_links": links, **FAST})
    served = ServedJobConnector(config=config, api_client_factory=lambda: client)
    target = BY_CONFIG["pytorchjob"]
    calls = []
    original = type(target).links

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(type(target), "links", counted)
    try:
        meta = served.create(load_template("official_container"), str(tmp_path / "a"), None, execution_metadata())
        running = {**RUNNING, "replicaStatuses": {"Master": {"active": 1}, "Worker": {"active": 2}}}
        server.set_job_status(NS, meta.name, running)
        answers = _polls(served, meta, 5, 0.01)
        assert len(calls) == made
        assert {tuple(link.uri for link in a.log_links) for a in answers} != set() and all(a.log_links for a in answers)
        if made == 1:
            assert len({tuple(link.uri for link in a.log_links) for a in answers}) == 1
        server.set_job_status(NS, meta.name, {**running, "conditions": [condition("Created"), condition("Succeeded")]})
        assert asyncio.run(served.get(meta)).phase == TaskExecution.SUCCEEDED
        assert len(calls) == made + 1  # a new version of the job: its links made again
    finally:
        served.close()
