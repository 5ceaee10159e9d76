"""Flyte's propeller on the cluster (`python -m devcluster up --flyte`): it runs our `pytorch` tasks as a Flyte
cluster runs them, through our connector or through Flyte's own PyTorch plugin.

What is deployed, all in the `flyte` namespace (nothing listens outside the cluster's network namespaces):

- **flytepropeller v1.16.8** as a Deployment (`strategy: Recreate`: two propellers without leader election would both
  run every workflow), its release image name mapped by the node agent to the binary `build` made
  (`modules/flytepropeller`), its configuration a ConfigMap (`propeller_config`), its RBAC ours (`propeller_rbac`, from
  what propeller does: below);
- **the event stand-in** (`devcluster.flyte_events`): propeller's event sink is `admin`, pointed at this server, which
  answers AdminService's three event calls and writes each event as a JSON line (its pod's log);
- **our connector** (path `connector`), from `backend_plugin/deploy/` as shipped: `rbac.yaml` unchanged, and
  `connector.yaml` with one replica (two cores) and `target: <kind>` in its ConfigMap; propeller's side is
  `backend_plugin/deploy/propeller-config.yaml`, merged verbatim. Path `builtin` enables Flyte's Go plugin as
  `pytorch` instead (`BUILTIN_PLUGIN_CONFIG`) and sends no task to the connector.

Without flyteadmin (not served by the Go module proxy at a version that builds with propeller v1.16.8), the
execution namespace `flytesnacks-development` is made here (admin's cluster resource controller makes it on a Flyte
cluster) and `flyte-create-execution` (built with propeller) creates the FlyteWorkflow that admin's CreateExecution
would. What is left out of a Flyte install: flyteadmin, datacatalog (`catalog-cache.type: noop`: no task caching),
propeller's webhook (secrets injection: no task here asks for a secret), the console.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml

from devcluster.components import FLYTE_VERSION
from devcluster.kube import Kube, wait_for
from devcluster.paths import container_log

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "backend_plugin" / "deploy"

PLUGINS = ("connector", "builtin")
"""How propeller runs a `pytorch` task: through our connector (`connector-service`), or Flyte's Go plugin."""
TARGETS = ("pytorchjob", "trainjob", "jobset")
"""The job kind the connector creates (its config's `target`); the built-in plugin creates PyTorchJobs only."""
CONTROLLER_OF = {"pytorchjob": "training-operator", "trainjob": "trainer", "jobset": "jobset"}

NAMESPACE = "flyte"
EXECUTION_NAMESPACE = "flytesnacks-development"
"""Where a flytesnacks/development execution runs: admin's default namespace template, `<project>-<domain>`."""
BUCKET = "flyte-blobs"
"""The bucket of the cluster's S3 stand-in that propeller's metadata and the tasks' data go to."""
PROPELLER = "flytepropeller"
PROPELLER_IMAGE = f"cr.flyte.org/flyteorg/flytepropeller-release:{FLYTE_VERSION}"
"""The image flyte-core's chart runs propeller from; the node agent runs the binary built from the same release."""
PROPELLER_ENTRYPOINTS = ("flytepropeller", "/bin/flytepropeller", "/usr/local/bin/flytepropeller")
PROF_PORT = 10254
"""Propeller's profiler and health port (`propeller.prof-port`, its default): `/healthcheck`."""
EVENTS = "flyte-events"
EVENTS_PORT = 8089
CONNECTOR = "pytorch-connector"
"""The connector's Deployment and Service, as `backend_plugin/deploy/` names them (propeller-config.yaml's endpoint)."""
FLYTEWORKFLOW_CRD = "flyteworkflows.flyte.lyft.com"
LOG_TEMPLATE = "http://logs.devcluster.invalid/namespaces/{{ .namespace }}/pods/{{ .podName }}"
"""The log link of a task's pod, in the variables Flyte's task logs and our connector share: the shape of a cluster
log viewer's URL (there is none here: `.invalid` never resolves). Both paths are given the same template."""
ACCESS_KEY = "devcluster"
REGION = "us-east-1"

