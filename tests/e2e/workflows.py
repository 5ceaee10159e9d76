"""Tasks the end-to-end tests package with `pyflyte package` and run as PyTorchJob replicas.

Every function here runs in replica processes started by the fake operator (`tests.e2e.harness`), through
`pyflyte-execute`, exactly as on a cluster: torch is imported inside the functions, and each function calls
`init_process_group` itself (the operator's `MASTER_ADDR`/`RANK`/`WORLD_SIZE` or the elastic agent provide the rest).
"""

from __future__ import annotations

import os
import time

from flytekit import task

from flytekitplugins_pytorch import Elastic, pytorch_task, report_progress


def _all_reduce(value: int) -> tuple[int, int, int]:
    """(rank, world size, sum over ranks of value + rank) through a real gloo all-reduce."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        tensor = torch.tensor([float(value + rank)])
        dist.all_reduce(tensor)
        return rank, world, int(tensor.item())
    finally:
        dist.destroy_process_group()


@pytorch_task(
    workers_count=2,
    per_replica_cpu_request="500m",
    per_replica_memory_request="4Gi",
    per_replica_memory_limit="8Gi",
    per_replica_gpu_limit="1",
)
def seed_allreduce(x: int) -> list[int]:
    """The seed decorator: master + 2 workers all-reduce `x + rank`; returns [rank, world, sum] of the caller."""
    rank, world, total = _all_reduce(x)
    return [rank, world, total]


@pytorch_task(workers_count=2)
def worker_raises(fail_rank: int) -> int:
    """Rank `fail_rank` raises after joining the group; the others wait at a barrier (and lose their peer)."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    if dist.get_rank() == fail_rank:
        raise ValueError(f"rank {fail_rank} cannot read shard 7: checksum mismatch")
    dist.barrier()
    return dist.get_rank()


@task(task_config=Elastic(nnodes="1:2", nproc_per_node=1, rdzv_last_call_timeout=5))
def elastic_allreduce(x: int) -> list[int]:
    """Elastic, 1 to 2 nodes: returns [rank, world, sum] of global rank 0."""
    rank, world, total = _all_reduce(x)
    return [rank, world, total]


@pytorch_task(workers_count=1)
def sleeps(seconds: int) -> int:
    """Joins the group, writes its pid where the test can see it, then sleeps (the delete case)."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    marker = os.environ.get("E2E_MARKER_DIR")
    if marker:
        with open(os.path.join(marker, f"rank-{dist.get_rank()}.pid"), "w") as f:
            f.write(str(os.getpid()))
    time.sleep(seconds)
    return seconds


@pytorch_task(workers_count=1)
def reports_progress(steps: int, hold_at: int) -> int:
    """Every rank reports `steps` steps of progress (loss 1/step), holding at step `hold_at` (still reporting it) until
    the test drops `release` in `E2E_MARKER_DIR` (at most 120 s), so that the test sees the job run at a known step."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    release = os.path.join(os.environ.get("E2E_MARKER_DIR", "."), "release")
    for step in range(1, steps + 1):
        report_progress(step, steps, loss=1.0 / step)
        waited = 0.0
        while step == hold_at and not os.path.exists(release) and waited < 120:
            time.sleep(0.1)
            waited += 0.1
            report_progress(step, steps, loss=1.0 / step)  # a step that takes long: its report is handed on
    dist.barrier()
    dist.destroy_process_group()
    return steps
