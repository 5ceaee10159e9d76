"""The connector on the TrainJob target, through the real kubernetes client against the fake API server.

The server validates every TrainJob it is sent (Trainer v2.3 CRD, webhook rules, rendered node pod).
"""

from __future__ import annotations

import datetime
import json
import logging

import pytest
from flyteidl.core import tasks_pb2
from flyteidl.core.execution_pb2 import TaskExecution
from flytekit.models.task import TaskTemplate
from google.protobuf import json_format

from backend_plugin.connector import JobMetadata
from backend_plugin.errors import NotFound
from backend_plugin.targets.trainjob.declaration import PLURAL as TRAINJOBS
from pytorch_contract.k8s_names import COMPLETION_INDEX_LABEL, JOBSET_NAME_LABEL
from tests.connector.helpers import NOW, TEMPLATES, execution_metadata, load_template, make_connector

NS = "flytesnacks-development"
LINKS = ({"name": "Logs", "template": "https://logs.example.com/{{ .namespace }}/{{ .podName }}/{{ .containerName }}"},)


@pytest.fixture
def trainjob_connector(fake_api):
    return make_connector(fake_api.client, clock=lambda: NOW, target="trainjob", log_links=LINKS)


def create(connector, tmp_path, template: str = "sdk_seed_gpu", **meta):
    return connector.create(load_template(template), str(tmp_path / "0"), None, execution_metadata(**meta))


def node_pod(job: dict, index: int, phase: str = "Running", **state) -> dict:
    """A pod as the JobSet names and labels it."""
    name = job["metadata"]["name"]
    return {
        "metadata": {
            "name": f"{name}-node-0-{index}-ab1c{index}",
            "namespace": NS,
            "labels": {JOBSET_NAME_LABEL: name, COMPLETION_INDEX_LABEL: str(index)},
            "creationTimestamp": "2025-01-01T00:01:00Z",
        },
        "spec": {"containers": [{"name": "node", "image": "img"}]},
        "status": {
            "phase": phase,
            "startTime": "2025-01-01T00:01:05Z",
            "containerStatuses": [
                {
                    "name": "node",
                    "ready": phase == "Running",
                    "restartCount": 0,
                    "image": "img",
                    "imageID": "",
                    "state": state or {"running": {}},
                }
            ],  # fmt: skip
        },
    }


def test_create_posts_a_valid_trainjob(fake_api, trainjob_connector, tmp_path):
    server, _ = fake_api
    meta = create(trainjob_connector, tmp_path)
    assert meta.kind == "TrainJob"
    assert JobMetadata.decode(meta.encode()) == meta
    stored = server.get_job(NS, meta.name, plural=TRAINJOBS)
    assert stored is not None and stored["spec"]["trainer"]["numNodes"] == 3
    assert server.jobs() == []  # no PyTorchJob
    assert [(r.verb, r.resource) for r in server.requests] == [("create", "trainjobs")]


def test_create_twice_adopts_the_same_trainjob(fake_api, trainjob_connector, tmp_path):
    server, _ = fake_api
    assert create(trainjob_connector, tmp_path) == create(trainjob_connector, tmp_path)
    assert [(r.verb, r.status) for r in server.requests] == [("create", 201), ("create", 409), ("get", 200)]


def test_refused_task_fails_permanently_without_a_request(fake_api, trainjob_connector, tmp_path):
    """The contract's rule: a task a TrainJob cannot express can never run, so `create` sends nothing and records why
    (an exception from `create` would be retried by propeller), and the first `get` is a permanent FAILED."""
    server, _ = fake_api
    meta = create(trainjob_connector, tmp_path, template="sdk_elastic")
    assert server.requests == []
    assert meta.kind == "TrainJob" and "Elastic(nnodes=" in meta.error
    resource = trainjob_connector.get(meta)
    assert resource.phase == TaskExecution.FAILED
    assert "Elastic(nnodes=" in resource.message and "target: pytorchjob" in resource.message
    assert server.requests == []


def test_dropped_backend_default_is_logged(fake_api, trainjob_connector, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="backend_plugin.connector"):
        create(trainjob_connector, tmp_path)
    assert caplog.text == ""  # our own defaults: a warning about a setting nobody made is noise
    set_ttl = make_connector(fake_api.client, clock=lambda: NOW, target="trainjob", ttl_seconds_after_finished=3600)
    with caplog.at_level(logging.WARNING, logger="backend_plugin.connector"):
        create(set_ttl, tmp_path / "set", node="n1")
    assert "ttl_seconds_after_finished=3600 is not applied" in caplog.text


def test_accelerator_no_node_can_match_is_warned_at_create(fake_api, tmp_path, caplog):
    connector = make_connector(fake_api.client, clock=lambda: NOW)
    data = json.loads((TEMPLATES / "sdk_seed_gpu.json").read_text())
    data["config"]["pytorch.accelerator"] = "A100"  # a short name: GPU feature discovery writes NVIDIA-A100-SXM4-80GB
    template = TaskTemplate.from_flyte_idl(json_format.ParseDict(data, tasks_pb2.TaskTemplate()))
    with caplog.at_level(logging.WARNING, logger="backend_plugin.connector"):
        connector.create(template, str(tmp_path / "0"), None, execution_metadata())
    assert "accelerator 'A100'" in caplog.text and "`accelerators`" in caplog.text


