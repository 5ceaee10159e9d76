"""The watch-backed job cache (backend_plugin/kube/watch/) against the fake API server, through the real client."""

from __future__ import annotations

import copy
import json
import threading
import time
import tracemalloc
from pathlib import Path

import pytest
import yaml

from backend_plugin.kinds.trainjob import PLURAL as TRAINJOBS
from backend_plugin.kube.watch import KEPT_METADATA, JobWatchCache, WatchSettings, parse_equality_selector, slim
from tests.fakeapi.objects import condition
from tests.fakeapi.server import GROUP, PLURAL, VERSION, FakeKubeApi

NS = "ns"
MANAGED = "app.kubernetes.io/managed-by=flytekitplugins-pytorch"
FAST = WatchSettings(watch_timeout_s=30, max_staleness_s=0.5, backoff_initial_s=0.05, backoff_max_s=0.2, page_size=3)
GOLDEN_JOB = Path(__file__).resolve().parents[1] / "data" / "jobs" / "cpu_only.yaml"


def job(name: str, managed: bool = True, namespace: str = NS, **extra) -> dict:
    labels = {"app.kubernetes.io/managed-by": "flytekitplugins-pytorch"} if managed else {"other": "x"}
    meta = {"name": name, "namespace": namespace, "labels": labels, **extra}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PyTorchJob", "metadata": meta, "spec": {"x": 1}}


def running(name: str) -> dict:
    return {"conditions": [condition("Created"), condition("Running")]}


def wait_for(predicate, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


def phase(cache: JobWatchCache, name: str) -> str | None:
    cached = cache.get(NS, name)
    if cached is None:
        return None
    conditions = (cached.get("status") or {}).get("conditions") or [{"type": "none"}]
    return conditions[-1]["type"]


@pytest.fixture
def server():
    with FakeKubeApi(history_limit=200) as api:
        api.bookmark_interval_s = 0.1
        yield api


@pytest.fixture
def make_cache(server):
    made: list[JobWatchCache] = []
    clients = []

    def make(settings=FAST, plural=PLURAL, group=GROUP, version=VERSION, transform=slim):
        api_client = server.api_client()
        clients.append(api_client)
        cache = JobWatchCache(api_client, group, version, plural, MANAGED, settings, transform)
        made.append(cache)
        return cache

    yield make
    for cache in made:
        cache.stop()
    for api_client in clients:
        api_client.close()


def watch_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("job-watch-")]


