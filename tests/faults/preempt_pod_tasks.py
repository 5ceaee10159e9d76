"""The preemption drills' loop as a flytekit task for the pod drill (``drills_preempt.run_pods``): each
``pyflyte-execute`` of it with the operator's variables is one pod of a PyTorchJob with one rank per pod. A module
of its own so that the local drills' launches never import flytekit.
"""

from __future__ import annotations

import os

from flytekitplugins_pytorch import pytorch_task
from tests.faults.preempt_tasks import train


@pytorch_task(workers_count=2)
def pod_train(steps: int, step_seconds: float, directory: str, every: int) -> list[float]:
    """Three pods, one rank each: the drill loop (``tests.faults.preempt_tasks.train``)."""
    return train(steps, step_seconds, directory, run=os.environ.get("PREEMPT_DRILL_RUN", "a"), every=every)