def test_get_walks_the_status_table(fake_api, trainjob_connector, tmp_path):
    server, _ = fake_api
    meta = create(trainjob_connector, tmp_path)
    job = server.get_job(NS, meta.name, plural=TRAINJOBS)
    assert trainjob_connector.get(meta).phase == TaskExecution.QUEUED  # no JobSet yet
    server.set_job_status(NS, meta.name, {"jobsStatus": [{"name": "node", "active": 3, "ready": 0}]}, TRAINJOBS)
    assert trainjob_connector.get(meta).phase == TaskExecution.INITIALIZING
    for i in range(3):
        server.put_pod(node_pod(job, i))
    server.set_job_status(NS, meta.name, {"jobsStatus": [{"name": "node", "active": 3, "ready": 3}]}, TRAINJOBS)
    running = trainjob_connector.get(meta)
    assert running.phase == TaskExecution.RUNNING and "3/3 nodes ready" in running.message
    assert [link.name for link in running.log_links] == ["Logs node-0", "Logs node-1", "Logs node-2"]
    assert running.log_links[1].uri == f"https://logs.example.com/{NS}/{meta.name}-node-0-1-ab1c1/node"
    complete = {"type": "Complete", "status": "True", "reason": "JobSetCompleted", "message": "jobset completed",
                "lastTransitionTime": "2025-01-01T00:09:00Z"}  # fmt: skip
    server.set_job_status(NS, meta.name, {"conditions": [complete], "jobsStatus": []}, TRAINJOBS)
    done = trainjob_connector.get(meta)
    assert done.phase == TaskExecution.SUCCEEDED and done.custom_info["kind"] == "TrainJob"


def test_failed_node_is_named_and_retryable(fake_api, trainjob_connector, tmp_path):
    server, _ = fake_api
    meta = create(trainjob_connector, tmp_path)
    job = server.get_job(NS, meta.name, plural=TRAINJOBS)
    server.put_pod(node_pod(job, 0))
    term = {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": "2025-01-01T00:05:00Z",
                           "message": "ValueError: boom"}}  # fmt: skip
    server.put_pod(node_pod(job, 1, "Failed", **term))
    failed = {"type": "Failed", "status": "True", "reason": "FailedJobs", "message": "jobset failed",
              "lastTransitionTime": "2025-01-01T00:05:01Z"}  # fmt: skip
    server.set_job_status(NS, meta.name, {"conditions": [failed]}, TRAINJOBS)
    resource = trainjob_connector.get(meta)
    assert resource.phase == TaskExecution.RETRYABLE_FAILED
    assert "FailedJobs" in resource.message and "node-1 (node): exit code 1; last output: ValueError: boom" in (
        resource.message
    )


def test_no_jobset_for_long_is_a_permanent_failure(fake_api, tmp_path):
    server, client = fake_api
    late = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=61)
    connector = make_connector(client, clock=lambda: late, target="trainjob", trainjob_pickup_timeout_s=60)
    meta = create(connector, tmp_path)
    resource = connector.get(meta)
    assert resource.phase == TaskExecution.FAILED
    assert "trainjob_pickup_timeout_s=60" in resource.message and "torch-distributed" in resource.message


def test_delete_is_foreground_and_idempotent(fake_api, trainjob_connector, tmp_path):
    server, _ = fake_api
    meta = create(trainjob_connector, tmp_path)
    job = server.get_job(NS, meta.name, plural=TRAINJOBS)
    server.put_pod(node_pod(job, 0))
    trainjob_connector.delete(meta)
    trainjob_connector.delete(meta)
    deletes = server.calls(verb="delete", resource="trainjobs")
    assert [r.status for r in deletes] == [200, 404]
    assert server.get_job(NS, meta.name, plural=TRAINJOBS) is None and server.pods(NS) == []


def test_deleted_behind_flytes_back_is_reported(fake_api, trainjob_connector, tmp_path):
    server, _ = fake_api
    meta = create(trainjob_connector, tmp_path)
    server.remove_job(NS, meta.name, plural=TRAINJOBS)
    resource = trainjob_connector.get(meta)
    # the contract's rule: a job deleted before it finished, with neither outputs nor an error document, is retryable
    assert resource.phase == TaskExecution.RETRYABLE_FAILED
    assert resource.message.startswith(f"TrainJob {NS}/{meta.name} no longer exists")


@pytest.mark.parametrize(
    "served, kind",
    [({"pytorchjobs", "trainjobs"}, "PyTorchJob"), ({"trainjobs"}, "TrainJob")],
    ids=["both-pytorchjob-first", "trainer-v2-only"],
)
def test_auto_asks_the_api_server_once(fake_api, tmp_path, caplog, served: set, kind: str):
    server, client = fake_api
    server.served = served
    connector = make_connector(client, clock=lambda: NOW, target="auto")
    with caplog.at_level(logging.INFO, logger="backend_plugin.connector"):
        first = create(connector, tmp_path, attempt=0)
        second = create(connector, tmp_path, attempt=1)
    assert first.kind == second.kind == kind
    discovery = server.calls(resource="discovery")
    assert len(discovery) == (1 if kind == "PyTorchJob" else 2)  # once per connector, not per create
    assert f"creating {kind}s" in caplog.text


def test_auto_with_neither_crd_names_both(fake_api, tmp_path):
    server, client = fake_api
    server.served = set()
    connector = make_connector(client, target="auto")
    with pytest.raises(NotFound, match="neither pytorchjobs.kubeflow.org .* nor trainjobs.trainer.kubeflow.org"):
        create(connector, tmp_path)
