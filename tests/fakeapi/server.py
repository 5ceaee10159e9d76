"""A local HTTP server that answers like the Kubernetes API server for the calls our backend makes.

Covered: the jobs of every registered kind (`backend_plugin.kinds.DECLARED`: PyTorchJobs, TrainJobs, ...): create, get,
list, watch, delete with `propagationPolicy` and a uid precondition; API discovery of their groups (`GET
/apis/<group>/<version>`, only for the kinds in `served`); pods (list and watch with a label selector, get) and events
(list). LIST answers a `<Kind>List` with `metadata.resourceVersion`, honours `labelSelector` and pages with
`limit`/`continue`; WATCH (`?watch=true`) streams JSON lines of ADDED/MODIFIED/DELETED/BOOKMARK/ERROR events with
chunked transfer encoding from a bounded event history (an older `resourceVersion` gets an ERROR event with a 410
Expired Status, as from the API server's watch cache). Error responses carry the API server's `Status` bodies (NotFound,
AlreadyExists, Forbidden with the RBAC message, InternalError, ServiceUnavailable, Invalid).

A create is decoded as kube-apiserver decodes a custom resource (`tests/fakeapi/pruning.py`, from the installed
CRD's schema, by default the vendored one): with `fieldValidation=Strict` a field the schema does not declare is a
400 BadRequest `strict decoding error`; without it, the field is dropped and a `Warning` header names it. A
non-nullable `null` is then dropped (or defaulted where the schema has a `default`), Strict or not, missing fields
get their defaults, and a `null` list item is a 422 Invalid. Mutating
admission (`mutators`) may then change the job before the create hooks validate it and it is stored.

Tests drive it through a clean state API (`put_job`, `get_job`, `set_job_status`, `put_pod`, ...), hooks that run on
create and delete (the e2e harness's fake operator uses them to start replica processes), fault rules (`fail`,
`delay`, `forbid`, `hang` until `release`, `answer_raw` with any status and body, 413 among the statuses `fail`
knows), watch faults (`compact`, `expire_watches`, `drop_watches`, `drop_next_watches`) and a request log
(`calls(...)`) to count what the client really sent.
"""

from __future__ import annotations

import base64
import binascii
import collections
import copy
import datetime
import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from backend_plugin.kinds import DECLARED
from tests.fakeapi import pruning

GROUP = DECLARED[0].group
VERSION = DECLARED[0].version
PLURAL = DECLARED[0].plural
DEFAULT_USER = "system:serviceaccount:flyte:pytorch-connector"

JOB_KINDS = {d.plural: (d.group, d.version, d.kind, d.pod_label) for d in DECLARED}
"""plural -> (group, version, kind, the label naming a job's pods), for every registered kind."""

_PLURALS = {(d.api_version, d.kind): d.plural for d in DECLARED}
_JOB_PATH = re.compile(r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)/(?:namespaces/(?P<ns>[^/]+)/)?(?P<plural>[^/]+)"
                       r"(?:/(?P<name>[^/]+))?/?$")  # fmt: skip
"""A job kind's objects in a namespace, or (no `namespaces/<ns>/`) in every namespace: a cluster-wide LIST or WATCH."""
_DISCOVERY = re.compile(r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)/?$")
_CORE = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/(?P<res>pods|events)(?:/(?P<name>[^/]+))?/?$")
_CRD = re.compile(r"^/apis/apiextensions\.k8s\.io/v1/customresourcedefinitions(?:/(?P<name>[^/]+))?/?$")
CRD_GROUP, CRDS = "apiextensions.k8s.io", "customresourcedefinitions"
_CRD_NAMES = {f"{d.plural}.{d.group}": d.plural for d in DECLARED}

JobHook = Callable[["FakeKubeApi", dict], None]

HANG_LIMIT_S = 600.0
"""The longest a `hang` rule holds a request when nobody releases it (a forgotten rule must not hold a thread for
ever)."""


def now_rfc3339(offset_s: float = 0.0) -> str:
    """The current UTC time as the API server writes timestamps (RFC 3339, seconds, `Z`), on a clock `offset_s`
    ahead of ours (negative: behind)."""
    now = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=offset_s)
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


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
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    return f'{subject} is forbidden: User "{user}" cannot {verb} resource "{resource}" in API group "{group}" {scope}'


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
    warnings: list[str] = field(default_factory=list)
    """The `Warning` headers of the answer (a dropped unknown field each)."""
    propagation: str = ""
    """A job's delete: the propagation policy it asked for (its body's, else its query's, else `Background`)."""
    precondition_uid: str = ""
    """A job's delete: the uid its `preconditions` named ("" for none)."""


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
    headers: dict[str, str] = field(default_factory=dict)
    lose: bool = False
    """Serve the request, then close the connection without an answer: the change happened, the client never
    heard (a create whose response was lost)."""
    skip: int = 0
    """Matching requests let through before the rule applies (the second page of a LIST, not the first)."""

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


