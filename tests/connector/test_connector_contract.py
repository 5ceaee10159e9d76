"""Issue 11 through the connector and the fake API server: what a failed, stuck, unbuildable or vanished job reports.

The output prefixes are real local directories; error documents in them were written by flytekit itself.
"""

from __future__ import annotations

import dataclasses
import datetime
import shutil
from pathlib import Path

import pytest
from flyteidl.core import errors_pb2
from flyteidl.core.execution_pb2 import TaskExecution

from backend_plugin.config import BackendConfig
from backend_plugin.connector import blobs
from backend_plugin.errors import StorageUnavailable
from tests.connector.error_tasks import VALUE_ERROR
from tests.connector.helpers import execution_metadata, load_template, make_connector
from tests.fakeapi.objects import condition, failed_create_event, replica_pod

NS = "flytesnacks-development"


def create(connector, prefix: Path, template=None, **meta):
    return connector.create(template or load_template(), str(prefix), None, execution_metadata(**meta))


def put_document(source: Path, prefix: Path, worker: str = "", name: str = "") -> Path:
    """Copy a flytekit-written error document into `prefix`, naming the pod that wrote it (as `_F_WN` would)."""
    doc = errors_pb2.ErrorDocument()
    doc.ParseFromString(source.read_bytes())
    if worker:
        doc.error.worker = worker
    target = prefix / (name or source.name)
    target.write_bytes(doc.SerializeToString())
    return target


def fail_job(server, meta, *pods) -> None:
    job = server.get_job(NS, meta.name)
    server.set_job_status(NS, meta.name, {"conditions": [condition("Failed", message="PyTorchJob failed.")]})
    for rtype, index, term in pods:
        state = {"terminated": {"finishedAt": "2025-01-01T00:01:00Z", **term}}
        server.put_pod(replica_pod(job, rtype, index, phase="Failed", container_state=state))


@pytest.mark.parametrize(
    ("document", "phase", "start"),
    [
        ("user_worker", TaskExecution.FAILED, f"worker-1 failed: ValueError: {VALUE_ERROR} (a non-recoverable"),
        ("recoverable_worker", TaskExecution.RETRYABLE_FAILED, "worker-1 failed: FlyteRecoverableException: "),
    ],
    ids=["non-recoverable", "recoverable"],
)
def test_failed_job_reports_the_tasks_own_error(fake_api, connector, tmp_path, flytekit_errors, document, phase, start):
    server, _ = fake_api
    meta = create(connector, tmp_path / "0")
    assert meta.output_prefix == str(tmp_path / "0")
    put_document(flytekit_errors[document], tmp_path / "0", worker=f"{meta.name}-worker-1")
    fail_job(server, meta, ("Worker", 1, {"exitCode": 1, "reason": "Error"}))
    resource = connector.get(meta)
    assert resource.phase == phase
    assert resource.message.startswith(start), resource.message
    assert "Root cause: worker-1 (pytorch): exit code 1" in resource.message


def test_oom_killed_replica_is_retryable_even_with_a_peers_document(fake_api, connector, tmp_path, flytekit_errors):
    server, _ = fake_api
    meta = create(connector, tmp_path / "0")
    doc = put_document(flytekit_errors["user_worker"], tmp_path / "0", worker=f"{meta.name}-master-0")
    document = errors_pb2.ErrorDocument()
    document.ParseFromString(doc.read_bytes())
    document.error.timestamp.FromJsonString("2025-01-01T00:01:00.300Z")  # 0.3 s after the OOM kill
    doc.write_bytes(document.SerializeToString())
    fail_job(server, meta, ("Worker", 1, {"exitCode": 137, "reason": "OOMKilled"}))
    resource = connector.get(meta)
    assert resource.phase == TaskExecution.RETRYABLE_FAILED
    assert "worker-1 was stopped by the system before any task error" in resource.message


@pytest.mark.parametrize("problem", ["too-big", "not-a-document"])
def test_a_document_found_but_unusable_never_hides_the_phase(fake_api, tmp_path, problem):
    """Found but unusable (too large, not an error document): a retryable failure that says why."""
    server, client = fake_api
    connector = make_connector(client, error_document_max_bytes=1024)
    meta = create(connector, tmp_path / "0")
    if problem == "too-big":
        (tmp_path / "0" / "error.pb").write_bytes(b"x" * 2048)
        expected = "error.pb is larger than error_document_max_bytes=1024"
    else:
        (tmp_path / "0" / "error.pb").write_bytes(b"\xff\xfe garbage")
        expected = "error.pb is not a flyteidl.core.ErrorDocument"
    fail_job(server, meta, ("Worker", 0, {"exitCode": 1}))
    resource = connector.get(meta)
    assert resource.phase == TaskExecution.RETRYABLE_FAILED
    assert "the task's error document could not be read" in resource.message and expected in resource.message


