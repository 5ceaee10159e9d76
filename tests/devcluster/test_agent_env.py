"""A container's environment as the kubelet makes it: order, `$(VAR)` expansion, fieldRef, resourceFieldRef."""

from __future__ import annotations

import base64

import pytest

from devcluster.agent.envvars import EnvError, expand, make_env

POD = {
    "metadata": {
        "name": "job-worker-0",
        "namespace": "ns1",
        "uid": "u-1",
        "labels": {"a": "b"},
        "annotations": {"batch.kubernetes.io/job-completion-index": "3"},
    },
    "spec": {"nodeName": "cpu-1", "serviceAccountName": "sa", "containers": []},
    "status": {"podIP": "10.77.1.9", "hostIP": "10.77.0.1"},
}
OBJECTS = {
    ("ConfigMap", "ns1", "cm"): {"data": {"K1": "v1", "K2": "v2"}},
    ("Secret", "ns1", "sec"): {"data": {"TOKEN": base64.b64encode(b"s3cret").decode()}},
}


def _env(container: dict, service_env: dict | None = None) -> dict[str, str]:
    return make_env(
        POD,
        container,
        image_env={"PATH": "/venv/bin", "HOME": "/h"},
        service_env=service_env or {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "WEB_SERVICE_HOST": "10.96.3.4"},
        read=lambda kind, ns, name: OBJECTS.get((kind, ns, name)),
        node_allocatable={"cpu": "16", "memory": "64Gi"},
    )


def test_every_source_in_the_kubelets_order() -> None:
    env = _env(
        {
            "name": "c",
            "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}, {"secretRef": {"name": "sec"}}],
            "env": [
                {"name": "K1", "value": "own"},
                {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {
                    "name": "IDX",
                    "valueFrom": {
                        "fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}
                    },
                },
                {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "REF", "value": "$(NAME)-$(IDX)-$(MISSING)-$$(NAME)"},
                {"name": "K2", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "K2"}}},
            ],
            "resources": {"limits": {"cpu": "1500m", "memory": "2Gi"}, "requests": {"cpu": "500m"}},
        }
    )
    assert env["CM_K1"] == "v1" and env["TOKEN"] == "s3cret" and env["K1"] == "own" and env["K2"] == "v2"
    assert env["NAME"] == "job-worker-0" and env["IDX"] == "3" and env["IP"] == "10.77.1.9"
    assert env["REF"] == "job-worker-0-3-$(MISSING)-$(NAME)"
    assert env["KUBERNETES_SERVICE_HOST"] == "10.96.0.1" and env["HOME"] == "/h"


@pytest.mark.parametrize(
    ("resource", "divisor", "value"),
    [
        ("limits.cpu", None, "2"),
        ("limits.cpu", "1m", "1500"),
        ("requests.cpu", "1m", "500"),
        ("limits.memory", "1Mi", "2048"),
        ("requests.memory", None, "0"),
    ],
)
def test_resource_field_ref_rounds_up(resource: str, divisor: str | None, value: str) -> None:
    ref = {"resource": resource} | ({"divisor": divisor} if divisor else {})
    env = _env(
        {
            "name": "c",
            "env": [{"name": "V", "valueFrom": {"resourceFieldRef": ref}}],
            "resources": {"limits": {"cpu": "1500m", "memory": "2Gi"}, "requests": {"cpu": "500m"}},
        }
    )
    assert env["V"] == value


def test_a_limit_the_container_lacks_is_the_nodes_allocatable() -> None:
    env = _env({"name": "c", "env": [{"name": "V", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}]})
    assert env["V"] == "16"


def test_a_missing_configmap_is_the_kubelets_error_unless_optional() -> None:
    with pytest.raises(EnvError, match='configmap "gone" not found'):
        _env({"name": "c", "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "k"}}}]})
    env = _env(
        {
            "name": "c",
            "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "k", "optional": True}}}],
        }
    )
    assert "X" not in env


def test_service_links_off_keeps_only_the_masters() -> None:
    pod_spec = dict(POD["spec"], enableServiceLinks=False)
    env = make_env(
        dict(POD, spec=pod_spec),
        {"name": "c"},
        image_env={},
        service_env={"KUBERNETES_SERVICE_HOST": "10.96.0.1", "WEB_SERVICE_HOST": "x"},
        read=lambda *a: None,
        node_allocatable={},
    )
    assert env == {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}


def test_expand() -> None:
    assert expand("a$(X)b$$c$(Y)", {"X": "1"}) == "a1b$c$(Y)"