def test_lists_in_pages_then_answers_only_managed_jobs_slimmed(server, make_cache):
    for i in range(7):
        server.put_job(job(f"j{i}", managedFields=[{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]))
    server.put_job(job("foreign", managed=False))
    cache = make_cache()
    assert cache.get(NS, "j0") is None  # the first get starts the watch; nothing is synced yet
    assert cache.wait_synced(NS, 5)
    stats = cache.stats(NS)
    assert (stats["jobs"], stats["lists"]) == (7, 3)  # 7 jobs in pages of 3
    got = cache.get(NS, "j3")
    assert got is not None and set(got["metadata"]) <= set(KEPT_METADATA) and "managedFields" not in got["metadata"]
    assert got["spec"] == {"x": 1} and got["metadata"]["uid"] == server.get_job(NS, "j3")["metadata"]["uid"]
    assert cache.get(NS, "foreign") is None
    got["spec"]["x"] = 2
    assert cache.get(NS, "j3")["spec"] == {"x": 1}  # answers are copies
    assert len(server.calls(verb="list", resource=PLURAL)) == 3
    wait_for(lambda: len(server.calls(verb="watch", resource=PLURAL)) == 1)
    watch = server.calls(verb="watch", resource=PLURAL)[0].query
    assert watch["labelSelector"] == [MANAGED] and watch["allowWatchBookmarks"] == ["true"]
    assert watch["resourceVersion"] == [server.resource_version]
    assert 15 <= int(watch["timeoutSeconds"][0]) <= 20  # about silence_s: a healthy watch ends, or speaks, by then


def test_a_list_keeps_each_page_before_it_asks_for_the_next(server, make_cache):
    """What is kept of a job is a small part of it: a LIST keeps each page's jobs as the page comes in, so one page of
    whole jobs is held at a time, not the whole list (held to the end, 2,000 JobSets' left the connector's memory
    larger by 35 MiB per 1,000 jobs once they were let go)."""
    for i in range(7):
        server.put_job(job(f"j{i}"))
    pages_asked = []

    def transform(whole: dict) -> dict:
        pages_asked.append(len(server.calls(verb="list", resource=PLURAL)))
        return slim(whole)

    cache = make_cache(transform=transform)
    cache.get(NS, "j0")
    assert cache.wait_synced(NS, 5) and cache.stats(NS)["jobs"] == 7
    assert pages_asked[:7] == [1, 1, 1, 2, 2, 2, 3]  # pages of 3


def test_add_modify_delete_arrive_through_the_watch(server, make_cache):
    cache = make_cache()
    assert cache.wait_synced(NS, 5)
    wait_for(lambda: cache.stats(NS)["connected"])
    server.put_job(job("a"))
    wait_for(lambda: phase(cache, "a") == "none")
    server.set_job_status(NS, "a", running("a"))
    wait_for(lambda: phase(cache, "a") == "Running")
    server.remove_job(NS, "a")
    wait_for(lambda: cache.get(NS, "a") is None)
    assert cache.is_deleted(NS, "a")
    assert cache.stats(NS)["resource_version"] == server.resource_version
    assert len(server.calls(verb="list")) == 1 and len(server.calls(verb="get")) == 0


def test_staleness_of_a_condition_change_is_small(server, make_cache):
    server.put_job(job("s"))
    cache = make_cache()
    assert cache.wait_synced(NS, 5)
    wait_for(lambda: cache.stats(NS)["connected"])
    delays = []
    for ctype in ("Created", "Running", "Succeeded"):
        started = time.monotonic()
        server.set_job_status(NS, "s", {"conditions": [condition(ctype)]})
        wait_for(lambda ctype=ctype: phase(cache, "s") == ctype)
        delays.append(time.monotonic() - started)
    assert max(delays) < 1.0, delays


def test_410_relists_and_drops_jobs_deleted_meanwhile(server, make_cache):
    server.put_job(job("keep"))
    server.put_job(job("gone"))
    cache = make_cache()
    assert cache.wait_synced(NS, 5)
    wait_for(lambda: cache.stats(NS)["connected"])
    server.fail(500, times=None, verb="watch")  # the watch cannot come back while we change things
    server.drop_watches()
    wait_for(lambda: not cache.stats(NS)["connected"])
    server.remove_job(NS, "gone")
    server.set_job_status(NS, "keep", running("keep"))
    server.compact()  # the cache's resourceVersion is now too old to watch from
    server.clear_faults()
    wait_for(lambda: cache.stats(NS)["lists"] == 2 and cache.stats(NS)["connected"])
    assert phase(cache, "keep") == "Running" and cache.get(NS, "gone") is None
    assert [c.status for c in server.calls(verb="watch")][-2:] == [200, 200]  # the 410 came as an ERROR event


def test_expired_open_watch_relists(server, make_cache):
    server.put_job(job("a"))
    cache = make_cache()
    assert cache.wait_synced(NS, 5)
    wait_for(lambda: cache.stats(NS)["connected"])
    assert server.expire_watches() == 1
    wait_for(lambda: cache.stats(NS)["lists"] == 2 and cache.stats(NS)["connected"])
    server.set_job_status(NS, "a", running("a"))
    wait_for(lambda: phase(cache, "a") == "Running")


def test_dropped_watch_resumes_from_its_resource_version_without_a_list(server, make_cache):
    server.put_job(job("a"))
    cache = make_cache()
    assert cache.wait_synced(NS, 5)
    wait_for(lambda: cache.stats(NS)["connected"])
    server.drop_next_watches(after_events=1)
    assert server.drop_watches() == 1
    server.put_job(job("b"))  # lands while the watch is down or being cut
    server.set_job_status(NS, "a", running("a"))
    wait_for(lambda: phase(cache, "a") == "Running" and cache.get(NS, "b") is not None)
    assert cache.stats(NS)["lists"] == 1
    assert len(server.calls(verb="watch")) >= 3  # the first, the one cut after 1 event, the one that stays


def test_bookmarks_advance_the_resource_version_so_a_rewatch_needs_no_list(server, make_cache):
    server.put_job(job("a"))
    cache = make_cache()
    assert cache.wait_synced(NS, 5)
    for i in range(5):
        server.put_job(job(f"other{i}", managed=False))  # changes this watch does not see
    wait_for(lambda: cache.stats(NS)["resource_version"] == server.resource_version)  # from a BOOKMARK
    server.compact()
    server.drop_watches()
    wait_for(lambda: len(server.calls(verb="watch", status=200)) >= 2 and cache.stats(NS)["connected"])
    server.set_job_status(NS, "a", running("a"))
    wait_for(lambda: phase(cache, "a") == "Running")
    assert cache.stats(NS)["lists"] == 1


def test_each_watch_is_bounded_and_renewed_without_a_list(server, make_cache):
    server.put_job(job("a"))
    cache = make_cache(WatchSettings(watch_timeout_s=1, max_staleness_s=0.5))
    assert cache.wait_synced(NS, 5)
    wait_for(lambda: cache.stats(NS)["watches"] >= 3, timeout=10)  # each ended by the server after 1-2 s
    assert cache.stats(NS)["lists"] == 1 and cache.get(NS, "a") is not None
    assert all(1 <= int(c.query["timeoutSeconds"][0]) <= 2 for c in server.calls(verb="watch"))


def test_answers_stop_after_the_staleness_bound_and_resume_after_recovery(server, make_cache):
    server.put_job(job("a"))
    cache = make_cache()
    assert cache.wait_synced(NS, 5)
    wait_for(lambda: cache.stats(NS)["connected"])
    server.fail(503, times=None, verb="watch")
    server.drop_watches()
    wait_for(lambda: not cache.stats(NS)["connected"])
    lost = time.monotonic()
    assert cache.get(NS, "a") is not None  # within max_staleness_s (0.5 s)
    wait_for(lambda: cache.get(NS, "a") is None, timeout=3)
    assert time.monotonic() - lost >= 0.4
    assert not cache.is_deleted(NS, "a")
    server.clear_faults()
    wait_for(lambda: cache.get(NS, "a") is not None)


def test_errors_back_off_within_the_bound(server, make_cache):
    server.fail(500, times=None, verb="list")
    cache = make_cache(WatchSettings(backoff_initial_s=0.05, backoff_max_s=0.2, max_staleness_s=1))
    assert not cache.wait_synced(NS, 1.5)
    attempts = len(server.calls(verb="list"))
    # waits of 0.025-0.05, 0.05-0.1, then 0.1-0.2 s each: between 5 and 30 tries in 1.5 s, never a busy loop
    assert 5 <= attempts <= 30, attempts
    server.clear_faults()
    assert cache.wait_synced(NS, 2)


def test_feed_never_goes_backwards_nor_revives_a_deleted_job(server, make_cache):
    server.put_job(job("a"))
    cache = make_cache()
    assert cache.wait_synced(NS, 5)
    wait_for(lambda: cache.stats(NS)["connected"])
    old = server.get_job(NS, "a")
    server.set_job_status(NS, "a", running("a"))
    wait_for(lambda: phase(cache, "a") == "Running")
    assert cache.feed(old) is False and phase(cache, "a") == "Running"
    assert cache.feed(job("foreign", managed=False)) is False
    server.put_job(job("new"))
    fresh = server.get_job(NS, "new")
    assert cache.feed(fresh) is True  # as the connector's fallback GET would, before the watch delivers it
    last = server.get_job(NS, "a")
    server.remove_job(NS, "a")
    wait_for(lambda: cache.is_deleted(NS, "a"))
    assert cache.feed(last) is False and cache.get(NS, "a") is None


def test_a_relist_keeps_a_newer_copy_fed_during_it(server, make_cache):
    """A GET during a paged LIST feeds a copy newer than the one the LIST's first page held: the relist keeps the copy
    with the larger resourceVersion (as `put` does), so the phase never steps back until the watch replays."""
    for name in ("a", "b", "c", "d"):
        server.put_job(job(name))
    server.stall_watches(new=True)  # the watch after the LIST delivers nothing: what the cache holds is the LIST's
    server.delay(1.5, times=1, verb="list", resource=PLURAL, before=True, skip=1)  # page 1 (a, b, c) at once, page 2
    # 1.5 s later
    cache = make_cache()
    assert cache.get(NS, "a") is None  # starts the LIST
    wait_for(lambda: cache.stats(NS).get("lists") == 1)  # page 1 is in: "a" as it was
    server.set_job_status(NS, "a", running("a"))
    newer = server.get_job(NS, "a")
    assert cache.feed(newer)  # the connector's GET, while the LIST goes on
    assert cache.wait_synced(NS, 5)
    assert phase(cache, "a") == "Running"
    assert cache.get(NS, "a")["metadata"]["resourceVersion"] == newer["metadata"]["resourceVersion"]
    # the stalled watch may not have its answer's headers yet, where stop() has no socket to shut: let it answer
    # (this test is about the relist; test_stop_ends_every_thread_even_mid_watch is about stopping)
    server.unstall_watches()


def test_same_code_caches_trainjobs(server, make_cache):
    train = job("t")
    train.update(apiVersion="trainer.kubeflow.org/v1alpha1", kind="TrainJob")
    server.put_job(train)
    server.put_job(job("p"))
    cache = make_cache(plural=TRAINJOBS, group="trainer.kubeflow.org", version="v1alpha1")
    assert cache.wait_synced(NS, 5)
    assert cache.get(NS, "t")["kind"] == "TrainJob" and cache.get(NS, "p") is None


def test_stop_ends_every_thread_even_mid_watch(server, make_cache):
    before = watch_threads()
    cache = make_cache(WatchSettings(watch_timeout_s=600))
    for ns in ("a", "b"):
        assert cache.wait_synced(ns, 5)
    wait_for(lambda: server.open_watches() == 2)
    started = time.monotonic()
    cache.stop()
    assert time.monotonic() - started < 2
    assert watch_threads() == before
    assert cache.get("a", "x") is None and cache.feed(job("x", namespace="a")) is False
    assert watch_threads() == before  # a stopped cache starts nothing


def replicas_only(job: dict) -> dict:
    """A stricter transform, as a job kind's package could pass: replica specs keep only `replicas`."""
    out = slim(job)
    specs = out["spec"].get("pytorchReplicaSpecs") or {}
    out["spec"] = {
        **out["spec"],
        "pytorchReplicaSpecs": {t: {"replicas": s.get("replicas", 1)} for t, s in specs.items()},
    }
    return out


@pytest.mark.slow  # tracemalloc slows the 1,000-job list down to several seconds
@pytest.mark.parametrize(("transform", "bound_kib"), [(slim, 4), (replicas_only, 2)], ids=["slim", "replicas-only"])
def test_memory_per_thousand_jobs(server, make_cache, transform, bound_kib):
    """A realistic job (our golden CPU job, with the managedFields the API server adds) costs little once slimmed and
    stored as compact JSON: about 3 KiB with `slim` (8 KiB as Python objects), about 1 KiB with replica counts only."""
    base = yaml.safe_load(GOLDEN_JOB.read_text())
    base["metadata"]["labels"] = {
        **(base["metadata"].get("labels") or {}),
        "app.kubernetes.io/managed-by": "flytekitplugins-pytorch",
    }
    base["metadata"]["managedFields"] = [
        {
            "manager": m,
            "operation": "Update",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:status": {f"f:{k}": {} for k in range(40)}},
        }
        for m in ("pytorchjob-controller", "flytekit-connector")
    ]
    base["status"] = {
        "conditions": [condition("Created"), condition("Running")],
        "replicaStatuses": {"Master": {"active": 1}},
    }
    for i in range(1000):
        item = copy.deepcopy(base)
        item["metadata"].update(name=f"job-{i}", namespace=NS)
        server.put_job(item)
    cache = make_cache(WatchSettings(page_size=500), transform=transform)
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        assert cache.wait_synced(NS, 30)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    held = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert cache.stats(NS)["jobs"] == 1000
    per_job = held / 1000
    print(f"cache memory: {per_job / 1024:.1f} KiB per job, {held / 2**20:.1f} MiB per 1,000 jobs")
    assert per_job < bound_kib * 1024, per_job
    assert "managedFields" not in cache.get(NS, "job-7")["metadata"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_staleness_s": 0}, "max_staleness_s=0 must be a positive"),
        (
            {"backoff_initial_s": 2, "backoff_max_s": 1},
            "watch_backoff_max_s=1 must not be below watch_backoff_initial_s=2",
        ),
        ({"page_size": 0}, "page_size=0"),
    ],
    ids=["staleness", "backoff-order", "page-size"],
)
def test_settings_reject_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        WatchSettings(**kwargs)