BUILTIN_PLUGIN_CONFIG: dict[str, Any] = {
    "tasks": {
        "task-plugins": {
            "enabled-plugins": ["container", "sidecar", "k8s-array", "pytorch"],
            "default-for-task-types": {
                "container": "container",
                "container_array": "k8s-array",
                "pytorch": "pytorch",
            },
        }
    },
    "plugins": {
        "k8s": {
            # each replica writes its own error document (flytekit names it error-<uuid>.pb and records its pod and
            # time) and propeller shows the earliest: without it every rank writes the one error.pb, and the last
            # writer wins, which is rank 0's "Connection closed by peer", not the rank that failed first
            # (flyteplugins kfoperators/pytorch GetProperties, flytekit bin/entrypoint _build_error_file_name)
            "enable-distributed-error-aggregation": True,
            # pods asking for GPUs tolerate the GPU nodes' taint (the connector's `gpu.tolerations` does this for
            # its jobs); propeller's pod and kfoperators plugins add these per requested resource
            "gpu-resource-name": "nvidia.com/gpu",
            "resource-tolerations": {
                "nvidia.com/gpu": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
            },
        }
    },
}
"""Propeller's settings for path `builtin`: Flyte's Go PyTorch plugin (`kfoperators/pytorch`, plugin id `pytorch`)
enabled and chosen for task type `pytorch`; docs/cluster.md shows the same."""


@dataclass(frozen=True)
class FlyteSetup:
    """Which path propeller takes for a `pytorch` task, and which job kind the connector creates."""

    plugin: str = "connector"
    target: str = "pytorchjob"

    def __post_init__(self) -> None:
        if self.plugin not in PLUGINS:
            raise ValueError(f"--flyte-plugin {self.plugin!r}: choose among {', '.join(PLUGINS)}")
        if self.target not in TARGETS:
            raise ValueError(f"--target {self.target!r}: choose among {', '.join(TARGETS)}")
        if self.plugin == "builtin" and self.target != "pytorchjob":
            raise ValueError(
                f"--flyte-plugin builtin --target {self.target}: Flyte's built-in PyTorch plugin creates PyTorchJobs "
                "only (--target pytorchjob)"
            )

    @property
    def controller(self) -> str:
        """The controller the job kind needs."""
        return CONTROLLER_OF[self.target]


def blob_env(blob_endpoint: str) -> dict[str, str]:
    """The variables flytekit reads for an S3-compatible store (Flyte's sandbox sets the same for its MinIO)."""
    return {
        "FLYTE_AWS_ENDPOINT": blob_endpoint,
        "FLYTE_AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "FLYTE_AWS_SECRET_ACCESS_KEY": ACCESS_KEY,
        "AWS_DEFAULT_REGION": REGION,
    }


