"""A local HTTP server that answers like the Kubernetes API server for the calls our backend makes.

Covered: PyTorchJobs (`kubeflow.org/v1`) and TrainJobs (`trainer.kubeflow.org/v1alpha1`): create, get, list, delete
with `propagationPolicy`; API discovery of both groups (`GET /apis/<group>/<version>`, only for the kinds in
`served`); pods (list with a label selector, get) and events (list). Error responses carry the API server's
`Status` bodies (NotFound, AlreadyExists, Forbidden with the RBAC message, InternalError, ServiceUnavailable,
Invalid).

Tests drive it through a clean state API (`put_job`, `get_job`, `set_job_status`, `put_pod`, ...), hooks that run on
create and delete (the e2e harness's fake operator uses them to start replica processes), fault rules (`fail`,
`delay`, `forbid`, `hang` until `release`, `answer_raw` with any status and body, 413 among the statuses `fail`
knows) and a request log (`calls(...)`) to count what the client really sent.
"""

from __future__ import annotations

import copy
import datetime
import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

GROUP = "kubeflow.org"
VERSION = "v1"
PLURAL = "pytorchjobs"
DEFAULT_USER = "system:serviceaccount:flyte:pytorch-connector"

TRAINJOBS = "trainjobs"
JOB_KINDS = {
    PLURAL: (GROUP, VERSION, "PyTorchJob", "training.kubeflow.org/job-name"),
    TRAINJOBS: ("trainer.kubeflow.org", "v1alpha1", "TrainJob", "jobset.sigs.k8s.io/jobset-name"),
}
"""plural -> (group, version, kind, the label naming a job's pods)."""

_JOBS = re.compile(rf"^/apis/{GROUP}/{VERSION}/namespaces/(?P<ns>[^/]+)/{PLURAL}(?:/(?P<name>[^/]+))?/?$")
_TRAINJOBS = re.compile(
    r"^/apis/trainer\.kubeflow\.org/v1alpha1/namespaces/(?P<ns>[^/]+)/trainjobs(?:/(?P<name>[^/]+))?/?$"
)
_DISCOVERY = re.compile(r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)/?$")
_CORE = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/(?P<res>pods|events)(?:/(?P<name>[^/]+))?/?$")

JobHook = Callable[["FakeKubeApi", dict], None]

HANG_LIMIT_S = 600.0
"""The longest a `hang` rule holds a request when nobody releases it (a forgotten rule must not hold a thread for
ever)."""