def test_selector_and_kind_are_checked():
    assert parse_equality_selector("a=1,b") == {"a": "1", "b": None}
    with pytest.raises(ValueError, match="label_selector='a!=1'"):
        parse_equality_selector("a!=1")
    with pytest.raises(ValueError, match="plural='' must name"):
        JobWatchCache(None, GROUP, VERSION, "", MANAGED)


def test_slim_keeps_only_what_status_and_links_read():
    full = job("a", uid="u", managedFields=[{}], ownerReferences=[{}], generation=3, annotations={"k": "v"})
    full["status"] = {"conditions": []}
    out = slim(full)
    assert out["metadata"] == {"name": "a", "namespace": NS, "labels": full["metadata"]["labels"], "uid": "u",
                               "annotations": {"k": "v"}}  # fmt: skip
    assert (out["spec"], out["status"], out["kind"]) == (full["spec"], full["status"], "PyTorchJob")


@pytest.mark.parametrize(
    "body",
    [
        b'{"kind": "List", "items": [{"metadata": "not an object"}, 7], "metadata": {"resourceVersion": "1"}}',
        b'["a list, not a List"]',
        b"<html>a proxy's error page</html>",
    ],
    ids=["items of the wrong shape", "a JSON list", "not JSON"],
)
def test_a_malformed_list_is_retried_and_the_thread_lives(server, make_cache, body):
    server.put_job(job("a"))
    server.answer_raw(200, body, times=1, verb="list", resource=PLURAL)
    cache = make_cache()
    assert cache.wait_synced(NS, 10)
    wait_for(lambda: cache.get(NS, "a") is not None)
    assert f"job-watch-{PLURAL}-{NS}" in watch_threads()  # the thread lived through the bad answer
    assert cache.stats(NS)["lists"] >= 1


