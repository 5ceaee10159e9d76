"""The TrainJob writer: `to_trainjob(spec, metadata, config)` -> a Kubeflow Trainer v2 TrainJob dict.

The second kind next to the PyTorchJob writer (`targets/pytorchjob/writer.py`), from the same `TaskSpec` and the
same `pods.plan_pods` / `pods.replica_pod` pieces. A TrainJob names a training runtime (`spec.runtimeRef`, by default
the ClusterTrainingRuntime `torch-distributed`) and overrides only parts of it:

- `spec.trainer`: image, command, args, env, `numNodes` (every pod of the task: master + workers; a TrainJob has no
  roles, rank 0 is pod `<job>-node-0-0`), `numProcPerNode` and `resourcesPerNode` (one set for every node);
- one `spec.runtimePatches` entry owned by `MANAGER`: what the runtime's pod must gain (GPU tolerations,
  accelerator affinity, interruptible placement, the `/dev/shm` volume and its mount, service account, pod labels
  and annotations, the pod template's placement fields), touching only the fields the Trainer webhook allows;
- the TrainJob's own metadata: labels (Kueue reads its queue label there), annotations, owner references;
  `suspend`, `activeDeadlineSeconds` (the task timeout) and `managedBy`.

What a TrainJob cannot express is refused with a `TemplateError` naming the setting and the alternative (the
`pytorchjob` target): see `refusals`. Backend defaults that have no TrainJob equivalent are not the user's choice;
they are reported by `dropped_defaults` (logged by the connector, printed by `pytorchjob render`) and dropped. The
table of both is in docs/trainer-v2.md. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from backend_plugin.config import BackendConfig
from backend_plugin.errors import TemplateError
from backend_plugin.execution import ExecutionMetadata
from backend_plugin.pods import plan_pods, replica_pod
from backend_plugin.spec import TaskSpec
from pytorch_contract.k8s_names import TRAINJOB_NODE_ENV
from pytorch_contract.template_keys import PRIMARY_CONTAINER, RestartPolicy

__all__ = [
    "API_VERSION",
    "KIND",
    "GROUP",
    "VERSION",
    "PLURAL",
    "NODE",
    "MANAGER",
    "RESERVED_ENV",
    "POD_PATCH_FIELDS",
    "CONTAINER_PATCH_FIELDS",
    "to_trainjob",
    "refusals",
    "dropped_defaults",
    "trainjob_name",
    "max_name_length",
]

GROUP, VERSION, PLURAL = "trainer.kubeflow.org", "v1alpha1", "trainjobs"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "TrainJob"

NODE = "node"
"""The torch runtime's replicated job and its container: the only ones `spec.trainer` overrides."""

MANAGER = "pytorch.flyte.org/flytekitplugins-pytorch"
"""`runtimePatches[].manager`: the webhook requires a domain-prefixed path; ours names the plugin."""

RESERVED_ENV = TRAINJOB_NODE_ENV
"""Set by the torch runtime in every node; the webhook rejects a TrainJob whose `trainer.env` names one (the
contract's list, which the launcher in a node reads)."""

POD_PATCH_FIELDS = (
    "serviceAccountName",
    "volumes",
    "initContainers",
    "containers",
    "imagePullSecrets",
    "securityContext",
    "terminationGracePeriodSeconds",
    "nodeSelector",
    "affinity",
    "tolerations",
    "schedulingGates",
)
"""The pod spec fields a runtime patch may set (Trainer v2.3 webhook)."""

CONTAINER_PATCH_FIELDS = ("name", "env", "volumeMounts", "securityContext")
"""The container fields a runtime patch may set (not env on the `node` container: that is `trainer.env`)."""

_TRAINER_CONTAINER_FIELDS = ("name", "image", "command", "args", "env", "resources", "volumeMounts", "securityContext")
# terminationMessagePolicy is ours (FallbackToLogsOnError, pods.TERMINATION_MESSAGE_POLICY) and cannot be patched:
# on a TrainJob the node container keeps the runtime's (File), so failure messages carry no log tail.
_DROPPED_CONTAINER_FIELDS = ("terminationMessagePolicy",)
_POD_SUFFIX = len("-xxxxx")  # the random suffix of a Job's pod name
_ALTERNATIVE = "remove it from the task, or run it on the PyTorchJob target (backend config `target: pytorchjob`)"


