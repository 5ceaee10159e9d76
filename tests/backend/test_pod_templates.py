"""Per-role pod templates (issue 15 item 3) and user settings over backend defaults (item 4).

The role templates come from the SDK's own serialization (tests/data/templates/sdk_role_pod_templates.json, written
by tests/sdk/test_serialization.py); every job is validated against the PyTorchJob CRD by `build`.
"""

from __future__ import annotations

import json
import logging

import pytest

from backend_plugin.config import BackendConfig
from backend_plugin.errors import TemplateError
from backend_plugin.template import read_template
from pytorch_contract import template_keys as keys
from tests.helpers.jobs import SPOT, build, load, main_container, pod, specs


def role_template(role: str, doc: dict) -> dict:
    """hand_pod_template with a role pod template added."""
    t = load("hand_pod_template")
    t["config"][keys.pod_template_key(role)] = json.dumps(doc)
    return t


# --- item 3: per-role pod templates ----------------------------------------------------------------------------


def test_master_only_pvc_and_worker_only_sidecar():
    job = build(load("sdk_role_pod_templates"))
    master, worker = pod(job, "Master"), pod(job, "Worker")
    assert {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "ckpt-pvc"}} in master["volumes"]
    assert {"mountPath": "/checkpoints", "name": "checkpoints"} in main_container(job, "Master")["volumeMounts"]
    assert all(v["name"] != "checkpoints" for v in worker["volumes"])
    assert [c["name"] for c in worker["containers"]] == ["pytorch", "metrics"]
    assert [c["name"] for c in master["containers"]] == ["pytorch"]
    # the role's nodeSelector key wins, the task's other keys stay
    assert worker["nodeSelector"] == {"disk": "ssd", "pool": "gpu-workers"}
    assert master["nodeSelector"] == {"disk": "ssd", "pool": "training"}
    # env: the role's NCCL_DEBUG wins over the task's environment
    env = {e["name"]: e.get("value") for e in main_container(job, "Worker")["env"]}
    assert env["NCCL_DEBUG"] == "INFO"
    assert {e["name"]: e.get("value") for e in main_container(job, "Master")["env"]}["NCCL_DEBUG"] == "WARN"
    # metadata: the role's label and annotation on its pods only
    assert specs(job)["Master"]["template"]["metadata"]["labels"]["role"] == "master"
    assert "role" not in specs(job)["Worker"]["template"]["metadata"]["labels"]
    assert specs(job)["Worker"]["template"]["metadata"]["annotations"]["example.com/scrape"] == "true"


def test_role_pod_template_is_in_the_task_spec_per_role():
    spec = read_template(load("sdk_role_pod_templates"))
    by_role = {g.role: g for g in spec.replicas}
    assert by_role["Master"].pod_template is not None and by_role["Worker"].pod_template is not None
    assert spec.pod.spec["nodeSelector"]["pool"] == "training"  # the task's own pod is unchanged
    assert read_template(load("hand_pod_template")).replicas[0].pod_template is None


