"""The fake API server decodes a created custom resource as kube-apiserver does: with `fieldValidation=Strict` a field
the CRD does not declare is a 400 `strict decoding error`, without it the field is dropped (a `Warning` header names
it), with `Ignore` it is dropped silently; a non-nullable `null` is dropped without a word, Strict or not (or set to
its `default`), and a `null` list item is a 422 Invalid. Driven through the real kubernetes client; and the server's
own reading of the CRD agrees with the backend's admission model on every golden job, on undeclared fields and on
nulls."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from backend_plugin.admission import PRUNED, admit
from backend_plugin.errors import InvalidJob, classify
from tests.fakeapi import pruning

DATA = Path(__file__).resolve().parents[1] / "data"
GOLDEN = sorted((DATA / "jobs").glob("*.yaml")) + sorted((DATA / "trainjobs").glob("*.yaml"))
NS = "ml"
EXTRA_MOUNT = {"name": "data", "mountPath": "/data", "bindMountOptions": ["rbind"]}  # a 1.37 field the CRDs lack


def golden(name: str = "jobs/cpu_only.yaml") -> dict:
    job = yaml.safe_load((DATA / name).read_text())
    job["metadata"]["namespace"] = NS
    return job


def with_undeclared_fields(job: dict) -> tuple[dict, list[str]]:
    """The job with a volume-mount field its CRD does not declare on its first pod template's first container, and a
    made-up spec field; the paths the API server names."""
    job = copy.deepcopy(job)
    job["spec"]["madeUpField"] = True
    if job["kind"] == "PyTorchJob":
        role = next(iter(job["spec"]["pytorchReplicaSpecs"]))
        prefix = f"spec.pytorchReplicaSpecs.{role}.template.spec.containers[0]"
        container = job["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]["containers"][0]
    else:
        prefix = "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template"
        prefix += ".spec.containers[0]"
        patch = {"trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{"name": "node", "template": {
            "spec": {"template": {"spec": {"containers": [{"name": "node"}]}}}}}]}}}}  # fmt: skip
        job["spec"]["runtimePatches"] = [{"manager": "example.com/test", **patch}]
        container = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
        container = container["template"]["spec"]["containers"][0]
    n = len(container.get("volumeMounts") or [])
    container.setdefault("volumeMounts", []).append(dict(EXTRA_MOUNT))
    paths = [f"{prefix}.volumeMounts[{n}].bindMountOptions", "spec.madeUpField"]
    return job, paths


def post(api_client, job: dict, field_validation: str | None):
    group, version = job["apiVersion"].split("/")
    plural = "trainjobs" if job["kind"] == "TrainJob" else "pytorchjobs"
    extra = {"field_validation": field_validation} if field_validation else {}
    return client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        group, version, NS, plural, job, _preload_content=False, **extra
    )


@pytest.fixture
def api():
    """A fake API server without the create hook's validation (these jobs are not all valid pods)."""
    from tests.fakeapi.fixtures import running_fake_api

    with running_fake_api(validate=False) as running:
        yield running


@pytest.mark.parametrize("name", ["jobs/cpu_only.yaml", "trainjobs/pod_template.yaml"], ids=["pytorchjob", "trainjob"])
def test_strict_refuses_an_undeclared_field_as_the_api_server_does(api, name) -> None:
    server, api_client = api
    job, paths = with_undeclared_fields(golden(name))
    with pytest.raises(ApiException) as raised:
        post(api_client, job, "Strict")
    assert raised.value.status == 400
    status = json.loads(raised.value.body)
    version = job["apiVersion"].split("/")[1]
    kind = job["kind"]
    head = f'{kind} in version "{version}" cannot be handled as a {kind}: strict decoding error: '
    assert status["reason"] == "BadRequest" and status["code"] == 400
    assert status["message"].startswith(head)
    assert sorted(status["message"][len(head) :].split(", ")) == sorted(f'unknown field "{p}"' for p in paths)
    assert server.jobs("trainjobs" if kind == "TrainJob" else "pytorchjobs") == []
    (call,) = server.calls("create")
    assert call.query["fieldValidation"] == ["Strict"] and call.status == 400
    error = classify(raised.value, "create", f"{kind} {NS}/x", NS, "create", "pytorchjobs", "kubeflow.org")
    assert isinstance(error, InvalidJob) and "strict decoding error" in str(error)  # permanent: never retried