def to_trainjob(spec: TaskSpec, metadata: ExecutionMetadata, config: Optional[BackendConfig] = None) -> dict[str, Any]:
    """Write the TrainJob for one execution of a task.

    Args:
        spec: the task (`template.read_template`).
        metadata: the execution (name, namespace, paths, labels, env, image override).
        config: backend config; defaults when None.

    Returns:
        A trainer.kubeflow.org/v1alpha1 TrainJob as a plain JSON-able dict with a stable key order.

    Raises:
        TemplateError: the task asks for something a TrainJob cannot express (every such setting is listed, each
            with the alternative), or what `pods.replica_pod` refuses (no image, bad resources, ...).
    """
    backend = config if config is not None else BackendConfig()
    problems = refusals(spec)
    if problems:
        raise TemplateError("cannot run as a Kubeflow Trainer v2 TrainJob: " + "; ".join(problems))
    plan = plan_pods(spec, metadata, backend)
    group = spec.replicas[0]  # every role is the same pod here (`refusals` checked it)
    pod = replica_pod(group, plan)
    pod_spec = pod["spec"]
    containers = pod_spec.pop("containers")
    (container,) = [c for c in containers if c.get("name") == PRIMARY_CONTAINER]
    num_nodes = spec.total_replicas

    trainer: dict[str, Any] = {"image": container["image"]}
    command, args = list(container.get("command") or []), list(container.get("args") or [])
    # The torch runtime's node container has no command; Flyte's args start with the executable (pyflyte-execute),
    # so they become the command and the TrainJob does not depend on the image's ENTRYPOINT.
    trainer["command"] = command or args
    if command and args:
        trainer["args"] = args
    env = container.get("env") or []
    reserved = [e["name"] for e in env if e.get("name") in RESERVED_ENV]
    if reserved:
        raise TemplateError(
            f"env {reserved} cannot be set on a TrainJob: the torch runtime sets {list(RESERVED_ENV)} in every node "
            "and the Trainer webhook rejects them; rename the variables"
        )
    if env:
        trainer["env"] = env
    trainer["numNodes"] = num_nodes
    resources = container.get("resources") or {}
    nproc = num_proc_per_node(spec, resources, plan.gpu_resource, backend)
    if nproc is not None:
        trainer["numProcPerNode"] = nproc
    if resources:
        trainer["resourcesPerNode"] = resources

    job_spec: dict[str, Any] = {
        "runtimeRef": {
            "name": backend.trainjob_runtime_name,
            "apiGroup": GROUP,
            "kind": backend.trainjob_runtime_kind,
        },
        "trainer": trainer,
    }
    patch = runtime_patch(pod["metadata"], pod_spec, container)
    if patch is not None:
        job_spec["runtimePatches"] = [patch]
    suspend = spec.scheduling.suspend
    if backend.suspend if suspend is None else suspend:
        job_spec["suspend"] = True
    deadline = active_deadline_seconds(spec, backend)
    if deadline is not None:
        job_spec["activeDeadlineSeconds"] = deadline
    if backend.trainjob_managed_by is not None:
        job_spec["managedBy"] = backend.trainjob_managed_by

    meta: dict[str, Any] = {
        "name": trainjob_name(metadata.job_name, num_nodes),
        "namespace": metadata.namespace or backend.namespace,
        "labels": dict(plan.labels),
        "annotations": dict(plan.annotations),
    }
    if metadata.owner_references:
        meta["ownerReferences"] = [dict(r) for r in metadata.owner_references]
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta, "spec": job_spec}


