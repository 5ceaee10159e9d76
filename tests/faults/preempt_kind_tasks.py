"""The preemption drills' loop (``tests.faults.preempt_tasks.train``) as the tasks of the kind drills
(``tests/faults/test_preemption_kinds.py``): three pods of one rank each on every kind's e2e player. A module of its
own so that the local drills' launches never import flytekit.

- ``kind_train``: the default restart policy (``Never``): a JobSet restarts itself after a preemption (its
  ``Preempted`` rule), a TrainJob of the default runtime fails and Flyte retries it;
- ``kind_train_exit_code``: ``restart_policy="ExitCode"``, as a PyTorchJob keeps an attempt alive through a
  preemption: the training operator recreates each pod that exited 200.
"""

from __future__ import annotations

import os

from flytekitplugins_pytorch import pytorch_task
from tests.faults.preempt_tasks import train


def _train(steps: int, step_seconds: float, directory: str, every: int, slow_save_s: float) -> list[float]:
    run = os.environ.get("PREEMPT_DRILL_RUN", "a")
    return train(steps, step_seconds, directory, run=run, every=every, slow_save_s=slow_save_s)


@pytorch_task(workers_count=2)
def kind_train(steps: int, step_seconds: float, directory: str, every: int, slow_save_s: float) -> list[float]:
    """Three pods, one rank each, restart policy Never."""
    return _train(steps, step_seconds, directory, every, slow_save_s)


@pytorch_task(workers_count=2, restart_policy="ExitCode")
def kind_train_exit_code(
    steps: int, step_seconds: float, directory: str, every: int, slow_save_s: float
) -> list[float]:
    """Three pods, one rank each, restart policy ExitCode."""
    return _train(steps, step_seconds, directory, every, slow_save_s)
