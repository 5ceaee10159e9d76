"""A task written with flytekit's official `kfpytorch` plugin, run through our backend on the real controllers."""

from __future__ import annotations

from flytekit import task
from flytekitplugins.kfpytorch import PyTorch, Worker


@task(task_config=PyTorch(worker=Worker(replicas=1)))
def official_allreduce(x: int) -> list[int]:
    """Master + 1 worker all-reduce `x + rank`; the official plugin runs the function in every replica."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    try:
        tensor = torch.tensor([float(x + dist.get_rank())])
        dist.all_reduce(tensor)
        return [dist.get_world_size(), int(tensor.item())]
    finally:
        dist.destroy_process_group()
