"""A watch-backed cache of the jobs the connector created: one LIST, then a WATCH, per namespace and job kind.

Flyte asks for the status of every running task every few seconds. Answering each poll with a GET costs the API
server one request per task per poll; an informer (client-go, controller-runtime, kopf) instead LISTs the objects
once, WATCHes their changes and answers from memory. This module is that informer for our jobs, in the shape the
connector needs:

- it is target-neutral: it takes the group, version and plural of the job kind and the label selector of the
  jobs we manage, and never names a kind;
- it is thread-based, because the connector's methods are sync: one daemon thread per namespace, started on the
  first `get` or `feed` for that namespace;
- LIST (in pages) then WATCH from the list's resourceVersion with `allowWatchBookmarks`, each watch bounded by
  `timeoutSeconds`; a watch that ends or drops resumes from the last resourceVersion seen (events and BOOKMARKs
  advance it), a 410 Gone/Expired relists, other errors back off exponentially up to a bound;
- `get(namespace, name)` answers only when the namespace is synced, its watch is connected or was heard from
  within `max_staleness_s`, and the job is in it; otherwise it returns None and the caller does a GET, which it can
  `feed` back (a fed job never replaces a newer one, and never revives a job the watch saw deleted);
- it keeps only what the status and log links read (metadata name, namespace, uid, labels, annotations,
  resourceVersion, creationTimestamp, deletionTimestamp; spec; status), dropping `managedFields` and the rest, as
  client-go's transform functions do, so that 10,000 jobs stay small.

Facts followed from client-go's reflector: exponential backoff from 0.8 s to 30 s on errors, a relist after an
expired resourceVersion, bookmarks requested on every watch, watches bounded by a timeout (client-go picks 5 to 10
min at random; we default to 5 min and randomise up to twice that, so that replicas do not reconnect in step).
"""

from __future__ import annotations

import copy
import json
import logging
import random
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

KEPT_METADATA = (
    "name",
    "namespace",
    "uid",
    "labels",
    "annotations",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
)
"""The metadata fields the status, log links and connector read; everything else (managedFields, ownerReferences,
finalizers, generation, ...) is dropped from cached jobs."""

_TOMBSTONES = 10_000
"""Deleted jobs remembered per namespace, so that a late GET does not put a job the watch saw deleted back."""


def slim(job: dict) -> dict:
    """The part of a job the cache keeps: apiVersion, kind, the metadata in `KEPT_METADATA`, spec and status.

    Args:
        job: a job as the API server returns it.

    Returns:
        A new dict (sharing the spec and status values with `job`).
    """
    meta = job.get("metadata") or {}
    out: dict[str, Any] = {k: job[k] for k in ("apiVersion", "kind", "spec", "status") if k in job}
    out["metadata"] = {k: meta[k] for k in KEPT_METADATA if k in meta}
    return out


def _rv_newer(candidate: str | None, current: str | None) -> bool:
    """Whether resourceVersion `candidate` is not older than `current` (both as the API server sets them).

    resourceVersions are opaque by contract but are etcd revisions in practice; when both are integers they are
    compared, otherwise the candidate wins (the API server's order cannot be known).
    """
    if current is None or candidate is None:
        return True
    if candidate.isdigit() and current.isdigit():
        return int(candidate) >= int(current)
    return True


