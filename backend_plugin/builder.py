"""Pure translation: (Flyte TaskTemplate, execution metadata, BackendConfig) -> PyTorchJob (kubeflow.org/v1) dict.

No I/O, no Kubernetes client, no clock: the same inputs always give the same dict, with a stable key order, so
`pytorchjob render` output, golden files and the object the connector sends are byte-for-byte the same thing.

Reads three template dialects (see docs/template-format.md): ours (version 1 plus `pytorch.*` config keys), the
legacy version 0 (`custom = {"workers": N}`), and flytekit's official kfpytorch plugin (container or pod template).
"""

from __future__ import annotations

import base64
import copy
import decimal
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

from flyteidl.core import security_pb2, tasks_pb2
from flyteidl.plugins.kubeflow import common_pb2, pytorch_pb2
from google.protobuf import json_format
from google.protobuf.message import DecodeError

from backend_plugin.config import (
    DNS1123_SUBDOMAIN,
    LABEL_VALUE,
    BackendConfig,
    ConfigError,
)
from backend_plugin.template_shape import check_pod_spec, check_task_template
from flytekitplugins_pytorch.quantity import is_quantity, parse_quantity

__all__ = [
    "ExecutionMetadata",
    "TemplateError",
    "build_pytorchjob",
    "job_name",
    "template_to_dict",
    "PRIMARY_CONTAINER",
    "MAX_JOB_NAME_LENGTH",
    "SECRETS_LABEL",
    "SECRET_ANNOTATION_PREFIX",
    "encode_secret",
]

PRIMARY_CONTAINER = "pytorch"
"""The training operator finds the process to watch (and sets MASTER_ADDR etc. on) by this container name."""

MAX_JOB_NAME_LENGTH = 50
"""63 (DNS label) - len("-worker-") - 5 index digits: pod and service names `<job>-worker-<i>` stay valid."""

SHM_VOLUME = "dshm"
SHM_PATH = "/dev/shm"

CONFIG_KEYS = (
    "pytorch.nproc_per_node",
    "pytorch.master.restart_policy",
    "pytorch.worker.restart_policy",
    "pytorch.clean_pod_policy",
    "pytorch.queue",
    "pytorch.priority_class",
    "pytorch.gang_scheduling",
    "pytorch.min_available",
    "pytorch.suspend",
    "pytorch.shm_size",
    "pytorch.accelerator",
    "pytorch.gpu_resource",
    "pytorch.master.image",
)
"""Every `pytorch.*` config key the backend understands; anything else with that prefix is an error."""

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"

FAIL_ON_ERROR_ENV = {"name": "FLYTE_FAIL_ON_ERROR", "value": "true"}
"""Makes pyflyte-execute exit 1 when the task raises. Without it a failing rank writes error.pb and exits 0: its pod
succeeds, the operator never fails the job, and the replicas' error.pb files overwrite each other."""

TERMINATION_MESSAGE_POLICY = "FallbackToLogsOnError"
"""A failed replica's log tail becomes its termination message, so `get` can report the rank's error (pyflyte-execute
never writes /dev/termination-log)."""

SECRETS_LABEL = "inject-flyte-secrets"
"""Pod label (value `"true"`) that flytepropeller's secrets webhook selects the pods it mutates by."""

SECRET_ANNOTATION_PREFIX = "flyte.secrets/s"
"""Pod annotation `flyte.secrets/s<i>` carries the i-th requested secret, encoded as the webhook decodes it."""

# flytepropeller's base32 alphabet (lower case, digits 1-6 instead of 2-7; no padding), so encoded secrets are
# valid annotation values the webhook can decode. Translated from the standard RFC 4648 alphabet.
_FLYTE_BASE32 = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", "abcdefghijklmnopqrstuvwxyz123456")
_ANNOTATIONS_LIMIT = 256 * 1024  # the API server's limit on the total size of one object's annotations
_DURATION = re.compile(r"^(\d+)(\.\d{1,9})?s\Z")  # protobuf JSON Duration, non-negative
RESTART_POLICIES = ("Never", "OnFailure", "Always", "ExitCode")
_PROTO_RESTART = {
    common_pb2.RESTART_POLICY_NEVER: "Never",
    common_pb2.RESTART_POLICY_ON_FAILURE: "OnFailure",
    common_pb2.RESTART_POLICY_ALWAYS: "Always",
}
_PROTO_CLEAN = {
    common_pb2.CLEANPOD_POLICY_NONE: "None",
    common_pb2.CLEANPOD_POLICY_RUNNING: "Running",
    common_pb2.CLEANPOD_POLICY_ALL: "All",
}
_CLEAN_NAMES = ["CLEANPOD_POLICY_NONE", "CLEANPOD_POLICY_RUNNING", "CLEANPOD_POLICY_ALL"]
_RESOURCE_NAMES = {
    "CPU": "cpu",
    "MEMORY": "memory",
    "EPHEMERAL_STORAGE": "ephemeral-storage",
    "STORAGE": "ephemeral-storage",
}
_FLYTEKIT_GPU = "nvidia.com/gpu"  # what flytekit writes into pod templates for Resources(gpu=...)
_DNS1035_INVALID = re.compile(r"[^a-z0-9-]+")
# `\Z`, not `$`: `$` also matches before a trailing newline, and "a100\n" is not a label value.
_RESOURCE_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?\Z")
# Go-template placeholders as flytepropeller accepts them: `{{ .Input }}`, `{{.input}}`, case-insensitive.
_PLACEHOLDER = re.compile(r"\{\{\s*[.$](\w+)\s*\}\}")


