"""The training loop without Flyte: world-size invariance (1 vs 3 gloo ranks) and exact resume from a checkpoint."""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from examples.mnist.train import EpochStats, TrainConfig, rank_slice, train

#: 12 steps on a slice of real MNIST. The learning rate is the one that suits 12 steps: the default (tuned for a full
#: epoch's 313 steps) barely trains in 12, and a run that does not settle amplifies rounding differences.
SLICE = {
    "train_limit": 1200, "test_limit": 500, "batch_size": 100, "test_batch_size": 250, "log_interval": 5,
    "learning_rate": 0.01,
}  # fmt: skip


@pytest.mark.parametrize(
    ("size", "world"), [pytest.param(128, 3, id="uneven"), pytest.param(2, 3, id="fewer-than-ranks"),
                        pytest.param(99, 1, id="single")]
)  # fmt: skip
def test_rank_slices_partition_the_global_batch(size: int, world: int) -> None:
    parts = [range(size)[rank_slice(size, r, world)] for r in range(world)]
    assert [i for p in parts for i in p] == list(range(size))
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


class MemoryCheckpoint:
    """An in-memory stand-in for flytekit's checkpoint (read the previous attempt, write this one)."""

    def __init__(self, previous: bytes | None = None) -> None:
        self.previous = previous
        self.written: bytes | None = None

    def read(self) -> bytes | None:
        return self.previous

    def write(self, b: bytes) -> None:
        self.written = b


class Interrupted(Exception):
    """Raised by the test to simulate a pod lost after an epoch."""


def _stop_after_first_epoch(stats: EpochStats) -> None:
    if stats.epoch == 1:
        raise Interrupted


@pytest.mark.slow  # trains on 1200 real MNIST images (10-40 s)
def test_resume_after_interruption_matches_uninterrupted_run(mnist_dir: Path, monkeypatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "1")
    config = TrainConfig(epochs=2, data_dir=str(mnist_dir), **SLICE)
    straight = train(config)

    first = MemoryCheckpoint()
    with pytest.raises(Interrupted):
        train(config, checkpoint=first, on_epoch_end=_stop_after_first_epoch)
    assert first.written is not None
    resumed = train(config, checkpoint=MemoryCheckpoint(previous=first.written))

    assert resumed.resumed_from_epoch == 1 and straight.resumed_from_epoch == 0
    assert resumed.accuracies == straight.accuracies and resumed.epoch_losses == straight.epoch_losses
    for key, value in straight.state_dict.items():
        assert torch.equal(resumed.state_dict[key], value), key


@pytest.mark.slow  # trains on 1200 real MNIST images (10-40 s)
def test_checkpoint_from_other_inputs_is_ignored(mnist_dir: Path, monkeypatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "1")
    one = TrainConfig(epochs=1, data_dir=str(mnist_dir), **SLICE)
    store = MemoryCheckpoint()
    train(one, checkpoint=store)
    other = TrainConfig(epochs=1, seed=2, data_dir=str(mnist_dir), **SLICE)
    assert train(other, checkpoint=MemoryCheckpoint(previous=store.written)).resumed_from_epoch == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    ("log_ranks", "logging_ranks"),
    [pytest.param("0", [0], id="default"), pytest.param("all", [0, 1, 2], id="all"),
     pytest.param("0, 2", [0, 2], id="list")],
)  # fmt: skip
def test_log_ranks_selects_the_ranks_that_log_progress(log_ranks: str, logging_ranks: list[int]) -> None:
    config = TrainConfig(log_ranks=log_ranks)
    assert [r for r in range(3) if config.logs_on(r)] == logging_ranks


def test_fingerprint_ignores_logging_settings_only() -> None:
    base = TrainConfig(**SLICE)
    assert TrainConfig(**{**SLICE, "log_interval": 7}, log_ranks="all").fingerprint() == base.fingerprint()
    assert TrainConfig(**SLICE, adam_beta1=0.8).fingerprint() != base.fingerprint()


