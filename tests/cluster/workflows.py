"""The tasks the cluster tier packages with `pyflyte package` and runs on the real controllers (tests/cluster).

Every function here runs in pods the node agent starts, through `pyflyte-execute`, exactly as on a cluster: torch is
imported inside the functions, and each function calls `init_process_group` itself (the operator's `MASTER_ADDR`/
`RANK`/`WORLD_SIZE`, or the launcher from a TrainJob's or JobSet's variables, or the elastic agent provide the rest). A
GPU task's pods request `nvidia.com/gpu` (the backend writes the request and the scheduler places the pod by it), but
they run on this machine's CPU torch: no task here needs CUDA.
"""

from __future__ import annotations

import datetime
import os
import time

from flytekit import PodTemplate, Resources, task
from kubernetes.client import V1Container, V1PodSpec

from flytekitplugins_pytorch import Elastic, Master, PyTorch, Worker, pytorch_task, report_progress


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


# --- what a TrainJob cannot express (refused at create) --------------------------------------------------------


@task(
    task_config=PyTorch(
        master=Master(requests=Resources(cpu="1", mem="2Gi")),
        worker=Worker(replicas=2, requests=Resources(cpu="2", mem="4Gi")),
    )
)
def per_role(x: int) -> int:
    """A master smaller than its workers: per-role resources (PyTorchJob only)."""
    return x


# --- a hang ----------------------------------------------------------------------------------------------------------
# Three pods with one rank each; after joining the group, global rank 1 stops taking part: it loops in plain Python
# (as a rank stuck in a data loader or a deadlock does), and the other ranks wait for it in an all-reduce until the
# collective timeout (`HANG_TIMEOUT_S`).

#: The drill's collective timeout (the bound is this plus 30 s).
HANG_TIMEOUT_S = 10


def _wait_for_nothing() -> None:
    """Where rank 1 is stuck: a loop outside torch.distributed that never ends."""
    while True:
        time.sleep(0.2)


@pytorch_task(workers_count=2, collective_timeout=datetime.timedelta(seconds=HANG_TIMEOUT_S))
def rank_hangs(x: int) -> int:
    """Rank 1 never reaches the all-reduce the others wait in.

    Args:
        x: added to every rank's contribution.

    Returns:
        The sum (never reached: rank 1 does not arrive).
    """
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        _wait_for_nothing()
    tensor = torch.tensor([float(x + dist.get_rank())])
    dist.all_reduce(tensor)
    return int(tensor.item())


# --- placement the real scheduler judges ------------------------------------------------------------------------------

#: The product no node of the dev cluster has (its GPU nodes are labelled NVIDIA-A100-SXM4-40GB): written as GPU
#: feature discovery writes product names, so the backend's "no node can match" warning for short names stays quiet
#: and only the scheduler can tell.
MISSING_PRODUCT = "NVIDIA-H100-80GB-HBM3"

#: The dev cluster's label of its node pools (devcluster/cluster.py NODES).
POOL_LABEL = "devcluster.flyte.org/pool"


@pytorch_task(workers_count=1, per_replica_gpu_limit="1", accelerator=MISSING_PRODUCT)
def gpu_on_a_missing_product(x: int) -> int:
    """A GPU task pinned to an accelerator no node has: it never starts."""
    return x


@pytorch_task(
    workers_count=1,
    pod_template=PodTemplate(
        primary_container_name="pytorch",
        pod_spec=V1PodSpec(containers=[V1Container(name="pytorch")], node_selector={POOL_LABEL: "gpu"}),
    ),
)
def cpu_task_on_the_gpu_pool(x: int) -> int:
    """A CPU-only task whose pod template selects the GPU pool: it carries no GPU toleration (a CPU-only task never
    does), so the pool's taint keeps it off."""
    return x


#: How long the pods of `refused_by_a_quota` may run: a deadline puts them in a ResourceQuota's `Terminating` scope.
QUOTA_SCOPED_DEADLINE_S = 3600


@pytorch_task(
    workers_count=1,
    pod_template=PodTemplate(
        primary_container_name="pytorch",
        pod_spec=V1PodSpec(containers=[V1Container(name="pytorch")], active_deadline_seconds=QUOTA_SCOPED_DEADLINE_S),
    ),
)
def refused_by_a_quota(x: int) -> int:
    """A task whose pods have a deadline, so that a ResourceQuota of the `Terminating` scope (pods with one) refuses
    them while every other scenario's pods (none has a deadline) stay outside it."""
    return x
