"""The connector never answers wrong when the API misbehaves the way networks, proxies and operators do: a half-open
watch, a label change, a delete and re-create behind a lagging watch, events it did not ask for, a watch answered
with something that is not an event, a skewed clock, Retry-After, slow answers. Every case goes through flytekit's
`AsyncConnectorService` as propeller calls it (CreateTask, then GetTask polls), against the fake API server through
the real kubernetes client, with the watch cache on; each test also counts the API requests the case costs."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from flyteidl.core.execution_pb2 import TaskExecution

from backend_plugin.config import BackendConfig
from backend_plugin.connector import JobMetadata, ServedJobConnector
from tests.connector.helpers import Answer, Propeller
from tests.fakeapi.objects import condition
from tests.fakeapi.server import FakeKubeApi

NS = "flytesnacks-development"
TE = TaskExecution
RUNNING = {
    "conditions": [condition("Created"), condition("Running")],
    "replicaStatuses": {"Master": {"active": 1}, "Worker": {"active": 2}},  # every replica up: no pods to read
}
FAILED = {
    "conditions": [condition("Created"), condition("Running"), condition("Failed", message="boom.")],
    "replicaStatuses": {"Master": {"failed": 1}, "Worker": {"active": 2}},
}
MANAGED_BY = "app.kubernetes.io/managed-by"
FAST = {"api_backoff_initial_s": 0.05, "api_backoff_max_s": 0.2}


def served(server: FakeKubeApi, client: Any, **config: Any) -> ServedJobConnector:
    settings = {"watch_cache": True, **FAST, **config}
    return ServedJobConnector(config=BackendConfig.from_dict(settings), api_client_factory=lambda: client)


@pytest.fixture
def propeller(fake_api) -> Iterator[Any]:
    """(server, client, make): `make(**config)` serves a connector with the watch cache on."""
    made: list[ServedJobConnector] = []

    def make(**config: Any) -> Propeller:
        connector = served(fake_api.server, fake_api.client, **config)
        made.append(connector)
        return Propeller(fake_api.server, connector)

    yield fake_api.server, fake_api.client, make
    for connector in made:
        connector.close()


def name_of(meta: bytes) -> str:
    return str(json.loads(meta)["name"])


def uid_of(meta: bytes) -> str:
    return str(json.loads(meta)["uid"])


def requests(server: FakeKubeApi) -> int:
    """GETs and LISTs (not watches) since the log was reset."""
    return sum(1 for r in server.requests if r.verb in ("get", "list"))


def settle(p: Propeller, meta: bytes, expected: str = "RUNNING", timeout: float = 15.0) -> None:
    """Poll until the answer is `expected` from the cache (no request to the API)."""
    deadline = time.monotonic() + timeout
    while True:
        p.server.reset_log()
        if p.get(meta).name == expected and requests(p.server) == 0:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not answered {expected} from the cache in {timeout}s")
        time.sleep(0.05)


def poll_until(p: Propeller, meta: bytes, done: Any, timeout: float, every: float = 0.2) -> list[tuple[float, Answer]]:
    """Poll every `every` s until `done(answer)`; returns (seconds since start, answer) of every poll."""
    start = time.monotonic()
    seen: list[tuple[float, Answer]] = []
    while True:
        answer = p.get(meta)
        seen.append((time.monotonic() - start, answer))
        if done(answer):
            return seen
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not done after {timeout}s: {[(round(t, 1), a.name) for t, a in seen[-5:]]}")
        time.sleep(every)


def connected_for(cache: Any, seconds: float) -> None:
    """Wait until the namespace's watch has been connected for `seconds`."""
    deadline = time.monotonic() + 10
    while not cache.stats(NS).get("connected"):
        assert time.monotonic() < deadline, cache.stats(NS)
        time.sleep(0.05)
    time.sleep(seconds)
    assert cache.stats(NS)["connected"], cache.stats(NS)


def failed(answer: Answer) -> bool:
    return answer.name == "RETRYABLE_FAILED" and "boom." in answer.message


# ---------------------------------------------------------------------------------------------- a half-open watch


