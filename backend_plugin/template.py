"""The one reader of a `pytorch` task template: `read_template(template) -> TaskSpec`.

Every read of the template (`custom`, `config`, the container or pod template, metadata, extended resources,
secrets) happens here, and every check of what the template says: a problem is a `TemplateError` naming the field,
the value and what is allowed. What comes out is a frozen, typed, target-neutral `TaskSpec` (`backend_plugin.spec`):
replicas per role, run policy, scheduling, elastic settings, the pod template, accelerator, shared memory, timeout
and secrets, with nothing decided yet that belongs to a backend config or to one execution. The writers of each
target (`backend_plugin.targets.<kind>.writer`) turn a `TaskSpec` into a job. Pod templates (a role's own, and the
core/v1 check of every pod spec) are read by `backend_plugin.pod_templates`.

Four template dialects are read (docs/template-format.md): ours (task type version 1 plus `pytorch.*` config keys),
the legacy version 0 (`custom = {"workers": N}`, optionally with `elasticConfig`), flytekit's kfpytorch plugin
(container or pod template), and Flyte 2's: its `TaskTemplate` keeps flyteidl's field numbers, so its bytes read as
flyteidl's, but it keeps a task's `pytorch.*` keys in the container's config (`Container.config`) and may be of type
`pytorch-job` (`CONNECTOR_TASK_TYPE`, which only routes it to the connector); both are read here. The pod comes from
one of two places, each its own reader: a container (`_pod_from_container`) or a pod template (`_pod_from_k8s_pod`).
Every image a template names for a role or a sidecar is checked here; the images an execution decides (its override,
else the container's) are checked when the job is planned (`pods.plan_pods`).

Reading is pure, so results are cached per template content (the connector and `pytorchjob render` read the same
templates over and over): a `TaskSpec` is shared between callers and deeply read-only; `frozen.thaw` gives a mutable
copy.
"""

from __future__ import annotations

import dataclasses
import decimal
import functools
import json
import logging
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Optional

from flyteidl.core import security_pb2, tasks_pb2
from flyteidl.plugins import pytorch_pb2 as legacy_pytorch_pb2
from flyteidl.plugins.kubeflow import common_pb2, pytorch_pb2
from google.protobuf import json_format
from google.protobuf.message import DecodeError

from backend_plugin.errors import TemplateError
from backend_plugin.frozen import freeze, thaw
from backend_plugin.pod_templates import check_pod_spec, merge_role_pod, read_role_pod, whole_numbers_as_ints
from backend_plugin.spec import (
    FLYTEKIT_GPU,
    SHM_PATH,
    ElasticSpec,
    PodTemplateSpec,
    ReplicaGroup,
    RunPolicySpec,
    SchedulingSpec,
    SharedMemorySpec,
    TaskId,
    TaskSpec,
)
from pytorch_contract import template_keys as keys
from pytorch_contract.k8s_names import (
    DNS1123_SUBDOMAIN,
    EXTENDED_RESOURCE_NAME,
    LABEL_VALUE,
    MAX_REPLICAS_PER_ROLE,
    image_reference_problem,
    queue_name_problem,
)
from pytorch_contract.pod_rules import env_name_problems
from pytorch_contract.quantity import is_quantity, parse_quantity

logger = logging.getLogger(__name__)

__all__ = ["read_template", "clear_cache", "template_to_dict", "check_task_template"]

_RESOURCE_NAMES = {
    "CPU": "cpu",
    "MEMORY": "memory",
    "EPHEMERAL_STORAGE": "ephemeral-storage",
    "STORAGE": "ephemeral-storage",
}
_PROTO_RESTART = {
    common_pb2.RESTART_POLICY_NEVER: keys.RestartPolicy.NEVER.value,
    common_pb2.RESTART_POLICY_ON_FAILURE: keys.RestartPolicy.ON_FAILURE.value,
    common_pb2.RESTART_POLICY_ALWAYS: keys.RestartPolicy.ALWAYS.value,
}
_PROTO_CLEAN = {
    common_pb2.CLEANPOD_POLICY_NONE: keys.CleanPodPolicy.NONE.value,
    common_pb2.CLEANPOD_POLICY_RUNNING: keys.CleanPodPolicy.RUNNING.value,
    common_pb2.CLEANPOD_POLICY_ALL: keys.CleanPodPolicy.ALL.value,
}
_DURATION = re.compile(r"^([0-9]+)(\.[0-9]{1,9})?s\Z")  # protobuf JSON Duration, non-negative
_PARTITION = re.compile(r"^[A-Za-z0-9][-A-Za-z0-9_.]*\Z")  # a MIG partition size such as "1g.5gb"


# --------------------------------------------------------------------------------------------------------------
# Entry points


