"""The task template's content for a config, for every front-end: ``custom`` and the ``pytorch.*`` config keys.

``custom`` is the ``DistributedPyTorchTrainingTask`` message (docs/template-format.md) as a protobuf JSON dict:
the one flytekit's kfpytorch writes and Flyte's native kfoperators ``pytorch`` plugin reads. flyteidl (flytekit)
and flyteidl2 (Flyte 2) carry the same message field for field, so the content is built here once, as the message's
JSON, and each front-end passes its own generated message class to `training_task_custom`, which parses it (a
check that the front-end's message holds it) and writes it back as that message's JSON. A role's resources are the
one part the front-ends convert themselves (each SDK has its own conversion to ``core.Resources``).

What the message cannot carry travels as the ``pytorch.*`` keys of ``pytorch_contract.template_keys``
(`pytorch_config`, `elastic_config`).

Imports neither torch nor a Flyte SDK; ``google.protobuf`` and ``kubernetes`` are imported when used.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Optional, Union

from pytorch_contract import template_keys as keys
from pytorch_contract.template_keys import DEFAULT_RDZV_BACKEND, CleanPodPolicy, RestartPolicy
from pytorch_core.config import Elastic, PyTorch, RunPolicy

__all__ = [
    "ResourcesJson",
    "training_task",
    "training_task_custom",
    "pytorch_config",
    "elastic_config",
    "role_pod_template",
]

ResourcesJson = Callable[[Any, Any], Optional[dict[str, Any]]]
"""``(requests, limits) -> {"requests": [...], "limits": [...]}``: a role's resources as ``core.Resources`` JSON
(``None`` or ``{}`` when neither is set); supplied by the front-end."""

# ExitCode has no proto value. NEVER is the safe stand-in for a backend that ignores our config key: the job fails
# and Flyte's retries apply, whereas ON_FAILURE would restart user errors forever.
_RESTART_POLICY = {
    RestartPolicy.NEVER: "RESTART_POLICY_NEVER",
    RestartPolicy.ON_FAILURE: "RESTART_POLICY_ON_FAILURE",
    RestartPolicy.ALWAYS: "RESTART_POLICY_ALWAYS",
    RestartPolicy.EXIT_CODE: "RESTART_POLICY_NEVER",
}
_CLEAN_POD_POLICY = {
    CleanPodPolicy.NONE: "CLEANPOD_POLICY_NONE",
    CleanPodPolicy.RUNNING: "CLEANPOD_POLICY_RUNNING",
    CleanPodPolicy.ALL: "CLEANPOD_POLICY_ALL",
}
_RUN_POLICY_INTS = (
    ("backoff_limit", "backoffLimit"),
    ("active_deadline_seconds", "activeDeadlineSeconds"),
    ("ttl_seconds_after_finished", "ttlSecondsAfterFinished"),
)


def _replica(replicas: int, role: Any, resources_json: ResourcesJson) -> dict[str, Any]:
    """One replica group in the message's top-level (deprecated but universally read) fields."""
    spec: dict[str, Any] = {"replicas": replicas, "restartPolicy": _RESTART_POLICY[role.restart_policy]}
    if role.image:
        spec["image"] = role.image
    resources = resources_json(role.requests, role.limits)
    if resources:
        spec["resources"] = resources
    return spec


def _run_policy(policy: RunPolicy) -> dict[str, Any]:
    out: dict[str, Any] = {"cleanPodPolicy": _CLEAN_POD_POLICY[policy.clean_pod_policy]}
    for attr, json_name in _RUN_POLICY_INTS:
        value = getattr(policy, attr)
        if value is not None:
            out[json_name] = value
    return out


def training_task(config: Union[PyTorch, Elastic], resources_json: ResourcesJson) -> dict[str, Any]:
    """The ``DistributedPyTorchTrainingTask`` of a config, as the message's JSON (explicit zeros included).

    A Master/Worker job has ``masterReplicas``, ``workerReplicas`` (absent when there are no workers) and
    ``runPolicy``; an elastic job ``workerReplicas`` (max nodes), ``elasticConfig`` and ``runPolicy``.

    Args:
        config: a `PyTorch` or `Elastic` of any front-end.
        resources_json: the front-end's conversion of a role's requests and limits.

    Returns:
        The JSON dict.
    """
    content: dict[str, Any] = {"runPolicy": _run_policy(config.run_policy)}
    if isinstance(config, Elastic):
        elastic: dict[str, Any] = {
            "rdzvBackend": DEFAULT_RDZV_BACKEND,
            "minReplicas": config.min_nodes,
            "maxReplicas": config.max_nodes,
            "maxRestarts": config.max_restarts,
        }
        if isinstance(config.nproc_per_node, int):
            elastic["nprocPerNode"] = config.nproc_per_node
        content["workerReplicas"] = {"replicas": config.max_nodes}
        content["elasticConfig"] = elastic
        return content
    content["masterReplicas"] = _replica(1, config.master, resources_json)
    if config.worker.replicas > 0:
        content["workerReplicas"] = _replica(config.worker.replicas, config.worker, resources_json)
    return content


