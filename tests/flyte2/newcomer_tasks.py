"""What a Flyte 2 newcomer writes and runs, run by tests/flyte2/test_newcomer_trips.py in a fresh interpreter
(``python -m tests.flyte2.newcomer_tasks <case>``); each case prints one JSON line.

- ``run-async``: an ``async def`` task with ``flyte.run`` after ``flyte.init()``;
- ``direct-sync`` / ``direct-async``: the task called directly, as a function (no ``flyte.run``);
- ``flytekit-config-first``: flytekit's ``PyTorch`` built before flyte is imported, then given to
  ``flyte.TaskEnvironment``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any


def _tasks() -> tuple[Any, Any]:
    import flyte

    from flyte2_pytorch import PyTorch, Worker

    env = flyte.TaskEnvironment(name="newcomer", plugin_config=PyTorch(worker=Worker(replicas=1)))

    @env.task
    async def async_sum(base: int) -> list[int]:
        """[world size, sum over ranks of base + rank], from a coroutine on every rank."""
        import torch
        import torch.distributed as dist

        await asyncio.sleep(0)
        dist.init_process_group("gloo")
        value = torch.tensor([base + dist.get_rank()])
        dist.all_reduce(value)
        return [dist.get_world_size(), int(value.item())]

    @env.task
    def sync_sum(base: int) -> list[int]:
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        value = torch.tensor([base + dist.get_rank()])
        dist.all_reduce(value)
        return [dist.get_world_size(), int(value.item())]

    return async_sum, sync_sum


def main(case: str) -> None:
    if case == "flytekit-config-first":
        from flytekitplugins_pytorch import PyTorch

        config = PyTorch()
        import flyte

        import flyte2_pytorch  # noqa: F401  (the newcomer's next line: they meant to use it)

        try:
            env = flyte.TaskEnvironment(name="mixed", plugin_config=config)

            @env.task
            def train(x: int) -> int:
                return x

            out: dict[str, Any] = {"error": None}
        except Exception as e:  # the message is the output
            out = {"error": type(e).__name__, "message": str(e)}
        print(json.dumps(out))
        return
    async_sum, sync_sum = _tasks()
    if case == "run-async":
        import flyte

        flyte.init()
        print(json.dumps({"output": flyte.run(async_sum, base=10).outputs()[0]}))
    elif case == "direct-sync":
        print(json.dumps({"output": sync_sum(base=10)}))
    elif case == "direct-async":
        print(json.dumps({"output": asyncio.run(async_sum(base=10))}))
    else:
        raise SystemExit(f"unknown case {case!r}")


if __name__ == "__main__":
    main(sys.argv[1])
