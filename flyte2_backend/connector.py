"""The connector served for Flyte 2: ``flyteidl2.connector.AsyncConnectorService`` over gRPC.

Flyte 2's backend runs a ``pytorch`` task with its native kfoperators plugin (a PyTorchJob, from the
``DistributedPyTorchTrainingTask`` message alone). A task of type ``pytorch-job``
(`pytorch_contract.template_keys.CONNECTOR_TASK_TYPE`) comes here instead, and becomes the job kind the backend config
targets (a TrainJob, or a PyTorchJob with every ``pytorch.*`` option the native plugin drops).

`Flyte2JobConnector` is a ``flyte.connectors.AsyncConnector`` over the backend's SDK-neutral job service
(`backend_plugin.connector.JobService`, by default the process's one, which flytekit's connectors share): the same
reader, writers, status, deadlines and watch cache, and one watch per job kind and namespace whichever SDK polls. What
differs is only the envelope:

- the template is flyteidl2's, of type ``pytorch-job``; its bytes parse as flyteidl's, and the backend's reader reads
  Flyte 2's dialect itself (the type, which only routes the task here, and the ``pytorch.*`` keys Flyte 2 keeps in the
  container's config: `backend_plugin.template`). Nothing here imports the Flyte 2 front-end (`flyte2_pytorch`);
- the inputs the pods read (``{{.input}}``) are Flyte 2's ``flyteidl2.task.Inputs``, the message Flyte 2's entrypoint
  (``a0 --inputs``) parses, not Flyte 1's ``LiteralMap``: `write_inputs` is the service's inputs writer here.
  They are written as the request sent them when served by `serve` (flyte's own server hands a connector only native
  values, which are written back as literals of the types flyte guesses from them). They are written only where the
  job reads them (`backend_plugin.build.BuiltJob.reads`): Flyte 2's connector plugin renders a container task's
  arguments (``template.Render`` on ``container.args``) before it calls ``CreateTask``, so ``{{.input}}`` arrives as
  the run's own inputs file, which Flyte 2 wrote and the job reads; only a pod template's arguments arrive with the
  placeholder, which the backend fills with ``<output prefix>/inputs.pb``, the file written here;
- the answer is flyte's ``Resource``: the same phase (the enums agree), message, log links and job status.

Serve it with ``python -m flyte2_backend --port 8000`` (the ``flyte2-backend`` extra). flytekit's
and flyte's connector services register the same Prometheus metric names, so the Flyte 1 connector
(``pyflyte serve connector``) runs as a second process of the same image.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import functools
import inspect
import logging
from concurrent import futures
from typing import Any, Optional

from flyte.connectors import AsyncConnector, ConnectorRegistry, Resource
from flyte.connectors._server import AsyncConnectorService, ConnectorMetadataService
from flyteidl2.core import execution_pb2 as execution2_pb2

from backend_plugin.connector import JobMetadata, JobService, blobs, shared_service
from backend_plugin.template import template_to_dict
from pytorch_contract.template_keys import CONNECTOR_TASK_TYPE, CONNECTOR_TASK_TYPE_VERSION

__all__ = ["Flyte2JobConnector", "Flyte2ConnectorService", "register", "serve", "main", "write_inputs"]

logger = logging.getLogger(__name__)

# The create request's own Inputs message, set by `Flyte2ConnectorService` around flyte's CreateTask (which converts
# the inputs to native values before it calls the connector).
_REQUEST_INPUTS: contextvars.ContextVar[Any] = contextvars.ContextVar("flyte2_request_inputs", default=None)


def write_inputs(inputs: Any, path: str) -> None:
    """Write ``flyteidl2.task.Inputs`` (an empty message when None: Flyte 2's entrypoint always reads one).

    Args:
        inputs: the request's Inputs message.
        path: the execution's ``inputs.pb``.

    Raises:
        TypeError: `inputs` is not an Inputs message (a LiteralMap would be read as garbage by the pods).
    """
    from flyteidl2.task import common_pb2

    if inputs is None:
        inputs = common_pb2.Inputs()
    if not isinstance(inputs, common_pb2.Inputs):
        raise TypeError(f"Flyte 2 inputs must be a flyteidl2.task.Inputs message, not {type(inputs).__name__}")
    blobs.write_message(inputs, path)


async def _inputs_message(native: Optional[dict[str, Any]]) -> Any:
    """The request's Inputs message; under flyte's own server, the native values it passed, converted back."""
    message = _REQUEST_INPUTS.get()
    if message is not None:
        return message
    from flyte._internal.runtime.convert import convert_from_native_to_inputs
    from flyte.models import NativeInterface

    values = native or {}
    interface = NativeInterface.from_types({k: (type(v), inspect.Parameter.empty) for k, v in values.items()}, {})
    return (await convert_from_native_to_inputs(interface, **values)).proto_inputs


def _flyte2_links(links: Any) -> Optional[list[Any]]:
    """flyteidl's TaskLogs as flyteidl2's (the same message, field for field)."""
    if not links:
        return None
    return [execution2_pb2.TaskLog.FromString(link.SerializeToString()) for link in links]


def _flyte2_metadata(meta: Any) -> Any:
    """The execution metadata as the backend reads it: None when the request carries no execution (a local run)."""
    if meta is None or not meta.HasField("task_execution_id"):
        return None
    return meta


class Flyte2JobConnector(AsyncConnector):
    """Creates, tracks and deletes the Kubeflow job of a ``pytorch-job`` task for Flyte 2.

    Args:
        service: the backend's job service; the process's one (`shared_service`, over the backend config) when None.
    """

    name = "Kubeflow Job Connector"
    task_type_name = CONNECTOR_TASK_TYPE
    task_type_version = CONNECTOR_TASK_TYPE_VERSION
    # The backend's metadata: the same JSON Flyte 1 stores, so both generations read each other's (flyte asks only
    # its `decode` and `encode`).
    metadata_type = JobMetadata  # type: ignore[assignment]

    def __init__(self, service: Optional[JobService] = None) -> None:
        self.service = service if service is not None else shared_service()

    async def create(  # type: ignore[override]
        self,
        task_template: Any,
        output_prefix: str,
        inputs: Optional[dict[str, Any]] = None,
        task_execution_metadata: Any = None,
        **kwargs: Any,
    ) -> JobMetadata:
        """`JobService.create` of the template read as flyteidl's, with Flyte 2's inputs (`write_inputs`).

        Args:
            task_template: ``flyteidl2.core.tasks_pb2.TaskTemplate``.
            output_prefix: the execution's output prefix.
            inputs: native inputs (flyte's server); the request's Inputs message is preferred when served by `serve`.
            task_execution_metadata: ``flyteidl2.connector.TaskExecutionMetadata``.
            **kwargs: connection secrets and configs (unused).

        Returns:
            What `JobService.create` returns.
        """
        template = template_to_dict(task_template.SerializeToString())  # flyteidl2 keeps flyteidl's field numbers
        message = await _inputs_message(inputs)
        call = functools.partial(self.service.create, template, output_prefix, message,
                                 _flyte2_metadata(task_execution_metadata), write_inputs)  # fmt: skip
        return await asyncio.get_running_loop().run_in_executor(None, call)

    async def get(self, resource_meta: JobMetadata, **kwargs: Any) -> Resource:  # type: ignore[override]
        """`JobService.get_async` (the watch cache inline, else the service's pool), as flyte's Resource.

        Args:
            resource_meta: what `create` returned.
            **kwargs: unused.

        Returns:
            Phase, message, log links and the job's status.
        """
        answer = await self.service.get_async(resource_meta)
        return Resource(
            phase=answer.phase,
            message=answer.message,
            log_links=_flyte2_links(answer.log_links),
            custom_info=answer.custom_info,
        )

    async def delete(self, resource_meta: JobMetadata, **kwargs: Any) -> None:  # type: ignore[override]
        """`JobService.delete`: foreground, and a job already gone is success.

        Args:
            resource_meta: what `create` returned.
            **kwargs: unused.
        """
        call = functools.partial(self.service.delete, resource_meta)
        await asyncio.get_running_loop().run_in_executor(None, call)


class Flyte2ConnectorService(AsyncConnectorService):
    """flyte's service, keeping the create request's Inputs message for `Flyte2JobConnector`."""

    async def CreateTask(self, request: Any, context: Any) -> Any:  # noqa: N802 - the gRPC method name
        """flyte's ``CreateTask``, with the request's Inputs message visible to `Flyte2JobConnector.create`.

        Args:
            request: ``flyteidl2.connector.CreateTaskRequest``.
            context: the gRPC context.

        Returns:
            ``CreateTaskResponse``.
        """
        token = _REQUEST_INPUTS.set(request.inputs)
        try:
            return await super().CreateTask(request, context)
        finally:
            _REQUEST_INPUTS.reset(token)


def register(connector: Optional[Flyte2JobConnector] = None) -> Flyte2JobConnector:
    """Register the connector (a default one when None) with flyte's `ConnectorRegistry`, replacing any before.

    Args:
        connector: the connector to serve.

    Returns:
        The registered connector.
    """
    connector = connector if connector is not None else Flyte2JobConnector()
    ConnectorRegistry.register(connector, override=True)
    return connector


async def serve(address: str, workers: int = 10, ready: Optional[Any] = None) -> None:
    """Serve flyte's connector and metadata services (with gRPC health) on `address` until cancelled.

    Args:
        address: ``host:port``; port 0 picks a free one.
        workers: the gRPC server's threads.
        ready: called with the bound port once the server is serving.
    """
    from flyte.connectors.utils import _start_health_check_server
    from flyteidl2.connector import service_pb2_grpc
    from grpc import aio

    server = aio.server(futures.ThreadPoolExecutor(max_workers=workers))
    service_pb2_grpc.add_AsyncConnectorServiceServicer_to_server(Flyte2ConnectorService(), server)
    service_pb2_grpc.add_ConnectorMetadataServiceServicer_to_server(ConnectorMetadataService(), server)
    _start_health_check_server(server, workers)
    port = server.add_insecure_port(address)
    await server.start()
    if ready is not None:
        ready(port)
    try:
        await server.wait_for_termination()
    finally:
        await server.stop(5)


def main(argv: Optional[list[str]] = None) -> None:
    """``python -m flyte2_backend [--port 8000] [--prometheus-port 9090] [--workers 10]``: serve until killed.

    Args:
        argv: the arguments (``sys.argv[1:]`` when None).
    """
    parser = argparse.ArgumentParser(prog="python -m flyte2_backend", description="Serve the Flyte 2 connector.")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--prometheus-port", type=int, default=9090, help="0: no metrics endpoint")
    parser.add_argument("--workers", type=int, default=10)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    register()
    if args.prometheus_port:
        from prometheus_client import start_http_server

        start_http_server(args.prometheus_port)
    asyncio.run(serve(f"[::]:{args.port}", args.workers, lambda port: logger.info("serving on port %d", port)))


if __name__ == "__main__":
    main()
