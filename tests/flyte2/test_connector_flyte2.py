"""The Flyte 2 connector over gRPC (``flyteidl2.connector.AsyncConnectorService``) on loopback, against the fake API
server through the real kubernetes client, with the watch cache on (LIST and WATCH): a Flyte 2 ``pytorch-job`` task
is created as a TrainJob, tracked to success, deleted; a failed job is reported with its root cause.

The connector serves from its own process (`serve_connector`), started per test under a timeout.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import flyte
import grpc
import pytest
from flyteidl2.connector import connector_pb2, service_pb2_grpc
from flyteidl2.core.execution_pb2 import TaskExecution
from flyteidl2.task import common_pb2

import flyte2_pytorch as f2
from backend_plugin.targets.trainjob.declaration import PLURAL as TRAINJOBS
from tests.fakeapi.fixtures import fake_api  # noqa: F401 - the fixture
from tests.fakeapi.objects import node_pod
from tests.flyte2.served import served

ROOT = Path(__file__).resolve().parents[2]
NS = "flytesnacks-development"
CATEGORY = connector_pb2.TaskCategory(name="pytorch-job", version=1)

env = flyte.TaskEnvironment(
    name="trainjob", image="ghcr.io/example/train:1.0", plugin_config=f2.Connector(f2.PyTorch(worker=f2.Worker(2)))
)


@env.task
def train(steps: int) -> float:
    return float(steps)


def template() -> Any:
    from flyte._internal.runtime.task_serde import get_proto_task
    from flyte.models import SerializationContext

    return get_proto_task(train, SerializationContext(version="v1", root_dir=ROOT))


def inputs(steps: int) -> common_pb2.Inputs:
    from flyte._internal.runtime.convert import convert_from_native_to_inputs

    return asyncio.run(convert_from_native_to_inputs(train.native_interface, steps=steps)).proto_inputs


def pod_reads(path: Path, task: Any) -> dict[str, Any]:
    """The inputs as Flyte 2's pod entrypoint (``a0``) loads and converts them."""
    from flyte._internal.runtime.convert import convert_inputs_to_native
    from flyte._internal.runtime.io import load_inputs

    return asyncio.run(convert_inputs_to_native(asyncio.run(load_inputs(str(path))), task.native_interface))


def metadata(execution: str) -> connector_pb2.TaskExecutionMetadata:
    meta = connector_pb2.TaskExecutionMetadata(namespace=NS, k8s_service_account="default")
    tid = meta.task_execution_id
    tid.task_id.name = "train"
    tid.node_execution_id.node_id = "a0"
    wf = tid.node_execution_id.execution_id
    wf.project, wf.domain, wf.name = "flytesnacks", "development", execution
    return meta


@pytest.fixture
def stub(fake_api) -> Iterator[service_pb2_grpc.AsyncConnectorServiceStub]:  # noqa: F811 - the fixture
    with served("tests.flyte2.serve_connector", fake_api.server.host, "trainjob") as port:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield service_pb2_grpc.AsyncConnectorServiceStub(channel)


def create(stub: Any, prefix: Path, execution: str = "abc123", steps: int = 3) -> bytes:
    request = connector_pb2.CreateTaskRequest(
        template=template(),
        inputs=inputs(steps),
        output_prefix=str(prefix),
        task_execution_metadata=metadata(execution),
    )
    return stub.CreateTask(request, timeout=60).resource_meta


def get(stub: Any, meta: bytes) -> Any:
    return stub.GetTask(connector_pb2.GetTaskRequest(resource_meta=meta, task_category=CATEGORY), timeout=60).resource


