"""One watch loop: LIST then WATCH the jobs of one scope, in a thread of its own, into a `Store`.

The loop is client-go's reflector in three parts: the requests (`stream.list_jobs`, `stream.open_watch`,
`stream.events`), what to do after each (`policy.RetryPolicy`), and what is held (`store.Store`). What comes in is
checked before it is kept: an event for another namespace, an ADDED/MODIFIED without our labels, and an event older
than the copy held are ignored (each kind logged once per scope); a job of a shape no API server writes (the cache's
`check`) is not kept, and the copy held of it is dropped, so the connector's GET says what is wrong. An error of our
own code (the transform, the store) is not taken for an odd answer: it ends the loop, logged with its traceback, and
the cache raises it to every caller of that scope (`crashed`).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, Optional, Protocol

from backend_plugin.errors import forbidden_reason, parse_status
from backend_plugin.kube.retry import Backoff
from backend_plugin.kube.watch.policy import MIN_HEALTHY_WATCH_S, Outcome, RetryPolicy
from backend_plugin.kube.watch.store import Held, Store, rv_newer
from backend_plugin.kube.watch.stream import Broken, Expired, Scope, WatchError, events, list_jobs, open_watch
from backend_plugin.settings import WatchSettings

__all__ = ["Informer", "Owner"]

logger = logging.getLogger(__name__)


class Owner(Protocol):
    """What an informer asks of the cache it belongs to (`JobWatchCache`)."""

    settings: WatchSettings
    stopping: threading.Event
    check: Optional[Callable[[dict], Optional[str]]]
    transform: Callable[[dict], dict]

    def custom_api(self) -> Any:
        """The client the requests go through.

        Returns:
            A kubernetes `CustomObjectsApi`.
        """

    def observe(self, response: Any) -> None:
        """Learn the server's clock from an answer.

        Args:
            response: a LIST or WATCH answer.
        """

    def matches(self, job: dict) -> bool:
        """Whether a job carries our labels.

        Args:
            job: a job.

        Returns:
            True when it does.
        """

    def forget(self, informer: Informer) -> None:
        """An informer's thread ends.

        Args:
            informer: the informer.
        """


class Informer:
    """LIST + WATCH of one scope of one kind's jobs, in its own thread; the store the cache answers from.

    Args:
        cache: the cache it belongs to (its settings, client, check, transform, stop flag).
        scope: the jobs it covers.
    """

    def __init__(self, cache: Owner, scope: Scope) -> None:
        self.cache = cache
        self.scope = scope
        self.store = Store()
        self.resource_version: Optional[str] = None
        self.synced = False
        self.connected = False
        self.heard_at = 0.0
        self.used_at = time.monotonic()
        self.lists = 0
        self.watches = 0
        self.ignored: dict[str, int] = {}
        self.crashed: Optional[BaseException] = None
        self._response: Any = None
        self.policy = RetryPolicy(Backoff(cache.settings.backoff_initial_s, cache.settings.backoff_max_s))
        self.thread = threading.Thread(target=self._run, name=f"job-watch-{scope.plural}-{scope.name}", daemon=True)

    # -------------------------------------------------------------- state
    def fresh(self, now: float) -> bool:
        """Whether its answers are current: synced, and heard from within `WatchSettings.fresh_for`.

        Args:
            now: the monotonic clock.

        Returns:
            True when the store may answer.
        """
        return self.synced and now - self.heard_at <= self.cache.settings.fresh_for(self.connected)

    def idle(self, now: float) -> bool:
        """Whether no job of its scope was asked for during `idle_s` (its watch then stops).

        Args:
            now: the monotonic clock.

        Returns:
            True when idle.
        """
        return now - self.used_at > self.cache.settings.idle_s

    def covers(self, namespace: Optional[str]) -> bool:
        """Whether a job of `namespace` is in its scope.

        Args:
            namespace: a job's namespace.

        Returns:
            True for its namespace, or any when it watches every namespace.
        """
        return self.scope.namespace is None or namespace == self.scope.namespace

    def _ignore(self, why: str) -> None:
        """Count an event that is not trusted; log each kind once per scope."""
        self.ignored[why] = self.ignored.get(why, 0) + 1
        if self.ignored[why] == 1:
            logger.warning("watch of %s in %s: ignoring %s (logged once)", self.scope.plural, self.scope.name, why)

    def keep(self, job: dict, from_watch: bool) -> bool:
        """Store a job of the scope (shape checked, transformed), unless the copy held is newer or, for a fed copy,
        the watch saw it deleted since.

        Args:
            job: the job as the API answered it.
            from_watch: whether a watch event brought it (else a GET's copy, fed by the caller).

        Returns:
            Whether it is stored.
        """
        meta = job["metadata"]
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        wrong = self.cache.check(job) if self.cache.check is not None else None
        if wrong:
            self.store.discard(key)  # its GET names what is wrong
            self._ignore(f"a job of a shape no API server writes ({wrong}); it is left to GETs")
            return False
        stored = self.store.put(key, Held(self.cache.transform(job)), from_watch)
        if not stored and from_watch:
            self._ignore("an event older than the job held (a replayed resourceVersion)")
        return stored

    # -------------------------------------------------------------- the loop
    def _run(self) -> None:
        from kubernetes.client.exceptions import ApiException  # the client is loaded only when a cache runs
        from urllib3.exceptions import HTTPError, ReadTimeoutError

        settings, stop, policy = self.cache.settings, self.cache.stopping, self.policy
        scope = self.scope
        try:
            while not stop.is_set():
                if self.idle(time.monotonic()):
                    logger.info("no job of %s in %s asked for in %gs: its watch stops", scope.plural, scope.name,
                                settings.idle_s)  # fmt: skip
                    return
                outcome: Optional[Outcome] = None
                try:
                    if policy.need_list:
                        self._list()
                        policy.after(Outcome.LISTED)
                    opened = time.monotonic()
                    lines = self._watch()
                    healthy = lines > 0 and time.monotonic() - opened >= MIN_HEALTHY_WATCH_S
                    outcome = Outcome.HEALTHY if healthy else None if stop.is_set() else Outcome.UNHEALTHY
                except Expired as e:
                    logger.info("watch of %s in %s expired (%s); listing again", scope.plural, scope.name, e)
                    outcome = Outcome.EXPIRED
                except ReadTimeoutError:
                    outcome = Outcome.SILENT
                    logger.warning("watch of %s in %s delivered nothing for %gs; presumed dead, %s", scope.plural,
                                   scope.name, settings.silence_s + settings.max_staleness_s,
                                   "reopening it" if policy.silent == 0 else "listing again")  # fmt: skip
                except Broken as e:
                    outcome = Outcome.BROKEN
                    logger.warning("watch of %s in %s is broken (%s); listing again", scope.plural, scope.name, e)
                except (ApiException, HTTPError, OSError, WatchError) as e:
                    if stop.is_set():
                        break
                    gone = isinstance(e, ApiException) and e.status == 410  # a continue token, or a watch, too old
                    outcome = Outcome.GONE if gone else Outcome.FAILED
                    verb = "list" if policy.need_list or gone else "watch"
                    if isinstance(e, ApiException) and e.status == 403:
                        logger.warning("%s of %s in %s failed: %s Until it is granted, each status poll reads its job "
                                       "with a GET (`watch_cache: false` stops these requests); retrying", verb,
                                       scope.plural, scope.name, forbidden_reason(verb, scope.plural, scope.group,
                                       scope.namespace or "", parse_status(e).message))  # fmt: skip
                    else:
                        logger.warning("%s of %s in %s failed (%s); retrying", verb, scope.plural, scope.name,
                                       _describe(e))  # fmt: skip
                finally:
                    self.connected = False
                    self._response = None
                if outcome is not None:
                    stop.wait(policy.after(outcome))  # a stop ends the wait at once
        except Exception as e:  # noqa: BLE001 - our own code failed: said with its traceback, raised to every get
            self.crashed = e
            logger.exception("the watch of %s in %s stopped on an error of its own code", scope.plural, scope.name)
        finally:
            self.cache.forget(self)

    def _list(self) -> None:
        listed: dict[tuple[str, str], Held] = {}

        def each(job: dict) -> None:  # as its page comes in: what is kept of it, not the whole job
            meta = job["metadata"]
            namespace = str(meta.get("namespace") or self.scope.namespace or "")
            if not self.covers(namespace):
                return
            wrong = self.cache.check(job) if self.cache.check is not None else None
            if wrong:
                self._ignore(f"a job of a shape no API server writes ({wrong}); it is left to GETs")
                return
            listed[(namespace, meta["name"])] = Held(self.cache.transform(job))

        rv = list_jobs(self.cache.custom_api(), self.scope, self.cache.settings.page_size,
                       self.cache.settings.request_timeout_s, self._page, self.cache.stopping.is_set, each)  # fmt: skip
        self.store.replace(listed, rv)
        self.resource_version = rv
        self.synced = True
        self.heard_at = time.monotonic()

    def _page(self, response: Any) -> None:
        self.lists += 1
        self.cache.observe(response)

    def _watch(self) -> int:
        """One watch from the held resourceVersion, until it ends; returns how many lines it delivered."""
        settings = self.cache.settings
        response = open_watch(self.cache.custom_api(), self.scope, self.resource_version, settings.watch_seconds(),
                              (settings.request_timeout_s, settings.silence_s + settings.max_staleness_s))  # fmt: skip
        self._response = response
        lines = 0
        try:
            self.watches += 1
            self.connected = True
            self.cache.observe(response)
            for etype, obj in events(response):
                if self.cache.stopping.is_set():
                    return lines
                lines += 1
                self.policy.heard()  # it speaks: an earlier silence no longer counts
                self._apply(etype, obj)
                if self.idle(time.monotonic()):
                    return lines
        finally:
            response.close()  # not back into the pool half-read: the next request would read this stream's rest
            response.release_conn()
        return lines

    def _apply(self, etype: str, obj: dict) -> None:
        self.heard_at = time.monotonic()
        meta = obj.get("metadata") or {}
        rv = meta.get("resourceVersion")
        if etype != "BOOKMARK":
            namespace, name = meta.get("namespace"), meta.get("name")
            key = (str(namespace or ""), str(name or ""))
            if not self.covers(namespace):
                self._ignore("an event for another namespace")
                return
            if etype != "DELETED" and not self.cache.matches(obj):
                self._ignore("an ADDED/MODIFIED event for a job without our labels")
                return
            if rv and not rv_newer(str(rv), self.resource_version) and not self.store.holds(key):
                self._ignore("an event older than the resourceVersion held (a replayed resourceVersion)")
                return
            if not name:
                pass  # nothing to key it by
            elif etype == "DELETED":  # by uid; the caller confirms with a GET (a relabelled job is also DELETED here)
                why = self.store.remove(key, str(rv or ""), str(meta.get("uid") or ""))
                if why:
                    self._ignore(why)
            else:
                self.keep(obj, from_watch=True)
        if rv and rv_newer(str(rv), self.resource_version):
            self.resource_version = str(rv)

    def interrupt(self) -> None:
        """Unblock a watch read in progress by shutting down its socket (the thread then sees the stop)."""
        sock = getattr(getattr(self._response, "connection", None), "sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _describe(error: BaseException) -> str:
    status = getattr(error, "status", None)
    reason = getattr(error, "reason", None)
    if status is not None:
        return f"HTTP {status} {reason or ''}".strip()  # never the body: it can echo request headers
    return f"{type(error).__name__}: {error}"