def refusals(spec: TaskSpec) -> list[str]:
    """What the task asks for that a TrainJob cannot express, one message per setting (empty: it can run).

    Refused (the task's own choice, which would otherwise be silently dropped): an elastic task, roles whose
    image, resources or restart policy differ, a per-role pod template, a restart policy other than Never,
    `backoffLimit`, `ttlSecondsAfterFinished`, a clean-pod policy other than Running, gang scheduling,
    `min_available` and a priority class. Pod template fields are checked by `runtime_patch` when the pod is built.

    Args:
        spec: the task.

    Returns:
        Messages naming the user's setting (`Worker(requests/limits=...)`, never a template path), why and the
        alternative.
    """
    out = []
    if spec.elastic is not None:
        e = spec.elastic
        out.append(
            f"Elastic(nnodes='{e.min_replicas}:{e.max_replicas}', max_restarts={e.max_restarts}): "
            "a TrainJob has a fixed node count and no elastic rendezvous; use PyTorch(...) with a fixed worker "
            f"count, or {_ALTERNATIVE}"
        )
    first = spec.replicas[0]
    for group in spec.replicas[1:]:
        for attr, what in (("image", "image"), ("resources", "resources")):
            if getattr(group, attr) != getattr(first, attr):
                setting = "image" if what == "image" else "requests/limits"
                out.append(
                    f"{group.role}({setting}=...) differs from {first.role}({setting}=...): a TrainJob runs one pod "
                    f"spec on every node (trainer.{'image' if what == 'image' else 'resourcesPerNode'}); give "
                    f"{first.role} and {group.role} the same {setting}, or {_ALTERNATIVE}"
                )
    for group in spec.replicas:
        if group.restart_policy != RestartPolicy.NEVER.value:
            out.append(
                f"{group.role}(restart_policy={group.restart_policy!r}): a TrainJob's restarts are the training "
                f"runtime's (its JobSet failure policy), not per role; use Never, or {_ALTERNATIVE}"
            )
    for group in spec.replicas:
        if group.pod_template is not None:
            out.append(
                f"{group.role}(pod_template=...) gives the {group.role} its own pod template: a TrainJob runs one pod "
                f"spec on every node and has no roles; put the settings on the task's pod template, or {_ALTERNATIVE}"
            )
    policy = spec.run_policy
    if policy.backoff_limit is not None:
        out.append(
            f"RunPolicy(backoff_limit={policy.backoff_limit}): a TrainJob has no backoff limit (the runtime's "
            f"Job sets it; Flyte's retries still apply); {_ALTERNATIVE}"
        )
    if policy.ttl_seconds_after_finished is not None:
        out.append(
            f"RunPolicy(ttl_seconds_after_finished={policy.ttl_seconds_after_finished}): a TrainJob has no TTL "
            f"(the connector deletes the jobs it finalizes); {_ALTERNATIVE}"
        )
    if policy.clean_pod_policy not in (None, "Running"):
        out.append(
            f"RunPolicy(clean_pod_policy={policy.clean_pod_policy!r}): a TrainJob stops running pods when it ends "
            f"and keeps finished ones (the default 'Running'); {_ALTERNATIVE}"
        )
    sched = spec.scheduling
    for key, value in (
        ("gang_scheduling", sched.gang_scheduling or None),
        ("min_available", sched.min_available),
        ("priority_class", sched.priority_class),
    ):
        if value is not None:
            out.append(
                f"RunPolicy({key}={value!r}): gang scheduling and priority belong to the training runtime on "
                f"Trainer v2 (its podGroupPolicy, or a runtime with a priority class); pick such a runtime with "
                f"trainjob_runtime_name, or {_ALTERNATIVE}"
            )
    return out


_DEFAULT_TTL_S = BackendConfig.__dataclass_fields__["ttl_seconds_after_finished"].default
"""Our default `ttl_seconds_after_finished`, read off the field (no config is built per job to learn it)."""


def dropped_defaults(spec: TaskSpec, config: BackendConfig) -> list[str]:
    """Backend defaults that a TrainJob cannot express and that are dropped (not the task's choice).

    Args:
        spec: the task.
        config: the backend config.

    Returns:
        One message per dropped default (empty for the defaults of a TrainJob-only cluster).
    """
    out = []
    # Only what the config sets differently from our own default: a warning about a default nobody set is noise.
    if (
        config.ttl_seconds_after_finished not in (None, _DEFAULT_TTL_S)
        and spec.run_policy.ttl_seconds_after_finished is None
    ):
        out.append(
            f"backend ttl_seconds_after_finished={config.ttl_seconds_after_finished} is not applied: a TrainJob has "
            "no TTL (the connector deletes the jobs it finalizes)"
        )
    if config.backoff_limit is not None and spec.run_policy.backoff_limit is None:
        out.append(f"backend backoff_limit={config.backoff_limit} is not applied: a TrainJob has no backoff limit")
    if config.clean_pod_policy != "Running" and spec.run_policy.clean_pod_policy is None:
        out.append(
            f"backend clean_pod_policy={config.clean_pod_policy!r} is not applied: a TrainJob always stops running "
            "pods and keeps finished ones"
        )
    if config.gang_scheduling and spec.scheduling.gang_scheduling is None:
        out.append("backend gang_scheduling=true is not applied: on Trainer v2 the runtime's podGroupPolicy decides")
    return out


def num_proc_per_node(
    spec: TaskSpec, resources: Mapping[str, Any], gpu_resource: str, config: BackendConfig
) -> Optional[int]:
    """`trainer.numProcPerNode`: the task's integer; for `auto`/`gpu` with GPUs requested, unset (the runtime
    then sets `PET_NPROC_PER_NODE=auto`, which our launcher reads as the visible GPUs).

    Without GPUs, `auto`/`gpu` (and an absent value) is 1: left unset, the runtime would start one rank per
    requested CPU. `cpu` is left unset without GPUs (the runtime's CPU count rule is its meaning) and is 1 with them.

    Args:
        spec: the task.
        resources: the node's resources (GPU keys already renamed to the cluster's).
        gpu_resource: the cluster's GPU resource name for this task.
        config: decides which resource names count as GPUs.

    Returns:
        The integer, or None to leave the runtime's `auto`.
    """
    value = (spec.nproc_per_node or "auto").strip().lower()
    if value.isdigit():
        return int(value)
    has_gpu = any(
        (config.is_gpu_resource(k) or k == gpu_resource) and str(v) not in ("0", "")
        for section in ("requests", "limits")
        for k, v in (resources.get(section) or {}).items()
    )
    if value == "cpu":
        return 1 if has_gpu else None
    return None if has_gpu else 1