@dataclass
class _Change:
    """One entry of the watch history: an object as stored at resourceVersion `rv`."""

    rv: int
    resource: str
    namespace: str
    type: str
    obj: dict
    old_labels: dict | None
    """The labels before the change (None for ADDED): a watch with a label selector sees an object that leaves the
    selection as DELETED and one that enters it as ADDED."""
    at: float = field(default_factory=time.monotonic)
    """When the change happened (a lagging watch delivers it `FakeKubeApi.watch_lag_s` later)."""


@dataclass(eq=False)
class _OpenWatch:
    """A watch being served: its filter, position, end and injected faults."""

    resource: str
    namespace: str
    selector: _Selector
    bookmarks: bool
    rv: int
    deadline: float
    api_version: str
    kind: str
    drop_after: int | None = None
    sent: int = 0
    last_sent: float = field(default_factory=time.monotonic)
    drop: bool = False
    expire: bool = False
    stalled: bool = False
    injected: list[dict] = field(default_factory=list)

    def event_for(self, change: _Change) -> dict | None:
        """The event this watch sees for `change`, or None when it does not concern it."""
        if change.resource != self.resource or self.namespace and change.namespace != self.namespace:
            return None  # a watch of every namespace ("") sees every namespace's changes
        now_in = self.selector.matches(change.obj["metadata"].get("labels") or {})
        was_in = change.old_labels is not None and self.selector.matches(change.old_labels)
        etype = change.type
        if etype == "MODIFIED" and now_in != was_in:
            etype = "ADDED" if now_in else "DELETED"
        elif not now_in:
            return None
        return {"type": etype, "object": copy.deepcopy(change.obj)}


def _param(rec: RequestRecord, name: str) -> str:
    return rec.query.get(name, [""])[0]


def _job_path(path: str) -> re.Match | None:
    """The URL of a registered kind's jobs (`/apis/<group>/<version>/namespaces/<ns>/<plural>[/<name>]`), or None."""
    m = _JOB_PATH.match(path)
    if m is None or m["plural"] not in JOB_KINDS:
        return None
    group, version, _, _ = JOB_KINDS[m["plural"]]
    return m if (m["group"], m["version"]) == (group, version) else None


def _api_version_kind(resource: str) -> tuple[str, str]:
    if resource in JOB_KINDS:
        group, version, kind, _ = JOB_KINDS[resource]
        return f"{group}/{version}", kind
    return "v1", "Pod"


