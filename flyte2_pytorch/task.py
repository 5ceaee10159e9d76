"""The Flyte 2 task types of a distributed PyTorch task, and their serialization.

``custom`` is the ``DistributedPyTorchTrainingTask`` message (flyteidl2's copy of flyteidl's, field for field) as a
protobuf JSON dict, under task type ``pytorch`` version 1: the message Flyte 2's native kfoperators ``pytorch``
plugin reads, with Master and Worker as well as Elastic, and the one the flytekit front-end writes for the same
options. What the message cannot carry travels as the ``pytorch.*`` keys of ``pytorch_contract.template_keys``;
Flyte 2 puts a task's ``config()`` on its container (``Container.config``), not on the template.

torch is not imported here; flytekit never is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

from flyte.extend import AsyncFunctionTaskTemplate, TaskPluginRegistry, get_proto_resources
from flyte.models import SerializationContext
from flyteidl2.plugins import common_pb2 as replica_pb2
from flyteidl2.plugins.kubeflow import common_pb2, pytorch_pb2
from google.protobuf import json_format

from flyte2_pytorch.config import (
    CleanPodPolicy,
    ConfigError,
    Elastic,
    Master,
    PyTorch,
    RestartPolicy,
    RunPolicy,
    Worker,
)
from flyte2_pytorch.task_types import CONNECTOR_TASK_TYPE, CONNECTOR_TASK_TYPE_VERSION
from pytorch_contract import template_keys as keys
from pytorch_contract.template_keys import DEFAULT_RDZV_BACKEND, TASK_TYPE, TASK_TYPE_VERSION

__all__ = [
    "PyTorchTask",
    "ElasticTask",
    "Connector",
    "ConnectorTask",
    "pytorch_custom",
    "elastic_custom",
    "pytorch_config",
    "elastic_config",
]

# ExitCode has no proto value: NEVER stands in (a reader that ignores pytorch.<role>.restart_policy fails the job and
# Flyte's retries apply), as in the flytekit front-end.
_PROTO_RESTART_POLICY = {
    RestartPolicy.NEVER: replica_pb2.RESTART_POLICY_NEVER,
    RestartPolicy.ON_FAILURE: replica_pb2.RESTART_POLICY_ON_FAILURE,
    RestartPolicy.ALWAYS: replica_pb2.RESTART_POLICY_ALWAYS,
    RestartPolicy.EXIT_CODE: replica_pb2.RESTART_POLICY_NEVER,
}
_PROTO_CLEAN_POD_POLICY = {
    CleanPodPolicy.NONE: common_pb2.CLEANPOD_POLICY_NONE,
    CleanPodPolicy.RUNNING: common_pb2.CLEANPOD_POLICY_RUNNING,
    CleanPodPolicy.ALL: common_pb2.CLEANPOD_POLICY_ALL,
}


def _replica_spec(replicas: int, role: Union[Master, Worker]) -> pytorch_pb2.DistributedPyTorchTrainingReplicaSpec:
    spec = pytorch_pb2.DistributedPyTorchTrainingReplicaSpec(
        replicas=replicas, restart_policy=_PROTO_RESTART_POLICY[role.restart_policy]
    )
    if role.image:
        spec.image = role.image
    # flyte's own conversion: a single value of flyte.Resources is a request; the role's limits are a second object.
    requests, limits = get_proto_resources(role.requests), get_proto_resources(role.limits)
    if requests is not None:
        spec.resources.requests.extend(requests.requests)
    if limits is not None:
        spec.resources.limits.extend(limits.requests)
    return spec


def _run_policy(policy: RunPolicy) -> tuple[common_pb2.RunPolicy, dict[str, int]]:
    """The proto run policy, plus the fields set to the proto's zero (which JSON would drop)."""
    proto = common_pb2.RunPolicy(clean_pod_policy=_PROTO_CLEAN_POD_POLICY[policy.clean_pod_policy])
    zeros = {}
    for attr, json_name in (
        ("backoff_limit", "backoffLimit"),
        ("active_deadline_seconds", "activeDeadlineSeconds"),
        ("ttl_seconds_after_finished", "ttlSecondsAfterFinished"),
    ):
        value = getattr(policy, attr)
        if value is not None:
            setattr(proto, attr, value)
            if value == 0:
                zeros[json_name] = 0
    return proto, zeros


