"""Create puts every job through the admission model before anything is sent, asks for `fieldValidation=Strict`, and
adopts its own job after a lost answer or a 409. Every case goes through flytekit's `AsyncConnectorService` as
propeller calls it (CreateTask, then GetTask), against the fake API server through the real kubernetes client, and
counts the API requests it cost: a refused job costs no create, only the kind's one CRD read (before its first
create; tests/connector/test_crd_versions.py covers the older CRDs)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from flyteidl.core.execution_pb2 import TaskExecution

from backend_plugin.admission import SPEC_DIGEST_ANNOTATION, stamp
from backend_plugin.config import BackendConfig
from backend_plugin.connector import ServedJobConnector
from tests.connector.helpers import TEMPLATES, Propeller, template_of
from tests.fakeapi import pruning
from tests.fakeapi.server import FakeKubeApi

NS = "flytesnacks-development"
FAST = {"api_backoff_initial_s": 0.01, "api_backoff_max_s": 0.05, "api_create_budget_s": 10.0}
PLURAL = {"pytorchjob": "pytorchjobs", "trainjob": "trainjobs"}
CRD_READ = ("get", 200)
"""The kind's installed CRD, read once before its first create."""


def template(change: Callable[[dict], None] | None = None) -> Any:
    """The SDK's pod-template task (primary container `trainer`), changed by `change`."""
    data = json.loads((TEMPLATES / "sdk_pod_template.json").read_text())
    if change is not None:
        change(data["k8sPod"]["podSpec"])
    return template_of(data)


def undeclared_mount(pod_spec: dict) -> None:
    """A volume mount with `bindMountOptions`: the kubernetes client has it, neither vendored CRD declares it."""
    pod_spec["volumes"] = [{"name": "data", "emptyDir": {}}]
    pod_spec["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data", "bindMountOptions": ["rbind"]}]


def env(entries: dict[str, str]) -> Callable[[dict], None]:
    def change(pod_spec: dict) -> None:
        pod_spec["containers"][0]["env"] = [{"name": k, "value": v} for k, v in entries.items()]

    return change


@pytest.fixture
def propeller(fake_api) -> Iterator[Callable[..., Propeller]]:
    """`make(target)`: propeller's calls to a served connector of that target over the fake API."""
    made: list[ServedJobConnector] = []

    def make(target: str = "pytorchjob") -> Propeller:
        config = BackendConfig.from_dict(dict(target=target, watch_cache=False, **FAST))
        connector = ServedJobConnector(config=config, api_client_factory=lambda: fake_api.client)
        made.append(connector)
        return Propeller(fake_api.server, connector)

    yield make
    for connector in made:
        connector.close()


def refused(p: Propeller, tmp_path: Path, change: Callable[[dict], None]) -> str:
    """CreateTask, then GetTask, of a job the admission model refuses: its permanent failure's message, after
    checking that no API request but the kind's CRD read was made and no inputs.pb written."""
    meta, context = p.try_create(tmp_path, template=template(change))
    assert context.code is None, context.details  # an error in the metadata, not a gRPC error propeller retries
    answer = p.get(meta)
    assert answer.phase == TaskExecution.FAILED, answer
    # nothing left the connector but the CRD read: not a create, not a discovery, not a get of the job
    assert [(r.verb, r.resource) for r in p.server.requests] == [("get", "customresourcedefinitions")]
    assert not (tmp_path / "abc123" / "inputs.pb").exists()
    return answer.message


@pytest.mark.parametrize("target", ["pytorchjob", "trainjob"])
def test_an_undeclared_pod_field_is_refused_before_any_request(propeller, tmp_path, target) -> None:
    message = refused(propeller(target), tmp_path, undeclared_mount)
    assert "would not be admitted by the cluster" in message
    assert "pod_template" in message and "volumeMounts[0].bindMountOptions" in message
    assert "remove it from the pod template" in message  # what to do


def test_an_env_heavy_trainjob_is_refused_naming_the_setting(propeller, tmp_path) -> None:
    """120 task variables, the execution's one and the writer's own make more than the 128 a TrainJob admits."""
    heavy = env({f"VAR_{i}": "v" for i in range(120)})
    message = refused(propeller("trainjob"), tmp_path, heavy)
    assert "the TrainJob holds 132 environment entries (121 of the task's, 11 the backend wrote)" in message
    assert "more than the 128 spec.trainer.env admits (maxItems); keep at most 117 of your own" in message
    assert "keep at most" in message  # what to do


def test_the_same_env_heavy_task_is_created_as_a_pytorchjob(propeller, tmp_path) -> None:
    """The TrainJob's limit is no false positive on the kind without it."""
    p = propeller("pytorchjob")
    p.create(tmp_path, template=template(env({f"VAR_{i}": "v" for i in range(120)})))
    assert [(r.verb, r.status) for r in p.server.requests] == [CRD_READ, ("create", 201)]


def test_an_oversize_pytorchjob_is_refused_naming_the_setting(propeller, tmp_path) -> None:
    """800 kB in one variable: the PyTorchJob writes the pod template per role (1.6 MB, over etcd's 1.5 MiB)."""
    message = refused(propeller("pytorchjob"), tmp_path, env({"CONFIG_JSON": "j" * 800_000}))
    assert "environment" in message and "1.5 MiB" in message and "once per role" in message
    assert "ConfigMap" in message  # what to do instead
    assert "jjjjjjjjjj" not in message