class TemplateError(ValueError):
    """A task template the backend cannot turn into a PyTorchJob; the message names the field, value and rule."""


@dataclass
class ExecutionMetadata:
    """Everything about one execution of a task that is not in its template.

    The connector fills it from flytekit's `TaskExecutionMetadata` and the create request; `pytorchjob render`
    fills it with sample values.

    Args:
        namespace: namespace of the PyTorchJob; empty means `BackendConfig.namespace`.
        job_name: `metadata.name`; use `job_name(...)` to derive it.
        labels: execution labels (Flyte's execution, project, domain ... labels), on the job and every pod.
        annotations: execution annotations, on the job and every pod.
        environment: extra environment variables for every replica (they win over the template's).
        image_override: image used where a replica does not name its own.
        input_path: value of `{{.input}}` (the inputs.pb path); `{{.inputPrefix}}` is its directory.
        output_prefix: value of `{{.outputPrefix}}`.
        raw_output_prefix: value of `{{.rawOutputDataPrefix}}`.
        checkpoint_prefix: value of `{{.checkpointOutputPrefix}}`.
        prev_checkpoint_prefix: value of `{{.prevCheckpointPrefix}}` (empty on the first attempt).
        owner_references: `metadata.ownerReferences` of the job (core/v1 OwnerReference dicts).
        service_account: Kubernetes service account of the execution; wins over the pod template's.
        project: execution project, exported as FLYTE_INTERNAL_EXECUTION_PROJECT when set.
        domain: execution domain, exported as FLYTE_INTERNAL_EXECUTION_DOMAIN when set.
        execution_name: execution name, exported as FLYTE_INTERNAL_EXECUTION_ID when set.
        node_id: node id within the workflow (used by `job_name`).
        retry_attempt: attempt number, exported as FLYTE_ATTEMPT_NUMBER.
        interruptible: whether this attempt may run on interruptible (spot) nodes; None means the template's
            `metadata.interruptible`. flytepropeller turns it off for the last attempts of an interruptible task
            (its interruptible failure threshold) and passes the result in the create request.
    """

    namespace: str = ""
    job_name: str = "pytorchjob"
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)
    image_override: Optional[str] = None
    input_path: str = ""
    output_prefix: str = ""
    raw_output_prefix: str = ""
    checkpoint_prefix: str = ""
    prev_checkpoint_prefix: str = ""
    owner_references: list[dict[str, Any]] = field(default_factory=list)
    service_account: Optional[str] = None
    project: str = ""
    domain: str = ""
    execution_name: str = ""
    node_id: str = ""
    retry_attempt: int = 0
    interruptible: Optional[bool] = None


def job_name(
    project: str, domain: str, execution_name: str, node_id: str, retry_attempt: int = 0, prefix: str = ""
) -> str:
    """A PyTorchJob name for one attempt of one node of one execution.

    Deterministic (a retried `create` of the same attempt hits AlreadyExists instead of starting a second job),
    a valid DNS-1035 label, at most `MAX_JOB_NAME_LENGTH` characters so that replica pods `<name>-worker-<i>`
    stay valid with up to 5-digit indices. It always ends with 8 hex characters hashing the full identity, so
    two projects sharing one namespace never collide even when their readable parts do (or get truncated).

    Args:
        project: Flyte project.
        domain: Flyte domain.
        execution_name: Flyte execution name.
        node_id: node id (may contain dots, underscores, upper case; they are normalized).
        retry_attempt: attempt number (each attempt is a new job).
        prefix: `BackendConfig.job_name_prefix`.

    Returns:
        e.g. `f3a8c-n0-0-1b2c3d4e`.
    """
    identity = "\x00".join([project, domain, execution_name, node_id, str(retry_attempt)])
    digest = hashlib.sha256(identity.encode()).hexdigest()[:8]
    readable = _DNS1035_INVALID.sub("-", f"{prefix}{execution_name}-{node_id}-{retry_attempt}".lower())
    readable = re.sub(r"-+", "-", readable).strip("-")
    room = MAX_JOB_NAME_LENGTH - len(digest) - 1
    readable = readable[:room].rstrip("-")
    if not readable or not readable[0].isalpha():
        readable = ("j" + readable)[:room].rstrip("-")
    return f"{readable}-{digest}"


