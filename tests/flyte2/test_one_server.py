"""One image serves both Flyte generations: flytekit 1.16 and flyte 2.12 install in one environment, and from it
flytekit's ``flyteidl.service.AsyncAgentService`` (what Flyte 1's propeller calls) and flyte's
``flyteidl2.connector.AsyncConnectorService`` (what Flyte 2's executor calls) each answer on their own port.

They run as two processes: both packages' connector servers register the same Prometheus metric names
(``flyte_connector_requests_success`` ...) in the default registry when imported, so one process cannot import both
(pinned below, so the day that changes shows here). Loopback only.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.flyte2.served import served_all

pytestmark = pytest.mark.skipif(importlib.util.find_spec("flyte") is None, reason="flyte not installed")

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ports() -> Iterator[dict[str, int]]:
    servers = {which: ("tests.flyte2.serve_generation", which) for which in ("flyte1", "flyte2")}
    with served_all(servers) as found:
        yield found


@pytest.mark.timeout(120)
def test_flyte1_service_lists_our_connector(ports: dict[str, int]) -> None:
    from flyteidl.admin import agent_pb2
    from flyteidl.service import agent_pb2_grpc

    with grpc.insecure_channel(f"127.0.0.1:{ports['flyte1']}") as channel:
        reply = agent_pb2_grpc.AgentMetadataServiceStub(channel).ListAgents(agent_pb2.ListAgentsRequest(), timeout=30)
    assert "pytorch" in [c.name for a in reply.agents for c in a.supported_task_categories]


@pytest.mark.timeout(120)
def test_flyte2_service_creates_and_gets_through_flytes_server(ports: dict[str, int]) -> None:
    from flyteidl2.connector import connector_pb2, service_pb2_grpc
    from flyteidl2.core import tasks_pb2

    with grpc.insecure_channel(f"127.0.0.1:{ports['flyte2']}") as channel:
        listed = service_pb2_grpc.ConnectorMetadataServiceStub(channel).ListConnectors(
            connector_pb2.ListConnectorsRequest(), timeout=30
        )
        stub = service_pb2_grpc.AsyncConnectorServiceStub(channel)
        template = tasks_pb2.TaskTemplate(type="pytorch-probe", task_type_version=1)
        template.id.name = "train"
        created = stub.CreateTask(
            connector_pb2.CreateTaskRequest(template=template, output_prefix="/tmp/o"), timeout=30
        )
        got = stub.GetTask(
            connector_pb2.GetTaskRequest(
                resource_meta=created.resource_meta,
                task_category=connector_pb2.TaskCategory(name="pytorch-probe", version=1),
            ),
            timeout=30,
        )
    assert "pytorch-probe" in [c.name for a in listed.connectors for c in a.supported_task_categories]
    assert got.resource.message == "train"


def test_one_process_cannot_import_both_servers() -> None:
    code = (
        "import flytekit.extend.backend.connector_service\n"
        "try:\n    import flyte.connectors._server\nexcept ValueError as e:\n    print(type(e).__name__, e)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "DuplicateTimeseries" in proc.stdout or "Duplicated timeseries" in proc.stdout, proc.stdout + proc.stderr
