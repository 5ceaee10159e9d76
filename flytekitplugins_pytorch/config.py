"""Configuration of flytekit ``pytorch`` tasks: the core's config classes with flytekit's resource types.

``PyTorch``, ``Elastic``, ``Master``, ``Worker`` and ``RunPolicy`` are `pytorch_core.config`'s, subclassed with
`FLYTEKIT_TYPES`: a role's ``requests``/``limits`` are ``flytekit.Resources`` and its ``pod_template`` a
``flytekit.PodTemplate``. Every check and message is the core's (see `pytorch_core.config`), so the Flyte 2
front-end refuses the same values with the same words. The three check functions that take a resources object or a
pod template are here, bound to flytekit's types; the others are `pytorch_core.config`'s.

This module never imports torch.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

import flytekit

from pytorch_core import config as core
from pytorch_core.config import (
    KFPYTORCH_NAMES,
    NPROC_PER_NODE_WORDS,
    START_METHODS,
    CleanPodPolicy,
    ConfigError,
    ConfigTypes,
    JobLimitWarning,
    KubernetesVersionWarning,
    PodTemplateOverrideWarning,
    ProcessesGpusWarning,
    RestartPolicy,
    UnknownOptionError,
    check_image,
    check_nproc_per_node,
    kfpytorch_replacement,
    option_names,
    suggesting,
)

__all__ = [
    "ConfigError",
    "UnknownOptionError",
    "PodTemplateOverrideWarning",
    "JobLimitWarning",
    "KubernetesVersionWarning",
    "ProcessesGpusWarning",
    "RestartPolicy",
    "CleanPodPolicy",
    "RunPolicy",
    "Master",
    "Worker",
    "PyTorch",
    "Elastic",
    "START_METHODS",
    "NPROC_PER_NODE_WORDS",
    "FLYTEKIT_TYPES",
    # the core's, still importable from here
    "KFPYTORCH_NAMES",
    "check_image",
    "check_nproc_per_node",
    "kfpytorch_replacement",
    "option_names",
]

FLYTEKIT_TYPES = ConfigTypes(
    package="flytekitplugins_pytorch",
    resources_type=lambda: flytekit.Resources,
    resources_name="flytekit.Resources",
    resources_hint="use flytekit.Resources(cpu=..., mem=..., gpu=..., ephemeral_storage=...) or None",
    resource_fields=("cpu", "mem", "gpu", "ephemeral_storage"),
    pod_template_type=lambda: flytekit.PodTemplate,
    pod_template_name="flytekit PodTemplate",
    pod_template_hint=(
        "use flytekit.PodTemplate(pod_spec=kubernetes.client.V1PodSpec(...), labels=..., annotations=...)"
    ),
    sdk_modules=("flytekit",),
    accelerator_object=lambda value: _is_flytekit_accelerator(value),
)
"""flytekit's classes of a role's resources and pod template, and its accelerator objects."""


def _is_flytekit_accelerator(value: Any) -> bool:
    """Whether `value` is one of flytekit's accelerator objects (``A100``, ``A100.partition_1g_5gb``): the task passes
    it to flytekit's ``@task(accelerator=...)``, as `pytorch_task` does."""
    from flytekit.extras.accelerators import BaseAccelerator

    return isinstance(value, BaseAccelerator)


def check_resources(
    requests: Optional[flytekit.Resources],
    limits: Optional[flytekit.Resources],
    name_of: Callable[[str, Optional[str]], str],
) -> None:
    """`pytorch_core.config.check_resources` for ``flytekit.Resources``."""
    core.check_resources(requests, limits, name_of, types=FLYTEKIT_TYPES)


def check_shm_within_memory(shm_name: str, shm_size: Optional[str], limit_name: str, limits: Any) -> None:
    """`pytorch_core.config.check_shm_within_memory` for ``flytekit.Resources`` limits."""
    core.check_shm_within_memory(shm_name, shm_size, limit_name, limits, types=FLYTEKIT_TYPES)


def check_pod_template(name: str, value: Any) -> Optional[flytekit.PodTemplate]:
    """`pytorch_core.config.check_pod_template` for a ``flytekit.PodTemplate``."""
    checked: Optional[flytekit.PodTemplate] = core.check_pod_template(name, value, types=FLYTEKIT_TYPES)
    return checked


