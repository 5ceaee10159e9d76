"""Configuration of a distributed PyTorch task for Flyte 2: ``flyte.TaskEnvironment(plugin_config=PyTorch(...))``.

``PyTorch``, ``Elastic``, ``Master``, ``Worker`` and ``RunPolicy`` are `pytorch_core.config`'s classes, the ones
the flytekit front-end subclasses too: the same options, defaults, checks and messages, checked when the config is
built. Two things follow Flyte 2's own types (`FLYTE2_TYPES`): a role's ``requests``/``limits`` are
``flyte.Resources`` (``cpu``, ``memory``, ``gpu``, ``disk``; single values, a GPU count) and its ``pod_template``
is a ``flyte.PodTemplate`` (the same four attributes as flytekit's). Messages name this package where they tell the
user what to build (``use flyte2_pytorch.Master(...)``).

This module imports neither flytekit nor torch, and flyte only when a role's resources or pod template is checked.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass, field
from typing import Any

from pytorch_core import config as core
from pytorch_core.config import (
    DEFAULT_START_METHOD,
    CleanPodPolicy,
    ConfigError,
    ConfigTypes,
    KubernetesVersionWarning,
    RestartPolicy,
    UnknownOptionError,
    suggesting,
)

__all__ = [
    "ConfigError",
    "UnknownOptionError",
    "KubernetesVersionWarning",
    "RestartPolicy",
    "CleanPodPolicy",
    "RunPolicy",
    "Master",
    "Worker",
    "PyTorch",
    "Elastic",
    "DEFAULT_START_METHOD",
    "FLYTE2_TYPES",
    "role_accelerator",
]


def _flyte(name: str) -> type:
    cls: type = getattr(importlib.import_module("flyte"), name)  # the user built one, so flyte is installed
    return cls


def _gpu_device(value: Any) -> Any:
    """flyte's ``Device`` for a role's ``gpu`` value that names a device type (``"A100:1"``, ``flyte.GPU("A100", 1)``),
    or None for a plain count."""
    if value is None or isinstance(value, (bool, int)):
        return None
    flyte = importlib.import_module("flyte")
    if isinstance(value, flyte.Device):
        return value
    if isinstance(value, str):
        return flyte.Resources(gpu=value).get_device()  # flyte's own reading of "A100:1"
    return None


def _gpu_count(value: Any) -> Any:
    """The GPU count of a role's ``gpu`` value: the value itself, or the quantity of the device it names."""
    device = _gpu_device(value)
    return value if device is None else device.quantity


def role_accelerator(value: Any) -> Any:
    """The accelerator type a role's ``gpu`` value names, as flyte writes it for a task (``"A100:1"`` ->
    ``"nvidia-tesla-a100"``; flyte's ``get_proto_extended_resources``), or None for a plain count.

    Args:
        value: a ``flyte.Resources``'s ``gpu``.

    Returns:
        The device name, or None.
    """
    if _gpu_device(value) is None:
        return None
    flyte = importlib.import_module("flyte")
    from flyte.extend import get_proto_extended_resources

    extended = get_proto_extended_resources(flyte.Resources(gpu=value))
    return extended.gpu_accelerator.device if extended is not None else None


def _flyte2_resources(name: str, value: Any) -> None:
    """What ``flyte.Resources`` can say that a role cannot: ``shm`` (a task-wide setting here), a MIG partition."""
    if value.shm is not None:
        raise ConfigError(
            f"{name}.shm={value.shm!r} is set on a role; set PyTorch(shm_size=...) for every replica",
            field=f"{name}.shm",
            value=value.shm,
        )
    device = _gpu_device(value.gpu)
    if device is not None and device.partition:
        raise ConfigError(
            f"{name}.gpu={value.gpu!r} asks for a MIG partition ({device.partition!r}) on one role; a job's replicas "
            "share one accelerator setting: give the partition as TaskEnvironment(resources=flyte.Resources(gpu="
            "flyte.GPU(..., partition=...))) and a GPU count here",
            field=f"{name}.gpu",
            value=value.gpu,
        )


