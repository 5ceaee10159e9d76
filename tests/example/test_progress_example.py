"""The MNIST example reports live progress through the front-end's ``report_progress``: every step, with the total,
the latest global loss and, after an epoch, the test accuracy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from examples.mnist.train import TrainConfig, train

SLICE = {
    "train_limit": 600, "test_limit": 200, "batch_size": 100, "test_batch_size": 200, "log_interval": 3,
    "learning_rate": 0.01,
}  # fmt: skip


@pytest.mark.slow  # trains on 600 real MNIST images for two epochs (a few seconds)
def test_the_training_loop_reports_each_step_with_loss_and_accuracy(mnist_dir: Path) -> None:
    calls: list[tuple[Any, ...]] = []

    def record(step: int, total: int, **metrics: float) -> None:
        calls.append((step, total, metrics))

    train(TrainConfig(epochs=2, data_dir=str(mnist_dir), **SLICE), report_progress=record)
    assert [c[0] for c in calls] == list(range(1, 13))  # 6 steps an epoch, 2 epochs
    assert {c[1] for c in calls} == {12}
    assert "loss" not in calls[1][2] and calls[2][2]["loss"] > 0  # the global loss from the first curve point on
    assert "accuracy" not in calls[5][2] and 0 < calls[6][2]["accuracy"] <= 100  # known after the first epoch