def test_a_store_that_cannot_be_read_is_unknown_never_a_phase(fake_api, tmp_path):
    """A prefix no store serves: whether the task reported an error is unknown, so `get` raises (Flyte polls again)
    naming the prefix, instead of a retryable failure decided on nothing."""
    server, client = fake_api
    connector = make_connector(client)
    meta = dataclasses.replace(create(connector, tmp_path / "0"), output_prefix="nosuchstore://bucket/prefix")
    fail_job(server, meta, ("Worker", 0, {"exitCode": 1}))
    with pytest.raises(StorageUnavailable, match="nosuchstore://bucket/prefix"):
        connector.get(meta)


def _later(seconds: float):
    start = datetime.datetime.now(datetime.timezone.utc)
    return lambda: start + datetime.timedelta(seconds=seconds)


@pytest.mark.parametrize("events_allowed", [True, False], ids=["events-listed", "events-forbidden"])
def test_a_job_whose_pods_are_rejected_is_failed_after_the_start_timeout(fake_api, tmp_path, events_allowed):
    server, client = fake_api
    meta = create(make_connector(client), tmp_path / "0")
    job = server.get_job(NS, meta.name)
    server.set_job_status(NS, meta.name, {"conditions": [condition("Created")]})  # no startTime: no pods
    message = f'Error creating: Pod "{meta.name}-master-0" is invalid: spec.containers[0].env[0].name: Invalid value'
    server.add_event(NS, failed_create_event(job, message))
    server.add_event(NS, failed_create_event({"metadata": {"name": "other", "namespace": NS}}, "not ours"))
    if not events_allowed:
        server.forbid("list", "events")
    early = make_connector(client, clock=_later(60), job_start_timeout_s=600).get(meta)
    assert early.phase == TaskExecution.QUEUED
    server.reset_log()
    resource = make_connector(client, clock=_later(700), job_start_timeout_s=600).get(meta)
    assert resource.phase == TaskExecution.FAILED
    assert "has not started" in resource.message and "job_start_timeout_s=600" in resource.message
    if events_allowed:
        assert f"FailedCreatePod: {message}" in resource.message and "not ours" not in resource.message
        (listed,) = server.calls(resource="events")
        assert listed.query["fieldSelector"] == [f"involvedObject.kind=PyTorchJob,involvedObject.name={meta.name}"]
    else:
        assert 'cannot list resource "events"' in resource.message
        assert "backend_plugin/deploy/rbac.yaml" in resource.message


def test_a_template_that_cannot_run_is_a_permanent_failure_without_a_job(fake_api, connector, tmp_path):
    server, _ = fake_api
    template = load_template()
    template.config["pytorch.qeue"] = "research"  # a typo: the reader rejects unknown pytorch.* keys
    meta = create(connector, tmp_path / "0", template=template)
    assert meta.error.startswith("the task template cannot run: config['pytorch.qeue']")
    server.reset_log()
    resource = connector.get(meta)
    assert (resource.phase, resource.message) == (TaskExecution.FAILED, meta.error)
    connector.delete(meta)
    assert server.requests == [] and server.jobs() == []


def test_a_job_the_api_server_rejects_is_a_permanent_failure(fake_api, connector, tmp_path):
    server, _ = fake_api
    server.fail(422, verb="create")
    meta = create(connector, tmp_path / "0")
    assert meta.error.startswith("the API server rejected the job: create PyTorchJob")
    assert connector.get(meta).phase == TaskExecution.FAILED


@pytest.mark.parametrize("left", ["outputs", "error", "nothing"])
def test_a_job_deleted_after_it_finished(fake_api, connector, tmp_path, flytekit_errors, left):
    """ttlSecondsAfterFinished: 0 lets the operator delete a finished job before the next poll."""
    server, _ = fake_api
    meta = create(connector, tmp_path / "0")
    if left == "outputs":
        (tmp_path / "0" / "outputs.pb").write_bytes(b"")
    elif left == "error":
        shutil.copy(flytekit_errors["user"], tmp_path / "0" / "error.pb")
    server.remove_job(NS, meta.name)
    resource = connector.get(meta)
    expected = {"outputs": TaskExecution.SUCCEEDED, "error": TaskExecution.FAILED,
                "nothing": TaskExecution.RETRYABLE_FAILED}  # fmt: skip
    assert resource.phase == expected[left], resource.message
    assert resource.custom_info["deleted"] is True


def test_dynamic_log_links_come_from_the_tasks_config(fake_api, tmp_path):
    server, client = fake_api
    vscode = {"name": "VS Code", "template": "https://ide/{{ .podName }}:{{ .taskConfig.port }}", "link_type": "vscode"}
    connector = make_connector(client, log_links=(vscode,))
    template = load_template()
    template.config.update({"link_type": "vscode", "port": "8080"})
    meta = create(connector, tmp_path / "0", template=template)
    assert meta.task_config["link_type"] == "vscode" and not any(k.startswith("pytorch.") for k in meta.task_config)
    server.set_job_status(NS, meta.name, {"conditions": [condition("Running")]})
    links = connector.get(meta).log_links
    assert [link.uri for link in links][:1] == [f"https://ide/{meta.name}-master-0:8080"]
    plain = create(connector, tmp_path / "1", execution="other")
    server.set_job_status(NS, plain.name, {"conditions": [condition("Running")]})
    assert connector.get(plain).log_links == []  # the task did not ask for the vscode link


