"""What runs on the cluster once it is up: its DNS, and each controller exactly as its release manifests deploy it.

A controller's manifests are read from its Go module (the module cache holds the zip the binary was built from):
`kubectl kustomize` renders the release's own kustomization (the CRDs, the RBAC, the Deployment, the webhook Service
and configurations, the certificate Secret), and every object is applied as rendered. The Deployment's pods are
run by the node agent, which knows the release image as the binary built from the same module. The webhooks are
called through their Services (the agent's Service proxy), with the certificates each controller makes and injects
itself (its internal certificate management, on as shipped), read from the Secret volume the agent keeps current.

What differs from a release install, and why:
- Trainer's overlay pulls JobSet from a URL; JobSet is installed from its own module instead (the same v0.12.0).
- Only the `torch-distributed` ClusterTrainingRuntime is installed (the one our TrainJob kind runs on).
- Security contexts (non-root users, read-only root filesystems, dropped capabilities) are not enforced: the node
  agent runs every container as the user it runs as.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

from devcluster.build import go_env
from devcluster.components import BY_NAME
from devcluster.kube import ApiError, Kube, wait_for

DNS_IMAGE = "devcluster.local/dns:v1"


def module_dir(component: str) -> Path:
    """The module's folder in Go's module cache (downloaded by `build`)."""
    c = BY_NAME[component]
    proc = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", f"{c.module}"],
        cwd=c.module_dir,
        env=go_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(proc.stdout.strip())


@dataclass(frozen=True)
class Release:
    """One controller's release manifests: a kustomization of ours that names the module's own."""

    component: str
    kustomization: dict
    extra_files: tuple[str, ...] = ()  # files of the module applied as they are

    def render(self, kubectl: Path, work: Path) -> list[dict]:
        mod = module_dir(self.component)
        folder = work / "manifests" / self.component
        folder.mkdir(parents=True, exist_ok=True)
        # kustomize takes a base folder only by a relative path
        text = json.dumps(self.kustomization).replace("@MODULE@", os.path.relpath(mod, folder))
        (folder / "kustomization.yaml").write_text(yaml.safe_dump(json.loads(text)))
        proc = subprocess.run(
            [str(kubectl), "kustomize", "--load-restrictor=LoadRestrictionsNone", str(folder)],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"kubectl kustomize of {self.component}'s release manifests: {proc.stderr.strip()}")
        objects = [o for o in yaml.safe_load_all(proc.stdout) if o]
        for rel in self.extra_files:
            objects += [o for o in yaml.safe_load_all((mod / rel).read_text()) if o]
        (folder / "rendered.yaml").write_text(yaml.safe_dump_all(objects))
        return objects


RELEASES: dict[str, Release] = {
    "training-operator": Release("training-operator", {"resources": ["@MODULE@/manifests/overlays/standalone"]}),
    "jobset": Release("jobset", {"resources": ["@MODULE@/config/default"]}),
    "trainer": Release(
        "trainer",
        {
            # manifests/overlays/manager without `../../third-party/jobset` (a URL; JobSet comes from its module)
            "namespace": "kubeflow-system",
            "resources": [
                "@MODULE@/manifests/overlays/manager/namespace.yaml",
                "@MODULE@/manifests/base/crds",
                "@MODULE@/manifests/base/manager",
                "@MODULE@/manifests/base/rbac",
                "@MODULE@/manifests/base/webhook",
            ],
            "images": [{"name": "ghcr.io/kubeflow/trainer/trainer-controller-manager", "newTag": "v2.3.0"}],
            "secretGenerator": [
                {
                    "name": "kubeflow-trainer-webhook-cert",
                    "namespace": "kubeflow-system",
                    "options": {"disableNameSuffixHash": True},
                }
            ],
            "configMapGenerator": [
                {
                    "name": "kubeflow-trainer-public",
                    "literals": ["kubeflow_trainer_version=v2.3.0"],
                    "options": {"disableNameSuffixHash": True},
                }
            ],
        },
        extra_files=("manifests/base/runtimes/torch_distributed.yaml",),
    ),
    "kueue": Release("kueue", {"resources": ["@MODULE@/config/default"]}),
}

ORDER = ("jobset", "training-operator", "trainer", "kueue")

KUEUE_FRAMEWORKS = ("kubeflow.org/pytorchjob",)
"""Kueue integrations enabled beyond the release's defaults. Kueue's shipped configuration (v0.19) leaves the training
operator's PyTorchJob commented out; a cluster that queues PyTorchJobs enables it there, as this one does. Without it
Kueue's PyTorchJob webhook answers without suspending the job, and its `pod` integration gates each of the job's pods
as a Workload of its own (they carry the queue label): no gang admission."""


def enable_kueue_frameworks(objects: list[dict], frameworks: tuple[str, ...] = KUEUE_FRAMEWORKS) -> None:
    """Add `frameworks` to `integrations.frameworks` of Kueue's configuration (the `kueue-manager-config` ConfigMap
    of its release manifests), in place.

    Raises:
        RuntimeError: the manifests hold no such ConfigMap, or it names no integrations.
    """
    for o in objects:
        if o.get("kind") == "ConfigMap" and o["metadata"]["name"].endswith("kueue-manager-config"):
            key = "controller_manager_config.yaml"
            config = yaml.safe_load(o["data"][key])
            enabled = (config.get("integrations") or {}).get("frameworks")
            if not isinstance(enabled, list):
                raise RuntimeError(f"Kueue's configuration names no integrations.frameworks: {o['data'][key][:200]}")
            enabled += [f for f in frameworks if f not in enabled]
            o["data"][key] = yaml.safe_dump(config, sort_keys=False)
            return
    raise RuntimeError("Kueue's release manifests hold no kueue-manager-config ConfigMap")


def images_of(objects: list[dict]) -> list[str]:
    """The images of the Deployments among `objects` (the release image the agent runs as the built binary)."""
    out = []
    for o in objects:
        if o.get("kind") == "Deployment":
            for c in o["spec"]["template"]["spec"].get("containers") or []:
                out.append(c["image"])
    return out


def repository(image: str) -> str:
    name = image.split("@")[0]
    last = name.rsplit("/", 1)[-1]
    return name.rsplit(":", 1)[0] if ":" in last else name


def path_of(o: dict) -> tuple[str, str]:
    """(collection path, object path) of a manifest object, from its apiVersion and kind."""
    group_version = o["apiVersion"]
    base = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
    plural = PLURALS.get(o["kind"]) or (o["kind"].lower() + "s")
    ns = o["metadata"].get("namespace")
    collection = f"{base}/namespaces/{ns}/{plural}" if ns and o["kind"] not in CLUSTER_SCOPED else f"{base}/{plural}"
    return collection, f"{collection}/{o['metadata']['name']}"


PLURALS = {
    "CustomResourceDefinition": "customresourcedefinitions",
    "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
    "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "ServiceAccount": "serviceaccounts",
    "ClusterTrainingRuntime": "clustertrainingruntimes",
    "APIService": "apiservices",
    "PriorityClass": "priorityclasses",
    "ClusterQueue": "clusterqueues",
    "LocalQueue": "localqueues",
    "ResourceFlavor": "resourceflavors",
    "WorkloadPriorityClass": "workloadpriorityclasses",
    "EndpointSlice": "endpointslices",
}
CLUSTER_SCOPED = {
    "Namespace",
    "CustomResourceDefinition",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "ClusterRole",
    "ClusterRoleBinding",
    "ClusterTrainingRuntime",
    "APIService",
    "PriorityClass",
    "ClusterQueue",
    "ResourceFlavor",
    "WorkloadPriorityClass",
    "Node",
}

BUILTIN_GROUPS = (
    "v1",
    "apps/v1",
    "rbac.authorization.k8s.io/v1",
    "admissionregistration.k8s.io/v1",
    "apiextensions.k8s.io/v1",
    "apiregistration.k8s.io/v1",
    "scheduling.k8s.io/v1",
    "policy/v1",
)


def is_builtin(o: dict) -> bool:
    """Whether `o` is of a Kubernetes API (else a custom resource, which its controller's webhooks may judge)."""
    return o["apiVersion"] in BUILTIN_GROUPS


_RANK = {
    "Namespace": 0,
    "CustomResourceDefinition": 1,
    "ServiceAccount": 2,
    "ClusterRole": 2,
    "Role": 2,
    "ClusterRoleBinding": 3,
    "RoleBinding": 3,
    "ConfigMap": 3,
    "Secret": 3,
    "Service": 4,
    "Deployment": 5,
}


class _Permanent(Exception):
    """An apply the API server refused for good."""


def apply_all(kube: Kube, objects: list[dict], manager: str = "devcluster") -> None:
    """Server-side apply, in dependency order; custom resources wait for their CRD to be established, and a
    webhook that is not serving yet is waited out (the first objects a controller's webhooks judge)."""
    for o in sorted(objects, key=lambda o: _RANK.get(o["kind"], 6)):
        _, path = path_of(o)

        def once(o: dict = o, path: str = path) -> bool:
            try:
                kube.apply(path, o, manager)
            except ApiError as e:
                # a webhook whose pod is not serving yet (500 "failed calling webhook"), an API not served yet (a
                # CRD just established), a throttled or restarting server: wait; anything else is for good
                if e.status in (0, 429, 500, 502, 503, 504) or "could not find the requested resource" in str(e):
                    raise
                raise _Permanent(str(e)) from e
            return True

        what = f"applying {o['kind']} {o['metadata'].get('namespace', '')}/{o['metadata']['name']}"
        try:
            wait_for(what, once, 180, 1.0, fatal=(_Permanent,))
        except _Permanent as e:
            raise RuntimeError(f"{what}: {e}") from None
        if o["kind"] == "CustomResourceDefinition":

            def established(path: str = path) -> bool:
                conditions = (kube.get(path).get("status") or {}).get("conditions") or []
                return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

            wait_for(
                f"CRD {o['metadata']['name']} established",
                established,
                60,
                0.3,
            )


def wait_deployments(kube: Kube, objects: list[dict], timeout_s: float) -> None:
    for o in objects:
        if o["kind"] != "Deployment":
            continue
        _, path = path_of(o)

        def available(path: str = path) -> bool:
            d = kube.get(path)
            return any(
                c["type"] == "Available" and c["status"] == "True"
                for c in (d.get("status") or {}).get("conditions") or []
            ) and (d.get("status") or {}).get("readyReplicas", 0) >= d["spec"].get("replicas", 1)

        wait_for(
            f"Deployment {o['metadata']['namespace']}/{o['metadata']['name']} available", available, timeout_s, 1.0
        )


def dns_objects(domain: str, service_ip: str) -> list[dict]:
    """The cluster DNS: `kube-dns` in kube-system, as kubeadm names it, with CoreDNS's read-only ClusterRole."""
    labels = {"k8s-app": "kube-dns"}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "coredns", "namespace": "kube-system"}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "system:coredns"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["endpoints", "services", "pods", "namespaces"],
                    "verbs": ["list", "watch"],
                },
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "system:coredns"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:coredns"},
            "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": "kube-system"}],
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "coredns", "namespace": "kube-system", "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": "coredns",
                        "dnsPolicy": "Default",
                        "priorityClassName": "system-cluster-critical",
                        "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}],
                        "containers": [
                            {
                                "name": "dns",
                                "image": DNS_IMAGE,
                                "command": ["python", "-m", "devcluster.dns", domain],
                                "ports": [
                                    {"name": "dns", "containerPort": 53, "protocol": "UDP"},
                                    {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
                                ],
                                "readinessProbe": {"tcpSocket": {"port": 53}, "periodSeconds": 2},
                                "resources": {"requests": {"cpu": "100m", "memory": "70Mi"}},
                            }
                        ],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "kube-dns", "namespace": "kube-system", "labels": labels},
            "spec": {
                "clusterIP": service_ip,
                "selector": labels,
                "ports": [
                    {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                    {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                ],
            },
        },
    ]


