"""Replica pods, shared by every writer: a PyTorchJob replica spec and a TrainJob node run the same pod.

Two stages. `plan_pods(spec, metadata, config)` decides once per job everything that depends on the backend config or
the execution, and checks it: the GPU resource name, accelerator placement, `/dev/shm`, labels and annotations,
placeholder values, environment, and per role (`RolePlan`) the primary image, the resources (GPU keys renamed,
GPU requests equal to limits), the tolerations, node affinity and node selector to add, and the pod's labels and
annotations. `replica_pod(role, plan)` then writes one role's pod template from the plan in small pure steps (the
way torchx's `role_to_pod` reads): the task's pod, placeholders filled, the primary container, `/dev/shm`, the
service account, placement, metadata. Only the plan raises (`TemplateError`); writing never does.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from backend_plugin.config import AcceleratorPlacement, BackendConfig
from backend_plugin.errors import ConfigError, TemplateError
from backend_plugin.execution import ExecutionMetadata
from backend_plugin.frozen import thaw
from backend_plugin.secrets import SECRETS_LABEL, secret_annotations
from backend_plugin.spec import FLYTEKIT_GPU, PodTemplateSpec, ReplicaGroup, TaskSpec
from pytorch_contract.k8s_names import QUALIFIED_NAME, image_reference_problem
from pytorch_contract.quantity import is_quantity, parse_quantity
from pytorch_contract.template_keys import PRIMARY_CONTAINER

logger = logging.getLogger(__name__)

__all__ = [
    "PodPlan",
    "RolePlan",
    "plan_pods",
    "replica_pod",
    "job_labels",
    "pod_metadata",
    "placement_warnings",
    "image_problem",
    "QUEUE_LABEL",
    "SHM_VOLUME",
    "FAIL_ON_ERROR_ENV",
    "DIST_ERROR_ENV",
    "TERMINATION_MESSAGE_POLICY",
]

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
"""The label Kueue admits jobs by; set on the job from `pytorch.queue`."""

SHM_VOLUME = "dshm"
"""Name of the memory-backed volume mounted at `/dev/shm` (a template's own volume may not use it)."""

FAIL_ON_ERROR_ENV = {"name": "FLYTE_FAIL_ON_ERROR", "value": "true"}
"""Makes pyflyte-execute exit 1 when the task raises. Without it a failing rank writes error.pb and exits 0: its pod
succeeds, the operator never fails the job, and the replicas' error.pb files overwrite each other."""

DIST_ERROR_ENV: tuple[Mapping[str, Any], ...] = (
    {"name": "_F_DES", "value": "Earliest"},
    {"name": "_F_WN", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
)
"""Flyte's distributed error strategy (flytekit reads `_F_DES` / `_F_WN`, Flyte's Go plugin sets them the same way):
each replica writes its own `error-<uuid>.pb` naming its pod, instead of all replicas racing for one `error.pb`, so
the connector can report the earliest error, the root cause, and whether it is recoverable."""

TERMINATION_MESSAGE_POLICY = "FallbackToLogsOnError"
"""A failed replica's log tail becomes its termination message, so `get` can report the rank's error (pyflyte-execute
never writes /dev/termination-log)."""

# Go-template placeholders as flytepropeller accepts them: `{{ .Input }}`, `{{.input}}`, case-insensitive.
_PLACEHOLDER = re.compile(r"\{\{\s*[.$](\w+)\s*\}\}")
_IMAGE_RULE = "use e.g. 'ghcr.io/org/train:1.0' (repository path in lower case)"


@dataclass(frozen=True)
class RolePlan:
    """One role's pod, decided: what its pod template gets from the config and the execution.

    Attributes:
        group: the role (`TaskSpec.replicas`).
        source: the pod it starts from (the role's own pod template, else the task's pod).
        image: the primary container's image (the role's, the execution's override, else the container's).
        resources: the primary container's resources, GPU keys renamed to the cluster's and GPU requests set to
            their limits (a fresh copy for each pod).
        gpus: the GPU resource names it requests (non-zero); placement is added only when there are some.
        tolerations: tolerations to add, in order (GPU, accelerator, interruptible), the pod's own kept first.
        affinity: node label -> allowed values every required node-selector term gets (GPU roles of an
            accelerator type); empty for none.
        node_selector: `nodeSelector` entries that win over the pod's own (an interruptible attempt's).
        labels: the pod's labels (backend defaults < pod template < execution < what a task setting needs).
        annotations: the pod's annotations, in the same layers.
    """

    group: ReplicaGroup
    source: PodTemplateSpec
    image: str
    resources: Mapping[str, Any]
    gpus: tuple[str, ...]
    tolerations: tuple[Mapping[str, Any], ...]
    affinity: Mapping[str, tuple[str, ...]]
    node_selector: Mapping[str, str]
    labels: Mapping[str, str]
    annotations: Mapping[str, str]


@dataclass(frozen=True)
class PodPlan:
    """What every replica pod of one job shares, and each role's pod (computed once per job by `plan_pods`).

    Attributes:
        spec: the task.
        metadata: the execution.
        config: the backend config.
        gpu_resource: the extended resource a GPU request is written under.
        placement: where GPU replicas must run (accelerator type), or None.
        shm_enabled: whether to mount a memory-backed `/dev/shm`.
        shm_size: its `sizeLimit`, or None.
        shm_path: its mount path.
        labels: labels of the job (backend defaults < execution < queue label).
        annotations: annotations of the job.
        secret_annotations: propeller's `flyte.secrets/s<i>` pod annotations (empty without secrets).
        interruptible: whether this attempt runs on interruptible nodes.
        placeholders: lower-cased placeholder name -> value.
        environment: the environment every primary container starts with (before the template's own).
        execution_environment: the execution's variables, which win over the template's.
        roles: one `RolePlan` per role of `spec.replicas`, in the same order.
    """

    spec: TaskSpec
    metadata: ExecutionMetadata
    config: BackendConfig
    gpu_resource: str
    placement: Optional[AcceleratorPlacement]
    shm_enabled: bool
    shm_size: Optional[str]
    shm_path: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    secret_annotations: Mapping[str, str]
    interruptible: bool
    placeholders: Mapping[str, str]
    environment: tuple[Mapping[str, Any], ...]
    execution_environment: tuple[Mapping[str, str], ...]
    roles: tuple[RolePlan, ...] = ()


# --------------------------------------------------------------------------------------------------------------
# The plan: everything decided and checked once per job


def plan_pods(spec: TaskSpec, metadata: ExecutionMetadata, config: BackendConfig) -> PodPlan:
    """Decide (and check) what every replica pod of one job gets from the config and the execution.

    Args:
        spec: the task (`read_template`).
        metadata: the execution.
        config: the backend config.

    Returns:
        The plan for `replica_pod`.

    Raises:
        TemplateError: the accelerator type cannot be placed, the secrets do not fit in the annotations, a role has
            no image or one the kubelet refuses, or a role's resources are not allowed (the message names the field,
            the value and what is allowed).
    """
    shm = spec.shared_memory
    labels, annotations = job_labels(spec, metadata, config)
    plan = PodPlan(
        spec=spec,
        metadata=metadata,
        config=config,
        gpu_resource=_gpu_resource(spec, config),
        placement=_placement(spec, config),
        shm_enabled=config.shm.enabled if shm.enabled is None else shm.enabled,
        shm_size=config.shm.size if shm.enabled is None else shm.size_limit,
        shm_path=shm.mount_path,
        labels=labels,
        annotations=annotations,
        secret_annotations=secret_annotations(spec.secrets),
        interruptible=spec.interruptible if metadata.interruptible is None else bool(metadata.interruptible),
        placeholders=_placeholders(metadata),
        environment=(FAIL_ON_ERROR_ENV, *DIST_ERROR_ENV, *_identity_env(spec, metadata)),
        execution_environment=tuple({"name": str(k), "value": str(v)} for k, v in metadata.environment.items()),
    )
    return dataclasses.replace(plan, roles=tuple(_role_plan(group, plan) for group in spec.replicas))


def _gpu_resource(spec: TaskSpec, config: BackendConfig) -> str:
    """The resource a GPU request is written under: the task's, a MIG slice's, else the cluster's."""
    if spec.mig_partition and spec.gpu_resource is None:
        return config.gpu.mig_resource_template.format(partition=spec.mig_partition)
    return spec.gpu_resource or config.gpu.resource_name


def _placement(spec: TaskSpec, config: BackendConfig) -> Optional[AcceleratorPlacement]:
    if not spec.accelerator:
        return None
    try:
        return config.gpu.placement_for(spec.accelerator)
    except ConfigError as e:
        raise TemplateError(f"accelerator={spec.accelerator!r}: {e}") from e


def _role_plan(group: ReplicaGroup, plan: PodPlan) -> RolePlan:
    """One role's image, resources, placement and metadata, checked."""
    source = group.pod_template or plan.spec.pod  # the role's own pod template, merged over the task's
    container = next(c for c in source.spec["containers"] if c.get("name") == PRIMARY_CONTAINER)
    raw = thaw(group.resources) if group.resources is not None else thaw(container.get("resources") or {})
    resources, gpus = _fix_resources(raw, f"{group.path}.resources", plan.config, plan.gpu_resource)
    tolerations: list[Mapping[str, Any]] = []
    affinity: dict[str, tuple[str, ...]] = {}
    if gpus:  # placement only for replicas that actually request GPUs
        tolerations += plan.config.gpu.tolerations_for(gpus)
        if plan.placement is not None:
            tolerations += plan.placement.resolved_tolerations()
            affinity = {k: tuple(v) for k, v in plan.placement.node_selector.items()}
    node_selector: Mapping[str, str] = {}
    if plan.interruptible:
        tolerations += plan.config.interruptible.tolerations
        node_selector = plan.config.interruptible.node_selector
    labels, annotations = pod_metadata(source, plan)
    return RolePlan(
        group=group,
        source=source,
        image=_role_image(group, plan.metadata, container),
        resources=resources,
        gpus=tuple(gpus),
        tolerations=tuple(tolerations),
        affinity=affinity,
        node_selector=node_selector,
        labels=labels,
        annotations=annotations,
    )


def _role_image(group: ReplicaGroup, meta: ExecutionMetadata, container: Mapping[str, Any]) -> str:
    """The role's primary image; the role's own was checked by the reader, the others are checked here."""
    if group.image:
        return group.image
    image = meta.image_override or container.get("image") or ""
    if not image:
        raise _err(
            f"{group.path}.image", image, "no image: set the replica, the execution override or the container image"
        )
    where = (
        "the execution's image override"
        if meta.image_override
        else "the task's image (container.image, or the primary container's in k8sPod.podSpec)"
    )
    problem = image_problem(image, where)
    if problem is not None:
        raise TemplateError(problem)
    return str(image)


def image_problem(image: Any, where: str) -> Optional[str]:
    """The image rule the SDK checks at decoration time (`pytorch_contract.k8s_names.image_reference_problem`): a
    reference the kubelet would refuse never reaches the API server, where it would fail only minutes later.

    Args:
        image: the image reference.
        where: where it was set, for the message.

    Returns:
        The message naming the place, the value and the rule, or None for a good reference.
    """
    problem = image_reference_problem(image)
    if problem is None:
        return None
    return f"{where}={image!r}: not an image reference the kubelet accepts ({problem}); {_IMAGE_RULE}"


def job_labels(spec: TaskSpec, metadata: ExecutionMetadata, config: BackendConfig) -> tuple[dict, dict]:
    """Labels and annotations of the job (and of every pod, under the pod template's own).

    Args:
        spec: the task.
        metadata: the execution.
        config: the backend config.

    Returns:
        (labels, annotations): backend defaults, then the execution's, then the Kueue queue label.
    """
    labels = {**config.job.default_labels, **metadata.labels}
    annotations = {**config.job.default_annotations, **metadata.annotations}
    if spec.scheduling.queue is not None:
        labels[QUEUE_LABEL] = spec.scheduling.queue
    return labels, annotations


def pod_metadata(source: PodTemplateSpec, plan: PodPlan) -> tuple[dict[str, str], dict[str, str]]:
    """Labels and annotations of one replica pod: the user's win over the backend's defaults.

    Layers, later winning: the backend config's `default_labels` / `default_annotations`, the (role's) pod template,
    the execution's labels and annotations, then what the backend must set for a feature the task asked for (the
    Kueue queue label for `pytorch.queue`, flytepropeller's secrets label and `flyte.secrets/*` annotations); each
    of those that replaces a different value of the pod template is logged.

    Args:
        source: the pod the role starts from (`ReplicaGroup.pod_template` or `TaskSpec.pod`).
        plan: the job's plan (its shared parts).

    Returns:
        (labels, annotations), fresh dicts.
    """
    config, meta = plan.config.job, plan.metadata
    labels = {**config.default_labels, **source.labels, **meta.labels}
    annotations = {**config.default_annotations, **source.annotations, **meta.annotations}
    required_labels: dict[str, str] = {}
    if plan.spec.scheduling.queue is not None:
        required_labels[QUEUE_LABEL] = plan.spec.scheduling.queue
    required_annotations: dict[str, str] = {}
    if plan.secret_annotations:  # flytepropeller's secrets webhook injects them into pods marked this way
        required_labels[SECRETS_LABEL] = "true"
        required_annotations.update(plan.secret_annotations)
    _require("label", labels, required_labels)
    _require("annotation", annotations, required_annotations)
    return labels, annotations


def _require(kind: str, layer: dict[str, str], required: Mapping[str, str]) -> None:
    for key, value in required.items():
        if key in layer and layer[key] != value:
            logger.warning(
                "pod template %s %s=%r replaced by %r: the backend needs it for a setting of the task",
                kind,
                key,
                layer[key],
                value,
            )
        layer[key] = value


def _err(path: str, value: Any, rule: str) -> TemplateError:
    return TemplateError(f"{path}={value!r}: {rule}")


def _fix_resources(
    resources: dict[str, Any], path: str, config: BackendConfig, gpu_name: str
) -> tuple[dict[str, Any], list[str]]:
    """Normalize GPU keys, make extended-resource requests equal limits, check requests <= limits.

    Returns the resources and the GPU resource names requested (non-zero).
    """
    out = {kind: _renamed(resources[kind], f"{path}.{kind}", gpu_name) for kind in ("requests", "limits")
           if resources.get(kind)}  # fmt: skip
    requests, limits = out.get("requests", {}), out.get("limits", {})
    gpus = []
    for key in list(dict.fromkeys([*requests, *limits])):
        if config.gpu.is_gpu_resource(key) or key == gpu_name:
            if _gpu_amount(requests, limits, key, path):
                gpus.append(key)
        else:
            _request_within_limit(requests, limits, key, path)
    result = {kind: section for kind, section in (("requests", requests), ("limits", limits)) if section}
    result.update((key, value) for key, value in resources.items() if key not in ("requests", "limits"))  # `claims`
    return result, gpus


def _request_within_limit(requests: dict[str, str], limits: dict[str, str], key: str, path: str) -> None:
    if key in requests and key in limits and parse_quantity(requests[key]) > parse_quantity(limits[key]):
        raise _err(f"{path}[{key!r}]", f"request {requests[key]} > limit {limits[key]}", "request must be <= limit")


def _renamed(section: Mapping[str, Any], path: str, gpu_name: str) -> dict[str, str]:
    """One of `requests` / `limits`: flytekit's GPU key under the cluster's name, every name and quantity checked."""
    out = {}
    for key, value in section.items():
        if key == FLYTEKIT_GPU and gpu_name != FLYTEKIT_GPU:
            key = gpu_name
        if not QUALIFIED_NAME.match(str(key)):
            raise _err(f"{path} key", key, "is not a Kubernetes resource name")
        if not is_quantity(value):
            raise _err(f"{path}[{key!r}]", value, "is not a Kubernetes quantity; use e.g. '500m', '4Gi'")
        out[key] = str(value)
    return out


def _gpu_amount(requests: dict[str, str], limits: dict[str, str], key: str, path: str) -> bool:
    """Set a GPU's request and limit to the one amount (extended resources cannot overcommit: Kubernetes needs
    both); whether it is non-zero."""
    req, lim = requests.get(key), limits.get(key)
    if req is not None and lim is not None and parse_quantity(req) != parse_quantity(lim):
        raise _err(f"{path}[{key!r}]", f"request {req}, limit {lim}", "GPU requests must equal limits")
    amount = lim if lim is not None else requests[key]
    requests[key] = limits[key] = amount
    return parse_quantity(amount) > 0


def _placeholders(meta: ExecutionMetadata) -> dict[str, str]:
    """Values for Go-template placeholders; the keys are lower-cased names."""
    input_prefix = meta.input_path.rsplit("/", 1)[0] if "/" in meta.input_path else meta.input_path
    return {
        "input": meta.input_path,
        "inputprefix": input_prefix,
        "outputprefix": meta.output_prefix,
        "rawoutputdataprefix": meta.raw_output_prefix,
        "checkpointoutputprefix": meta.checkpoint_prefix,
        "prevcheckpointprefix": meta.prev_checkpoint_prefix,
    }


def _identity_env(spec: TaskSpec, meta: ExecutionMetadata) -> list[dict[str, str]]:
    """The FLYTE_INTERNAL_* variables flytekit's entrypoint reads to know which execution it runs in."""
    task_id = spec.task_id
    values = (
        ("FLYTE_INTERNAL_EXECUTION_PROJECT", meta.project),
        ("FLYTE_INTERNAL_EXECUTION_DOMAIN", meta.domain),
        ("FLYTE_INTERNAL_EXECUTION_ID", meta.execution_name),
        ("FLYTE_INTERNAL_TASK_PROJECT", task_id.project),
        ("FLYTE_INTERNAL_TASK_DOMAIN", task_id.domain),
        ("FLYTE_INTERNAL_TASK_NAME", task_id.name),
        ("FLYTE_INTERNAL_TASK_VERSION", task_id.version),
        ("FLYTE_ATTEMPT_NUMBER", str(meta.retry_attempt) if meta.execution_name else ""),
    )
    return [{"name": name, "value": value} for name, value in values if value]


# --------------------------------------------------------------------------------------------------------------
# Writing one role's pod: small pure steps over the plan


def replica_pod(role: RolePlan, plan: PodPlan) -> dict[str, Any]:
    """The pod template of one role, written from its plan (never raises).

    Args:
        role: the role's plan (`PodPlan.roles`).
        plan: the job's plan.

    Returns:
        `{"metadata": {labels, annotations}, "spec": core/v1 PodSpec}`, every dict fresh.
    """
    pod = role.source.fresh_spec()
    _fill_placeholders(pod, role.source, plan.placeholders)
    container = next(c for c in pod["containers"] if c.get("name") == PRIMARY_CONTAINER)
    volumes, mounts = _shared_memory(pod, container, plan)
    primary = _primary_container(container, role, plan, mounts)
    pod["containers"] = [primary if c is container else c for c in pod["containers"]]
    if volumes:
        pod["volumes"] = volumes
    _service_account(pod, plan)
    _place(pod, role)
    return {"metadata": {"labels": dict(role.labels), "annotations": dict(role.annotations)}, "spec": pod}


def _fill_placeholders(pod: dict[str, Any], source: PodTemplateSpec, values: Mapping[str, str]) -> None:
    """Flyte's placeholders in the containers' command and args (the items found once per template)."""
    for i, key, j in source.fill_args:
        items = pod["containers"][i][key]
        items[j] = _fill(str(items[j]), values)


def _fill(text: str, values: Mapping[str, str]) -> str:
    if "{{" not in text:
        return text

    def sub(m: re.Match) -> str:
        return values.get(m.group(1).lower(), m.group(0))

    return _PLACEHOLDER.sub(sub, text)


def _shared_memory(pod: Mapping[str, Any], container: Mapping[str, Any], plan: PodPlan) -> tuple[list[Any], list[Any]]:
    """The pod's volumes and the primary container's mounts, with the memory-backed `/dev/shm` added when on (a
    volume of the user's own named like ours keeps its name: ours takes the next free one)."""
    mounts = list(container.get("volumeMounts") or [])
    volumes = list(pod.get("volumes") or [])
    if not plan.shm_enabled or any(m.get("mountPath") == plan.shm_path for m in mounts):
        return volumes, mounts
    name = _free_name({v.get("name") for v in volumes})
    empty_dir = {"medium": "Memory", **({"sizeLimit": plan.shm_size} if plan.shm_size else {})}
    return [*volumes, {"name": name, "emptyDir": empty_dir}], [*mounts, {"name": name, "mountPath": plan.shm_path}]


def _free_name(taken: set[Any]) -> str:
    """`SHM_VOLUME`, or the first `SHM_VOLUME-<i>` no volume of the pod has."""
    return next(n for n in (SHM_VOLUME, *(f"{SHM_VOLUME}-{i}" for i in range(1, len(taken) + 2))) if n not in taken)


def _primary_container(
    container: Mapping[str, Any], role: RolePlan, plan: PodPlan, mounts: list[Any]
) -> dict[str, Any]:
    """The primary container: name and image first, then command, args, env, resources, mounts, the termination
    message policy, and the template's other fields as written."""
    env = _merge_env(plan.environment, container.get("env") or [], plan.execution_environment)
    ordered: dict[str, Any] = {"name": PRIMARY_CONTAINER, "image": role.image}
    for key, value in (
        ("command", container.get("command")),
        ("args", container.get("args")),
        ("env", env),
        ("resources", thaw(role.resources)),
        ("volumeMounts", mounts),
    ):
        if value:
            ordered[key] = value
    ordered["terminationMessagePolicy"] = container.get("terminationMessagePolicy") or TERMINATION_MESSAGE_POLICY
    for key, value in container.items():
        if key not in ordered and key not in ("env", "resources", "volumeMounts"):
            ordered[key] = value
    return ordered


def _merge_env(*layers: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Later layers win; a variable keeps its first position. Every entry is a fresh dict, nested ones too."""
    merged: dict[str, Mapping[str, Any]] = {}
    for layer in layers:
        for var in layer:
            merged[var["name"]] = var
    return [thaw(v) for v in merged.values()]


def _service_account(pod: dict[str, Any], plan: PodPlan) -> None:
    """The execution's service account wins; the backend's applies only where the pod template names none."""
    own = plan.config.job.service_account
    if plan.metadata.service_account:
        pod["serviceAccountName"] = plan.metadata.service_account
    elif own and not pod.get("serviceAccountName"):
        pod["serviceAccountName"] = own


def _place(pod: dict[str, Any], role: RolePlan) -> None:
    """The role's affinity, tolerations and node selector (Flyte's k8s plugin: the config's node selector wins)."""
    if role.affinity:
        _add_affinity(pod, role.affinity)
    if role.tolerations:
        _add_tolerations(pod, role.tolerations)
    if role.node_selector:
        _add_node_selector(pod, role.node_selector)


def _add_tolerations(pod: dict[str, Any], extra: Sequence[Mapping[str, Any]]) -> None:
    tolerations = list(pod.get("tolerations") or [])
    for tol in extra:
        if tol not in tolerations:
            tolerations.append(dict(tol))
    if tolerations:
        pod["tolerations"] = tolerations


def _add_node_selector(pod: dict[str, Any], selector: Mapping[str, str]) -> None:
    own = pod.get("nodeSelector") or {}
    for key, value in selector.items():
        if key in own and own[key] != value:
            logger.warning(
                "pod template nodeSelector %s=%r replaced by %r: the task is interruptible, and the backend's "
                "interruptible_node_selector is what places it on interruptible nodes",
                key,
                own[key],
                value,
            )
    pod["nodeSelector"] = {**own, **selector}


def _add_affinity(spec: dict[str, Any], selector: Mapping[str, Sequence[str]]) -> None:
    """Add `In` requirements to every required node-selector term (terms are ORed, so each needs them)."""
    expressions = [{"key": k, "operator": "In", "values": list(v)} for k, v in selector.items()]
    affinity = spec.setdefault("affinity", {})
    node = affinity.setdefault("nodeAffinity", {})
    required = node.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.setdefault("nodeSelectorTerms", [])
    if not terms:
        terms.append({"matchExpressions": []})
    for term in terms:
        existing = term.setdefault("matchExpressions", [])
        for expr in expressions:
            if expr not in existing:
                existing.append(dict(expr, values=list(expr["values"])))


def placement_warnings(spec: TaskSpec, config: BackendConfig) -> list[str]:
    """Warnings, for every job kind, about a placement that no node can match (see `placement_problem`).

    Args:
        spec: the task (`read_template`).
        config: the backend config.

    Returns:
        No line, or one line naming the accelerator and the option that fixes it.
    """
    problem = config.gpu.placement_problem(spec.accelerator) if spec.accelerator else None
    return [problem] if problem else []
