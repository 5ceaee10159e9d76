"""Shared helpers for connector tests and backend fault drills."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

from flyteidl.core import tasks_pb2
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
from backend_plugin.connector import PyTorchJobConnector

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "templates"
NOW = datetime.datetime(2025, 1, 1, 0, 10, tzinfo=datetime.timezone.utc)


def load_template(name: str = "official_container") -> TaskTemplate:
    """A flytekit TaskTemplate from tests/data/templates/<name>.json."""
    data = json.loads((TEMPLATES / f"{name}.json").read_text())
    return TaskTemplate.from_flyte_idl(json_format.ParseDict(data, tasks_pb2.TaskTemplate()))


def execution_metadata(
    execution: str = "abc123", node: str = "n0", attempt: int = 0, namespace: str = "flytesnacks-development"
) -> TaskExecutionMetadata:
    """Flyte's execution metadata for one attempt of one node."""
    wf = WorkflowExecutionIdentifier("flytesnacks", "development", execution)
    task_id = Identifier(ResourceType.TASK, "flytesnacks", "development", "train", "v1")
    tid = TaskExecutionIdentifier(task_id, NodeExecutionIdentifier(node, wf), attempt)
    return TaskExecutionMetadata(
        task_execution_id=tid,
        namespace=namespace,
        labels={"execution-id": execution},
        annotations={"team": "ml"},
        k8s_service_account="default",
        environment_variables={"FOO": "bar"},
        identity=None,
    )


def make_connector(api_client: Any, clock: Any = None, **config: Any) -> PyTorchJobConnector:
    """A connector over `api_client` with small timeouts and instant retries (real clock unless given)."""
    settings = {"api_timeout_s": 1.0, "api_retry_budget_s": 5.0, "api_backoff_initial_s": 0.001,
                "api_backoff_max_s": 0.002, **config}  # fmt: skip
    return PyTorchJobConnector(
        config=BackendConfig(**settings),
        api_client_factory=lambda: api_client,
        clock=clock,
        sleep=lambda _s: None,
    )
