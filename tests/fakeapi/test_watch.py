"""LIST and WATCH on the fake API server, as the real `kubernetes` client and a raw HTTP client see them."""

from __future__ import annotations

import http.client
import json
import threading
import time
from urllib.parse import urlsplit

import pytest
import urllib3
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from backend_plugin.kinds.trainjob import PLURAL as TRAINJOBS
from tests.fakeapi.objects import condition, replica_pod
from tests.fakeapi.server import GROUP, PLURAL, VERSION, FakeKubeApi

NS = "ns"
MANAGED = "app.kubernetes.io/managed-by"


def job(name: str, managed: bool = True, namespace: str = NS) -> dict:
    labels = {MANAGED: "flytekitplugins-pytorch"} if managed else {}
    meta = {"name": name, "namespace": namespace, "labels": labels}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PyTorchJob", "metadata": meta, "spec": {}}


@pytest.fixture
def server():
    with FakeKubeApi(history_limit=50) as api:
        api.bookmark_interval_s = 0.2
        yield api


@pytest.fixture
def custom(server):
    api_client = server.api_client()
    yield client.CustomObjectsApi(api_client)
    api_client.close()


def watch_events(custom, stop_after: int, **kwargs) -> list[dict]:
    """The raw events of one watch of the PyTorchJobs in NS, until `stop_after` of them or the server ends it."""
    w = watch.Watch()
    events = []
    for event in w.stream(custom.list_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, **kwargs):
        events.append(event)
        if len(events) >= stop_after:
            w.stop()
    return events


def in_background(fn, *args, **kwargs) -> tuple[threading.Thread, dict]:
    """Run `fn` in a thread; the dict gets `result` or `error`."""
    out: dict = {}

    def target() -> None:
        try:
            out["result"] = fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - handed to the test, which asserts on it
            out["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, out


def wait_for(predicate, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


def raw_watch(server: FakeKubeApi, query: str) -> tuple[http.client.HTTPResponse, http.client.HTTPConnection]:
    conn = http.client.HTTPConnection(urlsplit(server.host).netloc, timeout=10)
    conn.request("GET", f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/{PLURAL}?watch=true&{query}")
    return conn.getresponse(), conn


# ---------------------------------------------------------------------------------------------------------- LIST


def test_list_is_a_list_kind_with_resource_version_and_label_selector(server, custom):
    server.put_job(job("a"))
    server.put_job(job("b", managed=False))
    server.put_job(job("c", namespace="other"))
    out = custom.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, label_selector=MANAGED)
    assert (out["kind"], out["apiVersion"]) == ("PyTorchJobList", f"{GROUP}/{VERSION}")
    assert out["metadata"]["resourceVersion"] == server.resource_version == "3"
    assert [j["metadata"]["name"] for j in out["items"]] == ["a"]
    assert "continue" not in out["metadata"]


@pytest.mark.parametrize("resource", [PLURAL, "pods"])
def test_list_pages_with_limit_and_continue(server, custom, resource):
    owner = server.put_job(job("owner", managed=False))
    for i in range(7):
        if resource == "pods":
            server.put_pod(replica_pod(owner, "Worker", i))
        else:
            server.put_job(job(f"j{i}"))
    if resource == "pods":
        core = client.CoreV1Api(custom.api_client)
        selector = "training.kubeflow.org/job-name=owner"

        def page(**kw):
            out = core.list_namespaced_pod(NS, label_selector=selector, limit=3, **kw)
            return out.metadata.to_dict(), [p.metadata.name for p in out.items]
    else:

        def page(**kw):
            out = custom.list_namespaced_custom_object(
                GROUP, VERSION, NS, PLURAL, label_selector=MANAGED, limit=3, **kw
            )
            return out["metadata"], [j["metadata"]["name"] for j in out["items"]]

    names, token, remaining = [], None, []
    for _ in range(4):
        meta, got = page(**({"_continue": token} if token else {}))
        names += got
        token = meta.get("continue") or meta.get("_continue")
        remaining.append(meta.get("remainingItemCount") or meta.get("remaining_item_count"))
        if not token:
            break
    assert len(names) == 7 and names == sorted(names) and len(set(names)) == 7
    assert remaining == [4, 1, None]


def test_continue_token_older_than_history_is_410(server, custom):
    for i in range(3):
        server.put_job(job(f"j{i}"))
    first = custom.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, limit=1)
    server.put_job(job("later"))
    assert server.compact() == "4"
    with pytest.raises(ApiException) as err:
        custom.list_namespaced_custom_object(
            GROUP, VERSION, NS, PLURAL, limit=1, _continue=first["metadata"]["continue"]
        )
    assert (err.value.status, json.loads(err.value.body)["reason"]) == (410, "Expired")


def test_list_from_a_future_resource_version_is_504(server, custom):
    server.put_job(job("a"))
    with pytest.raises(ApiException) as err:
        custom.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, resource_version="99")
    assert err.value.status == 504
    out = custom.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, resource_version="1")
    assert [j["metadata"]["name"] for j in out["items"]] == ["a"]


