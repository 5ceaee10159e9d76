"""The Flyte 2 connector over gRPC (``flyteidl2.connector.AsyncConnectorService``) on loopback, against the fake API
server through the real kubernetes client, with the watch cache on (LIST and WATCH): a Flyte 2 ``pytorch-job`` task
is created as a TrainJob, tracked to success, deleted; a failed job is reported with its root cause.

Each request carries the template as Flyte 2's backend sends it: its connector plugin (``webapi/connector``'s
``Create``) renders a container task's arguments with ``template.Render`` before it calls ``CreateTask``, so
``{{.input}}`` arrives as the run's own inputs file, ``{{.outputPrefix}}`` as the output prefix, and an empty
``{{.prevCheckpointPrefix}}`` as ``""``; a pod template's arguments arrive as written.

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


# flyteplugins' template.Render: case-insensitive `{{ .Name }}` or `{{$Name}}`
_RENDERED = ("Input", "InputPrefix", "OutputPrefix", "RawOutputDataPrefix", "CheckpointOutputPrefix",
             "PrevCheckpointPrefix")  # fmt: skip


def as_the_backend_sends(proto: Any, run_inputs: Path, output_prefix: Path) -> Any:
    """The template with its container's arguments rendered as Flyte 2's connector plugin renders them (a pod
    template is left as written: the plugin renders only ``container.args``)."""
    import re

    values = {
        "input": str(run_inputs),
        "inputprefix": str(run_inputs.parent),
        "outputprefix": str(output_prefix),
        "rawoutputdataprefix": f"{output_prefix}/raw",
        "checkpointoutputprefix": f"{output_prefix}/checkpoint",
        "prevcheckpointprefix": '""',  # the first attempt: the plugin writes two quotes
    }
    rendered = type(proto)()
    rendered.CopyFrom(proto)
    if rendered.HasField("container"):
        pattern = re.compile(r"\{\{\s*[.$](" + "|".join(_RENDERED) + r")\s*\}\}", re.IGNORECASE)
        args = [pattern.sub(lambda m: values[m.group(1).lower()], a) for a in rendered.container.args]
        del rendered.container.args[:]
        rendered.container.args.extend(args)
    return rendered


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


def run_inputs(prefix: Path, message: common_pb2.Inputs) -> Path:
    """The run's own inputs file, which Flyte 2 writes before the action runs (beside, not under, the prefix)."""
    path = prefix.parent / "run-inputs" / "inputs.pb"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(message.SerializeToString())
    return path


def create(stub: Any, prefix: Path, execution: str = "abc123", steps: int = 3, proto: Any = None) -> bytes:
    message = inputs(steps)
    request = connector_pb2.CreateTaskRequest(
        template=as_the_backend_sends(proto or template(), run_inputs(prefix, message), prefix),
        inputs=message,
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
    # the pods read the run's own inputs file, which Flyte 2 rendered into --inputs: the connector writes no copy
    command = job["spec"]["trainer"]["command"]
    assert command[0] == "a0" and command[command.index("--inputs") + 1] == str(tmp_path / "run-inputs" / "inputs.pb")
    assert command[command.index("--outputs-path") + 1] == str(tmp_path / "0")
    assert pod_reads(tmp_path / "run-inputs" / "inputs.pb", train) == {"steps": 7}
    assert not (tmp_path / "0" / "inputs.pb").exists()

    assert get(stub, meta).phase == TaskExecution.QUEUED  # no JobSet yet
    for i in range(3):
        server.put_pod(node_pod(job, i))
    server.set_job_status(NS, name, {"jobsStatus": [{"name": "node", "active": 1, "ready": 1}]}, TRAINJOBS)
    running = wait_for_phase(stub, meta, TaskExecution.RUNNING)
    assert running.phase == TaskExecution.RUNNING and "running (3 nodes, all ready)" in running.message
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


def _pod() -> Any:
    from kubernetes.client import V1Container, V1PodSpec

    return flyte.PodTemplate(primary_container_name="main", pod_spec=V1PodSpec(containers=[V1Container(name="main")]))


with_pod = flyte.TaskEnvironment(
    name="withpod",
    image="ghcr.io/example/train:1.0",
    pod_template=_pod(),
    plugin_config=f2.Connector(f2.PyTorch(worker=f2.Worker(1))),
)


@with_pod.task
def fit_pod(steps: int) -> float:
    return float(steps)


no_inputs_pod = flyte.TaskEnvironment(
    name="noinputspod", pod_template=_pod(), plugin_config=f2.Connector(f2.PyTorch(worker=f2.Worker(1)))
)


@no_inputs_pod.task
def probe_pod() -> None:
    return None


@pytest.mark.timeout(180)
def test_a_pod_template_task_reads_the_inputs_the_connector_writes(fake_api, stub, tmp_path: Path) -> None:  # noqa: F811
    """Flyte 2's backend renders only a container's arguments: a pod template's arrive with `{{.input}}`, which the
    backend fills with the execution's `inputs.pb` under the output prefix, and writes the request's message there."""
    from flyte._internal.runtime.task_serde import get_proto_task
    from flyte.models import SerializationContext

    proto = get_proto_task(fit_pod, SerializationContext(version="v1", root_dir=ROOT))
    assert proto.HasField("k8s_pod") and not proto.HasField("container")
    meta = create(stub, tmp_path / "0", execution="withpod", steps=5, proto=proto)
    job = fake_api.server.get_job(NS, job_name(meta), plural=TRAINJOBS)
    command = job["spec"]["trainer"]["command"]
    assert command[command.index("--inputs") + 1] == str(tmp_path / "0" / "inputs.pb")
    assert common_pb2.Inputs.FromString((tmp_path / "0" / "inputs.pb").read_bytes()) == inputs(5)
    assert pod_reads(tmp_path / "0" / "inputs.pb", fit_pod) == {"steps": 5}


@pytest.mark.timeout(180)
def test_a_pod_template_task_without_inputs_gets_the_empty_message(fake_api, stub, tmp_path: Path) -> None:  # noqa: F811
    from flyte._internal.runtime.task_serde import get_proto_task
    from flyte.models import SerializationContext

    proto = get_proto_task(probe_pod, SerializationContext(version="v1", root_dir=ROOT))
    request = connector_pb2.CreateTaskRequest(
        template=proto, output_prefix=str(tmp_path / "0"), task_execution_metadata=metadata("noinputs")
    )
    meta = stub.CreateTask(request, timeout=60).resource_meta
    assert fake_api.server.get_job(NS, job_name(meta), plural=TRAINJOBS) is not None
    written = (tmp_path / "0" / "inputs.pb").read_bytes()
    assert common_pb2.Inputs.FromString(written) == common_pb2.Inputs()
    assert pod_reads(tmp_path / "0" / "inputs.pb", probe_pod) == {}
