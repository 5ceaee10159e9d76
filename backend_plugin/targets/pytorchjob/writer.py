"""The PyTorchJob writer: `write(plan)` -> a kubeflow.org/v1 PyTorchJob dict, from the job's `pods.PodPlan`.

A short composition of small pure functions: one replica spec per role (`pods.replica_pod` plus the role's count
and restart policy), the run policy (the task's values over the backend's defaults), the elastic policy and the
job's metadata. Writing never raises: everything that can be refused was checked by the reader and the plan. No I/O,
no clock: the same inputs always give the same dict with a stable key order, so `pytorchjob render` output, golden
files and the object the connector sends are byte-for-byte the same thing. `to_pytorchjob(spec, metadata, config)`
is the plan and the write in one call.

The other kinds' writers (`backend_plugin.targets.<kind>.writer`) build on the same `TaskSpec` and `pods` helpers.
"""

from __future__ import annotations

from typing import Any, Optional

from backend_plugin.config import BackendConfig, RunPolicyDefaults
from backend_plugin.execution import ExecutionMetadata, job_namespace
from backend_plugin.kinds.pytorchjob import API_VERSION, GROUP, KIND, PLURAL, VERSION
from backend_plugin.pods import PodPlan, RolePlan, plan_pods, replica_pod
from backend_plugin.spec import TaskSpec

__all__ = [
    "API_VERSION",
    "KIND",
    "GROUP",
    "VERSION",
    "PLURAL",
    "write",
    "to_pytorchjob",
    "run_policy",
    "elastic_policy",
]


def to_pytorchjob(
    spec: TaskSpec, metadata: ExecutionMetadata, config: Optional[BackendConfig] = None
) -> dict[str, Any]:
    """Plan and write the PyTorchJob for one execution of a task.

    Args:
        spec: the task (`template.read_template`).
        metadata: the execution (name, namespace, paths, labels, env, image override).
        config: backend config; defaults when None.

    Returns:
        A kubeflow.org/v1 PyTorchJob as a plain JSON-able dict with a stable key order.

    Raises:
        TemplateError: what the task asks for cannot run with this execution and config (no image, an accelerator
            that cannot be placed, bad resources); the message names the field, the value and what is allowed.
    """
    return write(plan_pods(spec, metadata, config if config is not None else BackendConfig()))


def write(plan: PodPlan) -> dict[str, Any]:
    """Write the PyTorchJob of a planned job (never raises).

    Args:
        plan: the job's `pods.plan_pods`.

    Returns:
        A kubeflow.org/v1 PyTorchJob as a plain JSON-able dict with a stable key order.
    """
    spec, defaults = plan.spec, plan.config.run_policy
    replica_specs = {role.group.role: replica_spec(role, plan) for role in plan.roles}
    job_spec: dict[str, Any] = {"runPolicy": run_policy(spec, defaults)}
    if spec.elastic is not None:
        job_spec["elasticPolicy"] = elastic_policy(spec, defaults)
    nproc = nproc_per_node(spec)
    if nproc is not None:
        job_spec["nprocPerNode"] = nproc
    job_spec["pytorchReplicaSpecs"] = replica_specs
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": job_metadata(plan), "spec": job_spec}


def replica_spec(role: RolePlan, plan: PodPlan) -> dict[str, Any]:
    """`spec.pytorchReplicaSpecs.<role>`.

    Args:
        role: the role's plan.
        plan: the job's pod plan.

    Returns:
        `{replicas, restartPolicy, template}`.
    """
    group = role.group
    return {"replicas": group.replicas, "restartPolicy": group.restart_policy, "template": replica_pod(role, plan)}