@suggesting
@dataclass
class RunPolicy(core.RunPolicy):
    __doc__ = core.RunPolicy.__doc__
    _types = FLYTEKIT_TYPES


@suggesting
@dataclass
class Master(core.Master):
    __doc__ = core.Master.__doc__
    _types = FLYTEKIT_TYPES
    requests: Optional[flytekit.Resources] = None
    limits: Optional[flytekit.Resources] = None
    pod_template: Optional[flytekit.PodTemplate] = None


@suggesting
@dataclass
class Worker(core.Worker):
    __doc__ = core.Worker.__doc__
    _types = FLYTEKIT_TYPES
    requests: Optional[flytekit.Resources] = None
    limits: Optional[flytekit.Resources] = None
    pod_template: Optional[flytekit.PodTemplate] = None


@suggesting
@dataclass
class PyTorch(core.PyTorch):
    __doc__ = core.PyTorch.__doc__
    _types = FLYTEKIT_TYPES
    master: Master = field(default_factory=Master)
    worker: Worker = field(default_factory=Worker)
    run_policy: RunPolicy = field(default_factory=RunPolicy)

    def __post_init__(self) -> None:
        super().__post_init__()
        point_flyte2_elsewhere()


@suggesting
@dataclass
class Elastic(core.Elastic):
    __doc__ = core.Elastic.__doc__
    _types = FLYTEKIT_TYPES
    run_policy: RunPolicy = field(default_factory=RunPolicy)

    def __post_init__(self) -> None:
        super().__post_init__()
        point_flyte2_elsewhere()


class _Flyte2TaskOfFlytekitConfig:
    """What Flyte 2 finds for this package's config in ``flyte.TaskEnvironment(plugin_config=...)``: an error that
    names the Flyte 2 front-end's config, instead of flyte's "No task plugin found for config type"."""

    def __init__(self, *args: Any, plugin_config: Any = None, name: str = "", **kwargs: Any) -> None:
        cls = type(plugin_config).__name__
        raise ConfigError(
            f"{name}: plugin_config=flytekitplugins_pytorch.{cls}(...) is the flytekit front-end's config (for "
            f"flytekit's @task); a flyte.TaskEnvironment takes flyte2_pytorch.{cls}(...), with the same options "
            "(docs/flyte2.md)",
            field="plugin_config",
            value=plugin_config,
        )


#: The entry-point group of translations to Flyte 2 (``flyte2_pytorch.migrate:register``, declared in setup.py): the
#: flytekit front-end finds the Flyte 2 front-end's translation by name, so neither front-end imports the other.
MIGRATIONS = "flytekitplugins_pytorch.migrations"


def _register_translations() -> None:
    """Run every registered translation's ``register()`` once (it hands the translation to ``flyte-migrate``)."""
    from importlib.metadata import entry_points

    for point in entry_points(group=MIGRATIONS):
        point.load()()


def point_flyte2_elsewhere() -> None:
    """Where Flyte 2 is loaded, register this package's configs with its task plugin registry, so that one passed
    to ``flyte.TaskEnvironment`` fails with a pointer to ``flyte2_pytorch`` (flyte is never imported here). Where
    ``flyte-migrate`` is loaded (``pyflyte-migrate run``, or code that imported ``flyte_migrate``), register this
    project's translation with it (the ``MIGRATIONS`` entry points: `flyte2_pytorch.migrate.register`), so that the
    config built now becomes a ``flyte2_pytorch`` task instead of failing in flyte-migrate with "config type
    'PyTorch' is not supported"."""
    if "flyte" not in sys.modules:
        return
    if "flyte_migrate" in sys.modules:
        _register_translations()
    try:  # flyte's own small module of the registry (flyte.extend would load its image builders too)
        from flyte._task_plugins import TaskPluginRegistry as registry
    except ImportError:  # another flyte layout: flyte's own message stays
        return
    for cls in (PyTorch, Elastic):
        if registry.find(cls) is None:
            registry.register(config_type=cls, plugin=_Flyte2TaskOfFlytekitConfig)  # type: ignore[type-var]