STATUSES = {
    "created": {"conditions": [condition("Created")]},
    "running": {
        "conditions": [condition("Created"), condition("Running")],
        "replicaStatuses": {"Master": {"active": 1}},
        "startTime": "2025-01-01T00:01:00Z",
    },  # fmt: skip
    "failed": {
        "conditions": [condition("Created"), condition("Running"), condition("Failed", message="boom.")],
        "startTime": "2025-01-01T00:01:00Z",
    },  # fmt: skip
    "suspended": {"conditions": [condition("Created"), condition("Suspended")]},
}


GOLDENS = sorted(p.name for p in (GOLDEN_JOB.parent.parent / "jobs").glob("*.yaml")) + sorted(
    f"trainjobs/{p.name}" for p in (GOLDEN_JOB.parent.parent / "trainjobs").glob("*.yaml")
)


@pytest.mark.parametrize("status", STATUSES)
@pytest.mark.parametrize("golden", GOLDENS)
def test_a_slimmed_job_reads_exactly_as_the_whole_job(golden, status):
    """The false-positive check of `slim`: for every golden job, every kind's reads, status, log links and primary
    images are the same on what the cache keeps as on the job the API returned."""
    import datetime

    from backend_plugin.config import BackendConfig
    from backend_plugin.targets.base import Observed
    from backend_plugin.targets.registry import target_for_kind

    root = GOLDEN_JOB.parent.parent
    whole = yaml.safe_load(((root / golden) if "/" in golden else (root / "jobs" / golden)).read_text())
    whole["metadata"].update(uid="u-1", resourceVersion="7", creationTimestamp="2025-01-01T00:00:00Z")
    whole["status"] = copy.deepcopy(STATUSES[status])
    target = target_for_kind(whole["kind"])
    config = BackendConfig.from_dict(
        dict(log_links=[{"name": "Logs", "template": "https://logs/{{ .podName }}/{{ .containerName }}"}])
    )
    now = datetime.datetime(2025, 1, 1, 0, 20, tzinfo=datetime.timezone.utc)
    kept = slim(copy.deepcopy(whole))
    assert target.reads(kept, config, now) == target.reads(whole, config, now)
    assert target.status(kept, Observed(None, None), config, now) == target.status(whole, Observed(None, None), config,
                                                                                  now)  # fmt: skip
    assert target.links(kept, None, config, now, {}) == target.links(whole, None, config, now, {})
    assert target.primary_images(kept) == target.primary_images(whole)
    assert len(json.dumps(kept)) < len(json.dumps(whole))