def active_deadline_seconds(spec: TaskSpec, config: BackendConfig) -> Optional[int]:
    """`spec.activeDeadlineSeconds`: the task's run policy, else its Flyte timeout, else the backend default (as
    `pytorchjob.run_policy`).

    Args:
        spec: the task.
        config: supplies `active_deadline_seconds`, the backend default.

    Returns:
        Seconds, or None for no deadline.
    """
    deadline = spec.timeout_seconds if spec.timeout_seconds is not None else config.active_deadline_seconds
    value = spec.run_policy.active_deadline_seconds
    return value if value else deadline


def runtime_patch(
    pod_metadata: Mapping[str, Any], pod_spec: dict[str, Any], container: Mapping[str, Any]
) -> Optional[dict[str, Any]]:
    """The one `runtimePatches` entry: the node pod's metadata, placement and volumes, and the node container's
    mounts and security context.

    Args:
        pod_metadata: `{labels, annotations}` of the node pod.
        pod_spec: the node pod spec without its containers (`pods.replica_pod`).
        container: the primary container.

    Returns:
        The patch, or None when there is nothing to patch.

    Raises:
        TemplateError: the pod template uses a pod field, a container field or an extra container that a runtime
            patch cannot carry (named, with the alternative).
    """
    problems = []
    for key in pod_spec:
        if key not in POD_PATCH_FIELDS:
            problems.append(f"pod_template spec.{key}")
    for key in container:
        if key not in _TRAINER_CONTAINER_FIELDS and key not in _DROPPED_CONTAINER_FIELDS:
            problems.append(f"pod_template primary container's {key}")
    if pod_spec.get("initContainers"):
        problems.append("pod_template spec.initContainers (a runtime patch cannot add a container image)")
    if problems:
        raise TemplateError(
            f"cannot run as a Kubeflow Trainer v2 TrainJob: {', '.join(problems)} cannot be set through a runtime "
            f"patch (allowed pod fields: {list(POD_PATCH_FIELDS)}; container fields: image, command, args, env, "
            f"resources, volumeMounts, securityContext); {_ALTERNATIVE}"
        )
    node_container: dict[str, Any] = {"name": NODE}
    for key in ("volumeMounts", "securityContext"):
        if container.get(key):
            node_container[key] = container[key]
    spec: dict[str, Any] = {k: pod_spec[k] for k in POD_PATCH_FIELDS if pod_spec.get(k) and k != "containers"}
    if len(node_container) > 1:
        spec["containers"] = [node_container]
    metadata = {k: dict(v) for k, v in pod_metadata.items() if v}
    if not spec and not metadata:
        return None
    pod_template: dict[str, Any] = {}
    if metadata:
        pod_template["metadata"] = metadata
    if spec:
        pod_template["spec"] = spec
    replicated_job = {"name": NODE, "template": {"spec": {"template": pod_template}}}
    return {
        "manager": MANAGER,
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [replicated_job]}}},
    }


def max_name_length(num_nodes: int) -> int:
    """The longest TrainJob name whose node pods `<name>-node-0-<index>-xxxxx` stay within 63 characters.

    Args:
        num_nodes: `trainer.numNodes`.

    Returns:
        63 - len("-node-0-") - digits of the last index - 6.
    """
    return 63 - len(f"-{NODE}-0-") - len(str(max(0, num_nodes - 1))) - _POD_SUFFIX


def trainjob_name(name: str, num_nodes: int) -> str:
    """The execution's job name, shortened to `max_name_length` when needed.

    `execution.job_name` ends with 8 hex characters hashing the execution's identity; the shortened name keeps
    them, so it stays unique and deterministic (a retried create still finds its job).

    Args:
        name: `ExecutionMetadata.job_name` (a DNS-1035 label).
        num_nodes: `trainer.numNodes`.

    Returns:
        A DNS-1035 label short enough for the JobSet's pod names.
    """
    limit = max_name_length(num_nodes)
    if len(name) <= limit:
        return name
    head, _, digest = name.rpartition("-")
    if not head or len(digest) > limit // 2:
        return name[:limit].rstrip("-")
    return f"{head[: limit - len(digest) - 1].rstrip('-')}-{digest}"