def wait_for_phase(stub: Any, meta: bytes, phase: int, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        resource = get(stub, meta)
        if resource.phase == phase or time.monotonic() > deadline:
            return resource
        time.sleep(0.05)


def job_name(meta: bytes) -> str:
    from backend_plugin.connector import JobMetadata

    return JobMetadata.decode(meta).name


@pytest.mark.timeout(180)
def test_create_track_and_delete_a_trainjob(fake_api, stub, tmp_path: Path) -> None:  # noqa: F811
    server = fake_api.server
    meta = create(stub, tmp_path / "0", steps=7)
    name = job_name(meta)
    job = server.get_job(NS, name, plural=TRAINJOBS)
    assert job is not None and job["spec"]["trainer"]["numNodes"] == 3 and server.jobs() == []  # no PyTorchJob
    # the pods read Flyte 2's Inputs message, the one the request carried, where the job's --inputs points
    written = common_pb2.Inputs.FromString((tmp_path / "0" / "inputs.pb").read_bytes())
    assert written == inputs(7)
    command = job["spec"]["trainer"]["command"]
    assert command[0] == "a0" and command[command.index("--inputs") + 1] == str(tmp_path / "0" / "inputs.pb")
    assert pod_reads(tmp_path / "0" / "inputs.pb", train) == {"steps": 7}

    assert get(stub, meta).phase == TaskExecution.QUEUED  # no JobSet yet
    for i in range(3):
        server.put_pod(node_pod(job, i))
    server.set_job_status(NS, name, {"jobsStatus": [{"name": "node", "active": 3, "ready": 3}]}, TRAINJOBS)
    running = wait_for_phase(stub, meta, TaskExecution.RUNNING)
    assert running.phase == TaskExecution.RUNNING and "3/3 nodes ready" in running.message
    assert [link.name for link in running.log_links] == ["Logs node-0", "Logs node-1", "Logs node-2"]
    complete = {"type": "Complete", "status": "True", "reason": "JobSetCompleted", "message": "jobset completed",
                "lastTransitionTime": "2025-01-01T00:09:00Z"}  # fmt: skip
    server.set_job_status(NS, name, {"conditions": [complete], "jobsStatus": []}, TRAINJOBS)
    done = wait_for_phase(stub, meta, TaskExecution.SUCCEEDED)
    assert done.phase == TaskExecution.SUCCEEDED and done.custom_info["kind"] == "TrainJob"
    verbs = {(r.verb, r.resource) for r in server.requests}
    assert {("list", "trainjobs"), ("watch", "trainjobs")} <= verbs, verbs  # polls went through the watch cache

    request = connector_pb2.DeleteTaskRequest(resource_meta=meta, task_category=CATEGORY)
    stub.DeleteTask(request, timeout=60)
    stub.DeleteTask(request, timeout=60)  # a job already gone is success
    assert server.get_job(NS, name, plural=TRAINJOBS) is None
    assert [r.status for r in server.calls(verb="delete", resource="trainjobs")] == [200, 404]


@pytest.mark.timeout(180)
def test_a_failed_trainjob_names_its_root_cause(fake_api, stub, tmp_path: Path) -> None:  # noqa: F811
    server = fake_api.server
    meta = create(stub, tmp_path / "0", execution="failing")
    name = job_name(meta)
    job = server.get_job(NS, name, plural=TRAINJOBS)
    server.put_pod(node_pod(job, 0))
    term = {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": "2025-01-01T00:05:00Z",
                           "message": "ValueError: boom"}}  # fmt: skip
    server.put_pod(node_pod(job, 1, "Failed", **term))
    failed = {"type": "Failed", "status": "True", "reason": "FailedJobs", "message": "jobset failed",
              "lastTransitionTime": "2025-01-01T00:05:01Z"}  # fmt: skip
    server.set_job_status(NS, name, {"conditions": [failed]}, TRAINJOBS)
    resource = wait_for_phase(stub, meta, TaskExecution.RETRYABLE_FAILED)
    assert resource.phase == TaskExecution.RETRYABLE_FAILED
    assert "FailedJobs" in resource.message
    assert "node-1 (node): exit code 1; last output: ValueError: boom" in resource.message


elastic = flyte.TaskEnvironment(name="elastic", plugin_config=f2.Connector(f2.Elastic(nnodes=2)))


@elastic.task
def fit() -> None:
    return None


@pytest.mark.timeout(180)
def test_a_task_a_trainjob_cannot_express_fails_permanently_without_a_request(fake_api, stub, tmp_path: Path) -> None:  # noqa: F811
    """An elastic task is refused by the TrainJob writer: create sends nothing and records why (propeller would retry
    an exception from create), and the first get is a permanent FAILED naming why."""
    from flyte._internal.runtime.task_serde import get_proto_task
    from flyte.models import SerializationContext

    proto = get_proto_task(fit, SerializationContext(version="v1", root_dir=ROOT))
    request = connector_pb2.CreateTaskRequest(
        template=proto, output_prefix=str(tmp_path / "0"), task_execution_metadata=metadata("elastic")
    )
    meta = stub.CreateTask(request, timeout=60).resource_meta
    resource = get(stub, meta)
    assert fake_api.server.requests == []
    assert resource.phase == TaskExecution.FAILED and "cannot run as a Kubeflow Trainer v2 TrainJob" in resource.message
    assert "Elastic(nnodes=" in resource.message and "target: pytorchjob" in resource.message


no_inputs = flyte.TaskEnvironment(name="noinputs", plugin_config=f2.Connector(f2.PyTorch(worker=f2.Worker(1))))


@no_inputs.task
def probe() -> None:
    return None


@pytest.mark.timeout(180)
def test_a_task_without_inputs_gets_the_empty_message_its_pods_read(fake_api, stub, tmp_path: Path) -> None:  # noqa: F811
    from flyte._internal.runtime.task_serde import get_proto_task
    from flyte.models import SerializationContext

    proto = get_proto_task(probe, SerializationContext(version="v1", root_dir=ROOT))
    request = connector_pb2.CreateTaskRequest(
        template=proto, output_prefix=str(tmp_path / "0"), task_execution_metadata=metadata("noinputs")
    )
    meta = stub.CreateTask(request, timeout=60).resource_meta
    assert fake_api.server.get_job(NS, job_name(meta), plural=TRAINJOBS) is not None
    written = (tmp_path / "0" / "inputs.pb").read_bytes()
    assert common_pb2.Inputs.FromString(written) == common_pb2.Inputs()
    assert pod_reads(tmp_path / "0" / "inputs.pb", probe) == {}