@pytest.mark.parametrize("every_watch", [False, True], ids=["one-watch", "every-watch"])
def test_a_stalled_watch_is_presumed_dead_and_the_failure_is_seen(propeller, tmp_path, every_watch) -> None:
    """The socket stays open and nothing arrives, then the job fails: the watch is reopened (or, when every watch
    stalls, the cache stops answering) within `watch_silence_s + 5 s`, at under one request per second."""
    server, _, make = propeller
    p = make(watch_silence_s=2.0)
    meta = p.create(tmp_path)
    server.set_job_status(NS, name_of(meta), RUNNING)
    settle(p, meta)
    cache = p.connector.cache(p.connector.target())
    assert cache is not None
    connected_for(cache, 1.5)  # open, with BOOKMARKs arriving: a healthy watch until the stall
    server.reset_log()
    server.stall_watches(new=every_watch)
    server.set_job_status(NS, name_of(meta), FAILED)
    seen = poll_until(p, meta, failed, timeout=20.0)
    took = seen[-1][0]
    assert took <= 2.0 + 5.0 + 3.0, seen  # silence_s + max_staleness_s, and a loaded machine's slack
    assert all(a.name in ("RUNNING", "RETRYABLE_FAILED") for _, a in seen), seen  # stale, never invented
    spent = len(server.requests)
    assert spent <= max(3, took * 1.0), [(r.verb, r.resource) for r in server.requests]
    server.unstall_watches()


# ---------------------------------------------------------------------------------------------- a label change


@pytest.mark.parametrize("labels", [{"app.kubernetes.io/managed-by": "someone-else"}, {}], ids=["changed", "removed"])
def test_a_job_that_lost_our_label_is_still_ours_by_uid(propeller, tmp_path, labels) -> None:
    server, _, make = propeller
    p = make()
    meta = p.create(tmp_path)
    server.set_job_status(NS, name_of(meta), RUNNING)
    settle(p, meta)
    job = server.get_job(NS, name_of(meta))
    job["metadata"]["labels"] = {**{k: v for k, v in job["metadata"]["labels"].items() if k != MANAGED_BY}, **labels}
    server.put_job(job)  # the selector's watch sees a DELETED
    cache = p.connector.cache(p.connector.target())
    assert cache is not None
    deadline = time.monotonic() + 10
    while cache.get(NS, name_of(meta)) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    server.reset_log()
    for _ in range(3):
        answer = p.get(meta)
        assert answer.name == "RUNNING", answer
    assert requests(server) == 3  # one GET per poll: the watch no longer sees it
    server.set_job_status(NS, name_of(meta), FAILED)
    assert failed(p.get(meta))


# ---------------------------------------------------------------------------------------------- delete and re-create


@pytest.mark.parametrize("replicas", [1, 2])
def test_a_job_recreated_under_the_same_name_is_never_reported_gone(propeller, tmp_path, replicas) -> None:
    """The job is deleted and created again (a new uid) while the watch lags 3 s: the task that owns the new uid
    never hears "no longer exists", the old uid hears it was replaced."""
    server, _, make = propeller
    ps = [make() for _ in range(replicas)]
    old_meta = ps[0].create(tmp_path)
    name = name_of(old_meta)
    server.set_job_status(NS, name, RUNNING)
    for p in ps:
        settle(p, old_meta)
    server.watch_lag_s = 3.0
    stored = server.get_job(NS, name)
    server.remove_job(NS, name)
    for key in ("uid", "resourceVersion", "creationTimestamp"):
        stored["metadata"].pop(key)
    stored.pop("status")
    new_uid = server.put_job(stored)["metadata"]["uid"]
    new_meta = JobMetadata(**{**json.loads(old_meta), "uid": new_uid}).encode()
    server.set_job_status(NS, name, RUNNING)
    server.reset_log()
    start = time.monotonic()
    answers = []
    while time.monotonic() - start < 4.0:
        for p in ps:
            answers.append(p.get(new_meta))
        time.sleep(0.1)
    assert answers and all(a.name == "RUNNING" for a in answers), {a.message for a in answers}
    old = ps[-1].get(old_meta)
    assert old.name == "RETRYABLE_FAILED" and f"uid {new_uid}" in old.message, old
    server.watch_lag_s = 0.0
    assert requests(server) <= len(answers) + 1  # at most one GET per poll while the watch lags


# ---------------------------------------------------------------------------------------------- events not asked for


def _event(server: FakeKubeApi, etype: str, meta: bytes, **changes: Any) -> dict:
    job = server.get_job(NS, name_of(meta))
    assert job is not None
    for path, value in changes.items():
        where = job
        *parents, last = path.split("__")
        for part in parents:
            where = where[part]
        where[last] = value
    return {"type": etype, "object": job}


