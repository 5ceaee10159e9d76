"""Replica pods, shared by every writer: a PyTorchJob replica spec and a TrainJob node run the same pod.

`plan_pods(spec, metadata, config)` decides once per job what every replica shares (the GPU resource name,
accelerator placement, `/dev/shm`, labels and annotations, placeholder values, environment); `replica_pod(group,
plan)` then builds one role's pod template from the task's pod: the primary container with its image, filled
placeholders, environment, resources and mounts, and the pod's placement (GPU tolerations and affinity only where
GPUs are requested, interruptible tolerations and node selector, service account). All pure.
"""

from __future__ import annotations

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
from pytorch_contract.template_keys import MASTER_IMAGE, PRIMARY_CONTAINER, pod_template_key

logger = logging.getLogger(__name__)

__all__ = [
    "PodPlan",
    "plan_pods",
    "replica_pod",
    "job_labels",
    "pod_metadata",
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


@dataclass(frozen=True)
class PodPlan:
    """What every replica pod of one job shares (computed once per job by `plan_pods`).

    Attributes:
        spec: the task.
        metadata: the execution.
        config: the backend config.
        gpu_resource: the extended resource a GPU request is written under.
        placement: where GPU replicas must run (accelerator type), or None.
        shm_enabled: whether to mount a memory-backed `/dev/shm`.
        shm_size: its `sizeLimit`, or None.
        shm_path: its mount path.
        labels: labels of the job and of every pod (backend defaults < execution < queue label).
        annotations: annotations of the job and of every pod.
        secret_annotations: propeller's `flyte.secrets/s<i>` pod annotations (empty without secrets).
        interruptible: whether this attempt runs on interruptible nodes.
        placeholders: lower-cased placeholder name -> value.
        environment: the environment every primary container starts with (before the template's own).
        execution_environment: the execution's variables, which win over the template's.
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


def plan_pods(spec: TaskSpec, metadata: ExecutionMetadata, config: BackendConfig) -> PodPlan:
    """Decide what every replica pod of one job shares.

    Args:
        spec: the task (`read_template`).
        metadata: the execution.
        config: the backend config.

    Returns:
        The plan for `replica_pod`.

    Raises:
        TemplateError: the accelerator type cannot be placed, or the secrets do not fit in the annotations.
    """
    gpu_resource = spec.gpu_resource or config.gpu_resource_name
    if spec.mig_partition and spec.gpu_resource is None:
        gpu_resource = config.mig_resource_template.format(partition=spec.mig_partition)
    placement = None
    if spec.accelerator:
        try:
            placement = config.placement_for(spec.accelerator)
        except ConfigError as e:
            raise TemplateError(f"accelerator={spec.accelerator!r}: {e}") from e
    shm = spec.shared_memory
    shm_enabled = config.shm_enabled if shm.enabled is None else shm.enabled
    shm_size = config.shm_size if shm.enabled is None else shm.size_limit
    secrets = secret_annotations(spec.secrets)
    interruptible = spec.interruptible if metadata.interruptible is None else bool(metadata.interruptible)
    labels, annotations = job_labels(spec, metadata, config)
    return PodPlan(
        spec=spec,
        metadata=metadata,
        config=config,
        gpu_resource=gpu_resource,
        placement=placement,
        shm_enabled=shm_enabled,
        shm_size=shm_size,
        shm_path=shm.mount_path,
        labels=labels,
        annotations=annotations,
        secret_annotations=secrets,
        interruptible=interruptible,
        placeholders=_placeholders(metadata),
        environment=(FAIL_ON_ERROR_ENV, *DIST_ERROR_ENV, *_identity_env(spec, metadata)),
        execution_environment=tuple({"name": str(k), "value": str(v)} for k, v in metadata.environment.items()),
    )


def job_labels(spec: TaskSpec, metadata: ExecutionMetadata, config: BackendConfig) -> tuple[dict, dict]:
    """Labels and annotations of the job (and of every pod, under the pod template's own).

    Args:
        spec: the task.
        metadata: the execution.
        config: the backend config.

    Returns:
        (labels, annotations): backend defaults, then the execution's, then the Kueue queue label.
    """
    labels = {**config.default_labels, **metadata.labels}
    annotations = {**config.default_annotations, **metadata.annotations}
    if spec.scheduling.queue is not None:
        labels[QUEUE_LABEL] = spec.scheduling.queue
    return labels, annotations


def replica_pod(group: ReplicaGroup, plan: PodPlan) -> dict[str, Any]:
    """The pod template of one role.

    Args:
        group: the role (`TaskSpec.replicas`).
        plan: the job's `plan_pods`.

    Returns:
        `{"metadata": {labels, annotations}, "spec": core/v1 PodSpec}`, every dict fresh.

    Raises:
        TemplateError: no image for the role, bad resources, or a template volume named like the shm volume.
    """
    meta, config = plan.metadata, plan.config
    source = group.pod_template or plan.spec.pod  # the role's own pod template, merged over the task's
    pod = source.fresh_spec()
    container = next(c for c in pod["containers"] if c.get("name") == PRIMARY_CONTAINER)

    image = group.image or meta.image_override or container.get("image") or ""
    if not image:
        raise _err(
            f"{group.path}.image", image, "no image: set the replica, the execution override or the container image"
        )
    _check_image(image, _image_source(group, plan, container, image))
    for key in ("containers", "initContainers"):
        for i, other in enumerate(pod.get(key) or []):
            if other is not container and "image" in other:
                _check_image(other["image"], f"{_pod_path(plan.spec, group)}.{key}[{i}].image")
    for i, key, j in source.fill_args:  # the items with placeholders (found once per template)
        items = pod["containers"][i][key]
        items[j] = _fill(str(items[j]), plan.placeholders)
    env = _merge_env(plan.environment, container.get("env") or [], plan.execution_environment)

    where = f"{group.path}.resources"
    res = thaw(group.resources) if group.resources is not None else (container.get("resources") or {})
    res, gpus = _fix_resources(res, where, config, plan.gpu_resource)

    mounts = list(container.get("volumeMounts") or [])
    volumes = list(pod.get("volumes") or [])
    if plan.shm_enabled and not any(m.get("mountPath") == plan.shm_path for m in mounts):
        # A volume of the user's own named like ours keeps its name: ours takes the next free one.
        taken = {v.get("name") for v in volumes}
        shm_name = next(
            n for n in (SHM_VOLUME, *(f"{SHM_VOLUME}-{i}" for i in range(1, len(taken) + 2))) if n not in taken
        )
        empty_dir: dict[str, Any] = {"medium": "Memory"}
        if plan.shm_size:
            empty_dir["sizeLimit"] = plan.shm_size
        volumes.append({"name": shm_name, "emptyDir": empty_dir})
        mounts.append({"name": shm_name, "mountPath": plan.shm_path})

    ordered: dict[str, Any] = {"name": PRIMARY_CONTAINER, "image": image}
    for key in ("command", "args"):
        if container.get(key):
            ordered[key] = container[key]
    if env:
        ordered["env"] = env
    if res:
        ordered["resources"] = res
    if mounts:
        ordered["volumeMounts"] = mounts
    ordered["terminationMessagePolicy"] = container.get("terminationMessagePolicy") or TERMINATION_MESSAGE_POLICY
    for key, value in container.items():
        if key not in ordered and key not in ("env", "resources", "volumeMounts"):
            ordered[key] = value
    pod["containers"] = [ordered if c is container else c for c in pod["containers"]]
    if volumes:
        pod["volumes"] = volumes
    _service_account(pod, meta, config)
    if gpus:  # placement only for replicas that actually request GPUs
        _gpu_placement(pod, gpus, plan)
    if plan.interruptible:
        _interruptible_placement(pod, config)

    pod_labels, pod_annotations = pod_metadata(source, plan)
    return {"metadata": {"labels": pod_labels, "annotations": pod_annotations}, "spec": pod}


def pod_metadata(source: PodTemplateSpec, plan: PodPlan) -> tuple[dict[str, str], dict[str, str]]:
    """Labels and annotations of one replica pod: the user's win over the backend's defaults.

    Layers, later winning: the backend config's `default_labels` / `default_annotations`, the (role's) pod template,
    the execution's labels and annotations, then what the backend must set for a feature the task asked for (the
    Kueue queue label for `pytorch.queue`, flytepropeller's secrets label and `flyte.secrets/*` annotations); each
    of those that replaces a different value of the pod template is logged.

    Args:
        source: the pod the role starts from (`ReplicaGroup.pod_template` or `TaskSpec.pod`).
        plan: the job's `plan_pods`.

    Returns:
        (labels, annotations), fresh dicts.
    """
    config, meta = plan.config, plan.metadata
    labels = {**config.default_labels, **source.labels, **meta.labels}
    annotations = {**config.default_annotations, **source.annotations, **meta.annotations}
    required_labels: dict[str, str] = {}
    if plan.spec.scheduling.queue is not None:
        required_labels[QUEUE_LABEL] = plan.spec.scheduling.queue
    required_annotations: dict[str, str] = {}
    if plan.secret_annotations:  # flytepropeller's secrets webhook injects them into pods marked this way
        required_labels[SECRETS_LABEL] = "true"
        required_annotations.update(plan.secret_annotations)
    for kind, layer, required in (
        ("label", labels, required_labels),
        ("annotation", annotations, required_annotations),
    ):
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
    return labels, annotations


# --------------------------------------------------------------------------------------------------------------
# Pieces


def _err(path: str, value: Any, rule: str) -> TemplateError:
    return TemplateError(f"{path}={value!r}: {rule}")


def _check_image(image: Any, where: str) -> None:
    """The image rule the SDK checks at decoration time (`pytorch_contract.k8s_names.image_reference_problem`): a
    reference the kubelet would refuse never reaches the API server, where it would fail only minutes later."""
    problem = image_reference_problem(image)
    if problem is not None:
        raise _err(
            where,
            image,
            f"not an image reference the kubelet accepts ({problem}); use e.g. 'ghcr.io/org/train:1.0' (repository "
            "path in lower case)",
        )


def _image_source(group: ReplicaGroup, plan: PodPlan, container: Mapping[str, Any], image: str) -> str:
    """Where a role's primary image was set: the role, the execution's override, or the task's container."""
    if group.image:
        if group.role == "Master" and plan.spec.config.get(MASTER_IMAGE):
            return f"config[{MASTER_IMAGE!r}]"
        return f"{group.path}.image"
    if plan.metadata.image_override:
        return "the execution's image override"
    return "the task's image (container.image, or the primary container's in k8sPod.podSpec)"


def _pod_path(spec: TaskSpec, group: ReplicaGroup) -> str:
    """Where a role's extra containers come from in the template, for messages (only a pod template has them)."""
    if group.pod_template is not None:
        return f"config[{pod_template_key(group.role)!r}].podSpec"
    return "k8sPod.podSpec"


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


def _fill(text: str, values: Mapping[str, str]) -> str:
    if "{{" not in text:
        return text

    def sub(m: re.Match) -> str:
        return values.get(m.group(1).lower(), m.group(0))

    return _PLACEHOLDER.sub(sub, text)


def _identity_env(spec: TaskSpec, meta: ExecutionMetadata) -> list[dict[str, str]]:
    """The FLYTE_INTERNAL_* variables flytekit's entrypoint reads to know which execution it runs in."""
    env = []
    for name, value in (
        ("FLYTE_INTERNAL_EXECUTION_PROJECT", meta.project),
        ("FLYTE_INTERNAL_EXECUTION_DOMAIN", meta.domain),
        ("FLYTE_INTERNAL_EXECUTION_ID", meta.execution_name),
    ):
        if value:
            env.append({"name": name, "value": value})
    task_id = spec.task_id
    for name, value in (
        ("FLYTE_INTERNAL_TASK_PROJECT", task_id.project),
        ("FLYTE_INTERNAL_TASK_DOMAIN", task_id.domain),
        ("FLYTE_INTERNAL_TASK_NAME", task_id.name),
        ("FLYTE_INTERNAL_TASK_VERSION", task_id.version),
    ):
        if value:
            env.append({"name": name, "value": value})
    if meta.execution_name:
        env.append({"name": "FLYTE_ATTEMPT_NUMBER", "value": str(meta.retry_attempt)})
    return env


def _merge_env(*layers: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Later layers win; a variable keeps its first position. Every entry is a fresh dict, nested ones too."""
    merged: dict[str, Mapping[str, Any]] = {}
    for layer in layers:
        for var in layer:
            merged[var["name"]] = var
    return [thaw(v) for v in merged.values()]


def _fix_resources(
    resources: dict[str, Any], path: str, config: BackendConfig, gpu_name: str
) -> tuple[dict[str, Any], list[str]]:
    """Normalize GPU keys, make extended-resource requests equal limits, check requests <= limits.

    Returns the resources and the GPU resource names requested (non-zero).
    """
    out: dict[str, dict[str, Any]] = {}
    for kind in ("requests", "limits"):
        section = resources.get(kind)
        if section:
            renamed = {}
            for key, value in section.items():
                if key == FLYTEKIT_GPU and gpu_name != FLYTEKIT_GPU:
                    key = gpu_name
                if not QUALIFIED_NAME.match(str(key)):
                    raise _err(f"{path}.{kind} key", key, "is not a Kubernetes resource name")
                if not is_quantity(value):
                    raise _err(f"{path}.{kind}[{key!r}]", value, "is not a Kubernetes quantity; use e.g. '500m', '4Gi'")
                renamed[key] = str(value)
            out[kind] = renamed
    requests, limits = out.get("requests", {}), out.get("limits", {})
    gpus = []
    for key in list(dict.fromkeys([*requests, *limits])):
        if config.is_gpu_resource(key) or key == gpu_name:
            req, lim = requests.get(key), limits.get(key)
            if req is not None and lim is not None and parse_quantity(req) != parse_quantity(lim):
                raise _err(f"{path}[{key!r}]", f"request {req}, limit {lim}", "GPU requests must equal limits")
            amount = lim if lim is not None else requests[key]
            requests[key] = limits[key] = amount  # extended resources cannot overcommit: Kubernetes needs both
            if parse_quantity(amount) > 0:
                gpus.append(key)
        elif key in requests and key in limits and parse_quantity(requests[key]) > parse_quantity(limits[key]):
            raise _err(f"{path}[{key!r}]", f"request {requests[key]} > limit {limits[key]}", "request must be <= limit")
    result: dict[str, Any] = {}
    if requests:
        result["requests"] = requests
    if limits:
        result["limits"] = limits
    for key, value in resources.items():  # e.g. `claims`
        if key not in ("requests", "limits"):
            result[key] = value
    return result, gpus


def _service_account(pod: dict[str, Any], meta: ExecutionMetadata, config: BackendConfig) -> None:
    """The execution's service account wins; the backend's applies only where the pod template names none."""
    if meta.service_account:
        pod["serviceAccountName"] = meta.service_account
    elif config.service_account and not pod.get("serviceAccountName"):
        pod["serviceAccountName"] = config.service_account


def _add_tolerations(pod: dict[str, Any], extra: Sequence[Mapping[str, Any]]) -> None:
    tolerations = list(pod.get("tolerations") or [])
    for tol in extra:
        if tol not in tolerations:
            tolerations.append(dict(tol))
    if tolerations:
        pod["tolerations"] = tolerations


def _gpu_placement(pod: dict[str, Any], gpus: list[str], plan: PodPlan) -> None:
    """GPU tolerations, plus the accelerator's tolerations and node affinity."""
    extra = plan.config.tolerations_for(gpus)
    if plan.placement is not None:
        extra += plan.placement.resolved_tolerations()
        _add_affinity(pod, plan.placement.node_selector)
    _add_tolerations(pod, extra)


def _interruptible_placement(pod: dict[str, Any], config: BackendConfig) -> None:
    """Like Flyte's k8s plugin: every replica, the config's node selector wins over the pod template's."""
    _add_tolerations(pod, config.interruptible_tolerations)
    if config.interruptible_node_selector:
        own = pod.get("nodeSelector") or {}
        for key, value in config.interruptible_node_selector.items():
            if key in own and own[key] != value:
                logger.warning(
                    "pod template nodeSelector %s=%r replaced by %r: the task is interruptible, and the backend's "
                    "interruptible_node_selector is what places it on interruptible nodes",
                    key,
                    own[key],
                    value,
                )
        pod["nodeSelector"] = {**own, **config.interruptible_node_selector}


def _add_affinity(spec: dict[str, Any], selector: Mapping[str, list[str]]) -> None:
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
    problem = config.placement_problem(spec.accelerator) if spec.accelerator else None
    return [problem] if problem else []