@dataclass(frozen=True)
class WatchSettings:
    """How a `JobWatchCache` lists, watches and backs off.

    Args:
        watch_timeout_s: `timeoutSeconds` of each watch (randomised up to twice this). Bounded so that a watch that
            silently stopped delivering is replaced; client-go uses 5 to 10 min.
        max_staleness_s: how long answers stay valid after the watch was last connected or heard from. Past it,
            `get` returns None and the caller reads the API. 5 s: the staleness goal of a status poll.
        backoff_initial_s: the first wait after an error (client-go: 0.8 s).
        backoff_max_s: the longest wait between attempts (client-go: 30 s).
        page_size: `limit` of each LIST page; 500 like client-go's pager.
        request_timeout_s: connect and read timeout of LIST requests; a watch's read timeout is its
            `timeoutSeconds` plus this.

    Raises:
        ValueError: when a value is not positive, or `backoff_max_s` is below `backoff_initial_s`.
    """

    watch_timeout_s: float = 300.0
    max_staleness_s: float = 5.0
    backoff_initial_s: float = 0.8
    backoff_max_s: float = 30.0
    page_size: int = 500
    request_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        for name in ("watch_timeout_s", "max_staleness_s", "backoff_initial_s", "backoff_max_s", "request_timeout_s"):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"{name}={value!r} must be a positive number of seconds")
        if self.page_size < 1:
            raise ValueError(f"page_size={self.page_size!r} must be a positive number of jobs")
        if self.backoff_max_s < self.backoff_initial_s:
            raise ValueError(
                f"backoff_max_s={self.backoff_max_s!r} must not be below backoff_initial_s={self.backoff_initial_s!r}"
            )


def parse_equality_selector(selector: str) -> dict[str, str | None]:
    """Parse a label selector made of `key=value` and `key` (exists) terms, the kind the connector labels with.

    Args:
        selector: e.g. `app.kubernetes.io/managed-by=flytekitplugins-pytorch`.

    Returns:
        label -> required value (None: the label must exist).

    Raises:
        ValueError: when the selector is empty or has a term of another form (`!=`, `in`, `notin`, `!key`).
    """
    terms: dict[str, str | None] = {}
    for term in (t.strip() for t in selector.split(",")):
        if not term or any(op in term for op in ("!", "(", " ")):
            raise ValueError(
                f"label_selector={selector!r} has a term {term!r} that is not 'key=value' or 'key'; "
                "the cache needs a selector it can also check on a job read by GET"
            )
        key, sep, value = term.replace("==", "=").partition("=")
        terms[key] = value if sep else None
    return terms


