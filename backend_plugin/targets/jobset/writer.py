"""The JobSet writer: `write(plan)` -> a `jobset.x-k8s.io/v1alpha2` JobSet dict, from the job's `pods.PodPlan`.

The third kind, from the same `TaskSpec` and the same `pods.plan_pods` / `pods.replica_pod` pieces, in JobSet's own
conventions (its PyTorch example, Kubeflow Trainer v2's torch runtime and Flyte 2's multi-node environment build on
them):

- one replicated job per role: `master` (one pod) and `worker` (N pods), each a single Indexed Job with
  `completions` = `parallelism` = its pod count, `backoffLimit: 0` and pods that never restart in place: a failure is
  handled once, for the whole JobSet, by its failure policy;
- `network.enableDNSHostnames`: pod `<jobset>-<role>-0-<index>` answers at `<jobset>-<role>-0-<index>.<jobset>`, so the
  master is `<jobset>-master-0-0.<jobset>`, known before any pod exists;
- each role's pod gets, in its training container, the variables the Kubeflow training operator gives a PyTorchJob
  replica (`distributed_env`): `MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE`, `PET_MASTER_*`, `PET_NNODES`,
  `PET_NPROC_PER_NODE`, all but the pod's own rank, which one template for every pod of a role cannot hold: it holds
  the role's first node rank instead (`NODE_RANK_OFFSET_ENV`), and the launcher in the pod adds the completion index
  Kubernetes sets (`JOB_COMPLETION_INDEX`) to give the task `RANK` and `PET_NODE_RANK`;
- `successPolicy`: the JobSet succeeds when the master does (a PyTorchJob's rule);
- `failurePolicy` (`failure_policy`, with the child Jobs' `pod_failure_policy`): a preempted or drained pod restarts
  the JobSet without spending its budget, a run out of time and a failure of a role that never restarts end it, and
  any other failure restarts it within `maxRestarts` (the task's `backoff_limit`);
- the JobSet's own metadata: labels (Kueue reads its queue label there), annotations, owner references; `suspend`,
  `managedBy`, `ttlSecondsAfterFinished`.

What a JobSet cannot express is refused before anything is written, with a `TemplateError` naming the setting and the
alternative (`refusals`: an elastic task, gang scheduling, a clean-pod policy other than Running); backend defaults
without a JobSet equivalent are reported by `dropped_defaults`. Writing never raises. `to_jobset(spec, metadata,
config)` is the plan and the write in one call. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Optional

from backend_plugin.config import BackendConfig, RunPolicyDefaults
from backend_plugin.errors import TemplateError
from backend_plugin.execution import ExecutionMetadata, job_namespace
from backend_plugin.kinds.jobset import (
    API_VERSION,
    GROUP,
    KIND,
    PLURAL,
    VERSION,
    JobSetSettings,
    replicated_job_name,
)
from backend_plugin.kinds.jobset_webhook import POD_SUFFIX, pod_name_prefix
from backend_plugin.pods import PodPlan, RolePlan, plan_pods, replica_pod
from backend_plugin.spec import ReplicaGroup, TaskSpec
from pytorch_contract.k8s_names import NODE_RANK_OFFSET_ENV
from pytorch_contract.preemption import PREEMPTED_EXIT_CODE
from pytorch_contract.template_keys import PRIMARY_CONTAINER, RestartPolicy

__all__ = [
    "API_VERSION",
    "KIND",
    "GROUP",
    "VERSION",
    "PLURAL",
    "MASTER_PORT",
    "DISTRIBUTED_ENV",
    "TASK_ERROR_EXIT_CODES",
    "PREEMPTED_MESSAGE",
    "STOPPED_MESSAGE",
    "to_jobset",
    "plan_jobset",
    "write",
    "refusals",
    "dropped_defaults",
    "overrides",
    "distributed_env",
    "pod_failure_policy",
    "failure_policy",
    "max_restarts",
    "master_address",
    "jobset_name",
    "max_name_length",
]

MASTER_PORT = 23456
"""`MASTER_PORT`: the training operator's default port for a PyTorchJob master, so a task sees the same number on
either kind."""

DISTRIBUTED_ENV = ("PYTHONUNBUFFERED", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "PET_MASTER_ADDR", "PET_MASTER_PORT",
                   "PET_NNODES", "PET_NPROC_PER_NODE", NODE_RANK_OFFSET_ENV)  # fmt: skip
"""The variables `distributed_env` writes into every training container (they replace the task's own)."""

TASK_ERROR_EXIT_CODES = tuple(range(1, 128))
"""Exit codes of the training container that are the task's own failure: pyflyte-execute exits 1 when the task
raised (`FLYTE_FAIL_ON_ERROR`), and a code below 128 is the process's own, not a signal's (OOM kills and other
signals are 128 + the signal). The training operator's `ExitCode` restart policy draws the same line."""

PREEMPTED_MESSAGE = "condition DisruptionTarget matching FailJob rule"
"""What a child Job's failure message holds when its pod failure policy failed it for a pod the system disrupted
(Kubernetes writes `Pod <ns>/<pod> has condition DisruptionTarget matching FailJob rule at index 0`): the pattern
of the JobSet's `Preempted` rule."""

STOPPED_MESSAGE = f"failed with exit code {PREEMPTED_EXIT_CODE} matching FailJob rule"
"""What a child Job's failure message holds when its pod failure policy failed it for a pod that stopped at the
agreed step of a preemption (`PREEMPTED_EXIT_CODE`; Kubernetes writes `Container pytorch for pod <ns>/<pod> failed
with exit code 200 matching FailJob rule at index 1`): the peers of a preempted pod carry no `DisruptionTarget`
condition, so without it the first of their Jobs to fail would be read as a task failure. The `Preempted` rule's
second pattern."""

_ALTERNATIVE = "remove it from the task, or run it on the PyTorchJob target (backend config `target: pytorchjob`)"


def to_jobset(spec: TaskSpec, metadata: ExecutionMetadata, config: Optional[BackendConfig] = None) -> dict[str, Any]:
    """Plan and write the JobSet for one execution of a task.

    Args:
        spec: the task (`template.read_template`).
        metadata: the execution (name, namespace, paths, labels, env, image override).
        config: backend config; defaults when None.

    Returns:
        A jobset.x-k8s.io/v1alpha2 JobSet as a plain JSON-able dict with a stable key order.

    Raises:
        TemplateError: what `plan_jobset` refuses.
    """
    return write(plan_jobset(spec, metadata, config if config is not None else BackendConfig()))


def plan_jobset(spec: TaskSpec, metadata: ExecutionMetadata, config: BackendConfig) -> PodPlan:
    """The job's pod plan, once the task is known to run as a JobSet.

    Args:
        spec: the task.
        metadata: the execution.
        config: the backend config.

    Returns:
        The plan `write` writes.

    Raises:
        TemplateError: the task asks for something a JobSet cannot express (every such setting is listed, each with
            the alternative: `refusals`), or what `pods.plan_pods` refuses (no image, bad resources, ...).
    """
    problems = refusals(spec)
    if problems:
        raise TemplateError("cannot run as a JobSet: " + "; ".join(problems))
    return plan_pods(spec, metadata, config)


def write(plan: PodPlan) -> dict[str, Any]:
    """Write the JobSet of a planned job (never raises).

    Args:
        plan: `plan_jobset`.

    Returns:
        A jobset.x-k8s.io/v1alpha2 JobSet as a plain JSON-able dict with a stable key order.
    """
    spec, config = plan.spec, plan.config
    own = config.kind(JobSetSettings)
    name = jobset_name(plan.metadata.job_name, spec.replicas)
    offsets = _offsets(spec.replicas)
    job_spec: dict[str, Any] = {
        "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
        "successPolicy": {"operator": "All", "targetReplicatedJobs": [replicated_job_name(spec.replicas[0].role)]},
        "failurePolicy": failure_policy(spec, config),
    }
    suspend = spec.scheduling.suspend
    if config.run_policy.suspend if suspend is None else suspend:
        job_spec["suspend"] = True
    if own.managed_by is not None:
        job_spec["managedBy"] = own.managed_by
    ttl = spec.run_policy.ttl_seconds_after_finished
    ttl = ttl if ttl is not None else config.run_policy.ttl_seconds_after_finished
    if ttl is not None:
        job_spec["ttlSecondsAfterFinished"] = ttl
    job_spec["replicatedJobs"] = [replicated_job(role, plan, name, offsets[role.group.role]) for role in plan.roles]
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": job_metadata(plan, name), "spec": job_spec}


def _offsets(groups: Iterable[ReplicaGroup]) -> dict[str, int]:
    """Each role's first node rank: the master 0, the workers 1 (the roles in `TaskSpec.replicas` order)."""
    out, first = {}, 0
    for group in groups:
        out[group.role] = first
        first += group.replicas
    return out


def replicated_job(role: RolePlan, plan: PodPlan, name: str, offset: int) -> dict[str, Any]:
    """`spec.replicatedJobs[]` of one role: one Indexed Job of the role's pods.

    Args:
        role: the role's plan.
        plan: the job's plan.
        name: the JobSet's name.
        offset: the role's first node rank.

    Returns:
        `{name, replicas: 1, template: {spec: Job spec}}`.
    """
    group = role.group
    pod = replica_pod(role, plan)
    pod_spec = pod["spec"]
    pod_spec["restartPolicy"] = "Never"  # restarts are the JobSet's (its failure policy), never a pod's (`overrides`)
    priority = plan.spec.scheduling.priority_class
    if priority is not None:
        pod_spec["priorityClassName"] = priority
    env = distributed_env(plan, name, offset)
    for container in pod_spec["containers"]:
        if container.get("name") == PRIMARY_CONTAINER:
            container["env"] = _with_env(container.get("env") or [], env)
    job: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": group.replicas,
        "parallelism": group.replicas,
        "backoffLimit": 0,
    }
    deadline = active_deadline_seconds(plan.spec, plan.config.run_policy)
    if deadline is not None:
        job["activeDeadlineSeconds"] = deadline
    job["podFailurePolicy"] = pod_failure_policy(group)
    job["template"] = pod
    return {"name": replicated_job_name(group.role), "replicas": 1, "template": {"spec": job}}