def test_backend_config_carries_the_new_settings():
    config = BackendConfig.from_env(environ={"PYTORCHJOB_JOB_START_TIMEOUT_S": "120"})
    assert config.value("job_start_timeout_s") == 120
    assert BackendConfig.from_env(environ={"PYTORCHJOB_JOB_START_TIMEOUT_S": ""}).value("job_start_timeout_s") is None
    with pytest.raises(ValueError, match="job_start_timeout_s=-1 must be a non-negative number of seconds or None"):
        BackendConfig.from_dict(dict(job_start_timeout_s=-1))
    with pytest.raises(ValueError, match="error_document_max_bytes=10 must be an integer >= 1024"):
        BackendConfig.from_dict(dict(error_document_max_bytes=10))


def test_legacy_v0_elastic_template_runs_through_the_connector(fake_api, tmp_path):
    """Item 4 through the connector registered for task type version 0: the created job passes the CRD checks."""
    import json

    from flyteidl.core import tasks_pb2
    from flytekit.extend.backend.base_connector import ConnectorRegistry
    from flytekit.models.task import TaskTemplate
    from google.protobuf import json_format

    from backend_plugin.connector import JobConnector
    from tests.connector.helpers import TEMPLATES

    server, client = fake_api
    assert isinstance(ConnectorRegistry.get_connector("pytorch", 0), JobConnector)
    data = json.loads((TEMPLATES / "legacy_v0_elastic.json").read_text())
    template = TaskTemplate.from_flyte_idl(json_format.ParseDict(data, tasks_pb2.TaskTemplate()))
    meta = make_connector(client).create(template, str(tmp_path / "0"), None, execution_metadata())
    stored = server.get_job(NS, meta.name)
    assert stored["spec"]["elasticPolicy"] == {
        "minReplicas": 1,
        "maxReplicas": 2,
        "rdzvBackend": "c10d",
        "maxRestarts": 3,
    }
    assert list(stored["spec"]["pytorchReplicaSpecs"]) == ["Worker"]


def test_error_documents_read_are_bounded_in_number(fake_api, connector, tmp_path, flytekit_errors):
    prefix = tmp_path / "0"
    prefix.mkdir()
    for i in range(70):
        put_document(flytekit_errors["user_worker"], prefix, name=f"error-{i:032x}.pb")
    report = blobs.read_error_report(str(prefix), connector.config.status.error_document_max_bytes)
    assert (len(report.errors), report.skipped, report.problem) == (64, 6, "")
    assert blobs.read_error_report(str(tmp_path / "missing"), 1024).errors == ()


def test_every_read_asks_the_store_not_a_listing_kept_by_its_client(tmp_path, flytekit_errors):
    # s3fs, gcsfs and adlfs keep every listing and answer `open`/`exists` under a listed folder from it: a document
    # written after a poll listed the prefix read as absent (a preemption record, on the real control plane)
    from pytorch_contract.preemption import FILE_NAME as PREEMPTION_FILE
    from pytorch_contract.progress import FILE_NAME as PROGRESS_FILE
    from tests.connector.listing_store import ListingStore, listed_prefix

    (tmp_path / "run").mkdir()
    with listed_prefix(tmp_path) as root:
        prefix = f"{root}/run"
        assert blobs.read_error_report(prefix, 4096).errors == ()
        assert blobs.read_preemption_record(prefix).data is None
        assert not blobs.outputs_written(prefix)
        (tmp_path / "run" / "error.pb").write_bytes(flytekit_errors["user"].read_bytes())
        (tmp_path / "run" / PREEMPTION_FILE).write_bytes(b"{}")
        (tmp_path / "run" / PROGRESS_FILE).write_bytes(b"{}")
        (tmp_path / "run" / "outputs.pb").write_bytes(b"")
        store = ListingStore()
        (tmp_path / "other").mkdir()  # the store's own check: a folder's listing hides what was written since
        store.ls(f"{tmp_path}/other", detail=False)
        (tmp_path / "other" / "late.pb").write_bytes(b"")
        assert not store.exists(f"{tmp_path}/other/late.pb")
        assert [e.source for e in blobs.read_error_report(prefix, 4096).errors] == ["error.pb"]
        assert blobs.read_preemption_record(prefix).data == b"{}"
        assert blobs.read_progress_record(prefix).data == b"{}"
        assert blobs.outputs_written(prefix)
        assert f"{tmp_path}/run" not in store.dircache  # nothing of a task's prefix is kept after a read