@pytest.mark.parametrize(
    "case",
    ["foreign MODIFIED", "foreign DELETED", "unlabelled MODIFIED", "replayed older resourceVersion"],
)
def test_events_not_asked_for_are_ignored(propeller, tmp_path, case) -> None:
    server, _, make = propeller
    p = make()
    meta = p.create(tmp_path)
    server.set_job_status(NS, name_of(meta), RUNNING)
    settle(p, meta)
    held_rv = int(server.get_job(NS, name_of(meta))["metadata"]["resourceVersion"])
    if case == "foreign MODIFIED":
        event = _event(server, "MODIFIED", meta, metadata__namespace="elsewhere", metadata__uid="other-uid",
                       metadata__labels={}, metadata__resourceVersion=str(held_rv + 50))  # fmt: skip
    elif case == "foreign DELETED":
        event = _event(server, "DELETED", meta, metadata__namespace="elsewhere", metadata__uid="other-uid",
                       metadata__resourceVersion=str(held_rv + 50))  # fmt: skip
    elif case == "unlabelled MODIFIED":
        event = _event(server, "MODIFIED", meta, metadata__labels={}, metadata__uid="other-uid",
                       metadata__resourceVersion=str(held_rv + 50), status={})  # fmt: skip
    else:
        event = _event(server, "MODIFIED", meta, metadata__resourceVersion=str(held_rv - 1), status={})
    assert server.inject_watch_event(event) >= 1
    time.sleep(0.5)
    server.reset_log()
    for _ in range(5):
        answer = p.get(meta)
        assert answer.name == "RUNNING", answer
    assert requests(server) == 0  # still answered from the cache: the event changed nothing
    cache = p.connector.cache(p.connector.target())
    assert cache is not None and sum(cache.stats(NS)["ignored"].values()) == 1


def test_a_watch_answered_with_a_list_relists_with_backoff(propeller, tmp_path) -> None:
    """A proxy answers the watch with the LIST body: the watch is broken, the cache relists after a backoff (no hot
    loop), answers stop being served from it within 5 s, and the failure meanwhile is seen."""
    server, _, make = propeller
    p = make(api_backoff_initial_s=0.05)
    meta = p.create(tmp_path)
    server.set_job_status(NS, name_of(meta), RUNNING)
    settle(p, meta)
    listing = json.dumps({"kind": "PyTorchJobList", "apiVersion": "kubeflow.org/v1",
                          "metadata": {"resourceVersion": "1"},
                          "items": [server.get_job(NS, name_of(meta))]}).encode()  # fmt: skip
    server.answer_raw(200, listing, times=None, verb="watch")
    server.reset_log()
    server.drop_watches()
    server.set_job_status(NS, name_of(meta), FAILED)
    seen = poll_until(p, meta, failed, timeout=10.0)
    assert seen[-1][0] <= 5.0 + 2.0, seen
    time.sleep(3.0)
    watches = len(server.calls(verb="watch"))
    assert 1 <= watches <= 8, watches  # 0.8 s doubling backoff (jittered): a handful in ~5 s, not hundreds
    server.clear_faults()


# ---------------------------------------------------------------------------------------------- time


def test_a_server_clock_behind_ours_is_no_verdict(propeller, tmp_path) -> None:
    """The API server's clock is 310 s behind: a job created a second ago is QUEUED, not FAILED for a missed pickup;
    a job really 400 s old on the server's clock still fails (the timeout works)."""
    server, _, make = propeller
    server.clock_offset_s = -310.0
    p = make(operator_pickup_timeout_s=300.0)
    meta = p.create(tmp_path)
    server.reset_log()
    answers = [p.get(meta) for _ in range(3)]
    assert all(a.name == "QUEUED" for a in answers), answers
    old = server.get_job(NS, name_of(meta))
    server.remove_job(NS, name_of(meta))
    from tests.fakeapi.server import now_rfc3339

    old["metadata"]["creationTimestamp"] = now_rfc3339(-310.0 - 400.0)
    old["metadata"].pop("resourceVersion")
    server.put_job(old)
    time.sleep(0.5)  # the watch's latency
    late = p.get(meta)
    assert late.name == "FAILED" and "operator_pickup_timeout_s=300" in late.message, late


# ------------------------------------------------------------------------------- an API client like client-go


def test_retry_after_is_waited_out_within_the_budget(propeller, tmp_path) -> None:
    server, _, make = propeller
    p = make(watch_cache=False, api_backoff_initial_s=0.01, api_backoff_max_s=0.02)
    meta = p.create(tmp_path)
    server.set_job_status(NS, name_of(meta), RUNNING)
    server.reset_log()
    server.fail(429, times=1, verb="get", retry_after="2")
    answer = p.get(meta)
    assert answer.name == "RUNNING", answer
    gets = server.calls(verb="get")
    assert len(gets) == 2 and gets[1].started - gets[0].finished >= 1.9, [(g.started, g.finished) for g in gets]


