"""The TrainJob writer: `write(plan)` -> a Kubeflow Trainer v2 TrainJob dict, from the job's `pods.PodPlan`.

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

What a TrainJob cannot express is refused before anything is written, with a `TemplateError` naming the setting
and the alternative (the `pytorchjob` target): `refusals` (the task) and `plan_problem` (its planned pod);
`plan_trainjob` runs both around `pods.plan_pods`, and writing never raises. Backend defaults that have no TrainJob
equivalent are not the user's choice; they are reported by `dropped_defaults` (logged by the connector, printed by
`pytorchjob render`) and dropped. The table of both is in docs/trainer-v2.md. `to_trainjob(spec, metadata, config)`
is the plan and the write in one call. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from backend_plugin.config import BackendConfig, RunPolicyDefaults
from backend_plugin.errors import TemplateError
from backend_plugin.execution import ExecutionMetadata, job_namespace
from backend_plugin.kinds.trainjob import (
    API_VERSION,
    GROUP,
    KIND,
    NODE,
    PLURAL,
    POD_NAME_SUFFIX,
    VERSION,
    TrainJobSettings,
)
from backend_plugin.pods import PodPlan, plan_pods, replica_pod
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
    "to_trainjob",
    "plan_trainjob",
    "write",
    "refusals",
    "plan_problem",
    "patch_problem",
    "dropped_defaults",
    "trainjob_name",
    "max_name_length",
]

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

_TRAINER_CONTAINER_FIELDS = ("name", "image", "command", "args", "env", "resources", "volumeMounts", "securityContext")
# terminationMessagePolicy is ours (FallbackToLogsOnError, pods.TERMINATION_MESSAGE_POLICY) and cannot be patched:
# on a TrainJob the node container keeps the runtime's (File), so failure messages carry no log tail.
_DROPPED_CONTAINER_FIELDS = ("terminationMessagePolicy",)
_POD_SUFFIX = len(POD_NAME_SUFFIX)  # the random suffix of a Job's pod name
_ALTERNATIVE = "remove it from the task, or run it on the PyTorchJob target (backend config `target: pytorchjob`)"


def to_trainjob(spec: TaskSpec, metadata: ExecutionMetadata, config: Optional[BackendConfig] = None) -> dict[str, Any]:
    """Plan and write the TrainJob for one execution of a task.

    Args:
        spec: the task (`template.read_template`).
        metadata: the execution (name, namespace, paths, labels, env, image override).
        config: backend config; defaults when None.

    Returns:
        A trainer.kubeflow.org/v1alpha1 TrainJob as a plain JSON-able dict with a stable key order.

    Raises:
        TemplateError: what `plan_trainjob` refuses.
    """
    return write(plan_trainjob(spec, metadata, config if config is not None else BackendConfig()))


def plan_trainjob(spec: TaskSpec, metadata: ExecutionMetadata, config: BackendConfig) -> PodPlan:
    """The job's pod plan, once the task is known to run as a TrainJob.

    Args:
        spec: the task.
        metadata: the execution.
        config: the backend config.

    Returns:
        The plan `write` writes.

    Raises:
        TemplateError: the task asks for something a TrainJob cannot express (every such setting is listed, each
            with the alternative: `refusals`, then `plan_problem`), or what `pods.plan_pods` refuses (no image, bad
            resources, ...).
    """
    problems = refusals(spec)
    if problems:
        raise TemplateError("cannot run as a Kubeflow Trainer v2 TrainJob: " + "; ".join(problems))
    plan = plan_pods(spec, metadata, config)
    problem = plan_problem(plan)
    if problem is not None:
        raise TemplateError(problem)
    return plan


def write(plan: PodPlan) -> dict[str, Any]:
    """Write the TrainJob of a planned job (never raises).

    Args:
        plan: `plan_trainjob`.

    Returns:
        A trainer.kubeflow.org/v1alpha1 TrainJob as a plain JSON-able dict with a stable key order.
    """
    spec, config = plan.spec, plan.config
    own = config.kind(TrainJobSettings)
    pod = replica_pod(plan.roles[0], plan)  # every role is the same pod here (`refusals` checked it)
    pod_spec = pod["spec"]
    containers = pod_spec.pop("containers")
    (container,) = [c for c in containers if c.get("name") == PRIMARY_CONTAINER]
    job_spec: dict[str, Any] = {
        "runtimeRef": {"name": own.runtime_name, "apiGroup": GROUP, "kind": own.runtime_kind},
        "trainer": trainer(container, plan),
    }
    patch = runtime_patch(pod["metadata"], pod_spec, container)
    if patch is not None:
        job_spec["runtimePatches"] = [patch]
    suspend = spec.scheduling.suspend
    if config.run_policy.suspend if suspend is None else suspend:
        job_spec["suspend"] = True
    deadline = active_deadline_seconds(spec, config.run_policy)
    if deadline is not None:
        job_spec["activeDeadlineSeconds"] = deadline
    if own.managed_by is not None:
        job_spec["managedBy"] = own.managed_by
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": job_metadata(plan), "spec": job_spec}


def trainer(container: Mapping[str, Any], plan: PodPlan) -> dict[str, Any]:
    """`spec.trainer`: the node container's image, command, args and env, the node count, the processes and
    resources per node.

    Args:
        container: the primary container of the planned pod.
        plan: the job's plan.

    Returns:
        The trainer.
    """
    out: dict[str, Any] = {"image": container["image"]}
    command, args = list(container.get("command") or []), list(container.get("args") or [])
    # The torch runtime's node container has no command; Flyte's args start with the executable (pyflyte-execute),
    # so they become the command and the TrainJob does not depend on the image's ENTRYPOINT.
    out["command"] = command or args
    if command and args:
        out["args"] = args
    if container.get("env"):
        out["env"] = container["env"]
    out["numNodes"] = plan.spec.total_replicas
    resources = container.get("resources") or {}
    nproc = num_proc_per_node(plan.spec, resources, plan.gpu_resource, plan.config)
    if nproc is not None:
        out["numProcPerNode"] = nproc
    if resources:
        out["resourcesPerNode"] = resources
    return out


def job_metadata(plan: PodPlan) -> dict[str, Any]:
    """The TrainJob's `metadata`.

    Args:
        plan: the job's plan (name, namespace, labels, annotations, owner references).

    Returns:
        `{name[, namespace], labels, annotations[, ownerReferences]}`.
    """
    metadata = plan.metadata
    meta: dict[str, Any] = {"name": trainjob_name(metadata.job_name, plan.spec.total_replicas)}
    namespace = job_namespace(metadata, plan.config)
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = dict(plan.labels)
    meta["annotations"] = dict(plan.annotations)
    if metadata.owner_references:
        meta["ownerReferences"] = [dict(r) for r in metadata.owner_references]
    return meta


def plan_problem(plan: PodPlan) -> Optional[str]:
    """What the planned node pod holds that a TrainJob cannot carry: an environment variable the torch runtime sets,
    or a pod template field a runtime patch cannot set.

    Args:
        plan: the job's `pods.plan_pods`.

    Returns:
        The message naming what and the alternative, or None.
    """
    role = plan.roles[0]
    container = next(c for c in role.source.spec["containers"] if c.get("name") == PRIMARY_CONTAINER)
    names = [e.get("name") for layer in (plan.environment, container.get("env") or (), plan.execution_environment)
             for e in layer]  # fmt: skip
    reserved = [n for n in dict.fromkeys(names) if n in RESERVED_ENV]
    if reserved:
        return (
            f"env {reserved} cannot be set on a TrainJob: the torch runtime sets {list(RESERVED_ENV)} in every node "
            "and the Trainer webhook rejects them; rename the variables"
        )
    return patch_problem(role.source.spec, container)


def refusals(spec: TaskSpec) -> list[str]:
    """What the task asks for that a TrainJob cannot express, one message per setting (empty: it can run).

    Refused (the task's own choice, which would otherwise be silently dropped): an elastic task, roles whose
    image, resources or restart policy differ, a per-role pod template, a restart policy other than Never,
    `backoffLimit`, `ttlSecondsAfterFinished`, a clean-pod policy other than Running, gang scheduling,
    `min_available` and a priority class. The planned pod is checked by `plan_problem`.

    Args:
        spec: the task.

    Returns:
        Messages naming the user's setting (`Worker(requests/limits=...)`, never a template path), why and the
        alternative.
    """
    return [*_elastic_refusals(spec), *_role_refusals(spec), *_policy_refusals(spec), *_scheduling_refusals(spec)]


def _elastic_refusals(spec: TaskSpec) -> list[str]:
    e = spec.elastic
    if e is None:
        return []
    return [
        f"Elastic(nnodes='{e.min_replicas}:{e.max_replicas}', max_restarts={e.max_restarts}): "
        "a TrainJob has a fixed node count and no elastic rendezvous; use PyTorch(...) with a fixed worker "
        f"count, or {_ALTERNATIVE}"
    ]


def _role_refusals(spec: TaskSpec) -> list[str]:
    """Roles that differ (image, resources), restart on their own, or have their own pod template."""
    out = []
    first = spec.replicas[0]
    for group in spec.replicas[1:]:
        for attr, setting, field in (("image", "image", "image"), ("resources", "requests/limits", "resourcesPerNode")):
            if getattr(group, attr) != getattr(first, attr):
                out.append(
                    f"{group.role}({setting}=...) differs from {first.role}({setting}=...): a TrainJob runs one pod "
                    f"spec on every node (trainer.{field}); give {first.role} and {group.role} the same {setting}, "
                    f"or {_ALTERNATIVE}"
                )
    out += [
        f"{group.role}(restart_policy={group.restart_policy!r}): a TrainJob's restarts are the training "
        f"runtime's (its JobSet failure policy), not per role; use Never, or {_ALTERNATIVE}"
        for group in spec.replicas
        if group.restart_policy != RestartPolicy.NEVER.value
    ]
    out += [
        f"{group.role}(pod_template=...) gives the {group.role} its own pod template: a TrainJob runs one pod "
        f"spec on every node and has no roles; put the settings on the task's pod template, or {_ALTERNATIVE}"
        for group in spec.replicas
        if group.pod_template is not None
    ]
    return out


def _policy_refusals(spec: TaskSpec) -> list[str]:
    """The run policy a TrainJob has no field for."""
    out = []
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
    return out


def _scheduling_refusals(spec: TaskSpec) -> list[str]:
    """Gang scheduling and priority, which belong to the training runtime on Trainer v2."""
    sched = spec.scheduling
    return [
        f"RunPolicy({key}={value!r}): gang scheduling and priority belong to the training runtime on "
        f"Trainer v2 (its podGroupPolicy, or a runtime with a priority class); pick such a runtime with "
        f"trainjob_runtime_name, or {_ALTERNATIVE}"
        for key, value in (
            ("gang_scheduling", sched.gang_scheduling or None),
            ("min_available", sched.min_available),
            ("priority_class", sched.priority_class),
        )
        if value is not None
    ]


_DEFAULT_TTL_S = RunPolicyDefaults.__dataclass_fields__["ttl_seconds_after_finished"].default
"""Our default `ttl_seconds_after_finished`, read off the field (no config is built per job to learn it)."""


def dropped_defaults(spec: TaskSpec, backend: BackendConfig) -> list[str]:
    """Backend defaults that a TrainJob cannot express and that are dropped (not the task's choice).

    Args:
        spec: the task.
        backend: the backend config.

    Returns:
        One message per dropped default (empty for the defaults of a TrainJob-only cluster).
    """
    out = []
    config = backend.run_policy
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
        _is_gpu(k, v, gpu_resource, config) for s in ("requests", "limits") for k, v in _section(resources, s)
    )
    if value == "cpu":
        return 1 if has_gpu else None
    return None if has_gpu else 1


def _section(resources: Mapping[str, Any], name: str) -> Any:
    return (resources.get(name) or {}).items()


def _is_gpu(name: str, amount: Any, gpu_resource: str, config: BackendConfig) -> bool:
    """A resource a node asks a non-zero amount of that counts as a GPU."""
    return (config.gpu.is_gpu_resource(name) or name == gpu_resource) and str(amount) not in ("0", "")


def active_deadline_seconds(spec: TaskSpec, config: RunPolicyDefaults) -> Optional[int]:
    """`spec.activeDeadlineSeconds`: the task's run policy, else its Flyte timeout, else the backend default (as
    `pytorchjob.run_policy`).

    Args:
        spec: the task.
        config: the backend config's run-policy defaults (`active_deadline_seconds`).

    Returns:
        Seconds, or None for no deadline.
    """
    deadline = spec.timeout_seconds if spec.timeout_seconds is not None else config.active_deadline_seconds
    value = spec.run_policy.active_deadline_seconds
    return value if value else deadline


def patch_problem(pod_spec: Mapping[str, Any], container: Mapping[str, Any]) -> Optional[str]:
    """Whether the task's node pod uses a pod field, a container field or an extra container that a runtime patch
    cannot carry (the fields the writer adds are all allowed).

    Args:
        pod_spec: the pod spec the node starts from (the task's pod).
        container: its primary container.

    Returns:
        The message naming each such field and the alternative, or None.
    """
    problems = [f"pod_template spec.{key}" for key in pod_spec if key not in POD_PATCH_FIELDS]
    problems += [
        f"pod_template primary container's {key}"
        for key in container
        if key not in _TRAINER_CONTAINER_FIELDS and key not in _DROPPED_CONTAINER_FIELDS
    ]
    if pod_spec.get("initContainers"):
        problems.append("pod_template spec.initContainers (a runtime patch cannot add a container image)")
    if not problems:
        return None
    return (
        f"cannot run as a Kubeflow Trainer v2 TrainJob: {', '.join(problems)} cannot be set through a runtime "
        f"patch (allowed pod fields: {list(POD_PATCH_FIELDS)}; container fields: image, command, args, env, "
        f"resources, volumeMounts, securityContext); {_ALTERNATIVE}"
    )


def runtime_patch(
    pod_metadata: Mapping[str, Any], pod_spec: dict[str, Any], container: Mapping[str, Any]
) -> Optional[dict[str, Any]]:
    """The one `runtimePatches` entry: the node pod's metadata, placement and volumes, and the node container's
    mounts and security context (what `patch_problem` refuses was refused before).

    Args:
        pod_metadata: `{labels, annotations}` of the node pod.
        pod_spec: the node pod spec without its containers (`pods.replica_pod`).
        container: the primary container.

    Returns:
        The patch, or None when there is nothing to patch.
    """
    node_container = {
        "name": NODE,
        **{k: container[k] for k in ("volumeMounts", "securityContext") if container.get(k)},
    }
    spec: dict[str, Any] = {k: pod_spec[k] for k in POD_PATCH_FIELDS if pod_spec.get(k) and k != "containers"}
    if len(node_container) > 1:
        spec["containers"] = [node_container]
    metadata = {k: dict(v) for k, v in pod_metadata.items() if v}
    pod_template = {key: value for key, value in (("metadata", metadata), ("spec", spec)) if value}
    if not pod_template:
        return None
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
