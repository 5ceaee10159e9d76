"""Tasks for the cluster hang drill (`tests/faults/test_hang_drill.py`), run as PyTorchJob or TrainJob replicas.

Three pods with one rank each; after joining the group, global rank 1 stops taking part: it loops in plain Python
(as a rank stuck in a data loader or a deadlock does), and the other ranks wait for it in an all-reduce until the
collective timeout (`HANG_TIMEOUT_S`).
"""

from __future__ import annotations

import datetime
import time

from flytekitplugins_pytorch import pytorch_task

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
