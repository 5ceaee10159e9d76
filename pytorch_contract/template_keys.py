"""The names of the task template contract (docs/template-format.md), spelled once.

The SDK (`flytekitplugins_pytorch.task`) writes these keys into `TaskTemplate.config`; the backend
(`backend_plugin.template`) reads them and rejects any other `pytorch.*` key. Value sets that both sides check
(policies, rendezvous backends, `nproc_per_node` words) live here too, as do the enums the SDK exposes for them.
"""

from __future__ import annotations

from enum import Enum, EnumMeta
from typing import Any

from pytorch_contract.suggest import closest

__all__ = [
    "TASK_TYPE",
    "TASK_TYPE_VERSION",
    "CONNECTOR_TASK_TYPE",
    "CONNECTOR_TASK_TYPE_VERSION",
    "PRIMARY_CONTAINER",
    "PRIMARY_CONTAINER_NAME_KEY",
    "CONFIG_PREFIX",
    "CONFIG_KEYS",
    "NPROC_PER_NODE",
    "MASTER_RESTART_POLICY",
    "WORKER_RESTART_POLICY",
    "CLEAN_POD_POLICY",
    "QUEUE",
    "PRIORITY_CLASS",
    "GANG_SCHEDULING",
    "MIN_AVAILABLE",
    "SUSPEND",
    "SHM_SIZE",
    "ACCELERATOR",
    "GPU_RESOURCE",
    "MASTER_IMAGE",
    "MASTER_POD_TEMPLATE",
    "WORKER_POD_TEMPLATE",
    "restart_policy_key",
    "pod_template_key",
    "RestartPolicy",
    "CleanPodPolicy",
    "RESTART_POLICIES",
    "CLEAN_POD_POLICIES",
    "DEFAULT_RDZV_BACKEND",
    "RDZV_BACKENDS",
    "NPROC_PER_NODE_WORDS",
    "NPROC_PER_NODE_ALLOWED",
    "nproc_per_node_problem",
    "nproc_per_node_message",
]

TASK_TYPE = "pytorch"
"""`TaskTemplate.type` of every task of this plugin, and of flytekit's kfpytorch plugin (the connector serves both)."""

TASK_TYPE_VERSION = 1
"""`task_type_version` the SDK writes. Version 0 is the legacy `custom = {"workers": N}` form, still read."""

CONNECTOR_TASK_TYPE = "pytorch-job"
"""`TaskTemplate.type` of a Flyte 2 task routed to this project's connector (``flyte2_pytorch.Connector``): a type
Flyte 2's native kfoperators plugin does not claim. The task is otherwise a `TASK_TYPE` task, read the same way."""

CONNECTOR_TASK_TYPE_VERSION = 1
"""`task_type_version` of a `CONNECTOR_TASK_TYPE` task (what the Flyte 2 front-end writes and its connector serves)."""

PRIMARY_CONTAINER = "pytorch"
"""Name of the training container in every replica pod: the Kubeflow training operator finds the process to watch
(and sets MASTER_ADDR and friends on) by this name."""

PRIMARY_CONTAINER_NAME_KEY = "primary_container_name"
"""flytekit's config key naming the primary container of a pod template (not ours; read, never written by us)."""

CONFIG_PREFIX = "pytorch."
"""Config keys with this prefix belong to this contract; an unknown one is an error, not silently ignored."""

NPROC_PER_NODE = "pytorch.nproc_per_node"
MASTER_RESTART_POLICY = "pytorch.master.restart_policy"
WORKER_RESTART_POLICY = "pytorch.worker.restart_policy"
CLEAN_POD_POLICY = "pytorch.clean_pod_policy"
QUEUE = "pytorch.queue"
PRIORITY_CLASS = "pytorch.priority_class"
GANG_SCHEDULING = "pytorch.gang_scheduling"
MIN_AVAILABLE = "pytorch.min_available"
SUSPEND = "pytorch.suspend"
SHM_SIZE = "pytorch.shm_size"
ACCELERATOR = "pytorch.accelerator"
GPU_RESOURCE = "pytorch.gpu_resource"
MASTER_IMAGE = "pytorch.master.image"
MASTER_POD_TEMPLATE = "pytorch.master.pod_template"
"""The Master's own pod template (`Master(pod_template=...)`), merged over the task's pod; JSON text of
`{"metadata": {"labels", "annotations"}, "primaryContainerName": str, "podSpec": core/v1 PodSpec}`. In `config`
because flyteidl's `DistributedPyTorchTrainingReplicaSpec` (and its `common` part) has no pod template field."""
WORKER_POD_TEMPLATE = "pytorch.worker.pod_template"
"""The Workers' own pod template (`Worker(pod_template=...)`); as `MASTER_POD_TEMPLATE`."""

CONFIG_KEYS = (
    NPROC_PER_NODE,
    MASTER_RESTART_POLICY,
    WORKER_RESTART_POLICY,
    CLEAN_POD_POLICY,
    QUEUE,
    PRIORITY_CLASS,
    GANG_SCHEDULING,
    MIN_AVAILABLE,
    SUSPEND,
    SHM_SIZE,
    ACCELERATOR,
    GPU_RESOURCE,
    MASTER_IMAGE,
    MASTER_POD_TEMPLATE,
    WORKER_POD_TEMPLATE,
)
"""Every `pytorch.*` config key of the contract (docs/template-format.md has one row per key)."""


