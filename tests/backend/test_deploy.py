"""The deploy manifests: strict core/v1, apps/v1 and RBAC validation, least privilege, and consistency."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from backend_plugin.config import BackendConfig
from backend_plugin.kinds import DECLARED
from tests.kube_schema import KUBERNETES_VERSION

DEPLOY = Path(__file__).resolve().parents[2] / "backend_plugin" / "deploy"
MANIFESTS = ["rbac.yaml", "connector.yaml"]


def documents(name: str) -> list[dict]:
    """The YAML documents of one manifest file."""
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def by_kind() -> dict[str, dict]:
    """Every object of the manifests by kind (each kind appears once)."""
    out = {}
    for name in MANIFESTS:
        for doc in documents(name):
            assert doc["kind"] not in out, f"{doc['kind']} defined twice"
            out[doc["kind"]] = doc
    return out


@pytest.mark.parametrize(
    "kind, name",
    [(d["kind"], d["metadata"]["name"]) for m in MANIFESTS for d in documents(m)],
    ids=[f"{d['kind']}" for m in MANIFESTS for d in documents(m)],
)
def test_manifest_is_valid_strictly(kind: str, name: str):
    (doc,) = [d for d in by_kind().values() if d["kind"] == kind and d["metadata"]["name"] == name]
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_rbac_is_least_privilege():
    rules = by_kind()["ClusterRole"]["rules"]
    granted = {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    assert granted == {
        ("kubeflow.org", "pytorchjobs", "create"),
        ("kubeflow.org", "pytorchjobs", "get"),
        ("kubeflow.org", "pytorchjobs", "delete"),
        ("kubeflow.org", "pytorchjobs", "list"),  # the watch cache
        ("kubeflow.org", "pytorchjobs", "watch"),
        ("trainer.kubeflow.org", "trainjobs", "create"),
        ("trainer.kubeflow.org", "trainjobs", "get"),
        ("trainer.kubeflow.org", "trainjobs", "delete"),
        ("trainer.kubeflow.org", "trainjobs", "list"),
        ("trainer.kubeflow.org", "trainjobs", "watch"),
        ("jobset.x-k8s.io", "jobsets", "create"),
        ("jobset.x-k8s.io", "jobsets", "get"),
        ("jobset.x-k8s.io", "jobsets", "delete"),
        ("jobset.x-k8s.io", "jobsets", "list"),
        ("jobset.x-k8s.io", "jobsets", "watch"),
        ("apiextensions.k8s.io", "customresourcedefinitions", "get"),  # optional: the installed release
        ("", "pods", "list"),
        ("", "events", "list"),
    }
    (crds,) = [r for r in rules if r["resources"] == ["customresourcedefinitions"]]
    assert crds["resourceNames"] == [d.crd_name for d in DECLARED]  # only the job kinds' CRDs, by name
    assert all("resourceNames" not in r for r in rules if r is not crds)
    lines = (DEPLOY / "rbac.yaml").read_text().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("  - apiGroups:")]
    assert len(starts) == len(rules)
    for i in starts:  # every rule carries a comment saying why it is needed
        assert lines[i - 1].strip().startswith("#"), f"rule at line {i + 1} has no comment"


def test_bindings_and_service_point_at_the_right_things():
    objs = by_kind()
    sa = objs["ServiceAccount"]["metadata"]
    (subject,) = objs["ClusterRoleBinding"]["subjects"]
    assert (subject["name"], subject["namespace"]) == (sa["name"], sa["namespace"])
    assert objs["ClusterRoleBinding"]["roleRef"]["name"] == objs["ClusterRole"]["metadata"]["name"]
    pod = objs["Deployment"]["spec"]["template"]
    assert pod["spec"]["serviceAccountName"] == sa["name"]
    assert objs["Service"]["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    (container,) = pod["spec"]["containers"]
    assert container["command"][:5] == ["pyflyte", "serve", "connector", "--port", "8000"]
    assert "backend_plugin.connector" in container["args"]
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["grpc"]["port"] == 8000


def test_configmap_is_a_valid_backend_config():
    config = BackendConfig.from_yaml(by_kind()["ConfigMap"]["data"]["config.yaml"])
    assert config.value("gpu_resource_name") == "nvidia.com/gpu"


def test_propeller_config_routes_pytorch_to_the_connector():
    cfg = yaml.safe_load((DEPLOY / "propeller-config.yaml").read_text())
    plugins = cfg["tasks"]["task-plugins"]
    assert "connector-service" in plugins["enabled-plugins"]
    assert plugins["default-for-task-types"]["pytorch"] == "connector-service"
    service = cfg["plugins"]["connector-service"]
    connector_id = service["connectorForTaskTypes"]["pytorch"]
    service_obj = by_kind()["Service"]["metadata"]
    endpoint = service["connectors"][connector_id]["endpoint"]
    assert endpoint == f"dns:///{service_obj['name']}.{service_obj['namespace']}.svc.cluster.local:8000"
