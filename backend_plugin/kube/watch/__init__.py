"""A watch-backed cache of the jobs the connector created: one LIST, then a WATCH, per job kind and namespace (or one
for every namespace).

Flyte asks for the status of every running task every few seconds. Answering each poll with a GET costs the API
server one request per task per poll; an informer (client-go, controller-runtime, kopf) instead LISTs the objects
once, WATCHes their changes and answers from memory. This package is that informer for our jobs, in the shape the
connector needs:

- it is target-neutral: it takes the group, version and plural of the job kind and the label selector of the jobs we
  manage, and never names a kind;
- it is thread-based, because the connector's methods are sync: one daemon thread per namespace (or, with
  `watch_all_namespaces`, one for every namespace), started on the first `get` or `feed` there, and stopped once no
  job of it was asked for during `idle_s` (its watch closes with it; the next `get` lists again);
- the loop (`informer`) is client-go's reflector in parts: the requests (`stream`: a paged LIST, then a WATCH from the
  list's resourceVersion with `allowWatchBookmarks`, each answer checked for the shape an API server writes), what to
  do after each (`policy`: resume from the last resourceVersion seen, relist on 410, `retry.Backoff` after errors and
  after watches that end without a line), and what is held (`store`: by uid, ordered by resourceVersion, slimmed);
- liveness: each watch asks the server to end it after about `silence_s`, so a healthy one delivers at least the
  BOOKMARK the API server sends before a watch's timeout; a watch silent for `silence_s` plus a margin (a half-open
  connection) is reopened from its resourceVersion, which replays what it lost, and one that stays silent relists;
- nothing is trusted that was not asked for: an event for another namespace, an ADDED/MODIFIED without our labels
  and an event older than the copy held are ignored (each kind logged once per scope), a job the `check` finds of a
  shape no API server writes is not kept (its GET says what is wrong); a line that is not a watch event breaks the
  watch, which relists after a backoff; an error of our own code stops that scope's watch and is raised to each of
  its callers (`WatchCrashed`), never taken for an odd answer;
- a DELETED is only ever a hint: the cache stops answering for the job and the caller confirms with a GET (a job
  leaves a label selector's watch as DELETED when its labels change, while it still exists);
- `get(namespace, name)` answers only when the scope is synced and fresh (its watch delivered something within
  `silence_s + max_staleness_s`, or, when it is not connected, within `max_staleness_s`) and the job is in it;
  otherwise it returns None and the caller does a GET, which it can `feed` back (a fed job never replaces a newer one,
  and never revives the uid the watch saw deleted).

Facts followed from client-go's reflector: exponential backoff from 0.8 s to 30 s on errors, a relist after an
expired resourceVersion, bookmarks requested on every watch, watches bounded by a timeout. client-go picks 5 to 10
min; here each watch lasts about `silence_s` (20 s), so that a stall is noticed within it: one watch request per scope
every 20 s (0.05 requests/s) instead of one every 5 to 10 min, and no extra thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Optional

from backend_plugin.kube.watch.informer import Informer
from backend_plugin.kube.watch.store import DROPPED_SPEC_KEYS, KEPT_METADATA, slim
from backend_plugin.kube.watch.stream import Scope
from backend_plugin.settings import WatchSettings

__all__ = [
    "JobWatchCache",
    "WatchCrashed",
    "WatchSettings",
    "KEPT_METADATA",
    "DROPPED_SPEC_KEYS",
    "parse_equality_selector",
    "slim",
]


class WatchCrashed(RuntimeError):
    """The watch of a scope stopped on an error of our own code (logged with its traceback when it happened)."""


def parse_equality_selector(selector: str) -> dict[str, Optional[str]]:
    """Parse a label selector made of `key=value` and `key` (exists) terms, the kind the connector labels with.

    Args:
        selector: e.g. `app.kubernetes.io/managed-by=flytekitplugins-pytorch`.

    Returns:
        label -> required value (None: the label must exist).

    Raises:
        ValueError: when the selector is empty or has a term of another form (`!=`, `in`, `notin`, `!key`).
    """
    terms: dict[str, Optional[str]] = {}
    for term in (t.strip() for t in selector.split(",")):
        if not term or any(op in term for op in ("!", "(", " ")):
            raise ValueError(
                f"label_selector={selector!r} has a term {term!r} that is not 'key=value' or 'key'; "
                "the cache needs a selector it can also check on a job read by GET"
            )
        key, sep, value = term.replace("==", "=").partition("=")
        terms[key] = value if sep else None
    return terms


class JobWatchCache:
    """Watch-backed cache of one job kind (per namespace, or for every namespace, started lazily) for the jobs
    matching a label selector.

    Args:
        api_client: a `kubernetes.client.ApiClient`, or a callable returning one (called once, on first use).
        group: API group of the job kind (e.g. `example.org`).
        version: API version (e.g. `v1`).
        plural: resource plural (e.g. `examplejobs`).
        label_selector: the selector of the jobs we manage, `key=value` terms (what the connector labels jobs with).
        settings: timeouts, staleness bound, backoff, and whether one watch covers every namespace (`all_namespaces`).
        transform: what is kept of each job (default `slim`); a job kind's package can pass a stricter one, as
            client-go's `SetTransform` does. It must keep `metadata.name`, `uid`, `labels` and `resourceVersion`.
        server_clock: learns the API server's clock from the `Date` header of every LIST and WATCH answer
            (`api.ServerClock`); None: not learnt.
        check: what is wrong with a job's shape, or None (`connector.shapes.job_problem`); such a job is not kept.

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
        settings: Optional[WatchSettings] = None,
        transform: Callable[[dict], dict] = slim,
        server_clock: Optional[Any] = None,
        check: Optional[Callable[[dict], Optional[str]]] = None,
    ) -> None:
        for field_name, value in (("group", group), ("version", version), ("plural", plural)):
            if not value:
                raise ValueError(f"{field_name}={value!r} must name the job kind's API {field_name}")
        self._selector = parse_equality_selector(label_selector)
        self.group, self.version, self.plural = group, version, plural
        self.label_selector = label_selector
        self.settings = settings or WatchSettings()
        self.transform = transform
        self.check = check
        self.stopping = threading.Event()
        self._api_client_source = api_client
        self._api: Any = None
        self._informers: dict[Optional[str], Informer] = {}
        self._crashed: dict[Optional[str], BaseException] = {}
        self._lock = threading.Lock()
        self._server_clock = server_clock

    # -------------------------------------------------------------- what the informers ask
    def observe(self, response: Any) -> None:
        """Learn the server's clock from an answer's `Date` header.

        Args:
            response: a LIST or WATCH answer.
        """
        if self._server_clock is not None:
            self._server_clock.observe(getattr(response, "headers", None))

    def custom_api(self) -> Any:
        """The `CustomObjectsApi` over the client (built on first use).

        Returns:
            The kubernetes `CustomObjectsApi`.
        """
        if self._api is None:
            from kubernetes import client

            source = self._api_client_source
            self._api = client.CustomObjectsApi(source() if callable(source) else source)
        return self._api

    def forget(self, informer: Informer) -> None:
        """Called by an informer's thread as it ends: a later `get` there starts a new one, unless it crashed.

        Args:
            informer: the informer that ends.
        """
        with self._lock:
            informer.synced = False
            if informer.crashed is not None:
                self._crashed[informer.scope.namespace] = informer.crashed
            if self._informers.get(informer.scope.namespace) is informer:
                del self._informers[informer.scope.namespace]

    def matches(self, job: dict) -> bool:
        """Whether `job` carries the labels of the selector (only such jobs are watched, so only they are cached).

        Args:
            job: a job dict.

        Returns:
            True when every selector term holds on the job's labels.
        """
        labels = (job.get("metadata") or {}).get("labels") or {}
        return all(k in labels and (v is None or labels[k] == v) for k, v in self._selector.items())

    # -------------------------------------------------------------- scopes
    def _key(self, namespace: str) -> Optional[str]:
        return None if self.settings.all_namespaces else namespace

    def _informer(self, namespace: str, start: bool = True) -> Optional[Informer]:
        key = self._key(namespace)
        running = self._informers.get(key)  # a poll's path: no lock once the scope's informer runs
        if running is not None and not self.stopping.is_set():
            running.used_at = time.monotonic()
            return running
        with self._lock:
            crashed = self._crashed.get(key)
            if crashed is not None:
                where = f"in {key}" if key is not None else "in all namespaces"
                error = f"{type(crashed).__name__}: {crashed}"
                message = f"the watch of {self.plural} {where} stopped on an error of its own code ({error})"
                raise WatchCrashed(f"{message}; see the connector's log") from crashed
            if self.stopping.is_set():
                return None
            informer = self._informers.get(key)
            if informer is None and start:
                scope = Scope(self.group, self.version, self.plural, key, self.label_selector)
                informer = self._informers[key] = Informer(self, scope)
                informer.thread.start()
            if informer is not None:
                informer.used_at = time.monotonic()
            return informer

    def namespaces(self) -> list[str]:
        """The namespaces being watched now, each with one thread and at most one open watch (`*` for the one watch
        of every namespace).

        Returns:
            Their names, sorted.
        """
        with self._lock:
            return sorted(k if k is not None else "*" for k in self._informers)

    # -------------------------------------------------------------- what the connector asks
    def get(self, namespace: str, name: str) -> Optional[dict]:
        """The cached job, when the namespace's cache is synced and fresh and holds it; starts watching on first use.

        Args:
            namespace: the job's namespace.
            name: the job's name.

        Returns:
            A copy of the slimmed job, or None (not synced, stale, unknown or deleted): read the API instead.

        Raises:
            WatchCrashed: the watch of this namespace stopped on an error of our own code.
        """
        informer = self._informer(namespace)
        if informer is None or not informer.fresh(time.monotonic()):
            return None
        return informer.store.get((namespace, name))

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
        informer = self._informers.get(self._key(namespace))
        if informer is None or not informer.fresh(time.monotonic()):
            return False
        return informer.store.is_deleted((namespace, name), uid)

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
        return informer is not None and informer.keep(job, from_watch=False)

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
        informer = self._informers.get(self._key(namespace))
        if informer is None:
            return {}
        jobs, deleted = informer.store.sizes()
        return {
            "jobs": jobs,
            "deleted": deleted,
            "resource_version": informer.resource_version,
            "synced": informer.synced,
            "connected": informer.connected,
            "fresh": informer.fresh(time.monotonic()),
            "lists": informer.lists,
            "watches": informer.watches,
            "silent_watches": informer.policy.silent,
            "ignored": dict(informer.ignored),
        }

    def stop(self, timeout: float = 5.0) -> None:
        """Stop every watch and wait for the threads to end (a crash recorded is forgotten).

        Args:
            timeout: the longest wait per thread, in seconds.

        Raises:
            RuntimeError: when a thread is still running after `timeout`.
        """
        self.stopping.set()
        with self._lock:
            informers = list(self._informers.values())
            self._crashed.clear()
        for informer in informers:
            informer.interrupt()
        for informer in informers:
            informer.thread.join(timeout)
        alive = [i.thread.name for i in informers if i.thread.is_alive()]
        if alive:
            raise RuntimeError(f"watch threads still running after {timeout} s: {alive}")
