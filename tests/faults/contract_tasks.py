"""Tasks for the retryable-or-permanent drills (`tests/faults/drills_contract.py`), run as PyTorchJob replicas.

One master and one worker; global rank 1 (the worker) fails after joining the group, the master waits at a barrier
and loses its peer. How rank 1 fails is chosen by an input:

- `"non-recoverable"`: raises `ValueError` (flytekit writes an error document of kind NON_RECOVERABLE);
- `"recoverable"`: raises `FlyteRecoverableException` (kind RECOVERABLE);
- `"oom-killed"`: SIGKILLs its whole replica (its process group), as the kernel's OOM killer ends a container whose
  memory cgroup kills as a group; nothing of it writes an error document. Only done when
  `CONTRACT_DRILL_REPLICA=1` is set (the drill's fake kubelet sets it): each replica is then its own process group.
"""

from __future__ import annotations

import os
import signal

from flytekit.exceptions.user import FlyteRecoverableException

from flytekitplugins_pytorch import pytorch_task

MODES = ("non-recoverable", "recoverable", "oom-killed")
NON_RECOVERABLE = "rank 1 found a corrupt shard: checksum mismatch in shard 7"
RECOVERABLE = "rank 1 lost its data loader connection; retry from the checkpoint"
REPLICA_ENV = "CONTRACT_DRILL_REPLICA"


@pytorch_task(workers_count=1)
def rank_fails(mode: str) -> int:
    """Rank 1 fails as `mode` says; every other rank waits for it at a barrier.

    Args:
        mode: one of `MODES`.

    Returns:
        The rank (never reached on rank 0: its peer is gone).

    Raises:
        ValueError: on rank 1 for `non-recoverable`, or for an unknown mode.
        FlyteRecoverableException: on rank 1 for `recoverable`.
    """
    import torch.distributed as dist

    if mode not in MODES:
        raise ValueError(f"mode={mode!r} is not a drill mode; use one of {MODES}")
    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        if mode == "non-recoverable":
            raise ValueError(NON_RECOVERABLE)
        if mode == "recoverable":
            raise FlyteRecoverableException(RECOVERABLE)
        if os.environ.get(REPLICA_ENV) != "1":
            raise RuntimeError(f"oom-killed kills its process group; only inside a drill replica ({REPLICA_ENV}=1)")
        os.killpg(os.getpgid(0), signal.SIGKILL)
    dist.barrier()
    return dist.get_rank()
