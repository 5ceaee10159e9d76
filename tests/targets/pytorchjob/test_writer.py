"""The PyTorchJob writer: golden PyTorchJobs for every template dialect, replica specs per role (legacy v0, v1,
elastic), restart policies, and the job's metadata.

Regenerate the golden files with `python -m pytest tests/targets/pytorchjob/test_writer.py --update-golden` and review
the diff.
"""

from __future__ import annotations

import copy

import pytest
import yaml

from backend_plugin.errors import TemplateError
from backend_plugin.template import template_to_dict
from tests import golden as golden_files
from tests.helpers.jobs import (
    GKE,
    JOBS,
    SPOT,
    TEMPLATES,
    build,
    load,
    main_container,
    specs,
)

# golden name -> (template file, backend config); every template file in TEMPLATES must appear here.
GOLDEN = {
    "cpu_only": ("hand_cpu", None),
    "seed_gpu": ("hand_gpu_seed", None),
    "per_role": ("hand_per_role", None),
    "elastic": ("hand_elastic", None),
    "accelerator_mig": ("hand_accel_mig", GKE),
    "accelerator_amd": ("hand_accel_amd", GKE),
    "queue_gang_suspend": ("hand_queue_gang", None),
    "pod_template_merge": ("hand_pod_template", None),
    "legacy_v0": ("legacy_v0", None),
    "legacy_v0_elastic": ("legacy_v0_elastic", None),
    "official_container": ("official_container", None),
    "official_pod_template": ("official_pod_template", None),
    "official_elastic": ("official_elastic", None),
    "sdk_seed_gpu": ("sdk_seed_gpu", None),
    "sdk_per_role": ("sdk_per_role", None),
    "sdk_elastic": ("sdk_elastic", None),
    "sdk_master_only": ("sdk_master_only", None),
    "sdk_pod_template": ("sdk_pod_template", None),
    "sdk_scheduling": ("sdk_scheduling", None),
    "sdk_role_pod_templates": ("sdk_role_pod_templates", None),
    "secrets_timeout_spot": ("flytekit_secrets_spot", SPOT),
    "run_policy_zeros": ("hand_run_policy_zeros", None),
}


def seed_style(workers: int = 2) -> dict:
    """Our contract's seed GPU template with a given worker count."""
    t = load("hand_gpu_seed")
    t["custom"]["workerReplicas"]["replicas"] = workers
    return t


def test_every_template_has_a_golden():
    available = {p.stem for p in TEMPLATES.glob("*.json") if not p.stem.startswith("sdk_")}
    covered = {t for t, _ in GOLDEN.values()}
    assert available <= covered, f"templates without a golden job: {sorted(available - covered)}"


@pytest.mark.parametrize("golden", sorted(GOLDEN), ids=sorted(GOLDEN))
def test_golden(golden: str):
    template_name, config = GOLDEN[golden]
    if not (TEMPLATES / f"{template_name}.json").exists():
        pytest.skip(f"{template_name}.json not committed yet")
    job = build(load(template_name), config)
    path = JOBS / f"{golden}.yaml"
    rendered = yaml.safe_dump(job, sort_keys=False, width=120)
    text = golden_files.text(path, rendered)
    assert yaml.safe_load(text) == job
    assert text == rendered, "key order changed; regenerate with --update-golden and review"
    assert "&id" not in rendered, "objects shared between replicas render as YAML anchors"


def test_build_is_deterministic_and_does_not_mutate_inputs():
    template = load("hand_pod_template")
    before = copy.deepcopy(template)
    first = build(template)
    second = build(template)
    assert first == second
    assert yaml.safe_dump(first, sort_keys=False) == yaml.safe_dump(second, sort_keys=False)
    assert template == before


def test_v0_hundred_workers_take_task_resources():
    t = load("legacy_v0")
    t["custom"] = {"workers": 100.0}  # Struct JSON turns ints into floats
    job = build(t)
    assert specs(job)["Worker"]["replicas"] == 100
    assert specs(job)["Master"]["replicas"] == 1
    for role in ("Master", "Worker"):
        assert main_container(job, role)["resources"] == {
            "requests": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"},
            "limits": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"},
        }


@pytest.mark.parametrize(
    "custom",
    [{"workers": 0}, {"masterReplicas": {"replicas": 1}, "workerReplicas": {"replicas": 0}}, {"masterReplicas": {}}],
    ids=["v0-zero-workers", "v1-zero-workers", "v1-no-worker-spec"],
)
def test_zero_workers_is_master_only(custom: dict):
    t = load("legacy_v0")
    t["custom"] = custom
    if "workers" not in custom:
        t["taskTypeVersion"] = 1
    job = build(t)
    assert list(specs(job)) == ["Master"]


