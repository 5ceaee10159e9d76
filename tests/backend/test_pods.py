"""Replica pods (`backend_plugin.pods`): what the plan decides once per job from the config and the execution (GPU
resources and placement, accelerators, MIG, images, shared memory, environment, placeholders) and how each role's pod
is written from it; checked through the PyTorchJob, whose pods carry every feature.
"""

from __future__ import annotations

import pytest

from backend_plugin.config import BackendConfig
from backend_plugin.errors import TemplateError
from tests.helpers.jobs import (
    META,
    build,
    build_pytorchjob,
    load,
    main_container,
    pod,
    specs,
)


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
