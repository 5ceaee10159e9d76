"""Executing a Flyte 2 ``pytorch`` task through the core launcher, locally and in a pod.

The function goes to ``pytorch_core.launcher.run_distributed`` with the Flyte 2 front-end
(`flyte2_pytorch._frontend.FLYTE2`): the launcher the flytekit front-end uses. In a local run (Flyte 2's task
context says ``mode == "local"``: ``flyte.run`` after ``flyte.init()``, or ``flyte run --local``) it starts the
ranks on this machine. In a pod started by Flyte 2's entrypoint it reads the operator's variables (``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR`` of a PyTorchJob, ``PET_*`` of an elastic one) and runs this pod's ranks; only the
pod holding global rank 0 returns a value, the others end without outputs (`_frontend.WithheldOutputs`), and a
failure stays recoverable or permanent through Flyte 2's error protocol. flytekit is never imported.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Union

from flyte2_pytorch._frontend import FLYTE2, FLYTE2_DIRECT_CALL
from flyte2_pytorch.config import Elastic, PyTorch


@dataclass
class _LaunchedTask:
    """What ``run_distributed`` reads of a task."""

    task_config: Union[PyTorch, Elastic]
    name: str
    _task_function: Any
    report: bool = False  # the task has a report (live progress flushes it mid-run)


def run_here(task: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run a Flyte 2 ``pytorch`` task's function as ranks on this machine (a direct call, outside any Flyte run).

    Args:
        task: a `flyte2_pytorch.task.PyTorchTask` or `ElasticTask`.
        args: positional inputs (not supported by the ranks).
        kwargs: the task's inputs.

    Returns:
        Global rank 0's value.

    Raises:
        TypeError: positional inputs.
        BaseException: the root-cause rank's failure (see ``pytorch_core.launcher.run_distributed``).
    """
    if args:
        raise TypeError(f"{task.name}: pass the inputs by name")
    from pytorch_core.launcher import run_distributed

    config = task.plugin_config
    config = getattr(config, "config", config)  # a Connector wraps the task's config
    return run_distributed(_LaunchedTask(config, task.name, task.func), kwargs, FLYTE2_DIRECT_CALL)


async def execute(task: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run a Flyte 2 ``pytorch`` task's function as ranks.

    Args:
        task: a `flyte2_pytorch.task.PyTorchTask` or `ElasticTask`.
        args: positional inputs (Flyte 2 passes keyword inputs; positional ones are not supported by the ranks).
        kwargs: the task's inputs.

    Returns:
        Global rank 0's value.

    Raises:
        WithheldOutputs: in a pod that does not hold global rank 0 (a ``SystemExit(0)``).
        BaseException: the root-cause rank's failure (see ``pytorch_core.launcher.run_distributed``).
    """
    if args:
        raise TypeError(f"{task.name}: pass the inputs by name")
    from pytorch_core.launcher import run_distributed

    config = task.plugin_config
    config = getattr(config, "config", config)  # a Connector wraps the task's config
    launched = _LaunchedTask(config, task.name, task.func, report=bool(getattr(task, "report", False)))
    # run_distributed blocks until the ranks are done; Flyte 2's local controller runs the task in its own event
    # loop, which has nothing else to serve meanwhile.
    await asyncio.sleep(0)
    try:
        return run_distributed(launched, kwargs, FLYTE2)
    finally:
        if launched.report:
            say_report_path(task.name)


def say_report_path(name: str) -> None:
    """In a local run, one line on stderr naming the file the task's report is in (Flyte 2 writes it into the run's
    local metadata folder and names it nowhere): ``Report of <task>: file:///tmp/flyte/metadata/.../report.html``.

    Args:
        name: the task's name.
    """
    import sys

    import flyte

    context = flyte.ctx()
    if context is None or getattr(context, "mode", None) != "local" or not getattr(context, "output_path", None):
        return
    from flyte._internal.runtime import io

    path = str(io.report_path(str(context.output_path)))
    print(f"Report of {name}: {path if '://' in path else 'file://' + path}", file=sys.stderr, flush=True)
