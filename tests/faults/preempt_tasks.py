"""The training loop of the preemption drills (``tests/faults/test_preemption_drills.py``). A module, not a test
file: the ranks and the pods import it.

Three ranks fit a small linear model with an all-reduce of the gradients each step (SGD with momentum; the momentum
is part of the checkpoint); each step's data comes from a generator seeded by the step and the rank, so a run resumed
at any step ends with the weights of an uninterrupted run. The loop uses the project's API only: ``load_checkpoint``
at the start, ``report_progress`` each step, ``save_checkpoint`` every ``every`` steps, and an ``on_preemption``
callback that notes the step each rank stopped after. What a drill reads back, under ``directory`` (``<run>`` names
one run of a drill):

- ``pid-<run>-<rank>``: the rank's pid (a drill signals it);
- ``start-<run>-<rank>``: the step ``load_checkpoint`` returned;
- ``steps-<run>``: rank 0's completed steps, one per line (the steps recomputed after a resume are counted here);
- ``stop-<run>-<rank>``: the step the rank stopped after (written by the ``on_preemption`` callback);
- ``collective-<run>-<rank>``: with ``slow_rank`` set, when each other rank entered and left each step's
  all-reduce (``enter <step> <time>``, ``left <step> <time>``), to place a signal inside one;
- ``up-<run>-<rank>``: the rank finished its first step of this run (a drill waits for every rank's).

``slow_rank``: that rank sleeps ``step_seconds`` before its all-reduce, the others after it, so they spend the time
waiting inside the collective. ``slow_save_s``: the checkpoint at a preemption takes that long to write (a state
whose ``state_dict`` sleeps once the stop began), to outlast the termination grace.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

STEPS = 10
STEP_S = 0.2
EVERY = 4


def _note(directory: str, name: str, text: str, *, append: bool = False) -> None:
    path = Path(directory, name)
    if append:
        with path.open("a") as handle:
            handle.write(text + "\n")
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class SlowState:
    """A state entry whose ``state_dict`` takes ``seconds`` once a preemption began (its checkpoint outlasts the
    grace); before that it is instant, so the periodic checkpoints are not slowed."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.stopping = False

    def state_dict(self) -> dict[str, Any]:
        if self.stopping:
            time.sleep(self.seconds)
        return {"seconds": self.seconds}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seconds = float(state["seconds"])


def train(
    steps: int = STEPS,
    step_seconds: float = STEP_S,
    directory: str = ".",
    run: str = "a",
    every: int = EVERY,
    slow_rank: int = -1,
    slow_save_s: float = 0.0,
) -> list[float]:
    """Train; resume from the task's checkpoint when there is one.

    Args:
        steps: optimizer steps in all.
        step_seconds: seconds each step lasts (its work).
        directory: where the notes go (see the module docstring).
        run: this run's name in the notes.
        every: save a checkpoint every this many steps.
        slow_rank: a rank that comes late to each all-reduce (-1: none).
        slow_save_s: seconds the checkpoint at a preemption takes (0: instant).

    Returns:
        The final weights and bias.
    """
    import torch
    import torch.distributed as dist

    from pytorch_core.checkpoint import load_checkpoint, save_checkpoint
    from pytorch_core.preemption import on_preemption
    from pytorch_core.progress import report_progress

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    _note(directory, f"pid-{run}-{rank}", str(os.getpid()))
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    # SGD with momentum by hand: the momentum is a plain value of the state (restored into the mapping), and the
    # ranks skip torch.optim's first import of torch._dynamo (seconds of CPU per rank, which the drills need not pay).
    state: dict[str, Any] = {"model": model, "momentum": [torch.zeros_like(p) for p in model.parameters()]}
    slow = SlowState(slow_save_s)
    if slow_save_s:
        state["slow"] = slow

    def stopping(step: int) -> None:
        slow.stopping = True
        _note(directory, f"stop-{run}-{rank}", str(step))

    on_preemption(stopping)
    start = load_checkpoint(state)
    momentum = state["momentum"]
    _note(directory, f"start-{run}-{rank}", str(start))
    for step in range(start, steps):
        generator = torch.Generator().manual_seed(1000 * step + rank)
        x = torch.randn(8, 4, generator=generator)
        loss = torch.nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
        model.zero_grad()
        loss.backward()
        if rank == slow_rank:
            time.sleep(step_seconds)
        waiting = slow_rank >= 0 and rank != slow_rank
        if waiting:
            _note(directory, f"collective-{run}-{rank}", f"enter {step + 1} {time.time()}", append=True)
        for parameter in model.parameters():
            assert parameter.grad is not None
            dist.all_reduce(parameter.grad)
            parameter.grad /= world
        if waiting:
            _note(directory, f"collective-{run}-{rank}", f"left {step + 1} {time.time()}", append=True)
        with torch.no_grad():
            for parameter, velocity in zip(model.parameters(), momentum, strict=True):
                velocity.mul_(0.9).add_(parameter.grad)
                parameter.sub_(0.05 * velocity)
        if rank != slow_rank:
            time.sleep(step_seconds if slow_rank < 0 else step_seconds / 4)
        if rank == 0:
            _note(directory, f"steps-{run}", str(step + 1), append=True)
        if step == start:
            _note(directory, f"up-{run}-{rank}", str(time.time()))
        report_progress(step + 1, steps, loss=loss.detach())
        if (step + 1) % every == 0:
            save_checkpoint(state, step + 1)
    weights = [float(v) for v in torch.cat([model.weight.detach().flatten(), model.bias.detach()])]
    dist.destroy_process_group()
    return weights


def plain_loop() -> int:
    """A loop that uses none of the API (for the false-positive checks): all-reduces until it is stopped.

    Returns:
        Never returns before it is stopped (a SIGTERM ends it as under torchrun).
    """
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    directory = os.environ["PREEMPT_DRILL_DIR"]
    _note(directory, f"pid-plain-{dist.get_rank()}", str(os.getpid()))
    _note(directory, f"up-plain-{dist.get_rank()}", str(time.time()))
    for _ in range(100_000):
        dist.all_reduce(torch.ones(1))
        time.sleep(0.05)
    return 0