def template_to_dict(template: Any) -> dict[str, Any]:
    """Normalize a task template to the protobuf-JSON dict of `flyteidl.core.TaskTemplate` (camelCase keys).

    Args:
        template: a flytekit `TaskTemplate` model, a `tasks_pb2.TaskTemplate`, its serialized bytes, or a dict
            (returned as a deep copy; snake_case dicts are normalized through the proto).

    Returns:
        The template as a JSON-able dict.

    Raises:
        TemplateError: bytes that do not parse or an unsupported type.
    """
    if isinstance(template, Mapping):
        if any(k in template for k in ("k8s_pod", "task_type_version", "extended_resources")):
            try:
                msg = json_format.ParseDict(dict(template), tasks_pb2.TaskTemplate(), ignore_unknown_fields=True)
            except json_format.ParseError as e:
                raise TemplateError(f"template: not a TaskTemplate dict: {e}") from e
            return _message_to_dict(msg)
        return copy.deepcopy(dict(template))
    if isinstance(template, (bytes, bytearray)):
        msg = tasks_pb2.TaskTemplate()
        try:
            msg.ParseFromString(bytes(template))
        except DecodeError as e:
            raise TemplateError(f"template: {len(template)} bytes are not a serialized TaskTemplate: {e}") from e
        return _message_to_dict(msg)
    if isinstance(template, tasks_pb2.TaskTemplate):
        return _message_to_dict(template)
    to_idl = getattr(template, "to_flyte_idl", None)
    if callable(to_idl):
        msg = to_idl()
        if isinstance(msg, tasks_pb2.TaskTemplate):
            return _message_to_dict(msg)
    raise TemplateError(
        f"template: {type(template).__name__} is not a TaskTemplate; pass a flytekit TaskTemplate, "
        "tasks_pb2.TaskTemplate, its serialized bytes, or a dict"
    )


def _message_to_dict(msg: Any) -> dict[str, Any]:
    """Protobuf JSON of `msg` with every object's keys sorted. protobuf 7 iterates `Struct` and map fields (the pod
    spec, labels, `custom`) in hash order, which changes from process to process; sorted keys make a job rendered from
    a proto the same text on every protobuf and in every run."""
    return _sorted_keys(json_format.MessageToDict(msg))


def _sorted_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _sorted_keys(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted_keys(v) for v in value]
    return value


# --------------------------------------------------------------------------------------------------------------
# Internal: template reading


@dataclass
class _Replica:
    role: str  # "Master" / "Worker"
    replicas: int
    image: str = ""
    resources: Optional[dict[str, Any]] = None  # flyteidl Resources JSON, None = inherit the container's
    restart_policy: str = "Never"


def _err(path: str, value: Any, rule: str) -> TemplateError:
    return TemplateError(f"{path}={value!r}: {rule}")


