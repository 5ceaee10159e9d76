"""Backend configuration: what a cluster operator decides once for every PyTorchJob the connector creates.

One frozen-by-convention dataclass, `BackendConfig`, validated when built. It comes from code defaults, then an
optional YAML file, then scalar environment overrides (`BackendConfig.from_env`), so a Helm chart can mount a
ConfigMap and still flip a single value with an env var. `load_config()` is what the connector calls.

Every field says which PyTorchJob field it sets and why its default is what it is.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import yaml

from backend_plugin.errors import ConfigError
from backend_plugin.log_templates import check_templates
from pytorch_contract.k8s_names import (
    DNS1123_LABEL,
    DNS1123_SUBDOMAIN,
    EXTENDED_RESOURCE_NAME,
    NVIDIA_GPU,
    QUALIFIED_NAME,
    is_label_value,
)
from pytorch_contract.quantity import is_quantity
from pytorch_contract.suggest import did_you_mean
from pytorch_contract.template_keys import CLEAN_POD_POLICIES, DEFAULT_RDZV_BACKEND, RDZV_BACKENDS

__all__ = [
    "AcceleratorPlacement",
    "BackendConfig",
    "ConfigError",
    "load_config",
    "DEFAULT_ACCELERATOR_LABEL",
    "TARGETS",
    "TRAINJOB_RUNTIME_KINDS",
    "TRAINJOB_MANAGED_BY",
]
# ConfigError is defined with the other errors in `backend_plugin.errors` and re-exported here, where it is raised.

DEFAULT_ACCELERATOR_LABEL = "nvidia.com/gpu.product"
"""Node label that NVIDIA GPU feature discovery (part of the GPU operator) puts on every GPU node."""

TARGETS = ("pytorchjob", "trainjob", "auto")
"""`BackendConfig.target` values: the job kind the connector creates (`auto` asks the API server once)."""

TRAINJOB_RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")
"""`spec.runtimeRef.kind` values a TrainJob accepts (Kubeflow Trainer v2.3)."""

TRAINJOB_MANAGED_BY = ("trainer.kubeflow.org/trainjob-controller", "kueue.x-k8s.io/multikueue")
"""`spec.managedBy` values the TrainJob CRD allows."""

_TOLERATION_KEYS = {"key", "operator", "value", "effect", "tolerationSeconds"}
_TOLERATION_OPERATORS = ("Exists", "Equal")
_TOLERATION_EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")
_PREFIX = re.compile(r"^([a-z]([-a-z0-9]{0,14}[a-z0-9])?-?)?\Z")


def _gpu_tolerations() -> dict[str, list[dict[str, Any]]]:
    # nvidia.com/gpu: the taint the NVIDIA GPU operator and most managed clusters (GKE, AKS) put on GPU nodes.
    # flyte/gpu=dedicated: the taint Flyte's own docs recommend for GPU node pools; its Go plugin tolerates it.
    nvidia = [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "flyte/gpu", "operator": "Equal", "value": "dedicated", "effect": "NoSchedule"},
    ]
    # MIG slices live on the same tainted NVIDIA nodes, so they get the same tolerations.
    return {"nvidia.com/gpu": nvidia, "nvidia.com/mig-*": [dict(t) for t in nvidia]}


def _default_annotations() -> dict[str, str]:
    # An Istio sidecar never exits, so a replica pod with one never completes and the job hangs; it also
    # intercepts the rendezvous port. safe-to-evict=false stops the cluster autoscaler from draining a node
    # mid-training: losing one rank kills the whole (non-elastic) job.
    return {"sidecar.istio.io/inject": "false", "cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}


def _default_labels() -> dict[str, str]:
    # Lets operators (and the connector) select every job this backend created with one label selector.
    return {"app.kubernetes.io/managed-by": "flytekitplugins-pytorch"}


@dataclass
class AcceleratorPlacement:
    """Where replicas asking for one accelerator type must run.

    Examples (values are what the cloud puts on its nodes)::

        # GKE
        nvidia-tesla-a100: {node_selector: {cloud.google.com/gke-accelerator: [nvidia-tesla-a100]}}
        # EKS (label added by the Flyte docs' node group setup)
        nvidia-tesla-a100: {node_selector: {k8s.amazonaws.com/accelerator: [nvidia-tesla-a100]}}
        # GPU feature discovery, any cloud
        A100: {node_selector: {nvidia.com/gpu.product: [NVIDIA-A100-SXM4-40GB, NVIDIA-A100-SXM4-80GB]},
               tolerations: [{key: dedicated, operator: Equal, value: a100, effect: NoSchedule}]}

    Args:
        node_selector: node label -> allowed values; becomes one `In` match expression each in
            `affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution` of GPU replicas.
        tolerations: core/v1 tolerations added to GPU replicas of this accelerator type (e.g. a dedicated pool's
            taint). When None, a toleration `<label>=<value>:NoSchedule` for each single-valued selector is used,
            which matches the taint convention of Flyte's Go plugin.

    Raises:
        ConfigError: an empty selector, a bad label key or value, or a malformed toleration.
    """

    node_selector: dict[str, list[str]] = field(default_factory=dict)
    tolerations: Optional[list[dict[str, Any]]] = None

    def __post_init__(self) -> None:
        if not self.node_selector:
            raise ConfigError("accelerators.<type>.node_selector is empty; give at least one label: [values]")
        selector: dict[str, list[str]] = {}
        for key, values in self.node_selector.items():
            if isinstance(values, str):
                values = [values]
            _check_label_key(f"accelerators.<type>.node_selector key {key!r}", key)
            if not values:
                raise ConfigError(f"accelerators.<type>.node_selector[{key!r}] has no values; give at least one")
            for v in values:
                _check_label_value(f"accelerators.<type>.node_selector[{key!r}]", v)
            selector[key] = [str(v) for v in values]
        self.node_selector = selector
        if self.tolerations is not None:
            self.tolerations = [_check_toleration("accelerators.<type>.tolerations", t) for t in self.tolerations]

    def resolved_tolerations(self) -> list[dict[str, Any]]:
        """The tolerations to add to GPU replicas of this accelerator type.

        Returns:
            The configured tolerations, or one `<label>=<value>:NoSchedule` per single-valued selector.
        """
        if self.tolerations is not None:
            return [dict(t) for t in self.tolerations]
        return [
            {"key": k, "operator": "Equal", "value": v[0], "effect": "NoSchedule"}
            for k, v in self.node_selector.items()
            if len(v) == 1
        ]


@dataclass
class BackendConfig:
    """Cluster-wide settings for the PyTorchJobs the backend builds.

    Args: see each field's comment. All mappings are copied and validated in `__post_init__`.

    Raises:
        ConfigError: any field out of range; the message names the field, the value and what is allowed.
    """

    namespace: str = "default"
    """`metadata.namespace` when the execution does not give one. Flyte always passes `<project>-<domain>`;
    `default` only matters for `pytorchjob render`, where it matches what `kubectl apply` would pick."""

    job_name_prefix: str = ""
    """Prepended to every job name (e.g. `pt-`). Empty by default: every character counts toward the 50 a job
    name may use so that `<name>-worker-<index>` pod names stay within 63."""

    gpu_resource_name: str = NVIDIA_GPU
    """Extended resource that a Flyte `GPU` request is written under. NVIDIA's device plugin is by far the most
    common; AMD clusters set `amd.com/gpu` here (tasks can also choose per task with `pytorch.gpu_resource`)."""

    extra_gpu_resource_names: tuple[str, ...] = ("nvidia.com/mig-*", "amd.com/gpu", "gpu.intel.com/*")
    """Resource names (glob patterns) that also count as GPUs when deciding placement: a replica requesting any
    of them gets GPU tolerations and accelerator affinity. Covers MIG slices and other vendors' plugins."""

    gpu_tolerations: dict[str, list[dict[str, Any]]] = field(default_factory=_gpu_tolerations)
    """GPU resource name (glob pattern) -> tolerations added to replicas requesting it. Defaults tolerate the
    `nvidia.com/gpu` taint of the GPU operator and Flyte's `flyte/gpu=dedicated:NoSchedule` convention. Replicas
    without GPUs never get these, so a CPU-only master does not squat on an expensive GPU node."""

    accelerator_label: str = DEFAULT_ACCELERATOR_LABEL
    """Node label used for an accelerator type that is not in `accelerators`: the type is taken as the label
    value as-is. `nvidia.com/gpu.product` is set by GPU feature discovery on any cloud. Use
    `cloud.google.com/gke-accelerator` on GKE or `k8s.amazonaws.com/accelerator` on EKS."""

    accelerators: dict[str, AcceleratorPlacement] = field(default_factory=dict)
    """Accelerator type (`pytorch.accelerator`, or flytekit's `accelerator=` device) -> placement. Empty by
    default: names differ per cluster, see `AcceleratorPlacement` for GKE / EKS / GFD examples."""

    mig_resource_template: str = "nvidia.com/mig-{partition}"
    """Resource name a MIG partition (flytekit `A100.partition_1g_5gb` -> `1g.5gb`) is requested as. This is the
    NVIDIA device plugin's `mixed` strategy naming, the only one where a pod can pick a slice size."""

    default_labels: dict[str, str] = field(default_factory=_default_labels)
    """Labels on every PyTorchJob and every replica pod (execution labels win on conflicts)."""

    default_annotations: dict[str, str] = field(default_factory=_default_annotations)
    """Annotations on every PyTorchJob and every replica pod (execution annotations win on conflicts)."""

    shm_enabled: bool = True
    """Mount a memory-backed emptyDir at `/dev/shm` in every replica. Docker's 64 MiB default breaks DataLoader
    workers and NCCL's shared-memory transport, the most common first failure of a multi-GPU job."""

    shm_size: Optional[str] = None
    """`sizeLimit` of that emptyDir, or None for no limit. No limit by default: tmpfs pages are charged to the
    container's memory cgroup anyway, so the memory limit bounds it; a fixed size is either too small for big
    loaders or a lie above the memory limit. Tasks override with `pytorch.shm_size` ("0" disables)."""

    clean_pod_policy: str = "Running"
    """`runPolicy.cleanPodPolicy` when the task does not set it. `Running` deletes pods still running when the
    job ends (hung workers holding GPUs) but keeps finished pods, so log links and failure messages survive."""

    backoff_limit: Optional[int] = None
    """`runPolicy.backoffLimit` default. Unset: Flyte owns retries (a new job per attempt); the operator's own
    retries only apply with OnFailure/ExitCode restart policies, which set it per task."""

    active_deadline_seconds: Optional[int] = None
    """`runPolicy.activeDeadlineSeconds` default. Unset: Flyte's task timeout already aborts (and deletes) it."""

    ttl_seconds_after_finished: Optional[int] = 86400
    """`runPolicy.ttlSecondsAfterFinished` default: a safety net for jobs whose Flyte execution was lost. The
    connector deletes the jobs it finalizes; one day leaves time to debug a failure with kubectl."""

    suspend: bool = False
    """`runPolicy.suspend` default. Kueue suspends queued jobs itself; a cluster can force `True` to require an
    admission controller to release every job."""

    gang_scheduling: bool = False
    """Set `schedulingPolicy.minAvailable` to all replicas when the task does not say. Off by default because it
    only means something with a gang scheduler (Volcano, scheduler-plugins) installed."""

    rdzv_backend: str = DEFAULT_RDZV_BACKEND
    """`elasticPolicy.rdzvBackend` for elastic jobs whose template leaves it empty: c10d needs no etcd."""

    service_account: Optional[str] = None
    """`serviceAccountName` of replica pods when neither the execution nor the pod template names one."""

    interruptible_tolerations: list[dict[str, Any]] = field(default_factory=list)
    """Tolerations added to every replica of an interruptible attempt (Flyte's `interruptible-tolerations`).
    Empty by default: spot pools are tainted differently per cluster. Typical values::

        # GKE spot / preemptible node pools
        - {key: cloud.google.com/gke-spot, operator: Equal, value: "true", effect: NoSchedule}
        # Flyte docs' convention for a dedicated spot pool (EKS, AKS, ...)
        - {key: flyte/interruptible, operator: Exists, effect: NoSchedule}
        # AKS spot node pools
        - {key: kubernetes.azure.com/scalesetpriority, operator: Equal, value: spot, effect: NoSchedule}"""

    interruptible_node_selector: dict[str, str] = field(default_factory=dict)
    """`nodeSelector` entries added to every replica of an interruptible attempt (Flyte's
    `interruptible-node-selector`); they win over the pod template's on a conflict. Empty by default: without
    it an interruptible task may land on any node, which is always safe. Typical values::

        cloud.google.com/gke-spot: "true"              # GKE
        eks.amazonaws.com/capacityType: SPOT           # EKS managed node groups
        karpenter.sh/capacity-type: spot               # Karpenter
        kubernetes.azure.com/scalesetpriority: spot    # AKS"""

    # --- the target: which Kubeflow job kind a task becomes ---

    target: str = "pytorchjob"
    """Which job the connector creates for a `pytorch` task: `pytorchjob` (Kubeflow training operator v1,
    `kubeflow.org/v1` PyTorchJob), `trainjob` (Kubeflow Trainer v2, `trainer.kubeflow.org/v1alpha1` TrainJob) or
    `auto` (ask the API server once which of the two CRDs it serves, PyTorchJob first; the choice is logged).
    `pytorchjob` by default: it expresses everything a task can ask for and is what existing clusters run; a
    cluster with current Kubeflow (Trainer v2 only) sets `trainjob`. The same template runs on either
    (docs/trainer-v2.md lists what a TrainJob cannot express). Env: `PYTORCHJOB_TARGET`."""

    trainjob_runtime_name: str = "torch-distributed"
    """`spec.runtimeRef.name` of TrainJobs: the training runtime every node is rendered from. `torch-distributed`
    is the ClusterTrainingRuntime that every Trainer v2 install ships for PyTorch."""

    trainjob_runtime_kind: str = "ClusterTrainingRuntime"
    """`spec.runtimeRef.kind`: `ClusterTrainingRuntime` (cluster-wide, what the default install provides) or
    `TrainingRuntime` (one in the job's namespace)."""

    trainjob_managed_by: Optional[str] = None
    """`spec.managedBy` of TrainJobs; None leaves the CRD default (`trainer.kubeflow.org/trainjob-controller`).
    Set `kueue.x-k8s.io/multikueue` to dispatch TrainJobs to worker clusters with MultiKueue."""

    trainjob_pickup_timeout_s: float = 300.0
    """A TrainJob with no condition and no `jobsStatus` this long after creation is failed (permanently: it can
    never run). The Trainer controller writes `jobsStatus` within seconds of creating the JobSet; when the runtime
    is missing or the JobSet cannot be built it only records an Event, so without this the job would wait until
    Flyte's timeout. Five minutes tolerates a controller restart, as `operator_pickup_timeout_s` does for
    PyTorchJobs."""

    # --- connector settings (owned by connector helper) ---

    api_connect_timeout_s: float = 3.0
    """Connect timeout of each Kubernetes API request (never more than what is left of the operation's budget). The
    API server is in the cluster: a connection that takes seconds is not coming; 3 s leaves room for another
    attempt inside every budget."""

    api_timeout_s: float = 5.0
    """Kept so that configs that set it still load; it no longer shortens a request. Each attempt may read for all
    that is left of its operation's budget, as a client-go request is bounded by its context's deadline alone: an
    API server that answers in 7 s must succeed inside the 10 s get budget, and a per-attempt cap below the budget
    only turned a slow answer into a failure. A hung API server is still bounded by the budget."""

    api_get_budget_s: float = 10.0
    """Total time one `get` may spend on the API: the job, its pods and its events, every attempt, timeout and backoff
    sleep together. propeller gives GetTask 15 s (`deploy/propeller-config.yaml`); 10 s leaves 5 s for reading the
    task's error documents of a failed job and for the gRPC round trip. Past it the error is raised and propeller
    polls again."""

    api_create_budget_s: float = 20.0
    """Total time one `create` may spend on the API (discovery for `target: auto`, the POST, the read that adopts a
    job created by an attempt whose answer was lost, and their retries), counted from the start of the call, so the
    inputs it writes first count too. propeller gives CreateTask 30 s; 20 s leaves 10 s for writing the inputs and the
    round trip. Past it the error is raised and propeller retries the create, which is idempotent: the job's name is
    fixed by the attempt, so a job created by a lost answer is adopted, never duplicated."""

    api_delete_budget_s: float = 10.0
    """Total time one `delete` may spend on the API. propeller gives DeleteTask 15 s; past the budget the error is
    raised and propeller retries the delete (a job already gone is success)."""

    api_backoff_initial_s: float = 0.25
    """First backoff between retries; doubled after each attempt up to `api_backoff_max_s`, each with full jitter
    so a thousand jobs polling through an apiserver blip do not retry in lockstep."""

    api_backoff_max_s: float = 4.0
    """Upper bound of one backoff sleep."""

    operator_pickup_timeout_s: float = 300.0
    """A job with no conditions this long after creation is failed with a message saying the Kubeflow training
    operator may not be installed (or not watching the namespace). The operator adds `Created` within seconds;
    five minutes tolerates an operator restart."""

    image_pull_grace_s: float = 120.0
    """How long a replica may sit in ErrImagePull / InvalidImageName / CreateContainerConfigError before the job
    is failed. The kubelet retries pulls (a registry blip heals in seconds to a minute), but a wrong image name or a
    missing Secret never heals, and without this the job would wait in QUEUED until Flyte's timeout."""

    job_start_timeout_s: Optional[float] = 600.0
    """A job the operator has seen (it has a condition) but not started (no `status.startTime`) this long after
    creation is failed, with the job's warning events (e.g. `FailedCreatePod: ... is invalid`) as the reason. The
    operator sets `startTime` on its first reconcile that creates the pods; it stays unset while the API server
    rejects them (an invalid pod spec, an exhausted ResourceQuota, an admission webhook's denial). The operator
    retries with backoff and a webhook or quota blip heals within minutes, so ten minutes; a suspended job is never
    counted, and a gang-scheduled one only when its events show a failure (it may wait for its PodGroup). None
    turns the check off. Flyte's Go plugin has the same check (`kf-operator.timeout`, one minute)."""

    watch_cache: bool = True
    """Answer `get` from a watch-backed cache of our own jobs (`backend_plugin.watch`): one LIST, then one WATCH, per
    job kind and namespace the connector has seen, selecting the jobs by the `app.kubernetes.io/managed-by` label of
    `default_labels`. A poll of a job the cache holds (with the task's uid) costs the API server nothing; a job the
    cache does not hold (created milliseconds ago, a namespace not synced, a dropped watch not back within 5 s, a job
    whose label changed or that the watch reported deleted) is read with a GET, as without the cache, and only a
    GET's 404 says a job is gone. On by default because Flyte polls every running task every few seconds, which
    without it is one GET per task per poll (10,000 tasks polled every 10 s: 1,000 GETs/s). It costs one watch
    connection per kind and polled namespace (renewed every `watch_silence_s`) and, per job, its status and the part
    of its spec the status reads (about 5 KiB per tracked job of RSS in the connector-scale benchmark); RBAC needs
    `list` and `watch` on the job kinds. False reads every job with a GET on every poll, exactly as before the
    cache. Env: `PYTORCHJOB_WATCH_CACHE`."""

    watch_silence_s: float = 20.0
    """How long a watch of the cache may deliver nothing (no event, no BOOKMARK) before it is presumed dead: it is
    then reopened from the last resourceVersion seen, which replays what a half-open connection lost, and the cache
    stops answering from it `max_staleness` (5 s) later if no watch is reopened. The API server sends an idle watch a
    BOOKMARK about once a minute; 20 s is below that on purpose, so that answers are wrong for at most about 20 s
    after a silent stall (the goal is 30 s). The cost: an idle, healthy namespace's watch is reopened every 20 s, one
    request (0.05 requests/s per namespace), and no thread beyond the namespace's own. Env:
    `PYTORCHJOB_WATCH_SILENCE_S`."""

    watch_idle_s: float = 300.0
    """How long a namespace's watch runs without a `get` for any job in it (no tracked job) before its thread and
    watch stop; the next `get` there lists and watches again. Five minutes outlasts every poll interval of Flyte, so a
    namespace with running tasks never stops. Env: `PYTORCHJOB_WATCH_IDLE_S`."""

    get_threads: int = 32
    """Threads of the pool the served connector runs `get` calls in when the cache cannot answer them inline (a GET,
    pod and event lists, error documents), and the size of the kubernetes client's connection pool. flytekit would
    otherwise run them in asyncio's default pool of min(32, CPUs + 4) threads: 6 on a 2-CPU pod, which caps a
    connector at about 6 / (API latency) polls per second. 32 keeps 32 API requests in flight, as many as propeller's
    default GetTask workers. Env: `PYTORCHJOB_GET_THREADS`."""

    error_document_max_bytes: int = 1024 * 1024
    """The most bytes read of one error document (`error.pb`) under a failed task's output prefix. flytekit's
    documents hold one traceback, a few kilobytes; the bound keeps a `get` cheap whatever the prefix holds."""

    log_links: tuple[dict[str, str], ...] = ()
    """Log link templates, one `{name, template[, link_type]}` mapping each, rendered for every replica pod (see
    `backend_plugin.logs`). Empty by default: the URL of a cluster's dashboard or log store is site-specific. An
    entry with a `link_type` is a dynamic link, shown only for tasks whose template config lists that type under
    `link_type` (Flyte's `dynamic-log-links`); any template may use `{{ .taskConfig.<key> }}`."""

    def __post_init__(self) -> None:
        if not isinstance(self.namespace, str) or not DNS1123_LABEL.match(self.namespace):
            raise ConfigError(f"namespace={self.namespace!r} is not a DNS-1123 label (lowercase a-z, 0-9, '-')")
        if not isinstance(self.job_name_prefix, str) or not _PREFIX.match(self.job_name_prefix):
            raise ConfigError(
                f"job_name_prefix={self.job_name_prefix!r} must be empty or start with a-z, use a-z 0-9 '-', "
                "and be at most 17 characters (e.g. 'pt-')"
            )
        _check_resource_name("gpu_resource_name", self.gpu_resource_name)
        if isinstance(self.extra_gpu_resource_names, str):
            raise ConfigError("extra_gpu_resource_names must be a list of names, not a string")
        self.extra_gpu_resource_names = tuple(str(n) for n in self.extra_gpu_resource_names)
        if not isinstance(self.gpu_tolerations, Mapping):
            raise ConfigError(f"gpu_tolerations={self.gpu_tolerations!r} must map resource name -> tolerations")
        self.gpu_tolerations = {
            str(name): [_check_toleration(f"gpu_tolerations[{name!r}]", t) for t in (tols or [])]
            for name, tols in self.gpu_tolerations.items()
        }
        _check_label_key("accelerator_label", self.accelerator_label)
        if not isinstance(self.accelerators, Mapping):
            raise ConfigError(f"accelerators={self.accelerators!r} must map accelerator type -> placement")
        accelerators = {}
        for name, placement in self.accelerators.items():
            if isinstance(placement, Mapping):
                try:
                    placement = AcceleratorPlacement(**placement)
                except TypeError as e:
                    raise ConfigError(f"accelerators[{name!r}]: {e}; allowed keys: node_selector, tolerations") from e
            if not isinstance(placement, AcceleratorPlacement):
                raise ConfigError(f"accelerators[{name!r}]={placement!r} is not a placement mapping")
            accelerators[str(name)] = placement
        self.accelerators = accelerators
        if "{partition}" not in self.mig_resource_template:
            raise ConfigError(
                f"mig_resource_template={self.mig_resource_template!r} must contain '{{partition}}', "
                "e.g. 'nvidia.com/mig-{partition}'"
            )
        for attr in ("default_labels", "default_annotations"):
            value = getattr(self, attr)
            if not isinstance(value, Mapping):
                raise ConfigError(f"{attr}={value!r} must be a mapping of string keys to string values")
            clean = {}
            for k, v in value.items():
                _check_label_key(f"{attr} key {k!r}", k)
                if attr == "default_labels":
                    _check_label_value(f"{attr}[{k!r}]", v)
                clean[str(k)] = str(v)
            setattr(self, attr, clean)
        if self.shm_size is not None:
            self.shm_size = str(self.shm_size)
            _check_quantity("shm_size", self.shm_size)
        if self.clean_pod_policy not in CLEAN_POD_POLICIES:
            raise ConfigError(f"clean_pod_policy={self.clean_pod_policy!r} is not one of {list(CLEAN_POD_POLICIES)}")
        for attr in ("backoff_limit", "active_deadline_seconds", "ttl_seconds_after_finished"):
            value = getattr(self, attr)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ConfigError(f"{attr}={value!r} must be a non-negative integer or None")
        if self.active_deadline_seconds == 0:
            raise ConfigError("active_deadline_seconds=0 is not allowed; use None for no deadline or a positive int")
        for attr in ("shm_enabled", "suspend", "gang_scheduling"):
            if not isinstance(getattr(self, attr), bool):
                raise ConfigError(f"{attr}={getattr(self, attr)!r} must be true or false")
        if self.rdzv_backend not in RDZV_BACKENDS:
            raise ConfigError(f"rdzv_backend={self.rdzv_backend!r} is not one of {list(RDZV_BACKENDS)}")
        if not isinstance(self.interruptible_tolerations, (list, tuple)):
            raise ConfigError(
                f"interruptible_tolerations={self.interruptible_tolerations!r} must be a list of tolerations"
            )
        self.interruptible_tolerations = [
            _check_toleration(f"interruptible_tolerations[{i}]", t)
            for i, t in enumerate(self.interruptible_tolerations)
        ]
        if not isinstance(self.interruptible_node_selector, Mapping):
            raise ConfigError(
                f"interruptible_node_selector={self.interruptible_node_selector!r} must map node label -> value"
            )
        selector = {}
        for k, v in self.interruptible_node_selector.items():
            _check_label_key(f"interruptible_node_selector key {k!r}", k)
            _check_label_value(f"interruptible_node_selector[{k!r}]", v)
            selector[str(k)] = str(v)
        self.interruptible_node_selector = selector
        if self.service_account is not None and not DNS1123_SUBDOMAIN.match(str(self.service_account)):
            raise ConfigError(f"service_account={self.service_account!r} is not a DNS-1123 subdomain")
        self._check_target_settings()
        self._check_connector_settings()

    def _check_target_settings(self) -> None:
        """The target section: a known target, a runtime reference the TrainJob CRD accepts."""
        if self.target not in TARGETS:
            raise ConfigError(f"target={self.target!r} is not one of {list(TARGETS)}")
        if not isinstance(self.trainjob_runtime_name, str) or not DNS1123_SUBDOMAIN.match(self.trainjob_runtime_name):
            raise ConfigError(
                f"trainjob_runtime_name={self.trainjob_runtime_name!r} is not a DNS-1123 subdomain "
                "(the name of a ClusterTrainingRuntime or TrainingRuntime, e.g. 'torch-distributed')"
            )
        if self.trainjob_runtime_kind not in TRAINJOB_RUNTIME_KINDS:
            raise ConfigError(
                f"trainjob_runtime_kind={self.trainjob_runtime_kind!r} is not one of {list(TRAINJOB_RUNTIME_KINDS)}"
            )
        if self.trainjob_managed_by is not None and self.trainjob_managed_by not in TRAINJOB_MANAGED_BY:
            raise ConfigError(
                f"trainjob_managed_by={self.trainjob_managed_by!r} is not one of {list(TRAINJOB_MANAGED_BY)} or null"
            )
        value = self.trainjob_pickup_timeout_s
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ConfigError(f"trainjob_pickup_timeout_s={value!r} must be a non-negative number of seconds")

    def _check_connector_settings(self) -> None:
        """The connector section: positive timeouts, budgets and backoffs, well-formed log links."""
        for attr in (
            "api_connect_timeout_s",
            "api_timeout_s",
            "api_backoff_initial_s",
            "api_backoff_max_s",
            "api_get_budget_s",
            "api_create_budget_s",
            "api_delete_budget_s",
        ):
            value = getattr(self, attr)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ConfigError(f"{attr}={value!r} must be a positive number of seconds")
        for attr in ("operator_pickup_timeout_s", "image_pull_grace_s", "job_start_timeout_s"):
            value = getattr(self, attr)
            if value is None and attr == "job_start_timeout_s":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                none = " or None to turn the check off" if attr == "job_start_timeout_s" else ""
                raise ConfigError(f"{attr}={value!r} must be a non-negative number of seconds{none}")
        for attr in ("watch_silence_s", "watch_idle_s"):
            value = getattr(self, attr)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ConfigError(f"{attr}={value!r} must be a positive number of seconds")
        if not isinstance(self.watch_cache, bool):
            raise ConfigError(f"watch_cache={self.watch_cache!r} must be true or false")
        threads = self.get_threads
        if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= 1024:
            raise ConfigError(f"get_threads={threads!r} must be an integer from 1 to 1024")
        size = self.error_document_max_bytes
        if isinstance(size, bool) or not isinstance(size, int) or size < 1024:
            raise ConfigError(f"error_document_max_bytes={size!r} must be an integer >= 1024")
        check_templates(self.log_links)

    # -- queries used by the builder -----------------------------------------------------------------------

    def is_gpu_resource(self, name: str) -> bool:
        """Whether a container resource name counts as a GPU for placement.

        Args:
            name: a Kubernetes resource name, e.g. `nvidia.com/mig-1g.5gb`.

        Returns:
            True for `gpu_resource_name` and any match of `extra_gpu_resource_names` / `gpu_tolerations` keys.
        """
        if name == self.gpu_resource_name:
            return True
        return _matches_any(name, (*self.extra_gpu_resource_names, *self.gpu_tolerations))

    def tolerations_for(self, resource_names: list[str]) -> list[dict[str, Any]]:
        """GPU tolerations for a replica requesting `resource_names` (duplicates removed, order kept).

        Args:
            resource_names: the GPU resource names one replica requests.

        Returns:
            The union of the `gpu_tolerations` entries whose pattern matches any of the names.
        """
        out: list[dict[str, Any]] = []
        for name in resource_names:
            for pattern, tolerations in self.gpu_tolerations.items():
                if fnmatch.fnmatchcase(name, pattern):
                    out.extend(dict(t) for t in tolerations if t not in out)
        return out

    def placement_for(self, accelerator: str) -> AcceleratorPlacement:
        """Placement of an accelerator type: the configured one, else `accelerator_label` = type.

        Args:
            accelerator: the accelerator type from the task.

        Returns:
            The `AcceleratorPlacement` to apply to GPU replicas.

        Raises:
            ConfigError: the type is not configured and is not a valid label value.
        """
        if accelerator in self.accelerators:
            return self.accelerators[accelerator]
        return AcceleratorPlacement(node_selector={self.accelerator_label: [accelerator]})

    def placement_problem(self, accelerator: str) -> Optional[str]:
        """Why the placement of an accelerator type can match no node, when that can be told from the config alone.

        An unmapped type becomes `accelerator_label In [type]`. Under the default label, `nvidia.com/gpu.product`,
        GPU feature discovery writes the full product name with '-' for spaces (`NVIDIA-A100-SXM4-80GB`,
        `Tesla-T4`), so a short name such as `A100`, or a cloud's lower-case name such as `nvidia-tesla-a100`, is
        a value no node carries and the pods stay Pending. Other labels are the cluster's to know: no warning.

        Args:
            accelerator: the accelerator type from the task.

        Returns:
            A one-line warning naming the option that fixes it, or None.
        """
        if accelerator in self.accelerators or self.accelerator_label != DEFAULT_ACCELERATOR_LABEL:
            return None
        if "-" in accelerator and accelerator != accelerator.lower():
            return None  # the shape of a product name (NVIDIA-A100-SXM4-80GB, Tesla-V100-SXM2-16GB)
        return (
            f"accelerator {accelerator!r} places GPU replicas on nodes labelled "
            f"{self.accelerator_label}={accelerator}, a value GPU feature discovery never sets (it writes the full "
            "product name, e.g. NVIDIA-A100-SXM4-80GB): "
            f"map it in the backend config's `accelerators` ({accelerator}: {{node_selector: "
            f"{{{self.accelerator_label}: [<product names>]}}}}) or set `accelerator_label` to your cloud's label"
        )

    # -- loading --------------------------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BackendConfig:
        """Build from a mapping of field names (YAML keys may use '-' or '_').

        Args:
            data: field name -> value.

        Returns:
            The validated config.

        Raises:
            ConfigError: unknown keys (listed with the allowed ones) or invalid values.
        """
        if not isinstance(data, Mapping):
            raise ConfigError(f"backend config must be a mapping of field -> value, got {type(data).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {}
        for key, value in data.items():
            name = str(key).replace("-", "_")
            if name not in names:
                raise ConfigError(f"unknown backend config key {key!r}; {did_you_mean(name, names)}")
            kwargs[name] = value
        return cls(**kwargs)

    @classmethod
    def from_yaml(cls, path_or_str: Union[str, os.PathLike]) -> BackendConfig:
        """Load from a YAML file path or a YAML document string.

        Args:
            path_or_str: a path to an existing file, or YAML text (anything that is not an existing path).

        Returns:
            The validated config; an empty document gives the defaults.

        Raises:
            ConfigError: the YAML does not parse, is not a mapping, or has bad keys/values.
        """
        text = str(path_or_str)
        source = "YAML string"
        if isinstance(path_or_str, os.PathLike) or ("\n" not in text and Path(text).is_file()):
            source = str(path_or_str)
            text = Path(path_or_str).read_text(encoding="utf-8")
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ConfigError(f"backend config {source} is not valid YAML: {e}") from e
        if data is None:
            data = {}
        try:
            return cls.from_dict(data)
        except ConfigError as e:
            raise ConfigError(f"{source}: {e}") from e

    @classmethod
    def from_env(cls, prefix: str = "PYTORCHJOB_", environ: Optional[Mapping[str, str]] = None) -> BackendConfig:
        """Load `<prefix>CONFIG` (a YAML file path) if set, then apply scalar `<prefix><FIELD>` overrides.

        Scalar fields only (strings, ints, bools, `shm_size`); values are parsed as YAML scalars, so
        `PYTORCHJOB_SUSPEND=true` and `PYTORCHJOB_BACKOFF_LIMIT=3` work, and an empty value or `null` means None.
        Mapping fields (labels, tolerations, accelerators) come from the YAML file only.

        Args:
            prefix: environment variable prefix.
            environ: the environment to read; `os.environ` when None.

        Returns:
            The validated config.

        Raises:
            ConfigError: the file or any override is invalid, or an override names a mapping field.
        """
        env = os.environ if environ is None else environ
        data: dict[str, Any] = {}
        path = env.get(f"{prefix}CONFIG")
        if path:
            file = Path(path)
            if not file.is_file():
                raise ConfigError(f"{prefix}CONFIG={path!r} is not a readable file")
            data = dataclasses.asdict(cls.from_yaml(file))
        scalar = {
            f.name for f in dataclasses.fields(cls) if not isinstance(getattr(cls(), f.name), (dict, list, tuple))
        }
        for f in dataclasses.fields(cls):
            key = f"{prefix}{f.name.upper()}"
            if key not in env:
                continue
            if f.name not in scalar:
                raise ConfigError(f"{key} cannot be set from the environment; put {f.name} in the {prefix}CONFIG file")
            raw = env[key]
            value = yaml.safe_load(raw) if raw.strip() else None
            if f.name in _VERBATIM_ENV and value is not None:
                value = raw  # keep strings such as "010" or "1e3" verbatim
            data[f.name] = value
        return cls.from_dict(data)


@functools.lru_cache(maxsize=1024)
def _matches_any(name: str, patterns: tuple[str, ...]) -> bool:
    """Whether `name` matches a glob of `patterns` (cached: the builder asks for every resource of every replica)."""
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


_VERBATIM_ENV = ("namespace", "job_name_prefix", "gpu_resource_name", "shm_size", "target", "trainjob_runtime_name")


def load_config(environ: Optional[Mapping[str, str]] = None) -> BackendConfig:
    """The config the connector uses: defaults, then `PYTORCHJOB_CONFIG` YAML, then `PYTORCHJOB_*` overrides.

    Args:
        environ: the environment to read; `os.environ` when None.

    Returns:
        The validated config.

    Raises:
        ConfigError: when the file or an override is invalid.
    """
    return BackendConfig.from_env(environ=environ)


def _check_label_key(what: str, key: Any) -> None:
    if not isinstance(key, str) or not QUALIFIED_NAME.match(key):
        raise ConfigError(f"{what} is not a Kubernetes label key (optional 'prefix/' and name of <=63 [A-Za-z0-9-_.])")


def _check_label_value(what: str, value: Any) -> None:
    if not isinstance(value, (str, int)) or isinstance(value, bool) or not is_label_value(str(value)):
        raise ConfigError(f"{what}={value!r} is not a Kubernetes label value (<=63 of [A-Za-z0-9-_.])")


def _check_resource_name(what: str, name: Any) -> None:
    if not isinstance(name, str) or not EXTENDED_RESOURCE_NAME.match(name):
        raise ConfigError(f"{what}={name!r} is not an extended resource name like 'nvidia.com/gpu' or 'amd.com/gpu'")


def _check_quantity(what: str, value: str) -> None:
    if not is_quantity(value):
        raise ConfigError(f"{what}={value!r} is not a Kubernetes quantity; use e.g. '16Gi' or '512Mi'")


def _check_toleration(what: str, toleration: Any) -> dict[str, Any]:
    if not isinstance(toleration, Mapping):
        raise ConfigError(f"{what}: {toleration!r} is not a toleration mapping")
    unknown = set(toleration) - _TOLERATION_KEYS
    if unknown:
        raise ConfigError(f"{what}: unknown toleration keys {sorted(unknown)}; allowed: {sorted(_TOLERATION_KEYS)}")
    op = toleration.get("operator", "Equal")
    if op not in _TOLERATION_OPERATORS:
        raise ConfigError(f"{what}: operator={op!r} is not one of {list(_TOLERATION_OPERATORS)}")
    if op == "Exists" and toleration.get("value"):
        raise ConfigError(f"{what}: operator Exists must not have a value (got {toleration['value']!r})")
    if toleration.get("effect", "") not in _TOLERATION_EFFECTS:
        raise ConfigError(f"{what}: effect={toleration.get('effect')!r} is not one of {list(_TOLERATION_EFFECTS)}")
    return {k: toleration[k] for k in ("key", "operator", "value", "effect", "tolerationSeconds") if k in toleration}