class _NamespaceInformer:
    """LIST + WATCH of one job kind in one namespace, in its own thread; the store the cache answers from."""

    def __init__(self, cache: JobWatchCache, namespace: str) -> None:
        self.cache = cache
        self.namespace = namespace
        self.lock = threading.Lock()
        self.jobs: dict[str, dict] = {}
        self.deleted: OrderedDict[str, str] = OrderedDict()
        self.resource_version: str | None = None
        self.synced = False
        self.connected = False
        self.heard_at = 0.0
        self.lists = 0
        self.watches = 0
        self._response: Any = None
        self.thread = threading.Thread(target=self._run, name=f"job-watch-{cache.plural}-{namespace}", daemon=True)

    # -------------------------------------------------------------- reading
    def fresh(self, now: float) -> bool:
        return self.synced and (self.connected or now - self.heard_at <= self.cache.settings.max_staleness_s)

    def put(self, job: dict, from_watch: bool) -> None:
        """Store a job unless it is older than the stored one (or than its deletion)."""
        meta = job.get("metadata") or {}
        name, rv = meta.get("name"), meta.get("resourceVersion")
        if not name:
            return
        with self.lock:
            held = self.jobs.get(name)
            gone = self.deleted.get(name)
            if not from_watch:
                if held is not None and not _rv_newer(rv, held["metadata"].get("resourceVersion")):
                    return
                if gone is not None and not (_rv_newer(rv, gone) and rv != gone):
                    return
            self.deleted.pop(name, None)
            self.jobs[name] = self.cache.transform(job)

    def remove(self, job: dict) -> None:
        meta = job.get("metadata") or {}
        name = str(meta.get("name") or "")
        if not name:
            return
        with self.lock:
            self.jobs.pop(name, None)
            self.deleted[name] = str(meta.get("resourceVersion") or "")
            self.deleted.move_to_end(name)
            while len(self.deleted) > _TOMBSTONES:
                self.deleted.popitem(last=False)

    # -------------------------------------------------------------- the loop
    def _run(self) -> None:
        from kubernetes.client.exceptions import ApiException  # the client is loaded only when a cache runs
        from urllib3.exceptions import HTTPError

        settings = self.cache.settings
        stop = self.cache._stopping
        need_list = True
        failures = 0
        while not stop.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                self._watch()
                failures = 0
            except _Expired as e:
                logger.info("watch of %s in %s expired (%s); listing again", self.cache.plural, self.namespace, e)
                need_list = True
                failures += 1
                if failures == 1:
                    continue  # the first relist after a 410 is immediate, as in client-go
            except (ApiException, HTTPError, OSError, ValueError, KeyError, TypeError, AttributeError) as e:
                if stop.is_set():
                    break
                failures += 1
                if isinstance(e, ApiException) and e.status == 410:  # a LIST's continue token, or a watch, too old
                    need_list = True
                if isinstance(e, (KeyError, TypeError, AttributeError)):  # an answer of a shape no API server writes
                    need_list = True
                logger.warning(
                    "%s of %s in %s failed (%s); retrying", "list" if need_list else "watch", self.cache.plural,
                    self.namespace, _describe(e),
                )  # fmt: skip
            finally:
                self.connected = False
                self._response = None
            if failures:
                wait = min(settings.backoff_max_s, settings.backoff_initial_s * 2 ** (failures - 1))
                stop.wait(wait * random.uniform(0.5, 1.0))  # jittered so that replicas do not retry in step

    def _list(self) -> None:
        settings = self.cache.settings
        api = self.cache._custom_api()
        jobs: dict[str, dict] = {}
        token: str | None = None
        rv = ""
        while True:
            kwargs: dict[str, Any] = {"label_selector": self.cache.label_selector, "limit": settings.page_size}
            if token:
                kwargs["_continue"] = token
            page = api.list_namespaced_custom_object(
                self.cache.group, self.cache.version, self.namespace, self.cache.plural,
                _request_timeout=settings.request_timeout_s, **kwargs,
            )  # fmt: skip
            self.lists += 1
            if not isinstance(page, dict) or not isinstance(page.get("items") or [], list):
                raise ValueError(f"the LIST answered with a {type(page).__name__} that is not a list of jobs")
            for item in page.get("items") or []:
                name = (item.get("metadata") or {}).get("name") if isinstance(item, dict) else None
                if isinstance(name, str) and name:  # an item that is not a named object is skipped
                    jobs[name] = self.cache.transform(item)
            meta = page.get("metadata") or {}
            rv = rv or str(meta.get("resourceVersion") or "")
            token = meta.get("continue")
            if not token or self.cache._stopping.is_set():
                break
        with self.lock:
            for name, held in self.jobs.items():  # fed by a GET after the list's snapshot: newer, keep
                if name not in jobs and rv.isdigit() and str(held["metadata"].get("resourceVersion", "")).isdigit():
                    if int(held["metadata"]["resourceVersion"]) > int(rv):
                        jobs[name] = held
            self.jobs = jobs
            self.resource_version = rv
            self.synced = True
            self.heard_at = time.monotonic()

    def _watch(self) -> None:
        settings = self.cache.settings
        timeout = int(settings.watch_timeout_s * (1 + random.random()))
        response = self.cache._custom_api().list_namespaced_custom_object(
            self.cache.group, self.cache.version, self.namespace, self.cache.plural,
            label_selector=self.cache.label_selector, resource_version=self.resource_version,
            allow_watch_bookmarks=True, timeout_seconds=timeout, watch=True, _preload_content=False,
            _request_timeout=(settings.request_timeout_s, timeout + settings.request_timeout_s),
        )  # fmt: skip
        self._response = response
        try:
            self.watches += 1
            self.connected = True
            self.heard_at = time.monotonic()
            for event in _json_lines(response):
                if self.cache._stopping.is_set():
                    return
                self._apply(event)
        finally:
            response.close()  # not back into the pool half-read: the next request would read this stream's rest
            response.release_conn()

    def _apply(self, event: dict) -> None:
        if not isinstance(event, dict) or not isinstance(event.get("object") or {}, dict):
            raise ValueError("a watch event that is not an object with an object")
        etype, obj = event.get("type"), event.get("object") or {}
        self.heard_at = time.monotonic()
        if etype == "ERROR":
            code = obj.get("code")
            if code == 410:
                raise _Expired(str(obj.get("message", "")))
            raise ValueError(f"watch ERROR event: {obj.get('reason')} ({code}): {obj.get('message')}")
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if etype in ("ADDED", "MODIFIED"):
            self.put(obj, from_watch=True)
        elif etype == "DELETED":
            self.remove(obj)
        elif etype != "BOOKMARK":
            logger.warning("unknown watch event type %r on %s in %s", etype, self.cache.plural, self.namespace)
            return
        if rv:
            self.resource_version = str(rv)

    def interrupt(self) -> None:
        """Unblock a watch read in progress by shutting down its socket (the thread then sees the stop)."""
        response = self._response
        sock = getattr(getattr(response, "connection", None), "sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Expired(Exception):
    """The resourceVersion we watch from is too old (410): list again."""


def _describe(error: BaseException) -> str:
    status = getattr(error, "status", None)
    reason = getattr(error, "reason", None)
    if status is not None:
        return f"HTTP {status} {reason or ''}".strip()  # never the body: it can echo request headers
    return f"{type(error).__name__}: {error}"


def _json_lines(response: Any) -> Iterator[dict]:
    """The JSON events of a watch response, one per line, as chunks arrive."""
    buffer = b""
    for chunk in response.stream(65536, decode_content=False):
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.strip():
                yield json.loads(line)
    if buffer.strip():
        yield json.loads(buffer)


class JobWatchCache:
    """Watch-backed cache of one job kind (per namespace, started lazily) for the jobs matching a label selector.

    Args:
        api_client: a `kubernetes.client.ApiClient`, or a callable returning one (called once, on first use).
        group: API group of the job kind (e.g. `example.org`).
        version: API version (e.g. `v1`).
        plural: resource plural (e.g. `examplejobs`).
        label_selector: the selector of the jobs we manage, `key=value` terms (what the connector labels jobs with).
        settings: timeouts, staleness bound and backoff.
        transform: what is kept of each job (default `slim`); a job kind's package can pass a stricter one (e.g.
            dropping the pod templates its status never reads), as client-go's `SetTransform` does. It must keep
            `metadata.name` and `metadata.resourceVersion`.

    Raises:
        ValueError: when group, version or plural is empty, or the label selector is not `key=value` terms.
    """

    def __init__(
        self,
        api_client: Any,
        group: str,
        version: str,
        plural: str,
        label_selector: str,
        settings: WatchSettings | None = None,
        transform: Callable[[dict], dict] = slim,
    ) -> None:
        for field_name, value in (("group", group), ("version", version), ("plural", plural)):
            if not value:
                raise ValueError(f"{field_name}={value!r} must name the job kind's API {field_name}")
        self._selector = parse_equality_selector(label_selector)
        self.group, self.version, self.plural = group, version, plural
        self.label_selector = label_selector
        self.settings = settings or WatchSettings()
        self.transform = transform
        self._api_client_source = api_client
        self._api: Any = None
        self._informers: dict[str, _NamespaceInformer] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()

    def _custom_api(self) -> Any:
        if self._api is None:
            from kubernetes import client

            source = self._api_client_source
            self._api = client.CustomObjectsApi(source() if callable(source) else source)
        return self._api

    def _informer(self, namespace: str) -> _NamespaceInformer | None:
        with self._lock:
            if self._stopping.is_set():
                return None
            informer = self._informers.get(namespace)
            if informer is None:
                informer = self._informers[namespace] = _NamespaceInformer(self, namespace)
                informer.thread.start()
            return informer

    def matches(self, job: dict) -> bool:
        """Whether `job` carries the labels of the selector (only such jobs are watched, so only they are cached).

        Args:
            job: a job dict.

        Returns:
            True when every selector term holds on the job's labels.
        """
        labels = (job.get("metadata") or {}).get("labels") or {}
        return all(k in labels and (v is None or labels[k] == v) for k, v in self._selector.items())

    def get(self, namespace: str, name: str) -> dict | None:
        """The cached job, when the namespace's cache is synced and fresh and holds it; starts watching on first use.

        Args:
            namespace: the job's namespace.
            name: the job's name.

        Returns:
            A copy of the slimmed job, or None (not synced, stale, unknown or deleted): read the API instead.
        """
        informer = self._informer(namespace)
        if informer is None or not informer.fresh(time.monotonic()):
            return None
        with informer.lock:
            job = informer.jobs.get(name)
            return copy.deepcopy(job) if job is not None else None

    def is_deleted(self, namespace: str, name: str) -> bool:
        """Whether the watch saw the job deleted (and no newer copy arrived since).

        Args:
            namespace: the job's namespace.
            name: the job's name.

        Returns:
            True when the namespace's cache is fresh and remembers the deletion.
        """
        informer = self._informers.get(namespace)
        if informer is None or not informer.fresh(time.monotonic()):
            return False
        with informer.lock:
            return name in informer.deleted and name not in informer.jobs

    def feed(self, job: dict) -> bool:
        """Insert a job read by a GET (the caller's fallback), unless the cache holds a newer copy or saw it deleted.

        Args:
            job: the job as the API returned it.

        Returns:
            Whether the job is now cached (False: not ours by label, older than the cached one, or deleted since).
        """
        namespace = (job.get("metadata") or {}).get("namespace")
        if not namespace or not self.matches(job):
            return False
        informer = self._informer(namespace)
        if informer is None:
            return False
        informer.put(job, from_watch=False)
        with informer.lock:
            held = informer.jobs.get(job["metadata"].get("name"))
            return held is not None and held["metadata"].get("resourceVersion") == job["metadata"].get(
                "resourceVersion"
            )

    def wait_synced(self, namespace: str, timeout: float) -> bool:
        """Start watching `namespace` if needed and wait until its first LIST is in.

        Args:
            namespace: the namespace.
            timeout: the longest wait in seconds.

        Returns:
            Whether the namespace is synced.
        """
        informer = self._informer(namespace)
        deadline = time.monotonic() + timeout
        while informer is not None and not informer.synced and time.monotonic() < deadline:
            time.sleep(0.01)
        return informer is not None and informer.synced

    def stats(self, namespace: str) -> dict[str, Any]:
        """What the namespace's cache holds and has done (for tests, benchmarks and debugging).

        Args:
            namespace: the namespace.

        Returns:
            jobs, deleted (remembered), resource_version, synced, connected, fresh, lists, watches; {} when the
            namespace is not watched.
        """
        informer = self._informers.get(namespace)
        if informer is None:
            return {}
        with informer.lock:
            return {
                "jobs": len(informer.jobs),
                "deleted": len(informer.deleted),
                "resource_version": informer.resource_version,
                "synced": informer.synced,
                "connected": informer.connected,
                "fresh": informer.fresh(time.monotonic()),
                "lists": informer.lists,
                "watches": informer.watches,
            }

    def stop(self, timeout: float = 5.0) -> None:
        """Stop every namespace's watch and wait for the threads to end.

        Args:
            timeout: the longest wait per thread, in seconds.

        Raises:
            RuntimeError: when a thread is still running after `timeout`.
        """
        self._stopping.set()
        with self._lock:
            informers = list(self._informers.values())
        for informer in informers:
            informer.interrupt()
        for informer in informers:
            informer.thread.join(timeout)
        alive = [i.thread.name for i in informers if i.thread.is_alive()]
        if alive:
            raise RuntimeError(f"watch threads still running after {timeout} s: {alive}")
