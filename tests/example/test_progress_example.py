"""The MNIST example reports live progress through the front-end's ``report_progress``: every step, with the total;
the global loss at each point of the loss curve, and each epoch's test accuracy at its last step (the last one
reaches the run's final line)."""

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

    result = train(TrainConfig(epochs=2, data_dir=str(mnist_dir), **SLICE), report_progress=record)
    # 6 steps an epoch, 2 epochs; each epoch's last step once more, with its test accuracy.
    assert [c[0] for c in calls] == [1, 2, 3, 4, 5, 6, 6, 7, 8, 9, 10, 11, 12, 12]
    assert {c[1] for c in calls} == {12}
    # The loss at each point of the loss curve (what the Deck's Training tab draws), and only there: the Progress
    # page's curve then has the same points, not a held value repeated at every step.
    losses = [(c[0], c[2]["loss"]) for c in calls if "loss" in c[2]]
    assert [step for step, _ in losses] == [step for step, _ in result.loss_curve]
    assert [loss for _, loss in losses] == pytest.approx([loss for _, loss in result.loss_curve])
    accuracies = [c[2]["accuracy"] for c in calls if "accuracy" in c[2]]
    assert accuracies == pytest.approx(result.accuracies)  # the last epoch's included: the run's final line has it
    assert calls[-1] == (12, 12, {"accuracy": result.accuracies[-1]})
