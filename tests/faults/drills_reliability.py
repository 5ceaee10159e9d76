"""Reliability drills: the connector's time to answer under a hung, a refusing and a failing API, per call.

`measure(call, fault, config)` runs one connector call (create, get or delete) against a fake API server that hangs
every request, a closed port (connection refused), or a server answering 500 forever, and returns how long the call
took to answer (with an error) and how many requests reached the server. The fast tests use short budgets; the
faults tier and `benchmarks/fault_report.py` use the shipped defaults, against propeller's deadlines.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from backend_plugin.config import BackendConfig
from backend_plugin.connector import JobConnector, JobMetadata
from backend_plugin.errors import KubeApiError
from tests.connector.helpers import execution_metadata, load_template
from tests.fakeapi.fixtures import running_fake_api

NS = "flytesnacks-development"
CALLS = ("get", "create", "delete")
FAULTS = ("hung", "refused", "500 forever")
PROPELLER_DEADLINE_S = {"get": 30.0, "create": 30.0, "delete": 30.0}
"""`deploy/propeller-config.yaml`: `defaultTimeout` 30 s for every call (propeller v1.16 applies no per-call value)."""


@contextlib.contextmanager
def closed_port_client() -> Iterator[Any]:
    """A kubernetes ApiClient pointed at a loopback port nothing listens on (every connect is refused)."""
    from kubernetes import client

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{port}"
    api_client = client.ApiClient(configuration)
    try:
        yield api_client
    finally:
        api_client.close()


@contextlib.contextmanager
def faulty_api(fault: str) -> Iterator[tuple[Any, Any]]:
    """(server or None, ApiClient) for one fault: `hung`, `refused` or `500 forever`."""
    if fault == "refused":
        with closed_port_client() as api_client:
            yield None, api_client
        return
    with running_fake_api(validate=False) as (server, api_client):
        if fault == "hung":
            server.hang()
        else:
            server.fail(500, times=None)
        yield server, api_client


def connector_for(api_client: Any, config: BackendConfig) -> JobConnector:
    """A connector over `api_client` with `config` and the real clock and sleep."""
    return JobConnector(config=config, api_client_factory=lambda: api_client)


def measure(call: str, fault: str, config: BackendConfig) -> dict[str, Any]:
    """Run one `call` under one `fault` and time it.

    Returns:
        `{call, fault, seconds, error (type and message), requests (that reached the server; None when refused)}`.
    """
    from kubernetes import client

    # The client's API modules load lazily, seconds on a busy machine: a one-time cost, not the call's.
    assert client.CustomObjectsApi is not None and client.CoreV1Api is not None
    out = Path(tempfile.mkdtemp(prefix="reliability-"))
    with faulty_api(fault) as (server, api_client):
        connector = connector_for(api_client, config)
        meta = JobMetadata(NS, "drill-job-1a2b3c4d", "uid-1", str(out))
        start = time.monotonic()
        error: BaseException | None = None
        try:
            if call == "get":
                connector.get(meta)
            elif call == "delete":
                connector.delete(meta)
            else:
                connector.create(load_template(), str(out), None, execution_metadata())
        except KubeApiError as e:
            error = e
        seconds = time.monotonic() - start
        requests = len(server.requests) if server is not None else None
    connector.close()  # the watch cache's threads (on by default), once the server is gone and nothing hangs
    return {
        "call": call,
        "fault": fault,
        "seconds": round(seconds, 2),
        "error": f"{type(error).__name__}: {error}" if error is not None else None,
        "requests": requests,
    }


def measure_all(config: BackendConfig) -> list[dict[str, Any]]:
    """Every (call, fault) at once, each against its own server, in threads: the wall time is the slowest one."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(CALLS) * len(FAULTS)) as pool:
        futures = [pool.submit(measure, call, fault, config) for call in CALLS for fault in FAULTS]
        return [f.result() for f in futures]


def drill_deadlines() -> dict[str, Any]:
    """Drill 14: time to answer per call under a hung, a refusing and a failing API, at the shipped defaults."""
    config = BackendConfig()
    start = time.monotonic()
    rows = measure_all(config)
    elapsed = time.monotonic() - start
    late = [r for r in rows if r["seconds"] >= PROPELLER_DEADLINE_S[r["call"]]]
    observed = {f"{r['call']} {r['fault']}": f"{r['seconds']:.1f}s" for r in rows}
    observed["past propeller's deadline"] = len(late)
    return {
        "drill": "14 deadlines",
        "injected": "every request hung / connection refused / 500 forever, for get, create and delete",
        "expected": "each call answers (with an error) within its budget: get 10 s, create 20 s, delete 10 s; "
        "propeller's deadline is 30 s for each",
        "observed": observed,
        "detect_s": max(r["seconds"] for r in rows),
        "leftover": 0,
        "data_lost": False,
        "rows": rows,
        "wall_s": round(elapsed, 1),
    }


# --------------------------------------------------------------------------------------------------------------
# Drills 15-19: what reaches an error, malformed answers, bad images, 413, suspension (short budgets: these drills
# are about the outcome, drill 14 about the time)

