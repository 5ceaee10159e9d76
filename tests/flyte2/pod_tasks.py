"""A Flyte 2 task run as one pod of a PyTorchJob (``python -m tests.flyte2.pod_tasks <case>``), by
tests/flyte2/test_pod.py.

The pod's environment carries the variables the training operator sets (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT``, ``PET_*``), and no Flyte 2 local run is active: the task runs as it does under Flyte 2's
entrypoint in a pod. The script calls the task's ``execute`` (what the entrypoint calls) and prints one JSON line:
the value, or how Flyte 2's own error conversion classifies the exception (``recoverable``), or the ``SystemExit``
that ends a pod withholding its outputs (re-raised: the pod exits 0, as under the entrypoint).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import flyte
from flyte.errors import NonRecoverableError

from flyte2_pytorch import PyTorch, Worker

two_pods = flyte.TaskEnvironment(
    name="two-pods", plugin_config=PyTorch(worker=Worker(replicas=1), nproc_per_node=2, preflight=False)
)
one_rank_pods = flyte.TaskEnvironment(name="one-rank-pods", plugin_config=PyTorch(worker=Worker(replicas=1)))


@two_pods.task
def all_reduce(base: int) -> list[int]:
    """[rank, world size, sum over ranks of base + rank]; rank 0's list is the task's output."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    value = torch.tensor([base + dist.get_rank()])
    dist.all_reduce(value)
    return [dist.get_rank(), dist.get_world_size(), int(value.item())]


@one_rank_pods.task
def failing(permanent: bool) -> int:
    """Global rank 1 raises; rank 0 waits for it in a barrier."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        if permanent:
            raise NonRecoverableError("the data set is missing")
        raise ValueError("a flaky read")
    dist.barrier()
    return 0


def main(case: str) -> None:
    from flyte._internal.runtime.convert import convert_from_native_to_error

    cases: dict[str, tuple[Any, dict[str, Any]]] = {
        "all_reduce": (all_reduce, {"base": 10}),
        "permanent": (failing, {"permanent": True}),
        "recoverable": (failing, {"permanent": False}),
    }
    task, kwargs = cases[case]
    try:
        value = asyncio.run(task.execute(**kwargs))
    except SystemExit as exit_:  # what ends the process under the entrypoint too: reported, then let through
        print(json.dumps({"exit": exit_.code, "withheld": getattr(exit_, "message", None)}), flush=True)
        raise
    except Exception as exc:  # noqa: BLE001 - reported to the test as Flyte 2 would classify it
        error = convert_from_native_to_error(exc)
        out = {"error": type(exc).__name__, "recoverable": error.recoverable, "message": str(exc)[:2000]}
        print(json.dumps(out), flush=True)
        sys.exit(1)
    print(json.dumps({"output": value, "rank": os.environ["RANK"]}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
