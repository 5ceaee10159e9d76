"""Shared helpers for connector tests and backend fault drills."""

from __future__ import annotations

import asyncio
import datetime
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from flyteidl.admin.agent_pb2 import CreateTaskRequest, DeleteTaskRequest, GetTaskRequest, TaskCategory
from flyteidl.core import tasks_pb2
from flyteidl.core.execution_pb2 import TaskExecution
from flytekit.extend.backend.base_connector import ConnectorRegistry
from flytekit.extend.backend.connector_service import AsyncConnectorService
from flytekit.models.core.identifier import (
    Identifier,
    NodeExecutionIdentifier,
    ResourceType,
    TaskExecutionIdentifier,
    WorkflowExecutionIdentifier,
)
from flytekit.models.task import TaskExecutionMetadata, TaskTemplate
from google.protobuf import json_format

from backend_plugin.config import BackendConfig
from backend_plugin.connector import JobConnector, ServedJobConnector

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "templates"
NOW = datetime.datetime(2025, 1, 1, 0, 10, tzinfo=datetime.timezone.utc)


def load_template(name: str = "official_container") -> TaskTemplate:
    """A flytekit TaskTemplate from tests/data/templates/<name>.json."""
    return template_of(json.loads((TEMPLATES / f"{name}.json").read_text()))


def template_of(data: dict) -> TaskTemplate:
    """A flytekit TaskTemplate from its JSON form (as in tests/data/templates)."""
    return TaskTemplate.from_flyte_idl(json_format.ParseDict(data, tasks_pb2.TaskTemplate()))