def now_rfc3339() -> str:
    """The current UTC time as the API server writes timestamps (RFC 3339, seconds, `Z`)."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_body(code: int, reason: str, message: str, details: dict | None = None) -> dict:
    """A `Status` object exactly as the API server returns it for a failed request.

    Args:
        code: HTTP status code.
        reason: machine-readable reason (`NotFound`, `AlreadyExists`, `Forbidden`, ...).
        message: the human-readable message.
        details: the `details` field (name, group, kind, causes); omitted when None.

    Returns:
        The JSON-able Status dict.
    """
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


def forbidden_message(verb: str, resource: str, group: str, namespace: str, name: str | None, user: str) -> str:
    """The RBAC authorizer's denial message (`<resource>.<group> "<name>" is forbidden: User ... cannot ...`).

    Args:
        verb: Kubernetes verb (create, get, list, delete, ...).
        resource: plural resource name.
        group: API group; "" for the core group.
        namespace: the request's namespace.
        name: the object's name; None for create and list (the authorizer does not know one).
        user: the requesting user.

    Returns:
        The message the API server puts into the 403 Status body.
    """
    qualified = f"{resource}.{group}" if group else resource
    subject = f'{qualified} "{name}"' if name else qualified
    return (
        f'{subject} is forbidden: User "{user}" cannot {verb} resource "{resource}" in API group "{group}" '
        f'in the namespace "{namespace}"'
    )


@dataclass
class RequestRecord:
    """One request the server answered (or dropped)."""

    method: str
    path: str
    query: dict[str, list[str]]
    verb: str
    resource: str
    namespace: str
    name: str | None
    status: int = 0
    started: float = 0.0
    finished: float = 0.0


@dataclass
class FaultRule:
    """A fault injected on requests that match (verb, resource, name); None matches anything.

    `status` answers with that error Status instead of serving the request (or with `body`, as it is, when set:
    a proxy's error page, JSON of the wrong shape, any status); `delay_s` sleeps (before serving when `before` is
    True, otherwise after serving and before the response is written: a create that "times out" on the client side
    but did happen); `hang` holds the request, unanswered, until the event is set (`FakeKubeApi.release`).
    `remaining` counts matching requests left (None: forever).
    """

    verb: str | None = None
    resource: str | None = None
    name: str | None = None
    status: int | None = None
    delay_s: float = 0.0
    before: bool = False
    remaining: int | None = 1
    user: str = DEFAULT_USER
    body: bytes | None = None
    content_type: str = "application/json"
    hang: threading.Event | None = None

    def matches(self, rec: RequestRecord) -> bool:
        """Whether this rule applies to `rec` (and has uses left)."""
        if self.remaining is not None and self.remaining <= 0:
            return False
        return (
            (self.verb is None or self.verb == rec.verb)
            and (self.resource is None or self.resource == rec.resource)
            and (self.name is None or self.name == rec.name)
        )


@dataclass
class _Selector:
    """A parsed label selector (equality, inequality, existence, set-based)."""

    terms: list[tuple[str, str, frozenset[str]]] = field(default_factory=list)

    @classmethod
    def parse(cls, text: str) -> _Selector:
        terms: list[tuple[str, str, frozenset[str]]] = []
        for part in re.findall(r"[^,(]+(?:\([^)]*\))?", text or ""):
            part = part.strip().lstrip(",").strip()
            if not part:
                continue
            if m := re.match(r"^([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)$", part):
                values = frozenset(v.strip() for v in m.group(3).split(",") if v.strip())
                terms.append((m.group(1), m.group(2), values))
            elif "!=" in part:
                k, v = part.split("!=", 1)
                terms.append((k.strip(), "!=", frozenset([v.strip()])))
            elif "=" in part:
                k, v = re.split(r"==?", part, maxsplit=1)
                terms.append((k.strip(), "=", frozenset([v.strip()])))
            elif part.startswith("!"):
                terms.append((part[1:].strip(), "!exists", frozenset()))
            else:
                terms.append((part, "exists", frozenset()))
        return cls(terms)

    def matches(self, labels: dict[str, str]) -> bool:
        for key, op, values in self.terms:
            present = key in labels
            if op in ("=", "in") and (not present or labels[key] not in values):
                return False
            if op in ("!=", "notin") and present and labels[key] in values:
                return False
            if op == "exists" and not present:
                return False
            if op == "!exists" and present:
                return False
        return True


class FakeKubeApi:
    """The fake API server: state, hooks, faults and the request log. Thread-safe.

    Args:
        on_create: hooks called with (server, job) after a PyTorchJob is stored by a create request. A hook that
            raises turns the create into a 422 Invalid response and is recorded in `hook_errors`.
        on_delete: hooks called with (server, job) when a PyTorchJob is deleted.
        user: the user named in RBAC denials.
    """

    def __init__(
        self,
        on_create: list[JobHook] | None = None,
        on_delete: list[JobHook] | None = None,
        user: str = DEFAULT_USER,
    ) -> None:
        self.on_create: list[JobHook] = list(on_create or [])
        self.on_delete: list[JobHook] = list(on_delete or [])
        self.user = user
        self.hook_errors: list[str] = []
        self.requests: list[RequestRecord] = []
        self._jobs: dict[tuple[str, str], dict] = {}
        self._trainjobs: dict[tuple[str, str], dict] = {}
        self.served: set[str] = {PLURAL, TRAINJOBS}
        """The job plurals whose CRD this server says it serves in API discovery (tests remove one)."""
        self._pods: dict[tuple[str, str], dict] = {}
        self._events: dict[str, list[dict]] = {}
        self._faults: list[FaultRule] = []
        self._hangs: list[threading.Event] = []
        self._lock = threading.RLock()
        self._rv = 0
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> FakeKubeApi:
        """Listen on 127.0.0.1 at a free port and serve in a background thread.

        Returns:
            self, for chaining.
        """
        server = self

        class Handler(_Handler):
            api = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-kube-api", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving (held requests are let go first) and close the socket."""
        self.release()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FakeKubeApi:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def host(self) -> str:
        """The base URL (`http://127.0.0.1:PORT`)."""
        if self._httpd is None:
            raise RuntimeError("fake API server is not started")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def api_client(self) -> Any:
        """A `kubernetes.client.ApiClient` that talks to this server without authentication.

        Returns:
            A new ApiClient.
        """
        from kubernetes import client

        configuration = client.Configuration()
        configuration.host = self.host
        return client.ApiClient(configuration)

    # ------------------------------------------------------------------ state API
    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _store(self, plural: str) -> dict[tuple[str, str], dict]:
        return self._trainjobs if plural == TRAINJOBS else self._jobs

    def put_job(self, job: dict, plural: str = "") -> dict:
        """Store a job as-is (no hooks), filling server-set metadata that is missing.

        Args:
            job: the job; `metadata.name` and `metadata.namespace` are required.
            plural: `pytorchjobs` or `trainjobs`; by default from the job's `kind`.

        Returns:
            A copy of the stored job.
        """
        plural = plural or (TRAINJOBS if job.get("kind") == "TrainJob" else PLURAL)
        with self._lock:
            job = copy.deepcopy(job)
            meta = job.setdefault("metadata", {})
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", now_rfc3339())
            meta.setdefault("generation", 1)
            meta["resourceVersion"] = self._next_rv()
            self._store(plural)[(meta["namespace"], meta["name"])] = job
            return copy.deepcopy(job)

    def get_job(self, namespace: str, name: str, plural: str = PLURAL) -> dict | None:
        """A copy of the stored job (of kind `plural`), or None."""
        with self._lock:
            job = self._store(plural).get((namespace, name))
            return copy.deepcopy(job) if job is not None else None

    def jobs(self, plural: str = PLURAL) -> list[dict]:
        """Copies of all stored jobs of kind `plural`."""
        with self._lock:
            return [copy.deepcopy(j) for j in self._store(plural).values()]

    def set_job_status(self, namespace: str, name: str, status: dict, plural: str = PLURAL) -> None:
        """Replace a job's `status` (conditions, replicaStatuses, startTime, ...), as the operator would.

        Raises:
            KeyError: when the job does not exist.
        """
        with self._lock:
            job = self._store(plural)[(namespace, name)]
            job["status"] = copy.deepcopy(status)
            job["metadata"]["resourceVersion"] = self._next_rv()

    def remove_job(self, namespace: str, name: str, plural: str = PLURAL) -> bool:
        """Delete a job behind the client's back (no hooks, pods kept). Returns whether it existed."""
        with self._lock:
            return self._store(plural).pop((namespace, name), None) is not None

    def put_pod(self, pod: dict) -> dict:
        """Store or replace a pod (`metadata.name`, `metadata.namespace` required).

        Returns:
            A copy of the stored pod.
        """
        with self._lock:
            pod = copy.deepcopy(pod)
            meta = pod.setdefault("metadata", {})
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", now_rfc3339())
            meta["resourceVersion"] = self._next_rv()
            pod.setdefault("apiVersion", "v1")
            pod.setdefault("kind", "Pod")
            self._pods[(meta["namespace"], meta["name"])] = pod
            return copy.deepcopy(pod)

    def pods(self, namespace: str, selector: str = "") -> list[dict]:
        """Copies of the pods in `namespace` matching the label selector."""
        sel = _Selector.parse(selector)
        with self._lock:
            return [
                copy.deepcopy(p)
                for (ns, _), p in sorted(self._pods.items())
                if ns == namespace and sel.matches(p["metadata"].get("labels", {}))
            ]

    def remove_pod(self, namespace: str, name: str) -> bool:
        """Delete a pod. Returns whether it existed."""
        with self._lock:
            return self._pods.pop((namespace, name), None) is not None

    def add_event(self, namespace: str, event: dict) -> None:
        """Append a core/v1 Event to `namespace`."""
        with self._lock:
            self._events.setdefault(namespace, []).append(copy.deepcopy(event))

    # ------------------------------------------------------------------ faults
    def fail(
        self,
        status: int,
        times: int | None = 1,
        verb: str | None = None,
        resource: str | None = None,
        name: str | None = None,
    ) -> FaultRule:
        """The next `times` matching requests answer `status` (500 InternalError, 503 ServiceUnavailable, ...).

        Returns:
            The rule (its `remaining` counts down).
        """
        return self._add(FaultRule(verb=verb, resource=resource, name=name, status=status, remaining=times))

    def delay(
        self,
        seconds: float,
        times: int | None = 1,
        verb: str | None = None,
        resource: str | None = None,
        before: bool = False,
    ) -> FaultRule:
        """Slow down the next `times` matching requests by `seconds`.

        With `before=False` (default) the request is served first and the response is written late: a client that
        times out has still caused the change (the case that creates duplicate jobs in naive clients).

        Returns:
            The rule.
        """
        return self._add(FaultRule(verb=verb, resource=resource, delay_s=seconds, before=before, remaining=times))

    def forbid(self, verb: str, resource: str, times: int | None = None) -> FaultRule:
        """Deny `verb` on `resource` with the RBAC authorizer's 403 (forever by default).

        Returns:
            The rule.
        """
        return self._add(FaultRule(verb=verb, resource=resource, status=403, remaining=times, user=self.user))

    def hang(
        self, times: int | None = None, verb: str | None = None, resource: str | None = None, name: str | None = None
    ) -> FaultRule:
        """Hold matching requests unanswered (forever by default) until `release` is called: a hung API server.

        Returns:
            The rule.
        """
        event = threading.Event()
        self._hangs.append(event)
        return self._add(FaultRule(verb=verb, resource=resource, name=name, hang=event, remaining=times))

    def release(self) -> None:
        """Let every held request go on (each is then served or faulted as its other rules say)."""
        for event in self._hangs:
            event.set()

    def answer_raw(
        self,
        status: int,
        body: bytes,
        times: int | None = 1,
        verb: str | None = None,
        resource: str | None = None,
        content_type: str = "application/json",
    ) -> FaultRule:
        """Answer the next `times` matching requests with `status` and `body` as they are, without serving them:
        a proxy's HTML error page, a body echoing headers, JSON that is not the object asked for.

        Returns:
            The rule.
        """
        rule = FaultRule(verb=verb, resource=resource, status=status, body=body, content_type=content_type)
        rule.remaining = times
        return self._add(rule)

    def clear_faults(self) -> None:
        """Remove every fault rule (and let held requests go)."""
        self.release()
        with self._lock:
            self._faults.clear()

    def _add(self, rule: FaultRule) -> FaultRule:
        with self._lock:
            self._faults.append(rule)
        return rule

    def _take_faults(self, rec: RequestRecord) -> list[FaultRule]:
        with self._lock:
            taken = []
            for rule in self._faults:
                if rule.matches(rec):
                    if rule.remaining is not None:
                        rule.remaining -= 1
                    taken.append(rule)
            return taken

    # ------------------------------------------------------------------ request log
    def calls(
        self,
        verb: str | None = None,
        resource: str | None = None,
        name: str | None = None,
        status: int | None = None,
    ) -> list[RequestRecord]:
        """Requests received, filtered by verb, resource, name and answered status (None: any)."""
        with self._lock:
            return [
                r
                for r in self.requests
                if (verb is None or r.verb == verb)
                and (resource is None or r.resource == resource)
                and (name is None or r.name == name)
                and (status is None or r.status == status)
            ]

    def reset_log(self) -> None:
        """Forget the requests seen so far."""
        with self._lock:
            self.requests.clear()

    # ------------------------------------------------------------------ request handling
    def handle(self, rec: RequestRecord, body: dict | None) -> tuple[int, dict]:
        """Serve one request against the state (no faults applied here).

        Returns:
            (HTTP status, JSON body).
        """
        if rec.resource in JOB_KINDS:
            return self._handle_job(rec, body)
        if rec.resource == "discovery":
            return self._discovery(rec)
        if rec.resource == "pods":
            return self._handle_pods(rec)
        if rec.resource == "events":
            with self._lock:
                items = copy.deepcopy(self._events.get(rec.namespace, []))
            fs = dict(p.split("=", 1) for p in rec.query.get("fieldSelector", [""])[0].split(",") if "=" in p)
            items = [e for e in items if all(_dig(e, k) == v for k, v in fs.items())]
            return 200, {"kind": "EventList", "apiVersion": "v1", "metadata": {"resourceVersion": str(self._rv)},
                         "items": items}  # fmt: skip
        return 404, status_body(404, "NotFound", "the server could not find the requested resource", {})

    def _discovery(self, rec: RequestRecord) -> tuple[int, dict]:
        group_version = rec.name or ""
        for plural, (group, version, kind, _) in JOB_KINDS.items():
            if f"{group}/{version}" == group_version and plural in self.served:
                resource = {"name": plural, "singularName": kind.lower(), "namespaced": True, "kind": kind,
                            "verbs": ["create", "delete", "get", "list", "watch"]}  # fmt: skip
                return 200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
                             "resources": [resource]}  # fmt: skip
        return 404, status_body(404, "NotFound", "the server could not find the requested resource", {})

    def _not_found(self, rec: RequestRecord, group: str = GROUP) -> tuple[int, dict]:
        qualified = f"{rec.resource}.{group}" if group else rec.resource
        kind_details = {"name": rec.name, "group": group, "kind": rec.resource}
        return 404, status_body(404, "NotFound", f'{qualified} "{rec.name}" not found', kind_details)

    def _handle_job(self, rec: RequestRecord, body: dict | None) -> tuple[int, dict]:
        key = (rec.namespace, rec.name or "")
        plural = rec.resource
        group, version, kind, _ = JOB_KINDS[plural]
        store = self._store(plural)
        if rec.verb == "create":
            job = copy.deepcopy(body or {})
            meta = job.setdefault("metadata", {})
            name = meta.get("name", "")
            if meta.get("namespace", rec.namespace) != rec.namespace:
                msg = "the namespace of the provided object does not match the namespace sent on the request"
                return 400, status_body(400, "BadRequest", msg)
            meta["namespace"] = rec.namespace
            rec.name = name
            with self._lock:
                if (rec.namespace, name) in store:
                    details = {"name": name, "group": group, "kind": plural}
                    msg = f'{plural}.{group} "{name}" already exists'
                    return 409, status_body(409, "AlreadyExists", msg, details)
                for hook in self.on_create:
                    try:
                        hook(self, copy.deepcopy(job))
                    except Exception as e:  # noqa: BLE001 - a failing hook becomes the API's Invalid answer
                        self.hook_errors.append(f"{name}: {e}")
                        msg = f'{kind}.{group} "{name}" is invalid: {e}'
                        return 422, status_body(422, "Invalid", msg, {"name": name, "group": group, "kind": kind})
                stored = self.put_job(job, plural)
            return 201, stored
        if rec.verb == "get":
            job = self.get_job(*key, plural=plural)
            return (200, job) if job is not None else self._not_found(rec, group)
        if rec.verb == "list":
            with self._lock:
                items = [copy.deepcopy(j) for (ns, _), j in sorted(store.items()) if ns == rec.namespace]
                rv = str(self._rv)
            return 200, {"apiVersion": f"{group}/{version}", "kind": f"{kind}List", "items": items,
                         "metadata": {"resourceVersion": rv}}  # fmt: skip
        if rec.verb == "delete":
            return self._delete_job(rec, body)
        return 405, status_body(405, "MethodNotAllowed", f"the server does not allow this method on {plural}")

    def _delete_job(self, rec: RequestRecord, body: dict | None) -> tuple[int, dict]:
        policy = (body or {}).get("propagationPolicy") or rec.query.get("propagationPolicy", ["Background"])[0]
        group, _, _, pod_label = JOB_KINDS[rec.resource]
        with self._lock:
            job = self._store(rec.resource).pop((rec.namespace, rec.name or ""), None)
            if job is None:
                return self._not_found(rec, group)
            if policy != "Orphan":
                selector = _Selector.parse(f"{pod_label}={rec.name}")
                for key, pod in list(self._pods.items()):
                    if key[0] == rec.namespace and selector.matches(pod["metadata"].get("labels", {})):
                        del self._pods[key]
            hooks = list(self.on_delete)
        for hook in hooks:
            hook(self, copy.deepcopy(job))
        if policy == "Foreground":
            # The API server answers with the object marked for deletion; the garbage collector removes the
            # dependents and then the object (done at once here).
            job["metadata"]["deletionTimestamp"] = now_rfc3339()
            job["metadata"]["finalizers"] = ["foregroundDeletion"]
            return 200, job
        details = {"name": rec.name, "group": group, "kind": rec.resource, "uid": job["metadata"].get("uid")}
        return 200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}

    def _handle_pods(self, rec: RequestRecord) -> tuple[int, dict]:
        if rec.verb == "list":
            items = self.pods(rec.namespace, rec.query.get("labelSelector", [""])[0])
            return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": str(self._rv)},
                         "items": items}  # fmt: skip
        if rec.verb == "get":
            with self._lock:
                pod = copy.deepcopy(self._pods.get((rec.namespace, rec.name or "")))
            return (200, pod) if pod is not None else self._not_found(rec, group="")
        return 405, status_body(405, "MethodNotAllowed", "the server does not allow this method on pods")


