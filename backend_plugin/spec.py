"""`TaskSpec`: what a `pytorch` task template asks for, validated, typed, frozen and target-neutral.

`template.read_template` builds one; the writers of every target (`backend_plugin.targets.<kind>.writer`) read it.
Nothing here is decided by a backend config or one execution. A `TaskSpec` is shared between callers (the reader
caches it) and deeply read-only: mappings are `MappingProxyType`s, lists are tuples (`backend_plugin.frozen`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

from flyteidl.core import security_pb2

from backend_plugin.frozen import thaw
from pytorch_contract.k8s_names import NVIDIA_GPU

__all__ = [
    "TaskSpec",
    "TaskId",
    "ReplicaGroup",
    "ElasticSpec",
    "RunPolicySpec",
    "SchedulingSpec",
    "SharedMemorySpec",
    "PodTemplateSpec",
    "FLYTEKIT_GPU",
    "SHM_PATH",
]

FLYTEKIT_GPU = NVIDIA_GPU
"""The resource name flytekit writes for `Resources(gpu=...)` in pod templates; the reader writes a flyteidl `GPU`
request under it too, and the writers rename it to the cluster's GPU resource."""

SHM_PATH = "/dev/shm"
"""Where the memory-backed volume is mounted unless `extendedResources.sharedMemory.mountPath` says otherwise."""


@dataclass(frozen=True)
class TaskId:
    """`TaskTemplate.id`; empty strings where the template has none (e.g. `pytorchjob render` of a hand-made JSON).

    Attributes:
        project, domain, name, version: the task identifier's fields.
    """

    project: str = ""
    domain: str = ""
    name: str = ""
    version: str = ""


@dataclass(frozen=True)
class ReplicaGroup:
    """One role's replicas: a `PyTorchJob` replica spec, a group of TrainJob nodes.

    Attributes:
        role: `"Master"` or `"Worker"`.
        replicas: how many (>= 1: a role with none is left out of `TaskSpec.replicas`).
        image: the role's own image; "" means the execution's image override, else the container's image.
        resources: core/v1 `ResourceRequirements` (`requests`/`limits` name -> quantity string) of the role, with a
            GPU request under `FLYTEKIT_GPU`; None means the primary container's own resources.
        restart_policy: one of `RESTART_POLICIES` (the `pytorch.<role>.restart_policy` key wins over the proto).
        path: where the role is in the template (`custom.workerReplicas`), for messages.
        pod_template: the role's own pod template (`pytorch.<role>.pod_template`, from `Master(pod_template=...)`),
            already merged over the task's pod (`TaskSpec.pod`), the role's values winning; None when the role has
            none and starts from `TaskSpec.pod`. A target without roles (TrainJob) refuses a task where it is set.
    """

    role: str
    replicas: int
    image: str
    resources: Optional[Mapping[str, Mapping[str, str]]]
    restart_policy: str
    path: str
    pod_template: Optional[PodTemplateSpec] = None


@dataclass(frozen=True)
class ElasticSpec:
    """`custom.elasticConfig`: torchrun-style rendezvous of `min_replicas`..`max_replicas` nodes.

    Attributes:
        min_replicas: fewest nodes the job runs with (>= 1).
        max_replicas: most nodes (>= min_replicas); the Worker replica count.
        rdzv_backend: the template's rendezvous backend; "" means the backend config's default.
        max_restarts: restarts of the worker group before the job fails (>= 0).
        nproc_per_node: ranks per node, 0 when the template leaves it to `TaskSpec.nproc_per_node`.
    """

    min_replicas: int
    max_replicas: int
    rdzv_backend: str
    max_restarts: int
    nproc_per_node: int


@dataclass(frozen=True)
class RunPolicySpec:
    """Job-level policy as the template states it; None means "not in the template" (a backend default applies).

    The integers are the values of `custom.runPolicy` exactly as written, zeros included (the SDK writes an explicit
    0 because proto3 JSON would drop it), and every writer sets what the task states, 0 included. An explicit
    `activeDeadlineSeconds: 0` is rejected: the operator would fail the job the moment it starts.

    Attributes:
        clean_pod_policy: one of `CLEAN_POD_POLICIES` (`pytorch.clean_pod_policy` wins over the proto).
        backoff_limit: `runPolicy.backoffLimit`.
        active_deadline_seconds: `runPolicy.activeDeadlineSeconds`.
        ttl_seconds_after_finished: `runPolicy.ttlSecondsAfterFinished`.
    """

    clean_pod_policy: Optional[str] = None
    backoff_limit: Optional[int] = None
    active_deadline_seconds: Optional[int] = None
    ttl_seconds_after_finished: Optional[int] = None