def run_policy(spec: TaskSpec, config: RunPolicyDefaults) -> dict[str, Any]:
    """`spec.runPolicy`: the task's values over the backend's defaults; a value the task states wins, 0 included.

    The deadline is the task's run policy, else its Flyte timeout, else the backend default. Flyte enforces the
    timeout itself by aborting the node (the connector then deletes the job), but only while propeller and the
    connector are alive and the execution is known; the deadline makes the training operator stop a runaway job
    (and free its GPUs) on its own. The operator counts it from the job's status.startTime, never earlier than the
    moment Flyte started the attempt, so it cannot fire before Flyte's own timeout would. Each retry is a new job,
    matching Flyte's per-attempt timeout.

    Args:
        spec: the task.
        config: the backend config's run-policy defaults.

    Returns:
        The run policy dict.
    """
    policy = spec.run_policy
    out: dict[str, Any] = {"cleanPodPolicy": policy.clean_pod_policy or config.clean_pod_policy}
    deadline = spec.timeout_seconds if spec.timeout_seconds is not None else config.active_deadline_seconds
    for key, value, default in (
        ("backoffLimit", policy.backoff_limit, config.backoff_limit),
        ("activeDeadlineSeconds", policy.active_deadline_seconds, deadline),
        ("ttlSecondsAfterFinished", policy.ttl_seconds_after_finished, config.ttl_seconds_after_finished),
    ):
        # A value the template states wins, 0 included (`backoffLimit: 0` = no pod restarts, `ttl...: 0` = delete at
        # once); the reader already turned "not written" into None and rejected a 0 deadline.
        chosen = value if value is not None else default
        if chosen is not None:
            out[key] = chosen
    scheduling = scheduling_policy(spec, config)
    if scheduling:
        out["schedulingPolicy"] = scheduling
    suspend = spec.scheduling.suspend
    if config.suspend if suspend is None else suspend:
        out["suspend"] = True
    return out


def scheduling_policy(spec: TaskSpec, config: RunPolicyDefaults) -> dict[str, Any]:
    """`spec.runPolicy.schedulingPolicy`: queue, priority class and the gang size.

    Args:
        spec: the task.
        config: supplies the gang-scheduling default.

    Returns:
        The policy; empty when there is nothing to say.
    """
    sched = spec.scheduling
    out: dict[str, Any] = {}
    if sched.queue is not None:
        out["queue"] = sched.queue
    if sched.priority_class is not None:
        out["priorityClass"] = sched.priority_class
    gang = config.gang_scheduling if sched.gang_scheduling is None else sched.gang_scheduling
    if sched.min_available is not None:
        out["minAvailable"] = sched.min_available
    elif gang:
        out["minAvailable"] = spec.elastic.min_replicas if spec.elastic is not None else spec.total_replicas
    return out


def elastic_policy(spec: TaskSpec, config: RunPolicyDefaults) -> dict[str, Any]:
    """`spec.elasticPolicy` of an elastic task.

    Args:
        spec: an elastic task (`spec.elastic` set).
        config: supplies the rendezvous backend where the template leaves it empty.

    Returns:
        `{minReplicas, maxReplicas, rdzvBackend, maxRestarts}`.

    Raises:
        ValueError: `spec` is not elastic.
    """
    elastic = spec.elastic
    if elastic is None:
        raise ValueError("elastic_policy needs an elastic TaskSpec (spec.elastic is None)")
    return {
        "minReplicas": elastic.min_replicas,
        "maxReplicas": elastic.max_replicas,
        "rdzvBackend": elastic.rdzv_backend or config.rdzv_backend,
        "maxRestarts": elastic.max_restarts,
    }


def nproc_per_node(spec: TaskSpec) -> Optional[str]:
    """`spec.nprocPerNode`: the config key, else an elastic task's integer.

    Args:
        spec: the task.

    Returns:
        The value, or None to leave the operator's default.
    """
    if spec.nproc_per_node is not None:
        return spec.nproc_per_node
    if spec.elastic is not None and spec.elastic.nproc_per_node > 0:
        return str(spec.elastic.nproc_per_node)
    return None


def job_metadata(plan: PodPlan) -> dict[str, Any]:
    """The job's `metadata`.

    Args:
        plan: the job's pod plan (name, namespace, labels, annotations, owner references).

    Returns:
        `{name[, namespace], labels, annotations[, ownerReferences]}`.
    """
    meta = plan.metadata
    out: dict[str, Any] = {"name": meta.job_name}
    namespace = job_namespace(meta, plan.config)
    if namespace is not None:
        out["namespace"] = namespace
    out["labels"] = dict(plan.labels)
    out["annotations"] = dict(plan.annotations)
    if meta.owner_references:
        out["ownerReferences"] = [dict(r) for r in meta.owner_references]
    return out