def merge(base: dict, extra: dict) -> dict:
    """`extra` deep-merged over a copy of `base` (mappings merge; anything else is replaced), as flytestdlib merges
    several configuration files."""
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def connector_propeller_config() -> dict:
    """`backend_plugin/deploy/propeller-config.yaml`, as shipped: what an operator merges into propeller's."""
    loaded = yaml.safe_load((DEPLOY / "propeller-config.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def propeller_config(setup: FlyteSetup, blob_endpoint: str) -> dict:
    """Propeller's whole configuration for `setup`: this cluster's part (storage, events, catalog, logs, the
    launcher), then the path's part."""
    storage = {
        "type": "stow",
        "stow": {
            "kind": "s3",
            "config": {
                "auth_type": "accesskey",
                "access_key_id": ACCESS_KEY,
                "secret_key": ACCESS_KEY,
                "region": REGION,
                "endpoint": blob_endpoint,
                "disable_ssl": "true",
                "v2_signing": "true",
            },
        },
        # created at start when missing (flytestdlib's `storage.container`)
        "container": BUCKET,
        "enable-multicontainer": False,
    }
    base = {
        "propeller": {
            "kube-config": "",  # in-cluster: its ServiceAccount's token
            "limit-namespace": "all",
            "workers": 4,
            "workflow-reeval-duration": "10s",
            "downstream-eval-duration": "5s",
            "metadata-prefix": "metadata/propeller",
            "rawoutput-prefix": f"s3://{BUCKET}/raw",
            "prof-port": PROF_PORT,
            # no flyteadmin: a launch plan node could not be launched, and none of ours has one
            "enable-admin-launcher": False,
            # one replica, `strategy: Recreate`
            "leader-election": {"enabled": False},
            # propeller makes the FlyteWorkflow CRD itself (as flyte-binary does), so it is the release's own
            "create-flyteworkflow-crd": True,
            "publish-k8s-events": True,
        },
        "storage": storage,
        # every event goes to the stand-in for admin's event endpoints (devcluster.flyte_events)
        "event": {"type": "admin", "rate": 500, "capacity": 1000},
        "admin": {"endpoint": f"dns:///{EVENTS}.{NAMESPACE}.svc.cluster.local:{EVENTS_PORT}", "insecure": True},
        # no datacatalog: task caching is off (flytepropeller nodes/catalog/config.go: noop is the default)
        "catalog-cache": {"type": "noop"},
        "logger": {"level": 4, "show-source": True},
        "plugins": {
            "logs": {
                "kubernetes-enabled": False,
                "templates": [{"displayName": "Pod logs", "templateUris": [LOG_TEMPLATE]}],
            },
            "k8s": {
                # propeller's own pods and jobs get the blob store's variables, as Flyte's sandbox sets them
                "default-env-vars": [blob_env(blob_endpoint)],
                "inject-finalizer": True,
            },
        },
    }
    part = connector_propeller_config() if setup.plugin == "connector" else BUILTIN_PLUGIN_CONFIG
    return merge(base, part)


def connector_backend_config(setup: FlyteSetup) -> dict:
    """The connector's backend configuration: `connector.yaml`'s ConfigMap as shipped, `target`, and the log link
    template propeller's own plugins use here."""
    (cm,) = [d for d in _docs(DEPLOY / "connector.yaml") if d["kind"] == "ConfigMap"]
    shipped = yaml.safe_load(cm["data"]["config.yaml"]) or {}
    return {
        **shipped,
        "target": setup.target,
        "status": {"log_links": [{"name": "Pod logs", "template": LOG_TEMPLATE}]},
    }


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def code_digest() -> str:
    """A digest of the checkout's Python packages that a connector pod runs (what its image would hold): a pod
    annotated with it restarts when the code changed, not only its config (a cluster kept up across test sessions
    otherwise serves the code of the session that started the pod)."""
    sha = hashlib.sha256()
    for package in ("backend_plugin", "pytorch_contract", "pytorch_core", "flytekitplugins_pytorch"):
        for path in sorted((REPO / package).rglob("*.py")):
            sha.update(str(path.relative_to(REPO)).encode())
            sha.update(path.read_bytes())
    return sha.hexdigest()[:16]


def propeller_rbac() -> list[dict]:
    """Propeller's ServiceAccount, ClusterRole and binding: one rule per thing it does, nothing more."""
    labels = {"app.kubernetes.io/name": PROPELLER, "app.kubernetes.io/part-of": "flyte"}
    rules = [
        # its own CRD, made at start (`create-flyteworkflow-crd`), then read
        {
            "apiGroups": ["apiextensions.k8s.io"],
            "resources": ["customresourcedefinitions"],
            "verbs": ["create", "get", "list", "watch"],
        },
        # the workflows it runs: watched, their status written back by update, the finalizer removed at the end;
        # delete for garbage collection of finished ones (gc-interval)
        {
            "apiGroups": ["flyte.lyft.com"],
            "resources": ["flyteworkflows", "flyteworkflows/finalizers"],
            "verbs": ["get", "list", "watch", "update", "patch", "delete", "deletecollection"],
        },
        # a plain task's pod (the pod plugin), and the pods its informer watches
        {
            "apiGroups": [""],
            "resources": ["pods"],
            "verbs": ["create", "get", "list", "watch", "update", "patch", "delete"],
        },
        # the PodTemplate store (`plugins.k8s.default-pod-template-name`) watches them
        {"apiGroups": [""], "resources": ["podtemplates"], "verbs": ["get", "list", "watch"]},
        # Kubernetes events about its workflows (`publish-k8s-events`)
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "update", "patch", "list", "watch"]},
        # the built-in PyTorch plugin's jobs (path `builtin`); its informer watches them whichever path runs
        {
            "apiGroups": ["kubeflow.org"],
            "resources": ["pytorchjobs"],
            "verbs": ["create", "get", "list", "watch", "update", "patch", "delete"],
        },
    ]
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": PROPELLER, "namespace": NAMESPACE, "labels": labels},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": PROPELLER, "labels": labels},
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": PROPELLER, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": PROPELLER},
            "subjects": [{"kind": "ServiceAccount", "name": PROPELLER, "namespace": NAMESPACE}],
        },
    ]


