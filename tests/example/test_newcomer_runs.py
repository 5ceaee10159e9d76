"""The MNIST example as a newcomer first runs it: a small ``--train_limit`` to try it, a data directory typed by hand.

- Every ``--train_limit`` trains: torch's ``OneCycleLR`` divided by zero for 4 optimizer steps (577 to 768 images at
  the default batch of 192, or 193 to 384 over 2 epochs).
- A mistyped ``MNIST_DATA_DIR`` (or ``data_dir``) is said, not silently replaced by the cache.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pytest
import torch

from examples.mnist.data import DATA_DIR_ENV, MnistDataWarning, prepare_mnist
from examples.mnist.train import WARMUP_FRACTION, TrainConfig, train, warmup_fraction

BATCH = TrainConfig.batch_size


def schedule_runs(total_steps: int) -> None:
    """Build the example's schedule for `total_steps` and step it to the end, as `train` does."""
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.03)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=0.03, total_steps=total_steps, pct_start=warmup_fraction(total_steps)
    )
    for _ in range(total_steps - 1):
        optimizer.step()
        scheduler.step()


#: Every total step count a run of 1 to 3 epochs over up to 60,000 images at the default batch can have.
TOTALS = sorted({epochs * math.ceil(limit / BATCH) for epochs in (1, 2, 3) for limit in range(1, 60_001, 1)})


def test_the_schedule_runs_for_every_train_limit() -> None:
    """Stepped to the end for every run of up to 12 steps; for longer runs, torch's divisor (the warm-up's last step,
    ``pct_start * total_steps - 1``; the annealing's length, ``0.75 * total_steps``) is not zero."""
    failed = []
    for total in [t for t in TOTALS if t <= 12]:
        try:
            schedule_runs(total)
        except ZeroDivisionError:
            failed.append(total)
    assert failed == []
    assert [t for t in TOTALS if warmup_fraction(t) * t - 1 == 0 or (1 - warmup_fraction(t)) * t == 0] == []
    assert 4 in TOTALS and max(TOTALS) == 3 * math.ceil(60_000 / BATCH)


def test_torchs_schedule_alone_fails_where_the_warmup_would_end_at_step_0() -> None:
    """The case the fraction avoids is real: a quarter of 4 steps ends the warm-up at step 0."""
    optimizer = torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=0.03)
    with pytest.raises(ZeroDivisionError):
        torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.03, total_steps=4, pct_start=WARMUP_FRACTION)
    assert [t for t in TOTALS if warmup_fraction(t) != WARMUP_FRACTION] == [4]  # only there is it changed


@pytest.mark.parametrize(("train_limit", "epochs"), [(577, 1), (600, 1), (768, 1), (193, 2), (384, 2), (1, 1)])
def test_a_small_train_limit_trains(train_limit: int, epochs: int) -> None:
    """What the newcomer ran (one process here; the ranks run the same function): `--train_limit 600` and friends."""
    result = train(TrainConfig(epochs=epochs, train_limit=train_limit, test_limit=200, log_interval=10_000))
    assert len(result.accuracies) == epochs and all(0 <= a <= 100 for a in result.accuracies)


# ---------------------------------------------------------------------------------------------------------------
# A data directory that is not there


def test_a_mistyped_data_dir_variable_is_said_even_with_a_cache(
    mnist_dir: Path, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    prepare_mnist(mnist_dir)  # the cache now holds the files: the case where the typo went unnoticed
    typo = str(tmp_path / "mnsit")
    monkeypatch.setenv(DATA_DIR_ENV, typo)
    with pytest.warns(MnistDataWarning) as said:
        assert prepare_mnist() == isolated_cache
    (message,) = [str(w.message) for w in said]
    assert f"{DATA_DIR_ENV}={typo!r} is not a directory" in message and str(isolated_cache) in message


def test_a_mistyped_data_dir_argument_is_said(mnist_dir: Path, isolated_cache: Path, tmp_path: Path) -> None:
    prepare_mnist(mnist_dir)
    with pytest.warns(MnistDataWarning, match=r"data_dir='.*nowhere' is not a directory"):
        prepare_mnist(tmp_path / "nowhere")


def test_an_existing_data_dir_and_no_setting_are_quiet(
    mnist_dir: Path, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", MnistDataWarning)
        prepare_mnist(mnist_dir)
        prepare_mnist()
        monkeypatch.setenv(DATA_DIR_ENV, str(mnist_dir))
        prepare_mnist()
