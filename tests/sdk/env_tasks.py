"""Tasks whose ranks report their environment: the three config forms of one job shape (2 pods x 2 ranks).

A module, not a test file: the rank processes import it to unpickle the task.
"""

from __future__ import annotations

import os

from flytekit import task

from flytekitplugins_pytorch import Elastic, PyTorch, Worker, pytorch_task

#: The per-rank variables torch's agent sets (torch/distributed/elastic/agent/server/local_elastic_agent.py).
AGENT_VARS = (
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "RANK",
    "WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "ROLE_NAME",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_MAX_RESTARTS",
)


def _views() -> list[dict[str, str]]:
    """Every rank's agent variables and every ``PET_*`` variable it sees, gathered on rank 0 (in rank order)."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    try:
        mine = {name: value for name, value in os.environ.items() if name in AGENT_VARS or name.startswith("PET_")}
        gathered: list[dict[str, str]] = [{} for _ in range(dist.get_world_size())]
        dist.all_gather_object(gathered, mine)
        return gathered
    finally:
        dist.destroy_process_group()


@pytorch_task(workers_count=1, nproc_per_node=2)
def flat() -> list[dict[str, str]]:
    """The flat keywords: a master and one worker, 2 ranks each."""
    return _views()


@task(task_config=PyTorch(worker=Worker(replicas=1), nproc_per_node=2))
def pytorch_form() -> list[dict[str, str]]:
    """``PyTorch(...)``: the same shape."""
    return _views()


@task(task_config=Elastic(nnodes=2, nproc_per_node=2))
def elastic_form() -> list[dict[str, str]]:
    """``Elastic(...)`` with a fixed node count: 2 pods, 2 ranks each (a range runs its minimum locally)."""
    return _views()


@pytorch_task(workers_count=2)
def one_rank_per_pod() -> list[dict[str, str]]:
    """Three pods with one rank each (the pod runs the function itself on the cluster)."""
    return _views()