def _int(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise _err(path, value, "must be an integer")
    return int(value)


def _read_config(template: dict[str, Any]) -> dict[str, str]:
    config = template.get("config") or {}
    if not isinstance(config, Mapping):
        raise _err("config", config, "must be a map of string -> string")
    out = {}
    for key, value in config.items():
        if not str(key).startswith("pytorch."):
            continue
        if key not in CONFIG_KEYS:
            raise _err(f"config[{key!r}]", value, f"unknown key; allowed pytorch.* keys: {', '.join(CONFIG_KEYS)}")
        if not isinstance(value, str):
            raise _err(f"config[{key!r}]", value, "must be a string")
        out[key] = value
    return out


def _bool(config: dict[str, str], key: str) -> Optional[bool]:
    if key not in config:
        return None
    value = config[key].strip().lower()
    if value not in ("true", "false"):
        raise _err(f"config[{key!r}]", config[key], "must be 'true' or 'false'")
    return value == "true"


def _read_custom(template: dict[str, Any]) -> tuple[list[_Replica], Optional[dict[str, Any]], dict[str, Any]]:
    """Returns (replicas, elastic policy or None, runPolicy fields) from `custom`."""
    custom = template.get("custom")
    version = _int(template.get("taskTypeVersion", 0), "taskTypeVersion")
    if custom is None:
        raise _err("custom", None, "missing; a pytorch task needs DistributedPyTorchTrainingTask or {'workers': N}")
    if not isinstance(custom, Mapping):
        raise _err("custom", custom, "must be a dict")
    if "workers" in custom and version == 0:  # legacy v0: {"workers": N}, replicas take the container resources
        unknown = set(custom) - {"workers"}
        if unknown:
            raise _err("custom", dict(custom), f"unknown legacy keys {sorted(unknown)}; v0 only has 'workers'")
        workers = _int(custom["workers"], "custom.workers")
        if workers < 0:
            raise _err("custom.workers", custom["workers"], "must be >= 0")
        return [_Replica("Master", 1), _Replica("Worker", workers)], None, {}
    try:
        task = json_format.ParseDict(dict(custom), pytorch_pb2.DistributedPyTorchTrainingTask())
    except json_format.ParseError as e:
        raise TemplateError(
            f"custom: not a flyteidl.plugins.kubeflow.DistributedPyTorchTrainingTask: {e} "
            "(allowed keys: workerReplicas, masterReplicas, runPolicy, elasticConfig)"
        ) from e

    def replica(role: str, spec: pytorch_pb2.DistributedPyTorchTrainingReplicaSpec) -> _Replica:
        src = spec.common if spec.HasField("common") else spec
        resources = json_format.MessageToDict(src.resources) if src.HasField("resources") else None
        return _Replica(
            role, src.replicas, src.image, resources or None, _PROTO_RESTART.get(src.restart_policy, "Never")
        )

    worker = replica("Worker", task.worker_replicas)
    if worker.replicas < 0:
        raise _err("custom.workerReplicas.replicas", worker.replicas, "must be >= 0")
    run_policy: dict[str, Any] = {}
    if task.HasField("run_policy"):
        rp = task.run_policy
        if rp.clean_pod_policy != common_pb2.CLEANPOD_POLICY_NONE:
            if rp.clean_pod_policy not in _PROTO_CLEAN:  # proto enums are open: any int32 parses
                raise _err("custom.runPolicy.cleanPodPolicy", rp.clean_pod_policy, f"must be one of {_CLEAN_NAMES}")
            run_policy["cleanPodPolicy"] = _PROTO_CLEAN[rp.clean_pod_policy]
        for name, value in (
            ("backoffLimit", rp.backoff_limit),
            ("activeDeadlineSeconds", rp.active_deadline_seconds),
            ("ttlSecondsAfterFinished", rp.ttl_seconds_after_finished),
        ):
            if value < 0:
                raise _err(f"custom.runPolicy.{name}", value, "must be >= 0")
            if value:
                run_policy[name] = value
    if task.HasField("elastic_config"):
        ec = task.elastic_config
        lo, hi = ec.min_replicas, ec.max_replicas
        if lo < 1 or hi < lo:
            raise _err(
                "custom.elasticConfig", f"minReplicas={lo}, maxReplicas={hi}", "need 1 <= minReplicas <= maxReplicas"
            )
        if ec.nproc_per_node < 0 or ec.max_restarts < 0:
            raise _err("custom.elasticConfig", json_format.MessageToDict(ec), "nprocPerNode/maxRestarts must be >= 0")
        if worker.replicas == 0:
            worker.replicas = hi
        elastic = {
            "minReplicas": lo,
            "maxReplicas": hi,
            "rdzvBackend": ec.rdzv_backend,
            "maxRestarts": ec.max_restarts,
            "_nproc": ec.nproc_per_node,
        }
        return [worker], elastic, run_policy
    master = replica("Master", task.master_replicas)
    master.replicas = 1  # always exactly one master (the proto's default 0 means "unset")
    return [master, worker], None, run_policy


def _primary_pod(template: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], str]:
    """(pod metadata, pod spec with the primary container named `pytorch`, original primary name)."""
    config = template.get("config") or {}
    if "k8sPod" in template:
        pod = template["k8sPod"] or {}
        spec = copy.deepcopy(pod.get("podSpec") or {})
        spec = check_pod_spec(_ints(spec), "k8sPod.podSpec", TemplateError)
        containers = spec.get("containers") or []
        name = config.get("primary_container_name") or ""
        if not name:
            raise _err("config['primary_container_name']", None, "required with a k8sPod template")
        matches = [i for i, c in enumerate(containers) if isinstance(c, Mapping) and c.get("name") == name]
        if not matches:
            names = [c.get("name") for c in containers if isinstance(c, Mapping)]
            raise _err("k8sPod.podSpec.containers", names, f"no container named {name!r} (primary_container_name)")
        taken = [c.get("name") for i, c in enumerate(containers) if i != matches[0]]
        if PRIMARY_CONTAINER in taken:
            raise _err(
                "k8sPod.podSpec.containers", taken, f"a non-primary container may not be named {PRIMARY_CONTAINER!r}"
            )
        for i, other in enumerate(containers):
            if i != matches[0] and not other.get("image"):
                raise _err(f"k8sPod.podSpec.containers[{i}].image", other.get("image"), "a sidecar needs an image")
        primary = containers[matches[0]]
        primary["name"] = PRIMARY_CONTAINER
        meta = pod.get("metadata") or {}
        return (
            {"labels": dict(meta.get("labels") or {}), "annotations": dict(meta.get("annotations") or {})},
            spec,
            name,
        )
    container = template.get("container")
    if not container:
        raise _err("container", container, "a pytorch task needs a container or a k8sPod template")
    c: dict[str, Any] = {"name": PRIMARY_CONTAINER, "image": container.get("image", "")}
    if container.get("command"):
        c["command"] = list(container["command"])
    if container.get("args"):
        c["args"] = list(container["args"])
    env = []
    for i, e in enumerate(container.get("env") or []):
        if not e.get("key"):
            raise _err(f"container.env[{i}].key", e.get("key"), "an environment variable needs a non-empty name")
        env.append({"name": e["key"], "value": e.get("value") or ""})
    if env:
        c["env"] = env
    if container.get("resources"):
        c["resources"] = _k8s_resources(container["resources"], "container.resources", _FLYTEKIT_GPU)
    return {"labels": {}, "annotations": {}}, {"containers": [c]}, config.get("primary_container_name", "")


