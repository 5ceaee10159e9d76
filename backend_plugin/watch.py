"""A watch-backed cache of the jobs the connector created: one LIST, then a WATCH, per namespace and job kind.

Flyte asks for the status of every running task every few seconds. Answering each poll with a GET costs the API
server one request per task per poll; an informer (client-go, controller-runtime, kopf) instead LISTs the objects
once, WATCHes their changes and answers from memory. This module is that informer for our jobs, in the shape the
connector needs:

- it is target-neutral: it takes the group, version and plural of the job kind and the label selector of the
  jobs we manage, and never names a kind;
- it is thread-based, because the connector's methods are sync: one daemon thread per namespace, started on the
  first `get` or `feed` for that namespace, and stopped once no job of that namespace was asked for during
  `idle_s` (its watch closes with it; the next `get` lists again);
- LIST (in pages) then WATCH from the list's resourceVersion with `allowWatchBookmarks`; a watch that ends or drops
  resumes from the last resourceVersion seen (events and BOOKMARKs advance it), a 410 Gone/Expired relists, and
  every error, and every watch that ends without a line, waits `retry.Backoff` (no hot reconnect loop);
- liveness: each watch asks the server to end it after about `silence_s`, so a healthy one delivers at least the
  BOOKMARK the API server sends before a watch's timeout; a watch silent for `silence_s` plus a margin (a
  half-open connection: the socket stays open and nothing arrives) is presumed dead and reopened from its
  resourceVersion, which replays what it lost, and one that stays silent after that relists;
- nothing is trusted that was not asked for: an event for another namespace, an ADDED/MODIFIED without our labels
  and an event older than the copy held are ignored (each kind logged once per namespace); a line that is not a
  watch event (a proxy answering with a list, or HTML) breaks the watch, which relists after a backoff;
- identity is the uid: cached jobs and the tombstones of deleted ones carry it, a late DELETED of an earlier job of
  the same name does not remove its successor, and a DELETED is only ever a hint: the cache stops answering for
  the job and the caller confirms with a GET (a job leaves a label selector's watch as DELETED when its labels
  change, while it still exists);
- `get(namespace, name)` answers only when the namespace is synced and fresh (its watch delivered something within
  `silence_s + max_staleness_s`, or, when it is not connected, within `max_staleness_s`) and the job is in it;
  otherwise it returns None and the caller does a GET, which it can `feed` back (a fed job never replaces a newer
  one, and never revives the uid the watch saw deleted);
- it keeps only what the status and log links read (`slim`, the model being client-go's transform functions):
  metadata name, namespace, uid, labels, annotations, resourceVersion, creationTimestamp, deletionTimestamp; the
  spec without its pod templates' bulk (each container's name and image remain; environment, commands, volumes
  and resources go); the status. Each kept job is stored as compact JSON beside its resourceVersion and uid
  (`_Held`): about 1.4 KiB for the golden job instead of about 8 KiB as Python objects, decoded on every `get`.

Facts followed from client-go's reflector: exponential backoff from 0.8 s to 30 s on errors, a relist after an
expired resourceVersion, bookmarks requested on every watch, watches bounded by a timeout. client-go picks 5 to 10
min; here each watch lasts about `silence_s` (20 s), so that a stall is noticed within it: one watch request per
namespace every 20 s (0.05 requests/s) instead of one every 5 to 10 min, and no extra thread.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any, Optional

from backend_plugin.config import WatchSettings
from backend_plugin.retry import Backoff

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

DROPPED_SPEC_KEYS = frozenset(
    {"env", "envFrom", "command", "args", "volumes", "volumeMounts", "resources", "resourcesPerNode",
     "podSpecOverrides", "podTemplateOverrides", "affinity", "tolerations", "securityContext", "initContainers"}
)  # fmt: skip
"""Keys of a job's spec no status or log link reads, at any depth: a pod template's bulk (and the environment)."""

_TOMBSTONES = 10_000
"""Deleted jobs remembered per namespace, so that a late GET does not put a job the watch saw deleted back."""

MIN_HEALTHY_WATCH_S = 0.5
"""A watch that ends sooner than this (each asks for at least 1 s) is not healthy, whatever it delivered: the next one
waits the backoff, so a proxy that answers every watch with one line and closes it causes no hot loop."""

WATCH_EVENT_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"})
"""The event types an API server writes on a watch; any other line means the watch is broken."""


def _slim_spec(value: Any) -> Any:
    if isinstance(value, dict):
        if "containers" in value and isinstance(value["containers"], list):  # a PodSpec: who runs what, nothing more
            return {"containers": [{k: c[k] for k in ("name", "image") if k in c} for c in value["containers"]
                                   if isinstance(c, dict)]}  # fmt: skip
        out = {}
        for key, item in value.items():
            if key in DROPPED_SPEC_KEYS or (key == "metadata" and isinstance(item, dict)):
                continue  # a pod template's labels and annotations are the pods', not the job's
            out[key] = _slim_spec(item)
        return out
    if isinstance(value, list):
        return [_slim_spec(item) for item in value]
    return value


def slim(job: dict) -> dict:
    """The part of a job the cache keeps: apiVersion, kind, the metadata in `KEPT_METADATA`, the spec without what
    no status or link reads (`DROPPED_SPEC_KEYS`, pod templates down to their containers' names and images), the
    status.

    Args:
        job: a job as the API server returns it.

    Returns:
        A new dict (sharing the status values with `job`).
    """
    meta = job.get("metadata") or {}
    out: dict[str, Any] = {k: job[k] for k in ("apiVersion", "kind", "status") if k in job}
    if "spec" in job:
        out["spec"] = _slim_spec(job["spec"])
    out["metadata"] = {k: meta[k] for k in KEPT_METADATA if k in meta}
    return out


class _Held:
    """A cached job: its resourceVersion and uid, read on every event, and the slimmed job as compact JSON.

    A slimmed job as Python objects costs about 8 KiB (a dict per condition, per replica spec, per container, and a
    string per value); the same job as compact JSON is about 1.4 KiB. `get` decodes it, which also hands the caller
    a copy of its own (the store is shared between threads)."""

    __slots__ = ("blob", "rv", "uid")

    def __init__(self, job: dict) -> None:
        meta = job.get("metadata") or {}
        self.rv = str(meta.get("resourceVersion") or "")
        self.uid = str(meta.get("uid") or "")
        self.blob = json.dumps(job, separators=(",", ":"), ensure_ascii=False).encode()

    def job(self) -> dict:
        return json.loads(self.blob)


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
        self.jobs: dict[str, _Held] = {}
        self.deleted: OrderedDict[str, tuple[str, str]] = OrderedDict()
        """name -> (resourceVersion, uid) of the deletion the watch reported."""
        self.resource_version: str | None = None
        self.synced = False
        self.connected = False
        self.heard_at = 0.0
        self.used_at = time.monotonic()
        self.lists = 0
        self.watches = 0
        self.silent_watches = 0
        self.ignored: dict[str, int] = {}
        self._response: Any = None
        self.thread = threading.Thread(target=self._run, name=f"job-watch-{cache.plural}-{namespace}", daemon=True)

    # -------------------------------------------------------------- reading
    def fresh(self, now: float) -> bool:
        return self.synced and now - self.heard_at <= self.cache.settings.fresh_for(self.connected)

    def put(self, job: dict, from_watch: bool) -> None:
        """Store a job unless it is older than the stored one, or than the deletion of the same uid."""
        meta = job.get("metadata") or {}
        name, rv, uid = meta.get("name"), meta.get("resourceVersion"), str(meta.get("uid") or "")
        if not name:
            return
        slimmed = _Held(self.cache.transform(job))
        with self.lock:
            held = self.jobs.get(name)
            if held is not None and not _rv_newer(rv, held.rv):
                if from_watch:
                    self._ignore("an event older than the job held (a replayed resourceVersion)")
                return
            gone = self.deleted.get(name)
            if (
                not from_watch
                and gone is not None
                and gone[1] == uid
                and not (_rv_newer(rv, gone[0]) and rv != gone[0])
            ):
                return  # the watch saw this very job deleted after this copy was read
            self.deleted.pop(name, None)
            self.jobs[name] = slimmed

    def remove(self, job: dict) -> None:
        """A DELETED event: forget the job of that uid (never a successor of the same name), remember the deletion."""
        meta = job.get("metadata") or {}
        name, rv, uid = str(meta.get("name") or ""), str(meta.get("resourceVersion") or ""), str(meta.get("uid") or "")
        if not name:
            return
        with self.lock:
            held = self.jobs.get(name)
            if held is not None:
                if uid and held.uid and held.uid != uid:
                    return  # a late DELETED of an earlier job of this name: its successor stays
                if not _rv_newer(rv, held.rv):
                    self._ignore("an event older than the job held (a replayed resourceVersion)")
                    return
            self.jobs.pop(name, None)
            self.deleted[name] = (rv, uid)
            self.deleted.move_to_end(name)
            while len(self.deleted) > _TOMBSTONES:
                self.deleted.popitem(last=False)

    def _ignore(self, why: str) -> None:
        """Count an event that is not trusted; log each kind once per namespace."""
        self.ignored[why] = self.ignored.get(why, 0) + 1
        if self.ignored[why] == 1:
            logger.warning("watch of %s in %s: ignoring %s (logged once)", self.cache.plural, self.namespace, why)

    def idle(self, now: float) -> bool:
        return now - self.used_at > self.cache.settings.idle_s

    # -------------------------------------------------------------- the loop
    def _run(self) -> None:
        from kubernetes.client.exceptions import ApiException  # the client is loaded only when a cache runs
        from urllib3.exceptions import HTTPError, ReadTimeoutError

        settings = self.cache.settings
        stop = self.cache._stopping

        def pause(seconds: float) -> None:
            stop.wait(seconds)  # a stop ends the wait at once

        backoff = Backoff(settings.backoff_initial_s, settings.backoff_max_s, sleep=pause)
        need_list = True
        failures = 0
        try:
            while not stop.is_set():
                if self.idle(time.monotonic()):
                    logger.info("no job of %s in %s asked for in %gs: its watch stops", self.cache.plural,
                                self.namespace, settings.idle_s)  # fmt: skip
                    return
                lines = -1
                try:
                    if need_list:
                        self._list()
                        need_list = False
                    opened = time.monotonic()
                    lines = self._watch()
                    if lines > 0 and time.monotonic() - opened >= MIN_HEALTHY_WATCH_S:
                        failures, self.silent_watches = 0, 0
                    elif not stop.is_set():  # ended without a line, or at once: not a healthy watch, back off
                        failures += 1
                except _Expired as e:
                    logger.info("watch of %s in %s expired (%s); listing again", self.cache.plural, self.namespace, e)
                    need_list = True
                    failures += 1
                    if failures == 1:
                        continue  # the first relist after a 410 is immediate, as in client-go
                except ReadTimeoutError:
                    # Silent past its own timeout: a half-open connection. Reopen from the resourceVersion at once
                    # (that replays what was lost); a second silent watch in a row relists.
                    self.silent_watches += 1
                    logger.warning("watch of %s in %s delivered nothing for %gs; presumed dead, %s", self.cache.plural,
                                   self.namespace, settings.silence_s + settings.max_staleness_s,
                                   "reopening it" if self.silent_watches == 1 else "listing again")  # fmt: skip
                    if self.silent_watches == 1:
                        continue
                    need_list = True
                    failures += 1
                except (ApiException, HTTPError, OSError, ValueError, KeyError, TypeError, AttributeError) as e:
                    if stop.is_set():
                        break
                    failures += 1
                    if isinstance(e, ApiException) and e.status == 410:  # a LIST's continue token, or a watch, too old
                        need_list = True
                    if isinstance(e, (_Broken, KeyError, TypeError, AttributeError)):  # a shape no API server writes
                        need_list = True
                        if failures == 1 and isinstance(e, _Broken):
                            logger.warning("watch of %s in %s is broken (%s); listing again", self.cache.plural,
                                           self.namespace, e)  # fmt: skip
                            continue  # the first relist is immediate; a watch that stays broken backs off
                    logger.warning(
                        "%s of %s in %s failed (%s); retrying", "list" if need_list else "watch", self.cache.plural,
                        self.namespace, _describe(e),
                    )  # fmt: skip
                finally:
                    self.connected = False
                    self._response = None
                if failures:
                    backoff.sleep(backoff.delay(failures - 1))
        finally:
            self.cache._forget(self)

    def _list(self) -> None:
        settings = self.cache.settings
        api = self.cache._custom_api()
        jobs: dict[str, _Held] = {}
        token: str | None = None
        rv = ""
        while True:
            kwargs: dict[str, Any] = {"label_selector": self.cache.label_selector, "limit": settings.page_size}
            if token:
                kwargs["_continue"] = token
            response = api.list_namespaced_custom_object(
                self.cache.group, self.cache.version, self.namespace, self.cache.plural,
                _request_timeout=settings.request_timeout_s, _preload_content=False, **kwargs,
            )  # fmt: skip
            self.lists += 1
            self.cache._observe(response)
            try:
                page = json.loads(response.data)
            except (ValueError, TypeError, UnicodeDecodeError):
                raise _Broken("the LIST answered with something that is not JSON") from None
            if not isinstance(page, dict) or not isinstance(page.get("items") or [], list):
                raise _Broken(f"the LIST answered with a {type(page).__name__} that is not a list of jobs")
            for item in page.get("items") or []:
                meta = item.get("metadata") if isinstance(item, dict) else None
                if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
                    raise _Broken("the LIST answered with an item that is not a named object")  # list again
                if meta.get("namespace", self.namespace) == self.namespace:
                    jobs[meta["name"]] = _Held(self.cache.transform(item))
            meta = page.get("metadata") or {}
            rv = rv or str(meta.get("resourceVersion") or "")
            token = meta.get("continue")
            if not token or self.cache._stopping.is_set():
                break
        with self.lock:
            for name, held in self.jobs.items():  # fed by a GET while the LIST ran: the larger resourceVersion wins
                listed = jobs.get(name)
                newer = listed.rv if listed is not None else rv
                if held.rv != newer and _rv_newer(held.rv, newer) and held.rv.isdigit() and newer.isdigit():
                    jobs[name] = held
            self.jobs = jobs
            self.resource_version = rv
            self.synced = True
            self.heard_at = time.monotonic()

    def _watch(self) -> int:
        """One watch from the held resourceVersion, until it ends; returns how many lines it delivered."""
        settings = self.cache.settings
        timeout = settings.watch_seconds()
        response = self.cache._custom_api().list_namespaced_custom_object(
            self.cache.group, self.cache.version, self.namespace, self.cache.plural,
            label_selector=self.cache.label_selector, resource_version=self.resource_version,
            allow_watch_bookmarks=True, timeout_seconds=timeout, watch=True, _preload_content=False,
            _request_timeout=(settings.request_timeout_s, settings.silence_s + settings.max_staleness_s),
        )  # fmt: skip
        self._response = response
        lines = 0
        try:
            self.watches += 1
            self.connected = True
            self.cache._observe(response)
            for event in _json_lines(response):
                if self.cache._stopping.is_set():
                    return lines
                lines += 1
                self.silent_watches = 0  # it speaks: an earlier silence no longer counts
                self._apply(event)
                if self.idle(time.monotonic()):
                    return lines
        finally:
            response.close()  # not back into the pool half-read: the next request would read this stream's rest
            response.release_conn()
        return lines

    def _apply(self, event: Any) -> None:
        if not isinstance(event, dict) or event.get("type") not in WATCH_EVENT_TYPES:
            raise _Broken("a line that is not a watch event (a proxy's answer, or a list): the watch is broken")
        etype, obj = event["type"], event.get("object")
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata") or {}, dict):
            raise _Broken(f"a {etype} event without an object: the watch is broken")
        if etype == "ERROR":
            code = obj.get("code")
            if code == 410:
                raise _Expired(str(obj.get("message", "")))
            raise ValueError(f"watch ERROR event: {obj.get('reason')} ({code})")
        self.heard_at = time.monotonic()
        meta = obj.get("metadata") or {}
        rv = meta.get("resourceVersion")
        if etype != "BOOKMARK":
            if meta.get("namespace") != self.namespace:
                self._ignore("an event for another namespace")
                return
            if etype != "DELETED" and not self.cache.matches(obj):
                self._ignore("an ADDED/MODIFIED event for a job without our labels")
                return
            if rv and not _rv_newer(str(rv), self.resource_version) and (meta.get("name") not in self.jobs):
                self._ignore("an event older than the resourceVersion held (a replayed resourceVersion)")
                return
            if etype == "DELETED":
                self.remove(obj)  # by uid; the caller confirms with a GET (a relabelled job is also DELETED here)
            else:
                self.put(obj, from_watch=True)
        if rv and _rv_newer(str(rv), self.resource_version):
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


class _Broken(ValueError):
    """The watch answered with something no API server writes on a watch: list again, after a backoff."""


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
        transform: what is kept of each job (default `slim`); a job kind's package can pass a stricter one, as
            client-go's `SetTransform` does. It must keep `metadata.name`, `uid`, `labels` and `resourceVersion`.
        server_clock: learns the API server's clock from the `Date` header of every LIST and WATCH answer
            (`api.ServerClock`); None: not learnt.

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
        server_clock: Optional[Any] = None,
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
        self._server_clock = server_clock

    def _observe(self, response: Any) -> None:
        if self._server_clock is not None:
            self._server_clock.observe(getattr(response, "headers", None))

    def _forget(self, informer: _NamespaceInformer) -> None:
        """Called by an informer's thread as it ends: a later `get` of that namespace starts a new one."""
        with self._lock:
            informer.synced = False
            if self._informers.get(informer.namespace) is informer:
                del self._informers[informer.namespace]

    def namespaces(self) -> list[str]:
        """The namespaces being watched now (each has one thread and at most one open watch).

        Returns:
            Their names, sorted.
        """
        with self._lock:
            return sorted(self._informers)

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
            informer.used_at = time.monotonic()
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
            held = informer.jobs.get(name)
        return held.job() if held is not None else None  # decoded outside the lock: a copy of the caller's own

    def is_deleted(self, namespace: str, name: str, uid: str = "") -> bool:
        """Whether the watch reported the job deleted (and no newer copy arrived since). A hint only: a job whose
        labels stop matching the selector is reported DELETED too; the connector confirms with a GET.

        Args:
            namespace: the job's namespace.
            name: the job's name.
            uid: the job's uid; "" for any uid.

        Returns:
            True when the namespace's cache is fresh and remembers the deletion (of that uid).
        """
        informer = self._informers.get(namespace)
        if informer is None or not informer.fresh(time.monotonic()):
            return False
        with informer.lock:
            gone = informer.deleted.get(name)
            return gone is not None and name not in informer.jobs and (not uid or gone[1] == uid)

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
            return held is not None and held.rv == str(job["metadata"].get("resourceVersion") or "")

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
            jobs, deleted (remembered), resource_version, synced, connected, fresh, lists, watches, silent_watches
            (in a row), ignored (untrusted events by kind); {} when the namespace is not watched.
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
                "silent_watches": informer.silent_watches,
                "ignored": dict(informer.ignored),
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
