"""The connector's watch cache (`backend_plugin/kube/watch/`) against the real API server: its LIST and WATCH, its
label selector, the BOOKMARKs the server sends, a watch held past the server's window and an etcd compaction (a real
410, and one LIST), and a restart of the API server under an open watch.

`tests/connector/test_watch_cache.py` drives the same cache through the fake API server, which can produce any fault
on demand; this file checks that what the fake does is what a real kube-apiserver does, where a real one can be made
to do it: PyTorchJobs held by `runPolicy.suspend` (the training operator writes their conditions, no pod starts) in a
namespace of their own.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import urllib3

from backend_plugin.kube.watch import JobWatchCache, WatchSettings, slim
from devcluster.kube import ApiError, wait_for
from tests.cluster.harness import RealCluster

GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "pytorchjobs"
MANAGED_LABEL = "app.kubernetes.io/managed-by"
MANAGED = f"{MANAGED_LABEL}=flytekitplugins-pytorch"
SETTINGS = WatchSettings(silence_s=10.0, max_staleness_s=2.0, backoff_initial_s=0.2, backoff_max_s=2.0, page_size=2)
"""A watch ended by the server after about 10 s (so its closing BOOKMARK comes soon), pages of 2 (a real continue)."""


def held_job(name: str, namespace: str, managed: bool = True) -> dict:
    """A PyTorchJob the training operator holds (`runPolicy.suspend`): it writes conditions and starts nothing."""
    labels = {MANAGED_LABEL: "flytekitplugins-pytorch"} if managed else {"other": "x"}
    container = {"name": "pytorch", "image": "python:3.11", "command": ["python", "-c", "pass"]}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "runPolicy": {"suspend": True},
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "Never", "template": {"spec": {"containers": [container]}}}
            },
        },
    }


@pytest.fixture
def namespace(real: RealCluster) -> Iterator[str]:
    name = f"watch-{uuid.uuid4().hex[:6]}"
    real.ensure_namespace(name)
    yield name
    try:
        real.kube.delete(f"/api/v1/namespaces/{name}")
    except ApiError:
        pass


@pytest.fixture
def make_cache(real: RealCluster) -> Iterator[Callable[[], JobWatchCache]]:
    from kubernetes import config

    made: list[tuple[JobWatchCache, Any]] = []

    def make() -> JobWatchCache:
        client = config.new_client_from_config(str(real.info.kubeconfig))
        cache = JobWatchCache(client, GROUP, VERSION, PLURAL, MANAGED, SETTINGS, slim)
        made.append((cache, client))
        return cache

    yield make
    for cache, client in made:
        # a watch still connecting to a server that went away ends only at its request timeout (a known limit of
        # `stop`, docs/testing.md): wait that long
        cache.stop(timeout=SETTINGS.request_timeout_s + 5.0)
        client.close()


def jobs_path(namespace: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"


def rv(obj: dict) -> int:
    return int(obj["metadata"]["resourceVersion"])


def synced_copy(cache: JobWatchCache, real: RealCluster, namespace: str, name: str) -> Callable[[], bool]:
    """Whether the cache holds the job as the API server has it now (its resourceVersion), slimmed."""

    def same() -> bool:
        held = cache.get(namespace, name)
        now = real.kube.get_or_none(f"{jobs_path(namespace)}/{name}")
        return held is not None and now is not None and held == slim(now)

    return same


def test_list_watch_and_label_selector_as_the_real_server_sends_them(
    real: RealCluster, namespace: str, make_cache: Callable[[], JobWatchCache]
) -> None:
    for i in range(5):
        real.kube.create(jobs_path(namespace), held_job(f"w{i}", namespace))
    real.kube.create(jobs_path(namespace), held_job("foreign", namespace, managed=False))
    cache = make_cache()
    assert cache.get(namespace, "w0") is None  # the first get starts the watch
    assert cache.wait_synced(namespace, 30)
    stats = cache.stats(namespace)
    assert stats["jobs"] == 5 and stats["lists"] == 3, stats  # 5 jobs in pages of 2: the server's continue tokens
    for i in range(5):  # each held as the server has it (the operator's conditions arrive through the watch)
        wait_for(f"w{i} as the server has it", synced_copy(cache, real, namespace, f"w{i}"), 30, 0.2)
    assert cache.get(namespace, "foreign") is None
    # a change arrives through the watch
    real.kube.merge_patch(f"{jobs_path(namespace)}/w1", {"metadata": {"annotations": {"touched": "yes"}}})
    wait_for("the annotation through the watch", synced_copy(cache, real, namespace, "w1"), 30, 0.2)
    assert cache.get(namespace, "w1")["metadata"]["annotations"]["touched"] == "yes"
    # a job that loses the selected label leaves the watch as DELETED while it still exists: only a hint
    real.kube.merge_patch(f"{jobs_path(namespace)}/w2", {"metadata": {"labels": {MANAGED_LABEL: None}}})
    wait_for("w2 out of the cache", lambda: cache.get(namespace, "w2") is None, 30, 0.2)
    assert real.kube.get_or_none(f"{jobs_path(namespace)}/w2") is not None
    # a job deleted
    real.kube.delete(f"{jobs_path(namespace)}/w3")
    wait_for("w3 deleted", lambda: cache.is_deleted(namespace, "w3"), 30, 0.2)
    assert cache.get(namespace, "w3") is None
    assert cache.stats(namespace)["lists"] == 3  # everything after the LIST came through the watch
    assert not cache.stats(namespace)["ignored"], cache.stats(namespace)


def test_the_real_servers_bookmarks_advance_the_resource_version(
    real: RealCluster, namespace: str, make_cache: Callable[[], JobWatchCache]
) -> None:
    real.kube.create(jobs_path(namespace), held_job("mine", namespace))
    cache = make_cache()
    cache.get(namespace, "mine")
    assert cache.wait_synced(namespace, 30)
    wait_for("mine as the server has it", synced_copy(cache, real, namespace, "mine"), 30, 0.2)
    lists = cache.stats(namespace)["lists"]
    # changes this watch does not see (another label): only a BOOKMARK can carry their resourceVersion to it
    foreign = [
        real.kube.create(jobs_path(namespace), held_job(f"other{i}", namespace, managed=False)) for i in range(3)
    ]
    newest = max(rv(f) for f in foreign)
    began = time.monotonic()
    wait_for("a BOOKMARK at or past the foreign jobs' resourceVersion",
             lambda: int(cache.stats(namespace)["resource_version"] or 0) >= newest, 90, 0.5)  # fmt: skip
    seconds = time.monotonic() - began
    assert cache.stats(namespace)["lists"] == lists  # no LIST: the watch's own BOOKMARK moved it
    print(f"\n[cluster] watch cache: a BOOKMARK carried the resourceVersion past 3 unseen changes in {seconds:.1f} s "
          f"(silence_s {SETTINGS.silence_s:g})")  # fmt: skip


DISRUPTIVE_ENV = "DEVCLUSTER_DISRUPTIVE"


@pytest.mark.skipif(
    os.environ.get(DISRUPTIVE_ENV) != "1",
    reason=f"opt-in ({DISRUPTIVE_ENV}=1), on a cluster of its own: it takes the API server away from every "
    "controller for half a minute",
)
def test_a_restart_of_the_api_server_under_an_open_watch(
    real: RealCluster, namespace: str, make_cache: Callable[[], JobWatchCache]
) -> None:
    """The API server goes away under the open watch and comes back with a new watch cache: the cache stops
    answering within its staleness bound while it cannot watch, then follows the jobs again, and a change made after
    the restart arrives (whether by resuming from its resourceVersion or by a LIST after a 410 is the server's choice,
    and printed)."""
    from devcluster.procs import Processes

    real.kube.create(jobs_path(namespace), held_job("steady", namespace))
    cache = make_cache()
    cache.get(namespace, "steady")
    assert cache.wait_synced(namespace, 30)
    wait_for("steady as the server has it", synced_copy(cache, real, namespace, "steady"), 30, 0.2)
    wait_for("the watch connected", lambda: cache.stats(namespace)["connected"], 30, 0.2)
    before = cache.stats(namespace)
    began = time.monotonic()
    procs = Processes(real.info.state)
    procs.restart("kube-apiserver", grace_s=15.0)
    stopped_answering = None
    deadline = time.monotonic() + 180
    while True:  # until the new server answers, the cache must stop answering within its bound
        if stopped_answering is None and cache.get(namespace, "steady") is None:
            stopped_answering = time.monotonic() - began
        try:
            # the job itself: `/version` answers before the custom resources' paths are installed (503 on them)
            real.kube.get(f"{jobs_path(namespace)}/steady")
            break
        except (ApiError, OSError, urllib3.exceptions.HTTPError):  # refused, reset, not ready yet
            pass
        assert time.monotonic() < deadline, "the API server did not come back in 180 s"
        time.sleep(0.2)
    down_s = time.monotonic() - began

    def patched() -> bool:  # the controllers' webhooks refuse writes until they have found the new server again
        try:
            real.kube.merge_patch(f"{jobs_path(namespace)}/steady", {"metadata": {"annotations": {"after": "restart"}}})
        except ApiError:
            return False
        return True

    wait_for("a write after the restart (the webhooks back)", patched, 300, 2.0)
    wait_for("the change after the restart, in the cache", synced_copy(cache, real, namespace, "steady"), 120, 0.5)
    after = cache.stats(namespace)
    relisted = after["lists"] - before["lists"]
    assert cache.get(namespace, "steady")["metadata"]["annotations"]["after"] == "restart"
    if down_s > SETTINGS.max_staleness_s + 2.0:  # down long enough for the bound to show
        assert stopped_answering is not None and stopped_answering <= down_s, (stopped_answering, down_s)
    print(f"\n[cluster] watch cache across an API server restart: down {down_s:.1f} s; stopped answering after "
          f"{stopped_answering if stopped_answering is None else round(stopped_answering, 1)} s; "
          f"{relisted} LIST(s) after it, {after['watches'] - before['watches']} watch(es)")  # fmt: skip


class HeldOnce:
    """The cache's server clock (`JobWatchCache(server_clock=...)`, told each LIST page's and WATCH's answer): once
    armed, it holds the watch thread at the next answer until released, as a connector's process stalled (a long
    pause, a host suspended) holds its watch at the resourceVersion it reached."""

    def __init__(self) -> None:
        self.armed = threading.Event()
        self.holding = threading.Event()
        self.release = threading.Event()

    def observe(self, headers: Any) -> None:
        if self.armed.is_set() and not self.holding.is_set():
            self.holding.set()
            self.release.wait(300)


EVENT_FRESH_S = 75.0
"""How long kube-apiserver's watch cache keeps an event at least (`eventFreshDuration` in k8s.io/apiserver's
cacher): a watch from an older resourceVersion gets 410 only once the cache, full, dropped the events after it."""


def test_a_watch_held_past_the_servers_window_and_an_etcd_compaction_gets_410_and_lists_again(
    real: RealCluster, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The cache's watch is held at its resourceVersion while the server moves on (writes past its watch cache's
    window, then an etcd compaction at the newest revision); released, it resumes from the old resourceVersion, the
    real server answers 410 (`Expired`), the cache lists once and then holds a change made after the compaction."""
    import base64
    import json
    import logging
    import urllib.parse
    import urllib.request

    from kubernetes import config

    from devcluster.controlplane import ETCD_CLIENT_PORT

    caplog.set_level(logging.INFO, logger="backend_plugin.kube.watch.informer")
    server = json.loads((real.info.state / "cluster.json").read_text())["server"]
    etcd = f"http://{urllib.parse.urlsplit(server).hostname}:{ETCD_CLIENT_PORT}"  # the control plane's address

    def etcd_call(path: str, body: dict) -> dict:
        request = urllib.request.Request(
            f"{etcd}{path}", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            return json.loads(answer.read())

    real.kube.create(jobs_path(namespace), held_job("mine", namespace))
    real.kube.create(jobs_path(namespace), held_job("busy", namespace, managed=False))
    held = HeldOnce()
    client = config.new_client_from_config(str(real.info.kubeconfig))
    cache = JobWatchCache(client, GROUP, VERSION, PLURAL, MANAGED, SETTINGS, slim, server_clock=held)
    try:
        cache.get(namespace, "mine")
        assert cache.wait_synced(namespace, 30)
        wait_for("mine as the server has it", synced_copy(cache, real, namespace, "mine"), 30, 0.2)
        held.armed.set()
        wait_for("the watch thread held at its next answer", held.holding.is_set, 60, 0.2)
        lists, old = cache.stats(namespace)["lists"], cache.stats(namespace)["resource_version"]
        began = time.monotonic()
        while time.monotonic() - began < EVENT_FRESH_S + 5.0:  # polled meanwhile, as the connector polls
            cache.get(namespace, "mine")
            time.sleep(1.0)
        for i in range(300):  # past the window of the server's watch cache (it grows while its events are fresh)
            real.kube.merge_patch(f"{jobs_path(namespace)}/busy", {"metadata": {"annotations": {"n": str(i)}}})
        real.kube.merge_patch(f"{jobs_path(namespace)}/mine", {"metadata": {"annotations": {"after": "compaction"}}})
        revision = etcd_call("/v3/kv/range", {"key": base64.b64encode(b"/").decode(), "limit": 1})["header"]["revision"]
        etcd_call("/v3/kv/compaction", {"revision": revision, "physical": True})
        held.release.set()
        wait_for("the change after the compaction, in the cache", synced_copy(cache, real, namespace, "mine"), 60, 0.5)
        assert cache.get(namespace, "mine")["metadata"]["annotations"]["after"] == "compaction"
        expired = [r.getMessage() for r in caplog.records if "expired" in r.getMessage()]
        assert expired and "too old resource version" in expired[0], [r.getMessage() for r in caplog.records]
        relisted = cache.stats(namespace)["lists"] - lists
        assert relisted == 1, cache.stats(namespace)  # one LIST of one page (two jobs, pages of two)
        print(f"\n[cluster] watch held at resourceVersion {old} for {time.monotonic() - began:.0f} s, 301 writes, etcd "
              f"compacted at {revision}: {expired[0]}; {relisted} LIST after it")  # fmt: skip
    finally:
        held.release.set()
        cache.stop(timeout=SETTINGS.request_timeout_s + 5.0)
        client.close()