def propeller_objects(setup: FlyteSetup, blob_endpoint: str, overrides: dict | None = None) -> list[dict]:
    """Propeller's RBAC, ConfigMap and Deployment for `setup`; `overrides` is merged over its configuration last (a
    test's change, e.g. a poll interval)."""
    labels = {"app.kubernetes.io/name": PROPELLER, "app.kubernetes.io/part-of": "flyte"}
    config = merge(propeller_config(setup, blob_endpoint), overrides or {})
    return [
        *propeller_rbac(),
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": PROPELLER, "namespace": NAMESPACE, "labels": labels},
            "data": {"config.yaml": yaml.safe_dump(config, sort_keys=True)},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": PROPELLER, "namespace": NAMESPACE, "labels": labels},
            "spec": {
                "replicas": 1,
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": {"app.kubernetes.io/name": PROPELLER}},
                "template": {
                    "metadata": {
                        "labels": labels,
                        # a new configuration is read at start: a changed one rolls the pod
                        "annotations": {"devcluster/config-digest": digest(config)},
                    },
                    "spec": {
                        "serviceAccountName": PROPELLER,
                        "containers": [
                            {
                                "name": PROPELLER,
                                "image": PROPELLER_IMAGE,
                                "command": ["flytepropeller", "--config", "/etc/flyte/config/config.yaml"],
                                "ports": [{"name": "debug", "containerPort": PROF_PORT}],
                                "readinessProbe": {
                                    "httpGet": {"path": "/healthcheck", "port": PROF_PORT},
                                    "periodSeconds": 2,
                                },
                                "resources": {"requests": {"cpu": "100m", "memory": "200Mi"}},
                                "volumeMounts": [{"name": "config", "mountPath": "/etc/flyte/config"}],
                            }
                        ],
                        "volumes": [{"name": "config", "configMap": {"name": PROPELLER}}],
                    },
                },
            },
        },
    ]


def events_objects() -> list[dict]:
    """The stand-in for admin's event endpoints: a Deployment and its Service."""
    labels = {"app.kubernetes.io/name": EVENTS, "app.kubernetes.io/part-of": "flyte"}
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": EVENTS, "namespace": NAMESPACE, "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app.kubernetes.io/name": EVENTS}},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "automountServiceAccountToken": False,
                        "containers": [
                            {
                                "name": "events",
                                "image": "devcluster.local/flyte-events:v1",
                                "command": ["python", "-m", "devcluster.flyte_events", "--port", str(EVENTS_PORT)],
                                "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}],
                                "ports": [{"name": "grpc", "containerPort": EVENTS_PORT}],
                                "readinessProbe": {"tcpSocket": {"port": EVENTS_PORT}, "periodSeconds": 2},
                            }
                        ],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": EVENTS, "namespace": NAMESPACE, "labels": labels},
            "spec": {
                "selector": {"app.kubernetes.io/name": EVENTS},
                "ports": [{"name": "grpc", "port": EVENTS_PORT, "targetPort": EVENTS_PORT}],
            },
        },
    ]


