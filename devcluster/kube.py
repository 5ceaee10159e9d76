"""A small JSON client over the `kubernetes` package's ApiClient (kubeconfig, TLS, tokens), and a reflector.

devcluster's parts work on plain dicts, as the API server sends them: no model classes between the wire and the
code that plays a kubelet, a kube-proxy or a DNS server.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

log = logging.getLogger("devcluster")

UNREACHABLE = (urllib3.exceptions.HTTPError, OSError)
"""What a request raises when the API server cannot be reached (refused, reset, timed out: a restart): the caller
keeps what it has and tries again later, as the kubelet does."""


class ApiError(Exception):
    def __init__(self, status: int, reason: str, body: str) -> None:
        self.status = status
        self.reason = reason
        self.body = body
        try:
            message = json.loads(body).get("message", body)
        except ValueError:
            message = body
        super().__init__(f"{status} {reason}: {message}")


class Kube:
    """JSON requests as one identity (a kubeconfig file, or the in-cluster service account)."""

    def __init__(self, kubeconfig: Path | None = None) -> None:
        if kubeconfig is None:
            configuration = k8s_client.Configuration()
            k8s_config.load_incluster_config(client_configuration=configuration)
            self.api = k8s_client.ApiClient(configuration)
        else:
            self.api = k8s_config.new_client_from_config(config_file=str(kubeconfig))
        self.api.configuration.retries = False

    def _send(
        self, method: str, path: str, query: dict[str, Any] | None, body: Any, content_type: str, timeout: Any
    ) -> Any:
        """One request through the client's REST layer; the urllib3 response, its body not read yet."""
        _m, url, headers, _b, _p = self.api.param_serialize(
            method,
            path,
            query_params=list((query or {}).items()),
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        # the REST layer serializes a body itself for any JSON content type; a YAML one (apply) is sent as given
        data = body if body is None or "json" in content_type or isinstance(body, (str, bytes)) else json.dumps(body)
        return self.api.rest_client.request(method, url, headers=headers, body=data, _request_timeout=timeout).response

    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float = 30,
    ) -> Any:
        """One request; the answer's JSON (None for an empty body). Raises ApiError for a status >= 400."""
        from kubernetes.client.exceptions import ApiException

        try:
            resp = self._send(method, path, query, body, content_type, timeout)
        except ApiException as e:
            raise ApiError(e.status or 0, e.reason or "", str(e.body)) from None
        data = resp.data
        if resp.status >= 400:
            raise ApiError(resp.status, resp.reason or "", data.decode(errors="replace"))
        return json.loads(data) if data else None

    def get(self, path: str, **query: Any) -> Any:
        return self.request("GET", path, query=query or None)

    def get_or_none(self, path: str) -> Any:
        try:
            return self.get(path)
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def create(self, path: str, body: Any, **query: Any) -> Any:
        return self.request("POST", path, body=body, query=query or None)

    def merge_patch(self, path: str, body: Any) -> Any:
        return self.request("PATCH", path, body=body, content_type="application/merge-patch+json")

    def strategic_patch(self, path: str, body: Any) -> Any:
        return self.request("PATCH", path, body=body, content_type="application/strategic-merge-patch+json")

    def apply(self, path: str, body: Any, manager: str, force: bool = True) -> Any:
        """Server-side apply of `body` at `path` (the object's own path)."""
        return self.request(
            "PATCH",
            path,
            body=json.dumps(body),
            content_type="application/apply-patch+yaml",
            query={"fieldManager": manager, "force": "true" if force else "false"},
        )

    def delete(self, path: str, body: Any = None) -> Any:
        try:
            return self.request("DELETE", path, body=body)
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def watch(self, path: str, query: dict[str, Any], timeout_s: int = 300) -> Iterator[dict]:
        """The events of one watch request, until the server ends it."""
        from kubernetes.client.exceptions import ApiException

        q = dict(query)
        q.update({"watch": "true", "timeoutSeconds": str(timeout_s), "allowWatchBookmarks": "true"})
        try:
            resp = self._send("GET", path, q, None, "application/json", (10, timeout_s + 30))
        except ApiException as e:
            raise ApiError(e.status or 0, e.reason or "", str(e.body)) from None
        if resp.status >= 400:
            raise ApiError(resp.status, resp.reason or "", resp.data.decode(errors="replace"))
        try:
            buf = b""
            for chunk in resp.stream(65536, decode_content=True):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
        finally:
            resp.release_conn()