BLOBS_PORT = 9000
BLOBS_NAMESPACE = "devcluster-system"


def blobstore_objects(service_ip: str) -> list[dict]:
    """An S3 stand-in (`moto`'s server) as a Deployment and a Service `blobs` at a fixed ClusterIP: the cluster's blob
    store, which pods, the connector and the host reach alike (a local folder is not shared: the connector's own
    manifest mounts an emptyDir over /tmp, as a pod's filesystem is its own)."""
    labels = {"app.kubernetes.io/name": "blobs"}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": BLOBS_NAMESPACE}},
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "blobs", "namespace": BLOBS_NAMESPACE, "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "automountServiceAccountToken": False,
                        "containers": [
                            {
                                "name": "s3",
                                "image": "devcluster.local/moto:5",
                                "command": ["moto_server", "-H", "0.0.0.0", "-p", str(BLOBS_PORT)],
                                "ports": [{"name": "s3", "containerPort": BLOBS_PORT}],
                                "readinessProbe": {"tcpSocket": {"port": BLOBS_PORT}, "periodSeconds": 2},
                            }
                        ],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "blobs", "namespace": BLOBS_NAMESPACE, "labels": labels},
            "spec": {
                "clusterIP": service_ip,
                "selector": labels,
                "ports": [{"name": "s3", "port": BLOBS_PORT, "targetPort": BLOBS_PORT}],
            },
        },
    ]