def _ints(value: Any) -> Any:
    """Struct JSON turns every number into a float; the API server rejects 1000.0 for an int field."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints(v) for v in value]
    return value


def _k8s_resources(resources: Mapping[str, Any], path: str, gpu_name: str) -> dict[str, dict[str, str]]:
    """flyteidl Resources JSON -> core/v1 ResourceRequirements; GPU written under `gpu_name`."""
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
                key = gpu_name
            elif name in _RESOURCE_NAMES:
                key = _RESOURCE_NAMES[name]
            else:
                raise _err(f"{where}.name", name, "must be one of CPU, MEMORY, GPU, EPHEMERAL_STORAGE")
            if not is_quantity(value) or parse_quantity(value) < 0:
                raise _err(f"{where}.value", value, "is not a non-negative Kubernetes quantity; use e.g. '500m', '4Gi'")
            section[key] = value
        out[kind] = section
    return out


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
                if key == _FLYTEKIT_GPU and gpu_name != _FLYTEKIT_GPU:
                    key = gpu_name
                if not _RESOURCE_NAME.match(str(key)):
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
            amount = lim if lim is not None else req
            requests[key] = limits[key] = amount  # extended resources cannot overcommit: Kubernetes needs both
            if parse_quantity(amount) > 0:
                gpus.append(key)
        elif key in requests and key in limits and parse_quantity(requests[key]) > parse_quantity(limits[key]):
            raise _err(f"{path}[{key!r}]", f"request {requests[key]} > limit {limits[key]}", "request must be <= limit")
    result = {}
    if requests:
        result["requests"] = requests
    if limits:
        result["limits"] = limits
    for key, value in resources.items():  # e.g. `claims`
        if key not in ("requests", "limits"):
            result[key] = value
    return result, gpus


def _fill(text: str, values: dict[str, str]) -> str:
    def sub(m: re.Match) -> str:
        key = m.group(1).lower()
        return values.get(key, m.group(0))

    return _PLACEHOLDER.sub(sub, text)


def _merge_env(*layers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    merged: dict[str, dict[str, Any]] = {}
    for layer in layers:
        for var in layer:
            merged[var["name"]] = var  # later layers win; first position is kept
    return list(merged.values())


def _accelerator(template: dict[str, Any], config: dict[str, str]) -> tuple[Optional[str], Optional[str]]:
    """(accelerator type, MIG partition) from `pytorch.accelerator` or flytekit's extendedResources."""
    gpu = (template.get("extendedResources") or {}).get("gpuAccelerator") or {}
    device = config.get("pytorch.accelerator") or gpu.get("device") or None
    partition = gpu.get("partitionSize") or None
    if device is not None and not LABEL_VALUE.match(device):
        where = (
            "config['pytorch.accelerator']"
            if "pytorch.accelerator" in config
            else "extendedResources.gpuAccelerator.device"
        )
        raise _err(where, device, "must be a label value (<=63 of [A-Za-z0-9-_.]), e.g. 'nvidia-tesla-a100'")
    if partition is not None and not re.match(r"^[A-Za-z0-9][-A-Za-z0-9_.]*\Z", partition):
        raise _err("extendedResources.gpuAccelerator.partitionSize", partition, "must look like '1g.5gb'")
    return device, partition


def _shm(template: dict[str, Any], config: dict[str, str], backend: BackendConfig) -> tuple[bool, Optional[str], str]:
    """(enabled, sizeLimit or None, mount path)."""
    shared = (template.get("extendedResources") or {}).get("sharedMemory")
    path = (shared or {}).get("mountPath") or SHM_PATH
    if "pytorch.shm_size" in config:
        size = config["pytorch.shm_size"].strip()
        if not is_quantity(size) or parse_quantity(size) < 0:
            raise _err(
                "config['pytorch.shm_size']", size, "must be a Kubernetes quantity like '16Gi', or '0' to disable"
            )
        if parse_quantity(size) == 0:
            return False, None, path
        return True, size, path
    if shared is not None:
        return True, shared.get("sizeLimit") or None, path
    return backend.shm_enabled, backend.shm_size, path


