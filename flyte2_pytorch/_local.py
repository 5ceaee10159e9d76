"""Executing a Flyte 2 ``pytorch`` task: locally as real ranks through the SDK's launcher.

Flyte 2 marks a local run in its task context (``mode == "local"``: ``flyte.run`` after ``flyte.init()``, or
``flyte run --local``). Such a run hands the function to ``flytekitplugins_pytorch.launcher.run_distributed``, the
launcher the flytekit front-end uses: the same ranks, per-node environment, failure reports and rank 0's value.

The launcher's package still imports flytekit (its config classes hold flytekit's ``Resources``), so this module
imports it when a task runs, never when ``flyte2_pytorch`` is imported; the Flyte 2 config is translated to the
SDK's, which also applies the SDK's full value checks. In a pod (remote mode) the task does not run yet: the rank
execution and the error classification there need the launcher's flytekit-free core.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, Union

from flyte2_pytorch.config import Elastic, Master, PyTorch, Worker


class RemoteExecutionNotSupported(RuntimeError):
    """A Flyte 2 ``pytorch`` task was started outside a local run (in a pod): not supported yet."""


def _sdk_resources(value: Any) -> Any:
    """flyte.Resources (single values) -> flytekit.Resources, the fields the launcher reads (GPU count included)."""
    if value is None:
        return None
    from flytekit import Resources

    return Resources(
        cpu=None if value.cpu is None else str(value.cpu),
        mem=value.memory,
        gpu=None if value.gpu is None else str(value.gpu),
        ephemeral_storage=value.disk,
    )


def _sdk_role(role: Union[Master, Worker]) -> Any:
    import flytekitplugins_pytorch as sdk

    kwargs: dict[str, Any] = {
        "image": role.image,
        "requests": _sdk_resources(role.requests),
        "limits": _sdk_resources(role.limits),
        "restart_policy": role.restart_policy,
    }
    if isinstance(role, Worker):
        return sdk.Worker(replicas=role.replicas, **kwargs)
    return sdk.Master(**kwargs)


def sdk_config(config: Union[PyTorch, Elastic]) -> Any:
    """The flytekit front-end's config with the same options (role pod templates are left out: a local run has none).

    Args:
        config: a Flyte 2 config.

    Returns:
        ``flytekitplugins_pytorch.PyTorch`` or ``Elastic``.

    Raises:
        flytekitplugins_pytorch.ConfigError: a value the SDK's checks reject.
    """
    import flytekitplugins_pytorch as sdk

    values = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    values["run_policy"] = sdk.RunPolicy(**dataclasses.asdict(config.run_policy))
    if isinstance(config, Elastic):
        return sdk.Elastic(**values)
    values["master"] = _sdk_role(config.master)
    values["worker"] = _sdk_role(config.worker)
    return sdk.PyTorch(**values)


@dataclasses.dataclass
class _LaunchedTask:
    """What ``run_distributed`` reads of a task."""

    task_config: Any
    name: str
    _task_function: Any


async def execute(task: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run a Flyte 2 ``pytorch`` task's function as ranks.

    Args:
        task: a `flyte2_pytorch.task.PyTorchTask` or `ElasticTask`.
        args: positional inputs (Flyte 2 passes keyword inputs; positional ones are not supported by the ranks).
        kwargs: the task's inputs.

    Returns:
        Global rank 0's value.

    Raises:
        RemoteExecutionNotSupported: not a local run.
    """
    import flyte

    if flyte.ctx().mode != "local":  # a null context (all None) outside a task
        raise RemoteExecutionNotSupported(
            f"{task.name}: a flyte2_pytorch task runs locally (flyte.run after flyte.init()) in this release; "
            "in a pod it is not supported yet"
        )
    if args:
        raise TypeError(f"{task.name}: pass the inputs by name")
    from flytekitplugins_pytorch.launcher import run_distributed

    config = task.plugin_config
    config = getattr(config, "config", config)  # a Connector wraps the task's config
    launched = _LaunchedTask(sdk_config(config), task.name, task.func)
    # run_distributed blocks until the ranks are done; Flyte 2's local controller runs the task in its own event
    # loop, which has nothing else to serve meanwhile.
    await asyncio.sleep(0)
    return run_distributed(launched, kwargs)