# ---------------------------------------------------------------------------------------------------------- WATCH


def test_every_state_change_is_a_watch_event_with_a_new_resource_version(server, custom):
    start = custom.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL)["metadata"]["resourceVersion"]
    thread, out = in_background(watch_events, custom, 6, resource_version=start, timeout_seconds=10)
    wait_for(lambda: server.open_watches(PLURAL) == 1)
    server.put_job(job("a"))
    server.set_job_status(NS, "a", {"conditions": [condition("Running")]})
    server.set_job_status(NS, "a", {"conditions": [condition("Succeeded")]})
    server.remove_job(NS, "a")
    custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, job("b"))
    custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "b")
    thread.join(10)
    events = out["result"]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "a"), ("MODIFIED", "a"), ("MODIFIED", "a"), ("DELETED", "a"), ("ADDED", "b"), ("DELETED", "b"),
    ]  # fmt: skip
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(set(versions)) and versions[0] > int(start)
    assert events[1]["object"]["status"]["conditions"][0]["type"] == "Running"
    assert events[3]["object"]["status"]["conditions"][0]["type"] == "Succeeded"  # the last state, deleted


def test_watch_without_resource_version_starts_with_the_current_state(server, custom):
    server.put_job(job("a"))
    server.put_job(job("b"))
    events = watch_events(custom, 2, timeout_seconds=5)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "a"), ("ADDED", "b")]


def test_watch_label_selector_turns_leaving_and_entering_into_deleted_and_added(server, custom):
    server.put_job(job("x"))
    rv = server.resource_version
    thread, out = in_background(
        watch_events, custom, 3, resource_version=rv, label_selector=MANAGED, timeout_seconds=10
    )
    wait_for(lambda: server.open_watches() == 1)
    server.put_job(job("unmanaged", managed=False))
    server.put_job(job("x", managed=False))
    server.set_job_status(NS, "x", {"conditions": []})
    server.put_job(job("x"))
    server.put_job(job("y"))
    thread.join(10)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in out["result"]] == [
        ("DELETED", "x"), ("ADDED", "x"), ("ADDED", "y"),
    ]  # fmt: skip


def test_watch_ends_after_timeout_seconds(server, custom):
    started = time.monotonic()
    assert watch_events(custom, 1, resource_version=server.resource_version, timeout_seconds=1) == []
    assert 0.9 <= time.monotonic() - started < 5
    assert server.calls(verb="watch", resource=PLURAL, status=200)[0].finished > 0