def test_one_watch_covers_every_namespace_when_asked(server, make_cache):
    """`watch_all_namespaces`: one LIST and one WATCH of the kind's jobs in every namespace (no namespace in the URL),
    answering for each; a job created in another namespace afterwards arrives through the same watch."""
    server.put_job(job("a", namespace="ns-1"))
    server.put_job(job("b", namespace="ns-2"))
    server.put_job(job("foreign", managed=False, namespace="ns-2"))
    settings = WatchSettings(**{**FAST.__dict__, "all_namespaces": True})
    cache = make_cache(settings)
    assert cache.wait_synced("ns-1", 5) and cache.wait_synced("ns-2", 5)
    assert cache.get("ns-1", "a") is not None and cache.get("ns-2", "b") is not None
    assert cache.get("ns-2", "foreign") is None and cache.namespaces() == ["*"]
    server.put_job(job("c", namespace="ns-3"))
    wait_for(lambda: cache.get("ns-3", "c") is not None)
    paths = {(r.verb, r.path) for r in server.requests if r.resource == PLURAL}
    assert paths == {("list", f"/apis/{GROUP}/{VERSION}/{PLURAL}"), ("watch", f"/apis/{GROUP}/{VERSION}/{PLURAL}")}
    assert len(watch_threads()) == 1