def connector_objects(setup: FlyteSetup, blob_endpoint: str) -> list[dict]:
    """`backend_plugin/deploy/rbac.yaml` unchanged and `connector.yaml` with one replica, this setup's backend
    configuration and the blob store's variables (the image is ignored: the node agent runs `pyflyte serve
    connector` of the environment `up` ran in)."""
    objects = _docs(DEPLOY / "rbac.yaml")
    config = connector_backend_config(setup)
    for doc in _docs(DEPLOY / "connector.yaml"):
        if doc["kind"] == "Deployment":
            doc["spec"]["replicas"] = 1  # two cores: one replica (the shipped two are for availability)
            template = doc["spec"]["template"]
            annotations = template["metadata"].setdefault("annotations", {})
            annotations["devcluster/config-digest"] = digest(config)
            annotations["devcluster/code-digest"] = code_digest()
            container = template["spec"]["containers"][0]
            container["env"] += [{"name": k, "value": v} for k, v in blob_env(blob_endpoint).items()]
        elif doc["kind"] == "ConfigMap":
            doc["data"]["config.yaml"] = yaml.safe_dump(config, sort_keys=True)
        objects.append(doc)
    return objects


def namespace_objects() -> list[dict]:
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": EXECUTION_NAMESPACE}},
    ]


def rolled_out(kube: Kube, namespace: str, name: str) -> bool:
    """The Deployment's newest template runs, alone and ready: no pod of an older one is left, not even stopping (a
    Deployment's status does not count a pod being deleted, and in a rolling update the old connector pod still serves
    its old configuration while it stops)."""
    d = kube.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}")
    status = d.get("status") or {}
    want = d["spec"].get("replicas", 1)
    if not (
        status.get("observedGeneration", 0) >= d["metadata"]["generation"]
        and status.get("updatedReplicas", 0) == want
        and status.get("readyReplicas", 0) == want
        and status.get("replicas", 0) == want
    ):
        return False
    selector = ",".join(f"{k}={v}" for k, v in d["spec"]["selector"]["matchLabels"].items())
    pods = kube.get(f"/api/v1/namespaces/{namespace}/pods", labelSelector=selector)["items"]
    return len(pods) == want and not any(p["metadata"].get("deletionTimestamp") for p in pods)


LISTED = "ConnectorDeployment [{}] supports the following task types"
"""Propeller's log line for a connector whose ListAgents answered a poll (flyteplugins v1.16.8 client.go)."""


def connector_endpoint() -> str:
    """The endpoint propeller calls the connector at (`propeller-config.yaml`'s one listed connector)."""
    (listed,) = connector_propeller_config()["plugins"]["connector-service"]["connectors"].values()
    return str(listed["endpoint"])


def propeller_logs(kube: Kube, state: Path) -> dict[str, str]:
    """The output of each propeller pod that runs and is not being deleted, by the pod's uid."""
    pods = kube.get(f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector=f"app.kubernetes.io/name={PROPELLER}")
    return {
        p["metadata"]["uid"]: container_log(state, p)
        for p in pods["items"]
        if not p["metadata"].get("deletionTimestamp")
    }


def propeller_listings(kube: Kube, state: Path) -> dict[str, int]:
    """How many times each running propeller pod (by uid) has logged an answer of our connector to its ListAgents."""
    line = LISTED.format(connector_endpoint())
    return {uid: log.count(line) for uid, log in propeller_logs(kube, state).items()}