def template_to_dict(template: Any) -> dict[str, Any]:
    """Normalize a task template to the protobuf-JSON dict of `flyteidl.core.TaskTemplate` (camelCase keys).

    Args:
        template: a flytekit `TaskTemplate` model, a `tasks_pb2.TaskTemplate`, its serialized bytes, or a dict
            (returned as a deep copy; snake_case dicts are normalized through the proto).

    Returns:
        The template as a JSON-able dict, every mapping's keys sorted whatever the source: the same task gives the
        same job byte for byte from a `.pb`, a JSON file in any key order, or a snake_case dict.

    Raises:
        TemplateError: bytes that do not parse or an unsupported type.
    """
    if isinstance(template, Mapping):
        template = _variable_maps(template)
        if any(k in template for k in ("k8s_pod", "task_type_version", "extended_resources")):
            try:
                msg = json_format.ParseDict(dict(template), tasks_pb2.TaskTemplate(), ignore_unknown_fields=True)
            except json_format.ParseError as e:
                raise TemplateError(f"template: not a TaskTemplate dict: {e}") from e
            return _sorted_keys(json_format.MessageToDict(msg))
        return _sorted_keys(thaw(template))
    return _sorted_keys(json_format.MessageToDict(_to_proto(template)))


def _variable_maps(template: Mapping[str, Any]) -> Mapping[str, Any]:
    """Flyte 2's dialect in JSON: its `VariableMap` holds the interface's variables as a list of `{key, value}`
    entries (the wire format of flyteidl's map, so its bytes read the same), which flyteidl's JSON writes as a map."""
    interface = template.get("interface")
    if not isinstance(interface, Mapping):
        return template
    fixed = dict(interface)
    for side in ("inputs", "outputs"):
        variables = (interface.get(side) or {}).get("variables") if isinstance(interface.get(side), Mapping) else None
        if isinstance(variables, list) and all(isinstance(e, Mapping) and "key" in e for e in variables):
            fixed[side] = {**interface[side], "variables": {e["key"]: e.get("value", {}) for e in variables}}
    return {**template, "interface": fixed}