ELASTIC_CONFIG = {"rdzvBackend": "c10d", "minReplicas": 1, "maxReplicas": 3, "nprocPerNode": 4, "maxRestarts": 2}


@pytest.mark.parametrize("workers", [2, 3, 0], ids=["workers-2", "workers-3", "workers-0-takes-max"])
def test_v0_elastic_is_the_v1_elastic_policy(workers: int):
    """Flyte's Go plugin accepts `{"workers": N, "elasticConfig": {...}}` at version 0: no master, N workers."""
    v0 = load("legacy_v0")
    v0["custom"] = {"workers": float(workers), "elasticConfig": dict(ELASTIC_CONFIG)}
    v1 = load("legacy_v0")
    v1["taskTypeVersion"] = 1
    v1["custom"] = {"workerReplicas": {"replicas": workers}, "elasticConfig": dict(ELASTIC_CONFIG)}
    old, new = build(v0), build(v1)
    assert list(specs(old)) == ["Worker"]
    assert specs(old)["Worker"]["replicas"] == (workers or 3)
    expected = {"minReplicas": 1, "maxReplicas": 3, "rdzvBackend": "c10d", "maxRestarts": 2}
    assert old["spec"]["elasticPolicy"] == new["spec"]["elasticPolicy"] == expected
    assert old["spec"]["nprocPerNode"] == new["spec"]["nprocPerNode"] == "4"
    assert old["spec"] == new["spec"]


def test_labels_and_annotations_on_job_and_every_pod():
    job = build(load("hand_queue_gang"))
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert job["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"
    for role in ("Master", "Worker"):
        meta = specs(job)[role]["template"]["metadata"]
        assert meta["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
        assert meta["labels"]["execution-id"] == "f7a3c2e1b0"
        assert meta["annotations"]["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "false"
        assert meta["annotations"]["example.com/cost-center"] == "ml"
    assert job["spec"]["runPolicy"] == {
        "cleanPodPolicy": "All",
        "ttlSecondsAfterFinished": 86400,
        "schedulingPolicy": {"queue": "team-a", "priorityClass": "high-priority", "minAvailable": 4},
        "suspend": True,
    }


def test_elastic_policy_without_deprecated_nproc():
    job = build(load("hand_elastic"))
    assert job["spec"]["elasticPolicy"] == {"minReplicas": 2, "maxReplicas": 4, "rdzvBackend": "c10d", "maxRestarts": 3}
    assert job["spec"]["nprocPerNode"] == "2"
    assert list(specs(job)) == ["Worker"]
    assert job["spec"]["runPolicy"]["schedulingPolicy"] == {"minAvailable": 2}


@pytest.mark.parametrize(
    "key, value, role, expected",
    [
        ("pytorch.worker.restart_policy", "ExitCode", "Worker", "ExitCode"),
        ("pytorch.master.restart_policy", "ExitCode", "Master", "ExitCode"),
        (None, None, "Worker", "OnFailure"),
        (None, None, "Master", "Never"),
    ],
    ids=["worker-exitcode", "master-exitcode", "proto-onfailure", "default-never"],
)
def test_restart_policy(key, value, role, expected):
    t = load("hand_per_role")
    t["config"].pop("pytorch.worker.restart_policy")
    if key:
        t["config"][key] = value
    assert specs(build(t))[role]["restartPolicy"] == expected


def test_common_replica_spec_is_preferred():
    t = load("hand_cpu")
    t["custom"]["workerReplicas"] = {"replicas": 9, "common": {"replicas": 3, "image": "img:common"}}
    job = build(t)
    assert specs(job)["Worker"]["replicas"] == 3
    assert main_container(job, "Worker")["image"] == "img:common"


def test_accepts_proto_bytes_and_flytekit_model():
    from flyteidl.core import tasks_pb2
    from flytekit.models.task import TaskTemplate
    from google.protobuf import json_format

    as_dict = load("official_pod_template")
    proto = json_format.ParseDict(as_dict, tasks_pb2.TaskTemplate())
    model = TaskTemplate.from_flyte_idl(proto)
    expected = build(as_dict)
    for form in (proto, proto.SerializeToString(), model):
        assert build(form) == expected
    with pytest.raises(TemplateError, match="not a serialized TaskTemplate"):
        template_to_dict(b"\xff\xff\xff")
