"""Executing a Flyte 2 ``pytorch`` task: locally as real ranks through the core launcher.

Flyte 2 marks a local run in its task context (``mode == "local"``: ``flyte.run`` after ``flyte.init()``, or
``flyte run --local``). Such a run hands the function to ``pytorch_core.launcher.run_distributed`` with the Flyte 2
front-end (`flyte2_pytorch._frontend.FLYTE2`): the launcher the flytekit front-end uses, with the same ranks,
per-node environment, failure reports and rank 0's value. flytekit is never imported. In a pod (remote mode) the
task does not run yet.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Union

from flyte2_pytorch._frontend import FLYTE2
from flyte2_pytorch.config import Elastic, PyTorch


class RemoteExecutionNotSupported(RuntimeError):
    """A Flyte 2 ``pytorch`` task was started outside a local run (in a pod): not supported yet."""


@dataclass
class _LaunchedTask:
    """What ``run_distributed`` reads of a task."""

    task_config: Union[PyTorch, Elastic]
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
    if not FLYTE2.is_local():  # a null context (all None) outside a task
        raise RemoteExecutionNotSupported(
            f"{task.name}: a flyte2_pytorch task runs locally (flyte.run after flyte.init()) in this release; "
            "in a pod it is not supported yet"
        )
    if args:
        raise TypeError(f"{task.name}: pass the inputs by name")
    from pytorch_core.launcher import run_distributed

    config = task.plugin_config
    config = getattr(config, "config", config)  # a Connector wraps the task's config
    launched = _LaunchedTask(config, task.name, task.func)
    # run_distributed blocks until the ranks are done; Flyte 2's local controller runs the task in its own event
    # loop, which has nothing else to serve meanwhile.
    await asyncio.sleep(0)
    return run_distributed(launched, kwargs, FLYTE2)