def test_the_same_large_task_is_created_as_a_trainjob(propeller, tmp_path) -> None:
    p = propeller("trainjob")
    p.create(tmp_path, template=template(env({"CONFIG_JSON": "j" * 800_000})))
    assert [(r.verb, r.status) for r in p.server.requests] == [CRD_READ, ("create", 201)]


def partial_admission(_server: FakeKubeApi, job: dict) -> None:
    """A queue manager's mutating webhook: it suspends the job and adds its toleration to every pod template (the
    stored lists are longer than the ones sent: only the stamp tells the job is ours)."""
    job["spec"].setdefault("runPolicy", {})["suspend"] = True
    for replica in job["spec"].get("pytorchReplicaSpecs", {}).values():
        tolerations = replica["template"]["spec"].setdefault("tolerations", [])
        tolerations.append({"key": "kueue.x-k8s.io/flavor", "operator": "Exists", "effect": "NoSchedule"})


@pytest.mark.parametrize("mutated", [False, True], ids=["as-sent", "mutated-by-a-webhook"])
def test_a_lost_create_response_is_adopted(propeller, tmp_path, mutated) -> None:
    """The server creates the job, the connection ends before the answer: the connector finds its own job (by its
    stamp, whatever a webhook changed) and adopts it; propeller's second CreateTask gets a 409 and adopts it too."""
    p = propeller("pytorchjob")
    server = p.server
    if mutated:
        server.mutators.append(partial_admission)
    server.lose_response(verb="create")
    meta = p.create(tmp_path, template=template())
    (job,) = server.jobs()
    assert json.loads(meta)["uid"] == job["metadata"]["uid"]
    assert [(r.verb, r.status) for r in server.requests] == [CRD_READ, ("create", 201), ("get", 200)]
    assert server.calls("create")[0].query["fieldValidation"] == ["Strict"]
    assert job["metadata"]["annotations"][SPEC_DIGEST_ANNOTATION]
    tolerations = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["tolerations"]
    assert (len(tolerations) == 2) is mutated
    again = p.create(tmp_path, template=template())
    assert json.loads(again)["uid"] == job["metadata"]["uid"] and len(server.jobs()) == 1
    assert [(r.verb, r.status) for r in server.requests][3:] == [("create", 409), ("get", 200)]
    assert p.get(meta).error == ""


def test_a_409_for_a_different_job_is_a_conflict(propeller, tmp_path) -> None:
    """Another job of our name (stamped by its own creator): propeller gets an error naming it and where it
    differs, and the other job is left as it is."""
    p = propeller("pytorchjob")
    server = p.server
    name = json.loads(p.create(tmp_path, template=template()))["name"]
    theirs = server.get_job(NS, name)
    del theirs["metadata"]["annotations"][SPEC_DIGEST_ANNOTATION]
    theirs["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 7
    server.remove_job(NS, name)
    server.put_job(stamp(theirs))
    server.reset_log()
    _, context = p.try_create(tmp_path, template=template())
    assert context.code is not None
    assert (
        "a different PyTorchJob with this name already exists (differs in spec.pytorchReplicaSpecs.Worker.replicas)"
        in (context.details)
    )
    assert [(r.verb, r.status) for r in server.requests] == [("create", 409), ("get", 200)]
    assert server.get_job(NS, name)["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 7


@pytest.mark.parametrize("rbac", [True, False], ids=["crd-readable", "crd-forbidden"])
@pytest.mark.parametrize("target", ["pytorchjob", "trainjob"])
def test_a_cluster_crd_that_declares_less_is_refused_naming_the_field(propeller, tmp_path, target, rbac) -> None:
    """The cluster runs a CRD that lacks a field we send (here the pod template's tolerations), which the meaning
    needs: where the CRD can be read, the job is refused before any create; where it cannot, Strict makes the API
    server refuse the create, and the connector learns the field from the 400 and fails for good in its own words,
    without a second create of the same job and never with the raw `strict decoding error`."""
    p = propeller(target)
    schema = pruning.crd_schema(PLURAL[target])
    pod = (
        schema["properties"]["spec"]["properties"]["pytorchReplicaSpecs"]["additionalProperties"]
        if target == "pytorchjob"
        else schema["properties"]["spec"]["properties"]["runtimePatches"]["items"]["properties"]["trainingRuntimeSpec"]
    )
    pod_spec = _pod_spec_schema(pod)
    del pod_spec["properties"]["tolerations"]
    p.server.crd_schemas[PLURAL[target]] = schema
    if not rbac:
        p.server.forbid("get", "customresourcedefinitions")
    meta, context = p.try_create(tmp_path, template=template())
    assert context.code is None, context.details
    answer = p.get(meta)
    assert answer.phase == TaskExecution.FAILED
    assert "would not be admitted by the cluster" in answer.message and ".tolerations" in answer.message
    assert "does not declare it: upgrade " in answer.message
    assert "strict decoding error" not in answer.message
    expected = [CRD_READ] if rbac else [("get", 403), ("create", 400)]
    assert [(r.verb, r.status) for r in p.server.requests] == expected
    assert p.server.jobs(PLURAL[target]) == []


def _pod_spec_schema(node: dict) -> dict:
    """The first pod spec schema under `node` (a PodTemplateSpec's `spec`, found by its `containers`)."""
    props = node.get("properties") or {}
    if "containers" in props and "tolerations" in props:
        return node
    for child in [*props.values(), node.get("items"), node.get("additionalProperties")]:
        if isinstance(child, dict):
            found = _pod_spec_schema(child)
            if found:
                return found
    return {}
