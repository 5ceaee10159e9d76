"""Tasks for the local-launch tests; a module (not a test file) so spawned rank processes can import it."""

from __future__ import annotations

import os
import time

import flytekit
from flytekit import workflow
from flytekit.exceptions.user import FlyteRecoverableException
from flytekit.types.file import FlyteFile

from flytekitplugins_pytorch import Elastic, pytorch_task

ENV_NAMES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "PET_NNODES",
    "PET_NODE_RANK",
    "PET_NPROC_PER_NODE",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
    "PET_RDZV_ENDPOINT",
    "PET_RDZV_BACKEND",
    "PET_MAX_RESTARTS",
    "OMP_NUM_THREADS",
)


def _all_reduce_sum(value: float) -> tuple[int, int, float]:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    try:
        tensor = torch.tensor([value])
        dist.all_reduce(tensor)
        return dist.get_rank(), dist.get_world_size(), float(tensor.item())
    finally:
        dist.destroy_process_group()


@pytorch_task(workers_count=2)
def all_reduce_task(base: float) -> tuple[int, int, float]:
    """Each rank contributes base + rank; rank 0 returns (rank, world size, sum)."""
    return _all_reduce_sum(base + int(os.environ["RANK"]))


@workflow
def all_reduce_wf(base: float = 1.0) -> tuple[int, int, float]:
    return all_reduce_task(base=base)


@pytorch_task(workers_count=1, nproc_per_node=2)
def env_task() -> list[dict[str, str]]:
    """Every rank's view of the launch variables, gathered on rank 0."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    try:
        mine = {name: os.environ.get(name, "") for name in ENV_NAMES}
        mine["timeout_default_installed"] = str(getattr(dist.init_process_group, "_flyte_collective_timeout", False))
        import torch

        mine["torch_threads"] = str(torch.get_num_threads())
        gathered: list[dict[str, str]] = [{} for _ in range(dist.get_world_size())]
        dist.all_gather_object(gathered, mine)
        return gathered
    finally:
        dist.destroy_process_group()


@pytorch_task(workers_count=2)
def failing_task(bad_rank: int, recoverable: bool) -> int:
    """``bad_rank`` raises ValueError (or FlyteRecoverableException) while the others wait in an all-reduce."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if rank == bad_rank:
        if recoverable:
            raise FlyteRecoverableException(f"flaky storage on rank {rank}")
        raise ValueError(f"boom on rank {rank}")
    dist.all_reduce(torch.ones(1))
    return rank


@pytorch_task(workers_count=1, collective_timeout=None)
def context_task(epochs: int) -> tuple[int, FlyteFile]:
    """Resume from the last checkpointed epoch; rank 0 writes a checkpoint, a Deck and a file output."""
    ctx = flytekit.current_context()
    rank = int(os.environ["RANK"])
    previous = ctx.checkpoint.read()
    start = int(previous.decode()) if previous else 0
    assert ctx.execution_id is not None and ctx.working_directory
    ctx.logging.info("rank %d resumes at epoch %d", rank, start)
    done = start + epochs
    out = os.path.join(ctx.working_directory, "weights.txt")
    if rank == 0:
        ctx.checkpoint.write(str(done).encode())
        flytekit.Deck("rank0-report", f"<p>epochs done: {done}</p>")
        with open(out, "w") as fh:
            fh.write(f"weights after {done} epochs")
    return done, FlyteFile(out)


@flytekit.task(task_config=Elastic(nnodes="2:3", nproc_per_node=1))
def elastic_task() -> tuple[int, str]:
    """An elastic task with 2 to 3 nodes: locally it runs min nodes x nproc ranks."""
    return int(os.environ["WORLD_SIZE"]), os.environ.get("PET_NNODES", "")


@pytorch_task(workers_count=3)
def world_size_task() -> int:
    return int(os.environ["WORLD_SIZE"])


@pytorch_task(workers_count=2)
def sleepy_task(seconds: float, marker: str) -> int:
    """Sleep (with a unique marker in argv-free form: the marker is in the environment of each rank)."""
    os.environ["FLYTE_TEST_MARKER"] = marker
    time.sleep(seconds)
    return int(os.environ["RANK"])


@pytorch_task(workers_count=1, progress_timeout=2, collective_timeout=60)
def stalls_task() -> int:
    """Rank 1 reports progress once, then stops making any outside torch.distributed; rank 0 waits in a barrier."""
    import torch.distributed as dist

    from flytekitplugins_pytorch import report_progress

    dist.init_process_group("gloo")
    report_progress()
    if dist.get_rank() == 1:
        while True:
            time.sleep(0.1)
    dist.barrier()
    return 0


@pytorch_task(workers_count=1, per_replica_gpu_limit=1)
def gpu_task() -> int:
    """Asks for a GPU; returns the CUDA devices the rank sees."""
    import torch

    return torch.cuda.device_count()


@pytorch_task(workers_count=2)
def nccl_task() -> int:
    """Asks for the NCCL backend, as a GPU script does."""
    import torch.distributed as dist

    dist.init_process_group("nccl")
    return dist.get_world_size()
