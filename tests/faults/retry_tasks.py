"""A ``pytorch`` task for the retry drill: the MNIST example's training loop, plus a recoverable fault on one rank.

The task trains exactly like :func:`examples.mnist.workflow.train_mnist` (the same :func:`examples.mnist.train.train`
with the task checkpoint, so the same per-epoch checkpoint format and resume logic) and returns what the drill
compares between runs: per-epoch accuracies and losses, the weights as a file, and the epoch it resumed after.

The fault is switched on by the environment, not by an input, because Flyte retries a task with the same inputs:
with ``DRILL_RECOVERABLE_AT_EPOCH=K`` (and ``DRILL_RECOVERABLE_RANK``, default 1) that rank raises flytekit's
``FlyteRecoverableException`` from the loop's ``on_epoch_end`` hook after epoch ``K``. The loop calls that hook only
once rank 0 has written epoch ``K``'s checkpoint, so the retry is expected to resume after epoch ``K`` exactly.
"""

from __future__ import annotations

import hashlib
import logging
import os
from typing import NamedTuple

import flytekit
from flytekit.exceptions.user import FlyteRecoverableException
from flytekit.types.file import FlyteFile

from flytekitplugins_pytorch import pytorch_task

#: Epoch (1-based) after which the fault is raised; unset or empty: no fault.
FAIL_AT_EPOCH_ENV = "DRILL_RECOVERABLE_AT_EPOCH"
#: Global rank that raises (default 1).
FAIL_RANK_ENV = "DRILL_RECOVERABLE_RANK"
#: Message of the injected exception (the drill looks for it in error.pb).
FAULT_MESSAGE = "injected recoverable fault on rank {rank} after epoch {epoch}"


class RetryOutputs(NamedTuple):
    """Outputs of :func:`train_with_fault`."""

    accuracies: list[float]
    epoch_losses: list[float]
    weights: FlyteFile
    weights_sha256: str
    resumed_from_epoch: int


def _fault_plan() -> tuple[int, int]:
    """(epoch after which to raise, rank that raises) from the environment; epoch 0 means no fault."""
    raw_epoch = os.environ.get(FAIL_AT_EPOCH_ENV, "").strip()
    raw_rank = os.environ.get(FAIL_RANK_ENV, "").strip() or "1"
    if raw_epoch and not raw_epoch.isdigit():
        raise ValueError(
            f"{FAIL_AT_EPOCH_ENV}={raw_epoch!r} is not valid; use a positive epoch number or leave it unset"
        )
    if not raw_rank.isdigit():
        raise ValueError(f"{FAIL_RANK_ENV}={raw_rank!r} is not valid; use a global rank (0 or more)")
    return int(raw_epoch or 0), int(raw_rank)


@pytorch_task(workers_count=2, per_replica_cpu_request="500m", per_replica_memory_request="2Gi")
def train_with_fault(
    epochs: int = 3,
    batch_size: int = 128,
    seed: int = 1,
    train_limit: int = 2000,
    test_limit: int = 1000,
    data_dir: str = "",
) -> RetryOutputs:
    """Train the MNIST example on 3 ranks with the task checkpoint; optionally raise a recoverable fault.

    Args:
        epochs: passes over the training slice.
        batch_size: global batch size.
        seed: seeds the weights and the data order.
        train_limit: first N training images.
        test_limit: first N test images.
        data_dir: MNIST directory; empty: ``$MNIST_DATA_DIR``.

    Returns:
        Per-epoch accuracies and losses, the weights file, its SHA-256, and the epochs restored from the checkpoint.

    Raises:
        FlyteRecoverableException: on the chosen rank after the chosen epoch, when the fault is switched on.
    """
    import torch

    from examples.mnist.train import EpochStats, TrainConfig, train

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    fail_at, fail_rank = _fault_plan()
    rank = int(os.environ.get("RANK", "0"))

    def on_epoch_end(stats: EpochStats) -> None:
        # train() calls this on every rank only once rank 0 has written the epoch's checkpoint.
        if stats.epoch == fail_at and rank == fail_rank:
            raise FlyteRecoverableException(FAULT_MESSAGE.format(rank=rank, epoch=stats.epoch))

    config = TrainConfig(
        epochs=epochs, batch_size=batch_size, seed=seed, train_limit=train_limit, test_limit=test_limit,
        data_dir=data_dir, log_interval=1000,
    )  # fmt: skip
    ctx = flytekit.current_context()
    result = train(config, checkpoint=ctx.checkpoint, on_epoch_end=on_epoch_end)

    path = os.path.join(ctx.working_directory, "mnist_cnn.pt")
    if rank == 0:
        torch.save(result.state_dict, path)
    digest = hashlib.sha256()
    for name, tensor in sorted(result.state_dict.items()):
        digest.update(name.encode())
        digest.update(tensor.numpy().tobytes())
    return RetryOutputs(
        accuracies=result.accuracies,
        epoch_losses=result.epoch_losses,
        weights=FlyteFile(path),
        weights_sha256=digest.hexdigest(),
        resumed_from_epoch=result.resumed_from_epoch,
    )
