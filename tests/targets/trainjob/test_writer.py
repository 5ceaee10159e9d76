"""The TrainJob writer: golden TrainJobs, what a TrainJob cannot express, names, nproc, and the validator itself.

Every TrainJob built here passes `tests.kube_schema.assert_valid_trainjob` (the Trainer v2.3 CRD, the webhook's rules
and the node pod the default runtime renders). Regenerate the golden files with
`python -m pytest --update-golden tests/targets/trainjob/test_writer.py` and review the diff.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Optional

import pytest
import yaml

from backend_plugin.config import BackendConfig
from backend_plugin.errors import TemplateError
from backend_plugin.targets.trainjob.writer import (
    MANAGER,
    dropped_defaults,
    max_name_length,
    to_trainjob,
    trainjob_name,
)
from backend_plugin.template import read_template
from tests import golden as golden_files
from tests.helpers.jobs import GKE, META, SPOT, load
from tests.kube_schema import DNS1035, assert_valid_trainjob, trainjob_webhook_errors

GOLDEN_DIR = Path(__file__).resolve().parents[2] / "data" / "trainjobs"


def queue_suspend() -> dict:
    """The CPU template with a Kueue queue and created suspended."""
    t = load("hand_cpu")
    t["config"].update({"pytorch.queue": "team-a", "pytorch.suspend": "true"})
    return t


# golden name -> (template, backend config)
GOLDEN: dict[str, tuple[Any, Optional[BackendConfig]]] = {
    "seed_gpu": (lambda: load("sdk_seed_gpu"), None),  # the seed decorator: 3 GPU nodes
    "cpu_only": (lambda: load("hand_cpu"), None),
    "accelerator_mig": (lambda: load("hand_accel_mig"), GKE),
    "queue_suspend": (queue_suspend, None),
    "pod_template": (lambda: load("sdk_pod_template"), None),
    "secrets_spot": (lambda: load("flytekit_secrets_spot"), SPOT),
}


def build(template: dict, config: Optional[BackendConfig] = None, **meta: Any) -> dict:
    """Write with META (fields overridden by `meta`) and validate the TrainJob."""
    m = copy.deepcopy(META)
    for key, value in meta.items():
        setattr(m, key, value)
    job = to_trainjob(read_template(template), m, config)
    assert_valid_trainjob(job)
    return job


def pod_patch(job: dict) -> dict:
    """The node pod template of the one runtime patch."""
    (patch,) = job["spec"]["runtimePatches"]
    assert patch["manager"] == MANAGER
    (node,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert node["name"] == "node"
    return node["template"]["spec"]["template"]


@pytest.mark.parametrize("golden", sorted(GOLDEN))
def test_golden(golden: str):
    make, config = GOLDEN[golden]
    job = build(make(), config)
    path = GOLDEN_DIR / f"{golden}.yaml"
    rendered = yaml.safe_dump(job, sort_keys=False, width=120)
    committed = golden_files.text(path, rendered)
    assert yaml.safe_load(committed) == job
    assert committed == rendered, "key order changed; regenerate with --update-golden and review"


def test_seed_decorator_becomes_three_gpu_nodes():
    job = build(load("sdk_seed_gpu"))
    trainer = job["spec"]["trainer"]
    assert trainer["numNodes"] == 3 and trainer["numProcPerNode"] == 1
    assert trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == "1"
    assert trainer["command"][0] == "pyflyte-execute" and "{{" not in " ".join(trainer["command"])
    assert job["spec"]["runtimeRef"] == {
        "name": "torch-distributed",
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
    }
    spec = pod_patch(job)["spec"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert spec["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    assert spec["containers"] == [{"name": "node", "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]}]


def test_queue_label_and_suspend_on_the_trainjob():
    job = build(queue_suspend())
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert job["spec"]["suspend"] is True


def test_accelerator_affinity_and_mig_resource():
    job = build(load("hand_accel_mig"), GKE)
    terms = pod_patch(job)["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": "cloud.google.com/gke-accelerator", "operator": "In", "values": ["nvidia-tesla-a100"]}
    ]
    assert "nvidia.com/mig-1g.5gb" in job["spec"]["trainer"]["resourcesPerNode"]["limits"]


def test_timeout_runtime_and_managed_by_from_config():
    t = load("hand_cpu")
    t.setdefault("metadata", {})["timeout"] = "600s"
    config = BackendConfig.from_dict(
        dict(
            trainjob_runtime_name="torch-nccl",
            trainjob_runtime_kind="TrainingRuntime",
            trainjob_managed_by="kueue.x-k8s.io/multikueue",
        )
    )
    spec = build(t, config)["spec"]
    assert spec["activeDeadlineSeconds"] == 600
    assert spec["runtimeRef"]["name"] == "torch-nccl" and spec["runtimeRef"]["kind"] == "TrainingRuntime"
    assert spec["managedBy"] == "kueue.x-k8s.io/multikueue"


# ---------------------------------------------------------------------------------------------------------------
# What a TrainJob cannot express: refused by name, with the alternative


def _with(name: str, edit) -> dict:
    t = load(name)
    edit(t)
    return t


REFUSED = [
    pytest.param(lambda: load("sdk_elastic"), "Elastic(nnodes=", id="elastic"),
    pytest.param(
        lambda: load("hand_per_role"), "Worker(image=...) differs from Master(image=...)", id="per-role-image"
    ),
    pytest.param(
        lambda: load("hand_accel_amd"),
        "Worker(requests/limits=...) differs from Master(requests/limits=...)",
        id="per-role-resources",
    ),
    pytest.param(lambda: load("hand_per_role"), "Worker(restart_policy='ExitCode')", id="restart-policy"),
    pytest.param(lambda: load("hand_per_role"), "RunPolicy(backoff_limit=3)", id="backoff-limit"),
    pytest.param(lambda: load("hand_gpu_seed"), "RunPolicy(ttl_seconds_after_finished=86400)", id="ttl"),
    pytest.param(lambda: load("hand_queue_gang"), "RunPolicy(clean_pod_policy='All')", id="clean-pod-policy"),
    pytest.param(lambda: load("hand_queue_gang"), "RunPolicy(gang_scheduling=True)", id="gang"),
    pytest.param(lambda: load("hand_queue_gang"), "RunPolicy(priority_class='high-priority')", id="priority-class"),
    pytest.param(
        lambda: load("sdk_role_pod_templates"),
        "Master(pod_template=...) gives the Master its own pod template",
        id="per-role-pod-template",
    ),
    pytest.param(
        lambda: _with("hand_cpu", lambda t: t["config"].update({"pytorch.min_available": "2"})),
        "RunPolicy(min_available=2)",
        id="min-available",
    ),
    pytest.param(
        lambda: _with("hand_cpu", lambda t: t["container"]["env"].append({"key": "PET_NODE_RANK", "value": "3"})),
        "env ['PET_NODE_RANK']",
        id="reserved-env",
    ),
]


@pytest.mark.parametrize("make, setting", REFUSED)
def test_refused_with_the_setting_and_the_alternative(make, setting: str):
    with pytest.raises(TemplateError) as err:
        to_trainjob(read_template(make()), META)
    message = str(err.value)
    assert setting in message
    assert "target: pytorchjob" in message or "rename" in message


def test_pod_template_fields_a_patch_cannot_carry_are_refused():
    t = load("sdk_pod_template")
    t["k8sPod"]["podSpec"]["hostNetwork"] = True
    t["k8sPod"]["podSpec"]["containers"][0]["ports"] = [{"containerPort": 8080}]
    with pytest.raises(TemplateError) as err:
        to_trainjob(read_template(t), META)
    assert "pod_template spec.hostNetwork" in str(err.value)
    assert "pod_template primary container's ports" in str(err.value)
    assert "target: pytorchjob" in str(err.value)


def test_backend_defaults_without_an_equivalent_are_warnings_not_errors():
    spec = read_template(load("sdk_seed_gpu"))
    assert dropped_defaults(spec, BackendConfig()) == []  # our own defaults: nobody set them, nothing to say
    assert dropped_defaults(spec, BackendConfig.from_dict(dict(ttl_seconds_after_finished=3600))) == [
        "backend ttl_seconds_after_finished=3600 is not applied: a TrainJob has no TTL (the connector deletes the "
        "jobs it finalizes)"
    ]
    config = BackendConfig.from_dict(dict(ttl_seconds_after_finished=None, backoff_limit=2, gang_scheduling=True))
    found = dropped_defaults(spec, config)
    assert [w.split("=")[0] for w in found] == ["backend backoff_limit", "backend gang_scheduling"]
    assert dropped_defaults(spec, BackendConfig.from_dict(dict(ttl_seconds_after_finished=None))) == []
    build(load("sdk_seed_gpu"), config)  # still written


# ---------------------------------------------------------------------------------------------------------------
# names and process counts


@pytest.mark.parametrize("nodes", [1, 3, 10, 1000, 100000])
def test_names_fit_the_trainjob_and_its_pods(nodes: int):
    long = "a" * 41 + "-12345678"  # 50: the longest execution job name
    name = trainjob_name(long, nodes)
    assert DNS1035.match(name) and name.endswith("-12345678")
    assert len(f"{name}-node-0-{nodes - 1}-xxxxx") <= 63
    assert len(name) == min(50, max_name_length(nodes))


def test_long_execution_name_is_shortened_and_stays_valid():
    job = build(load("hand_cpu"), job_name="r" + "x" * 40 + "-n0-0-1a2b3c4d")
    assert job["metadata"]["name"].endswith("-1a2b3c4d")
    assert trainjob_webhook_errors(job) == []


@pytest.mark.parametrize(
    "nproc, gpu, expected",
    [
        ("4", True, 4),
        ("auto", True, None),
        ("auto", False, 1),
        (None, False, 1),
        ("gpu", True, None),
        ("cpu", False, None),
    ],
    ids=["int", "auto-gpu", "auto-cpu", "absent-cpu", "gpu", "cpu"],
)
def test_num_proc_per_node(nproc: Optional[str], gpu: bool, expected: Optional[int]):
    t = load("hand_cpu")
    t["config"].pop("pytorch.nproc_per_node", None)
    if nproc is not None:
        t["config"]["pytorch.nproc_per_node"] = nproc
    if gpu:
        t["container"]["resources"] = {"limits": [{"name": "GPU", "value": "1"}]}
    assert build(t)["spec"]["trainer"].get("numProcPerNode") == expected


# ---------------------------------------------------------------------------------------------------------------
# the validator catches what the webhook would reject


def test_validator_rejects_what_the_webhook_rejects():
    job = build(load("sdk_seed_gpu"))
    bad = copy.deepcopy(job)
    bad["spec"]["trainer"]["env"].append({"name": "PET_MASTER_PORT", "value": "1"})
    bad["spec"]["runtimePatches"][0]["manager"] = "no-domain"
    node = bad["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    node["template"]["spec"]["template"]["spec"]["containers"][0]["image"] = "x"
    node["template"]["spec"]["template"]["spec"]["priorityClassName"] = "high"
    bad["metadata"]["name"] = "x" * 50
    errors = " ".join(trainjob_webhook_errors(bad))
    for fragment in ("PET_MASTER_PORT", "domain-prefixed", "['image']", "priorityClassName", "pod name"):
        assert fragment in errors
    schema_bad = copy.deepcopy(job)
    schema_bad["spec"]["trainer"]["numNodes"] = "three"
    with pytest.raises(AssertionError, match="numNodes"):
        assert_valid_trainjob(schema_bad)


# ---------------------------------------------------------------------------------------------------------------
# config and render
