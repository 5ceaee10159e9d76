"""Reliability against a misbehaving API: every call answers inside its budget, no response body reaches an error or
a log, malformed answers never hide a failure, bad images never reach the API, 413 is permanent, a suspended job is
queued. All through the real kubernetes client against the fake API server (or a closed port)."""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from flyteidl.admin.agent_pb2 import CreateTaskRequest, DeleteTaskRequest, GetTaskRequest, TaskCategory
from flyteidl.core.execution_pb2 import TaskExecution
from flytekit.extend.backend.base_connector import ConnectorRegistry
from flytekit.extend.backend.connector_service import AsyncConnectorService

from backend_plugin.config import BackendConfig
from backend_plugin.connector import JobMetadata
from backend_plugin.errors import KubeApiError, TooLarge, Unavailable, classify
from tests.connector.helpers import NOW, GrpcContext, execution_metadata, load_template, make_connector
from tests.fakeapi.objects import condition, replica_pod
from tests.faults.drills_reliability import CALLS, FAULTS, SECRET, SHORT, TOKEN, measure

NS = "flytesnacks-development"
TE = TaskExecution

# Short budgets (`SHORT`) keep these tests fast; the faults tier measures the shipped defaults.
SLACK_S = 1.0  # a loaded 2-core machine: building the error, thread scheduling


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("call", CALLS)
def test_every_call_answers_within_its_budget(call: str, fault: str) -> None:
    config = BackendConfig.from_dict(SHORT)
    budget = config.api.budget_s(call)
    row = measure(call, fault, config)
    assert row["error"] is not None and row["error"].startswith(("Unavailable", "MalformedAnswer")), row
    assert row["seconds"] <= budget + SLACK_S, row
    assert f"api_{call}_budget_s={budget:g}" in row["error"] or "no time left" in row["error"], row
    if fault == "hung":
        assert row["seconds"] >= SHORT["api_timeout_s"], row  # it did wait for an answer


def test_urllib3_does_not_retry_behind_our_loop(fake_api) -> None:
    """A hung GET is sent once per attempt of ours: the message's attempt count is what the server saw."""
    server, client = fake_api
    connector = make_connector(client, **SHORT)
    server.hang(verb="get")
    with pytest.raises(Unavailable, match=r"gave up after (\d+) attempts?") as caught:
        connector.get(JobMetadata(NS, "j-1", "u-1"))
    attempts = int(caught.value.reason.split("gave up after ")[1].split(" ")[0])
    assert attempts == len(server.calls(verb="get")) >= 1
    assert client.configuration.retries is False


# --------------------------------------------------------------------------------------------------------------
# No raw bodies: through flytekit's connector service, the way propeller calls it

PROXY_PAGE = (
    "<html><body><h1>502 Bad Gateway</h1><pre>GET /apis/kubeflow.org/v1 HTTP/1.1\nAuthorization: Bearer "
    f"{TOKEN}\nX-Env: WANDB_API_KEY={SECRET}</pre></body></html>"
).encode()
ECHO_JSON = json.dumps(
    {
        "error": "upstream",
        "request": {"headers": {"Authorization": f"Bearer {TOKEN}"}, "env": [{"name": "K", "value": SECRET}]},
    }
).encode()
INVALID_STATUS = json.dumps({
    "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Invalid", "code": 422,
    "message": f'PyTorchJob.kubeflow.org "x" is invalid: spec.env[0].value: Invalid value: "{SECRET}": rejected by '
    f"webhook (request carried Authorization: Bearer {TOKEN})",
}).encode()  # fmt: skip