def execution_metadata(
    execution: str = "abc123",
    node: str = "n0",
    attempt: int = 0,
    namespace: str = "flytesnacks-development",
    environment: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> TaskExecutionMetadata:
    """Flyte's execution metadata for one attempt of one node (environment `{"FOO": "bar"}` and annotations
    `{"team": "ml"}` unless given)."""
    wf = WorkflowExecutionIdentifier("flytesnacks", "development", execution)
    task_id = Identifier(ResourceType.TASK, "flytesnacks", "development", "train", "v1")
    tid = TaskExecutionIdentifier(task_id, NodeExecutionIdentifier(node, wf), attempt)
    return TaskExecutionMetadata(
        task_execution_id=tid,
        namespace=namespace,
        labels={"execution-id": execution},
        annotations={"team": "ml"} if annotations is None else annotations,
        k8s_service_account="default",
        environment_variables={"FOO": "bar"} if environment is None else environment,
        identity=None,
    )


class GrpcContext:
    """What flytekit's service writes into a gRPC context: the status code and the details propeller receives."""

    def __init__(self) -> None:
        self.code: Any = None
        self.details = ""

    def set_code(self, code: Any) -> None:
        self.code = code

    def set_details(self, details: str) -> None:
        self.details = details


@dataclass
class Answer:
    """What GetTask answered: the phase and message, or the gRPC error's details."""

    phase: int
    message: str
    error: str = ""

    @property
    def name(self) -> str:
        return self.error and "ERROR" or TaskExecution.Phase.Name(self.phase)


class Propeller:
    """Calls the connector service as flytepropeller does: CreateTask once, then GetTask polls.

    Args:
        server: the fake API server (for the tests' counts).
        connector: the connector the service finds for task type "pytorch" version 1 while a call runs.
    """

    def __init__(self, server: Any, connector: Any) -> None:
        self.server = server
        self.connector = connector
        self.service = AsyncConnectorService()

    def _run(self, coro: Any) -> Any:
        old = ConnectorRegistry.get_connector("pytorch", 1)
        ConnectorRegistry.register(self.connector, override=True)
        try:
            return asyncio.run(coro)
        finally:
            ConnectorRegistry.register(old, override=True)

    def try_create(
        self,
        tmp_path: Any,
        execution: str = "abc123",
        template: Optional[TaskTemplate] = None,
        environment: Optional[dict[str, str]] = None,
    ) -> tuple[bytes, GrpcContext]:
        """CreateTask as propeller sends it; the resource meta and what the service wrote into the gRPC context."""
        request = CreateTaskRequest(
            template=(template or load_template()).to_flyte_idl(),
            output_prefix=str(tmp_path / execution),
            task_execution_metadata=execution_metadata(execution, environment=environment).to_flyte_idl(),
        )
        context = GrpcContext()
        created = self._run(self.service.CreateTask(request, context))
        return (bytes(created.resource_meta) if created is not None else b""), context

    def create(self, tmp_path: Any, execution: str = "abc123", **kwargs: Any) -> bytes:
        """CreateTask that must succeed (`try_create`'s arguments); the resource meta."""
        meta, context = self.try_create(tmp_path, execution, **kwargs)
        assert context.code is None, context.details
        return meta

    def get(self, meta: bytes) -> Answer:
        context = GrpcContext()
        request = GetTaskRequest(task_category=TaskCategory(name="pytorch", version=1), resource_meta=meta)
        got = self._run(self.service.GetTask(request, context))
        if context.code is not None:
            return Answer(-1, "", context.details)
        return Answer(got.resource.phase, got.resource.message)

    def delete(self, meta: bytes) -> GrpcContext:
        context = GrpcContext()
        request = DeleteTaskRequest(task_category=TaskCategory(name="pytorch", version=1), resource_meta=meta)
        self._run(self.service.DeleteTask(request, context))
        return context


def make_connector(api_client: Any, clock: Any = None, served: bool = False, **config: Any) -> JobConnector:
    """A connector over `api_client` with small timeouts and instant retries (real clock unless given); with `served`,
    the `ServedJobConnector` `pyflyte serve connector` registers (its `get` a coroutine).

    The watch cache is off unless `watch_cache=True` is passed: these connectors' tests set a job's status on the fake
    API and read it back at once, and pin the requests of each call, which is the behaviour with the cache off; the
    cache's own tests, the e2e tests and the benchmark turn it on."""
    settings = {"watch_cache": False, **_FAST, **config}
    return (ServedJobConnector if served else JobConnector)(
        config=BackendConfig.from_dict(settings),
        api_client_factory=lambda: api_client,
        clock=clock,
        sleep=lambda _s: None,
    )


_FAST = {"api_timeout_s": 1.0, "api_get_budget_s": 5.0, "api_create_budget_s": 5.0, "api_delete_budget_s": 5.0,
         "api_backoff_initial_s": 0.001, "api_backoff_max_s": 0.002}  # fmt: skip


REPO_ROOT = Path(__file__).resolve().parents[2]
ERROR_TASKS = "tests.connector.error_tasks"
PYFLYTE_TIMEOUT_S = 120


def write_flytekit_error(task_name: str, output_prefix: Path, worker: str = "") -> Path:
    """Run `pyflyte-execute` on a task of `tests.connector.error_tasks` that raises; flytekit writes the document.

    One process, in a clean environment, killed after `PYFLYTE_TIMEOUT_S`. With `worker` set, Flyte's distributed
    error strategy is on (`_F_DES`, `_F_WN`), as our writer sets it on every replica: the file is
    `error-<uuid>.pb` and names the worker.

    Args:
        task_name: `raises_value_error` or `raises_recoverable`.
        output_prefix: a local directory (the output prefix).
        worker: the pod name to report, "" for a single `error.pb`.

    Returns:
        The error document flytekit wrote.
    """
    import subprocess
    import sys

    from flytekit.core import utils
    from flytekit.models.literals import LiteralMap

    work = output_prefix.parent / f"{output_prefix.name}-work"
    work.mkdir(parents=True, exist_ok=True)
    inputs = work / "inputs.pb"
    utils.write_proto_to_file(LiteralMap(literals={}).to_flyte_idl(), str(inputs))
    bin_dir = Path(sys.executable).parent
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(work), "PYTHONPATH": str(REPO_ROOT),
           "FLYTE_FAIL_ON_ERROR": "true", "LANG": "C.UTF-8"}  # fmt: skip
    if worker:
        env.update({"_F_DES": "Earliest", "_F_WN": worker})
    cmd = [str(bin_dir / "pyflyte-execute"), "--inputs", str(inputs), "--output-prefix", str(output_prefix),
           "--raw-output-data-prefix", str(work / "raw"), "--checkpoint-path", str(work / "ck"), "--prev-checkpoint",
           '""', "--resolver", "flytekit.core.python_auto_container.default_task_resolver", "--",
           "task-module", ERROR_TASKS, "task-name", task_name]  # fmt: skip
    done = subprocess.run(cmd, env=env, cwd=work, capture_output=True, text=True, timeout=PYFLYTE_TIMEOUT_S)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]  # FLYTE_FAIL_ON_ERROR: exit 1
    (written,) = sorted(output_prefix.glob("error*.pb"))
    return written