def restart_policy_key(role: str) -> str:
    """The config key carrying a role's restart policy when the proto cannot (`ExitCode`).

    Args:
        role: `"master"` or `"worker"` (any case).

    Returns:
        `pytorch.master.restart_policy` or `pytorch.worker.restart_policy`.

    Raises:
        ValueError: another role.
    """
    return _role_key(role, MASTER_RESTART_POLICY, WORKER_RESTART_POLICY, "restart policy")


def pod_template_key(role: str) -> str:
    """The config key carrying a role's own pod template.

    Args:
        role: `"master"` or `"worker"` (any case).

    Returns:
        `pytorch.master.pod_template` or `pytorch.worker.pod_template`.

    Raises:
        ValueError: another role.
    """
    return _role_key(role, MASTER_POD_TEMPLATE, WORKER_POD_TEMPLATE, "pod template")


def _role_key(role: str, master: str, worker: str, what: str) -> str:
    key = {"master": master, "worker": worker}.get(role.lower())
    if key is None:
        raise ValueError(f"role={role!r} has no {what} key; use 'master' or 'worker'")
    return key


class _NamedMembers(EnumMeta):
    """The enums' metaclass: a member that does not exist (``RestartPolicy.FAILURE``) is an ``AttributeError`` that
    names the closest members, not a bare ``AttributeError: FAILURE``."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        members: dict[str, Any] = cls.__dict__.get("_member_map_", {})
        if name in members:
            return members[name]
        by_upper = {m.upper(): m for m in members}  # "Exit_Code" is as near EXIT_CODE as "EXIT_CODE"
        near = [by_upper[m] for m in closest(name.upper(), by_upper)]
        hint = f"did you mean {' or '.join(f'{cls.__name__}.{m}' for m in near)}? " if near else ""
        raise AttributeError(f"{cls.__name__}.{name} is not a member; {hint}members: {', '.join(members)}")


class RestartPolicy(Enum, metaclass=_NamedMembers):
    """What the training operator does when a replica's pod fails (``spec.pytorchReplicaSpecs.<role>.restartPolicy``).

    ``EXIT_CODE`` restarts only on retryable exit codes (128+signal, e.g. a preempted node) and fails at once on a
    user error (exit 1) -- usually what a training job wants when its code checkpoints.
    """

    NEVER = "Never"
    ON_FAILURE = "OnFailure"
    ALWAYS = "Always"
    EXIT_CODE = "ExitCode"


class CleanPodPolicy(Enum, metaclass=_NamedMembers):
    """Which pods the operator deletes when the job finishes (``spec.runPolicy.cleanPodPolicy``)."""

    NONE = "None"
    RUNNING = "Running"
    ALL = "All"


RESTART_POLICIES = tuple(p.value for p in RestartPolicy)
"""`restartPolicy` values a PyTorchJob replica accepts."""

CLEAN_POD_POLICIES = tuple(p.value for p in CleanPodPolicy)
"""`runPolicy.cleanPodPolicy` values a PyTorchJob accepts."""

DEFAULT_RDZV_BACKEND = "c10d"
"""torchrun's default rendezvous backend: it needs no etcd. The SDK writes it into `elasticConfig`, the backend uses
it where a template leaves `rdzvBackend` empty, the local launcher rendezvouses with it."""

RDZV_BACKENDS = (DEFAULT_RDZV_BACKEND, "etcd", "etcd-v2", "static")
"""Rendezvous backends torch's elastic agent knows."""

NPROC_PER_NODE_WORDS = ("auto", "cpu", "gpu")
"""The non-numeric values torchrun accepts for ``--nproc-per-node``."""

NPROC_PER_NODE_ALLOWED = "use a positive integer, 'auto' (one per GPU, else one), 'cpu' or 'gpu'"
"""What `nproc_per_node` may be, as both sides say it in their error messages."""

_INT32_MAX = 2**31 - 1  # elasticConfig.nprocPerNode is an int32


def nproc_per_node_problem(value: object, digits_as_text: bool = True) -> str | None:
    """What is wrong with a `nproc_per_node` value, or None when it is one: a positive integer (an int, or a string
    of ASCII digits as the template's config carries it) or one of `NPROC_PER_NODE_WORDS` in lower case.

    Args:
        value: the SDK's field (an int, or a word already lower-cased) or the template's `pytorch.nproc_per_node`.
        digits_as_text: whether a string of digits counts as its number (the template's spelling; the SDK's field
            takes an int).

    Returns:
        "not a process count", "not positive" or "above 2147483647" (the int32 of `elasticConfig`), or None.
    """
    if isinstance(value, str):
        if not digits_as_text and value not in NPROC_PER_NODE_WORDS:
            return "not a process count"
        if value in NPROC_PER_NODE_WORDS:
            return None
        if not (value.isascii() and value.isdigit()):
            return "not a process count"
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        return "not a process count"
    if value < 1:
        return "not positive"
    if value > _INT32_MAX:
        return f"above {_INT32_MAX}"
    return None


def nproc_per_node_message(field: str, value: object, digits_as_text: bool = True) -> str | None:
    """The one message both sides give for a bad `nproc_per_node`, or None when `value` is valid.

    Args:
        field: where the value is (`PyTorch.nproc_per_node`, `config['pytorch.nproc_per_node']`).
        value: the value.
        digits_as_text: as for `nproc_per_node_problem`.

    Returns:
        `<field>=<value!r> is <problem>; use a positive integer, ...`, or None.
    """
    problem = nproc_per_node_problem(value, digits_as_text)
    return None if problem is None else f"{field}={value!r} is {problem}; {NPROC_PER_NODE_ALLOWED}"