class Everything(logging.Handler):
    """Every record of every logger, formatted with its exception, at DEBUG."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(logging.Formatter("%(name)s %(levelname)s %(message)s").format(record))


@pytest.fixture
def all_logs() -> Iterator[Everything]:
    handler = Everything()
    loggers = [logging.getLogger(), logging.getLogger("flytekit")] + [
        logging.getLogger(n) for n in ("backend_plugin", "kubernetes", "urllib3")
    ]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.DEBUG)
    yield handler
    for lg, level in zip(loggers, levels, strict=True):
        lg.removeHandler(handler)
        lg.setLevel(level)


@pytest.fixture
def served(fake_api) -> Iterator[Any]:
    """The fake server and a connector registered for `pytorch` v1, as `pyflyte serve connector` would serve it."""
    server, client = fake_api
    connector = make_connector(client, **SHORT)
    old = ConnectorRegistry.get_connector("pytorch", 1)
    ConnectorRegistry.register(connector, override=True)
    yield server
    ConnectorRegistry.register(old, override=True)


def _create_request(tmp_path: Any) -> CreateTaskRequest:
    meta = execution_metadata(environment={"WANDB_API_KEY": SECRET})
    return CreateTaskRequest(
        template=load_template().to_flyte_idl(),
        output_prefix=str(tmp_path),
        task_execution_metadata=meta.to_flyte_idl(),
    )


def _category() -> TaskCategory:
    return TaskCategory(name="pytorch", version=1)


def _assert_clean(*texts: str) -> None:
    for text in texts:
        assert TOKEN not in text and SECRET not in text, text[:3000]


@pytest.mark.parametrize(
    ("status", "body", "content_type"),
    [(500, PROXY_PAGE, "text/html"), (503, ECHO_JSON, "application/json"), (502, PROXY_PAGE, "text/html")],
    ids=["500-proxy-page", "503-echo-json", "502-proxy-page"],
)
def test_no_body_reaches_the_grpc_error_or_the_log(served, tmp_path, all_logs, status, body, content_type) -> None:
    server = served
    service = AsyncConnectorService()
    server.answer_raw(status, body, times=None, content_type=content_type)
    contexts = [GrpcContext() for _ in range(3)]
    asyncio.run(service.CreateTask(_create_request(tmp_path), contexts[0]))
    meta = JobMetadata(NS, "j-1", "u-1", str(tmp_path)).encode()
    asyncio.run(service.GetTask(GetTaskRequest(task_category=_category(), resource_meta=meta), contexts[1]))
    asyncio.run(service.DeleteTask(DeleteTaskRequest(task_category=_category(), resource_meta=meta), contexts[2]))
    assert [c.code is not None for c in contexts] == [True, True, True]  # every call failed, with details
    assert all("failed" in c.details for c in contexts)
    _assert_clean(*(c.details for c in contexts), *all_logs.lines)
    assert any(f"HTTP {status}" in c.details for c in contexts)  # status and reason are kept
    assert "HTTP response body" not in " ".join(c.details for c in contexts)


def test_a_rejected_create_keeps_the_api_servers_message_without_the_secrets(served, tmp_path, all_logs) -> None:
    server = served
    service = AsyncConnectorService()
    server.answer_raw(422, INVALID_STATUS, verb="create")
    context = GrpcContext()
    created = asyncio.run(service.CreateTask(_create_request(tmp_path), context))
    assert context.code is None and created is not None  # a permanent failure is recorded, not raised
    got = asyncio.run(
        service.GetTask(GetTaskRequest(task_category=_category(), resource_meta=created.resource_meta), GrpcContext())
    )
    resource = got.resource
    assert resource.phase == TE.FAILED and "Invalid value" in resource.message and "<redacted>" in resource.message
    _assert_clean(resource.message, created.resource_meta.decode(), *all_logs.lines)


def test_classified_errors_chain_nothing(fake_api) -> None:
    server, client = fake_api
    connector = make_connector(client, **SHORT)
    server.answer_raw(500, PROXY_PAGE, times=None, content_type="text/html")
    with pytest.raises(KubeApiError) as caught:
        connector.get(JobMetadata(NS, "j-1", "u-1"))
    chain: list[BaseException] = []
    error: BaseException | None = caught.value
    while error is not None:
        chain.append(error)
        error = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    assert all(isinstance(e, KubeApiError) for e in chain), [type(e) for e in chain]
    assert caught.value.status is not None and caught.value.status.code == 500


# --------------------------------------------------------------------------------------------------------------
# Malformed answers: for the job, its pods and its events; a test per shape

SHAPES = {
    "not JSON": b"<html>oops</html>",
    "list of strings": b'{"kind": "List", "items": ["a", "b"]}',
    "null items": b'{"kind": "List", "items": [null, null]}',
    "missing items": b'{"kind": "List"}',
    "dict where a list belongs": b'{"kind": "List", "items": {"metadata": {"name": "x"}}}',
}
"""A pod or event list's wrong shapes; the job's are in `JOB_SHAPES`."""

JOB_SHAPES = {
    "not JSON": b"<html>oops</html>",
    "list of strings": b'["a", "b"]',
    "null items": b"null",
    "missing items": b'{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob"}',
    "dict where a list belongs": None,  # the job's own conditions as an object, set below
}


def _failed_job(server: Any, client: Any, tmp_path: Any, start: int = 600) -> JobMetadata:
    # made by a connector with the shipped budgets: the create is the scene, not what the test looks at, and the
    # fake API server's first create (its CRD schema read cold) can take longer than the short budgets on a slow
    # machine
    meta = make_connector(client).create(load_template(), str(tmp_path), None, execution_metadata())
    stored = server.get_job(NS, meta.name)
    server.set_job_status(NS, meta.name, {"conditions": [condition("Created"), condition("Failed", message="boom.")]})
    term = {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": "2025-01-01T00:05:00Z"}}
    server.put_pod(replica_pod(stored, "Worker", 0, phase="Failed", container_state=term))
    return meta


@pytest.mark.parametrize("shape", SHAPES)
def test_malformed_pods_never_hide_a_failed_job_and_the_next_poll_heals(fake_api, tmp_path, shape) -> None:
    server, client = fake_api
    connector = make_connector(client, clock=lambda: NOW, **SHORT)
    meta = _failed_job(server, client, tmp_path)
    server.answer_raw(200, SHAPES[shape], times=None, verb="list", resource="pods")
    resource = connector.get(meta)
    assert resource.phase == TE.RETRYABLE_FAILED and "boom." in resource.message
    if shape == "missing items":  # a list with no items is an answer: no pods
        assert "replica details unavailable" not in resource.message and "worker-0" not in resource.message
    else:  # a list of another shape is said (checked where it comes in, naming what is wrong), never quietly dropped
        assert "replica details unavailable" in resource.message and "oops" not in resource.message
    server.clear_faults()
    healed = connector.get(meta)
    assert healed.phase == TE.RETRYABLE_FAILED and "worker-0" in healed.message


@pytest.mark.parametrize("shape", SHAPES)
def test_malformed_events_never_hide_a_job_that_never_started(fake_api, tmp_path, shape) -> None:
    server, client = fake_api
    late = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=2)  # past job_start_timeout_s
    # created with the shipped budgets, as `_failed_job` does: the create is the scene (a create past the short 1.2 s
    # budget failed this test in CI, on a machine loaded by the cluster tier beside it)
    meta = make_connector(client).create(load_template(), str(tmp_path), None, execution_metadata())
    connector = make_connector(client, clock=lambda: late, **SHORT)
    server.set_job_status(NS, meta.name, {"conditions": [condition("Created")]})
    server.answer_raw(200, SHAPES[shape], times=None, verb="list", resource="events")
    resource = connector.get(meta)
    assert resource.phase == TE.FAILED and "has not started" in resource.message
    server.clear_faults()
    assert connector.get(meta).phase == TE.FAILED


@pytest.mark.parametrize("shape", JOB_SHAPES)
def test_a_malformed_job_is_an_error_naming_the_job_and_the_next_poll_heals(fake_api, tmp_path, shape) -> None:
    server, client = fake_api
    connector = make_connector(client, clock=lambda: NOW, **SHORT)
    meta = _failed_job(server, client, tmp_path)
    body = JOB_SHAPES[shape]
    if body is None:  # the job's own conditions as an object
        job = server.get_job(NS, meta.name)
        job["status"]["conditions"] = {"type": "Failed", "status": "True"}
        body = json.dumps(job).encode()
    server.answer_raw(200, body, times=None, verb="get", resource="pytorchjobs")
    with pytest.raises(Unavailable) as raised:  # retried within the budget, then raised naming the job and why
        connector.get(meta)
    message = str(raised.value)
    assert f"get PyTorchJob {NS}/{meta.name} failed" in message and "oops" not in message
    why = {
        "not JSON": "not JSON",
        "list of strings": "not a PyTorchJob object",
        "null items": "not a PyTorchJob",
        "missing items": "metadata is missing",
        "dict where a list belongs": "status.conditions is an object, not a list",
    }
    assert why[shape] in message, message
    server.clear_faults()
    assert connector.get(meta).phase == TE.RETRYABLE_FAILED


# --------------------------------------------------------------------------------------------------------------
# Images, 413, suspension


@pytest.mark.parametrize(
    ("where", "image", "field"),
    [
        ("container", "ghcr.io/example/tr\u0430in:1.0", "the task's image"),  # Cyrillic 'а'
        ("container", "ghcr.io/example/train:1.0\n\x00", "the task's image"),
        ("master", "ghcr.io/example/train:1.0\r\n", "config['pytorch.master.image']"),
    ],
    ids=["cyrillic", "newline-nul", "master-crlf"],
)
def test_a_bad_image_is_a_permanent_failure_at_create_with_nothing_sent(fake_api, tmp_path, where, image, field):
    server, client = fake_api
    connector = make_connector(client, **SHORT)
    template = load_template()
    idl = template.to_flyte_idl()
    if where == "container":
        idl.container.image = image
    else:
        idl.custom.update({})
        idl.config["pytorch.master.image"] = image
    from flytekit.models.task import TaskTemplate

    meta = connector.create(TaskTemplate.from_flyte_idl(idl), str(tmp_path), None, execution_metadata())
    assert server.calls(verb="create") == [] and meta.error
    resource = connector.get(meta)
    assert resource.phase == TE.FAILED and field in resource.message and "kubelet" in resource.message


def test_413_is_a_permanent_failure_naming_the_limit(fake_api, tmp_path) -> None:
    server, client = fake_api
    connector = make_connector(client, **SHORT)
    server.fail(413, verb="create")
    meta = connector.create(load_template(), str(tmp_path), None, execution_metadata())
    assert len(server.calls(verb="create")) == 1  # not retried
    resource = connector.get(meta)
    assert resource.phase == TE.FAILED and "HTTP 413" in resource.message and "3 MiB" in resource.message


def test_413_and_other_never_succeeding_statuses_are_classified_permanent() -> None:
    from kubernetes.client.exceptions import ApiException

    for code in (400, 405, 413, 415, 422, 501):
        error = classify(ApiException(status=code, reason="X"), "create", "job ns/n", "ns", "create", "jobs", "g")
        assert not error.retryable, code
    too_large = classify(ApiException(status=413, reason="Too Large"), "create", "job ns/n", "ns", "create", "j", "g")
    assert isinstance(too_large, TooLarge) and "3 MiB" in str(too_large)
    assert classify(ApiException(status=503, reason="X"), "get", "job ns/n", "ns", "get", "jobs", "g").retryable


@pytest.mark.parametrize("target", ["pytorchjob", "trainjob"])
def test_a_suspended_job_is_queued_whatever_its_conditions_say(fake_api, tmp_path, target) -> None:
    server, client = fake_api
    late = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=2)  # past every timeout
    # created with the shipped budgets (a TrainJob's create renders its node pod in the fake server: slow when loaded)
    meta = make_connector(client, target=target, suspend=True).create(load_template(), str(tmp_path), None,
                                                                       execution_metadata())  # fmt: skip
    connector = make_connector(client, clock=lambda: late, target=target, suspend=True, **SHORT)
    plural = "trainjobs" if target == "trainjob" else "pytorchjobs"
    if target == "pytorchjob":
        server.set_job_status(NS, meta.name, {"conditions": [condition("Created")]}, plural=plural)
    resource = connector.get(meta)
    assert resource.phase == TE.QUEUED and "suspended" in resource.message, resource.message
    assert [c.resource for c in server.calls(verb="list")] == []  # neither pods nor events are needed


def test_pods_of_a_shape_no_api_server_writes_leave_the_job_to_its_conditions(fake_api, tmp_path) -> None:
    server, client = fake_api
    connector = make_connector(client, clock=lambda: NOW, **SHORT)
    meta = _failed_job(server, client, tmp_path)
    body = b'{"kind": "PodList", "items": [{"metadata": "x", "status": ["y"]}]}'
    server.answer_raw(200, body, times=None, verb="list", resource="pods")
    resource = connector.get(meta)
    assert resource.phase == TE.RETRYABLE_FAILED and "boom." in resource.message
    assert "replica details unavailable" in resource.message


def test_a_value_the_jobs_metadata_shows_is_not_redacted_from_the_servers_message() -> None:
    # project and domain name the namespace: the server's "namespaces ... not found" must say which one
    from backend_plugin.connector.create import secret_values
    from backend_plugin.errors import redact

    env = [
        {"name": "FLYTE_INTERNAL_EXECUTION_PROJECT", "value": "flytesnacks"},
        {"name": "FLYTE_INTERNAL_EXECUTION_DOMAIN", "value": "development"},
        {"name": "WANDB_API_KEY", "value": "s3cr3t-token"},
    ]
    job = {
        "metadata": {"namespace": "flytesnacks-development", "name": "f1-n0-0", "labels": {"domain": "development"}},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "env": env}]}}},
    }
    secrets = secret_values(job)
    assert secrets == ("s3cr3t-token",)
    message = 'namespaces "flytesnacks-development" not found; env WANDB_API_KEY=s3cr3t-token'
    assert redact(message, secrets) == 'namespaces "flytesnacks-development" not found; env WANDB_API_KEY=<redacted>'