def test_a_retry_after_past_the_budget_gives_up_at_once_saying_so(propeller, tmp_path) -> None:
    server, _, make = propeller
    p = make(watch_cache=False, api_get_budget_s=5.0)
    meta = p.create(tmp_path)
    server.fail(429, times=1, verb="get", retry_after="30")
    start = time.monotonic()
    answer = p.get(meta)
    assert time.monotonic() - start < 2.0
    assert answer.error and "retry after 30s" in answer.error and name_of(meta) in answer.error, answer
    assert len(server.calls(verb="get", resource="pytorchjobs")) == 1


@pytest.mark.parametrize("call", ["get", "delete"])
def test_a_slow_api_that_answers_inside_the_budget_succeeds(propeller, tmp_path, call) -> None:
    """Every answer takes 2 s, the budget is 3 s and `api_timeout_s` 1 s: one attempt reads for what the budget
    leaves (client-go's context deadline), so the call succeeds with one request."""
    server, _, make = propeller
    p = make(watch_cache=False, api_timeout_s=1.0, api_get_budget_s=3.0, api_delete_budget_s=3.0)
    meta = p.create(tmp_path)
    server.set_job_status(NS, name_of(meta), RUNNING)
    server.reset_log()
    server.delay(2.0, times=None, verb=call, before=True)
    if call == "get":
        assert p.get(meta).name == "RUNNING"
    else:
        context = p.delete(meta)
        assert context.code is None, context.details
        assert server.get_job(NS, name_of(meta)) is None
    assert len(server.calls(verb=call)) == 1


def test_a_200_that_is_not_json_is_retried_then_an_error_naming_the_job(propeller, tmp_path) -> None:
    server, _, make = propeller
    p = make(watch_cache=False, api_get_budget_s=2.0)
    meta = p.create(tmp_path)
    server.set_job_status(NS, name_of(meta), RUNNING)
    server.answer_raw(200, b"<html>a proxy</html>", times=1, verb="get", content_type="text/html")
    assert p.get(meta).name == "RUNNING"  # retried
    server.answer_raw(200, b"<html>a proxy</html>", times=None, verb="get", content_type="text/html")
    answer = p.get(meta)
    assert answer.error and name_of(meta) in answer.error and "not JSON" in answer.error, answer
    assert "a proxy" not in answer.error
    server.clear_faults()


# ---------------------------------------------------------------------------------------------- lifecycle


def test_an_idle_namespace_stops_its_thread_and_watch_and_starts_again(propeller, tmp_path) -> None:
    server, _, make = propeller
    p = make(watch_idle_s=1.0)
    meta = p.create(tmp_path)
    server.set_job_status(NS, name_of(meta), RUNNING)
    settle(p, meta)
    cache = p.connector.cache(p.connector.target())
    assert cache is not None and cache.namespaces() == [NS] and server.open_watches() == 1
    threads = {t.name for t in threading.enumerate()}
    assert any(n.startswith("job-watch-") for n in threads)
    deadline = time.monotonic() + 15
    while (cache.namespaces() or server.open_watches()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert cache.namespaces() == [] and server.open_watches() == 0
    assert not any(t.name.startswith("job-watch-") and t.is_alive() for t in threading.enumerate())
    settle(p, meta)  # the next poll lists and watches again
    assert cache.namespaces() == [NS]


# ---------------------------------------------------------------------------------------------- what held, holds


def test_without_list_and_watch_every_poll_is_one_get(propeller, tmp_path) -> None:
    server, _, make = propeller
    server.forbid("list", "pytorchjobs")
    server.forbid("watch", "pytorchjobs")
    p = make()
    meta = p.create(tmp_path)
    server.set_job_status(NS, name_of(meta), RUNNING)
    server.reset_log()
    for _ in range(5):
        assert p.get(meta).name == "RUNNING"
    assert len(server.calls(verb="get", resource="pytorchjobs")) == 5
    server.set_job_status(NS, name_of(meta), FAILED)
    assert failed(p.get(meta))


@pytest.mark.parametrize("fault", ["410 and a slow relist", "dropped watch refused"])
def test_a_broken_watch_is_seen_within_five_seconds(propeller, tmp_path, fault) -> None:
    server, _, make = propeller
    p = make()
    meta = p.create(tmp_path)
    server.set_job_status(NS, name_of(meta), RUNNING)
    settle(p, meta)
    if fault == "410 and a slow relist":
        server.delay(8.0, times=None, verb="list", resource="pytorchjobs", before=True)
        server.expire_watches()
    else:
        server.fail(503, times=None, verb="watch")
        server.drop_watches()
    server.set_job_status(NS, name_of(meta), FAILED)
    seen = poll_until(p, meta, failed, timeout=15.0)
    assert seen[-1][0] <= 5.0 + 2.0, [(round(t, 1), a.name) for t, a in seen]
    server.clear_faults()