def _sorted_keys(value: Any) -> Any:
    """JSON with every dict's keys sorted. Protobuf maps and Structs (`config`, `custom`, `k8sPod`) iterate in an
    order that changes from process to process, and the order of a pod spec's keys is the order of the job's; sorted
    keys make a job built from a protobuf template the same in every process."""
    if isinstance(value, dict):
        return {k: _sorted_keys(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted_keys(v) for v in value]
    return value


def read_template(template: Any) -> TaskSpec:
    """Read and check a `pytorch` task template.

    Args:
        template: anything `template_to_dict` accepts.

    Returns:
        The task's `TaskSpec` (shared with other readers of the same template content; read-only).

    Raises:
        TemplateError: the template is invalid; the message names the field path, the value and what is allowed.
    """
    if not isinstance(template, Mapping):
        template = template_to_dict(template)
    try:
        # The JSON text is the cache key: key order included, since it decides the order of the job's fields.
        key = json.dumps(template, separators=(",", ":"), allow_nan=False, check_circular=False)
    except (TypeError, ValueError, RecursionError):  # not plain JSON (e.g. a tuple key): read it without the cache
        return _read(template_to_dict(template))
    return _read_json(key)


def clear_cache() -> None:
    """Forget the specs `read_template` has cached (benchmarks measure reads without the cache with it)."""
    _read_json.cache_clear()


@functools.lru_cache(maxsize=256)
def _read_json(text: str) -> TaskSpec:
    """`_read` of a template given as JSON text: pure, so cached per content (errors are not cached)."""
    return _read(template_to_dict(json.loads(text)))


def _to_proto(template: Any) -> tasks_pb2.TaskTemplate:
    if isinstance(template, (bytes, bytearray)):
        msg = tasks_pb2.TaskTemplate()
        try:
            msg.ParseFromString(bytes(template))
        except DecodeError as e:
            raise TemplateError(f"template: {len(template)} bytes are not a serialized TaskTemplate: {e}") from e
        return msg
    if isinstance(template, tasks_pb2.TaskTemplate):
        return template
    to_idl = getattr(template, "to_flyte_idl", None)
    if callable(to_idl):
        msg = to_idl()
        if isinstance(msg, tasks_pb2.TaskTemplate):
            return msg
    raise TemplateError(
        f"template: {type(template).__name__} is not a TaskTemplate; pass a flytekit TaskTemplate, "
        "tasks_pb2.TaskTemplate, its serialized bytes, or a dict"
    )


def _read(t: dict[str, Any]) -> TaskSpec:
    """The reader proper, on a protobuf-JSON template dict."""
    check_task_template(t)
    if t.get("type", keys.TASK_TYPE) not in (keys.TASK_TYPE, keys.CONNECTOR_TASK_TYPE):
        raise _err("type", t.get("type"), f"must be {keys.TASK_TYPE!r}")
    cfg = _read_config(t)
    version = _int(t.get("taskTypeVersion", 0), "taskTypeVersion")
    replicas, elastic, run_policy = _read_custom(t, version, cfg)
    pod = _pod_from_k8s_pod(t) if "k8sPod" in t else _pod_from_container(t)
    replicas = _role_pods(replicas, pod, cfg)
    _check_images(replicas, pod, cfg)
    gpu_resource = _gpu_resource(cfg)
    accelerator, partition = _accelerator(t, cfg)
    shared_memory = _shared_memory(t, cfg)
    secrets = _secrets(t)
    interruptible = _interruptible(t)
    timeout = _timeout_seconds(t)
    total = sum(r.replicas for r in replicas)
    nproc = _nproc_per_node(cfg)
    task_id = t.get("id") or {}
    return TaskSpec(
        task_id=TaskId(*(str(task_id.get(k) or "") for k in ("project", "domain", "name", "version"))),
        task_type_version=version,
        replicas=replicas,
        elastic=elastic,
        nproc_per_node=nproc,
        run_policy=run_policy,
        scheduling=_scheduling(cfg, total),
        pod=pod,
        accelerator=accelerator,
        mig_partition=partition,
        gpu_resource=gpu_resource,
        shared_memory=shared_memory,
        timeout_seconds=timeout,
        interruptible=interruptible,
        secrets=secrets,
        config=MappingProxyType(dict(cfg)),
    )


def _gpu_resource(cfg: Mapping[str, str]) -> Optional[str]:
    gpu_resource = cfg.get(keys.GPU_RESOURCE)
    if gpu_resource is not None and not EXTENDED_RESOURCE_NAME.match(gpu_resource):
        raise _err(
            f"config[{keys.GPU_RESOURCE!r}]", gpu_resource, "must be an extended resource name like 'amd.com/gpu'"
        )
    return gpu_resource


def _nproc_per_node(cfg: Mapping[str, str]) -> Optional[str]:
    nproc = cfg.get(keys.NPROC_PER_NODE)
    message = None if nproc is None else keys.nproc_per_node_message(f"config[{keys.NPROC_PER_NODE!r}]", nproc)
    if message is not None:
        raise TemplateError(message)
    return nproc


# --------------------------------------------------------------------------------------------------------------
# Small helpers


def _err(path: str, value: Any, rule: str) -> TemplateError:
    return TemplateError(f"{path}={value!r}: {rule}")


def _int(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise _err(path, value, "must be an integer")
    return int(value)


def _bool(config: Mapping[str, str], key: str) -> Optional[bool]:
    if key not in config:
        return None
    value = config[key].strip().lower()
    if value not in ("true", "false"):
        raise _err(f"config[{key!r}]", config[key], "must be 'true' or 'false'")
    return value == "true"


# --------------------------------------------------------------------------------------------------------------
# Shape of the whole template


def check_task_template(template: Mapping[str, Any]) -> None:
    """Check that `template` parses as a `flyteidl.core.TaskTemplate` (unknown keys are ignored).

    A template dict normally comes from protobuf JSON and is well-typed, but `custom` and `k8sPod.podSpec` are
    `google.protobuf.Struct`s (any JSON), and `pytorchjob render` accepts hand-written JSON. Without this check a
    wrong type deep inside would surface as a KeyError/TypeError, or as a job the API server rejects.

    Args:
        template: the template as protobuf JSON (camelCase keys).

    Raises:
        TemplateError: a known field has the wrong type (the message is protobuf's, naming the field).
    """
    _messages_are_dicts(template, tasks_pb2.TaskTemplate.DESCRIPTOR, "")
    try:
        json_format.ParseDict(dict(template), tasks_pb2.TaskTemplate(), ignore_unknown_fields=True)
    except (json_format.ParseError, TypeError, ValueError) as e:
        raise TemplateError(f"template: not a flyteidl.core.TaskTemplate: {e}") from e


def _messages_are_dicts(value: Mapping[str, Any], descriptor: Any, path: str) -> None:
    """Message-typed fields must be dicts: with unknown fields ignored, ParseDict takes the string "4Gi" for an
    empty message (it iterates over its characters as if they were keys)."""
    for fd in descriptor.fields:
        if fd.json_name not in value or fd.message_type is None:
            continue
        item, where = value[fd.json_name], f"{path}{fd.json_name}"
        if fd.message_type.full_name.startswith("google.protobuf."):
            continue  # Struct, wrappers, Duration, Timestamp: their JSON is not a dict of fields
        is_map = fd.message_type.GetOptions().map_entry
        repeated = _is_repeated(fd) and not is_map
        items = item if repeated else [item]
        if repeated and not isinstance(item, list):
            raise TemplateError(f"{where}={item!r}: must be a list")
        for i, element in enumerate(items):
            if not isinstance(element, Mapping):
                raise TemplateError(f"{where}={element!r}: must be a dict ({fd.message_type.name})")
            if not is_map:
                _messages_are_dicts(element, fd.message_type, f"{where}{'' if item is element else f'[{i}]'}.")


def _is_repeated(fd: Any) -> bool:
    """Whether a field is repeated, on every protobuf we support: `is_repeated` is the API from protobuf 5.29 on
    (7 removed `label`); older releases only have `label`."""
    is_repeated = getattr(fd, "is_repeated", None)
    if is_repeated is not None:
        return bool(is_repeated)
    return fd.label == fd.LABEL_REPEATED  # pragma: no cover - protobuf < 5.29


# --------------------------------------------------------------------------------------------------------------
# config and custom


def _read_config(template: Mapping[str, Any]) -> dict[str, str]:
    config = template.get("config") or {}
    if not isinstance(config, Mapping):
        raise _err("config", config, "must be a map of string -> string")
    out = {}
    for key, value in {**config, **_container_config(template)}.items():
        if not str(key).startswith(keys.CONFIG_PREFIX):
            continue
        if key not in keys.CONFIG_KEYS:
            allowed = ", ".join(keys.CONFIG_KEYS)
            raise _err(f"config[{key!r}]", value, f"unknown key; allowed {keys.CONFIG_PREFIX}* keys: {allowed}")
        if not isinstance(value, str):
            raise _err(f"config[{key!r}]", value, "must be a string")
        out[key] = value
    for role in ("master", "worker"):
        key = keys.restart_policy_key(role)
        if key in out and out[key] not in keys.RESTART_POLICIES:
            raise _err(f"config[{key!r}]", out[key], f"must be one of {list(keys.RESTART_POLICIES)}")
    if keys.MASTER_IMAGE in out and not out[keys.MASTER_IMAGE].strip():
        raise _err(f"config[{keys.MASTER_IMAGE!r}]", out[keys.MASTER_IMAGE], "must be a non-empty image")
    if keys.CLEAN_POD_POLICY in out and out[keys.CLEAN_POD_POLICY] not in keys.CLEAN_POD_POLICIES:
        policies = list(keys.CLEAN_POD_POLICIES)
        raise _err(f"config[{keys.CLEAN_POD_POLICY!r}]", out[keys.CLEAN_POD_POLICY], f"must be one of {policies}")
    return out


def _container_config(template: Mapping[str, Any]) -> dict[str, Any]:
    """Flyte 2's dialect: the `pytorch.*` keys it keeps in the container's config (they win over the template's)."""
    entries = (template.get("container") or {}).get("config") or []
    return {
        e["key"]: e.get("value", "")
        for e in entries
        if isinstance(e, Mapping) and str(e.get("key", "")).startswith(keys.CONFIG_PREFIX)
    }


def _read_custom(
    template: Mapping[str, Any], version: int, cfg: Mapping[str, str]
) -> tuple[tuple[ReplicaGroup, ...], Optional[ElasticSpec], RunPolicySpec]:
    """(replica groups that run, elastic settings or None, run policy) from `custom` and the config keys."""
    custom = template.get("custom")
    if custom is None:
        raise _err("custom", None, "missing; a pytorch task needs DistributedPyTorchTrainingTask or {'workers': N}")
    if not isinstance(custom, Mapping):
        raise _err("custom", custom, "must be a dict")
    clean = cfg.get(keys.CLEAN_POD_POLICY)
    if version == 0 and any(k in custom for k in _LEGACY_KEYS):
        return _read_legacy(custom, cfg, clean)
    try:
        task = json_format.ParseDict(dict(custom), pytorch_pb2.DistributedPyTorchTrainingTask())
    except json_format.ParseError as e:
        raise TemplateError(
            f"custom: not a flyteidl.plugins.kubeflow.DistributedPyTorchTrainingTask: {e} "
            "(allowed keys: workerReplicas, masterReplicas, runPolicy, elasticConfig)"
        ) from e
    run_policy = _run_policy(task, custom, clean)
    worker_src = _replica_source(task.worker_replicas)
    if worker_src.replicas < 0:
        raise _err("custom.workerReplicas.replicas", worker_src.replicas, "must be >= 0")
    if task.HasField("elastic_config"):
        elastic = _elastic(task.elastic_config)
        worker = _proto_group("Worker", task.worker_replicas, cfg, replicas=worker_src.replicas or elastic.max_replicas)
        return (worker,), elastic, run_policy
    # always exactly one master (the proto's default 0 means "unset")
    groups = [_proto_group("Master", task.master_replicas, cfg, replicas=1)]
    if worker_src.replicas:
        groups.append(_proto_group("Worker", task.worker_replicas, cfg, replicas=worker_src.replicas))
    return tuple(groups), None, run_policy


_LEGACY_KEYS = ("workers", "elasticConfig", "elastic_config")
"""Fields of version 0's `flyteidl.plugins.DistributedPyTorchTrainingTask`: a v0 `custom` with any of them is read
with that proto (Flyte's Go plugin reads v0 the same way)."""


def _read_legacy(
    custom: Mapping[str, Any], cfg: Mapping[str, str], clean: Optional[str]
) -> tuple[tuple[ReplicaGroup, ...], Optional[ElasticSpec], RunPolicySpec]:
    """Version 0: `{"workers": N[, "elasticConfig": {...}]}`; every replica takes the container's resources.

    Without `elasticConfig`: one master and N workers. With it: the same `elasticPolicy` as version 1 and N workers
    (the maximum when N is 0), no master, as Flyte's Go plugin builds it.
    """
    unknown = set(custom) - set(_LEGACY_KEYS)
    if unknown:
        raise _err(
            "custom", dict(custom), f"unknown legacy keys {sorted(unknown)}; v0 has 'workers' and 'elasticConfig'"
        )
    try:
        task = json_format.ParseDict(dict(custom), legacy_pytorch_pb2.DistributedPyTorchTrainingTask())
    except json_format.ParseError as e:
        raise TemplateError(
            f"custom: not a version 0 flyteidl.plugins.DistributedPyTorchTrainingTask: {e} "
            "(allowed keys: workers, elasticConfig)"
        ) from e
    if task.workers < 0:
        raise _err("custom.workers", task.workers, "must be >= 0")
    never = keys.RestartPolicy.NEVER.value
    run_policy = RunPolicySpec(clean_pod_policy=clean)
    if task.HasField("elastic_config"):
        elastic = _elastic(task.elastic_config)
        worker = _group("Worker", task.workers or elastic.max_replicas, "", None, never, cfg, "custom.workers")
        return (worker,), elastic, run_policy
    groups = [_group("Master", 1, "", None, never, cfg)]
    if task.workers:
        groups.append(_group("Worker", task.workers, "", None, never, cfg, "custom.workers"))
    return tuple(groups), None, run_policy


def _elastic(ec: Any) -> ElasticSpec:
    """`elasticConfig` of either version (the two protos have the same fields), checked."""
    lo, hi = ec.min_replicas, ec.max_replicas
    if lo < 1 or hi < lo:
        raise _err(
            "custom.elasticConfig", f"minReplicas={lo}, maxReplicas={hi}", "need 1 <= minReplicas <= maxReplicas"
        )
    if ec.nproc_per_node < 0 or ec.max_restarts < 0:
        raise _err("custom.elasticConfig", json_format.MessageToDict(ec), "nprocPerNode/maxRestarts must be >= 0")
    return ElasticSpec(lo, hi, ec.rdzv_backend, ec.max_restarts, ec.nproc_per_node)


def _replica_source(spec: pytorch_pb2.DistributedPyTorchTrainingReplicaSpec) -> Any:
    """The newer `common` sub-message when present, else the replica spec's own (deprecated) fields."""
    return spec.common if spec.HasField("common") else spec


def _proto_group(
    role: str, spec: pytorch_pb2.DistributedPyTorchTrainingReplicaSpec, cfg: Mapping[str, str], replicas: int
) -> ReplicaGroup:
    src = _replica_source(spec)
    path = f"custom.{role.lower()}Replicas"
    resources = json_format.MessageToDict(src.resources) if src.HasField("resources") else None
    k8s = _k8s_resources(resources, f"{path}.resources") if resources else None
    restart = _PROTO_RESTART.get(src.restart_policy, keys.RestartPolicy.NEVER.value)
    return _group(role, replicas, src.image, k8s, restart, cfg)


def _group(
    role: str,
    replicas: int,
    image: str,
    resources: Optional[dict[str, dict[str, str]]],
    restart_policy: str,
    cfg: Mapping[str, str],
    count_path: str = "",
) -> ReplicaGroup:
    if role == "Master" and cfg.get(keys.MASTER_IMAGE):
        image = cfg[keys.MASTER_IMAGE]
    path = f"custom.{role.lower()}Replicas"
    if replicas > MAX_REPLICAS_PER_ROLE:
        raise _err(
            count_path or f"{path}.replicas",
            replicas,
            f"at most {MAX_REPLICAS_PER_ROLE}: the pod and Service names <job>-{role.lower()}-<index> must fit 63 "
            "characters, which leaves 5 digits for the index",
        )
    restart = cfg.get(keys.restart_policy_key(role)) or restart_policy
    frozen = freeze(resources) if resources is not None else None
    return ReplicaGroup(role, replicas, image, frozen, restart, path)


def _run_policy(
    task: pytorch_pb2.DistributedPyTorchTrainingTask, custom: Mapping[str, Any], clean: Optional[str]
) -> RunPolicySpec:
    """The run policy: proto values, with the integers taken as written (an explicit 0 is kept)."""
    if not task.HasField("run_policy"):
        return RunPolicySpec(clean_pod_policy=clean)
    rp = task.run_policy
    if rp.clean_pod_policy != common_pb2.CLEANPOD_POLICY_NONE:
        if rp.clean_pod_policy not in _PROTO_CLEAN:  # proto enums are open: any int32 parses
            names = [common_pb2.CleanPodPolicy.Name(v) for v in _PROTO_CLEAN]
            raise _err("custom.runPolicy.cleanPodPolicy", rp.clean_pod_policy, f"must be one of {names}")
        clean = clean or _PROTO_CLEAN[rp.clean_pod_policy]
    written = custom.get("runPolicy") or custom.get("run_policy") or {}
    values: dict[str, Optional[int]] = {}
    for name, field_name, value in (
        ("backoffLimit", "backoff_limit", rp.backoff_limit),
        ("activeDeadlineSeconds", "active_deadline_seconds", rp.active_deadline_seconds),
        ("ttlSecondsAfterFinished", "ttl_seconds_after_finished", rp.ttl_seconds_after_finished),
    ):
        if value < 0:
            raise _err(f"custom.runPolicy.{name}", value, "must be >= 0")
        values[name] = value if (value or name in written or field_name in written) else None
    if values["activeDeadlineSeconds"] == 0:
        # The operator counts the deadline from status.startTime: 0 would fail the job the moment it starts.
        raise _err("custom.runPolicy.activeDeadlineSeconds", 0, "must be >= 1 (or left out for no deadline)")
    return RunPolicySpec(
        clean, values["backoffLimit"], values["activeDeadlineSeconds"], values["ttlSecondsAfterFinished"]
    )


def _k8s_resources(resources: Mapping[str, Any], path: str) -> dict[str, dict[str, str]]:
    """flyteidl Resources JSON -> core/v1 ResourceRequirements; a GPU request is written under `FLYTEKIT_GPU`."""
    out: dict[str, dict[str, str]] = {}
    for kind in ("requests", "limits"):
        entries = resources.get(kind) or []
        if not entries:
            continue
        section: dict[str, str] = {}
        for i, entry in enumerate(entries):
            name, value = entry.get("name", "UNKNOWN"), str(entry.get("value", ""))
            where = f"{path}.{kind}[{i}]"
            if name == "GPU":
                key = FLYTEKIT_GPU
            elif name in _RESOURCE_NAMES:
                key = _RESOURCE_NAMES[name]
            else:
                raise _err(f"{where}.name", name, "must be one of CPU, MEMORY, GPU, EPHEMERAL_STORAGE")
            if not is_quantity(value) or parse_quantity(value) < 0:
                raise _err(f"{where}.value", value, "is not a non-negative Kubernetes quantity; use e.g. '500m', '4Gi'")
            section[key] = value
        out[kind] = section
    return out


def _scheduling(cfg: Mapping[str, str], total: int) -> SchedulingSpec:
    queue = cfg.get(keys.QUEUE)
    problem = queue_name_problem(queue) if queue is not None else None
    if problem is not None:
        # The rule, with its upstream source (Kueue's webhook), is the contract's: the SDK refuses the same names.
        raise _err(f"config[{keys.QUEUE!r}]", queue, f"is not a queue name Kueue admits: {problem}")
    priority_class = cfg.get(keys.PRIORITY_CLASS)
    if priority_class is not None and not DNS1123_SUBDOMAIN.match(priority_class):
        raise _err(
            f"config[{keys.PRIORITY_CLASS!r}]", priority_class, "must be a PriorityClass name (DNS-1123 subdomain)"
        )
    gang = _bool(cfg, keys.GANG_SCHEDULING)
    min_available = None
    if keys.MIN_AVAILABLE in cfg:
        raw = cfg[keys.MIN_AVAILABLE]
        if not (raw.isascii() and raw.isdigit()) or int(raw) < 1 or int(raw) > total:
            raise _err(f"config[{keys.MIN_AVAILABLE!r}]", raw, f"must be an integer in 1..{total} (the replica count)")
        min_available = int(raw)
    return SchedulingSpec(queue, priority_class, gang, min_available, _bool(cfg, keys.SUSPEND))


# --------------------------------------------------------------------------------------------------------------
# The pod


def _pod_from_k8s_pod(template: Mapping[str, Any]) -> PodTemplateSpec:
    """The pod of a pod template (`k8sPod`), its primary container (named by `primary_container_name`) renamed to
    `PRIMARY_CONTAINER`."""
    pod = template["k8sPod"] or {}
    spec = check_pod_spec(whole_numbers_as_ints(thaw(pod.get("podSpec") or {})), "k8sPod.podSpec")
    containers = spec.get("containers") or []
    primary = _primary_index(containers, (template.get("config") or {}).get(keys.PRIMARY_CONTAINER_NAME_KEY) or "")
    sidecar = next((i for i, c in enumerate(containers) if i != primary and not c.get("image")), None)
    if sidecar is not None:
        raise _err(
            f"k8sPod.podSpec.containers[{sidecar}].image", containers[sidecar].get("image"), "a sidecar needs an image"
        )
    name = containers[primary]["name"]
    if name != keys.PRIMARY_CONTAINER:
        logger.info(
            "primary container %r renamed to %r: the training operator finds the container to watch by that name",
            name,
            keys.PRIMARY_CONTAINER,
        )
    containers[primary]["name"] = keys.PRIMARY_CONTAINER
    meta = pod.get("metadata") or {}
    return PodTemplateSpec(
        labels=freeze(dict(meta.get("labels") or {})),
        annotations=freeze(dict(meta.get("annotations") or {})),
        spec=freeze(spec),
    )


def _primary_index(containers: list[Any], name: str) -> int:
    """Where the primary container is in a pod template's containers (named by `primary_container_name`)."""
    if not name:
        raise _err(f"config[{keys.PRIMARY_CONTAINER_NAME_KEY!r}]", None, "required with a k8sPod template")
    matches = [i for i, c in enumerate(containers) if isinstance(c, Mapping) and c.get("name") == name]
    if not matches:
        names = [c.get("name") for c in containers if isinstance(c, Mapping)]
        raise _err("k8sPod.podSpec.containers", names, f"no container named {name!r} (primary_container_name)")
    _no_other_primary(containers, matches[0])
    return matches[0]


def _no_other_primary(containers: list[Any], primary: int) -> None:
    """A sidecar may not take the name the primary container is renamed to."""
    taken = [c.get("name") for i, c in enumerate(containers) if i != primary]
    if keys.PRIMARY_CONTAINER in taken:
        raise _err(
            "k8sPod.podSpec.containers", taken, f"a non-primary container may not be named {keys.PRIMARY_CONTAINER!r}"
        )


def _pod_from_container(template: Mapping[str, Any]) -> PodTemplateSpec:
    """The pod of a container task: one primary container with the task's image, command, args, env, resources."""
    container = template.get("container")
    if not container:
        raise _err("container", container, "a pytorch task needs a container or a k8sPod template")
    c: dict[str, Any] = {"name": keys.PRIMARY_CONTAINER, "image": container.get("image", "")}
    for key in ("command", "args"):
        if container.get(key):
            c[key] = list(container[key])
    env = [_env_var(i, e) for i, e in enumerate(container.get("env") or [])]
    if env:
        c["env"] = env
    if container.get("resources"):
        c["resources"] = _k8s_resources(container["resources"], "container.resources")
    return PodTemplateSpec(labels=freeze({}), annotations=freeze({}), spec=freeze({"containers": [c]}))


def _env_var(i: int, entry: Mapping[str, Any]) -> dict[str, str]:
    """One `container.env` key-value pair as a core/v1 EnvVar, its name checked with the rule of every other path a
    name takes (`pod_rules.env_name_problems`: `IsRelaxedEnvVarName`, refusing only what no Kubernetes version
    accepts); a name clusters before 1.32 refuse is the admission model's note (`env_name_warnings`), as in a pod
    template's env."""
    where = f"container.env[{i}].key"
    for problem in env_name_problems([entry.get("key")], where):
        raise TemplateError(problem)
    return {"name": entry["key"], "value": entry.get("value") or ""}


def _role_pods(
    groups: tuple[ReplicaGroup, ...], pod: PodTemplateSpec, cfg: Mapping[str, str]
) -> tuple[ReplicaGroup, ...]:
    """Attach each role's own pod template (`pytorch.<role>.pod_template`), merged over the task's pod."""
    roles = {g.role.lower() for g in groups}
    for role in ("master", "worker"):
        key = keys.pod_template_key(role)
        if key in cfg and role not in roles:
            raise _err(f"config[{key!r}]", "...", f"this task has no {role.capitalize()} replicas; remove the key")
    out = []
    for group in groups:
        key = keys.pod_template_key(group.role)
        if key in cfg:
            group = dataclasses.replace(group, pod_template=merge_role_pod(pod, read_role_pod(cfg[key], key)))
        out.append(group)
    return tuple(out)


def _check_images(groups: tuple[ReplicaGroup, ...], pod: PodTemplateSpec, cfg: Mapping[str, str]) -> None:
    """Every image the template names for a role or a sidecar is one the kubelet accepts (the SDK's decoration-time
    rule, `pytorch_contract.k8s_names.image_reference_problem`): the pods would otherwise fail minutes later."""
    for group in groups:
        if group.image:
            master = group.role == "Master" and cfg.get(keys.MASTER_IMAGE)
            _check_image(group.image, f"config[{keys.MASTER_IMAGE!r}]" if master else f"{group.path}.image")
        if group.pod_template is not None:
            _check_sidecar_images(group.pod_template, f"config[{keys.pod_template_key(group.role)!r}].podSpec")
        else:
            _check_sidecar_images(pod, "k8sPod.podSpec")


def _check_sidecar_images(pod: PodTemplateSpec, path: str) -> None:
    """The images of a pod's containers but the primary one, and of its init containers."""
    containers = pod.spec.get("containers") or ()
    primary = next(i for i, c in enumerate(containers) if c.get("name") == keys.PRIMARY_CONTAINER)
    others = [("containers", i, c) for i, c in enumerate(containers) if i != primary]
    others += [("initContainers", i, c) for i, c in enumerate(pod.spec.get("initContainers") or ())]
    for key, i, container in others:
        if "image" in container:
            _check_image(container["image"], f"{path}.{key}[{i}].image")


def _check_image(image: Any, where: str) -> None:
    problem = image_reference_problem(image)
    if problem is not None:
        raise _err(
            where,
            image,
            f"not an image reference the kubelet accepts ({problem}); use e.g. 'ghcr.io/org/train:1.0' (repository "
            "path in lower case)",
        )


# --------------------------------------------------------------------------------------------------------------
# Accelerator, shared memory, secrets, metadata


def _accelerator(template: Mapping[str, Any], config: Mapping[str, str]) -> tuple[Optional[str], Optional[str]]:
    """(accelerator type, MIG partition) from `pytorch.accelerator` or flytekit's extendedResources."""
    gpu = (template.get("extendedResources") or {}).get("gpuAccelerator") or {}
    device = config.get(keys.ACCELERATOR) or gpu.get("device") or None
    partition = gpu.get("partitionSize") or None
    if device is not None and not LABEL_VALUE.match(device):
        where = (
            f"config[{keys.ACCELERATOR!r}]" if keys.ACCELERATOR in config else "extendedResources.gpuAccelerator.device"
        )
        raise _err(where, device, "must be a label value (<=63 of [A-Za-z0-9-_.]), e.g. 'nvidia-tesla-a100'")
    if partition is not None and not _PARTITION.match(partition):
        raise _err("extendedResources.gpuAccelerator.partitionSize", partition, "must look like '1g.5gb'")
    return device, partition


def _shared_memory(template: Mapping[str, Any], config: Mapping[str, str]) -> SharedMemorySpec:
    shared = (template.get("extendedResources") or {}).get("sharedMemory")
    path = (shared or {}).get("mountPath") or SHM_PATH
    if keys.SHM_SIZE in config:
        size = config[keys.SHM_SIZE].strip()
        if not is_quantity(size) or parse_quantity(size) < 0:
            raise _err(
                f"config[{keys.SHM_SIZE!r}]", size, "must be a Kubernetes quantity like '16Gi', or '0' to disable"
            )
        if parse_quantity(size) == 0:
            return SharedMemorySpec(False, None, path)
        return SharedMemorySpec(True, size, path)
    if shared is not None:
        return SharedMemorySpec(True, shared.get("sizeLimit") or None, path)
    return SharedMemorySpec(None, None, path)


def _secrets(template: Mapping[str, Any]) -> tuple[security_pb2.Secret, ...]:
    """`securityContext.secrets`, each parsed and checked as a `flyteidl.core.Secret`."""
    context = template.get("securityContext") or {}
    if not isinstance(context, Mapping):
        raise _err("securityContext", context, "must be a flyteidl.core.SecurityContext dict")
    secrets = context.get("secrets") or []
    if not isinstance(secrets, list):
        raise _err("securityContext.secrets", secrets, "must be a list of flyteidl.core.Secret dicts")
    mount_types = dict(security_pb2.Secret.MountType.items())
    out = []
    for i, raw in enumerate(secrets):
        path = f"securityContext.secrets[{i}]"
        if not isinstance(raw, Mapping):
            raise _err(path, raw, "must be a flyteidl.core.Secret dict like {'group': 'wandb', 'key': 'api_key'}")
        try:
            secret = json_format.ParseDict(dict(raw), security_pb2.Secret())
        except json_format.ParseError as e:
            raise TemplateError(
                f"{path}={dict(raw)!r}: not a flyteidl.core.Secret: {e} "
                "(allowed keys: group, groupVersion, key, mountRequirement, envVar)"
            ) from e
        if secret.mount_requirement not in mount_types.values():
            raise _err(f"{path}.mountRequirement", secret.mount_requirement, f"must be one of {list(mount_types)}")
        out.append(secret)
    return tuple(out)


def _interruptible(template: Mapping[str, Any]) -> bool:
    flag = (template.get("metadata") or {}).get("interruptible", False)
    if not isinstance(flag, bool):
        raise _err("metadata.interruptible", flag, "must be true or false")
    return flag


def _timeout_seconds(template: Mapping[str, Any]) -> Optional[int]:
    """The task's `metadata.timeout` in whole seconds (rounded up), or None when it has none."""
    raw = (template.get("metadata") or {}).get("timeout")
    if raw is None or raw == "":
        return None
    match = _DURATION.match(str(raw)) if isinstance(raw, str) else None
    if match is None:
        raise _err("metadata.timeout", raw, "must be a non-negative protobuf JSON duration like '3600s' or '1.5s'")
    seconds = int(match.group(1))
    if match.group(2) and decimal.Decimal(match.group(2)) > 0:
        seconds += 1  # a deadline earlier than the task's timeout would kill work Flyte still allows
    return seconds or None