def _go_quoted(text: str) -> str:
    """A string as Go's protobuf text marshaller quotes it (byte-wise, octal escapes for non-printable bytes)."""
    out = ['"']
    escapes = {0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t", 0x22: '\\"', 0x5C: "\\\\"}
    for byte in text.encode("utf-8"):
        if byte in escapes:
            out.append(escapes[byte])
        elif 0x20 <= byte < 0x7F:
            out.append(chr(byte))
        else:
            out.append(f"\\{byte:03o}")
    out.append('"')
    return "".join(out)


def _secret_text(secret: security_pb2.Secret) -> str:
    """The text-format proto of one secret, exactly as flytepropeller writes it (`proto.MarshalTextString`).

    One `name: value` line per set field in field-number order, enums by name, strings quoted the Go way.
    """
    lines = []
    for fd, value in secret.ListFields():
        if fd.type == fd.TYPE_ENUM:
            rendered = fd.enum_type.values_by_number[value].name
        elif fd.type == fd.TYPE_STRING:
            rendered = _go_quoted(value)
        else:  # pragma: no cover - Secret has only string and enum fields today
            rendered = str(value).lower() if isinstance(value, bool) else str(value)
        lines.append(f"{fd.name}: {rendered}\n")
    return "".join(lines)


def encode_secret(secret: security_pb2.Secret) -> str:
    """Encode one secret request as the value of a `flyte.secrets/s<i>` pod annotation.

    flytepropeller's secrets webhook decodes these annotations to know which secrets to inject into a pod. The
    value is the secret's text-format proto, base32-encoded with flytepropeller's alphabet (`a-z`, `1-6`) and no
    padding: lower case, so it is also a valid label-like string.

    Args:
        secret: a `flyteidl.core.Secret`.

    Returns:
        The annotation value, e.g. `m4zg54lqhiqce...` for `group: "my_group"`.
    """
    encoded = base64.b32encode(_secret_text(secret).encode("utf-8")).decode("ascii")
    return encoded.rstrip("=").translate(_FLYTE_BASE32)


def _secret_annotations(template: dict[str, Any]) -> dict[str, str]:
    """`flyte.secrets/s<i>` annotations for the template's `securityContext.secrets` (empty when it has none)."""
    context = template.get("securityContext") or {}
    if not isinstance(context, Mapping):
        raise _err("securityContext", context, "must be a flyteidl.core.SecurityContext dict")
    secrets = context.get("secrets") or []
    if not isinstance(secrets, list):
        raise _err("securityContext.secrets", secrets, "must be a list of flyteidl.core.Secret dicts")
    mount_types = dict(security_pb2.Secret.MountType.items())
    out: dict[str, str] = {}
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
        out[f"{SECRET_ANNOTATION_PREFIX}{i}"] = encode_secret(secret)
    size = sum(len(k) + len(v) for k, v in out.items())
    if size > _ANNOTATIONS_LIMIT:
        raise _err("securityContext.secrets", f"{len(out)} secrets, {size} bytes encoded", "must fit in 256 KiB")
    return out


def _timeout_seconds(template: dict[str, Any]) -> Optional[int]:
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


def _interruptible(template: dict[str, Any], meta: ExecutionMetadata) -> bool:
    """Whether this attempt runs on interruptible nodes: the execution's say, else the template's flag."""
    if meta.interruptible is not None:
        return bool(meta.interruptible)
    flag = (template.get("metadata") or {}).get("interruptible", False)
    if not isinstance(flag, bool):
        raise _err("metadata.interruptible", flag, "must be true or false")
    return flag


# --------------------------------------------------------------------------------------------------------------
# The builder


def build_pytorchjob(template: Any, meta: ExecutionMetadata, config: Optional[BackendConfig] = None) -> dict[str, Any]:
    """Build the PyTorchJob for one execution of a `pytorch` task.

    Args:
        template: the task template (anything `template_to_dict` accepts).
        meta: execution metadata (name, namespace, paths, labels, env, image override).
        config: backend config; defaults when None.

    Returns:
        A kubeflow.org/v1 PyTorchJob as a plain JSON-able dict with a stable key order.

    Raises:
        TemplateError: the template is invalid; the message names the field path, the value and what is allowed.
    """
    backend = config if config is not None else BackendConfig()
    t = template_to_dict(template)
    check_task_template(t, TemplateError)
    if t.get("type", "pytorch") != "pytorch":
        raise _err("type", t.get("type"), "must be 'pytorch'")
    cfg = _read_config(t)
    replicas, elastic, run_policy = _read_custom(t)
    pod_meta, base_spec, _ = _primary_pod(t)

    gpu_name = cfg.get("pytorch.gpu_resource") or backend.gpu_resource_name
    if not _RESOURCE_NAME.match(gpu_name) or "/" not in gpu_name:
        raise _err("config['pytorch.gpu_resource']", gpu_name, "must be an extended resource name like 'amd.com/gpu'")
    accelerator, partition = _accelerator(t, cfg)
    if partition and "pytorch.gpu_resource" not in cfg:
        gpu_name = backend.mig_resource_template.format(partition=partition)
    placement = None
    if accelerator:
        try:
            placement = backend.placement_for(accelerator)
        except ConfigError as e:
            raise _err("accelerator", accelerator, str(e)) from e
    shm_on, shm_size, shm_path = _shm(t, cfg, backend)
    secret_annotations = _secret_annotations(t)
    interruptible = _interruptible(t, meta)
    timeout = _timeout_seconds(t)

    for role in ("master", "worker"):
        key = f"pytorch.{role}.restart_policy"
        if key in cfg and cfg[key] not in RESTART_POLICIES:
            raise _err(f"config[{key!r}]", cfg[key], f"must be one of {list(RESTART_POLICIES)}")
    if "pytorch.master.image" in cfg and not cfg["pytorch.master.image"].strip():
        raise _err("config['pytorch.master.image']", cfg["pytorch.master.image"], "must be a non-empty image")

    # Values for Go-template placeholders; the keys are lower-cased names.
    input_prefix = meta.input_path.rsplit("/", 1)[0] if "/" in meta.input_path else meta.input_path
    values = {
        "input": meta.input_path,
        "inputprefix": input_prefix,
        "outputprefix": meta.output_prefix,
        "rawoutputdataprefix": meta.raw_output_prefix,
        "checkpointoutputprefix": meta.checkpoint_prefix,
        "prevcheckpointprefix": meta.prev_checkpoint_prefix,
    }
    identity_env = _identity_env(t, meta)
    exec_env = [{"name": str(k), "value": str(v)} for k, v in meta.environment.items()]

    labels = {**backend.default_labels, **meta.labels}
    annotations = {**backend.default_annotations, **meta.annotations}
    if "pytorch.queue" in cfg:
        queue = cfg["pytorch.queue"]
        if not queue or not LABEL_VALUE.match(queue):
            raise _err("config['pytorch.queue']", queue, "must be a non-empty label value (<=63 of [A-Za-z0-9-_.])")
        labels[QUEUE_LABEL] = queue

    specs: dict[str, Any] = {}
    total = 0
    for rep in replicas:
        if rep.role == "Worker" and rep.replicas == 0:
            continue
        total += rep.replicas
        spec = copy.deepcopy(base_spec)
        container = next(c for c in spec["containers"] if c.get("name") == PRIMARY_CONTAINER)
        path = f"custom.{rep.role.lower()}Replicas"

        image = rep.image
        if rep.role == "Master" and cfg.get("pytorch.master.image"):
            image = cfg["pytorch.master.image"]
        image = image or meta.image_override or container.get("image") or ""
        if not image:
            raise _err(
                f"{path}.image", image, "no image: set the replica, the execution override or the container image"
            )

        for c in spec["containers"]:
            for key in ("command", "args"):
                if c.get(key):
                    c[key] = [_fill(str(a), values) for a in c[key]]
        # fresh dicts per replica: shared objects would turn into YAML anchors in `render` output
        env = [dict(e) for e in _merge_env([FAIL_ON_ERROR_ENV], identity_env, container.get("env") or [], exec_env)]

        if rep.resources is not None:
            res = _k8s_resources(rep.resources, f"{path}.resources", gpu_name)
        else:
            res = container.get("resources") or {}
        res, gpus = _fix_resources(res, f"{path}.resources", backend, gpu_name)

        mounts = list(container.get("volumeMounts") or [])
        volumes = list(spec.get("volumes") or [])
        if shm_on and not any(m.get("mountPath") == shm_path for m in mounts):
            if any(v.get("name") == SHM_VOLUME for v in volumes):
                raise _err("k8sPod.podSpec.volumes", SHM_VOLUME, f"volume name is reserved for {shm_path}; rename it")
            empty_dir: dict[str, Any] = {"medium": "Memory"}
            if shm_size:
                empty_dir["sizeLimit"] = shm_size
            volumes.append({"name": SHM_VOLUME, "emptyDir": empty_dir})
            mounts.append({"name": SHM_VOLUME, "mountPath": shm_path})

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
        spec["containers"] = [ordered if c is container else c for c in spec["containers"]]
        if volumes:
            spec["volumes"] = volumes
        if meta.service_account:
            spec["serviceAccountName"] = meta.service_account
        elif backend.service_account and not spec.get("serviceAccountName"):
            spec["serviceAccountName"] = backend.service_account

        if gpus:  # placement only for replicas that actually request GPUs
            tolerations = list(spec.get("tolerations") or [])
            extra = backend.tolerations_for(gpus)
            if placement is not None:
                extra += placement.resolved_tolerations()
                _add_affinity(spec, placement.node_selector)
            for tol in extra:
                if tol not in tolerations:
                    tolerations.append(tol)
            if tolerations:
                spec["tolerations"] = tolerations

        if interruptible:  # like Flyte's k8s plugin: every replica, config selector wins over the pod template's
            tolerations = list(spec.get("tolerations") or [])
            for tol in backend.interruptible_tolerations:
                if tol not in tolerations:
                    tolerations.append(dict(tol))
            if tolerations:
                spec["tolerations"] = tolerations
            if backend.interruptible_node_selector:
                spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **backend.interruptible_node_selector}

        pod_labels = {**pod_meta["labels"], **labels}
        pod_annotations = {**pod_meta["annotations"], **annotations}
        if secret_annotations:  # flytepropeller's secrets webhook injects them into pods marked this way
            pod_labels[SECRETS_LABEL] = "true"
            pod_annotations.update(secret_annotations)
        restart = cfg.get(f"pytorch.{rep.role.lower()}.restart_policy") or rep.restart_policy
        specs[rep.role] = {
            "replicas": rep.replicas,
            "restartPolicy": restart,
            "template": {
                "metadata": {"labels": pod_labels, "annotations": pod_annotations},
                "spec": spec,
            },
        }

    # runPolicy: template proto < config key < backend defaults for what is unset.
    rp: dict[str, Any] = {}
    clean = cfg.get("pytorch.clean_pod_policy") or run_policy.get("cleanPodPolicy") or backend.clean_pod_policy
    if clean not in ("None", "Running", "All"):
        raise _err("config['pytorch.clean_pod_policy']", clean, "must be one of ['None', 'Running', 'All']")
    rp["cleanPodPolicy"] = clean
    # activeDeadlineSeconds: the task's run policy, else its Flyte timeout, else the backend default. Flyte
    # enforces the timeout itself by aborting the node (the connector then deletes the job), but only while
    # propeller and the connector are alive and the execution is known; the deadline makes the training operator
    # stop a runaway job (and free its GPUs) on its own. The operator counts it from the job's status.startTime,
    # never earlier than the moment Flyte started the attempt, so it cannot fire before Flyte's own timeout would.
    # Each retry is a new job, matching Flyte's per-attempt timeout.
    deadline = timeout if timeout is not None else backend.active_deadline_seconds
    for key, default in (
        ("backoffLimit", backend.backoff_limit),
        ("activeDeadlineSeconds", deadline),
        ("ttlSecondsAfterFinished", backend.ttl_seconds_after_finished),
    ):
        value = run_policy.get(key, default)
        if value is not None:
            rp[key] = value
    scheduling: dict[str, Any] = {}
    if "pytorch.queue" in cfg:
        scheduling["queue"] = cfg["pytorch.queue"]
    if "pytorch.priority_class" in cfg:
        pc = cfg["pytorch.priority_class"]
        if not DNS1123_SUBDOMAIN.match(pc):
            raise _err("config['pytorch.priority_class']", pc, "must be a PriorityClass name (DNS-1123 subdomain)")
        scheduling["priorityClass"] = pc
    gang = _bool(cfg, "pytorch.gang_scheduling")
    if "pytorch.min_available" in cfg:
        raw = cfg["pytorch.min_available"]
        if not raw.isdigit() or int(raw) < 1 or int(raw) > total:
            raise _err("config['pytorch.min_available']", raw, f"must be an integer in 1..{total} (the replica count)")
        scheduling["minAvailable"] = int(raw)
    elif gang if gang is not None else backend.gang_scheduling:
        scheduling["minAvailable"] = elastic["minReplicas"] if elastic else total
    if scheduling:
        rp["schedulingPolicy"] = scheduling
    suspend = _bool(cfg, "pytorch.suspend")
    suspend = backend.suspend if suspend is None else suspend
    if suspend:
        rp["suspend"] = True

    job_spec: dict[str, Any] = {"runPolicy": rp}
    nproc = cfg.get("pytorch.nproc_per_node")
    if nproc is not None and nproc not in ("auto", "cpu", "gpu") and not (nproc.isdigit() and int(nproc) > 0):
        raise _err("config['pytorch.nproc_per_node']", nproc, "must be a positive integer, 'auto', 'cpu' or 'gpu'")
    if elastic is not None:
        nproc_int = elastic.pop("_nproc")
        elastic["rdzvBackend"] = elastic["rdzvBackend"] or backend.rdzv_backend
        job_spec["elasticPolicy"] = elastic
        if nproc is None and nproc_int > 0:
            nproc = str(nproc_int)
    if nproc is not None:
        job_spec["nprocPerNode"] = nproc
    job_spec["pytorchReplicaSpecs"] = specs

    metadata: dict[str, Any] = {
        "name": meta.job_name,
        "namespace": meta.namespace or backend.namespace,
        "labels": labels,
        "annotations": annotations,
    }
    if meta.owner_references:
        metadata["ownerReferences"] = [dict(r) for r in meta.owner_references]
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": metadata, "spec": job_spec}