FLYTE2_TYPES = ConfigTypes(
    package="flyte2_pytorch",
    resources_type=lambda: _flyte("Resources"),
    resources_name="flyte.Resources",
    resources_hint="use flyte.Resources(cpu=..., memory=..., gpu=..., disk=...) or None",
    resource_fields=("cpu", "memory", "gpu", "disk"),
    pod_template_type=lambda: _flyte("PodTemplate"),
    pod_template_name="flyte PodTemplate",
    pod_template_hint="use flyte.PodTemplate(pod_spec=kubernetes.client.V1PodSpec(...), labels=..., annotations=...)",
    extra_resource_check=_flyte2_resources,
    sdk_modules=("flyte",),
    gpu_count=_gpu_count,
)
"""Flyte 2's classes of a role's resources and pod template."""


@suggesting
@dataclass
class RunPolicy(core.RunPolicy):
    __doc__ = core.RunPolicy.__doc__
    _types = FLYTE2_TYPES


@suggesting
@dataclass
class Master(core.Master):
    __doc__ = core.Master.__doc__
    _types = FLYTE2_TYPES


@suggesting
@dataclass
class Worker(core.Worker):
    __doc__ = core.Worker.__doc__
    _types = FLYTE2_TYPES


@suggesting
@dataclass
class PyTorch(core.PyTorch):
    __doc__ = core.PyTorch.__doc__
    _types = FLYTE2_TYPES
    master: Master = field(default_factory=Master)
    worker: Worker = field(default_factory=Worker)
    run_policy: RunPolicy = field(default_factory=RunPolicy)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.accelerator = _accelerator_from_roles(self)
        point_flytekit_elsewhere()


def _accelerator_from_roles(config: PyTorch) -> Any:
    """The job's accelerator: ``PyTorch(accelerator=...)``, or the device type the roles' GPUs name
    (``Worker(limits=flyte.Resources(gpu="A100:1"))``), which must be one type."""
    named: dict[str, str] = {}
    roles = [("Master", config.master)] + ([("Worker", config.worker)] if config.worker.replicas else [])
    for owner, role in roles:
        for kind in ("requests", "limits"):
            resources = getattr(role, kind)
            device = role_accelerator(getattr(resources, "gpu", None)) if resources is not None else None
            if device is not None:
                named[f"{owner}.{kind}.gpu={resources.gpu!r}"] = device
    types = set(named.values())
    if len(types) > 1 or (types and config.accelerator is not None and config.accelerator not in types):
        given = dict(named)
        if config.accelerator is not None:
            given["PyTorch.accelerator"] = config.accelerator
        shown = ", ".join(f"{where} ({device})" for where, device in given.items())
        raise ConfigError(
            f"the job's GPU type is given more than once and differs: {shown}; a job's GPU replicas run on one "
            "accelerator type: name it once",
            field="PyTorch.accelerator",
            value=config.accelerator,
        )
    return config.accelerator if config.accelerator is not None else next(iter(types), None)


@suggesting
@dataclass
class Elastic(core.Elastic):
    __doc__ = core.Elastic.__doc__
    _types = FLYTE2_TYPES
    run_policy: RunPolicy = field(default_factory=RunPolicy)

    def __post_init__(self) -> None:
        super().__post_init__()
        point_flytekit_elsewhere()


class _FlytekitTaskOfFlyte2Config:
    """What flytekit finds for this package's config in ``@flytekit.task(task_config=...)``: an error that names
    the flytekit front-end's config (without it, flytekit would run the function as a plain one-process task)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        config = kwargs.get("task_config", args[0] if args else None)
        cls = type(config).__name__
        raise ConfigError(
            f"task_config=flyte2_pytorch.{cls}(...) is the Flyte 2 front-end's config (for flyte.TaskEnvironment); "
            f"flytekit's @task takes flytekitplugins_pytorch.{cls}(...), with the same options",
            field="task_config",
            value=config,
        )


def point_flytekit_elsewhere() -> None:
    """Where flytekit is loaded, register this package's configs with its task plugins, so that one passed to
    flytekit's ``@task(task_config=...)`` fails with a pointer to ``flytekitplugins_pytorch`` instead of running as
    a plain task (flytekit is never imported here)."""
    plugins = getattr(sys.modules.get("flytekit.core.task"), "TaskPlugins", None)
    if plugins is None:
        return
    for cls in (PyTorch, Elastic):
        plugins.register_pythontask_plugin(cls, _FlytekitTaskOfFlyte2Config)
