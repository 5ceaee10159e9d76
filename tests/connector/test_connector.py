"""The connector through the real kubernetes client against the fake API server, for every registered job kind where
the behaviour is the same (the `kind` fixture), and each kind's own where it differs.

The server validates every job it is sent (its kind's CRD; for a TrainJob the webhook's rules and the rendered node
pod too)."""

from __future__ import annotations

import datetime
import json
import logging
import subprocess
import sys

import pytest
from flyteidl.core import literals_pb2, tasks_pb2
from flyteidl.core.execution_pb2 import TaskExecution
from flytekit.core import utils
from flytekit.extend.backend.base_connector import ConnectorRegistry
from flytekit.models.literals import Literal, LiteralMap, Primitive, Scalar
from flytekit.models.task import TaskTemplate
from google.protobuf import json_format

from backend_plugin.admission import SPEC_DIGEST_ANNOTATION, stamp
from backend_plugin.connector import JobConnector, JobMetadata, spec_differences
from backend_plugin.errors import RBAC_MANIFEST, Conflict, Forbidden, KubeApiError, NotFound, Unavailable
from backend_plugin.kinds.trainjob import PLURAL as TRAINJOBS
from backend_plugin.targets.registry import KINDS
from tests.connector.helpers import NOW, TEMPLATES, execution_metadata, load_template, make_connector
from tests.fakeapi.objects import condition, node_pod
from tests.targets.conftest import Kind, facts_of

NS = "flytesnacks-development"
LINKS = ({"name": "Logs", "template": "https://logs.example.com/{{ .namespace }}/{{ .podName }}/{{ .containerName }}"},)


def create(connector, tmp_path, template: str = "official_container", **meta):
    return connector.create(load_template(template), str(tmp_path / "0"), None, execution_metadata(**meta))


@pytest.fixture(params=KINDS, ids=[t.config_name for t in KINDS])
def kind(request):
    """Each registered job kind in turn."""
    return Kind(request.param, facts_of(request.param))


@pytest.fixture
def kind_connector(fake_api, kind):
    """A connector that creates jobs of `kind` (the cache off, instant retries, as `connector`)."""
    return make_connector(fake_api.client, clock=lambda: NOW, target=kind.name, log_links=LINKS)


# --- every kind ------------------------------------------------------------------------------------------------------


def test_create_posts_a_valid_job_and_writes_inputs(fake_api, kind, kind_connector, tmp_path):
    server, _ = fake_api
    inputs = LiteralMap({"x": Literal(scalar=Scalar(primitive=Primitive(integer=7)))})
    meta = kind_connector.create(load_template("sdk_seed_gpu"), str(tmp_path / "0"), inputs, execution_metadata())
    assert meta.kind == kind.target.kind and JobMetadata.decode(meta.encode()) == meta
    stored = server.get_job(NS, meta.name, plural=kind.target.plural)
    assert stored is not None and meta.uid == stored["metadata"]["uid"]
    assert meta.name.startswith("abc123-n0-0-") and stored["metadata"]["labels"]["execution-id"] == "abc123"
    assert str(tmp_path / "0" / "inputs.pb") in json.dumps(stored["spec"])
    written = utils.load_proto_from_file(literals_pb2.LiteralMap, str(tmp_path / "0" / "inputs.pb"))
    assert written.literals["x"].scalar.primitive.integer == 7
    crd_read = ("get", "customresourcedefinitions")  # the kind's installed CRD, before its first create
    assert [(r.verb, r.resource) for r in server.requests] == [crd_read, ("create", kind.target.plural)]
    assert [t.plural for t in KINDS if server.jobs(t.plural)] == [kind.target.plural]


def test_409_with_same_spec_adopts_the_job(fake_api, kind, kind_connector, tmp_path):
    server, _ = fake_api
    first = create(kind_connector, tmp_path, "sdk_seed_gpu")
    assert create(kind_connector, tmp_path, "sdk_seed_gpu") == first
    crd_read = ("get", "customresourcedefinitions", 200)  # once, before the kind's first create
    assert [(r.verb, r.resource, r.status) for r in server.requests] == [
        crd_read,
        ("create", kind.target.plural, 201),
        ("create", kind.target.plural, 409),
        ("get", kind.target.plural, 200),
    ]


def test_get_failed_job_lists_pods_for_the_root_cause(fake_api, kind, kind_connector, tmp_path):
    server, _ = fake_api
    meta = create(kind_connector, tmp_path, "sdk_seed_gpu")
    job = server.get_job(NS, meta.name, plural=kind.target.plural)
    oom = {"reason": "OOMKilled", "exitCode": 137, "finishedAt": "2025-01-01T00:01:00Z"}
    server.put_pod(kind.pod(job, 0))
    server.put_pod(kind.pod(job, 1, "Failed", terminated=oom))
    failed = condition("Failed", reason="FailedJobs", message="the job failed.")
    server.set_job_status(NS, meta.name, {"conditions": [failed]}, kind.target.plural)
    resource = kind_connector.get(meta)
    assert resource.phase == TaskExecution.RETRYABLE_FAILED  # killed by the system: Flyte's retries apply
    assert "OOMKilled, exit code 137, signal SIGKILL" in resource.message, resource.message
    assert [r.verb for r in server.requests][-2:] == ["get", "list"]