def _dig(obj: dict, dotted: str) -> str | None:
    for part in dotted.split("."):
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)  # type: ignore[assignment]
    return obj if isinstance(obj, str) else None


_VERBS = {"POST": "create", "DELETE": "delete", "PUT": "update", "PATCH": "patch"}


class _Handler(BaseHTTPRequestHandler):
    """Parses the request, applies faults, serves through `FakeKubeApi.handle`, logs it."""

    api: FakeKubeApi
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body in separate segments would hit delayed-ACK stalls (40 ms)
    wbufsize = -1  # buffered: one write per response, flushed by the base class after each request

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature of the base class
        """Silence the default stderr access log."""

    def _serve(self) -> None:
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        m_jobs, m_core, m_train = _JOBS.match(url.path), _CORE.match(url.path), _TRAINJOBS.match(url.path)
        m_discovery = _DISCOVERY.match(url.path)
        if m_jobs:
            ns, name, resource, group = m_jobs["ns"], m_jobs["name"], PLURAL, GROUP
        elif m_train:
            ns, name, resource, group = m_train["ns"], m_train["name"], TRAINJOBS, JOB_KINDS[TRAINJOBS][0]
        elif m_discovery:
            ns, name, resource = "", f"{m_discovery['group']}/{m_discovery['version']}", "discovery"
            group = m_discovery["group"]
        elif m_core:
            ns, name, resource, group = m_core["ns"], m_core["name"], m_core["res"], ""
        else:
            ns, name, resource, group = "", None, "", ""
        verb = _VERBS.get(self.command) or ("get" if name else "list")
        rec = RequestRecord(self.command, url.path, parse_qs(url.query), verb, resource, ns, name, started=time.time())
        with self.api._lock:
            self.api.requests.append(rec)
        try:
            body = json.loads(raw) if raw else None
        except json.JSONDecodeError as e:
            self._reply(rec, 400, status_body(400, "BadRequest", f"invalid JSON body: {e.msg}"))
            return
        if rec.verb == "create" and isinstance(body, dict):
            rec.name = body.get("metadata", {}).get("name")
        faults = self.api._take_faults(rec)
        for rule in faults:
            if rule.hang is not None:
                rule.hang.wait(timeout=HANG_LIMIT_S)
            if rule.delay_s and rule.before:
                time.sleep(rule.delay_s)
        error = next((r for r in faults if r.status is not None), None)
        if error is not None and error.body is not None:
            self._reply_raw(rec, error.status or 500, error.body, error.content_type)
            return
        if error is not None:
            self._reply(rec, error.status, self._fault_body(rec, error, group))
            return
        code, payload = self.api.handle(rec, body)
        for rule in faults:
            if rule.delay_s and not rule.before:
                time.sleep(rule.delay_s)
        self._reply(rec, code, payload)

    def _fault_body(self, rec: RequestRecord, rule: FaultRule, group: str) -> dict:
        code = rule.status or 500
        if code == 403:
            name = None if rec.verb in ("create", "list") else rec.name
            msg = forbidden_message(rec.verb, rec.resource, group, rec.namespace, name, rule.user)
            return status_body(403, "Forbidden", msg, {"name": name or "", "group": group, "kind": rec.resource})
        if code == 503:
            return status_body(503, "ServiceUnavailable", "the server is currently unable to handle the request", {})
        if code == 429:
            return status_body(429, "TooManyRequests", "the server has received too many requests", {})
        if code == 413:  # the API server's answer to a body over --max-request-bytes
            return status_body(413, "RequestEntityTooLarge", "Request entity too large: limit is 3145728", {})
        msg = "Internal error occurred: injected fault"
        return status_body(code, "InternalError", msg, {"causes": [{"message": "injected fault"}]})

    def _reply(self, rec: RequestRecord, code: int, payload: dict) -> None:
        self._reply_raw(rec, code, json.dumps(payload).encode(), "application/json")

    def _reply_raw(self, rec: RequestRecord, code: int, data: bytes, content_type: str) -> None:
        rec.status = code
        rec.finished = time.time()
        try:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout); the request was still served

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _serve


def iter_pods_for_job(api: FakeKubeApi, namespace: str, name: str) -> Iterator[dict]:
    """The pods the training operator labels as belonging to job `name`."""
    yield from api.pods(namespace, f"training.kubeflow.org/job-name={name}")
