"""The Flyte 2 task types of a distributed PyTorch task, and their serialization.

``custom`` is the ``DistributedPyTorchTrainingTask`` message (flyteidl2's copy of flyteidl's, field for field) as a
protobuf JSON dict, under task type ``pytorch`` version 1: the message Flyte 2's native kfoperators ``pytorch``
plugin reads, with Master and Worker as well as Elastic, and the one the flytekit front-end writes for the same
options. What the message cannot carry travels as the ``pytorch.*`` keys of ``pytorch_contract.template_keys``;
Flyte 2 puts a task's ``config()`` on its container (``Container.config``), not on the template.

torch is not imported here; flytekit never is.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Optional, Union

from flyte.extend import AsyncFunctionTaskTemplate, TaskPluginRegistry, get_proto_resources
from flyte.models import SerializationContext
from flyteidl2.plugins.kubeflow import pytorch_pb2
from google.protobuf import json_format

from flyte2_pytorch.config import (
    FLYTE2_TYPES,
    ConfigError,
    Elastic,
    PyTorch,
    UnknownOptionError,
)
from flyte2_pytorch.task_types import CONNECTOR_TASK_TYPE, CONNECTOR_TASK_TYPE_VERSION
from pytorch_contract.suggest import did_you_mean
from pytorch_contract.template_keys import TASK_TYPE, TASK_TYPE_VERSION
from pytorch_core.config import check_environment, check_image, check_pod_template, option_names
from pytorch_core.serialize import elastic_config, pytorch_config, training_task_custom

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


def _resources_json(requests: Any, limits: Any) -> Optional[dict[str, Any]]:
    """A role's ``flyte.Resources`` as flyteidl2 ``core.Resources`` JSON, by flyte's own conversion: a single value
    of ``flyte.Resources`` is a request, so the role's limits are a second object."""
    out: dict[str, Any] = {}
    for kind, value in (("requests", requests), ("limits", limits)):
        proto = get_proto_resources(value)
        if proto is not None and proto.requests:
            out[kind] = [json_format.MessageToDict(entry) for entry in proto.requests]
    return out or None


def pytorch_custom(config: PyTorch) -> dict[str, Any]:
    """``custom`` of a Master/Worker job: ``masterReplicas``, ``workerReplicas`` (absent when 0) and ``runPolicy``.

    Args:
        config: the task's configuration.

    Returns:
        ``DistributedPyTorchTrainingTask`` (flyteidl2's) as a protobuf JSON dict.
    """
    return training_task_custom(config, pytorch_pb2.DistributedPyTorchTrainingTask, _resources_json)


def elastic_custom(config: Elastic) -> dict[str, Any]:
    """``custom`` of an elastic job: ``workerReplicas`` (max nodes), ``elasticConfig`` and ``runPolicy``.

    Args:
        config: the task's configuration.

    Returns:
        ``DistributedPyTorchTrainingTask`` (flyteidl2's) as a protobuf JSON dict.
    """
    return training_task_custom(config, pytorch_pb2.DistributedPyTorchTrainingTask, _resources_json)


