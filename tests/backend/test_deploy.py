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
    (deployment,) = service["connectors"].values()
    service_obj = by_kind()["Service"]["metadata"]
    assert deployment["endpoint"] == f"dns:///{service_obj['name']}.{service_obj['namespace']}.svc.cluster.local:8000"


def _shipped_connector_service() -> tuple[dict, dict]:
    """`propeller-config.yaml`'s `plugins.connector-service` section, and the one connector it lists."""
    cfg = yaml.safe_load((DEPLOY / "propeller-config.yaml").read_text())
    service = cfg["plugins"]["connector-service"]
    (deployment,) = service["connectors"].values()
    return service, deployment


def _propeller_registry(service: dict, listed: dict[str, list]) -> dict[str, dict[int, str]]:
    """flytepropeller v1.16.8's connector registry (task type -> template version -> endpoint), built afresh at every
    poll as flyteplugins `go/tasks/plugins/webapi/connector/client.go` getConnectorRegistry builds it: for each
    connector deployment (the default connector first, then `connectors`) whose ListAgents answered (`listed`, by
    endpoint: one missing failed), each task category listed replaces the type's entry with {version: endpoint} (so
    the last version listed of a type is the one kept); then every `connectorForTaskTypes` entry replaces the type's
    entry with {0: endpoint}; `supportedTaskTypes` add {0: the default connector} where a type has none. Its types
    are also those the connector plugin registers for at propeller's start (plugin.go newConnectorPlugin)."""
    registry: dict[str, dict[int, str]] = {}
    default = service.get("defaultConnector") or {}
    deployments = ([default] if default.get("endpoint") else []) + list(service.get("connectors", {}).values())
    for deployment in deployments:
        for agent in listed.get(deployment["endpoint"], []):
            for category in agent.supported_task_categories:
                registry[category.name] = {category.version: deployment["endpoint"]}
    for task_type, connector_id in (service.get("connectorForTaskTypes") or {}).items():
        if connector_id in service.get("connectors", {}):
            registry[task_type] = {0: service["connectors"][connector_id]["endpoint"]}
    for task_type in service.get("supportedTaskTypes") or []:
        registry.setdefault(task_type, {0: (service.get("defaultConnector") or {}).get("endpoint", "")})
    return registry


def _propeller_route(service: dict, registry: dict[str, dict[int, str]], task_type: str, version: int) -> str:
    """The endpoint a task goes to: its (type, version) entry, else the default connector (plugin.go
    getFinalConnector); "" when none is configured (the task then fails: `passthrough: received empty target`)."""
    return registry.get(task_type, {}).get(version) or (service.get("defaultConnector") or {}).get("endpoint", "")


def test_propeller_sends_the_sdk_template_version_to_the_connector():
    """Propeller v1.16 routes a connector task by type and template version. The shipped config once pinned
    `pytorch` with `connectorForTaskTypes`, which maps version 0 only: on a real propeller every task our SDK
    writes (version 1) went to the default connector and failed (`failed to exit idle mode: ... received empty
    target`). The ListAgents answer is the served connector's own (flytekit's registry)."""
    from flytekit.extend.backend.base_connector import ConnectorRegistry

    import backend_plugin.connector  # noqa: F401 - registers the served connector, as `pyflyte serve connector` does
    from pytorch_contract.template_keys import TASK_TYPE, TASK_TYPE_VERSION

    service, deployment = _shipped_connector_service()
    ours = [
        a for a in ConnectorRegistry.list_connectors() if TASK_TYPE in {c.name for c in a.supported_task_categories}
    ]
    registry = _propeller_registry(service, {deployment["endpoint"]: ours})
    assert _propeller_route(service, registry, TASK_TYPE, TASK_TYPE_VERSION) == deployment["endpoint"]


def test_a_poll_that_failed_leaves_pytorch_registered_and_sent_to_the_connector():
    """Propeller's table comes from one poll's answers alone: a ListAgents that fails (the connector restarting or
    rolling out) empties it until the next poll, 10 s later, or for good at propeller's start the types its plugin
    registers for. The shipped `supportedTaskTypes` and `defaultConnector` keep `pytorch` registered and sent here.
    Without them (the config before), the same poll registers nothing and routes the task nowhere: in the cluster
    tier a task created right after a connector rollout failed in 2 s ("received empty target")."""
    from pytorch_contract.template_keys import TASK_TYPE, TASK_TYPE_VERSION

    service, deployment = _shipped_connector_service()
    failed = _propeller_registry(service, {})
    assert TASK_TYPE in failed
    assert _propeller_route(service, failed, TASK_TYPE, TASK_TYPE_VERSION) == deployment["endpoint"]
    before = {"connectors": service["connectors"]}
    failed = _propeller_registry(before, {})
    assert TASK_TYPE not in failed
    assert _propeller_route(before, failed, TASK_TYPE, TASK_TYPE_VERSION) == ""