def test_bookmarks_only_when_allowed_and_carry_the_latest_resource_version(server, custom):
    server.put_job(job("a"))
    server.put_pod(replica_pod(server.get_job(NS, "a"), "Master", 0))  # a change this watch does not see
    events = watch_events(
        custom, 1, resource_version="1", allow_watch_bookmarks=True, label_selector="nothing", timeout_seconds=5
    )
    assert [{"type": e["type"], "object": e["object"]} for e in events] == [
        {"type": "BOOKMARK", "object": {"kind": "PyTorchJob", "apiVersion": f"{GROUP}/{VERSION}",
                                        "metadata": {"resourceVersion": "2"}}},
    ]  # fmt: skip
    assert watch_events(custom, 1, resource_version="2", timeout_seconds=1) == []


def test_watch_from_a_resource_version_older_than_the_history_is_410(custom):
    with FakeKubeApi(history_limit=3) as small:
        for i in range(5):
            small.put_job(job(f"j{i}"))
        api_client = small.api_client()
        try:
            custom = client.CustomObjectsApi(api_client)
            with pytest.raises(ApiException) as err:
                watch_events(custom, 1, resource_version="1", timeout_seconds=5)
            assert err.value.status == 410 and "too old resource version: 1 (2)" in err.value.reason
            assert [e["object"]["metadata"]["name"] for e in watch_events(custom, 3, resource_version="2")] == [
                "j2", "j3", "j4",
            ]  # fmt: skip
            response, conn = raw_watch(small, "resourceVersion=1")
            assert response.status == 200  # the API server answers 200 and ends the stream with the ERROR event
            event = json.loads(response.read())
            conn.close()
        finally:
            api_client.close()
    assert event["type"] == "ERROR"
    assert {k: event["object"][k] for k in ("kind", "code", "reason")} == {"kind": "Status", "code": 410,
                                                                          "reason": "Expired"}  # fmt: skip


def test_expire_watches_ends_an_open_watch_with_410(server, custom):
    thread, out = in_background(watch_events, custom, 5, resource_version=server.resource_version, timeout_seconds=10)
    wait_for(lambda: server.open_watches() == 1)
    assert server.expire_watches() == 1
    thread.join(10)
    assert isinstance(out.get("error"), ApiException) and out["error"].status == 410


def test_dropped_watch_is_a_protocol_error_for_the_client(server, custom):
    server.put_job(job("a"))
    thread, out = in_background(watch_events, custom, 5, resource_version=server.resource_version, timeout_seconds=10)
    wait_for(lambda: server.open_watches() == 1)
    assert server.drop_watches(PLURAL) == 1
    thread.join(10)
    assert isinstance(out.get("error"), urllib3.exceptions.ProtocolError)
    wait_for(lambda: server.open_watches() == 0)  # the server's handler thread ends just after the client sees it


def test_drop_next_watches_after_some_events(server, custom):
    for name in "abc":
        server.put_job(job(name))
    server.drop_next_watches(after_events=2, resource=PLURAL)
    seen = []
    with pytest.raises(urllib3.exceptions.ProtocolError):
        for event in watch.Watch().stream(
            custom.list_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, timeout_seconds=5
        ):
            seen.append(event["object"]["metadata"]["name"])
    assert seen == ["a", "b"]
    assert len(watch_events(custom, 3, timeout_seconds=5)) == 3  # only the next watch was cut
    with pytest.raises(ValueError, match="after_events=-1"):
        server.drop_next_watches(after_events=-1)


def test_raw_watch_is_chunked_json_lines(server):
    server.put_job(job("a"))
    response, conn = raw_watch(server, "timeoutSeconds=1&allowWatchBookmarks=true")
    assert response.getheader("Transfer-Encoding") == "chunked"
    assert response.getheader("Content-Type") == "application/json"
    lines = response.read().decode().splitlines()
    conn.close()
    assert json.loads(lines[0])["type"] == "ADDED"
    assert all(json.loads(line)["type"] in ("ADDED", "BOOKMARK") for line in lines)