@dataclass(kw_only=True)
class PyTorchTask(AsyncFunctionTaskTemplate):
    """A function run as a PyTorchJob with a master and workers (task type ``pytorch``, version 1).

    Built by ``@env.task`` in a ``flyte.TaskEnvironment(plugin_config=PyTorch(...))``.
    """

    task_type: str = TASK_TYPE
    task_type_version: int = TASK_TYPE_VERSION
    plugin_config: PyTorch
    debuggable: bool = False

    def __post_init__(self) -> None:
        """The environment's settings that reach every replica pod, checked against Kubernetes' rules when the task
        is defined (at import), named as the user wrote them: ``env_vars`` (the one rule for environment variable
        names), ``image`` and ``pod_template`` (labels, annotations, tolerations, node selector, container names)."""
        check_environment("TaskEnvironment.env_vars", self.env_vars)
        if isinstance(self.image, str) and self.image != "auto":
            check_image("TaskEnvironment.image", self.image)
        if self.pod_template is not None and not isinstance(self.pod_template, str):
            env = self.parent_env() if self.parent_env is not None else None
            own = env is None or self.pod_template is not getattr(env, "pod_template", None)
            where = f"{self.name}: pod_template" if own else "TaskEnvironment.pod_template"
            check_pod_template(where, self.pod_template, types=FLYTE2_TYPES)
        super().__post_init__()

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """A direct call outside a Flyte run (``train(x=1)`` in a script or a notebook): the ranks run on this
        machine, as ``flyte.run`` runs them locally and as a flytekit task's direct call does.

        Returns:
            Global rank 0's value; for an ``async def`` function, a coroutine that gives it.
        """
        from flyte2_pytorch._local import run_here

        if self._call_as_synchronous:
            return run_here(self, args, kwargs)

        async def ranks() -> Any:
            return run_here(self, args, kwargs)

        return ranks()

    def custom_config(self, sctx: SerializationContext) -> dict[str, Any]:
        """``TaskTemplate.custom``: `pytorch_custom` of the config."""
        return pytorch_custom(self.plugin_config)

    def config(self, sctx: SerializationContext) -> dict[str, str]:
        """The ``pytorch.*`` keys (Flyte 2 writes them to the task's container config)."""
        return pytorch_config(self.plugin_config)

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        """Run the function as ranks with the core launcher: locally, or as this pod's part of the job (`_local`)."""
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


@dataclass(frozen=True, init=False)
class Connector:
    """Run a task through this project's connector instead of Flyte 2's native plugin (task type ``pytorch-job``).

    ``flyte.TaskEnvironment(name=..., plugin_config=Connector(PyTorch(...)))``: the same message and ``pytorch.*``
    keys as the wrapped config, under a task type the native plugin does not claim, so the job kind is the one the
    connector's backend config targets (a TrainJob, or a PyTorchJob with every option). A local run is the same.

    Args:
        config: the task's `PyTorch` or `Elastic` configuration.

    Raises:
        ConfigError: `config` is not a `PyTorch` or `Elastic`; an `UnknownOptionError` (also a ``TypeError``) for
            another keyword, e.g. a config's option given to the wrapper (``Connector(worker=...)``).
    """

    config: Union[PyTorch, Elastic]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        unknown = [name for name in kwargs if name != "config"]
        given = list(args) + ([kwargs["config"]] if "config" in kwargs else [])
        if unknown or len(given) != 1:
            raise _connector_options_error(unknown)
        config = given[0]
        if not isinstance(config, (PyTorch, Elastic)):
            raise ConfigError(
                f"Connector.config={config!r} is not a PyTorch or Elastic config ({type(config).__name__}); "
                "use Connector(flyte2_pytorch.PyTorch(...)) or Connector(flyte2_pytorch.Elastic(...))",
                field="Connector.config",
                value=config,
            )
        object.__setattr__(self, "config", config)


def _connector_options_error(unknown: list[str]) -> UnknownOptionError:
    """The error for `Connector` called with another keyword, or without exactly one config."""
    options = set(option_names(PyTorch)) | set(option_names(Elastic))
    if not unknown:
        return UnknownOptionError(
            "Connector takes the task's config, once: Connector(flyte2_pytorch.PyTorch(...)) or "
            "Connector(flyte2_pytorch.Elastic(...))",
            field="Connector.config",
        )
    name = unknown[0]
    if name in options:
        hint = f"it wraps a config: Connector(flyte2_pytorch.PyTorch({name}=...))"
    else:
        hint = (
            f"it takes one config, Connector(flyte2_pytorch.PyTorch(...)); {did_you_mean(name, {'config'} | options)}"
        )
    return UnknownOptionError(f"Connector.{name} is not an option; {hint}", field=f"Connector.{name}", value=name)


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


if "flytekitplugins_pytorch.config" in sys.modules:  # a flytekit config built before flyte was loaded
    sys.modules["flytekitplugins_pytorch.config"].point_flyte2_elsewhere()

TaskPluginRegistry.register(config_type=PyTorch, plugin=PyTorchTask)
TaskPluginRegistry.register(config_type=Connector, plugin=ConnectorTask)
TaskPluginRegistry.register(config_type=Elastic, plugin=ElasticTask)
