"""The two requests a watch makes, as client-go's reflector makes them: a paged LIST of the jobs of one scope (a
namespace, or every namespace), and a WATCH from a resourceVersion with `allowWatchBookmarks`, bounded by
`timeoutSeconds`, whose answer is a stream of JSON events.

What comes back is checked here, where it comes in, for the shape an API server writes: a LIST that is not JSON, not a
list, or has an item without a name, and a watch line that is not JSON or not an event (a proxy's answer, a list) are
`Broken`; an ERROR event with a 410 is `Expired`, any other ERROR event `WatchError`. Past this point every event is
`(type, object)` with a dict object and a dict `metadata`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Optional

__all__ = ["Scope", "Broken", "Expired", "WatchError", "WATCH_EVENT_TYPES", "list_jobs", "open_watch", "events"]

WATCH_EVENT_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"})
"""The event types an API server writes on a watch; any other line means the watch is broken."""


class Expired(Exception):
    """The resourceVersion the watch runs from is too old (410): list again."""


class Broken(Exception):
    """The LIST or the watch answered with something no API server writes: list again, after a backoff."""


class WatchError(Exception):
    """The watch ended with an ERROR event other than a 410 (its reason and code)."""


@dataclass(frozen=True)
class Scope:
    """Which jobs a watch covers: one kind's jobs with our labels, in one namespace or in every namespace.

    Attributes:
        group, version, plural: the job kind's resource.
        namespace: the namespace; None for every namespace (a cluster-wide LIST and WATCH).
        label_selector: the selector of the jobs we manage.
    """

    group: str
    version: str
    plural: str
    namespace: Optional[str]
    label_selector: str

    @property
    def name(self) -> str:
        """For logs and thread names: the namespace, or `all namespaces`."""
        return self.namespace if self.namespace is not None else "all namespaces"

    def list_call(self, custom_api: Any, **kwargs: Any) -> Any:
        """LIST (or, with `watch=True`, WATCH) the scope's jobs.

        Args:
            custom_api: a `kubernetes.client.CustomObjectsApi`.
            **kwargs: the request's parameters.

        Returns:
            The raw answer.
        """
        if self.namespace is None:
            return custom_api.list_cluster_custom_object(self.group, self.version, self.plural, **kwargs)
        return custom_api.list_namespaced_custom_object(self.group, self.version, self.namespace, self.plural,
                                                        **kwargs)  # fmt: skip


def list_jobs(
    custom_api: Any,
    scope: Scope,
    page_size: int,
    request_timeout_s: float,
    on_page: Callable[[Any], None],
    stopping: Callable[[], bool],
    each: Callable[[dict], None],
) -> str:
    """Every job of the scope, `page_size` at a time (one snapshot: the first page's resourceVersion), each handed to
    `each` as its page comes in: one page of whole jobs is held at a time, never the whole list (whole jobs are many
    times what the cache keeps of them, and the memory a list of them took stays the process's).

    Args:
        custom_api: a `kubernetes.client.CustomObjectsApi`.
        scope: what to list.
        page_size: `limit` of each page.
        request_timeout_s: connect and read timeout of each page.
        on_page: called with each page's answer as it arrives (the server's clock is learnt from it).
        stopping: whether to stop between pages.
        each: called with each job of a page, once the page's shape is checked.

    Returns:
        The list's resourceVersion.

    Raises:
        Broken: an answer that is not a list of named objects (jobs of earlier pages were handed over).
        kubernetes ApiException, urllib3 HTTPError, OSError: the request failed.
    """
    token: Optional[str] = None
    rv = ""
    while True:
        kwargs: dict[str, Any] = {"label_selector": scope.label_selector, "limit": page_size}
        if token:
            kwargs["_continue"] = token
        response = scope.list_call(custom_api, _request_timeout=request_timeout_s, _preload_content=False, **kwargs)
        on_page(response)
        try:
            page = json.loads(response.data)
        except (ValueError, TypeError, UnicodeDecodeError):
            raise Broken("the LIST answered with something that is not JSON") from None
        if not isinstance(page, dict) or not isinstance(page.get("items") or [], list):
            raise Broken(f"the LIST answered with a {type(page).__name__} that is not a list of jobs")
        items = page.get("items") or []
        for item in items:
            item_meta = item.get("metadata") if isinstance(item, dict) else None
            if not isinstance(item_meta, dict) or not isinstance(item_meta.get("name"), str):
                raise Broken("the LIST answered with an item that is not a named object")
        for item in items:
            each(item)
        listed = page.get("metadata")
        meta: dict[str, Any] = listed if isinstance(listed, dict) else {}
        rv = rv or str(meta.get("resourceVersion") or "")
        token = meta.get("continue")
        if not token or stopping():
            return rv


def open_watch(custom_api: Any, scope: Scope, rv: Optional[str], timeout_seconds: int,
               request_timeout: tuple[float, float]) -> Any:  # fmt: skip
    """Open a WATCH of the scope from `rv`, with bookmarks, asking the server to end it after `timeout_seconds`.

    Args:
        custom_api: a `kubernetes.client.CustomObjectsApi`.
        scope: what to watch.
        rv: the resourceVersion to watch from.
        timeout_seconds: the watch's `timeoutSeconds`.
        request_timeout: (connect, read) timeouts: a read that waits longer is a silent watch.

    Returns:
        The raw response (stream it with `events`; close it).
    """
    return scope.list_call(
        custom_api, label_selector=scope.label_selector, resource_version=rv, allow_watch_bookmarks=True,
        timeout_seconds=timeout_seconds, watch=True, _preload_content=False, _request_timeout=request_timeout,
    )  # fmt: skip


def events(response: Any) -> Iterator[tuple[str, dict]]:
    """The events of a watch response, as chunks arrive: `(type, object)`, the object a dict with a dict `metadata`.

    Args:
        response: what `open_watch` returned.

    Yields:
        Each event but ERROR ones.

    Raises:
        Broken: a line that is not a JSON watch event with an object.
        Expired: an ERROR event with a 410 (the resourceVersion is too old).
        WatchError: any other ERROR event.
    """
    for event in _json_lines(response):
        if not isinstance(event, dict) or event.get("type") not in WATCH_EVENT_TYPES:
            raise Broken("a line that is not a watch event (a proxy's answer, or a list): the watch is broken")
        etype, obj = event["type"], event.get("object")
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata") or {}, dict):
            raise Broken(f"a {etype} event without an object: the watch is broken")
        if etype == "ERROR":
            code = obj.get("code")
            if code == 410:
                raise Expired(str(obj.get("message", "")))
            raise WatchError(f"watch ERROR event: {obj.get('reason')} ({code})")
        yield etype, obj


def _json_lines(response: Any) -> Iterator[Any]:
    """The JSON values of a watch response, one per line."""
    buffer = b""
    for chunk in response.stream(65536, decode_content=False):
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.strip():
                yield _decoded(line)
    if buffer.strip():
        yield _decoded(buffer)


def _decoded(line: bytes) -> Any:
    try:
        return json.loads(line)
    except (ValueError, UnicodeDecodeError):
        raise Broken("a line that is not JSON: the watch is broken") from None
