"""The one reader (`read_template` -> `TaskSpec`): every template dialect, its cache, and the templates it refuses."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from flyteidl.core import tasks_pb2
from google.protobuf import json_format

from backend_plugin.config import BackendConfig
from backend_plugin.errors import TemplateError
from backend_plugin.execution import ExecutionMetadata
from backend_plugin.spec import TaskSpec
from backend_plugin.targets.pytorchjob.writer import to_pytorchjob
from backend_plugin.template import read_template, template_to_dict
from pytorch_contract import template_keys as keys
from tests.helpers.jobs import build, build_pytorchjob

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "templates"
META = ExecutionMetadata(namespace="ns", job_name="j-1")


def load(name: str) -> dict:
    return json.loads((TEMPLATES / f"{name}.json").read_text())


@pytest.mark.parametrize("name", sorted(p.stem for p in TEMPLATES.glob("*.json")))
def test_every_template_reads_into_a_spec_the_writer_turns_into_the_builders_job(name: str) -> None:
    template = load(name)
    spec = read_template(template)
    assert isinstance(spec, TaskSpec)
    assert [g.role for g in spec.replicas] in (["Master"], ["Master", "Worker"], ["Worker"])
    assert to_pytorchjob(spec, META, BackendConfig()) == build_pytorchjob(template, META)


def test_spec_is_read_only_and_shared_per_content() -> None:
    template = load("hand_pod_template")
    spec = read_template(template)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.nproc_per_node = "2"  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.pod.spec["containers"][0]["image"] = "x"  # type: ignore[index]
    assert read_template(json.loads(json.dumps(template))) is spec
    # a writer's copy is its own: building twice gives equal jobs that share no objects
    first, second = build_pytorchjob(template, META), build_pytorchjob(template, META)
    assert first == second
    pod = first["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert pod is not second["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]


def test_changed_content_is_read_again() -> None:
    template = load("hand_cpu")
    before = read_template(template)
    template["config"][keys.NPROC_PER_NODE] = "3"
    assert read_template(template).nproc_per_node == "3" != before.nproc_per_node


def test_errors_are_not_cached() -> None:
    template = load("hand_cpu")
    template["config"][keys.QUEUE] = "bad queue"
    for _ in range(2):
        with pytest.raises(TemplateError, match=r"config\['pytorch.queue'\]='bad queue'"):
            read_template(template)


def test_run_policy_zeros_are_kept_in_the_spec_and_in_the_job() -> None:
    template = load("sdk_seed_gpu")
    template["custom"]["runPolicy"] = {"backoffLimit": 0, "ttlSecondsAfterFinished": 0}
    spec = read_template(template)
    assert (spec.run_policy.backoff_limit, spec.run_policy.ttl_seconds_after_finished) == (0, 0)
    assert spec.run_policy.active_deadline_seconds is None
    run_policy = to_pytorchjob(spec, META, BackendConfig.from_dict(dict(backoff_limit=4)))["spec"]["runPolicy"]
    assert (run_policy["backoffLimit"], run_policy["ttlSecondsAfterFinished"]) == (0, 0)


def test_elastic_spec_carries_nproc_without_a_private_key() -> None:
    spec = read_template(load("hand_elastic"))
    assert spec.elastic is not None and [g.role for g in spec.replicas] == ["Worker"]
    job = to_pytorchjob(spec, META)
    assert set(job["spec"]["elasticPolicy"]) == {"minReplicas", "maxReplicas", "rdzvBackend", "maxRestarts"}


def test_a_protobuf_template_gives_the_same_job_in_every_process() -> None:
    template = load("official_pod_template")
    message = json_format.ParseDict(template, tasks_pb2.TaskTemplate())
    as_dict = template_to_dict(message)
    # protobuf maps and Structs iterate in a per-process order; the reader sorts their keys
    pod = as_dict["k8sPod"]["podSpec"]
    assert list(pod) == sorted(pod)
    assert build_pytorchjob(message, META) == build_pytorchjob(message.SerializeToString(), META)


def test_the_template_format_page_lists_exactly_the_contracts_config_keys() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "template-format.md").read_text(encoding="utf-8")
    rows = {line.split("|")[1].strip().strip("`") for line in page.splitlines() if line.startswith("| `pytorch.")}
    assert rows == set(keys.CONFIG_KEYS)


def _set(path: str, value):
    def mutate(t: dict) -> None:
        keys = path.split("/")
        node = t
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = value

    return mutate


def _drop(*keys: str):
    def mutate(t: dict) -> None:
        for k in keys:
            t.pop(k, None)

    return mutate


def _v0(custom: dict):
    def mutate(t: dict) -> None:
        t["custom"] = custom
        t["taskTypeVersion"] = 0

    return mutate


INVALID = {
    "unknown-config-key": (_set("config/pytorch.qeue", "a"), r"config\['pytorch.qeue'\].*unknown key.*pytorch.queue"),
    "bad-quantity": (
        _set("container/resources", {"requests": [{"name": "MEMORY", "value": "8Gx"}]}),
        r"container.resources.requests\[0\].value='8Gx'.*quantity",
    ),
    "negative-replicas": (_set("custom/workerReplicas/replicas", -1), r"workerReplicas.replicas=-1.*>= 0"),
    "negative-v0-workers": (_v0({"workers": -2}), r"custom.workers=-2.*>= 0"),
    "v0-extra-keys": (_v0({"workers": 2, "nodes": 1}), r"unknown legacy keys \['nodes'\]"),
    "v0-bad-elastic": (
        _v0({"workers": 2, "elasticConfig": {"minReplicas": 3, "maxReplicas": 2}}),
        r"elasticConfig.*minReplicas=3, maxReplicas=2",
    ),
    "v0-fractional-workers": (_v0({"workers": 1.5}), r"custom: not a version 0 .*DistributedPyTorchTrainingTask"),
    "no-container-or-pod": (_drop("container"), r"container=None.*container or a k8sPod"),
    "no-custom": (_drop("custom"), r"custom=None.*missing"),
    "unknown-custom-field": (_set("custom/workerReplica", {}), r"custom: not a .*DistributedPyTorchTrainingTask"),
    "bad-restart-policy": (_set("config/pytorch.worker.restart_policy", "Sometimes"), r"restart_policy'\]='Sometimes'"),
    "bad-clean-policy": (_set("config/pytorch.clean_pod_policy", "Some"), r"clean_pod_policy'\]='Some'.*None"),
    "bad-bool": (_set("config/pytorch.suspend", "yes"), r"pytorch.suspend'\]='yes'.*'true' or 'false'"),
    "bad-nproc": (_set("config/pytorch.nproc_per_node", "0"), r"nproc_per_node'\]='0'.*positive integer"),
    "bad-shm": (_set("config/pytorch.shm_size", "lots"), r"shm_size'\]='lots'.*quantity"),
    "min-available-too-big": (_set("config/pytorch.min_available", "99"), r"min_available'\]='99'.*1\.\.3"),
    "bad-queue": (_set("config/pytorch.queue", "team a!"), r"pytorch.queue'\]='team a!'.*label value"),
    "bad-gpu-resource": (_set("config/pytorch.gpu_resource", "gpu"), r"gpu_resource'\]='gpu'.*extended resource"),
    "bad-accelerator": (_set("config/pytorch.accelerator", "A100 80GB"), r"accelerator'\]='A100 80GB'.*label value"),
    "gpu-request-ne-limit": (
        _set(
            "container/resources",
            {"requests": [{"name": "GPU", "value": "1"}], "limits": [{"name": "GPU", "value": "2"}]},
        ),
        r"nvidia.com/gpu.*request 1, limit 2.*must equal",
    ),
    "request-over-limit": (
        _set(
            "container/resources",
            {"requests": [{"name": "CPU", "value": "4"}], "limits": [{"name": "CPU", "value": "2"}]},
        ),
        r"'cpu'.*request 4 > limit 2",
    ),
    "wrong-type": (_set("type", "python-task"), r"type='python-task'.*'pytorch'"),
    "env-name-k8s-rejects": (
        _set("container/env", [{"key": "A=B", "value": "1"}]),
        r"container.env\[0\].key: 'A=B' is not an environment variable name Kubernetes accepts in any version",
    ),
    "too-many-workers": (
        _set("custom/workerReplicas/replicas", 10**7),
        r"workerReplicas.replicas=10000000: at most 100000: .*must fit 63",
    ),
    "too-many-v0-workers": (_v0({"workers": 200000}), r"custom.workers=200000: at most 100000"),
    "unicode-nproc": (_set("config/pytorch.nproc_per_node", "\uff14"), r"nproc_per_node'\]='\uff14'.*positive integer"),
    "bad-elastic": (
        _set("custom", {"workerReplicas": {"replicas": 2}, "elasticConfig": {"minReplicas": 3, "maxReplicas": 2}}),
        r"elasticConfig.*minReplicas=3, maxReplicas=2",
    ),
}


@pytest.mark.parametrize("case", sorted(INVALID), ids=sorted(INVALID))
def test_invalid_templates(case: str):
    mutate, message = INVALID[case]
    template = load("hand_cpu")
    template["custom"]["workerReplicas"]["replicas"] = 2
    mutate(template)
    with pytest.raises(TemplateError, match=message):
        build_pytorchjob(template, META)


def test_pod_template_without_primary_container():
    t = load("hand_pod_template")
    t["config"]["primary_container_name"] = "trainer"
    with pytest.raises(TemplateError, match=r"k8sPod.podSpec.containers=\['main', 'log-shipper'\].*'trainer'"):
        build_pytorchjob(t, META)


def test_unprefixed_config_keys_are_ignored():
    t = load("hand_cpu")
    t["config"]["some.other.plugin"] = "x"
    assert build(t) == build(load("hand_cpu"))