SHORT = {"api_connect_timeout_s": 0.2, "api_timeout_s": 0.3, "api_get_budget_s": 0.8, "api_create_budget_s": 1.2,
         "api_delete_budget_s": 0.8, "api_backoff_initial_s": 0.05, "api_backoff_max_s": 0.2}  # fmt: skip
SECRET = "sk-live-7f3a9c2e11b04d5c9e8a41"
TOKEN = "eyJhbGciOiJSUzI1NiJ9.c2VydmljZWFjY291bnQ.c2lnbmF0dXJl"


def _row(drill: str, injected: str, expected: str, observed: dict, detect_s: float, ok: bool) -> dict[str, Any]:
    return {"drill": drill, "injected": injected, "expected": expected, "observed": observed,
            "detect_s": round(detect_s, 3), "leftover": 0, "data_lost": not ok}  # fmt: skip


def drill_no_bodies() -> dict[str, Any]:
    """Drill 15: bodies echoing a bearer token and an env value, through flytekit's connector service (as propeller
    calls it) for create, get and delete; a 422 Status echoing both for create. Nothing may carry either."""
    import asyncio
    import json
    import logging

    from flyteidl.admin.agent_pb2 import CreateTaskRequest, DeleteTaskRequest, GetTaskRequest, TaskCategory
    from flytekit.extend.backend.base_connector import ConnectorRegistry
    from flytekit.extend.backend.connector_service import AsyncConnectorService

    from tests.connector.helpers import make_connector

    page = f"<pre>Authorization: Bearer {TOKEN}\nWANDB_API_KEY={SECRET}</pre>".encode()
    message = f'env[0].value: Invalid value: "{SECRET}" (Bearer {TOKEN})'
    invalid = json.dumps({"kind": "Status", "code": 422, "reason": "Invalid", "message": message}).encode()
    texts: list[str] = []

    class Context:
        def set_code(self, code: Any) -> None:
            pass

        def set_details(self, details: str) -> None:
            texts.append(details)

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            texts.append(self.format(record))

    handler = Capture(logging.DEBUG)
    loggers = [logging.getLogger(n) for n in ("", "flytekit", "backend_plugin", "kubernetes", "urllib3")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.DEBUG)
    out = Path(tempfile.mkdtemp(prefix="drill15-"))
    start = time.monotonic()
    old = ConnectorRegistry.get_connector("pytorch", 1)
    try:
        with running_fake_api(validate=False) as (server, api_client):
            ConnectorRegistry.register(make_connector(api_client, **SHORT), override=True)
            service, category = AsyncConnectorService(), TaskCategory(name="pytorch", version=1)
            request = CreateTaskRequest(
                template=load_template().to_flyte_idl(),
                output_prefix=str(out),
                task_execution_metadata=execution_metadata(environment={"WANDB_API_KEY": SECRET}).to_flyte_idl(),
            )
            meta = JobMetadata(NS, "j-1", "u-1", str(out)).encode()
            for status, body in ((500, page), (503, page)):
                server.answer_raw(status, body, times=None, content_type="text/html")
                asyncio.run(service.CreateTask(request, Context()))
                asyncio.run(service.GetTask(GetTaskRequest(task_category=category, resource_meta=meta), Context()))
                asyncio.run(
                    service.DeleteTask(DeleteTaskRequest(task_category=category, resource_meta=meta), Context())
                )
                server.clear_faults()
            server.answer_raw(422, invalid, verb="create")
            created = asyncio.run(service.CreateTask(request, Context()))
            texts.append(created.resource_meta.decode())
            again = GetTaskRequest(task_category=category, resource_meta=created.resource_meta)
            got = asyncio.run(service.GetTask(again, Context()))
            texts.append(got.resource.message)
    finally:
        ConnectorRegistry.register(old, override=True)
        for lg, level in zip(loggers, levels, strict=True):
            lg.removeHandler(handler)
            lg.setLevel(level)
    leaks = sum(TOKEN in t or SECRET in t for t in texts)
    observed = {"texts_checked": len(texts), "with_token_or_secret": leaks, "rejected_create_phase": got.resource.phase}
    return _row("15 bodies with secrets", "500/503 proxy pages and a 422 Status echoing `Authorization: Bearer` and an "
                "env value, for create, get, delete over gRPC", "neither in any gRPC error, details, status message, "
                "resource meta or log line (DEBUG)", observed, time.monotonic() - start, leaks == 0)  # fmt: skip


