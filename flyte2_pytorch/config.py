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
from dataclasses import dataclass, field
from typing import Any

from pytorch_core import config as core
from pytorch_core.config import (
    DEFAULT_START_METHOD,
    CleanPodPolicy,
    ConfigError,
    ConfigTypes,
    RestartPolicy,
    UnknownOptionError,
    suggesting,
)

__all__ = [
    "ConfigError",
    "UnknownOptionError",
    "RestartPolicy",
    "CleanPodPolicy",
    "RunPolicy",
    "Master",
    "Worker",
    "PyTorch",
    "Elastic",
    "DEFAULT_START_METHOD",
    "FLYTE2_TYPES",
]


def _flyte(name: str) -> type:
    cls: type = getattr(importlib.import_module("flyte"), name)  # the user built one, so flyte is installed
    return cls


def _flyte2_resources(name: str, value: Any) -> None:
    """What ``flyte.Resources`` can say that a role cannot: ``shm`` (a task-wide setting here), a GPU device type."""
    if value.shm is not None:
        raise ConfigError(
            f"{name}.shm={value.shm!r} is set on a role; set PyTorch(shm_size=...) for every replica",
            field=f"{name}.shm",
            value=value.shm,
        )
    gpu = value.gpu
    whole = isinstance(gpu, int) or (isinstance(gpu, str) and gpu.isascii() and gpu.isdigit())
    if gpu is not None and (isinstance(gpu, bool) or not whole):
        raise ConfigError(
            f"{name}.gpu={gpu!r} is not a GPU count; give a whole number of GPUs here and the device type as "
            "PyTorch(accelerator=...)",
            field=f"{name}.gpu",
            value=gpu,
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


@suggesting
@dataclass
class Elastic(core.Elastic):
    __doc__ = core.Elastic.__doc__
    _types = FLYTE2_TYPES
    run_policy: RunPolicy = field(default_factory=RunPolicy)