def test_the_default_connector_is_the_listed_one_with_the_same_call_settings():
    """The default connector is the same Service as the listed one, called the same way (a task sent to it after a
    failed poll must be served as any other: the same timeout, the same transport)."""
    service, deployment = _shipped_connector_service()
    assert service["defaultConnector"] == deployment


def test_the_propeller_model_sends_a_listed_version_and_nothing_else():
    """The registry model on valid configurations: a listed version routes, another version and another type do not,
    and `connectorForTaskTypes` pins version 0 (its false positives would hide the bug above)."""
    from flyteidl.admin.agent_pb2 import Agent, TaskCategory

    ep = "dns:///c:8000"
    agent = Agent(
        name="a", supported_task_categories=[TaskCategory(name="t", version=0), TaskCategory(name="t", version=1)]
    )
    service = {"connectors": {"c": {"endpoint": ep}}}
    registry = _propeller_registry(service, {ep: [agent]})
    assert _propeller_route(service, registry, "t", 1) == ep
    assert _propeller_route(service, registry, "t", 0) == ""  # the last listed version wins
    assert _propeller_route(service, registry, "other", 1) == ""
    pinned = {**service, "connectorForTaskTypes": {"t": "c"}, "defaultConnector": {"endpoint": "dns:///d:8000"}}
    registry = _propeller_registry(pinned, {ep: [agent]})
    assert _propeller_route(pinned, registry, "t", 0) == ep
    assert _propeller_route(pinned, registry, "t", 1) == "dns:///d:8000"


def _contained(part: object, whole: object) -> bool:
    """Every key of `part` is in `whole` with a contained value (mappings); anything else is equal."""
    if isinstance(part, dict):
        return isinstance(whole, dict) and all(k in whole and _contained(v, whole[k]) for k, v in part.items())
    return part == whole


def test_the_builtin_plugin_settings_the_docs_give_are_what_the_cluster_tier_runs():
    """docs/cluster.md's settings for Flyte's own PyTorch plugin (blocks marked `propeller:builtin`) are part of the
    configuration propeller runs with in the cluster tier's path b (`devcluster.flyte.BUILTIN_PLUGIN_CONFIG`)."""
    from devcluster.flyte import BUILTIN_PLUGIN_CONFIG
    from tests.docs.markdown_blocks import blocks

    page = DEPLOY.parents[1] / "docs" / "cluster.md"
    shown = [yaml.safe_load(b.body) for b in blocks(page) if "propeller:builtin" in b.markers]
    assert shown, "docs/cluster.md shows no settings for Flyte's built-in PyTorch plugin"
    for settings in shown:
        assert _contained(settings, BUILTIN_PLUGIN_CONFIG), settings


def _seconds(duration: str) -> float:
    """A Go duration of whole seconds or minutes, as the propeller config writes them ("30s", "1m")."""
    return float(duration[:-1]) * {"s": 1, "m": 60}[duration[-1]]


def _propeller_timeout(deployment: dict, operation: str) -> float:
    """How long propeller v1.16.8 waits for one connector call (flyteplugins webapi/connector client.go,
    getFinalTimeout): `timeouts[operation]`, else `defaultTimeout` (10 s when unset). The keys of `timeouts` are as
    propeller holds them: flytestdlib's config loader (spf13/viper, insensitiviseMap) lower-cases every map key read
    from a file, and the lookup is by "CreateTask", "GetTask", "DeleteTask"."""
    held = {key.lower(): value for key, value in (deployment.get("timeouts") or {}).items()}
    return _seconds(str(held.get(operation, deployment.get("defaultTimeout", "10s"))))


@pytest.mark.parametrize(
    "operation, budget_key, left_s",
    [("GetTask", "get_budget_s", 5.0), ("CreateTask", "create_budget_s", 10.0), ("DeleteTask", "delete_budget_s", 5.0)],
)
def test_propeller_waits_longer_than_each_connector_budget(operation: str, budget_key: str, left_s: float):
    """Every call answers within its budget, plus the time to build the answer (docs/reference/backend-config.md):
    propeller must wait that long, as it reads its configuration, or it gives up first (a create cut short fails the
    attempt while the job it asked for is made anyway)."""
    cfg = yaml.safe_load((DEPLOY / "propeller-config.yaml").read_text())
    (deployment,) = cfg["plugins"]["connector-service"]["connectors"].values()
    budget = getattr(BackendConfig().api, budget_key)
    assert _propeller_timeout(deployment, operation) >= budget + left_s


def test_the_propeller_timeout_model_reads_keys_as_propeller_does():
    """A per-call entry does not apply (its key is lower-cased before the lookup); defaultTimeout does."""
    assert _propeller_timeout({"timeouts": {"CreateTask": "30s"}, "defaultTimeout": "15s"}, "CreateTask") == 15.0
    assert _propeller_timeout({"defaultTimeout": "30s"}, "CreateTask") == 30.0
    assert _propeller_timeout({}, "GetTask") == 10.0