def test_pods_and_trainjobs_are_watched_too(server, custom):
    core = client.CoreV1Api(custom.api_client)
    owner = server.put_job(job("o"))
    server.put_pod(replica_pod(owner, "Master", 0))
    server.put_job({**job("t"), "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob"})
    pods = list(watch.Watch().stream(core.list_namespaced_pod, NS, timeout_seconds=1))
    assert [(e["type"], e["object"].metadata.name) for e in pods] == [("ADDED", "o-master-0")]
    train = list(
        watch.Watch().stream(
            custom.list_namespaced_custom_object, "trainer.kubeflow.org", "v1alpha1", NS, TRAINJOBS, timeout_seconds=1
        )
    )
    assert [(e["type"], e["object"]["kind"]) for e in train] == [("ADDED", "TrainJob")]


def test_stop_ends_open_watches(custom):
    api = FakeKubeApi().start()
    api_client = api.api_client()
    try:
        watcher = client.CustomObjectsApi(api_client)
        thread, out = in_background(watch_events, watcher, 1, resource_version="0", timeout_seconds=30)
        wait_for(lambda: api.open_watches() == 1)
        api.stop()
        thread.join(5)
        assert not thread.is_alive() and "result" in out
    finally:
        api_client.close()


# ------------------------------------------------------------------------------ faults a watch cache must survive


def test_a_stalled_watch_sends_nothing_until_let_go(server, custom) -> None:
    server.put_job(job("a"))
    rv = server.resource_version
    thread, out = in_background(watch_events, custom, 1, resource_version=rv, allow_watch_bookmarks=True,
                                timeout_seconds=30)  # fmt: skip
    deadline = time.monotonic() + 5
    while server.open_watches() == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.stall_watches() == 1
    server.put_job({**job("b")})
    time.sleep(1.0)  # five bookmark intervals: nothing arrives
    assert "result" not in out and thread.is_alive()
    server.unstall_watches()
    thread.join(5)
    assert out["result"][0]["type"] == "ADDED" and out["result"][0]["object"]["metadata"]["name"] == "b"


def test_a_lagging_watch_delivers_a_change_late(server, custom) -> None:
    server.watch_lag_s = 0.6
    rv = server.resource_version
    thread, out = in_background(watch_events, custom, 1, resource_version=rv, timeout_seconds=30)
    time.sleep(0.2)
    changed = time.monotonic()
    server.put_job(job("a"))
    thread.join(5)
    assert out["result"][0]["object"]["metadata"]["name"] == "a" and time.monotonic() - changed >= 0.5


def test_an_injected_event_is_sent_as_it_is(server, custom) -> None:
    rv = server.resource_version
    thread, out = in_background(watch_events, custom, 1, resource_version=rv, timeout_seconds=30)
    deadline = time.monotonic() + 5
    while server.open_watches() == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    foreign = job("a", managed=False, namespace="elsewhere")
    assert server.inject_watch_event({"type": "MODIFIED", "object": foreign}) == 1
    thread.join(5)
    assert out["result"][0]["raw_object"]["metadata"]["namespace"] == "elsewhere"


def test_retry_after_and_a_skewed_clock_are_in_the_headers(server) -> None:
    import email.utils

    server.clock_offset_s = -310.0
    server.fail(429, verb="get", retry_after="2")
    url = f"{server.host}/apis/{GROUP}/{VERSION}/namespaces/{NS}/{PLURAL}/a"
    answer = urllib3.PoolManager().request("GET", url, retries=False)
    assert answer.status == 429 and answer.headers["Retry-After"] == "2"
    date = email.utils.parsedate_to_datetime(answer.headers["Date"]).timestamp()
    assert abs(date - (time.time() - 310.0)) < 3
    stored = server.put_job(job("a"))
    created = email.utils.parsedate_to_datetime(
        time.strftime(
            "%a, %d %b %Y %H:%M:%S GMT", time.strptime(stored["metadata"]["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ")
        )  # fmt: skip
    ).timestamp()
    assert abs(created - (time.time() - 310.0)) < 3
