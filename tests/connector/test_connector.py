"""The connector through the real kubernetes client against the fake API server."""

from __future__ import annotations

import subprocess
import sys

import pytest
from flyteidl.core import literals_pb2
from flyteidl.core.execution_pb2 import TaskExecution
from flytekit.core import utils
from flytekit.extend.backend.base_connector import ConnectorRegistry
from flytekit.models.literals import Literal, LiteralMap, Primitive, Scalar

from backend_plugin.admission import SPEC_DIGEST_ANNOTATION, stamp
from backend_plugin.connector import JobConnector, JobMetadata, spec_differences
from backend_plugin.errors import RBAC_MANIFEST, Conflict, Forbidden, KubeApiError, Unavailable
from tests.connector.helpers import execution_metadata, load_template, make_connector
from tests.fakeapi.objects import condition, replica_pod

NS = "flytesnacks-development"


def create(connector, tmp_path, **meta):
    return connector.create(load_template(), str(tmp_path / "0"), None, execution_metadata(**meta))


def test_create_posts_a_valid_job_and_writes_inputs(fake_api, connector, tmp_path):
    server, _ = fake_api
    inputs = LiteralMap({"x": Literal(scalar=Scalar(primitive=Primitive(integer=7)))})
    meta = connector.create(load_template(), str(tmp_path / "0"), inputs, execution_metadata())
    stored = server.get_job(NS, meta.name)
    assert stored is not None and meta.uid == stored["metadata"]["uid"]
    assert meta.name.startswith("abc123-n0-0-")
    assert stored["metadata"]["labels"]["execution-id"] == "abc123"
    args = stored["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["args"]
    assert str(tmp_path / "0" / "inputs.pb") in args
    written = utils.load_proto_from_file(literals_pb2.LiteralMap, str(tmp_path / "0" / "inputs.pb"))
    assert written.literals["x"].scalar.primitive.integer == 7
    assert [r.verb for r in server.requests] == ["create"]


def test_job_name_is_deterministic_per_attempt(connector, tmp_path):
    first = create(connector, tmp_path, attempt=0)
    again = create(connector, tmp_path, attempt=0)
    retry = create(connector, tmp_path, attempt=1)
    assert first.name == again.name != retry.name


def test_409_with_same_spec_adopts_the_job(fake_api, connector, tmp_path):
    server, _ = fake_api
    first = create(connector, tmp_path)
    second = create(connector, tmp_path)
    assert second == first
    assert [(r.verb, r.status) for r in server.requests] == [("create", 201), ("create", 409), ("get", 200)]
    assert len(server.jobs()) == 1


@pytest.mark.parametrize("their_stamp", [True, False], ids=["stamped", "unstamped"])
def test_409_with_different_spec_is_a_conflict_naming_the_job(fake_api, connector, tmp_path, their_stamp):
    """Another job under our name (created by another client, stamped with its own digest, or by hand without one)."""
    server, _ = fake_api
    meta = create(connector, tmp_path)
    job = server.get_job(NS, meta.name)
    del job["metadata"]["annotations"][SPEC_DIGEST_ANNOTATION]
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 5
    server.remove_job(NS, meta.name)
    server.put_job(stamp(job) if their_stamp else job)
    with pytest.raises(Conflict) as info:
        create(connector, tmp_path)
    text = str(info.value)
    assert text.startswith(f"create PyTorchJob {NS}/{meta.name} failed: a different PyTorchJob")
    assert "spec.pytorchReplicaSpecs.Worker.replicas" in text


def test_server_defaults_do_not_count_as_differences():
    desired = {"a": {"b": 1}, "l": [{"x": 1}]}
    stored = {"a": {"b": 1, "default": True}, "l": [{"x": 1, "port": 23456}], "extra": 1}
    assert spec_differences(desired, stored) == []
    assert spec_differences({"a": [1, 2]}, {"a": [1]}) == ["spec.a"]


@pytest.mark.parametrize(
    ("verb", "call"),
    [("create", "create"), ("get", "get"), ("delete", "delete")],
    ids=["create-forbidden", "get-forbidden", "delete-forbidden"],
)
def test_403_names_the_missing_permission(fake_api, connector, tmp_path, verb, call):
    server, _ = fake_api
    meta = create(connector, tmp_path) if call != "create" else None
    server.forbid(verb, "pytorchjobs")
    with pytest.raises(Forbidden) as info:
        if call == "create":
            create(connector, tmp_path, execution="other")
        else:
            getattr(connector, call)(meta)
    text = str(info.value)
    assert f'cannot {verb} resource "pytorchjobs" in API group "kubeflow.org"' in text
    assert f"needs permission to {verb} pytorchjobs (apiGroup kubeflow.org)" in text
    assert RBAC_MANIFEST in text
    assert len(server.calls(verb=verb, status=403)) == 1  # 403 is not retried


def test_500_on_get_is_retried(fake_api, connector, tmp_path):
    server, _ = fake_api
    meta = create(connector, tmp_path)
    # a create slower than the client timeout (a loaded machine) is followed by a GET: count only get()'s requests
    before = len(server.calls(verb="get"))
    server.fail(500, times=2, verb="get")
    assert connector.get(meta).phase == TaskExecution.QUEUED
    assert [r.status for r in server.calls(verb="get")[before:]] == [500, 500, 200]


def test_503_beyond_the_budget_raises_unavailable_not_a_phase(fake_api, tmp_path):
    server, client = fake_api
    connector = make_connector(client, api_get_budget_s=0.05, api_backoff_initial_s=0.02, api_backoff_max_s=0.02)
    meta = create(connector, tmp_path)
    server.fail(503, times=None, verb="get")
    with pytest.raises(Unavailable, match=r"get PyTorchJob .* failed: HTTP 503 ServiceUnavailable.*gave up after"):
        connector.get(meta)


def test_slow_create_is_not_duplicated(fake_api, connector, tmp_path):
    server, _ = fake_api
    server.delay(1.5, verb="create")  # served, but the answer comes after the 1 s client timeout
    meta = create(connector, tmp_path)
    assert server.get_job(NS, meta.name)["metadata"]["uid"] == meta.uid
    assert len(server.calls(verb="create")) == 1
    assert len(server.jobs()) == 1


def test_get_reports_running_with_one_call(fake_api, connector, tmp_path):
    server, _ = fake_api
    meta = create(connector, tmp_path)
    status = {"conditions": [condition("Created"), condition("Running")],
              "replicaStatuses": {"Master": {"active": 1}, "Worker": {"active": 2}}}  # fmt: skip
    server.set_job_status(NS, meta.name, status)
    server.reset_log()
    resource = connector.get(meta)
    assert (resource.phase, resource.message) == (TaskExecution.RUNNING, "running (3/3 replicas active)")
    assert resource.custom_info["replicaStatuses"] == status["replicaStatuses"]
    assert [r.verb for r in server.requests] == ["get"]


def test_get_failed_job_lists_pods_for_the_root_cause(fake_api, connector, tmp_path):
    server, _ = fake_api
    meta = create(connector, tmp_path)
    job = server.get_job(NS, meta.name)
    server.set_job_status(NS, meta.name, {"conditions": [condition("Failed", message="PyTorchJob failed.")]})
    oom = {"terminated": {"reason": "OOMKilled", "exitCode": 137, "finishedAt": "2025-01-01T00:01:00Z"}}
    server.put_pod(replica_pod(job, "Worker", 1, phase="Failed", container_state=oom))
    resource = connector.get(meta)
    assert resource.phase == TaskExecution.RETRYABLE_FAILED  # killed by the system: Flyte's retries apply
    assert "worker-1 (pytorch): OOMKilled, exit code 137, signal SIGKILL" in resource.message
    assert [r.verb for r in server.requests][-2:] == ["get", "list"]


def test_pods_forbidden_still_reports_the_job_phase(fake_api, connector, tmp_path):
    server, _ = fake_api
    meta = create(connector, tmp_path)
    server.set_job_status(NS, meta.name, {"conditions": [condition("Failed", message="PyTorchJob failed.")]})
    server.forbid("list", "pods")
    resource = connector.get(meta)
    assert resource.phase == TaskExecution.RETRYABLE_FAILED
    assert 'cannot list resource "pods"' in resource.message


def test_job_deleted_behind_our_back_is_a_retryable_failure_saying_so(fake_api, connector, tmp_path):
    server, _ = fake_api
    meta = create(connector, tmp_path)
    server.remove_job(NS, meta.name)
    resource = connector.get(meta)
    assert resource.phase == TaskExecution.RETRYABLE_FAILED  # as propeller reports a pod deleted externally
    assert "no longer exists: it was deleted outside Flyte" in resource.message


def test_job_replaced_by_a_same_named_one_fails(fake_api, connector, tmp_path):
    server, _ = fake_api
    meta = create(connector, tmp_path)
    job = server.get_job(NS, meta.name)
    job["metadata"]["uid"] = "another-uid"
    server.put_job(job)
    resource = connector.get(meta)
    assert resource.phase == TaskExecution.RETRYABLE_FAILED and "a different job of the same name" in resource.message


def test_delete_is_foreground_and_idempotent(fake_api, connector, tmp_path):
    server, _ = fake_api
    meta = create(connector, tmp_path)
    server.put_pod(replica_pod(server.get_job(NS, meta.name), "Master", 0))
    connector.delete(meta)
    connector.delete(meta)
    deletes = server.calls(verb="delete")
    assert [r.status for r in deletes] == [200, 404]
    assert server.get_job(NS, meta.name) is None and server.pods(NS) == []


def test_other_errors_keep_the_template(fake_api, connector, tmp_path):
    server, _ = fake_api
    meta = create(connector, tmp_path)
    server.fail(400, verb="delete")
    with pytest.raises(KubeApiError, match=rf"^delete PyTorchJob {NS}/{meta.name} failed: "):
        connector.delete(meta)


@pytest.mark.parametrize("version", [0, 1], ids=["legacy-v0", "v1"])
def test_registered_with_flytekit(version):
    connector = ConnectorRegistry.get_connector("pytorch", version)
    assert isinstance(connector, JobConnector)
    assert connector.task_category.version == version
    assert connector.metadata_type is JobMetadata


def test_resource_meta_round_trip():
    meta = JobMetadata("ns", "job-1", "u-1", "s3://b/p/0", {"link_type": "vscode", "port": "8080"})
    assert JobMetadata.decode(meta.encode()) == meta
    assert meta.encode() == (
        b'{"namespace": "ns", "name": "job-1", "uid": "u-1", "output_prefix": "s3://b/p/0", '
        b'"task_config": {"link_type": "vscode", "port": "8080"}, "error": ""}'
    )
    # what an older connector stored still decodes (Flyte keeps resource metas across connector upgrades)
    old = JobMetadata.decode(b'{"namespace": "ns", "name": "job-1", "uid": "u-1"}')
    assert old == JobMetadata("ns", "job-1", "u-1") and (old.output_prefix, old.task_config) == ("", {})


def test_import_loads_no_kubernetes_and_no_kubeconfig(tmp_path):
    code = (
        "import sys, backend_plugin.connector as c;"
        "assert 'kubernetes' not in sys.modules, 'kubernetes imported';"
        "from flytekit.extend.backend.base_connector import ConnectorRegistry as R;"
        "assert isinstance(R.get_connector('pytorch', 1), c.JobConnector)"
    )
    env = {"KUBECONFIG": str(tmp_path / "missing"), "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
