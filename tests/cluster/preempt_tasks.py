"""The tasks of the cluster tier's preemption scenarios (`tests/cluster/test_preemption.py`): the preemption drills'
loop (`tests.faults.preempt_tasks.train`: three ranks, an all-reduce each step, a checkpoint every few steps, the
project's `load_checkpoint`, `save_checkpoint`, `on_preemption` and `report_progress`), with the default settings a
user gets (`restart_policy="Never"`, no retries), packaged by `pyflyte package` and run in pods by the node agent.

Each run of a rank (a pod's process) writes its notes under `directory`, a folder of this machine (the node agent runs
pods as local processes), under a run name of its own (`<pod>-<pid>`): `start-<run>-<rank>` (the step it started
from), `stop-<run>-<rank>` (the step it stopped after, at a preemption), `up-<run>-<rank>` (its first step done),
`steps-<run>` (rank 0's steps). The scenario reads them back by rank, in the order the runs started.
"""

from __future__ import annotations

import os
import socket

from flytekitplugins_pytorch import pytorch_task


def _train(steps: int, step_seconds: float, directory: str, every: int) -> list[float]:
    from tests.faults.preempt_tasks import train

    run = f"{socket.gethostname()}-{os.getpid()}"
    return train(steps, step_seconds, directory, run=run, every=every)


@pytorch_task(workers_count=2)
def preempt_default(steps: int, step_seconds: float, directory: str, every: int) -> list[float]:
    """Three pods of one rank each, every setting the default (restart policy Never)."""
    return _train(steps, step_seconds, directory, every)


@pytorch_task(workers_count=2, per_replica_cpu_request="500m", queue="preempt-lq")
def preempt_queued(steps: int, step_seconds: float, directory: str, every: int) -> list[float]:
    """The same, admitted by Kueue through the LocalQueue `preempt-lq` (the scenario makes it), each pod requesting
    half a CPU so that the queue's quota counts it."""
    return _train(steps, step_seconds, directory, every)