def test_role_tolerations_are_appended_and_affinity_keys_replaced():
    t = role_template(
        "worker",
        {
            "podSpec": {
                "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "securityContext": {"runAsUser": 2000},
            }
        },
    )
    job = build(t)
    worker, master = pod(job, "Worker"), pod(job, "Master")
    assert {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"} in worker["tolerations"]
    assert {"key": "pool", "operator": "Equal", "value": "training", "effect": "NoSchedule"} in worker["tolerations"]
    assert worker["securityContext"] == {"runAsUser": 2000, "fsGroup": 1000}
    assert master["securityContext"] == {"runAsUser": 1000, "fsGroup": 1000}


@pytest.mark.parametrize(
    "role, doc, message",
    [
        ("master", "not json", "is not JSON"),
        ("master", {"podSpec": {}, "extra": 1}, "must be a JSON object with keys"),
        ("worker", {"podSpec": {"nodeSelectr": {"a": "b"}}}, "nodeSelectr: unknown field"),
        (
            "master",
            {"podSpec": {"containers": [{"name": "primary", "args": ["python", "x.py"]}]}},
            "containers[0].args",
        ),
        ("worker", {"podSpec": {"containers": [{"name": "sidecar"}]}}, "a sidecar needs an image"),
        ("worker", {"metadata": {"labels": {"a": 1}}}, "must map strings to strings"),
    ],
    ids=["not-json", "unknown-key", "unknown-pod-field", "primary-args", "sidecar-without-image", "label-not-str"],
)
def test_bad_role_pod_template_names_the_key(role: str, doc, message: str):
    t = load("hand_pod_template")
    t["config"][keys.pod_template_key(role)] = doc if isinstance(doc, str) else json.dumps(doc)
    with pytest.raises(TemplateError) as info:
        read_template(t)
    assert keys.pod_template_key(role) in str(info.value) and message in str(info.value)


def test_role_pod_template_for_a_missing_role_is_an_error():
    t = load("hand_elastic")
    t["config"][keys.MASTER_POD_TEMPLATE] = json.dumps({"podSpec": {"nodeSelector": {"a": "b"}}})
    with pytest.raises(TemplateError, match="no Master replicas"):
        read_template(t)


# --- item 4: the user's settings win over the backend's defaults -----------------------------------------------


def istio_on(t: dict) -> dict:
    t["k8sPod"]["metadata"]["annotations"]["sidecar.istio.io/inject"] = "true"
    t["k8sPod"]["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "my-team"
    return t


def test_task_pod_template_annotations_and_labels_win_over_backend_defaults():
    job = build(istio_on(load("hand_pod_template")))
    for role in ("Master", "Worker"):
        meta = specs(job)[role]["template"]["metadata"]
        assert meta["annotations"]["sidecar.istio.io/inject"] == "true"
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "my-team"
        # defaults the user did not set are still there
        assert meta["annotations"]["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "false"


def test_execution_labels_win_over_the_pod_template():
    t = load("hand_pod_template")
    t["k8sPod"]["metadata"]["labels"]["execution-id"] = "from-template"
    job = build(t)
    assert specs(job)["Worker"]["template"]["metadata"]["labels"]["execution-id"] == "f7a3c2e1b0"


def test_template_env_wins_over_backend_env():
    t = load("hand_pod_template")
    t["k8sPod"]["podSpec"]["containers"][0]["env"] = [{"name": "FLYTE_FAIL_ON_ERROR", "value": "false"}]
    env = {e["name"]: e.get("value") for e in main_container(build(t), "Worker")["env"]}
    assert env["FLYTE_FAIL_ON_ERROR"] == "false"


def test_user_volume_named_like_ours_keeps_its_name():
    t = load("hand_pod_template")
    t["k8sPod"]["podSpec"]["volumes"].append({"name": "dshm", "emptyDir": {}})
    job = build(t)
    volumes = {v["name"]: v for v in pod(job, "Worker")["volumes"]}
    assert volumes["dshm"] == {"name": "dshm", "emptyDir": {}}
    assert volumes["dshm-1"]["emptyDir"]["medium"] == "Memory"
    assert {"name": "dshm-1", "mountPath": "/dev/shm"} in main_container(job, "Worker")["volumeMounts"]


def test_user_tolerations_are_kept_beside_the_backends():
    job = build(load("hand_pod_template"), BackendConfig())
    tolerations = pod(job, "Worker")["tolerations"]
    assert {"key": "pool", "operator": "Equal", "value": "training", "effect": "NoSchedule"} in tolerations
    assert any(t.get("key") == "nvidia.com/gpu" for t in tolerations)


def test_required_overrides_are_logged(caplog: pytest.LogCaptureFixture):
    t = load("hand_pod_template")
    t["config"]["pytorch.queue"] = "team-a"
    t["k8sPod"]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "other"
    t["k8sPod"]["podSpec"]["nodeSelector"]["cloud.google.com/gke-spot"] = "false"
    with caplog.at_level(logging.WARNING, logger="backend_plugin.pods"):
        job = build(t, SPOT, interruptible=True)
    meta = specs(job)["Worker"]["template"]["metadata"]
    assert meta["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert pod(job, "Worker")["nodeSelector"]["cloud.google.com/gke-spot"] == "true"
    text = caplog.text
    assert "kueue.x-k8s.io/queue-name='other' replaced by 'team-a'" in text
    assert "cloud.google.com/gke-spot='false' replaced by 'true'" in text