def _with_env(env: list[dict[str, Any]], ours: list[dict[str, str]]) -> list[dict[str, Any]]:
    """The container's env with ours appended; a variable of the task's own with one of our names is replaced (as
    the training operator's win on a PyTorchJob replica), and reported by `env_overrides`."""
    names = {e["name"] for e in ours}
    return [e for e in env if e.get("name") not in names] + ours


def distributed_env(plan: PodPlan, name: str, offset: int) -> list[dict[str, str]]:
    """What the Kubeflow training operator (v1.9, `pkg/controller.v1/pytorch/envvar.go`) gives a PyTorchJob replica
    with a Master, but for the pod's own rank: the role's first node rank instead (`NODE_RANK_OFFSET_ENV`).

    `WORLD_SIZE` = all pods x `nproc_per_node` when it is a number (1 otherwise), `PET_NNODES` = all pods,
    `PET_NPROC_PER_NODE` = `nproc_per_node` (`auto` when the task leaves it), and the master's address and port.

    Args:
        plan: the job's plan.
        name: the JobSet's name.
        offset: the role's first node rank.

    Returns:
        The variables, in `DISTRIBUTED_ENV` order.
    """
    total = plan.spec.total_replicas
    nproc = plan.spec.nproc_per_node or "auto"
    world = total * (int(nproc) if nproc.isdigit() else 1)
    master = master_address(plan.spec, name)
    values = ("1", master, str(MASTER_PORT), str(world), master, str(MASTER_PORT), str(total), nproc, str(offset))
    return [{"name": key, "value": value} for key, value in zip(DISTRIBUTED_ENV, values, strict=True)]