def test_job_deleted_behind_our_back_is_a_retryable_failure_saying_so(fake_api, kind, kind_connector, tmp_path):
    server, _ = fake_api
    meta = create(kind_connector, tmp_path, "sdk_seed_gpu")
    server.remove_job(NS, meta.name, plural=kind.target.plural)
    resource = kind_connector.get(meta)
    # the contract's rule: deleted before it finished, with neither outputs nor an error document: retryable, as
    # propeller reports a pod deleted externally
    assert resource.phase == TaskExecution.RETRYABLE_FAILED
    assert resource.message.startswith(f"{kind.target.kind} {NS}/{meta.name} no longer exists: it was deleted")


# How each kind's job is deleted. Foreground: the job stays, marked, until the garbage collector has deleted what its
# controller made. Not a TrainJob: Trainer v2.3's reconcile (pkg/controller/trainjob_controller.go, `Reconcile`) never
# looks at the TrainJob's deletionTimestamp and applies its JobSet again once the garbage collector has deleted it, so a
# foreground delete made a second JobSet and a second set of pods (seen on the real controllers,
# tests/cluster/test_lifecycle.py); deleted in the background, the TrainJob is gone at once and the collector takes the
# JobSet, its Jobs and pods.
DELETE_PROPAGATION = {"pytorchjob": "Foreground", "trainjob": "Background", "jobset": "Foreground"}


def test_delete_propagates_as_the_kind_needs_and_is_idempotent(fake_api, kind, kind_connector, tmp_path):
    server, _ = fake_api
    meta = create(kind_connector, tmp_path, "sdk_seed_gpu")
    server.put_pod(kind.pod(server.get_job(NS, meta.name, plural=kind.target.plural), 0))
    kind_connector.delete(meta)
    kind_connector.delete(meta)
    deletes = server.calls(verb="delete", resource=kind.target.plural)
    assert [r.status for r in deletes] == [200, 404]
    assert [r.propagation for r in deletes] == [DELETE_PROPAGATION[kind.target.config_name]] * 2
    assert server.get_job(NS, meta.name, plural=kind.target.plural) is None and server.pods(NS) == []


# --- the PyTorchJob kind (the default target) ------------------------------------------------------------------------


def test_job_name_is_deterministic_per_attempt(connector, tmp_path):
    first = create(connector, tmp_path, attempt=0)
    again = create(connector, tmp_path, attempt=0)
    retry = create(connector, tmp_path, attempt=1)
    assert first.name == again.name != retry.name


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


def test_pods_forbidden_still_reports_the_job_phase(fake_api, connector, tmp_path):
    server, _ = fake_api
    meta = create(connector, tmp_path)
    server.set_job_status(NS, meta.name, {"conditions": [condition("Failed", message="PyTorchJob failed.")]})
    server.forbid("list", "pods")
    resource = connector.get(meta)
    assert resource.phase == TaskExecution.RETRYABLE_FAILED
    assert 'cannot list resource "pods"' in resource.message


def test_job_replaced_by_a_same_named_one_fails(fake_api, connector, tmp_path):
    server, _ = fake_api
    meta = create(connector, tmp_path)
    job = server.get_job(NS, meta.name)
    job["metadata"]["uid"] = "another-uid"
    server.put_job(job)
    resource = connector.get(meta)
    assert resource.phase == TaskExecution.RETRYABLE_FAILED and "a different job of the same name" in resource.message


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


# --- the TrainJob kind ------------------------------------------------------------------------------------------------


@pytest.fixture
def trainjob_connector(fake_api):
    return make_connector(fake_api.client, clock=lambda: NOW, target="trainjob", log_links=LINKS)


def test_a_task_a_trainjob_cannot_express_fails_permanently_without_a_request(fake_api, trainjob_connector, tmp_path):
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


def test_get_walks_the_trainjob_status_table(fake_api, trainjob_connector, tmp_path):
    server, _ = fake_api
    meta = create(trainjob_connector, tmp_path)
    job = server.get_job(NS, meta.name, plural=TRAINJOBS)
    assert trainjob_connector.get(meta).phase == TaskExecution.QUEUED  # no JobSet yet
    server.set_job_status(NS, meta.name, {"jobsStatus": [{"name": "node", "active": 1, "ready": 0}]}, TRAINJOBS)
    assert trainjob_connector.get(meta).phase == TaskExecution.INITIALIZING
    for i in range(3):
        server.put_pod(node_pod(job, i))
    server.set_job_status(NS, meta.name, {"jobsStatus": [{"name": "node", "active": 1, "ready": 1}]}, TRAINJOBS)
    running = trainjob_connector.get(meta)
    assert running.phase == TaskExecution.RUNNING and "running (3 nodes, all ready)" in running.message
    assert [link.name for link in running.log_links] == ["Logs node-0", "Logs node-1", "Logs node-2"]
    assert running.log_links[1].uri == f"https://logs.example.com/{NS}/{meta.name}-node-0-1-ab1c1/node"
    complete = {"type": "Complete", "status": "True", "reason": "JobSetCompleted", "message": "jobset completed",
                "lastTransitionTime": "2025-01-01T00:09:00Z"}  # fmt: skip
    server.set_job_status(NS, meta.name, {"conditions": [complete], "jobsStatus": []}, TRAINJOBS)
    done = trainjob_connector.get(meta)
    assert done.phase == TaskExecution.SUCCEEDED and done.custom_info["kind"] == "TrainJob"