@dataclass(frozen=True)
class SchedulingSpec:
    """Queueing and gang scheduling (`pytorch.queue`, `priority_class`, `gang_scheduling`, `min_available`,
    `suspend`); None means "not in the template".

    Attributes:
        queue: Kueue / Volcano queue name (a non-empty label value).
        priority_class: PriorityClass name (a DNS-1123 subdomain).
        gang_scheduling: whether all replicas must be scheduled together.
        min_available: replicas that must be schedulable together (1..total replicas).
        suspend: create the job suspended.
    """

    queue: Optional[str] = None
    priority_class: Optional[str] = None
    gang_scheduling: Optional[bool] = None
    min_available: Optional[int] = None
    suspend: Optional[bool] = None


@dataclass(frozen=True)
class SharedMemorySpec:
    """The memory-backed `/dev/shm` volume as the template asks for it.

    Attributes:
        enabled: True/False when the template says (`pytorch.shm_size`, `extendedResources.sharedMemory`); None
            leaves it to `BackendConfig.shm_enabled`.
        size_limit: the volume's `sizeLimit`, None for none (or for the backend default when `enabled` is None).
        mount_path: where to mount it.
    """

    enabled: Optional[bool] = None
    size_limit: Optional[str] = None
    mount_path: str = SHM_PATH


@dataclass(frozen=True)
class PodTemplateSpec:
    """The pod every replica starts from: the task's container, or its pod template with the primary container.

    Attributes:
        labels: pod template labels.
        annotations: pod template annotations.
        spec: a core/v1 PodSpec (read-only) whose primary container is named `PRIMARY_CONTAINER`; Flyte's
            placeholders (`{{.input}}`, ...) are still in its command and args.
        spec_json: `spec` as JSON text: `json.loads` of it is the fastest fresh, mutable copy for a writer.
        fill_args: (container index, `"command"` or `"args"`, item index) of every command/args item a writer must
            fill placeholders in (or turn into a string); the others are copied as they are.
    """

    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    spec: Mapping[str, Any]
    spec_json: str = field(default="", repr=False, compare=False)
    fill_args: tuple[tuple[int, str, int], ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.spec_json:
            object.__setattr__(self, "spec_json", json.dumps(thaw(self.spec), separators=(",", ":")))
        if not self.fill_args:
            where = [
                (i, key, j)
                for i, container in enumerate(self.spec.get("containers") or ())
                for key in ("command", "args")
                for j, item in enumerate(container.get(key) or ())
                if not isinstance(item, str) or "{{" in item
            ]
            object.__setattr__(self, "fill_args", tuple(where))

    def fresh_spec(self) -> dict[str, Any]:
        """A new mutable copy of `spec` (no object shared with the spec or with earlier copies).

        Returns:
            The pod spec as plain dicts and lists.
        """
        return json.loads(self.spec_json)


@dataclass(frozen=True)
class TaskSpec:
    """What a `pytorch` task template asks for, validated and target-neutral.

    Attributes:
        task_id: the template's identifier.
        task_type_version: 0 (legacy) or 1.
        replicas: the roles that run, master first; an elastic task has only `Worker`. A role with its own pod
            template carries it, merged over `pod`, in `ReplicaGroup.pod_template`.
        elastic: the elastic settings, None for a fixed-size job.
        nproc_per_node: `pytorch.nproc_per_node` (a positive integer or `auto`/`cpu`/`gpu`), None when absent.
        run_policy: restart budget, deadline, TTL and clean-pod policy.
        scheduling: queue, priority class, gang scheduling, suspend.
        pod: the pod template every replica starts from.
        accelerator: accelerator type (`pytorch.accelerator`, else flytekit's `gpuAccelerator.device`), or None.
        mig_partition: flytekit's `gpuAccelerator.partitionSize` (`1g.5gb`), or None.
        gpu_resource: `pytorch.gpu_resource` (an extended resource name), or None for the backend's.
        shared_memory: the `/dev/shm` request.
        timeout_seconds: `metadata.timeout` in whole seconds rounded up, None when the task has none.
        interruptible: `metadata.interruptible` (an execution may override it).
        secrets: `securityContext.secrets`, parsed.
        config: the validated `pytorch.*` config entries as written.
    """

    task_id: TaskId
    task_type_version: int
    replicas: tuple[ReplicaGroup, ...]
    elastic: Optional[ElasticSpec]
    nproc_per_node: Optional[str]
    run_policy: RunPolicySpec
    scheduling: SchedulingSpec
    pod: PodTemplateSpec
    accelerator: Optional[str]
    mig_partition: Optional[str]
    gpu_resource: Optional[str]
    shared_memory: SharedMemorySpec
    timeout_seconds: Optional[int]
    interruptible: bool
    secrets: tuple[security_pb2.Secret, ...]
    config: Mapping[str, str]

    @property
    def total_replicas(self) -> int:
        """Pods the job asks for (all roles; an elastic job's maximum)."""
        return sum(r.replicas for r in self.replicas)
