"""Flyte 2 tasks run locally by tests/flyte2/test_local_run.py (``python -m tests.flyte2.local_tasks <case>``).

Each case runs one task with ``flyte.run`` after ``flyte.init()`` (Flyte 2's local mode) and prints one JSON line:
the task's output, or the error Flyte 2 raised (its class, ``code``, ``kind`` and message).
"""

from __future__ import annotations

import json
import os
import sys
import time

import flyte

from flyte2_pytorch import PyTorch, Worker
from tests.flyte2 import syncified

three = flyte.TaskEnvironment(name="three-ranks", plugin_config=PyTorch(worker=Worker(replicas=2)))
two_nodes = flyte.TaskEnvironment(name="two-nodes", plugin_config=PyTorch(worker=Worker(replicas=1), nproc_per_node=2))

VIEW = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PET_NNODES", "PET_NODE_RANK")


@three.task
def all_reduce(base: int) -> list[int]:
    """[rank, world size, sum over ranks of base + rank]: rank 0's list is the task's output."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    value = torch.tensor([base + dist.get_rank()])
    dist.all_reduce(value)
    return [dist.get_rank(), dist.get_world_size(), int(value.item())]


@three.task
def failing(bad_rank: int) -> int:
    import torch.distributed as dist

    if int(os.environ["RANK"]) == bad_rank:
        raise ValueError(f"boom on rank {bad_rank}")
    dist.init_process_group("gloo")
    dist.barrier()
    return 0


@two_nodes.task
def env_views() -> list[dict[str, str]]:
    """Every rank's view of the launch variables, gathered on rank 0."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    views: list = [None] * dist.get_world_size()
    dist.all_gather_object(views, {k: os.environ.get(k, "") for k in VIEW})
    return views


@three.task
def syncified_in_ranks(base: int) -> list[int]:
    """Each rank makes a syncified call (flyte's background loop) and rank 0 gathers the results."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    views: list = [None] * dist.get_world_size()
    dist.all_gather_object(views, syncified.add(base, dist.get_rank()))
    return views


def main(case: str) -> None:
    flyte.init()
    start = time.perf_counter()
    try:
        if case == "all_reduce":
            run = flyte.run(all_reduce, base=10)
        elif case == "failing":
            run = flyte.run(failing, bad_rank=2)
        elif case == "syncified_in_ranks":
            syncified.add(0, 0)  # flyte's loop thread runs in this process before the ranks start
            run = flyte.run(syncified_in_ranks, base=10)
        else:
            run = flyte.run(env_views)
        out = {"output": run.outputs()[0]}
    except Exception as e:  # noqa: BLE001 - reported to the test
        out = {"error": type(e).__name__, "code": getattr(e, "code", None), "kind": getattr(e, "kind", None)}
        out["message"] = str(e)
    out["elapsed_s"] = time.perf_counter() - start
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main(sys.argv[1])
