"""The pure builder: golden PyTorchJobs for every template dialect, Go-plugin behaviour, job names, bad templates.

Regenerate the golden files with `python -m pytest tests/backend/test_builder.py --update-golden` and review the diff.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys

import pytest
import yaml

from backend_plugin.config import BackendConfig
from backend_plugin.errors import TemplateError
from backend_plugin.execution import job_name
from backend_plugin.template import template_to_dict
from pytorch_contract.k8s_names import JOB_NAME_MAX_LENGTH
from tests import golden as golden_files
from tests.helpers.jobs import (
    GKE,
    JOBS,
    META,
    SPOT,
    TEMPLATES,
    build,
    build_pytorchjob,
    load,
    main_container,
    pod,
    specs,
)
from tests.kube_schema import DNS1035

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


# ---------------------------------------------------------------------------------------------------------------
# golden files


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


# ---------------------------------------------------------------------------------------------------------------
# behaviour of Flyte's Go plugin that must be kept


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


def test_gpu_tolerations_only_on_gpu_replicas():
    job = build(load("hand_per_role"))
    master, worker = pod(job, "Master"), pod(job, "Worker")
    assert "tolerations" not in master and "affinity" not in master and "nodeSelector" not in master
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in worker["tolerations"]
    assert {"key": "flyte/gpu", "operator": "Equal", "value": "dedicated", "effect": "NoSchedule"} in worker[
        "tolerations"
    ]
    assert main_container(job, "Worker")["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert "nvidia.com/gpu" not in main_container(job, "Master")["resources"].get("limits", {})


@pytest.mark.parametrize(
    "config, key, values, toleration",
    [
        (
            None,
            "nvidia.com/gpu.product",
            ["nvidia-tesla-a100"],
            {
                "key": "nvidia.com/gpu.product",
                "operator": "Equal",
                "value": "nvidia-tesla-a100",
                "effect": "NoSchedule",
            },
        ),
        (
            BackendConfig.from_dict(dict(accelerator_label="k8s.amazonaws.com/accelerator")),
            "k8s.amazonaws.com/accelerator",
            ["nvidia-tesla-a100"],
            {
                "key": "k8s.amazonaws.com/accelerator",
                "operator": "Equal",
                "value": "nvidia-tesla-a100",
                "effect": "NoSchedule",
            },
        ),
        (
            BackendConfig.from_dict(
                dict(
                    accelerators={
                        "nvidia-tesla-a100": {
                            "node_selector": {
                                "nvidia.com/gpu.product": ["NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-SXM4-80GB"]
                            },
                            "tolerations": [
                                {"key": "dedicated", "operator": "Equal", "value": "a100", "effect": "NoSchedule"}
                            ],
                        }
                    }
                )
            ),
            "nvidia.com/gpu.product",
            ["NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-SXM4-80GB"],
            {"key": "dedicated", "operator": "Equal", "value": "a100", "effect": "NoSchedule"},
        ),
    ],
    ids=["gfd-default-label", "eks-label", "mapped-type"],
)
def test_accelerator_affinity_and_toleration_on_gpu_replicas(config, key, values, toleration):
    t = load("hand_per_role")
    t["config"]["pytorch.accelerator"] = "nvidia-tesla-a100"
    job = build(t, config)
    worker = pod(job, "Worker")
    terms = worker["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": key, "operator": "In", "values": values}]}]
    assert toleration in worker["tolerations"]
    assert "affinity" not in pod(job, "Master") and "tolerations" not in pod(job, "Master")


def test_accelerator_is_added_to_every_existing_node_selector_term():
    t = load("hand_pod_template")
    terms = t["k8sPod"]["podSpec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    terms["nodeSelectorTerms"].append({"matchExpressions": [{"key": "pool", "operator": "In", "values": ["b"]}]})
    job = build(t)
    got = pod(job, "Worker")["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    for term in got["nodeSelectorTerms"]:
        assert {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["nvidia-tesla-a100"]} in term[
            "matchExpressions"
        ]
    assert len(got["nodeSelectorTerms"]) == 2


def test_mig_partition_selects_the_mig_resource():
    job = build(load("hand_accel_mig"))
    limits = main_container(job, "Worker")["resources"]["limits"]
    assert limits == {"nvidia.com/mig-1g.5gb": "1"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod(job, "Worker")["tolerations"]


def test_task_gpu_resource_overrides_config():
    job = build(load("hand_accel_amd"))
    assert main_container(job, "Worker")["resources"]["limits"] == {"amd.com/gpu": "8"}
    assert main_container(job, "Worker")["resources"]["requests"]["amd.com/gpu"] == "8"
    assert "tolerations" not in pod(job, "Master")


@pytest.mark.parametrize(
    "template", ["hand_cpu", "hand_per_role", "hand_pod_template", "official_pod_template", "legacy_v0"]
)
def test_image_override_reaches_every_replica_without_its_own_image(template: str):
    job = build(load(template), image_override="registry.local/override:2")
    t = load(template)
    replica_image = t["custom"].get("workerReplicas", {}).get("image") if isinstance(t["custom"], dict) else None
    assert main_container(job, "Master")["image"] in (
        "registry.local/override:2",
        t["config"].get("pytorch.master.image") if t.get("config") else None,
    )
    expected_worker = replica_image or "registry.local/override:2"
    assert main_container(job, "Worker")["image"] == expected_worker


def test_placeholders_filled_in_every_container():
    job = build(load("hand_pod_template"))
    args = main_container(job, "Worker")["args"]
    joined = " ".join(args)
    assert "{{" not in joined
    assert args[args.index("--inputs") + 1] == META.input_path
    assert args[args.index("--output-prefix") + 1] == META.output_prefix
    assert args[args.index("--raw-output-data-prefix") + 1] == META.raw_output_prefix
    assert args[args.index("--checkpoint-path") + 1] == META.checkpoint_prefix
    sidecar = [c for c in pod(job, "Worker")["containers"] if c["name"] == "log-shipper"][0]
    assert sidecar["args"] == ["--prefix", META.output_prefix]


def test_input_prefix_and_spelling_variants():
    t = load("hand_cpu")
    t["container"]["args"] = ["{{ .Input }}", "{{.inputPrefix}}", "{{$outputPrefix}}", "{{.unknown}}"]
    job = build(t)
    assert main_container(job, "Master")["args"] == [
        META.input_path,
        "s3://bucket/metadata/f7a3c2e1b0/n0/data",
        META.output_prefix,
        "{{.unknown}}",
    ]


def test_environment_layers():
    t = load("hand_cpu")
    t["container"]["env"] = [{"key": "A", "value": "template"}, {"key": "B", "value": "template"}]
    job = build(t, environment={"B": "execution", "C": "execution"})
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in main_container(job, "Worker")["env"]}
    assert env["A"] == "template" and env["B"] == "execution" and env["C"] == "execution"
    # Flyte's distributed error strategy: one error-<uuid>.pb per replica, naming its pod
    assert env["_F_DES"] == "Earliest" and env["_F_WN"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["FLYTE_INTERNAL_EXECUTION_ID"] == "f7a3c2e1b0"
    assert env["FLYTE_INTERNAL_TASK_NAME"] == "train.train"
    assert env["FLYTE_ATTEMPT_NUMBER"] == "0"


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


@pytest.mark.parametrize(
    "template, mounts, volumes",
    [
        ("hand_cpu", [{"name": "dshm", "mountPath": "/dev/shm"}], [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]),
        (
            "hand_per_role",
            [{"name": "dshm", "mountPath": "/dev/shm"}],
            [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}],
        ),
        (
            "official_pod_template",
            [{"mountPath": "/dev/shm", "name": "shm"}],
            [{"emptyDir": {"medium": "Memory"}, "name": "shm"}],
        ),
    ],
    ids=["default-no-limit", "task-size", "template-already-has-one"],
)
def test_shared_memory(template: str, mounts: list, volumes: list):
    job = build(load(template))
    for role in specs(job):
        assert main_container(job, role)["volumeMounts"] == mounts
        assert pod(job, role)["volumes"] == volumes


def test_shared_memory_disabled_by_zero():
    t = load("hand_cpu")
    t["config"]["pytorch.shm_size"] = "0"
    job = build(t)
    assert "volumes" not in pod(job, "Worker") and "volumeMounts" not in main_container(job, "Worker")


def test_pod_template_merge_keeps_user_fields():
    job = build(load("hand_pod_template"))
    spec = pod(job, "Worker")
    assert [c["name"] for c in spec["containers"]] == ["pytorch", "log-shipper"]
    assert spec["nodeSelector"] == {"pool": "training"}
    assert spec["securityContext"] == {"runAsUser": 1000, "fsGroup": 1000}
    assert isinstance(spec["securityContext"]["runAsUser"], int)
    assert {"key": "pool", "operator": "Equal", "value": "training", "effect": "NoSchedule"} in spec["tolerations"]
    assert {"name": "data", "mountPath": "/data"} in main_container(job, "Worker")["volumeMounts"]
    # the Master inherits the pod template's resources; the Worker's replica resources replace them
    assert main_container(job, "Master")["resources"] == {
        "requests": {"cpu": "1", "memory": "2Gi"},
        "limits": {"memory": "2Gi"},
    }
    assert main_container(job, "Worker")["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert specs(job)["Worker"]["template"]["metadata"]["labels"]["team"] == "vision"


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


# ---------------------------------------------------------------------------------------------------------------
# job names


@pytest.mark.parametrize(
    "args",
    [
        ("p", "d", "f7a3c2e1b0", "n0", 0),
        ("p", "d", "a" * 200, "n0", 0),
        ("p", "d", "Exec_Name.With.Dots", "dn0.sub_node-Ü", 12),
        ("p", "d", "0starts-with-digit", "n0", 0),
        ("p", "d", "---", "___", 0),
        ("p", "d", "x" * 60, "n" * 60, 99999),
    ],
    ids=["plain", "very-long", "odd-characters", "leading-digit", "only-separators", "long-everything"],
)
def test_job_name_is_a_valid_short_label(args):
    name = job_name(*args)
    assert DNS1035.match(name), name
    assert len(name) <= JOB_NAME_MAX_LENGTH
    assert len(f"{name}-worker-99999") <= 63
    assert job_name(*args) == name


def test_job_name_distinguishes_everything():
    base = ("p", "d", "e" * 80, "n0", 0)
    names = {
        job_name(*base),
        job_name("q", "d", "e" * 80, "n0", 0),
        job_name("p", "e", "e" * 80, "n0", 0),
        job_name("p", "d", "e" * 80 + "x", "n0", 0),
        job_name("p", "d", "e" * 80, "n1", 0),
        job_name("p", "d", "e" * 80, "n0", 1),
    }
    assert len(names) == 6
    assert job_name("p", "d", "abc", "n0", 0, prefix="pt-").startswith("pt-abc-n0-0-")


# ---------------------------------------------------------------------------------------------------------------
# invalid templates


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
        r"container.env\[0\].key='A=B': not an environment variable name Kubernetes accepts",
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


# ---------------------------------------------------------------------------------------------------------------
# purity


def test_builder_import_loads_no_kubernetes():
    code = (
        "import sys, backend_plugin.targets, backend_plugin.template, backend_plugin.config\n"
        "bad = [m for m in sys.modules if m == 'kubernetes' or m.startswith('kubernetes.')]\n"
        "print(','.join(bad))\n"
    )
    env = {**os.environ, "KUBECONFIG": "/nonexistent/kubeconfig"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == ""


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda t: t["container"].update(image="ghcr.io/example/tr\u0430in:1.0"), "the task's image"),
        (lambda t: t["config"].update({"pytorch.master.image": "ghcr.io/x/train:1.0\r\n"}), "pytorch.master.image"),
        (lambda t: t["custom"]["workerReplicas"].update(image="Ghcr.io/X/Train"), "custom.workerReplicas.image"),
    ],
    ids=["cyrillic", "master-crlf", "upper-case-path"],
)
def test_an_image_the_sdk_refuses_is_refused_naming_the_field(change, field):
    """The SDK's image rule (`pytorch_contract.k8s_names.image_reference_problem`) on the backend side too."""
    t = load("hand_gpu_seed")
    change(t)
    with pytest.raises(TemplateError, match="not an image reference the kubelet accepts") as caught:
        build_pytorchjob(t, META)
    assert field in str(caught.value)


def test_an_execution_image_override_the_kubelet_refuses_is_named_as_such():
    with pytest.raises(TemplateError, match="the execution's image override"):
        build(load("official_container"), image_override="registry.local/train:v1\n")
