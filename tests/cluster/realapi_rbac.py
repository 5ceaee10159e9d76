"""The connector's RBAC on a real API server: `backend_plugin/deploy/rbac.yaml`'s ClusterRole read as permissions, and a
kubernetes `ApiClient` that authenticates as a ServiceAccount bound to a role with chosen permissions, with a token from
the TokenRequest API (never as admin), for a connector run in the test's process."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from devcluster.kube import ApiError, Kube
from tests.cluster.harness import CONNECTOR_NS, DEPLOY, ClusterInfo


@dataclass(frozen=True, order=True)
class Permission:
    """One verb on one resource of one API group (and, for a rule that names them, its resource names)."""

    group: str
    resource: str
    verb: str
    names: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"{self.verb} {self.resource}" + (f" ({self.group})" if self.group else "")


def shipped_role() -> dict:
    (role,) = [d for d in yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text()) if d and d["kind"] == "ClusterRole"]
    return role


def permissions(role: dict) -> list[Permission]:
    """Every (group, resource, verb) the role grants, one per verb of each rule."""
    out = []
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    out.append(Permission(group, resource, verb, tuple(rule.get("resourceNames") or ())))
    return out


def rules_without(role: dict, missing: Permission | None) -> list[dict]:
    """The role's rules with one permission taken out (None: as shipped)."""
    rules = []
    for rule in copy.deepcopy(role["rules"]):
        if missing is not None and missing.group in rule["apiGroups"] and missing.resource in rule["resources"]:
            rule["verbs"] = [v for v in rule["verbs"] if v != missing.verb]
        if rule["verbs"]:
            rules.append(rule)
    return rules


def _ensure(kube: Kube, path: str, obj: dict) -> None:
    try:
        kube.create(path, obj)
    except ApiError as e:
        if e.status != 409:
            raise
        kube.request("PUT", f"{path}/{obj['metadata']['name']}", body=obj)


class Accounts:
    """ServiceAccounts in the connector's namespace, each bound (ClusterRoleBinding) to a ClusterRole of its own."""

    PREFIX = "rbac-probe-"

    def __init__(self, info: ClusterInfo, kube: Kube) -> None:
        self.info = info
        self.kube = kube
        self.made: list[str] = []

    def client(self, name: str, rules: list[dict]) -> Any:
        """An ApiClient acting as ServiceAccount `rbac-probe-<name>`, whose only rights are `rules` (and what every
        authenticated user may: discovery)."""
        from kubernetes import client as k8s_client
        from kubernetes import config as k8s_config

        full = self.PREFIX + name
        labels = {"app.kubernetes.io/part-of": "rbac-probe"}
        ensure_namespace(self.kube, CONNECTOR_NS)  # a test run first in a session finds no connector deployed yet
        sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": full, "namespace": CONNECTOR_NS}}
        _ensure(self.kube, f"/api/v1/namespaces/{CONNECTOR_NS}/serviceaccounts", sa)
        role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": full, "labels": labels}, "rules": rules}  # fmt: skip
        _ensure(self.kube, "/apis/rbac.authorization.k8s.io/v1/clusterroles", role)
        binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                   "metadata": {"name": full, "labels": labels},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": full},
                   "subjects": [{"kind": "ServiceAccount", "name": full, "namespace": CONNECTOR_NS}]}  # fmt: skip
        _ensure(self.kube, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)
        self.made.append(full)
        request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                   "spec": {"expirationSeconds": 3600}}  # fmt: skip
        token = self.kube.create(f"/api/v1/namespaces/{CONNECTOR_NS}/serviceaccounts/{full}/token", request)
        configuration = k8s_client.Configuration()
        k8s_config.load_kube_config(config_file=str(self.info.kubeconfig), client_configuration=configuration)
        configuration.cert_file = configuration.key_file = None
        configuration.api_key = {"authorization": f"Bearer {token['status']['token']}"}
        configuration.retries = False
        return k8s_client.ApiClient(configuration)

    def remove(self) -> None:
        for full in self.made:
            self.kube.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{full}")
            self.kube.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{full}")
            self.kube.delete(f"/api/v1/namespaces/{CONNECTOR_NS}/serviceaccounts/{full}")


def ensure_namespace(kube: Kube, namespace: str) -> None:
    try:
        kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    except ApiError as e:
        if e.status != 409:
            raise


REPO = Path(__file__).resolve().parents[2]