def _to_dict(job: pytorch_pb2.DistributedPyTorchTrainingTask, zeros: dict[str, int]) -> dict[str, Any]:
    custom = json_format.MessageToDict(job)
    if zeros:  # an explicit 0 (backoff_limit=0: never restart a pod) is not "unset" for the operator
        custom.setdefault("runPolicy", {}).update(zeros)
    return custom


def pytorch_custom(config: PyTorch) -> dict[str, Any]:
    """``custom`` of a Master/Worker job: ``masterReplicas``, ``workerReplicas`` (absent when 0) and ``runPolicy``.

    Args:
        config: the task's configuration.

    Returns:
        ``DistributedPyTorchTrainingTask`` as a protobuf JSON dict.
    """
    run_policy, zeros = _run_policy(config.run_policy)
    job = pytorch_pb2.DistributedPyTorchTrainingTask(
        master_replicas=_replica_spec(1, config.master), run_policy=run_policy
    )
    if config.worker.replicas > 0:
        job.worker_replicas.CopyFrom(_replica_spec(config.worker.replicas, config.worker))
    return _to_dict(job, zeros)


def elastic_custom(config: Elastic) -> dict[str, Any]:
    """``custom`` of an elastic job: ``workerReplicas`` (max nodes), ``elasticConfig`` and ``runPolicy``.

    Args:
        config: the task's configuration.

    Returns:
        ``DistributedPyTorchTrainingTask`` as a protobuf JSON dict.
    """
    run_policy, zeros = _run_policy(config.run_policy)
    elastic = pytorch_pb2.ElasticConfig(
        rdzv_backend=DEFAULT_RDZV_BACKEND,
        min_replicas=config.min_nodes,
        max_replicas=config.max_nodes,
        max_restarts=config.max_restarts,
    )
    if isinstance(config.nproc_per_node, int):
        elastic.nproc_per_node = config.nproc_per_node
    job = pytorch_pb2.DistributedPyTorchTrainingTask(
        worker_replicas=pytorch_pb2.DistributedPyTorchTrainingReplicaSpec(replicas=config.max_nodes),
        run_policy=run_policy,
        elastic_config=elastic,
    )
    return _to_dict(job, zeros)


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
        keys.ACCELERATOR: config.accelerator,
        keys.GPU_RESOURCE: config.gpu_resource,
    }
    entries.update({k: v for k, v in optional.items() if v is not None})
    return entries


def pytorch_config(config: PyTorch) -> dict[str, str]:
    """The ``pytorch.*`` entries of a Master/Worker job (docs/template-format.md).

    Role pod templates (``pytorch.<role>.pod_template``) are not written yet.

    Args:
        config: the task's configuration.

    Returns:
        String map, keys sorted.
    """
    entries = _common_config(config)
    entries[keys.NPROC_PER_NODE] = str(config.nproc_per_node)
    if config.master.restart_policy is RestartPolicy.EXIT_CODE:
        entries[keys.MASTER_RESTART_POLICY] = RestartPolicy.EXIT_CODE.value
    if config.worker.replicas > 0 and config.worker.restart_policy is RestartPolicy.EXIT_CODE:
        entries[keys.WORKER_RESTART_POLICY] = RestartPolicy.EXIT_CODE.value
    if config.master.image:
        entries[keys.MASTER_IMAGE] = config.master.image
    return dict(sorted(entries.items()))


def elastic_config(config: Elastic) -> dict[str, str]:
    """The ``pytorch.*`` entries of an elastic job; ``pytorch.nproc_per_node`` only when it is a word.

    Args:
        config: the task's configuration.

    Returns:
        String map, keys sorted.
    """
    entries = _common_config(config)
    if isinstance(config.nproc_per_node, str):
        entries[keys.NPROC_PER_NODE] = config.nproc_per_node
    return dict(sorted(entries.items()))


