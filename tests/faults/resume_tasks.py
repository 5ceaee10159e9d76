"""Tasks for the resume drills (`tests/faults/test_resume_drills.py`): two ranks train a small linear model and
checkpoint after every step through flytekit's own API (`current_context().checkpoint`); rank 1 fails once at step
`fail_at`. A module, not a test file: the ranks and the harness's pods import it.

`mode` says how rank 1 fails, once (a marker file at `marker` remembers it did):

- `"kill"`: SIGKILLs itself (as the kernel's OOM killer or a node loss would end it);
- `"raise"`: raises `FlyteRecoverableException` (Flyte retries the task);
- `"preempt"`: waits there to be stopped from outside (the drill preempts its pod), at most `PREEMPT_WAIT_S`;
- `"none"`: trains without a fault (the unbroken run).
"""

from __future__ import annotations

import datetime
import io
import os
import signal
import time

import flytekit
from flytekit import task
from flytekit.exceptions.user import FlyteRecoverableException

from flytekitplugins_pytorch import Elastic, pytorch_task

MODES = ("kill", "raise", "preempt", "none")

#: How long rank 1 waits to be preempted in mode "preempt" before it fails on its own (the drill preempts it at once).
PREEMPT_WAIT_S = 60


def train(steps: int, fail_at: int, mode: str, marker: str) -> tuple[list[float], int]:
    """Train, resuming from the task's checkpoint when there is one.

    Args:
        steps: optimizer steps in all.
        fail_at: the step at which rank 1 fails (once).
        mode: one of `MODES`.
        marker: a file that exists once rank 1 has failed.

    Returns:
        The final weights and bias (rank 0's), and the step this run started from.

    Raises:
        ValueError: an unknown mode.
        FlyteRecoverableException: on rank 1 at `fail_at` for `"raise"` (once).
    """
    import torch
    import torch.distributed as dist

    if mode not in MODES:
        raise ValueError(f"mode={mode!r} is not valid; use one of {MODES}")
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    checkpoint = flytekit.current_context().checkpoint
    start = 0
    saved = checkpoint.read()
    if saved:
        state = torch.load(io.BytesIO(saved))
        model.load_state_dict(state["model"])
        start = int(state["step"])
    for step in range(start, steps):
        if rank == 1 and step == fail_at and mode != "none" and not os.path.exists(marker):
            open(marker, "w").close()
            if mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if mode == "preempt":
                time.sleep(PREEMPT_WAIT_S)
            raise FlyteRecoverableException(f"rank 1 failed at step {step}; retry from the checkpoint")
        generator = torch.Generator().manual_seed(1000 * step + rank)
        x = torch.randn(8, 4, generator=generator)
        y = x.sum(dim=1, keepdim=True)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        for parameter in model.parameters():
            assert parameter.grad is not None
            dist.all_reduce(parameter.grad)
            parameter.grad /= world
        optimizer.step()
        if rank == 0:
            buffer = io.BytesIO()
            torch.save({"model": model.state_dict(), "step": step + 1}, buffer)
            checkpoint.write(buffer.getvalue())
        dist.barrier()  # the checkpoint of this step is written before any rank starts the next one
    weights = [float(v) for v in torch.cat([model.weight.detach().flatten(), model.bias.detach()])]
    dist.destroy_process_group()
    return weights, start


@task(task_config=Elastic(nnodes=1, nproc_per_node=2, max_restarts=1))
def elastic_resume(steps: int, fail_at: int, mode: str, marker: str) -> tuple[list[float], int]:
    """Under Elastic `max_restarts`: the agent restarts both ranks in place."""
    return train(steps, fail_at, mode, marker)


#: The restarted pods meet again only once every stale connection has failed: a short collective timeout bounds that
#: (a restarted worker can reach the old master's store before the old master fails).
RESTART_TIMEOUT = datetime.timedelta(seconds=20)


@pytorch_task(workers_count=1, restart_policy="OnFailure", collective_timeout=RESTART_TIMEOUT)
def pod_restart_resume(steps: int, fail_at: int, mode: str, marker: str) -> tuple[list[float], int]:
    """Under the operator's `OnFailure`: the failed pods' containers are restarted in place."""
    return train(steps, fail_at, mode, marker)


@pytorch_task(workers_count=1, retries=1)
def flyte_retry_resume(steps: int, fail_at: int, mode: str, marker: str) -> tuple[list[float], int]:
    """Under a Flyte retry: the next attempt reads the failed attempt's checkpoint."""
    return train(steps, fail_at, mode, marker)