def drill_malformed() -> dict[str, Any]:
    """Drill 16: malformed pods, events and job answers; the job's own conditions decide, errors name the job."""
    from flyteidl.core.execution_pb2 import TaskExecution

    from backend_plugin.errors import Unavailable
    from tests.connector.helpers import make_connector
    from tests.fakeapi.objects import condition, replica_pod

    shapes = [b"<html>oops</html>", b'{"items": ["a"]}', b'{"items": [null]}', b"{}", b'{"items": {"a": 1}}']
    survived, named, cases = 0, 0, 0
    start = time.monotonic()
    out = Path(tempfile.mkdtemp(prefix="drill16-"))
    with running_fake_api() as (server, api_client):
        connector = make_connector(api_client, **SHORT)
        meta = connector.create(load_template(), str(out), None, execution_metadata())
        stored = server.get_job(NS, meta.name)
        server.set_job_status(NS, meta.name, {"conditions": [condition("Failed", message="boom.")]})
        term = {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": "2025-01-01T00:05:00Z"}}
        server.put_pod(replica_pod(stored, "Worker", 0, phase="Failed", container_state=term))
        for shape in shapes:
            cases += 1
            server.answer_raw(200, shape, times=None, verb="list", resource="pods")
            survived += int(connector.get(meta).phase == TaskExecution.RETRYABLE_FAILED)
            server.clear_faults()
        for shape in (b"<html>oops</html>", b'["a"]', b"null"):
            cases += 1
            server.answer_raw(200, shape, times=None, verb="get", resource="pytorchjobs")
            try:
                connector.get(meta)
            except Unavailable as e:
                named += int(meta.name in str(e))
            server.clear_faults()
            survived += int(connector.get(meta).phase == TaskExecution.RETRYABLE_FAILED)  # the next poll heals
    observed = {"cases": cases, "failed_job_still_reported": survived, "job_errors_naming_the_job": named}
    return _row("16 malformed answers", "pod lists: not JSON, strings, nulls, no items, an object; the job: not JSON, "
                "a list, null", "a failed job is still reported from its conditions; a garbage job is an error "
                "naming it; the next poll heals", observed, time.monotonic() - start,
                survived == cases and named == 3)  # fmt: skip


def drill_images_and_413() -> dict[str, Any]:
    """Drills 17-18: images the SDK refuses, and a job the API server finds too large (413)."""
    from flyteidl.core.execution_pb2 import TaskExecution
    from flytekit.models.task import TaskTemplate

    from tests.connector.helpers import make_connector

    start = time.monotonic()
    out = Path(tempfile.mkdtemp(prefix="drill17-"))
    phases, posts = [], 0
    with running_fake_api() as (server, api_client):
        connector = make_connector(api_client, **SHORT)
        for field, image in (("image", "ghcr.io/example/tr\u0430in:1.0"), ("image", "ghcr.io/x/train:1.0\n\x00"),
                             ("pytorch.master.image", "ghcr.io/x/train:1.0\r\n")):  # fmt: skip
            idl = load_template().to_flyte_idl()
            if field == "image":
                idl.container.image = image
            else:
                idl.config[field] = image
            meta = connector.create(TaskTemplate.from_flyte_idl(idl), str(out), None, execution_metadata())
            phases.append(TaskExecution.Phase.Name(connector.get(meta).phase))
        posts = len(server.calls(verb="create"))
        server.fail(413, verb="create")
        meta = connector.create(load_template(), str(out), None, execution_metadata("ex413"))
        too_large = connector.get(meta)
        posts_413 = len(server.calls(verb="create")) - posts
    observed = {"bad_image_phases": phases, "requests_for_bad_images": posts,
                "413_phase": TaskExecution.Phase.Name(too_large.phase), "413_requests": posts_413,
                "413_message": too_large.message.split("; the job")[0]}  # fmt: skip
    ok = phases == ["FAILED"] * 3 and posts == 0 and too_large.phase == TaskExecution.FAILED and posts_413 == 1
    return _row("17-18 bad images, 413", "a Cyrillic letter, '\\n\\x00' in the image, a master image ending in "
                "'\\r\\n'; then a 413 answer to the create", "permanent FAILED naming the field, nothing sent; 413: "
                "permanent FAILED naming the limit, one request", observed, time.monotonic() - start, ok)  # fmt: skip


KINDS = ("pytorchjob", "trainjob", "jobset")


def drill_suspended() -> dict[str, Any]:
    """Drill 19: a job created suspended is QUEUED past every timeout, on every kind."""
    import datetime

    from flyteidl.core.execution_pb2 import TaskExecution

    from tests.connector.helpers import make_connector
    from tests.fakeapi.objects import condition

    start = time.monotonic()
    late = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=2)
    observed: dict[str, Any] = {}
    with running_fake_api() as (server, api_client):
        for target, plural in zip(KINDS, ("pytorchjobs", "trainjobs", "jobsets"), strict=True):
            connector = make_connector(api_client, clock=lambda: late, target=target, suspend=True, **SHORT)
            meta = connector.create(load_template(), tempfile.mkdtemp(), None, execution_metadata(f"s{target}"))
            if target == "pytorchjob":
                server.set_job_status(NS, meta.name, {"conditions": [condition("Created")]}, plural=plural)
            observed[target] = TaskExecution.Phase.Name(connector.get(meta).phase)
    return _row("19 suspended in the spec", "runPolicy.suspend / spec.suspend true, only a Created condition (or "
                "none), two hours after creation", "QUEUED on every kind, never timed out", observed,
                time.monotonic() - start, observed == dict.fromkeys(KINDS, "QUEUED"))  # fmt: skip