class FakeKubeApi:
    """The fake API server: state, hooks, faults and the request log. Thread-safe.

    Args:
        on_create: hooks called with (server, job) after a PyTorchJob is stored by a create request. A hook that
            raises turns the create into a 422 Invalid response and is recorded in `hook_errors`.
        on_delete: hooks called with (server, job) when a PyTorchJob is deleted.
        user: the user named in RBAC denials.
        history_limit: how many changes the watch history keeps; a watch or continue token from a resourceVersion
            older than the oldest kept change is answered 410 Expired (the API server's watch cache window).
    """

    def __init__(
        self,
        on_create: list[JobHook] | None = None,
        on_delete: list[JobHook] | None = None,
        user: str = DEFAULT_USER,
        history_limit: int = 1000,
    ) -> None:
        self.on_create: list[JobHook] = list(on_create or [])
        self.on_delete: list[JobHook] = list(on_delete or [])
        self.user = user
        self.hook_errors: list[str] = []
        self.mutators: list[JobHook] = []
        """Mutating admission: called with each created job (after pruning, before the create hooks and storage);
        it may change the job in place, as a queue manager's or the operator's webhook does."""
        self.crd_schemas: dict[str, dict] = {}
        """The installed CRDs' `openAPIV3Schema` by plural; the vendored one when absent (tests install another to
        model a cluster whose CRD declares less; `install_crd` sets it from a whole CRD)."""
        self.crds: dict[str, dict] = {}
        """The installed CustomResourceDefinitions by plural, as `GET customresourcedefinitions/<name>` answers them
        (`install_crd`); absent: the vendored CRD, with `crd_schemas`' schema when set."""
        self.requests: list[RequestRecord] = []
        self._jobs: dict[str, dict[tuple[str, str], dict]] = {plural: {} for plural in JOB_KINDS}
        self.served: set[str] = set(JOB_KINDS)
        """The job plurals whose CRD this server says it serves in API discovery (tests remove one)."""
        self._pods: dict[tuple[str, str], dict] = {}
        self._events: dict[str, list[dict]] = {}
        self._faults: list[FaultRule] = []
        self._hangs: list[threading.Event] = []
        self._lock = threading.RLock()
        self._rv = 0
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._changed = threading.Condition(self._lock)
        self._history: collections.deque[_Change] = collections.deque(maxlen=history_limit)
        self._expired_rv = 0
        """Watches and continue tokens from a resourceVersion below this one are too old (410 Expired)."""
        self._watches: list[_OpenWatch] = []
        self._drop_plans: list[tuple[int, list[int | None]]] = []
        self._stopping = False
        self.bookmark_interval_s = 1.0
        """How often an idle watch with `allowWatchBookmarks=true` gets a BOOKMARK (the API server: about 1 min)."""
        self.watch_timeout_s = 1800.0
        """How long a watch without `timeoutSeconds` is served (the API server: 30 to 60 min, randomised)."""
        self.watch_lag_s = 0.0
        """How long after a change the watches deliver it (an API server's watch cache behind etcd)."""
        self.clock_offset_s = 0.0
        """How far this server's clock is ahead of the machine's (negative: behind): its `Date` header and the
        timestamps it writes (`creationTimestamp`, `deletionTimestamp`)."""
        self.stall_new_watches = False
        """Whether watches opened from now on stall at once (see `stall_watches`)."""

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> FakeKubeApi:
        """Listen on 127.0.0.1 at a free port and serve in a background thread.

        Returns:
            self, for chaining.
        """
        server = self

        class Handler(_Handler):
            api = server

        self._httpd = _Listener(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-kube-api", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving (held requests are let go first), end the open watches and close the socket."""
        self.release()
        with self._lock:
            self._stopping = True
            self._changed.notify_all()
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
        return self._jobs[plural]

    def put_job(self, job: dict, plural: str = "") -> dict:
        """Store a job as-is (no hooks), filling server-set metadata that is missing.

        Args:
            job: the job; `metadata.name` and `metadata.namespace` are required.
            plural: a registered kind's plural; by default from the job's `apiVersion` and `kind`.

        Returns:
            A copy of the stored job.
        """
        plural = plural or _PLURALS.get((job.get("apiVersion"), job.get("kind")), PLURAL)
        with self._lock:
            job = copy.deepcopy(job)
            meta = job.setdefault("metadata", {})
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", now_rfc3339(self.clock_offset_s))
            meta.setdefault("generation", 1)
            meta["resourceVersion"] = self._next_rv()
            key = (meta["namespace"], meta["name"])
            old = self._store(plural).get(key)
            self._store(plural)[key] = job
            self._record(plural, "MODIFIED" if old is not None else "ADDED", job, old)
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
            self._record(plural, "MODIFIED", job, job)

    def remove_job(self, namespace: str, name: str, plural: str = PLURAL) -> bool:
        """Delete a job behind the client's back (no hooks, pods kept). Returns whether it existed."""
        with self._lock:
            job = self._store(plural).pop((namespace, name), None)
            if job is not None:
                self._record_deleted(plural, job)
            return job is not None

    def put_pod(self, pod: dict) -> dict:
        """Store or replace a pod (`metadata.name`, `metadata.namespace` required).

        Returns:
            A copy of the stored pod.
        """
        with self._lock:
            pod = copy.deepcopy(pod)
            meta = pod.setdefault("metadata", {})
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", now_rfc3339(self.clock_offset_s))
            meta["resourceVersion"] = self._next_rv()
            pod.setdefault("apiVersion", "v1")
            pod.setdefault("kind", "Pod")
            key = (meta["namespace"], meta["name"])
            old = self._pods.get(key)
            self._pods[key] = pod
            self._record("pods", "MODIFIED" if old is not None else "ADDED", pod, old)
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
            pod = self._pods.pop((namespace, name), None)
            if pod is not None:
                self._record_deleted("pods", pod)
            return pod is not None

    def add_event(self, namespace: str, event: dict) -> None:
        """Append a core/v1 Event to `namespace`."""
        with self._lock:
            self._events.setdefault(namespace, []).append(copy.deepcopy(event))

    def install_crd(self, crd: dict) -> dict:
        """Install (or replace: an upgrade) a registered kind's CustomResourceDefinition, as `kubectl apply` of a
        release's manifest does: the CRD read answers it, and creates are decoded by the schema of the version the
        backend writes (a CRD that does not serve that version answers them 404, as the API server does).

        Args:
            crd: the CRD (an upstream manifest).

        Returns:
            The CRD as stored (with its resourceVersion and generation).

        Raises:
            KeyError: it is not the CRD of a registered kind.
        """
        plural = _CRD_NAMES[f"{crd['spec']['names']['plural']}.{crd['spec']['group']}"]
        version = JOB_KINDS[plural][1]
        with self._lock:
            stored = copy.deepcopy(crd)
            meta = stored.setdefault("metadata", {})
            old = self.crds.get(plural)
            meta["uid"] = (old or {}).get("metadata", {}).get("uid") or str(uuid.uuid4())
            meta["generation"] = (old or {}).get("metadata", {}).get("generation", 0) + 1
            meta["resourceVersion"] = self._next_rv()
            self.crds[plural] = stored
            served = [v for v in stored["spec"]["versions"] if v.get("served") and v["name"] == version]
            self.crd_schemas[plural] = served[0]["schema"]["openAPIV3Schema"] if served else {}
            return copy.deepcopy(stored)

    def crd_object(self, plural: str) -> dict:
        """The CRD the server answers for `plural`: the installed one, else the vendored one (its schema replaced
        by `crd_schemas[plural]` when a test set it)."""
        with self._lock:
            if plural in self.crds:
                return copy.deepcopy(self.crds[plural])
            crd = pruning.vendored_crd(plural)
            if plural in self.crd_schemas:
                version = JOB_KINDS[plural][1]
                for v in crd["spec"]["versions"]:
                    if v["name"] == version:
                        v["schema"]["openAPIV3Schema"] = copy.deepcopy(self.crd_schemas[plural])
            crd["metadata"].update({"resourceVersion": "1", "generation": 1})
            return crd

    # ------------------------------------------------------------------ watch history and watch faults
    def _record(self, resource: str, etype: str, obj: dict, old: dict | None) -> None:
        """Append one change (the object as stored at its new resourceVersion) and wake the open watches."""
        old_labels = None if old is None else dict(old["metadata"].get("labels") or {})
        meta = obj["metadata"]
        rv = int(meta["resourceVersion"])
        change = _Change(rv, resource, meta["namespace"], etype, copy.deepcopy(obj), old_labels)
        if len(self._history) == self._history.maxlen:
            self._expired_rv = max(self._expired_rv, self._history[0].rv)
        self._history.append(change)
        self._changed.notify_all()

    def _record_deleted(self, resource: str, obj: dict) -> dict:
        """Record the deletion of `obj` (already removed from its store) at a new resourceVersion.

        Returns:
            The object as the DELETED event carries it (its last state, with the deletion's resourceVersion).
        """
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = self._next_rv()
        self._record(resource, "DELETED", obj, obj)
        return obj

    @property
    def resource_version(self) -> str:
        """The server's current resourceVersion (that of the latest change)."""
        with self._lock:
            return str(self._rv)

    def compact(self) -> str:
        """Forget the whole change history, as etcd compaction does: any watch or continue token from an older
        resourceVersion is answered 410 Expired from now on. Open watches are left running.

        Returns:
            The current resourceVersion, the oldest one still accepted.
        """
        with self._lock:
            self._history.clear()
            self._expired_rv = self._rv
            return str(self._rv)

    def expire_watches(self, resource: str | None = None) -> int:
        """Compact the history and end every open watch (of `resource`, None: any) with an ERROR event carrying a
        410 Expired Status, as the API server does to a watcher whose resourceVersion fell out of its cache.

        Returns:
            How many open watches were ended.
        """
        with self._lock:
            self.compact()
            hit = [w for w in self._watches if resource is None or w.resource == resource]
            for w in hit:
                w.expire = True
            self._changed.notify_all()
            return len(hit)

    def drop_watches(self, resource: str | None = None) -> int:
        """Cut the connection of every open watch (of `resource`, None: any) mid-stream, without the final chunk,
        as a load balancer or an API server restart does.

        Returns:
            How many open watches were cut.
        """
        with self._lock:
            hit = [w for w in self._watches if resource is None or w.resource == resource]
            for w in hit:
                w.drop = True
            self._changed.notify_all()
            return len(hit)

    def drop_next_watches(self, after_events: int, times: int = 1, resource: str | None = None) -> None:
        """Cut each of the next `times` watches (of `resource`, None: any) after it has sent `after_events` events.

        Args:
            after_events: events (including BOOKMARKs) written before the connection is cut; 0 cuts it at once.
            times: how many watch requests this applies to.
            resource: the plural (`pytorchjobs`, `trainjobs`, `pods`); None: any.

        Raises:
            ValueError: when `after_events` is negative or `times` is below 1.
        """
        if after_events < 0 or times < 1:
            raise ValueError(f"after_events={after_events} must be >= 0 and times={times} >= 1")
        with self._lock:
            self._drop_plans.append((after_events, [resource] * times))

    def stall_watches(self, resource: str | None = None, new: bool = False) -> int:
        """Stop every open watch (of `resource`, None: any) from delivering anything, events and BOOKMARKs alike,
        while its connection stays open: a half-open connection (a NAT or load balancer that forgot it), or a proxy
        that buffers. The watch never ends on its own; `unstall_watches` lets it go on.

        Args:
            resource: the plural; None: any.
            new: whether watches opened from now on stall too (a proxy that stalls every watch).

        Returns:
            How many open watches were stalled.
        """
        with self._lock:
            hit = [w for w in self._watches if resource is None or w.resource == resource]
            for w in hit:
                w.stalled = True
            self.stall_new_watches = new
            self._changed.notify_all()
            return len(hit)

    def unstall_watches(self) -> None:
        """Let stalled watches deliver again, and new ones not stall."""
        with self._lock:
            self.stall_new_watches = False
            for w in self._watches:
                w.stalled = False
            self._changed.notify_all()

    def inject_watch_event(self, event: dict, resource: str | None = None) -> int:
        """Send `event` as it is on every open watch (of `resource`, None: any), whatever its namespace, labels or
        resourceVersion: what a buggy proxy, a replaying cache or a misrouted stream would deliver.

        Args:
            event: the line's JSON (`{"type": ..., "object": ...}`, or anything else).
            resource: the plural; None: any.

        Returns:
            How many watches will send it.
        """
        with self._lock:
            hit = [w for w in self._watches if resource is None or w.resource == resource]
            for w in hit:
                w.injected.append(copy.deepcopy(event))
            self._changed.notify_all()
            return len(hit)

    def open_watches(self, resource: str | None = None) -> int:
        """How many watches (of `resource`, None: any) are being served now."""
        with self._lock:
            return sum(1 for w in self._watches if resource is None or w.resource == resource)

    # ------------------------------------------------------------------ list and watch
    def _collection(self, resource: str) -> dict[tuple[str, str], dict]:
        return self._pods if resource == "pods" else self._store(resource)

    def _list(self, rec: RequestRecord, store: dict[tuple[str, str], dict], api_version: str, list_kind: str
              ) -> tuple[int, dict]:  # fmt: skip
        """Serve LIST (of one namespace, or of every namespace when the request names none): label selector,
        `resourceVersion` (not older than), `limit` and `continue` pages."""
        selector = _Selector.parse(_param(rec, "labelSelector"))
        try:
            limit = int(_param(rec, "limit") or 0)
            requested_rv = int(_param(rec, "resourceVersion") or 0)
        except ValueError as e:
            return 400, status_body(400, "BadRequest", f"invalid list parameter: {e}")
        token = _param(rec, "continue")
        with self._lock:
            if requested_rv > self._rv:
                msg = f"Too large resource version: {requested_rv}, current: {self._rv}"
                return 504, status_body(504, "Timeout", msg, {"causes": [{"reason": "ResourceVersionTooLarge",
                                                                          "message": "Too large resource version"}],
                                                              "retryAfterSeconds": 1})  # fmt: skip
            snapshot_rv, after = self._rv, ("", "")
            if token:
                try:
                    decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
                    snapshot_rv, after = int(decoded["rv"]), (str(decoded["start"][0]), str(decoded["start"][1]))
                except (ValueError, KeyError, TypeError, binascii.Error):
                    return 400, status_body(400, "BadRequest", f"continue key is not valid: {token!r}")
                if snapshot_rv < self._expired_rv:
                    msg = ("The provided continue parameter is too old to display a consistent list result. You can "
                           "start a new list without the continue parameter.")  # fmt: skip
                    return 410, status_body(410, "Expired", msg)
            names = sorted(
                (ns, name)
                for (ns, name), obj in store.items()
                if (not rec.namespace or ns == rec.namespace)
                and (ns, name) > after
                and selector.matches(obj["metadata"].get("labels") or {})
            )
            page = names[:limit] if limit > 0 else names
            items = [copy.deepcopy(store[key]) for key in page]
        metadata: dict[str, Any] = {"resourceVersion": str(snapshot_rv)}
        if len(page) < len(names):
            next_token = json.dumps({"rv": snapshot_rv, "start": list(page[-1])}).encode()
            metadata["continue"] = base64.urlsafe_b64encode(next_token).decode()
            metadata["remainingItemCount"] = len(names) - len(page)
        return 200, {"kind": list_kind, "apiVersion": api_version, "metadata": metadata, "items": items}

    def _open_watch(self, rec: RequestRecord) -> tuple[_OpenWatch, list[dict]] | dict:
        """Register a watch; returns it with its initial events, or the ERROR event that ends it at once."""
        resource = rec.resource
        api_version, kind = _api_version_kind(resource)
        try:
            start = _param(rec, "resourceVersion")
            start_rv = int(start) if start not in ("", "0") else None
            timeout = float(_param(rec, "timeoutSeconds") or self.watch_timeout_s)
        except ValueError as e:
            return {"type": "ERROR", "object": status_body(400, "BadRequest", f"invalid watch parameter: {e}")}
        selector = _Selector.parse(_param(rec, "labelSelector"))
        bookmarks = _param(rec, "allowWatchBookmarks") in ("true", "1")
        with self._lock:
            initial: list[dict] = []
            if start_rv is None:
                # No resourceVersion (or "0"): synthetic ADDED events for the current state, then the changes.
                start_rv = self._rv
                for (ns, _), obj in sorted(self._collection(resource).items()):
                    in_scope = not rec.namespace or ns == rec.namespace
                    if in_scope and selector.matches(obj["metadata"].get("labels") or {}):
                        initial.append({"type": "ADDED", "object": copy.deepcopy(obj)})
            elif start_rv < self._expired_rv:
                msg = f"too old resource version: {start_rv} ({self._expired_rv})"
                return {"type": "ERROR", "object": status_body(410, "Expired", msg)}
            drop_after = None
            for after, remaining in self._drop_plans:
                if remaining and remaining[0] in (None, resource):
                    remaining.pop(0)
                    drop_after = after
                    break
            watch = _OpenWatch(resource, rec.namespace, selector, bookmarks, start_rv, time.monotonic() + timeout,
                               api_version, kind, drop_after, stalled=self.stall_new_watches)  # fmt: skip
            self._watches.append(watch)
        return watch, initial

    def _next_events(self, watch: _OpenWatch) -> tuple[list[dict], str]:
        """Block until `watch` has something to send. Returns (events, how the watch ends now: "" to go on,
        "end", "drop")."""
        with self._lock:
            while True:
                if watch.drop:
                    return [], "drop"
                if self._stopping:
                    return [], "end"
                if watch.stalled:
                    self._changed.wait(1.0)
                    continue
                if watch.injected:
                    injected, watch.injected = watch.injected, []
                    return injected, ""
                if watch.expire or watch.rv < self._expired_rv:
                    msg = f"too old resource version: {watch.rv} ({self._expired_rv})"
                    return [{"type": "ERROR", "object": status_body(410, "Expired", msg)}], "end"
                events = []
                now = time.monotonic()
                lagging: _Change | None = None
                for change in self._history:
                    if change.rv <= watch.rv:
                        continue
                    if now - change.at < self.watch_lag_s:
                        lagging = change
                        break
                    event = watch.event_for(change)
                    watch.rv = change.rv
                    if event is not None:
                        events.append(event)
                if lagging is None:
                    watch.rv = max(watch.rv, self._rv)
                if events:
                    return events, ""
                if now >= watch.deadline:
                    return [], "end"
                if watch.bookmarks and now - watch.last_sent >= self.bookmark_interval_s:
                    meta = {"resourceVersion": str(watch.rv)}
                    bookmark = {"kind": watch.kind, "apiVersion": watch.api_version, "metadata": meta}
                    return [{"type": "BOOKMARK", "object": bookmark}], ""
                wake = watch.deadline
                if watch.bookmarks:
                    wake = min(wake, watch.last_sent + self.bookmark_interval_s)
                if lagging is not None:
                    wake = min(wake, lagging.at + self.watch_lag_s)
                self._changed.wait(max(0.0, wake - now))

    def _close_watch(self, watch: _OpenWatch) -> None:
        with self._lock:
            if watch in self._watches:
                self._watches.remove(watch)

    # ------------------------------------------------------------------ faults
    def fail(
        self,
        status: int,
        times: int | None = 1,
        verb: str | None = None,
        resource: str | None = None,
        name: str | None = None,
        retry_after: str | None = None,
    ) -> FaultRule:
        """The next `times` matching requests answer `status` (500 InternalError, 503 ServiceUnavailable, ...).

        Args:
            status: the HTTP status.
            times: how many requests (None: all).
            verb, resource, name: which requests (None: any).
            retry_after: the `Retry-After` header to send with it (the API server's priority and fairness sends one
                with a 429), None: none.

        Returns:
            The rule (its `remaining` counts down).
        """
        headers = {"Retry-After": retry_after} if retry_after is not None else {}
        return self._add(FaultRule(verb=verb, resource=resource, name=name, status=status, remaining=times,
                                   headers=headers))  # fmt: skip

    def delay(
        self,
        seconds: float,
        times: int | None = 1,
        verb: str | None = None,
        resource: str | None = None,
        before: bool = False,
        skip: int = 0,
    ) -> FaultRule:
        """Slow down the next `times` matching requests by `seconds`, after letting `skip` of them through.

        With `before=False` (default) the request is served first and the response is written late: a client that
        times out has still caused the change (the case that creates duplicate jobs in naive clients).

        Returns:
            The rule.
        """
        return self._add(FaultRule(verb=verb, resource=resource, delay_s=seconds, before=before, remaining=times,
                                   skip=skip))  # fmt: skip

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

    def lose_response(self, times: int | None = 1, verb: str | None = None, resource: str | None = None) -> FaultRule:
        """Serve the next `times` matching requests, then close their connections unanswered: the create happened,
        the client sees the connection end and never learns it.

        Returns:
            The rule.
        """
        return self._add(FaultRule(verb=verb, resource=resource, lose=True, remaining=times))

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
                    if rule.skip > 0:
                        rule.skip -= 1
                        continue
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
        if rec.resource == CRDS:
            return self._handle_crd(rec)
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

    def _handle_crd(self, rec: RequestRecord) -> tuple[int, dict]:
        """GET a registered kind's CustomResourceDefinition (cluster-scoped); 404 for another name, or a kind whose
        CRD is not served."""
        plural = _CRD_NAMES.get(rec.name or "")
        if rec.verb != "get":
            return 405, status_body(405, "MethodNotAllowed", f"the server does not allow this method on {CRDS}")
        if plural is None or plural not in self.served:
            details = {"name": rec.name, "group": CRD_GROUP, "kind": CRDS}
            return 404, status_body(404, "NotFound", f'{CRDS}.{CRD_GROUP} "{rec.name}" not found', details)
        return 200, self.crd_object(plural)

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
            if self.crd_schemas.get(plural) == {}:  # the installed CRD does not serve this version
                return 404, status_body(404, "NotFound", "the server could not find the requested resource", {})
            schema = self.crd_schemas.get(plural) or pruning.crd_schema(plural)
            job, unknown = pruning.prune(job, schema)
            if unknown and rec.query.get("fieldValidation", [""])[0] == "Strict":
                return 400, status_body(400, "BadRequest", pruning.strict_message(kind, version, unknown))
            if rec.query.get("fieldValidation", [""])[0] != "Ignore":
                rec.warnings.extend(pruning.warning_header(path) for path in unknown)
            pruning.drop_nulls(job, schema)
            pruning.apply_defaults(job, schema)
            nulls = pruning.null_items(job, schema)
            if nulls:
                details = {"name": name, "group": group, "kind": kind}
                return 422, status_body(422, "Invalid", pruning.invalid_message(kind, group, name, nulls), details)
            with self._lock:
                for mutate in self.mutators:
                    mutate(self, job)
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
            return self._list(rec, store, f"{group}/{version}", f"{kind}List")
        if rec.verb == "delete":
            return self._delete_job(rec, body)
        return 405, status_body(405, "MethodNotAllowed", f"the server does not allow this method on {plural}")

    def _delete_job(self, rec: RequestRecord, body: dict | None) -> tuple[int, dict]:
        policy = (body or {}).get("propagationPolicy") or rec.query.get("propagationPolicy", ["Background"])[0]
        rec.propagation = policy
        group, _, _, pod_label = JOB_KINDS[rec.resource]
        with self._lock:
            job = self._store(rec.resource).get((rec.namespace, rec.name or ""))
            if job is None:
                return self._not_found(rec, group)
            wanted = ((body or {}).get("preconditions") or {}).get("uid")
            rec.precondition_uid = wanted or ""
            if wanted and wanted != job["metadata"].get("uid"):
                # the API server's answer to a precondition that fails (apiserver's registry, `Delete`)
                message = (
                    f'Operation cannot be fulfilled on {rec.resource}.{group} "{rec.name}": Precondition '
                    f"failed: UID in precondition: {wanted}, UID in object meta: {job['metadata'].get('uid')}"
                )
                details = {"name": rec.name, "group": group, "kind": rec.resource}
                return 409, status_body(409, "Conflict", message, details)
            self._store(rec.resource).pop((rec.namespace, rec.name or ""))
            if policy != "Orphan":
                selector = _Selector.parse(f"{pod_label}={rec.name}")
                for key, pod in list(self._pods.items()):
                    if key[0] == rec.namespace and selector.matches(pod["metadata"].get("labels", {})):
                        del self._pods[key]
                        self._record_deleted("pods", pod)
            job = self._record_deleted(rec.resource, job)
            hooks = list(self.on_delete)
        for hook in hooks:
            hook(self, copy.deepcopy(job))
        if policy == "Foreground":
            # The API server answers with the object marked for deletion; the garbage collector removes the
            # dependents and then the object (done at once here).
            job["metadata"]["deletionTimestamp"] = now_rfc3339(self.clock_offset_s)
            job["metadata"]["finalizers"] = ["foregroundDeletion"]
            return 200, job
        details = {"name": rec.name, "group": group, "kind": rec.resource, "uid": job["metadata"].get("uid")}
        return 200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}

    def _handle_pods(self, rec: RequestRecord) -> tuple[int, dict]:
        if rec.verb == "list":
            return self._list(rec, self._pods, "v1", "PodList")
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