def kueue_objects(gpu_node_labels: dict[str, str]) -> list[dict]:
    """A ResourceFlavor for the CPU nodes and one for the GPU node, a ClusterQueue over both, and a LocalQueue
    `user-queue` in `default` (tests make the LocalQueues of their own namespaces)."""
    return [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ResourceFlavor",
            "metadata": {"name": "cpu"},
            "spec": {"nodeLabels": {"devcluster.flyte.org/pool": "cpu"}},
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ResourceFlavor",
            "metadata": {"name": "gpu"},
            "spec": {
                "nodeLabels": gpu_node_labels,
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            },
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ClusterQueue",
            "metadata": {"name": "cluster-queue"},
            "spec": {
                "namespaceSelector": {},
                "preemption": {"withinClusterQueue": "LowerPriority"},
                # one group: a flavor may appear in one resource group only (Kueue's webhook refuses it twice)
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": "cpu",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "8"},
                                    {"name": "memory", "nominalQuota": "32Gi"},
                                    {"name": "nvidia.com/gpu", "nominalQuota": "0"},
                                ],
                            },
                            {
                                "name": "gpu",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "8"},
                                    {"name": "memory", "nominalQuota": "32Gi"},
                                    {"name": "nvidia.com/gpu", "nominalQuota": "4"},
                                ],
                            },
                        ],
                    },
                ],
            },
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "LocalQueue",
            "metadata": {"name": "user-queue", "namespace": "default"},
            "spec": {"clusterQueue": "cluster-queue"},
        },
    ]


def webhook_ready(kube: Kube, timeout_s: float) -> None:
    """Wait until every webhook configuration has its caBundle (the controllers inject it)."""

    def injected() -> bool:
        missing = []
        for kind in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
            for cfg in kube.get(f"/apis/admissionregistration.k8s.io/v1/{kind}")["items"]:
                for hook in cfg.get("webhooks") or []:
                    if not (hook.get("clientConfig") or {}).get("caBundle"):
                        missing.append(hook["name"])
        if missing:
            raise RuntimeError(f"no caBundle yet: {', '.join(missing[:5])}")
        return True

    wait_for("webhook certificates injected", injected, timeout_s, 1.0)