@pytest.mark.parametrize(
    ("field", "value", "allowed"),
    [
        pytest.param("adam_beta1", 1.0, "0 <= beta1 < 1", id="beta1"),
        pytest.param("batch_size", 0, "positive", id="batch-size"),
        pytest.param("log_ranks", "rank0", "'all' or comma-separated ranks", id="log-ranks"),
    ],
)
def test_bad_config_names_the_field_the_value_and_the_range(field: str, value: object, allowed: str) -> None:
    with pytest.raises(ValueError, match=rf"TrainConfig\.{field}={value!r} .*{allowed}"):
        TrainConfig(**{field: value})


class _Progress(logging.Handler):
    """Counts the loop's per-step progress lines."""

    def __init__(self) -> None:
        super().__init__()
        self.lines = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.lines += " step " in record.getMessage()


def _rank_main(rank: int, world: int, port: int, data_dir: str, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    progress = _Progress()
    log = logging.getLogger("examples.mnist.train")
    log.addHandler(progress)
    log.setLevel(logging.INFO)
    result = train(TrainConfig(epochs=1, data_dir=data_dir, **SLICE))
    gathered = [torch.zeros(1, dtype=torch.long) for _ in range(world)]
    torch.distributed.all_gather(gathered, torch.tensor([progress.lines]))
    if rank == 0:
        torch.save(
            {
                "accuracies": result.accuracies,
                "state": result.state_dict,
                "backend": result.backend,
                "progress_lines": [int(t) for t in gathered],
            },
            out,
        )
    torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_three_ranks_learn_what_one_rank_learns(mnist_dir: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "1")
    single = train(TrainConfig(epochs=1, data_dir=str(mnist_dir), **SLICE))
    out = tmp_path / "rank0.pt"
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    # The ranks start from a fork server, as the launcher's do, so each leaves through os._exit. Started with spawn,
    # a rank left through a full interpreter exit with gloo still running: DDP keeps the process group and its
    # threads (gloo_tcp_loop, pt_gloo_runloop) alive after destroy_process_group, and tearing them down during
    # finalization while a peer closed its sockets aborted the rank now and then (SIGABRT, "terminate called
    # without an active exception").
    args = (3, _free_port(), str(mnist_dir), str(out))
    mp.start_processes(_rank_main, args=args, nprocs=3, join=True, start_method="forkserver")
    multi = torch.load(out, weights_only=False)

    assert multi["backend"] == "gloo"
    assert multi["progress_lines"][0] > 0 and multi["progress_lines"][1:] == [0, 0]  # rank 0 only, by default
    assert abs(multi["accuracies"][0] - single.accuracies[0]) <= 0.4  # at most 2 of 500 test images differ
    for key, value in single.state_dict.items():
        torch.testing.assert_close(multi["state"][key], value, rtol=1e-3, atol=1e-4, msg=key)


def test_the_default_run_draws_a_loss_curve() -> None:
    """One epoch of the full training set at the defaults: 313 steps, a curve point every 10 (32 points), where the
    printed lines (every 100 steps) would give 4."""
    config = TrainConfig()
    steps = -(-60_000 // config.batch_size)
    every = min(config.curve_interval, config.log_interval)
    points = len({s for s in range(1, steps + 1) if s % every == 0 or s % config.log_interval == 0 or s == steps})
    assert points >= 30


@pytest.mark.slow  # trains on 1200 real MNIST images
def test_the_loss_curve_has_a_point_every_curve_interval(mnist_dir: Path, monkeypatch) -> None:
    """Points every ``curve_interval`` steps plus every printed step; each is the mean loss since the previous point,
    so, weighted by the steps each covers, they average to the epoch's mean loss."""
    monkeypatch.setenv("WORLD_SIZE", "1")
    result = train(TrainConfig(epochs=1, data_dir=str(mnist_dir), **{**SLICE, "log_interval": 4}, curve_interval=3))
    steps = [int(s) for s, _ in result.loss_curve]
    assert steps == [3, 4, 6, 8, 9, 12]  # 12 steps: every 3rd, the printed 4th and 8th, the last
    covered = [b - a for a, b in zip([0, *steps], steps, strict=False)]
    weighted = sum(n * loss for n, (_, loss) in zip(covered, result.loss_curve, strict=True)) / steps[-1]
    assert weighted == pytest.approx(result.epoch_losses[0], rel=1e-9)
