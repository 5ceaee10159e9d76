"""Workflows the Flyte scenarios of the cluster tier package (`pyflyte package`) and run on propeller: each wraps a
task of `tests.cluster.workflows` (or one of its own) in a one-node workflow, as `pyflyte run --remote` of a task does
(flyteadmin wraps a task it launches in a workflow of one node)."""

from __future__ import annotations

import os
import time

from flytekit import workflow

from flytekitplugins_pytorch import pytorch_task
from tests.cluster.workflows import reports_progress, sleeps


@pytorch_task(workers_count=1, retries=1)
def fails_first_attempt(recoverable: bool) -> int:
    """Rank 1 raises on the node's first attempt: `FlyteRecoverableException` when `recoverable`, else a plain
    `ValueError` (flytekit writes its error document NON_RECOVERABLE); the second attempt succeeds. One user retry
    allowed, so whether propeller retries is the connector's verdict alone."""
    import torch.distributed as dist
    from flytekit.exceptions.user import FlyteRecoverableException

    dist.init_process_group("gloo")
    attempt = int(os.environ.get("FLYTE_ATTEMPT_NUMBER", "0"))
    if dist.get_rank() == 1 and attempt == 0:
        message = "rank 1 cannot read shard 7: checksum mismatch"
        raise FlyteRecoverableException(message) if recoverable else ValueError(message)
    dist.barrier()
    dist.destroy_process_group()
    return attempt


@workflow
def wf_fails_first_attempt(recoverable: bool) -> int:
    return fails_first_attempt(recoverable=recoverable)


@workflow
def wf_sleeps(seconds: int) -> int:
    return sleeps(seconds=seconds)


@workflow
def wf_reports_progress(steps: int, hold_at: int) -> int:
    return reports_progress(steps=steps, hold_at=hold_at)


@pytorch_task(workers_count=1, retries=1)
def preemptible(seconds: int) -> int:
    """Joins the group and runs `seconds` (a worker evicted meanwhile is the preemption); one user retry allowed."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    marker = os.environ.get("E2E_MARKER_DIR")
    if marker:
        with open(os.path.join(marker, f"up-{dist.get_rank()}-{os.getpid()}"), "w") as f:
            f.write(str(os.getpid()))
    time.sleep(seconds)
    dist.barrier()
    return seconds


@workflow
def wf_preemptible(seconds: int) -> int:
    return preemptible(seconds=seconds)


@pytorch_task(workers_count=1, environment={f"SETTING_{i}": "v" for i in range(130)})
def env_heavy(x: int) -> int:
    """130 variables of its own: more than a TrainJob's trainer admits (spec.trainer.env maxItems 128), whatever the
    backend adds (with 120, the 8 entries the backend wrote in one execution made exactly 128, admitted); a
    PyTorchJob holds them."""
    return x


@workflow
def wf_env_heavy(x: int) -> int:
    return env_heavy(x=x)