class Reflector:
    """LIST then WATCH of one collection into a dict by `namespace/name`, calling `on_change(kind, obj)` for each
    change ("ADDED", "MODIFIED", "DELETED"); relists on 410 Gone and after errors, as client-go's reflector does."""

    def __init__(
        self,
        kube: Kube,
        path: str,
        on_change: Callable[[str, dict], None],
        *,
        query: dict[str, Any] | None = None,
        name: str = "",
    ) -> None:
        self.kube = kube
        self.path = path
        self.query = query or {}
        self.on_change = on_change
        self.items: dict[str, dict] = {}
        self.synced = threading.Event()
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name=f"reflector {name or path}", daemon=True)

    def start(self) -> Reflector:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()

    @staticmethod
    def key(obj: dict) -> str:
        meta = obj["metadata"]
        return f"{meta.get('namespace', '')}/{meta['name']}"

    def _run(self) -> None:
        backoff = 0.5
        while not self.stopping.is_set():
            try:
                rv: str | None = self._list()
                self.synced.set()
                backoff = 0.5
                while rv is not None and not self.stopping.is_set():
                    rv = self._watch(rv)  # None after a 410: relist
            except Exception as e:  # noqa: BLE001 - any failure: relist after a pause, as the reflector does
                log.warning("%s: %s; relisting in %.1f s", self.path, e, backoff)
                self.stopping.wait(backoff)
                backoff = min(backoff * 2, 10)

    def _list(self) -> str:
        items: dict[str, dict] = {}
        cont = None
        while True:
            q = dict(self.query)
            q["limit"] = "500"
            if cont:
                q["continue"] = cont
            page = self.kube.get(self.path, **q)
            for obj in page.get("items") or []:
                items[self.key(obj)] = obj
            cont = page["metadata"].get("continue")
            if not cont:
                rv = page["metadata"]["resourceVersion"]
                break
        with self.lock:
            old = self.items
            self.items = items
        for k, obj in items.items():
            if k not in old:
                self.on_change("ADDED", obj)
            elif old[k]["metadata"].get("resourceVersion") != obj["metadata"].get("resourceVersion"):
                self.on_change("MODIFIED", obj)
        for k, obj in old.items():
            if k not in items:
                self.on_change("DELETED", obj)
        return rv

    def _watch(self, rv: str) -> str | None:
        q = dict(self.query)
        q["resourceVersion"] = rv
        for event in self.kube.watch(self.path, q):
            kind = str(event.get("type"))
            obj = event.get("object") or {}
            if kind == "ERROR":
                if obj.get("code") == 410:
                    return None
                raise ApiError(obj.get("code", 0), obj.get("reason", ""), json.dumps(obj))
            rv = obj.get("metadata", {}).get("resourceVersion", rv)
            if kind == "BOOKMARK":
                continue
            k = self.key(obj)
            with self.lock:
                if kind == "DELETED":
                    self.items.pop(k, None)
                else:
                    self.items[k] = obj
            self.on_change(kind, obj)
            if self.stopping.is_set():
                break
        return rv

    def snapshot(self) -> list[dict]:
        with self.lock:
            return list(self.items.values())


def wait_for(
    what: str,
    check: Callable[[], Any],
    timeout_s: float,
    interval_s: float = 0.5,
    fatal: tuple[type[BaseException], ...] = (),
) -> Any:
    """Call `check` until it returns a truthy value; raise TimeoutError naming `what` and the last error. An
    exception of a `fatal` type ends the wait at once."""
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except fatal:
            raise
        except Exception as e:  # noqa: BLE001 - the last error goes into the message
            last = e
        time.sleep(interval_s)
    raise TimeoutError(f"{what}: not ready after {timeout_s:.0f} s" + (f" (last error: {last})" if last else ""))