class _Listener(ThreadingHTTPServer):
    """The HTTP server with a listen backlog like a real API server's: socketserver's default of 5 drops the SYNs of
    a burst of new connections (a client whose connection pool is smaller than its concurrency opens many), and
    each dropped SYN costs the client a 1 s retransmission."""

    request_queue_size = 1024


class _Handler(BaseHTTPRequestHandler):
    """Parses the request, applies faults, serves through `FakeKubeApi.handle`, logs it."""

    api: FakeKubeApi
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body in separate segments would hit delayed-ACK stalls (40 ms)
    wbufsize = -1  # buffered: one write per response, flushed by the base class after each request

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature of the base class
        """Silence the default stderr access log."""

    def date_time_string(self, timestamp: float | None = None) -> str:
        """The `Date` header, on the server's clock (`FakeKubeApi.clock_offset_s`)."""
        return super().date_time_string(time.time() + self.api.clock_offset_s if timestamp is None else timestamp)

    def _serve(self) -> None:
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        m_jobs, m_core = _job_path(url.path), _CORE.match(url.path)
        m_discovery = _DISCOVERY.match(url.path)
        m_crd = _CRD.match(url.path)
        if m_crd:
            ns, name, resource, group = "", m_crd["name"], CRDS, CRD_GROUP
        elif m_jobs:
            ns, name, resource, group = m_jobs["ns"] or "", m_jobs["name"], m_jobs["plural"], m_jobs["group"]
        elif m_discovery:
            ns, name, resource = "", f"{m_discovery['group']}/{m_discovery['version']}", "discovery"
            group = m_discovery["group"]
        elif m_core:
            ns, name, resource, group = m_core["ns"], m_core["name"], m_core["res"], ""
        else:
            ns, name, resource, group = "", None, "", ""
        query = parse_qs(url.query)
        verb = _VERBS.get(self.command) or ("get" if name else "list")
        if verb == "list" and query.get("watch", [""])[0] in ("true", "1") and resource != "discovery":
            verb = "watch"
        rec = RequestRecord(self.command, url.path, query, verb, resource, ns, name, started=time.time())
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
            self._reply_raw(rec, error.status or 500, error.body, error.content_type, error.headers)
            return
        if error is not None:
            data = json.dumps(self._fault_body(rec, error, group)).encode()
            self._reply_raw(rec, error.status or 500, data, "application/json", error.headers)
            return
        if rec.verb == "watch" and (rec.resource in JOB_KINDS or rec.resource == "pods"):
            self._stream_watch(rec)
            return
        code, payload = self.api.handle(rec, body)
        for rule in faults:
            if rule.delay_s and not rule.before:
                time.sleep(rule.delay_s)
        if any(rule.lose for rule in faults):
            rec.status = code
            self._cut(rec)
            return
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

    def _reply_raw(self, rec: RequestRecord, code: int, data: bytes, content_type: str,
                   headers: dict[str, str] | None = None) -> None:  # fmt: skip
        rec.status = code
        rec.finished = time.time()
        try:
            self.send_response(code)
            for warning in rec.warnings:
                self.send_header("Warning", warning)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout); the request was still served

    def _stream_watch(self, rec: RequestRecord) -> None:
        """Serve a WATCH: status 200, then one JSON line per event in its own chunk until the watch ends."""
        opened = self.api._open_watch(rec)
        rec.status = 200
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            self.wfile.flush()  # the API server sends a watch's headers at once, before any event
        except OSError:
            return
        if isinstance(opened, dict):
            self._write_events(rec, [opened])
            self._end_chunks(rec)
            return
        watch, events = opened
        how = ""
        try:
            while True:
                if watch.drop_after is not None and watch.sent + len(events) > watch.drop_after:
                    events, how = events[: watch.drop_after - watch.sent], "drop"
                if events and not self._write_events(rec, events):
                    return  # the client went away
                watch.sent += len(events)
                watch.last_sent = time.monotonic()
                if how == "drop":
                    self._cut(rec)
                    return
                if how == "end":
                    self._end_chunks(rec)
                    return
                events, how = self.api._next_events(watch)
        finally:
            self.api._close_watch(watch)

    def _write_events(self, rec: RequestRecord, events: list[dict]) -> bool:
        try:
            for event in events:
                line = json.dumps(event).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            self.wfile.flush()
            return True
        except (BrokenPipeError, ConnectionResetError, OSError):
            rec.finished = time.time()
            self.close_connection = True
            return False

    def _end_chunks(self, rec: RequestRecord) -> None:
        rec.finished = time.time()
        try:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True

    def _cut(self, rec: RequestRecord) -> None:
        """Close the connection mid-stream: no final chunk, the client sees the response end prematurely."""
        self.close_connection = True
        rec.finished = time.time()
        try:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _serve


def iter_pods_for_job(api: FakeKubeApi, namespace: str, name: str) -> Iterator[dict]:
    """The pods the training operator labels as belonging to job `name`."""
    yield from api.pods(namespace, f"training.kubeflow.org/job-name={name}")