def test_the_setting_is_a_key_and_off_by_default():
    from backend_plugin.config import BackendConfig

    assert BackendConfig().watch.all_namespaces is False
    assert BackendConfig.from_dict({"watch_all_namespaces": True}).watch.all_namespaces is True
    with pytest.raises(ValueError, match="watch_all_namespaces='yes' must be true or false"):
        BackendConfig.from_dict({"watch_all_namespaces": "yes"})


def test_a_bug_in_the_cache_s_own_code_stops_its_watch_loudly(server, make_cache, caplog):
    """A transform (our code) that raises is a bug, never an odd answer: the namespace's watch stops with its
    traceback logged, and every get of that namespace raises it, instead of relisting quietly forever while the
    connector falls back to GETs."""
    from backend_plugin.kube.watch import WatchCrashed

    server.put_job(job("a"))

    def buggy(job: dict) -> dict:
        return job["metadata"]["no-such-key"]

    cache = make_cache(transform=buggy)
    deadline = time.monotonic() + 10
    with pytest.raises(WatchCrashed, match="KeyError: 'no-such-key'"):
        while time.monotonic() < deadline:
            cache.get(NS, "a")
            time.sleep(0.02)
    assert "stopped on an error of its own code" in caplog.text and "Traceback" in caplog.text
    assert watch_threads() == []


@pytest.mark.parametrize("verb", ["list", "watch"])
def test_a_forbidden_list_or_watch_names_the_missing_permission(server, make_cache, caplog, verb):
    """Without `list` (or `watch`) on the jobs, the cache cannot sync and each poll reads its job with a GET: the log
    names the verb, the resource and its group, and how to do without the cache."""
    import logging

    server.forbid(verb, PLURAL)
    cache = make_cache()
    with caplog.at_level(logging.WARNING, logger="backend_plugin.kube.watch"):
        assert cache.get(NS, "j0") is None
        wait_for(lambda: any("needs permission" in r.getMessage() for r in caplog.records))
    message = next(r.getMessage() for r in caplog.records if "needs permission" in r.getMessage())
    assert f"needs permission to {verb} {PLURAL} (apiGroup {GROUP}) in namespace {NS}" in message
    assert "watch_cache: false" in message and "backend_plugin/deploy/rbac.yaml" in message
