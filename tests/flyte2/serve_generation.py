"""Serve one Flyte generation's connector service on a loopback port (``python -m tests.flyte2.serve_generation
flyte1|flyte2``): prints the port, then serves until stdin closes.

flyte1: flytekit's ``flyteidl.service`` AsyncAgentService and AgentMetadataService, with our connector registered
(``backend_plugin.connector``, task type ``pytorch``). flyte2: flyte's ``flyteidl2.connector`` AsyncConnectorService
and ConnectorMetadataService, with a probe connector for task type ``pytorch-probe`` that names the task it created.
"""

from __future__ import annotations

import asyncio
import sys
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc


def _flyte2_probe() -> Any:
    from flyte.connectors import AsyncConnector, Resource, ResourceMeta
    from flyteidl2.core.execution_pb2 import TaskExecution

    @dataclass
    class Meta(ResourceMeta):
        name: str

    class ProbeConnector(AsyncConnector[Meta]):
        name = "probe"
        task_type_name = "pytorch-probe"
        task_type_version = 1
        metadata_type = Meta

        async def create(self, task_template, output_prefix, inputs=None, task_execution_metadata=None, **kwargs):  # type: ignore[no-untyped-def]
            return Meta(name=task_template.id.name)

        async def get(self, resource_meta, **kwargs):  # type: ignore[no-untyped-def]
            return Resource(phase=TaskExecution.SUCCEEDED, message=resource_meta.name)

        async def delete(self, resource_meta, **kwargs):  # type: ignore[no-untyped-def]
            return None

    return ProbeConnector()


def _add_services(which: str, server: Any) -> None:
    if which == "flyte1":
        from flyteidl.service import agent_pb2_grpc
        from flytekit.extend.backend.connector_service import AsyncConnectorService, ConnectorMetadataService

        import backend_plugin.connector  # noqa: F401 - registers our connector with flytekit's registry

        agent_pb2_grpc.add_AsyncAgentServiceServicer_to_server(AsyncConnectorService(), server)
        agent_pb2_grpc.add_AgentMetadataServiceServicer_to_server(ConnectorMetadataService(), server)
        return
    from flyte.connectors import ConnectorRegistry
    from flyte.connectors._server import AsyncConnectorService as Flyte2Service
    from flyte.connectors._server import ConnectorMetadataService as Flyte2Metadata
    from flyteidl2.connector import service_pb2_grpc

    ConnectorRegistry.register(_flyte2_probe(), override=True)
    service_pb2_grpc.add_AsyncConnectorServiceServicer_to_server(Flyte2Service(), server)
    service_pb2_grpc.add_ConnectorMetadataServiceServicer_to_server(Flyte2Metadata(), server)


async def serve(which: str) -> None:
    server = grpc.aio.server(futures.ThreadPoolExecutor(max_workers=2))
    _add_services(which, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await server.stop(None)


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1]))
