"""The sections of the backend config: the `Section` base, the checks of its values, and every section that names no
job kind (the job's defaults, GPU and interruptible placement, the API, the watch cache, reading jobs back).

`BackendConfig` (`backend_plugin.config`) is these sections and one per job kind (each declared by its kind,
`backend_plugin.kinds.<kind>`), in the manner of kopf's `OperatorSettings`. A section is a dataclass that checks its
own values when built (`__post_init__`) and names each value by its *key*: the top-level YAML key and
`PYTORCHJOB_<KEY>` variable users set (`namespace`, `api_get_budget_s`, `trainjob_runtime_name`), which is the
field's name unless the section's `KEYS` says otherwise. Every field says which job field it sets and why its default
is what it is. This module imports nothing of the backend but its errors and the log-link templates' checks (two
modules that import nothing else of it): the kinds declare their sections on `Section`, and the watch cache and the
API client run on `WatchSettings` and `ApiSettings`, without the assembled config. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional, TypeVar

from backend_plugin.errors import ConfigError
from backend_plugin.log_templates import LogTemplate, check_templates, uses_time
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
    "Section",
    "JobDefaults",
    "RunPolicyDefaults",
    "SharedMemoryDefaults",
    "AcceleratorPlacement",
    "GpuPlacement",
    "InterruptiblePlacement",
    "ApiSettings",
    "WatchSettings",
    "StatusSettings",
    "DEFAULT_ACCELERATOR_LABEL",
    "check_label_key",
    "check_label_value",
    "check_resource_name",
    "check_quantity",
    "check_toleration",
    "check_tolerations",
    "check_label_map",
    "check_seconds",
    "check_bool",
    "check_int",
    "check_choice",
]

S = TypeVar("S", bound="Section")

_TOLERATION_KEYS = ("key", "operator", "value", "effect", "tolerationSeconds")
_TOLERATION_OPERATORS = ("Exists", "Equal")
_TOLERATION_EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")


@dataclasses.dataclass
class Section:
    """One section of the backend config: a dataclass whose `__post_init__` checks its values.

    Class attributes:
        KEYS: field name -> its key (top-level YAML key and `PYTORCHJOB_<KEY>`), where the two differ.
        VERBATIM: fields read from the environment as the text given (`"010"` stays a string, not 8).
    """

    KEYS: ClassVar[Mapping[str, str]] = {}
    VERBATIM: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def keys(cls) -> dict[str, str]:
        """Every key of this section.

        Returns:
            key -> field name, in field order.
        """
        return {cls.KEYS.get(f.name, f.name): f.name for f in dataclasses.fields(cls)}

    @classmethod
    def key(cls, name: str) -> str:
        """The key of one field, the name messages use.

        Args:
            name: the field's name.

        Returns:
            Its key.
        """
        return cls.KEYS.get(name, name)

    @classmethod
    def from_mapping(cls: type[S], data: Mapping[str, Any], where: str) -> S:
        """Build from a mapping of field names or keys (`-` may stand for `_`).

        Args:
            data: field name (or key) -> value.
            where: the section's name, for messages.

        Returns:
            The checked section.

        Raises:
            ConfigError: not a mapping, an unknown name (with the nearest ones), or a value out of range.
        """
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where} must be a mapping of field -> value, got {type(data).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        by_key = cls.keys()
        kwargs = {}
        for raw, value in data.items():
            name = str(raw).replace("-", "_")
            name = by_key.get(name, name)
            if name not in names:
                raise ConfigError(f"unknown key {raw!r} in {where}; {did_you_mean(name, names)}")
            kwargs[name] = value
        return cls(**kwargs)

    def is_scalar(self, name: str) -> bool:
        """Whether a field may be set from the environment (not a mapping or a list).

        Args:
            name: the field's name.

        Returns:
            True for strings, numbers, booleans and None.
        """
        return not isinstance(getattr(self, name), (dict, list, tuple))


def check_label_key(what: str, key: Any) -> None:
    """A Kubernetes label (or annotation) key.

    Args:
        what: the setting, for the message.
        key: the key.

    Raises:
        ConfigError: not an optional `prefix/` and a name of at most 63 of [A-Za-z0-9-_.].
    """
    if not isinstance(key, str) or not QUALIFIED_NAME.match(key):
        raise ConfigError(f"{what} is not a Kubernetes label key (optional 'prefix/' and name of <=63 [A-Za-z0-9-_.])")


def check_label_value(what: str, value: Any) -> None:
    """A Kubernetes label value.

    Args:
        what: the setting, for the message.
        value: the value (a string or an integer).

    Raises:
        ConfigError: not at most 63 of [A-Za-z0-9-_.].
    """
    if not isinstance(value, (str, int)) or isinstance(value, bool) or not is_label_value(str(value)):
        raise ConfigError(f"{what}={value!r} is not a Kubernetes label value (<=63 of [A-Za-z0-9-_.])")


def check_label_map(what: str, value: Any, *, values_are_labels: bool) -> dict[str, str]:
    """A mapping of label keys to strings (labels, annotations, a node selector).

    Args:
        what: the setting, for messages.
        value: the mapping.
        values_are_labels: whether each value must be a label value (labels, node selectors) or any string.

    Returns:
        A fresh dict of strings.

    Raises:
        ConfigError: not a mapping, or a key or value that is not allowed.
    """
    if not isinstance(value, Mapping):
        raise ConfigError(f"{what}={value!r} must be a mapping of string keys to string values")
    out = {}
    for k, v in value.items():
        check_label_key(f"{what} key {k!r}", k)
        if values_are_labels:
            check_label_value(f"{what}[{k!r}]", v)
        out[str(k)] = str(v)
    return out


def check_resource_name(what: str, name: Any) -> None:
    """An extended resource name.

    Args:
        what: the setting, for the message.
        name: the name.

    Raises:
        ConfigError: not a domain-prefixed resource name such as `nvidia.com/gpu`.
    """
    if not isinstance(name, str) or not EXTENDED_RESOURCE_NAME.match(name):
        raise ConfigError(f"{what}={name!r} is not an extended resource name like 'nvidia.com/gpu' or 'amd.com/gpu'")


def check_quantity(what: str, value: str) -> None:
    """A Kubernetes quantity.

    Args:
        what: the setting, for the message.
        value: the quantity's text.

    Raises:
        ConfigError: not a quantity.
    """
    if not is_quantity(value):
        raise ConfigError(f"{what}={value!r} is not a Kubernetes quantity; use e.g. '16Gi' or '512Mi'")


def check_toleration(what: str, toleration: Any) -> dict[str, Any]:
    """One core/v1 toleration.

    Args:
        what: the setting, for messages.
        toleration: the toleration mapping.

    Returns:
        The toleration with its keys in the order Kubernetes writes them.

    Raises:
        ConfigError: not a mapping, an unknown key, an operator or effect not allowed, a value with `Exists`.
    """
    if not isinstance(toleration, Mapping):
        raise ConfigError(f"{what}: {toleration!r} is not a toleration mapping")
    unknown = set(toleration) - set(_TOLERATION_KEYS)
    if unknown:
        raise ConfigError(f"{what}: unknown toleration keys {sorted(unknown)}; allowed: {sorted(_TOLERATION_KEYS)}")
    op = toleration.get("operator", "Equal")
    if op not in _TOLERATION_OPERATORS:
        raise ConfigError(f"{what}: operator={op!r} is not one of {list(_TOLERATION_OPERATORS)}")
    if op == "Exists" and toleration.get("value"):
        raise ConfigError(f"{what}: operator Exists must not have a value (got {toleration['value']!r})")
    if toleration.get("effect", "") not in _TOLERATION_EFFECTS:
        raise ConfigError(f"{what}: effect={toleration.get('effect')!r} is not one of {list(_TOLERATION_EFFECTS)}")
    return {k: toleration[k] for k in _TOLERATION_KEYS if k in toleration}


def check_tolerations(what: str, tolerations: Any) -> list[dict[str, Any]]:
    """A list of tolerations.

    Args:
        what: the setting, for messages.
        tolerations: the list.

    Returns:
        The checked tolerations.

    Raises:
        ConfigError: not a list, or a toleration that is not allowed (named by its index).
    """
    if not isinstance(tolerations, (list, tuple)):
        raise ConfigError(f"{what}={tolerations!r} must be a list of tolerations")
    return [check_toleration(f"{what}[{i}]", t) for i, t in enumerate(tolerations)]


def check_seconds(what: str, value: Any, *, positive: bool, optional: bool = False) -> None:
    """A number of seconds.

    Args:
        what: the setting, for the message.
        value: the value.
        positive: whether 0 is refused (a timeout or budget) or allowed (a grace period, a threshold).
        optional: whether None (the check turned off) is allowed.

    Raises:
        ConfigError: not a number, negative, 0 where it must be positive, or None where it is not allowed.
    """
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or (positive and not value > 0):
        rule = "a positive number of seconds" if positive else "a non-negative number of seconds"
        off = " or None to turn the check off" if optional else ""
        raise ConfigError(f"{what}={value!r} must be {rule}{off}")


def check_bool(what: str, value: Any) -> None:
    """A boolean (not a string such as "yes").

    Args:
        what: the setting, for the message.
        value: the value.

    Raises:
        ConfigError: not True or False.
    """
    if not isinstance(value, bool):
        raise ConfigError(f"{what}={value!r} must be true or false")


def check_int(what: str, value: Any, *, low: int, high: Optional[int] = None, optional: bool = False) -> None:
    """An integer in a range.

    Args:
        what: the setting, for the message.
        value: the value.
        low: the smallest allowed.
        high: the largest allowed; None for no bound.
        optional: whether None is allowed.

    Raises:
        ConfigError: not an integer, or out of range.
    """
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        raise ConfigError(f"{what}={value!r} must be {_int_rule(low, high, optional)}")


def _int_rule(low: int, high: Optional[int], optional: bool) -> str:
    if high is not None:
        return f"an integer from {low} to {high}"
    if low == 0:
        return "a non-negative integer" + (" or None" if optional else "")
    return f"an integer >= {low}"


def check_choice(what: str, value: Any, allowed: tuple[Any, ...], *, optional: bool = False) -> None:
    """One of a set of values.

    Args:
        what: the setting, for the message.
        value: the value.
        allowed: the values allowed.
        optional: whether None is allowed too.

    Raises:
        ConfigError: not one of them.
    """
    if value is None and optional:
        return
    if value not in allowed:
        raise ConfigError(f"{what}={value!r} is not one of {list(allowed)}" + (" or null" if optional else ""))


DEFAULT_ACCELERATOR_LABEL = "nvidia.com/gpu.product"
"""Node label that NVIDIA GPU feature discovery (part of the GPU operator) puts on every GPU node."""

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


# --------------------------------------------------------------------------------------------------------------
# The job: metadata, run policy, shared memory


@dataclass
class JobDefaults(Section):
    """The `job` section: the job's namespace, name, labels and annotations, and its pods' service account.

    Raises:
        ConfigError: a namespace, prefix, label, annotation key or service account Kubernetes does not accept.
    """

    VERBATIM = ("namespace", "job_name_prefix")

    namespace: str = "default"
    """`metadata.namespace` when the execution does not give one. Flyte always passes `<project>-<domain>`;
    `default` only matters for `pytorchjob render`, where it matches what `kubectl apply` would pick."""

    job_name_prefix: str = ""
    """Prepended to every job name (e.g. `pt-`). Empty by default: every character counts toward the 50 a job
    name may use so that `<name>-worker-<index>` pod names stay within 63."""

    default_labels: dict[str, str] = field(default_factory=_default_labels)
    """Labels on every job and every replica pod (execution labels win on conflicts)."""

    default_annotations: dict[str, str] = field(default_factory=_default_annotations)
    """Annotations on every job and every replica pod (execution annotations win on conflicts)."""

    service_account: Optional[str] = None
    """`serviceAccountName` of replica pods when neither the execution nor the pod template names one."""

    def __post_init__(self) -> None:
        if not isinstance(self.namespace, str) or not DNS1123_LABEL.match(self.namespace):
            raise ConfigError(f"namespace={self.namespace!r} is not a DNS-1123 label (lowercase a-z, 0-9, '-')")
        if not isinstance(self.job_name_prefix, str) or not _PREFIX.match(self.job_name_prefix):
            raise ConfigError(
                f"job_name_prefix={self.job_name_prefix!r} must be empty or start with a-z, use a-z 0-9 '-', "
                "and be at most 17 characters (e.g. 'pt-')"
            )
        self.default_labels = check_label_map("default_labels", self.default_labels, values_are_labels=True)
        self.default_annotations = check_label_map(
            "default_annotations", self.default_annotations, values_are_labels=False
        )
        if self.service_account is not None and not DNS1123_SUBDOMAIN.match(str(self.service_account)):
            raise ConfigError(f"service_account={self.service_account!r} is not a DNS-1123 subdomain")


@dataclass
class RunPolicyDefaults(Section):
    """The `run_policy` section: the job's run policy where the task does not set it (a value the task sets wins,
    0 included).

    Raises:
        ConfigError: a policy, count, deadline or backend that is not allowed.
    """

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

    def __post_init__(self) -> None:
        check_choice("clean_pod_policy", self.clean_pod_policy, tuple(CLEAN_POD_POLICIES))
        for name in ("backoff_limit", "active_deadline_seconds", "ttl_seconds_after_finished"):
            check_int(name, getattr(self, name), low=0, optional=True)
        if self.active_deadline_seconds == 0:
            raise ConfigError("active_deadline_seconds=0 is not allowed; use None for no deadline or a positive int")
        check_bool("suspend", self.suspend)
        check_bool("gang_scheduling", self.gang_scheduling)
        check_choice("rdzv_backend", self.rdzv_backend, tuple(RDZV_BACKENDS))


@dataclass
class SharedMemoryDefaults(Section):
    """The `shm` section: the memory-backed `/dev/shm` volume of every replica.

    Raises:
        ConfigError: `enabled` not a boolean, or a size that is not a Kubernetes quantity.
    """

    KEYS = {"enabled": "shm_enabled", "size": "shm_size"}
    VERBATIM = ("size",)

    enabled: bool = True
    """Mount a memory-backed emptyDir at `/dev/shm` in every replica. Docker's 64 MiB default breaks DataLoader
    workers and NCCL's shared-memory transport, the most common first failure of a multi-GPU job. Key:
    `shm_enabled`."""

    size: Optional[str] = None
    """`sizeLimit` of that emptyDir, or None for no limit. No limit by default: tmpfs pages are charged to the
    container's memory cgroup anyway, so the memory limit bounds it; a fixed size is either too small for big
    loaders or a lie above the memory limit. Tasks override with `pytorch.shm_size` ("0" disables). Key:
    `shm_size`."""

    def __post_init__(self) -> None:
        check_bool("shm_enabled", self.enabled)
        if self.size is not None:
            self.size = str(self.size)
            check_quantity("shm_size", self.size)


# --------------------------------------------------------------------------------------------------------------
# Placement: GPUs and interruptible attempts


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
        self.node_selector = {str(k): _selector_values(k, v) for k, v in self.node_selector.items()}
        if self.tolerations is not None:
            self.tolerations = [check_toleration("accelerators.<type>.tolerations", t) for t in self.tolerations]

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


def _selector_values(key: Any, values: Any) -> list[str]:
    """One `node_selector` entry of an accelerator: a label key and its allowed values."""
    if isinstance(values, str):
        values = [values]
    check_label_key(f"accelerators.<type>.node_selector key {key!r}", key)
    if not values:
        raise ConfigError(f"accelerators.<type>.node_selector[{key!r}] has no values; give at least one")
    for v in values:
        check_label_value(f"accelerators.<type>.node_selector[{key!r}]", v)
    return [str(v) for v in values]


def _placement(name: Any, placement: Any) -> AcceleratorPlacement:
    """One `accelerators` entry, a mapping or an `AcceleratorPlacement`."""
    if isinstance(placement, Mapping):
        try:
            placement = AcceleratorPlacement(**placement)
        except TypeError as e:
            raise ConfigError(f"accelerators[{name!r}]: {e}; allowed keys: node_selector, tolerations") from e
    if not isinstance(placement, AcceleratorPlacement):
        raise ConfigError(f"accelerators[{name!r}]={placement!r} is not a placement mapping")
    return placement


@dataclass
class GpuPlacement(Section):
    """The `gpu` section: which resources are GPUs, and where replicas requesting them run.

    Raises:
        ConfigError: a resource name, toleration, label or placement Kubernetes does not accept, or a MIG template
            without `{partition}`.
    """

    KEYS = {
        "resource_name": "gpu_resource_name",
        "extra_resource_names": "extra_gpu_resource_names",
        "tolerations": "gpu_tolerations",
    }
    VERBATIM = ("resource_name",)

    resource_name: str = NVIDIA_GPU
    """Extended resource that a Flyte `GPU` request is written under. NVIDIA's device plugin is by far the most
    common; AMD clusters set `amd.com/gpu` here (tasks can also choose per task with `pytorch.gpu_resource`). Key:
    `gpu_resource_name`."""

    extra_resource_names: tuple[str, ...] = ("nvidia.com/mig-*", "amd.com/gpu", "gpu.intel.com/*")
    """Resource names (glob patterns) that also count as GPUs when deciding placement: a replica requesting any
    of them gets GPU tolerations and accelerator affinity. Covers MIG slices and other vendors' plugins. Key:
    `extra_gpu_resource_names`."""

    tolerations: dict[str, list[dict[str, Any]]] = field(default_factory=_gpu_tolerations)
    """GPU resource name (glob pattern) -> tolerations added to replicas requesting it. Defaults tolerate the
    `nvidia.com/gpu` taint of the GPU operator and Flyte's `flyte/gpu=dedicated:NoSchedule` convention. Replicas
    without GPUs never get these, so a CPU-only master does not squat on an expensive GPU node. Key:
    `gpu_tolerations`."""

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

    def __post_init__(self) -> None:
        check_resource_name("gpu_resource_name", self.resource_name)
        if isinstance(self.extra_resource_names, str):
            raise ConfigError("extra_gpu_resource_names must be a list of names, not a string")
        self.extra_resource_names = tuple(str(n) for n in self.extra_resource_names)
        if not isinstance(self.tolerations, Mapping):
            raise ConfigError(f"gpu_tolerations={self.tolerations!r} must map resource name -> tolerations")
        self.tolerations = {
            str(name): [check_toleration(f"gpu_tolerations[{name!r}]", t) for t in (tols or [])]
            for name, tols in self.tolerations.items()
        }
        check_label_key("accelerator_label", self.accelerator_label)
        if not isinstance(self.accelerators, Mapping):
            raise ConfigError(f"accelerators={self.accelerators!r} must map accelerator type -> placement")
        self.accelerators = {str(name): _placement(name, p) for name, p in self.accelerators.items()}
        if "{partition}" not in self.mig_resource_template:
            raise ConfigError(
                f"mig_resource_template={self.mig_resource_template!r} must contain '{{partition}}', "
                "e.g. 'nvidia.com/mig-{partition}'"
            )

    def is_gpu_resource(self, name: str) -> bool:
        """Whether a container resource name counts as a GPU for placement.

        Args:
            name: a Kubernetes resource name, e.g. `nvidia.com/mig-1g.5gb`.

        Returns:
            True for `resource_name` and any match of `extra_resource_names` / `tolerations` keys.
        """
        if name == self.resource_name:
            return True
        return _matches_any(name, (*self.extra_resource_names, *self.tolerations))

    def tolerations_for(self, resource_names: list[str]) -> list[dict[str, Any]]:
        """GPU tolerations for a replica requesting `resource_names` (duplicates removed, order kept).

        Args:
            resource_names: the GPU resource names one replica requests.

        Returns:
            The union of the `tolerations` entries whose pattern matches any of the names.
        """
        out: list[dict[str, Any]] = []
        for name in resource_names:
            for pattern, tolerations in self.tolerations.items():
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


@functools.lru_cache(maxsize=1024)
def _matches_any(name: str, patterns: tuple[str, ...]) -> bool:
    """Whether `name` matches a glob of `patterns` (cached: placement asks for every resource of every role)."""
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


@dataclass
class InterruptiblePlacement(Section):
    """The `interruptible` section: where every replica of an interruptible attempt runs (Flyte's
    `interruptible-tolerations` and `interruptible-node-selector`).

    Raises:
        ConfigError: a malformed toleration, or a node selector key or value Kubernetes does not accept.
    """

    KEYS = {"tolerations": "interruptible_tolerations", "node_selector": "interruptible_node_selector"}

    tolerations: list[dict[str, Any]] = field(default_factory=list)
    """Tolerations added to every replica of an interruptible attempt. Empty by default: spot pools are tainted
    differently per cluster. Typical values::

        # GKE spot / preemptible node pools
        - {key: cloud.google.com/gke-spot, operator: Equal, value: "true", effect: NoSchedule}
        # Flyte docs' convention for a dedicated spot pool (EKS, AKS, ...)
        - {key: flyte/interruptible, operator: Exists, effect: NoSchedule}
        # AKS spot node pools
        - {key: kubernetes.azure.com/scalesetpriority, operator: Equal, value: spot, effect: NoSchedule}

    Key: `interruptible_tolerations`."""

    node_selector: dict[str, str] = field(default_factory=dict)
    """`nodeSelector` entries added to every replica of an interruptible attempt; they win over the pod template's
    on a conflict. Empty by default: without it an interruptible task may land on any node, which is always safe.
    Typical values::

        cloud.google.com/gke-spot: "true"              # GKE
        eks.amazonaws.com/capacityType: SPOT           # EKS managed node groups
        karpenter.sh/capacity-type: spot               # Karpenter
        kubernetes.azure.com/scalesetpriority: spot    # AKS

    Key: `interruptible_node_selector`."""

    def __post_init__(self) -> None:
        self.tolerations = check_tolerations("interruptible_tolerations", self.tolerations)
        if not isinstance(self.node_selector, Mapping):
            raise ConfigError(f"interruptible_node_selector={self.node_selector!r} must map node label -> value")
        self.node_selector = check_label_map("interruptible_node_selector", self.node_selector, values_are_labels=True)


# --------------------------------------------------------------------------------------------------------------
# The connector: the API, the watch cache, reading jobs back


@dataclass
class ApiSettings(Section):
    """The `api` section: how long each connector operation may spend on the API, how it backs off, how many
    threads serve `get`.

    Raises:
        ConfigError: a timeout, budget or backoff that is not a positive number of seconds, or a thread count out
            of 1..1024.
    """

    KEYS = {
        "connect_timeout_s": "api_connect_timeout_s",
        "timeout_s": "api_timeout_s",
        "get_budget_s": "api_get_budget_s",
        "create_budget_s": "api_create_budget_s",
        "delete_budget_s": "api_delete_budget_s",
        "backoff_initial_s": "api_backoff_initial_s",
        "backoff_max_s": "api_backoff_max_s",
        "crd_recheck_s": "api_crd_recheck_s",
    }

    connect_timeout_s: float = 3.0
    """Connect timeout of each Kubernetes API request (never more than what is left of the operation's budget). The
    API server is in the cluster: a connection that takes seconds is not coming; 3 s leaves room for another
    attempt inside every budget. Key: `api_connect_timeout_s`."""

    timeout_s: float = 5.0
    """Kept so that configs that set it still load; it no longer shortens a request. Each attempt may read for all
    that is left of its operation's budget, as a client-go request is bounded by its context's deadline alone: an
    API server that answers in 7 s must succeed inside the 10 s get budget, and a per-attempt cap below the budget
    only turned a slow answer into a failure. A hung API server is still bounded by the budget. Key:
    `api_timeout_s`."""

    get_budget_s: float = 10.0
    """Total time one `get` may spend on the API: the job, its pods and its events, every attempt, timeout and backoff
    sleep together. propeller gives each call 30 s (`deploy/propeller-config.yaml`); 10 s leaves 20 s for reading the
    task's error documents of a failed job and for the gRPC round trip. Past it the error is raised and propeller
    polls again. Key: `api_get_budget_s`."""

    create_budget_s: float = 20.0
    """Total time one `create` may spend on the API (discovery for `target: auto`, the POST, the read that adopts a
    job created by an attempt whose answer was lost, and their retries), counted from the start of the call, so the
    inputs it writes first count too. propeller gives CreateTask 30 s; 20 s leaves 10 s for writing the inputs and the
    round trip. Past it the error is raised and propeller retries the create, which is idempotent: the job's name is
    fixed by the attempt, so a job created by a lost answer is adopted, never duplicated. Key:
    `api_create_budget_s`."""

    delete_budget_s: float = 10.0
    """Total time one `delete` may spend on the API. propeller gives DeleteTask 30 s; past the budget the error is
    raised and propeller retries the delete (a job already gone is success). Key: `api_delete_budget_s`."""

    backoff_initial_s: float = 0.25
    """First backoff between retries; doubled after each attempt up to `api_backoff_max_s`, each with full jitter
    so a thousand jobs polling through an apiserver blip do not retry in lockstep. Key: `api_backoff_initial_s`."""

    backoff_max_s: float = 4.0
    """Upper bound of one backoff sleep. Key: `api_backoff_max_s`."""

    crd_recheck_s: float = 300.0
    """How old the connector's knowledge of a kind's installed CRD may be before a create it would change (a job
    fitted to an older CRD, or refused) reads the CRD again. The CRD is read before the first create of each kind
    (`get` on customresourcedefinitions, where RBAC allows it) and again at once when a create answers a strict 400;
    a job the cached CRD accepts as written never needs it read again, since a CRD downgraded under it answers that
    400. What an upgrade makes possible is noticed within this time: five minutes of refusing a task after the
    cluster's controller was upgraded, for at most one read per kind per five minutes. Key: `api_crd_recheck_s`."""

    get_threads: int = 32
    """Threads of the pool the served connector runs `get` calls in when the cache cannot answer them inline (a GET,
    pod and event lists, error documents), and the size of the kubernetes client's connection pool. flytekit would
    otherwise run them in asyncio's default pool of min(32, CPUs + 4) threads: 6 on a 2-CPU pod, which caps a
    connector at about 6 / (API latency) polls per second. 32 keeps 32 API requests in flight, as many as propeller's
    default GetTask workers."""

    def __post_init__(self) -> None:
        for name in ("connect_timeout_s", "timeout_s", "backoff_initial_s", "backoff_max_s"):
            check_seconds(self.key(name), getattr(self, name), positive=True)
        for name in ("get_budget_s", "create_budget_s", "delete_budget_s", "crd_recheck_s"):
            check_seconds(self.key(name), getattr(self, name), positive=True)
        check_int("get_threads", self.get_threads, low=1, high=1024)

    def budget_s(self, operation: str) -> float:
        """The budget of one connector operation.

        Args:
            operation: `create`, `get` or `delete`.

        Returns:
            Its budget in seconds.
        """
        return float(getattr(self, f"{operation}_budget_s"))


@dataclass
class WatchSettings(Section):
    """The `watch` section: whether `get` is answered from a watch-backed cache (`backend_plugin.kube.watch`), and how
    that cache lists, watches and backs off.

    Raises:
        ConfigError: `cache` not a boolean, a duration that is not a positive number of seconds, a page size below
            1, or `backoff_max_s` below `backoff_initial_s`.
    """

    KEYS = {
        "cache": "watch_cache",
        "silence_s": "watch_silence_s",
        "idle_s": "watch_idle_s",
        "max_staleness_s": "watch_max_staleness_s",
        "backoff_initial_s": "watch_backoff_initial_s",
        "backoff_max_s": "watch_backoff_max_s",
        "page_size": "watch_page_size",
        "request_timeout_s": "watch_request_timeout_s",
        "all_namespaces": "watch_all_namespaces",
    }

    cache: bool = True
    """Answer `get` from a watch-backed cache of our own jobs: one LIST, then one WATCH, per job kind and namespace
    the connector has seen, selecting the jobs by the `app.kubernetes.io/managed-by` label of `default_labels`. A poll
    of a job the cache holds (with the task's uid) costs the API server nothing; a job the cache does not hold
    (created milliseconds ago, a namespace not synced, a dropped watch not back within 5 s, a job whose label changed
    or that the watch reported deleted) is read with a GET, as without the cache, and only a GET's 404 says a job is
    gone. On by default because Flyte polls every running task every few seconds, which without it is one GET per
    task per poll (10,000 tasks polled every 10 s: 1,000 GETs/s). It costs one watch connection per kind and polled
    namespace (renewed every `watch_silence_s`) and, per job, its status and the part of its spec the status reads
    (about 3 KiB per tracked job of RSS in the connector-scale benchmark); RBAC needs `list` and `watch` on the job
    kinds. False reads every job with a GET on every poll, exactly as before the cache. Key: `watch_cache`."""

    silence_s: float = 20.0
    """How long a watch of the cache may deliver nothing (no event, no BOOKMARK) before it is presumed dead: it is
    then reopened from the last resourceVersion seen, which replays what a half-open connection lost, and the cache
    stops answering from it `max_staleness_s` (5 s) later if no watch is reopened. Each watch asks the server to end
    it after 75-100 % of this, so a healthy one delivers at least the BOOKMARK the API server sends before a watch's
    timeout. The API server sends an idle watch a BOOKMARK about once a minute; 20 s is below that on purpose, so that
    answers are wrong for at most about 20 s after a silent stall (the goal is 30 s). The cost: an idle, healthy
    namespace's watch is reopened every 20 s, one request (0.05 requests/s per namespace), and no thread beyond the
    namespace's own. Key: `watch_silence_s`."""

    idle_s: float = 300.0
    """How long a namespace's watch runs without a `get` for any job in it (no tracked job) before its thread and
    watch stop; the next `get` there lists and watches again. Five minutes outlasts every poll interval of Flyte, so a
    namespace with running tasks never stops. Key: `watch_idle_s`."""

    watch_timeout_s: float = 300.0
    """The longest `timeoutSeconds` of a watch; each is also bounded by `watch_silence_s`. client-go's reflector
    picks 5 to 10 minutes."""

    max_staleness_s: float = 5.0
    """How long answers stay valid after the watch was last heard from once it is no longer connected (a dropped
    watch, a relist in progress). Past it, `get` reads the API. 5 s: the staleness goal of a status poll. Key:
    `watch_max_staleness_s`."""

    backoff_initial_s: float = 0.8
    """The first wait after an error of a LIST or WATCH (client-go's reflector: 0.8 s). Key:
    `watch_backoff_initial_s`."""

    backoff_max_s: float = 30.0
    """The longest wait between attempts (client-go's reflector: 30 s). Key: `watch_backoff_max_s`."""

    page_size: int = 100
    """`limit` of each LIST page. 100, not client-go's 500: a page is parsed whole before it is slimmed, and the
    process keeps its high-water mark; measured with 2,000 golden jobs, pages of 500 grew RSS by 11.6 MiB per 1,000
    cached jobs and pages of 100 by 4.9 MiB, for 20 requests instead of 4 per LIST. Key: `watch_page_size`."""

    request_timeout_s: float = 30.0
    """Connect and read timeout of LIST requests. Key: `watch_request_timeout_s`."""

    all_namespaces: bool = False
    """One LIST and one WATCH per job kind for every namespace (`GET /apis/<group>/<version>/<plural>`), instead of one
    per namespace the connector polls. For a connector that tracks tasks in many namespaces (a Flyte with hundreds of
    project-domains): one watch connection and one thread per kind instead of one per namespace, and no list when a
    namespace's first task is polled. It needs `list` and `watch` on the job kinds cluster-wide (the ClusterRole of
    `deploy/rbac.yaml` bound with its ClusterRoleBinding, as shipped; a RoleBinding per namespace does not grant it:
    the cluster-wide LIST is then forbidden, the watch backs off and every `get` reads the API). Off by default: it
    holds every job of ours in the cluster, also in namespaces this connector never polls, and a connector confined to
    some namespaces cannot use it. Key: `watch_all_namespaces`."""

    def __post_init__(self) -> None:
        check_bool(self.key("cache"), self.cache)
        check_bool(self.key("all_namespaces"), self.all_namespaces)
        for name in ("silence_s", "idle_s", "watch_timeout_s", "max_staleness_s", "request_timeout_s"):
            check_seconds(self.key(name), getattr(self, name), positive=True)
        for name in ("backoff_initial_s", "backoff_max_s"):
            check_seconds(self.key(name), getattr(self, name), positive=True)
        if isinstance(self.page_size, bool) or not isinstance(self.page_size, int) or self.page_size < 1:
            raise ConfigError(f"{self.key('page_size')}={self.page_size!r} must be a positive number of jobs")
        if self.backoff_max_s < self.backoff_initial_s:
            raise ConfigError(
                f"{self.key('backoff_max_s')}={self.backoff_max_s!r} must not be below "
                f"{self.key('backoff_initial_s')}={self.backoff_initial_s!r}"
            )

    def watch_seconds(self) -> int:
        """A new watch's `timeoutSeconds`: 75-100 % of the lesser of `watch_timeout_s` and `silence_s`, jittered so
        that replicas do not reconnect in step.

        Returns:
            Whole seconds, at least 1.
        """
        return max(1, round(min(self.watch_timeout_s, self.silence_s) * random.uniform(0.75, 1.0)))

    def fresh_for(self, connected: bool) -> float:
        """How long after the last line answers stay valid.

        Args:
            connected: whether a watch is open.

        Returns:
            `silence_s + max_staleness_s` while connected (a silent watch is reopened at that point), else
            `max_staleness_s`.
        """
        return self.silence_s + self.max_staleness_s if connected else self.max_staleness_s


@dataclass
class StatusSettings(Section):
    """The `status` section: reading a job back, as every kind does: how long a pod may fail to start, how much of
    the task's error documents is read, which log links are shown, how often a running task's progress is read.

    Raises:
        ConfigError: a grace period that is not a non-negative number of seconds, a document bound below 1024, a
            malformed log link, or a progress read interval that is not a positive number of seconds.
    """

    image_pull_grace_s: float = 120.0
    """How long a replica may sit in ErrImagePull / InvalidImageName / CreateContainerConfigError before the job
    is failed. The kubelet retries pulls (a registry blip heals in seconds to a minute), but a wrong image name or a
    missing Secret never heals, and without this the job would wait in QUEUED until Flyte's timeout."""

    error_document_max_bytes: int = 1024 * 1024
    """The most bytes read of one error document (`error.pb`) under a failed task's output prefix. flytekit's
    documents hold one traceback, a few kilobytes; the bound keeps a `get` cheap whatever the prefix holds."""

    log_links: tuple[dict[str, str], ...] = ()
    """Log link templates, one `{name, template[, link_type]}` mapping each, rendered for every replica pod (see
    `backend_plugin.logs`). Empty by default: the URL of a cluster's dashboard or log store is site-specific. An
    entry with a `link_type` is a dynamic link, shown only for tasks whose template config lists that type under
    `link_type` (Flyte's `dynamic-log-links`); any template may use `{{ .taskConfig.<key> }}`."""

    progress_read_interval_s: float = 30.0
    """The least time between two reads of a running task attempt's progress record (`pytorch-progress.json` beside its
    outputs, written by global rank 0 every 10 s), whose line the connector adds to the RUNNING message
    (`backend_plugin.connector.progress`); the polls between two reads show the record last read, its ETA and
    staleness judged at each poll. A missing record is looked for again only after this long too. Each next read is
    due up to 10% later (jittered, so that tasks first polled together do not read together at every interval). 30
    s: the record shown is then at most 33 s and one poll behind rank 0's last write (made every 10 s), a healthy
    run is never called stale between two reads (the writer allows 60 s of silence at least), and 10,000 running
    tasks cost at most 333 small blob reads per second, whatever Flyte's poll rate. One more read is made when the
    record held turns stale before the next one is due, so that "stale" is said of what rank 0 last wrote, not of an
    old read."""

    preemption_recoveries: int = 3
    """How many times, per task attempt, the connector creates a job again that failed because of a preemption
    (`backend_plugin.connector.recovery`: a pod disrupted or deleted, every rank stopped at the agreed step, never an
    OOM kill nor the task's own error) instead of reporting the retryable failure that would cost one of the task's
    `retries`. It sets no job field: the count is kept on the job created again (an annotation). 3: a spot pool can
    take a job's nodes more than once in one attempt, and each recovery costs only the steps since the checkpoint;
    past three, something evicts the job again and again (node-pressure eviction of a pod that uses too much memory
    is a `DisruptionTarget` too), and Flyte's retries and `interruptible-failure-threshold` decide. 0 turns the
    recovery off."""

    @functools.cached_property
    def checked_log_links(self) -> tuple[LogTemplate, ...]:
        """`log_links` as checked templates, checked once (every poll's links read them)."""
        return tuple(check_templates(self.log_links))

    @functools.cached_property
    def log_links_read_time(self) -> bool:
        """Whether a template of `log_links` reads a pod's start or finish time (a running pod's link then moves
        with every poll)."""
        return any(uses_time(t.template) for t in self.checked_log_links)

    def __post_init__(self) -> None:
        check_seconds("image_pull_grace_s", self.image_pull_grace_s, positive=False)
        check_int("error_document_max_bytes", self.error_document_max_bytes, low=1024)
        check_templates(self.log_links)
        check_seconds("progress_read_interval_s", self.progress_read_interval_s, positive=True)
        check_int("preemption_recoveries", self.preemption_recoveries, low=0, high=100)