def test_no_jobset_for_long_is_a_permanent_failure(fake_api, tmp_path):
    server, client = fake_api
    late = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=61)
    connector = make_connector(client, clock=lambda: late, target="trainjob", trainjob_pickup_timeout_s=60)
    meta = create(connector, tmp_path)
    resource = connector.get(meta)
    assert resource.phase == TaskExecution.FAILED
    assert "trainjob_pickup_timeout_s=60" in resource.message and "torch-distributed" in resource.message


@pytest.mark.parametrize(
    "served, kind, asked",
    [
        ({"pytorchjobs", "trainjobs", "jobsets"}, "PyTorchJob", 1),
        ({"trainjobs", "jobsets"}, "TrainJob", 2),
        ({"jobsets"}, "JobSet", 3),
    ],
    ids=["all-pytorchjob-first", "trainer-v2-and-its-jobset", "jobset-only"],
)
def test_auto_asks_the_api_server_once(fake_api, tmp_path, caplog, served: set, kind: str, asked: int):
    server, client = fake_api
    server.served = served
    connector = make_connector(client, clock=lambda: NOW, target="auto")
    with caplog.at_level(logging.INFO, logger="backend_plugin.connector"):
        first = create(connector, tmp_path, attempt=0)
        second = create(connector, tmp_path, attempt=1)
    assert first.kind == second.kind == kind
    discovery = server.calls(resource="discovery")
    assert len(discovery) == asked  # each group in registry order until one serves; once per connector, not per create
    assert f"creating {kind}s" in caplog.text


def test_auto_with_neither_crd_names_both(fake_api, tmp_path):
    server, client = fake_api
    server.served = set()
    connector = make_connector(client, target="auto")
    with pytest.raises(NotFound, match="neither pytorchjobs.kubeflow.org .* nor trainjobs.trainer.kubeflow.org"):
        create(connector, tmp_path)


# --- blob storage that cannot be read: unknown is never a phase ---------------------------------------------------


def test_a_deleted_job_whose_outputs_cannot_be_looked_for_is_polled_again_not_failed(fake_api, connector, tmp_path):
    """A job that succeeded and was deleted by its TTL before the poll: while the store cannot be read, GetTask
    answers an error (propeller polls again), never RETRYABLE_FAILED for a task that finished; once it answers, the
    outputs decide."""
    from tests.connector.flaky_store import FlakyStore, flaky_prefix
    from tests.connector.helpers import Propeller

    server, _ = fake_api
    (tmp_path / "store" / "run").mkdir(parents=True)
    with flaky_prefix(tmp_path / "store") as prefix:
        meta = connector.create(load_template("official_container"), f"{prefix}/run", None, execution_metadata())
        (tmp_path / "store" / "run" / "outputs.pb").write_bytes(b"")  # the task finished and wrote its outputs
        server.remove_job(NS, meta.name)  # ttlSecondsAfterFinished: 0
        FlakyStore.broken = True
        answer = Propeller(server, connector).get(meta.encode())
        assert answer.error and "blob storage" in answer.error and f"{prefix}/run" in answer.error, answer
        FlakyStore.broken = False
        resource = connector.get(meta)
        assert resource.phase == TaskExecution.SUCCEEDED, resource.message


def test_a_failed_job_whose_error_document_cannot_be_read_is_polled_again(
    fake_api, connector, tmp_path, flytekit_errors
):
    """The task's error document decides retryable or not: while the store cannot be read, GetTask answers an error
    and the job's failure is reported once the document can be read (here: a non-recoverable user error, FAILED)."""
    from tests.connector.flaky_store import FlakyStore, flaky_prefix
    from tests.connector.helpers import Propeller

    server, _ = fake_api
    (tmp_path / "store" / "run").mkdir(parents=True)
    with flaky_prefix(tmp_path / "store") as prefix:
        meta = connector.create(load_template("official_container"), f"{prefix}/run", None, execution_metadata())
        (tmp_path / "store" / "run" / "error.pb").write_bytes(flytekit_errors["user"].read_bytes())
        failed = condition("Failed", reason="PyTorchJobFailed", message="the job failed.")
        server.set_job_status(NS, meta.name, {"conditions": [condition("Created"), failed]})
        FlakyStore.broken = True
        answer = Propeller(server, connector).get(meta.encode())
        assert answer.error and "blob storage" in answer.error, answer
        FlakyStore.broken = False
        resource = connector.get(meta)
        assert resource.phase == TaskExecution.FAILED and "ValueError" in resource.message, resource.message