def deploy(kube: Kube, setup: FlyteSetup, blob_endpoint: str, state: Path, out: TextIO | None = None) -> dict:
    """Deploy (or switch to) `setup` on a running cluster and wait until propeller runs with it; returns what
    `flyte.json` in the state folder records (the setup, the versions, where flyte-create-execution is)."""
    from devcluster.addons import apply_all
    from devcluster.build import cached
    from devcluster.components import BY_NAME

    component = BY_NAME[PROPELLER]
    folder = cached(component)
    if folder is None:
        raise RuntimeError(f"flytepropeller {FLYTE_VERSION} is not built: run `python -m devcluster build`")
    crd = {"pytorchjob": "pytorchjobs.kubeflow.org", "trainjob": "trainjobs.trainer.kubeflow.org",
           "jobset": "jobsets.jobset.x-k8s.io"}[setup.target]  # fmt: skip
    if kube.get_or_none(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}") is None:
        raise RuntimeError(
            f"--target {setup.target} needs {setup.controller} on the cluster (its CRD {crd} is not installed): "
            f"`up` with --controllers including {setup.controller}"
        )
    apply_all(kube, namespace_objects())
    for ns in (NAMESPACE, EXECUTION_NAMESPACE):
        account = f"/api/v1/namespaces/{ns}/serviceaccounts/default"
        wait_for(f"namespace {ns}'s default ServiceAccount", functools.partial(kube.get_or_none, account), 60)
    if setup.plugin == "connector":
        # the connector serves before propeller starts, so that the first execution finds it up. The order once
        # mattered more: propeller's connector plugin takes the task types it registers for from its first ListAgents
        # (flyteplugins v1.16.8, webapi/connector/plugin.go newConnectorPlugin), and started the other way round the
        # first execution failed in 6 s, "CorruptedPluginState" (seen in CI). The shipped `supportedTaskTypes` now
        # registers `pytorch` whatever that poll answers (test_flyte.py starts propeller with the connector down).
        apply_all(kube, connector_objects(setup, blob_endpoint))
        wait_for(f"Deployment {NAMESPACE}/{CONNECTOR} rolled out",
                 functools.partial(rolled_out, kube, NAMESPACE, CONNECTOR), 240, 1.0)  # fmt: skip
        before = propeller_listings(kube, state)
    apply_all(kube, events_objects() + propeller_objects(setup, blob_endpoint))
    for name in (PROPELLER, EVENTS):
        wait_for(f"Deployment {NAMESPACE}/{name} rolled out", functools.partial(rolled_out, kube, NAMESPACE, name), 240,
                 1.0)  # fmt: skip
    if setup.plugin == "connector":
        # Ready is not yet reachable: for a second or two after a connector pod is replaced, the Service's rules in
        # propeller's namespace still lead to the pod that is gone (the node agent rewrites them in every namespace,
        # as kube-proxy on every node), and a task created then failed ("connection reset by peer", a user retry
        # charged). A ListAgents answer in propeller's log since the new pod rolled out shows that its calls reach
        # the new pod (a poll every 10 s; a restarted propeller's first is at its start).
        wait_for(f"propeller has had an answer from {CONNECTOR} since it rolled out",
                 lambda: any(n > before.get(uid, 0) for uid, n in propeller_listings(kube, state).items()), 60,
                 1.0)  # fmt: skip
    wait_for(
        f"CRD {FLYTEWORKFLOW_CRD} established (propeller makes it)",
        lambda: any(
            c["type"] == "Established" and c["status"] == "True"
            for c in (
                kube.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{FLYTEWORKFLOW_CRD}").get("status")
                or {}
            ).get("conditions")
            or []
        ),  # fmt: skip
        120,
        1.0,
    )
    record = {
        "plugin": setup.plugin,
        "target": setup.target,
        "version": FLYTE_VERSION,
        "namespace": NAMESPACE,
        "execution_namespace": EXECUTION_NAMESPACE,
        "bucket": BUCKET,
        "create_execution": str(folder / "flyte-create-execution"),
        "propeller_config": propeller_config(setup, blob_endpoint),
    }
    (state / "flyte.json").write_text(json.dumps(record, indent=2))
    if out is not None:
        print(
            f"flyte: propeller {FLYTE_VERSION} runs `pytorch` tasks through "
            + (f"our connector (target {setup.target})" if setup.plugin == "connector" else "Flyte's PyTorch plugin")
            + f"; events: {EVENTS}.{NAMESPACE}; executions in {EXECUTION_NAMESPACE}",
            file=out,
            flush=True,
        )
    return record


def propeller_image_binary(folder: Path) -> dict:
    """The node agent's entry that runs propeller's release image as the binary built (`up` adds it)."""
    return {
        "repository": PROPELLER_IMAGE.rsplit(":", 1)[0],
        "binary": str(folder / PROPELLER),
        "aliases": list(PROPELLER_ENTRYPOINTS),
    }