def _identity_env(template: dict[str, Any], meta: ExecutionMetadata) -> list[dict[str, str]]:
    """The FLYTE_INTERNAL_* variables flytekit's entrypoint reads to know which execution it runs in."""
    env = []
    for name, value in (
        ("FLYTE_INTERNAL_EXECUTION_PROJECT", meta.project),
        ("FLYTE_INTERNAL_EXECUTION_DOMAIN", meta.domain),
        ("FLYTE_INTERNAL_EXECUTION_ID", meta.execution_name),
    ):
        if value:
            env.append({"name": name, "value": value})
    task_id = template.get("id") or {}
    for name, key in (
        ("FLYTE_INTERNAL_TASK_PROJECT", "project"),
        ("FLYTE_INTERNAL_TASK_DOMAIN", "domain"),
        ("FLYTE_INTERNAL_TASK_NAME", "name"),
        ("FLYTE_INTERNAL_TASK_VERSION", "version"),
    ):
        if task_id.get(key):
            env.append({"name": name, "value": str(task_id[key])})
    if meta.execution_name:
        env.append({"name": "FLYTE_ATTEMPT_NUMBER", "value": str(meta.retry_attempt)})
    return env


def _add_affinity(spec: dict[str, Any], selector: dict[str, list[str]]) -> None:
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