@pytest.mark.parametrize(("validation", "warned"), [(None, True), ("Warn", True), ("Ignore", False)])
def test_without_strict_an_undeclared_field_is_dropped(api, validation, warned) -> None:
    server, api_client = api
    job, paths = with_undeclared_fields(golden())
    answer = post(api_client, job, validation)
    assert answer.status == 201
    stored = json.loads(answer.data)
    container = stored["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    assert "madeUpField" not in stored["spec"]
    assert container["volumeMounts"][-1] == {"name": "data", "mountPath": "/data"}  # the rest of the mount survives
    assert server.get_job(NS, job["metadata"]["name"]) == stored
    warnings = answer.headers.getlist("Warning")
    assert warnings == ([pruning.warning_header(p) for p in paths] if warned else [])


@pytest.mark.parametrize("validation", [None, "Strict"])
def test_a_job_of_declared_fields_is_stored_as_sent_with_the_crds_defaults(api, validation) -> None:
    server, api_client = api
    job = golden()
    assert "suspend" not in job["spec"]["runPolicy"]
    answer = post(api_client, job, validation)
    assert answer.status == 201 and answer.headers.getlist("Warning") == []
    stored = json.loads(answer.data)
    expected = copy.deepcopy(job)
    expected["spec"]["runPolicy"]["suspend"] = False  # the CRD's `default: false`, the one missing field it defaults
    del stored["metadata"], expected["metadata"]
    assert stored == expected


def master_spec(job: dict) -> dict:
    return job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]


NULLS = {
    # a null the API server drops (not nullable, no default): the create succeeds, Strict included, and says nothing
    "nodeSelector-null": ("nodeSelector", None, "dropped"),
    "tolerations-null": ("tolerations", None, "dropped"),
    "affinity-null": ("affinity", None, "dropped"),
}


@pytest.mark.parametrize("validation", [None, "Strict"])
@pytest.mark.parametrize("case", list(NULLS))
def test_a_null_for_a_declared_field_is_dropped_without_a_word(api, case: str, validation) -> None:
    server, api_client = api
    key, value, _ = NULLS[case]
    job = golden()
    master_spec(job)[key] = value
    answer = post(api_client, job, validation)
    assert answer.status == 201 and answer.headers.getlist("Warning") == []
    assert key not in master_spec(json.loads(answer.data))
    problems = admit(job)  # the model: a note, never a refusal
    assert [p.verdict for p in problems] == ["note"] and "null is dropped by the API server" in problems[0].message


def test_a_non_nullable_null_with_a_default_is_defaulted(api) -> None:
    server, api_client = api
    job = golden()
    container = master_spec(job)["containers"][0]
    container["ports"] = [{"containerPort": 23456, "name": "pytorchjob-port", "protocol": None}]
    answer = post(api_client, job, "Strict")
    assert answer.status == 201
    assert master_spec(json.loads(answer.data))["containers"][0]["ports"][0]["protocol"] == "TCP"
    problems = admit(job)
    assert [p.verdict for p in problems] == ["note"] and "replaced by the CRD's default 'TCP'" in problems[0].message


def test_a_null_list_item_is_invalid(api) -> None:
    server, api_client = api
    job = golden()
    master_spec(job)["tolerations"] = [None]
    with pytest.raises(ApiException) as raised:
        post(api_client, job, "Strict")
    assert raised.value.status == 422
    message = json.loads(raised.value.body)["message"]
    path = "spec.pytorchReplicaSpecs.Master.template.spec.tolerations[0]"
    assert f'{path} in body must be of type object: "null"' in message
    assert [p.verdict for p in admit(job)] == ["rejected"]


def test_a_cluster_crd_that_declares_less_refuses_what_ours_declares(api) -> None:
    """A cluster may run an older CRD than the vendored one: what it does not declare is refused under Strict."""
    server, api_client = api
    schema = pruning.crd_schema("pytorchjobs")
    del schema["properties"]["spec"]["properties"]["runPolicy"]["properties"]["cleanPodPolicy"]
    server.crd_schemas["pytorchjobs"] = schema
    job = golden()
    job["spec"].setdefault("runPolicy", {})["cleanPodPolicy"] = "None"
    with pytest.raises(ApiException) as raised:
        post(api_client, job, "Strict")
    assert 'unknown field "spec.runPolicy.cleanPodPolicy"' in json.loads(raised.value.body)["message"]


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_the_server_and_the_admission_model_read_the_crd_alike(path: Path) -> None:
    """Two readings of one schema, written apart: no golden job has an unknown field for either, and both name the
    same undeclared fields."""
    job = yaml.safe_load(path.read_text())
    plural = "trainjobs" if job["kind"] == "TrainJob" else "pytorchjobs"
    kept, unknown = pruning.prune(job, pruning.crd_schema(plural))
    assert unknown == [] and kept == job
    assert [p for p in admit(job) if p.verdict == PRUNED] == []
    bad, paths = with_undeclared_fields(job)
    _, unknown = pruning.prune(bad, pruning.crd_schema(plural))
    assert sorted(unknown) == sorted(paths)
    assert sorted(p.path for p in admit(bad) if p.verdict == PRUNED) == sorted(paths)