def training_task_custom(
    config: Union[PyTorch, Elastic], message_class: type, resources_json: ResourcesJson
) -> dict[str, Any]:
    """``TaskTemplate.custom``: `training_task` parsed into the front-end's message class and written back.

    The message's JSON drops fields at their zero value; a run policy's explicit 0 (``backoff_limit=0``: never
    restart a pod) is not "unset" for the operator, so such a zero is written back.

    Args:
        config: a `PyTorch` or `Elastic` of any front-end.
        message_class: the generated ``DistributedPyTorchTrainingTask`` (flyteidl's or flyteidl2's).
        resources_json: the front-end's conversion of a role's requests and limits.

    Returns:
        The protobuf JSON dict.
    """
    from google.protobuf import json_format

    content = training_task(config, resources_json)
    custom: dict[str, Any] = json_format.MessageToDict(json_format.ParseDict(content, message_class()))
    zeros = {json_name: 0 for attr, json_name in _RUN_POLICY_INTS if getattr(config.run_policy, attr) == 0}
    if zeros:
        custom.setdefault("runPolicy", {}).update(zeros)
    return custom


def _common_config(config: Union[PyTorch, Elastic]) -> dict[str, str]:
    policy = config.run_policy
    entries = {keys.CLEAN_POD_POLICY: policy.clean_pod_policy.value}
    optional = {
        keys.QUEUE: policy.queue,
        keys.PRIORITY_CLASS: policy.priority_class,
        keys.GANG_SCHEDULING: "true" if policy.gang_scheduling else None,
        keys.MIN_AVAILABLE: None if policy.min_available is None else str(policy.min_available),
        keys.SUSPEND: "true" if policy.suspend else None,
        keys.SHM_SIZE: config.shm_size,
        # a front-end's accelerator object (flytekit's `A100`) travels in the SDK's own field, not as a key
        keys.ACCELERATOR: config.accelerator if isinstance(config.accelerator, str) else None,
        keys.GPU_RESOURCE: config.gpu_resource,
    }
    entries.update({k: v for k, v in optional.items() if v is not None})
    return entries


def pytorch_config(config: PyTorch) -> dict[str, str]:
    """The template's ``pytorch.*`` config entries for a non-elastic job.

    Args:
        config: the task's configuration.

    Returns:
        String map; see ``docs/template-format.md``. ``pytorch.nproc_per_node`` and ``pytorch.clean_pod_policy``
        are always written (the operator's defaults for them, ``auto`` and ``None``, differ from ours); boolean
        keys only when true; the rest only when set.
    """
    entries = _common_config(config)
    entries[keys.NPROC_PER_NODE] = str(config.nproc_per_node)
    if config.master.restart_policy is RestartPolicy.EXIT_CODE:
        entries[keys.MASTER_RESTART_POLICY] = RestartPolicy.EXIT_CODE.value
    if config.worker.replicas > 0 and config.worker.restart_policy is RestartPolicy.EXIT_CODE:
        entries[keys.WORKER_RESTART_POLICY] = RestartPolicy.EXIT_CODE.value
    if config.master.image:
        entries[keys.MASTER_IMAGE] = config.master.image
    if config.master.pod_template is not None:
        entries[keys.MASTER_POD_TEMPLATE] = role_pod_template(config.master.pod_template)
    if config.worker.replicas > 0 and config.worker.pod_template is not None:
        entries[keys.WORKER_POD_TEMPLATE] = role_pod_template(config.worker.pod_template)
    return dict(sorted(entries.items()))


def role_pod_template(pod_template: Any) -> str:
    """A role's pod template as the value of ``pytorch.<role>.pod_template``.

    The replica spec has no pod template field, so it travels in ``config`` as JSON text (keys sorted):
    ``{"metadata": {"labels", "annotations"}, "primaryContainerName", "podSpec"}``. The primary container's
    ``command`` and ``args`` are left out: every replica runs the task's entrypoint (`Master` warned).

    Args:
        pod_template: the role's pod template (flytekit's and Flyte 2's have the same attributes).

    Returns:
        The JSON text.
    """
    spec: dict[str, Any] = {}
    if pod_template.pod_spec is not None:
        from kubernetes.client import ApiClient  # the user built a V1PodSpec, so the client is installed

        spec = ApiClient().sanitize_for_serialization(pod_template.pod_spec)
    for container in spec.get("containers") or []:
        if container.get("name") == pod_template.primary_container_name:
            container.pop("command", None)
            container.pop("args", None)
    metadata = {
        k: dict(v) for k, v in (("labels", pod_template.labels), ("annotations", pod_template.annotations)) if v
    }
    doc = {"metadata": metadata, "primaryContainerName": pod_template.primary_container_name, "podSpec": spec}
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


def elastic_config(config: Elastic) -> dict[str, str]:
    """The template's ``pytorch.*`` config entries for an elastic job.

    Args:
        config: the task's configuration.

    Returns:
        String map; ``pytorch.nproc_per_node`` only when it is a word (an int travels in ``elasticConfig``).
    """
    entries = _common_config(config)
    if isinstance(config.nproc_per_node, str):
        entries[keys.NPROC_PER_NODE] = config.nproc_per_node
    return dict(sorted(entries.items()))
