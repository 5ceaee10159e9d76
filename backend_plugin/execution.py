"""One execution of a task: what a job needs beyond its template, and how it is derived (pure).

`ExecutionMetadata` is the writers' second input. `execution_metadata(...)` derives it from Flyte's execution
identity and output prefix; the connector calls it with flytekit's `TaskExecutionMetadata` and `pytorchjob render`
with a sample identity, so both name jobs and lay out paths the same way.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

from backend_plugin.config import PROGRAM, BackendConfig
from pytorch_contract.k8s_names import JOB_NAME_MAX_LENGTH

__all__ = [
    "ExecutionMetadata",
    "ExecutionIdentity",
    "job_name",
    "identity_of",
    "execution_metadata",
    "job_namespace",
]

_DNS1035_INVALID = re.compile(r"[^a-z0-9-]+")


@dataclass
class ExecutionMetadata:
    """Everything about one execution of a task that is not in its template.

    The connector and `pytorchjob render` fill it with `execution_metadata`.

    Args:
        namespace: namespace of the job; empty means the backend config's (`job.namespace`); None writes no
            `metadata.namespace` (a job for `kubectl create -n NS`, as `pytorchjob render` prints it).
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

    namespace: Optional[str] = ""
    job_name: str = PROGRAM
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


@dataclass(frozen=True)
class ExecutionIdentity:
    """Which attempt of which node of which execution a job runs.

    Attributes:
        project: Flyte project.
        domain: Flyte domain.
        execution_name: Flyte execution name.
        node_id: node id in the workflow.
        retry_attempt: attempt number (each attempt is a new job).
    """

    project: str
    domain: str
    execution_name: str
    node_id: str
    retry_attempt: int = 0


def job_name(
    project: str, domain: str, execution_name: str, node_id: str, retry_attempt: int = 0, prefix: str = ""
) -> str:
    """A job name for one attempt of one node of one execution.

    Deterministic (a retried `create` of the same attempt hits AlreadyExists instead of starting a second job),
    a valid DNS-1035 label, at most `JOB_NAME_MAX_LENGTH` characters so that replica pods `<name>-worker-<i>`
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
    room = JOB_NAME_MAX_LENGTH - len(digest) - 1
    readable = readable[:room].rstrip("-")
    if not readable or not readable[0].isalpha():
        readable = ("j" + readable)[:room].rstrip("-")
    return f"{readable}-{digest}"


def identity_of(task_execution_metadata: Any, task_id: Mapping[str, Any], output_prefix: str) -> ExecutionIdentity:
    """The execution identity of a create request.

    Args:
        task_execution_metadata: flytekit's `TaskExecutionMetadata` (read by attribute; None for local runs).
        task_id: the template's `id` (protobuf JSON), used when there is no execution metadata.
        output_prefix: the output prefix; a local run's execution name hashes it, so reruns elsewhere differ.

    Returns:
        Propeller's identity of the attempt, or for a local run `(template project or "local", template domain or
        "local", "local-<hash of the prefix>", the task's short name, 0)`.
    """
    tid = getattr(task_execution_metadata, "task_execution_id", None)
    if tid is not None:
        wf = tid.node_execution_id.execution_id
        return ExecutionIdentity(
            wf.project, wf.domain, wf.name, tid.node_execution_id.node_id, int(tid.retry_attempt or 0)
        )
    prefix = output_prefix.rstrip("/")
    return ExecutionIdentity(
        project=str(task_id.get("project", "local")),
        domain=str(task_id.get("domain", "local")),
        execution_name="local-" + hashlib.sha256(prefix.encode()).hexdigest()[:10],
        node_id=str(task_id.get("name", "task")).rsplit(".", 1)[-1],
    )


def execution_metadata(
    identity: ExecutionIdentity,
    output_prefix: str,
    config: BackendConfig,
    task_execution_metadata: Any = None,
) -> ExecutionMetadata:
    """Derive a job's `ExecutionMetadata` (pure: no I/O, no clock).

    The job name is deterministic in the identity (`job_name`), so a create that is retried for the same attempt
    finds the job it already created. Paths follow flytekit's connector convention: `<output_prefix>/inputs.pb`,
    `/raw_output`, `/checkpoint_output`; the previous attempt's checkpoint is used when the output prefix ends with
    the attempt number (propeller's layout).

    Args:
        identity: which attempt of which node (`identity_of`, or a sample one for `pytorchjob render`).
        output_prefix: where the task writes outputs.pb.
        config: supplies the default namespace and the job name prefix.
        task_execution_metadata: flytekit's `TaskExecutionMetadata` of the create request (namespace, labels,
            annotations, environment, service account, interruptible), read by attribute; None for none.

    Returns:
        The execution metadata for a writer (`to_pytorchjob`).
    """
    prefix = output_prefix.rstrip("/")
    attempt = identity.retry_attempt
    prev = ""
    if attempt > 0 and prefix.endswith(f"/{attempt}"):
        prev = f"{prefix[: -len(str(attempt))]}{attempt - 1}/checkpoint_output"
    meta = task_execution_metadata

    def attr(name: str) -> Any:
        return getattr(meta, name, None) if meta is not None else None

    return ExecutionMetadata(
        namespace=attr("namespace") or config.job.namespace,
        job_name=job_name(
            identity.project,
            identity.domain,
            identity.execution_name,
            identity.node_id,
            attempt,
            prefix=config.job.job_name_prefix,
        ),
        labels=dict(attr("labels") or {}),
        annotations=dict(attr("annotations") or {}),
        # sorted by name: a map's order on the wire is not defined (Go's and Python's protobuf writers both vary it
        # between processes), and a CreateTask that propeller retries must build the same job to adopt it
        environment=dict(sorted((attr("environment_variables") or {}).items())),
        input_path=f"{prefix}/inputs.pb",
        output_prefix=prefix,
        raw_output_prefix=f"{prefix}/raw_output",
        checkpoint_prefix=f"{prefix}/checkpoint_output",
        prev_checkpoint_prefix=prev,
        service_account=attr("k8s_service_account") or None,
        project=identity.project,
        domain=identity.domain,
        execution_name=identity.execution_name,
        node_id=identity.node_id,
        retry_attempt=attempt,
        # propeller's word on interruptibility wins over the template's: it turns spot off for the last retries
        interruptible=attr("interruptible"),
    )


def job_namespace(metadata: ExecutionMetadata, config: BackendConfig) -> Optional[str]:
    """The job's `metadata.namespace`: the execution's, else the backend config's; None for none.

    Args:
        metadata: the execution.
        config: supplies the default namespace.

    Returns:
        The namespace, or None when the execution asks for a job without one.
    """
    if metadata.namespace is None:
        return None
    return metadata.namespace or config.job.namespace