def master_address(spec: TaskSpec, name: str) -> str:
    """The master's stable address: its pod's hostname in the JobSet's subdomain (the JobSet's name).

    Args:
        spec: the task.
        name: the JobSet's name.

    Returns:
        `<jobset>-master-0-0.<jobset>`.
    """
    return f"{pod_name_prefix(name, replicated_job_name(spec.replicas[0].role), 0, 0)}.{name}"


def pod_failure_policy(group: ReplicaGroup) -> dict[str, Any]:
    """The child Job's `podFailurePolicy`: how Kubernetes classes a failed pod of the role before the JobSet's rules
    (`failure_policy`) read the class from the Job's failure reason and message. The one place the classes are
    decided:

    - a pod the system disrupted (condition `DisruptionTarget`: preemption, eviction, a drain for host maintenance)
      fails the Job at once with reason `PodFailurePolicy` and `PREEMPTED_MESSAGE`, which the `Preempted` rule restarts
      without spending the budget;
    - a pod whose training container exited `PREEMPTED_EXIT_CODE` (its ranks stopped at the agreed step of a
      preemption: the disrupted pod's peers, which have no `DisruptionTarget`) fails the Job the same way with
      `STOPPED_MESSAGE`, which the same rule restarts; the disrupted pod itself matches the first rule (Kubernetes
      applies the first rule that matches);
    - with the role's restart policy `ExitCode`, the task's own failure (`TASK_ERROR_EXIT_CODES`) fails the Job with
      reason `PodFailurePolicy`, which the `TaskError` rule does not restart;
    - anything else counts against `backoffLimit: 0` (reason `BackoffLimitExceeded`).

    Args:
        group: the role.

    Returns:
        `{rules: [...]}`.
    """
    stopped = {"containerName": PRIMARY_CONTAINER, "operator": "In", "values": [PREEMPTED_EXIT_CODE]}
    rules: list[dict[str, Any]] = [
        {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        {"action": "FailJob", "onExitCodes": stopped},
    ]
    if group.restart_policy == RestartPolicy.EXIT_CODE.value:
        codes = {"containerName": PRIMARY_CONTAINER, "operator": "In", "values": list(TASK_ERROR_EXIT_CODES)}
        rules.append({"action": "FailJob", "onExitCodes": codes})
    return {"rules": rules}


def failure_policy(spec: TaskSpec, config: BackendConfig) -> dict[str, Any]:
    """`spec.failurePolicy`: `maxRestarts` and the rules, in order (the first that matches a failed Job acts):

    1. `Preempted`: a pod the system disrupted, or one that stopped at a preemption's agreed step (exit code
       `PREEMPTED_EXIT_CODE`; `pod_failure_policy`), restarts the JobSet without spending the budget
       (`RestartJobSetAndIgnoreMaxRestarts`), as JobSet's host-maintenance example does. It comes first: JobSet
       applies the first rule that matches any failed Job, so a peer's Job failed by exit code 200 is never read by
       a rule that charges the budget or fails the JobSet;
    2. `DeadlineExceeded`: a Job out of its `activeDeadlineSeconds` fails the JobSet (another run would get a fresh
       deadline);
    3. `TaskError` (roles with restart policy `ExitCode`): the task's own failure fails the JobSet;
    4. `NoRestart` (roles with restart policy `Never`): any failure fails the JobSet;
    5. otherwise JobSet's default: restart (`RestartJobSet`), counted against `maxRestarts`.

    The JobSet's failure then follows the task's error document as on every kind (retryable or permanent).

    Args:
        spec: the task.
        config: the backend config (the default `backoff_limit`, `jobset_max_restarts`).

    Returns:
        `{maxRestarts, rules}`.
    """
    rules: list[dict[str, Any]] = [
        {
            "name": "Preempted",
            "action": "RestartJobSetAndIgnoreMaxRestarts",
            "onJobFailureReasons": ["PodFailurePolicy"],
            "onJobFailureMessagePatterns": [PREEMPTED_MESSAGE, STOPPED_MESSAGE],
        },
        {"name": "DeadlineExceeded", "action": "FailJobSet", "onJobFailureReasons": ["DeadlineExceeded"]},
    ]
    by_policy: dict[str, list[str]] = {}
    for group in spec.replicas:
        by_policy.setdefault(group.restart_policy, []).append(replicated_job_name(group.role))
    exit_code = by_policy.get(RestartPolicy.EXIT_CODE.value)
    if exit_code:
        rules.append({"name": "TaskError", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"],
                      "targetReplicatedJobs": exit_code})  # fmt: skip
    never = by_policy.get(RestartPolicy.NEVER.value)
    if never:
        rules.append({"name": "NoRestart", "action": "FailJobSet", "targetReplicatedJobs": never})
    return {"maxRestarts": max_restarts(spec, config), "rules": rules}


def max_restarts(spec: TaskSpec, config: BackendConfig) -> int:
    """`spec.failurePolicy.maxRestarts`: the task's `backoff_limit`, else the backend's, else `jobset_max_restarts`
    when a role restarts, else 0 (only a disrupted pod restarts the JobSet, and that never counts).

    Args:
        spec: the task.
        config: the backend config.

    Returns:
        The restart budget.
    """
    for limit in (spec.run_policy.backoff_limit, config.run_policy.backoff_limit):
        if limit is not None:
            return limit
    never = RestartPolicy.NEVER.value
    return config.kind(JobSetSettings).max_restarts if any(g.restart_policy != never for g in spec.replicas) else 0


def active_deadline_seconds(spec: TaskSpec, config: RunPolicyDefaults) -> Optional[int]:
    """Each child Job's `activeDeadlineSeconds`: the task's run policy, else its Flyte timeout, else the backend
    default, as a PyTorchJob's `runPolicy.activeDeadlineSeconds`. A restart creates new Jobs, whose deadline starts
    again; Flyte's own timeout still bounds the attempt.

    Args:
        spec: the task.
        config: the backend config's run-policy defaults.

    Returns:
        Seconds, or None for no deadline.
    """
    deadline = spec.timeout_seconds if spec.timeout_seconds is not None else config.active_deadline_seconds
    value = spec.run_policy.active_deadline_seconds
    return value if value is not None else deadline


def job_metadata(plan: PodPlan, name: str) -> dict[str, Any]:
    """The JobSet's `metadata`.

    Args:
        plan: the job's plan (namespace, labels, annotations, owner references).
        name: its name.

    Returns:
        `{name[, namespace], labels, annotations[, ownerReferences]}`.
    """
    meta: dict[str, Any] = {"name": name}
    namespace = job_namespace(plan.metadata, plan.config)
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = dict(plan.labels)
    meta["annotations"] = dict(plan.annotations)
    if plan.metadata.owner_references:
        meta["ownerReferences"] = [dict(r) for r in plan.metadata.owner_references]
    return meta


def refusals(spec: TaskSpec) -> list[str]:
    """What the task asks for that a JobSet cannot express, one message per setting (empty: it can run).

    Refused (the task's own choice, which would otherwise be silently dropped): an elastic task, gang scheduling and
    `min_available`, and a clean-pod policy other than Running.

    Args:
        spec: the task.

    Returns:
        Messages naming the user's setting, why and the alternative.
    """
    out = []
    e = spec.elastic
    if e is not None:
        out.append(
            f"Elastic(nnodes='{e.min_replicas}:{e.max_replicas}', max_restarts={e.max_restarts}): a JobSet runs a "
            "fixed number of pods that meet at the master; use PyTorch(...) with a fixed worker count, or "
            f"{_ALTERNATIVE}"
        )
    sched = spec.scheduling
    out += [
        f"RunPolicy({key}={value!r}): a JobSet has no gang-scheduling setting; Kueue admits all of a JobSet's pods at "
        f"once (give the task a queue), or {_ALTERNATIVE}"
        for key, value in (("gang_scheduling", sched.gang_scheduling or None), ("min_available", sched.min_available))
        if value is not None
    ]
    policy = spec.run_policy.clean_pod_policy
    if policy not in (None, "Running"):
        out.append(
            f"RunPolicy(clean_pod_policy={policy!r}): a finished JobSet stops the pods still running and keeps the "
            f"finished ones (the default 'Running'); {_ALTERNATIVE}"
        )
    return out


def dropped_defaults(spec: TaskSpec, backend: BackendConfig) -> list[str]:
    """Backend defaults that a JobSet cannot express and that are dropped (not the task's choice).

    Args:
        spec: the task.
        backend: the backend config.

    Returns:
        One message per dropped default (empty for the defaults).
    """
    out = []
    config = backend.run_policy
    if config.clean_pod_policy != "Running" and spec.run_policy.clean_pod_policy is None:
        out.append(
            f"backend clean_pod_policy={config.clean_pod_policy!r} is not applied: a finished JobSet stops running "
            "pods and keeps finished ones"
        )
    if config.gang_scheduling and spec.scheduling.gang_scheduling is None:
        out.append("backend gang_scheduling=true is not applied: a JobSet is gang-admitted by Kueue, not a PodGroup")
    return out


def overrides(spec: TaskSpec) -> list[str]:
    """What of the task's pods the backend replaces on a JobSet pod, one message each: an environment variable of
    `DISTRIBUTED_ENV`, and a pod template's `restartPolicy` other than Never.

    Args:
        spec: the task.

    Returns:
        Messages naming the setting (empty when the task sets none of them).
    """
    sources = [("pod_template", spec.pod)]
    sources += [(f"{g.role}.pod_template", g.pod_template) for g in spec.replicas if g.pod_template is not None]
    names = {
        str(e.get("name"))
        for _, source in sources
        for c in source.spec.get("containers") or ()
        if c.get("name") == PRIMARY_CONTAINER
        for e in c.get("env") or ()
    }
    out = [
        f"environment {name} is set by the backend on every JobSet pod, as the training operator sets it on a "
        "PyTorchJob replica: the task's value is not used"
        for name in DISTRIBUTED_ENV
        if name in names
    ]
    out += [
        f"{setting} restartPolicy={source.spec['restartPolicy']!r} is replaced by 'Never': a JobSet pod never restarts "
        "in place; the role's restart_policy decides what a failure does to the whole JobSet"
        for setting, source in sources
        if source.spec.get("restartPolicy") not in (None, "Never")
    ]
    return out


def max_name_length(groups: Iterable[ReplicaGroup]) -> int:
    """The longest JobSet name whose pods `<name>-<role>-0-<last index>-xxxxx` all stay within 63 characters.

    Args:
        groups: the task's roles.

    Returns:
        63 minus the longest `-<role>-0-<last index>` and the 6 characters of the pod name's random suffix.
    """
    longest = max(len(pod_name_prefix("", replicated_job_name(g.role), 0, g.replicas - 1)) for g in groups)
    return 63 - longest - len(POD_SUFFIX)


def jobset_name(name: str, groups: Iterable[ReplicaGroup]) -> str:
    """The execution's job name, shortened to `max_name_length` when needed.

    `execution.job_name` ends with 8 hex characters hashing the execution's identity; the shortened name keeps them,
    so it stays unique and deterministic (a retried create still finds its job).

    Args:
        name: `ExecutionMetadata.job_name` (a DNS-1035 label).
        groups: the task's roles.

    Returns:
        A DNS-1035 label short enough for the JobSet's Job and pod names.
    """
    limit = max_name_length(groups)
    if len(name) <= limit:
        return name
    head, _, digest = name.rpartition("-")
    if not head or len(digest) > limit // 2:
        return name[:limit].rstrip("-")
    return f"{head[: limit - len(digest) - 1].rstrip('-')}-{digest}"