@dataclass(kw_only=True)
class PyTorchTask(AsyncFunctionTaskTemplate):
    """A function run as a PyTorchJob with a master and workers (task type ``pytorch``, version 1).

    Built by ``@env.task`` in a ``flyte.TaskEnvironment(plugin_config=PyTorch(...))``.
    """

    task_type: str = TASK_TYPE
    task_type_version: int = TASK_TYPE_VERSION
    plugin_config: PyTorch
    debuggable: bool = False

    def custom_config(self, sctx: SerializationContext) -> dict[str, Any]:
        """``TaskTemplate.custom``: `pytorch_custom` of the config."""
        return pytorch_custom(self.plugin_config)

    def config(self, sctx: SerializationContext) -> dict[str, str]:
        """The ``pytorch.*`` keys (Flyte 2 writes them to the task's container config)."""
        return pytorch_config(self.plugin_config)

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        """Run the function as ranks: locally with the local launcher; in a pod, not yet (see `_local`)."""
        from flyte2_pytorch._local import execute

        return await execute(self, args, kwargs)


@dataclass(kw_only=True)
class ElasticTask(PyTorchTask):
    """A function run torchrun-style: ``nnodes`` pods rendezvous, no master (task type ``pytorch``, version 1)."""

    plugin_config: Elastic  # type: ignore[assignment]

    def custom_config(self, sctx: SerializationContext) -> dict[str, Any]:
        """``TaskTemplate.custom``: `elastic_custom` of the config."""
        return elastic_custom(self.plugin_config)

    def config(self, sctx: SerializationContext) -> dict[str, str]:
        """The ``pytorch.*`` keys of an elastic job."""
        return elastic_config(self.plugin_config)


@dataclass(frozen=True)
class Connector:
    """Run a task through this project's connector instead of Flyte 2's native plugin (task type ``pytorch-job``).

    ``flyte.TaskEnvironment(name=..., plugin_config=Connector(PyTorch(...)))``: the same message and ``pytorch.*``
    keys as the wrapped config, under a task type the native plugin does not claim, so the job kind is the one the
    connector's backend config targets (a TrainJob, or a PyTorchJob with every option). A local run is the same.

    Args:
        config: the task's `PyTorch` or `Elastic` configuration.
    """

    config: Union[PyTorch, Elastic]

    def __post_init__(self) -> None:
        if not isinstance(self.config, (PyTorch, Elastic)):
            raise ConfigError(
                f"Connector.config={self.config!r} is not a PyTorch or Elastic config ({type(self.config).__name__}); "
                "use Connector(flyte2_pytorch.PyTorch(...)) or Connector(flyte2_pytorch.Elastic(...))",
                field="Connector.config",
                value=self.config,
            )


@dataclass(kw_only=True)
class ConnectorTask(PyTorchTask):
    """A function run as the job our connector makes (task type ``pytorch-job``, version 1)."""

    task_type: str = CONNECTOR_TASK_TYPE
    task_type_version: int = CONNECTOR_TASK_TYPE_VERSION
    plugin_config: Connector  # type: ignore[assignment]

    def custom_config(self, sctx: SerializationContext) -> dict[str, Any]:
        """``TaskTemplate.custom`` of the wrapped config."""
        inner = self.plugin_config.config
        return elastic_custom(inner) if isinstance(inner, Elastic) else pytorch_custom(inner)

    def config(self, sctx: SerializationContext) -> dict[str, str]:
        """The ``pytorch.*`` keys of the wrapped config."""
        inner = self.plugin_config.config
        return elastic_config(inner) if isinstance(inner, Elastic) else pytorch_config(inner)


TaskPluginRegistry.register(config_type=PyTorch, plugin=PyTorchTask)
TaskPluginRegistry.register(config_type=Connector, plugin=ConnectorTask)
TaskPluginRegistry.register(config_type=Elastic, plugin=ElasticTask)
