"""The MNIST training loop: plain PyTorch, usable with or without Flyte, in one process or under torch.distributed.

Distribution rules this loop keeps (so that the world size changes the speed, not the result):

- The *global* batch is ``batch_size``. Each step takes the next ``batch_size`` indices of a permutation drawn from
  ``(seed, epoch)``; rank ``r`` of ``W`` trains on the ``r``-th of ``W`` near-equal slices of that batch (sizes differ
  by at most one, so any ``batch_size`` works). Each rank scales its summed loss by ``W / len(global batch)``;
  DistributedDataParallel divides the summed gradients by ``W``, which gives exactly the gradient of the mean loss
  over the global batch. The model has no BatchNorm or dropout, so nothing else depends on the split.
- Test accuracy is computed on disjoint slices of the test set and summed as integer counts across ranks.
- The state after every epoch (model, optimizer, scheduler, epoch, history) can be saved and restored; because the
  permutation of an epoch is a function of ``(seed, epoch)`` and there is no other randomness, a resumed run ends
  bit-for-bit where an uninterrupted run with the same inputs and world size ends. For that, DDP's gradient buckets
  are settled before the first step (see :func:`_settle_ddp_buckets`): otherwise the first step of *every* run, fresh
  or resumed, would use a different bucket layout than the rest, and with 3+ ranks a different summation order.

Device and backend: NCCL on ``cuda:<local index>`` when every rank on this host has its own GPU, otherwise gloo on
CPU (one log line says why). Ranks that share the CPUs of one host split its cores between them.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import io
import json
import logging
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from .data import RawSplit, load_raw_split, normalize, prepare_mnist
from .model import Net

logger = logging.getLogger(__name__)

_LOOPBACK = {"localhost", "127.0.0.1", "::1"}


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Hyperparameters and data selection.

    Attributes:
        batch_size: global batch size (split across ranks). 192: 313 steps per epoch. Fewer, larger steps cost less
            (each step pays a fixed overhead and an all-reduce between the ranks; CPU time of one epoch on 3 ranks
            sharing 2 cores: 21 s at 128, 20 s at 192, 17 s at 256, on a loaded machine), but too few steps learn
            less in one epoch (test accuracy over seeds 1-6, with the learning rate scaled along: mean 99.18% at
            128, 99.16% at 192, 99.09% at 256, about 98.8% at 512).
        test_batch_size: batch size for evaluation (per rank). 500: the first convolution's output is 13 MB (51 MB
            at 2000, when every rank's evaluation set the run's memory peak), and on one thread 500 was the fastest
            of 250-2000 (0.14 s for a rank's 3,333 test images, 0.20 s at 2000).
        epochs: passes over the training set.
        learning_rate: peak learning rate of the one-cycle schedule (Adam).
        adam_beta1: Adam's ``beta1``, the decay of its running mean of gradients: the role momentum plays in the
            classic example's SGD (named after the optimizer that uses it).
        seed: seeds the initial weights and every epoch's permutation.
        log_interval: log the loss every this many steps.
        curve_interval: record the loss for the curve (the Deck's chart) every this many steps, or every
            ``log_interval`` steps when that is smaller. 10: one epoch of 313 steps draws 32 points, where the 4 printed
            lines would draw 4; each point costs one all-reduce of one number, nothing next to a step's gradients.
        log_ranks: the ranks that log progress lines: ``"0"`` (the default: the loss in them is the global loss,
            the same on every rank), ``"all"``, or comma-separated ranks such as ``"0,2"``.
        label_smoothing: cross-entropy label smoothing; 0.1 adds about 0.1-0.2 points of test accuracy here.
        train_limit: use only the first ``train_limit`` training images (0: all 60,000), for quick tests.
        test_limit: use only the first ``test_limit`` test images (0: all 10,000), for quick tests.
        data_dir: where the MNIST files are (see :func:`examples.mnist.data.prepare_mnist`).
    """

    batch_size: int = 192
    test_batch_size: int = 500
    epochs: int = 1
    learning_rate: float = 0.03
    adam_beta1: float = 0.9
    seed: int = 1
    log_interval: int = 100
    curve_interval: int = 10
    log_ranks: str = "0"
    label_smoothing: float = 0.1
    train_limit: int = 0
    test_limit: int = 0
    data_dir: str = ""

    def __post_init__(self) -> None:
        positive = ("batch_size", "test_batch_size", "epochs", "log_interval", "curve_interval")
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"TrainConfig.{name}={value!r} is not a positive integer; use e.g. 1 or more")
        for name in ("train_limit", "test_limit"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"TrainConfig.{name}={value!r} is negative; use 0 (all data) or a positive count")
        if not (self.learning_rate > 0 and math.isfinite(self.learning_rate)):
            raise ValueError(f"TrainConfig.learning_rate={self.learning_rate!r} is not positive; use e.g. 0.01")
        if not 0 <= self.adam_beta1 < 1:
            raise ValueError(f"TrainConfig.adam_beta1={self.adam_beta1!r} is out of range; use 0 <= beta1 < 1")
        ranks = self.log_ranks.replace(" ", "").split(",")
        if self.log_ranks.strip() != "all" and not all(r.isdigit() for r in ranks):
            raise ValueError(
                f"TrainConfig.log_ranks={self.log_ranks!r} is not valid; use 'all' or comma-separated ranks such as "
                "'0' or '0,2'"
            )
        if not 0 <= self.label_smoothing < 1:
            raise ValueError(f"TrainConfig.label_smoothing={self.label_smoothing!r} is out of range; use 0 <= x < 1")

    def logs_on(self, rank: int) -> bool:
        """Whether ``rank`` logs progress lines (see ``log_ranks``).

        Args:
            rank: a global rank.

        Returns:
            True for the ranks ``log_ranks`` names.
        """
        if self.log_ranks.strip() == "all":
            return True
        return str(rank) in self.log_ranks.replace(" ", "").split(",")

    def fingerprint(self) -> str:
        """A short hash of everything that shapes the trajectory (not the logging settings or ``data_dir``).

        Returns:
            16 hex digits; a checkpoint is only resumed by a run with the same fingerprint.
        """
        ignored = ("log_interval", "curve_interval", "log_ranks", "data_dir")
        shaping = {k: v for k, v in dataclasses.asdict(self).items() if k not in ignored}
        return hashlib.sha256(json.dumps(shaping, sort_keys=True).encode()).hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class DistInfo:
    """Where this process sits in the job.

    Attributes:
        rank: global rank.
        world_size: number of ranks.
        device: the device this rank computes on.
        backend: ``"nccl"``, ``"gloo"``, or ``""`` when single-process (no process group).
    """

    rank: int
    world_size: int
    device: torch.device
    backend: str


@dataclasses.dataclass(frozen=True)
class EpochStats:
    """What one finished epoch produced (passed to ``on_epoch_end``).

    Attributes:
        epoch: 1-based epoch number.
        test_accuracy: test accuracy after the epoch, in percent.
        mean_loss: mean training loss over the epoch (all ranks).
    """

    epoch: int
    test_accuracy: float
    mean_loss: float


@dataclasses.dataclass
class TrainResult:
    """The outcome of :func:`train` (meaningful on every rank; rank 0 reports it).

    Attributes:
        accuracies: test accuracy in percent after each epoch.
        epoch_losses: mean training loss of each epoch.
        loss_curve: ``(global step, mean loss since the previous point, all ranks)`` pairs, one every
            ``min(curve_interval, log_interval)`` steps and at the end of each epoch.
        steps_per_epoch: optimizer steps in one epoch; epoch ``e`` (from 1) ends at global step
            ``e * steps_per_epoch``.
        state_dict: the trained weights on CPU.
        resumed_from_epoch: epochs restored from a checkpoint (0: fresh start).
        world_size: number of ranks that trained.
        backend: process-group backend (``""`` single process).
        device: device type used.
        train_seconds: wall time of the epochs run by this invocation (training and evaluation).
        threads: intra-op threads each rank used.
    """

    accuracies: list[float]
    epoch_losses: list[float]
    loss_curve: list[tuple[float, float]]
    steps_per_epoch: int
    state_dict: dict[str, torch.Tensor]
    resumed_from_epoch: int
    world_size: int
    backend: str
    device: str
    train_seconds: float
    threads: int


class CheckpointStore(Protocol):
    """The two methods of ``flytekit.current_context().checkpoint`` that the loop uses."""

    def read(self) -> bytes | None:
        """Return the previous attempt's checkpoint, or ``None``."""

    def write(self, b: bytes) -> None:
        """Save this attempt's checkpoint."""


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.strip() else default


def _host_placement(rank: int, world_size: int) -> tuple[int, int]:
    """Return (ranks on this host, this rank's index among them).

    A loopback master address means every rank runs on this machine (a local run), whatever LOCAL_WORLD_SIZE says
    about the simulated node; otherwise torch's LOCAL_RANK / LOCAL_WORLD_SIZE are authoritative.
    """
    if os.environ.get("MASTER_ADDR", "127.0.0.1") in _LOOPBACK:
        return world_size, rank
    return _env_int("LOCAL_WORLD_SIZE", 1), _env_int("LOCAL_RANK", 0)


def choose_device(rank: int, world_size: int) -> tuple[torch.device, str, str]:
    """Pick the device and process-group backend for this rank.

    Args:
        rank: global rank.
        world_size: number of ranks.

    Returns:
        ``(device, backend, reason)``; backend is ``""`` for a single process, ``reason`` is a one-line explanation.
    """
    on_host, index = _host_placement(rank, world_size)
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus and on_host <= gpus:
        return torch.device("cuda", index), ("nccl" if world_size > 1 else ""), f"{on_host} rank(s), {gpus} GPU(s)"
    backend = "gloo" if world_size > 1 else ""
    if gpus:
        # NCCL cannot put two ranks on one GPU; gloo on CPU is slow but always works.
        return torch.device("cpu"), backend, f"{on_host} ranks on this host but only {gpus} GPU(s): CPU with gloo"
    return torch.device("cpu"), backend, "no CUDA device: CPU with gloo" if backend else "no CUDA device: CPU"


def _set_threads(device: torch.device, rank: int, world_size: int) -> int:
    if device.type != "cpu" or os.environ.get("OMP_NUM_THREADS"):
        return torch.get_num_threads()
    on_host, _ = _host_placement(rank, world_size)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = max(1, cpus // max(1, on_host))  # oversubscribed threads thrash; an idle core is cheaper
    torch.set_num_threads(threads)
    return threads


def init_distributed(timeout: datetime.timedelta = datetime.timedelta(minutes=10)) -> DistInfo:
    """Join the process group described by the torch.distributed environment (RANK, WORLD_SIZE, MASTER_*).

    Without those variables (or with WORLD_SIZE=1) this is a single-process run and no group is created.

    Args:
        timeout: collective timeout for the group.

    Returns:
        This rank's :class:`DistInfo`.
    """
    world_size = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    device, backend, reason = choose_device(rank, world_size)
    if _host_placement(rank, world_size)[1] == 0:
        logger.info("rank %d/%d: %s, device %s (%s)", rank, world_size, backend or "single process", device, reason)
    if backend and not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(backend=backend, timeout=timeout)
    return DistInfo(rank=rank, world_size=world_size, device=device, backend=backend)


def epoch_permutation(seed: int, epoch: int, n: int) -> torch.Tensor:
    """The order of the training set in ``epoch`` (0-based): a function of ``(seed, epoch)`` only.

    Args:
        seed: the run's seed.
        epoch: 0-based epoch index.
        n: training set size.

    Returns:
        A permutation of ``range(n)``.
    """
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=generator)


def rank_slice(size: int, rank: int, world_size: int) -> slice:
    """This rank's part of a global batch of ``size`` items: near-equal contiguous slices, in rank order.

    Args:
        size: global batch size.
        rank: global rank.
        world_size: number of ranks.

    Returns:
        The slice (possibly empty when ``size < world_size``).
    """
    return slice(size * rank // world_size, size * (rank + 1) // world_size)


def _all_sum(values: list[float], info: DistInfo) -> list[float]:
    if not info.backend:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=info.device)
    dist.all_reduce(t)
    return t.tolist()


def to_inputs(images: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Turn a batch of uint8 images into the network's input on ``device``.

    The bytes travel (to a GPU, a quarter of the float32 size) and are normalized there; on CPU the batch is laid out
    channels-last, the layout oneDNN's convolutions run fastest in.

    Args:
        images: uint8 ``(B, 1, 28, 28)``.
        device: where the model is.

    Returns:
        float32 ``(B, 1, 28, 28)`` on ``device``.
    """
    x = normalize(images.to(device, non_blocking=True))
    return x.contiguous(memory_format=torch.channels_last) if device.type == "cpu" else x


@torch.no_grad()
def evaluate(model: nn.Module, test: RawSplit, info: DistInfo, batch_size: int) -> float:
    """Test accuracy in percent; each rank scores a disjoint slice, counts are summed exactly.

    Args:
        model: the model (DDP-wrapped or not).
        test: the test split.
        info: this rank's placement.
        batch_size: evaluation batch size.

    Returns:
        Accuracy over the whole test set, in percent.
    """
    model.eval()
    part = rank_slice(len(test), info.rank, info.world_size)
    correct = 0
    module = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
    for start in range(part.start, part.stop, batch_size):
        stop = min(start + batch_size, part.stop)
        x = to_inputs(test.images[start:stop], info.device)
        y = test.labels[start:stop].to(info.device, non_blocking=True).long()
        correct += int((module(x).argmax(dim=1) == y).sum())
    total_correct, total = _all_sum([float(correct), float(part.stop - part.start)], info)
    model.train()
    return 100.0 * total_correct / total


def _serialize(obj: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def _broadcast_bytes(payload: bytes | None, info: DistInfo) -> bytes | None:
    if not info.backend:
        return payload
    holder = [payload]
    dist.broadcast_object_list(holder, src=0)
    return holder[0]


def _fused_ok(device: torch.device) -> bool:
    return device.type in ("cpu", "cuda")


def _settle_ddp_buckets(model: nn.Module, sample: torch.Tensor) -> None:
    """Run one backward pass of a zero loss so that DDP fixes its gradient buckets before training starts.

    DDP first groups gradients into buckets in parameter order and regroups them after the first backward pass, in
    the order the gradients became ready. Each gradient's offset in its bucket decides in which order gloo's (and
    NCCL's) ring sums the ranks' values, and with three or more ranks floating-point addition in another order gives
    another result. Without this, the step that ran with the first layout would be step 1 of epoch 1 in an
    uninterrupted run but step 1 of the resumed epoch in a retry, and the two runs would drift apart by rounding.

    Args:
        model: the DDP-wrapped model (in training mode; it has no BatchNorm or dropout, so a forward pass changes
            nothing but the gradients, which are cleared again).
        sample: a small input batch on the model's device.
    """
    (model(sample).sum() * 0.0).backward()
    model.zero_grad(set_to_none=True)


def prepare_data(data_dir: str, info: DistInfo) -> Path:
    """Find, download or verify the data once per host, so that a data error is one rank's, reported once.

    The first rank of each host prepares the cache (:func:`~examples.mnist.data.prepare_mnist`) while the others
    wait in a barrier; they then read the verified files from that cache without trying a download. When the data is
    missing, only that rank raises :class:`~examples.mnist.data.MnistDataError` and the launcher names it as the
    failure; the waiting ranks are its collateral, not three copies of the same message.

    Args:
        data_dir: see :func:`~examples.mnist.data.prepare_mnist`.
        info: this rank's place in the job.

    Returns:
        The cache directory with the four verified raw files.

    Raises:
        examples.mnist.data.MnistDataError: the data cannot be found, downloaded or verified (first rank of a host).
    """
    if not info.backend:
        return prepare_mnist(data_dir)
    first_on_host = _host_placement(info.rank, info.world_size)[1] == 0
    directory = prepare_mnist(data_dir) if first_on_host else None
    dist.barrier()
    return directory if directory is not None else prepare_mnist(data_dir, download=False)


WARMUP_FRACTION = 0.25
"""The share of the steps in which the one-cycle schedule rises to its peak learning rate."""


def warmup_fraction(total_steps: int) -> float:
    """`OneCycleLR`'s ``pct_start`` for a run of `total_steps`: `WARMUP_FRACTION`, except where torch's schedule
    would divide by zero.

    `OneCycleLR` ends the warm-up at step ``pct_start * total_steps - 1`` and divides by that step's distance from
    step 0, so with 4 steps (``--train_limit`` 577 to 768 at the default batch of 192, one epoch) a quarter fails with
    ``ZeroDivisionError``. There the warm-up takes half the steps (2 up, 2 down).

    Args:
        total_steps: optimizer steps of the whole run.

    Returns:
        float: the ``pct_start`` to use.
    """
    return WARMUP_FRACTION if WARMUP_FRACTION * total_steps != 1 else 0.5


def train(
    config: TrainConfig,
    checkpoint: CheckpointStore | None = None,
    on_epoch_end: Callable[[EpochStats], None] | None = None,
    on_log: Callable[[int, dict[str, float]], None] | None = None,
    report_progress: Callable[..., None] | None = None,
) -> TrainResult:
    """Train :class:`~examples.mnist.model.Net` on MNIST; call on every rank (or in a single process).

    Args:
        config: hyperparameters and data selection.
        checkpoint: where rank 0 saves the state after each epoch and reads a previous attempt's state from
            (``flytekit.current_context().checkpoint`` fits). A checkpoint written with different shaping inputs
            (see :meth:`TrainConfig.fingerprint`) is ignored with a log line.
        on_epoch_end: called on every rank after each epoch's checkpoint is written (the ranks wait for rank 0's
            write, so a rank that raises in it cannot cut that write short).
        on_log: called on rank 0 with ``(global step, {"loss": ..., "lr": ..., "accuracy": ...})`` (tracking hooks).
        report_progress: the front-end's ``report_progress``, called on every rank after each step with the global
            step and the total, with the global loss at each point of the loss curve, and once more at the end of
            each epoch with its test accuracy (live progress; it costs a clock read).

    Returns:
        The :class:`TrainResult` (identical on every rank).

    Raises:
        examples.mnist.data.MnistDataError: the data cannot be found, downloaded or verified.
    """
    setup_started = time.perf_counter()
    info = init_distributed()
    threads = _set_threads(info.device, info.rank, info.world_size)
    joined = time.perf_counter()
    directory = prepare_data(config.data_dir, info)
    train_set = load_raw_split(directory, "train", config.train_limit)
    test_set = load_raw_split(directory, "test", config.test_limit)
    loaded = time.perf_counter()

    torch.manual_seed(config.seed)  # identical initial weights on every rank and for every world size
    net = Net().to(info.device)
    if info.device.type == "cpu":
        net = net.to(memory_format=torch.channels_last)
    model: nn.Module = nn.parallel.DistributedDataParallel(net) if info.backend else net
    if info.backend:
        _settle_ddp_buckets(model, to_inputs(train_set.images[:1], info.device))
    # fused: one kernel updates every parameter (CPU and CUDA), instead of several small ops per tensor and step.
    optimizer = torch.optim.Adam(
        net.parameters(), lr=config.learning_rate, betas=(config.adam_beta1, 0.999), fused=_fused_ok(info.device)
    )
    steps_per_epoch = math.ceil(len(train_set) / config.batch_size)
    log_progress = config.logs_on(info.rank)
    total_steps = config.epochs * steps_per_epoch
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=config.learning_rate, total_steps=total_steps, pct_start=warmup_fraction(total_steps)
    )

    curve_every = min(config.curve_interval, config.log_interval)
    accuracies: list[float] = []
    epoch_losses: list[float] = []
    loss_curve: list[tuple[float, float]] = []
    start_epoch = 0
    previous = _broadcast_bytes(checkpoint.read() if (checkpoint is not None and info.rank == 0) else None, info)
    if previous:
        state = torch.load(io.BytesIO(previous), map_location=info.device, weights_only=False)
        if state.get("fingerprint") != config.fingerprint():
            if info.rank == 0:
                logger.warning("ignoring a checkpoint written with different inputs (%s)", state.get("fingerprint"))
        else:
            net.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
            start_epoch = int(state["epoch"])
            accuracies, epoch_losses = list(state["accuracies"]), list(state["epoch_losses"])
            loss_curve = [tuple(p) for p in state["loss_curve"]]
            if info.rank == 0:
                logger.info("resuming after epoch %d of %d from the task checkpoint", start_epoch, config.epochs)

    started = time.perf_counter()
    w = info.world_size
    if info.rank == 0:
        logger.info(
            "training: %d steps of %d images per epoch, %d epoch(s), %d rank(s) (%d-%d images each per step), "
            "%d intra-op thread(s) per rank; set up in %.2f s (process group %.2f s, data %.2f s, model and "
            "checkpoint %.2f s)",
            steps_per_epoch,
            config.batch_size,
            config.epochs,
            w,
            config.batch_size // w,
            -(-config.batch_size // w),
            threads,
            started - setup_started,
            joined - setup_started,
            loaded - joined,
            started - loaded,
        )
    total_steps = config.epochs * steps_per_epoch
    for epoch in range(start_epoch, config.epochs):
        model.train()
        order = epoch_permutation(config.seed, epoch, len(train_set))
        interval_loss = torch.zeros((), dtype=torch.float64)
        curve_loss = torch.zeros((), dtype=torch.float64)
        epoch_loss = torch.zeros((), dtype=torch.float64)
        curve_done = 0
        for step in range(steps_per_epoch):
            batch = order[step * config.batch_size : (step + 1) * config.batch_size]
            mine = batch[rank_slice(len(batch), info.rank, w)]
            x = to_inputs(train_set.images[mine], info.device)
            y = train_set.labels[mine].to(info.device, non_blocking=True).long()
            summed = F.cross_entropy(model(x), y, reduction="sum", label_smoothing=config.label_smoothing)
            loss = summed * (w / len(batch))  # DDP averages over ranks -> gradient of the global-batch mean
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            share = summed.detach().double().cpu() / len(batch)  # this rank's share of the global mean loss
            interval_loss += share
            curve_loss += share
            epoch_loss += share
            done = step + 1
            last = done == steps_per_epoch
            printed = done % config.log_interval == 0 or last
            point: dict[str, float] = {}  # a new point of the loss curve, for the live progress
            if done % curve_every == 0 or printed:
                since = done - curve_done
                global_curve, global_interval = _all_sum(
                    [float(curve_loss) / since, float(interval_loss) / ((done - 1) % config.log_interval + 1)], info
                )
                curve_loss.zero_()
                curve_done = done
                global_step = epoch * steps_per_epoch + done
                loss_curve.append((global_step, global_curve))
                point["loss"] = global_curve
            if printed:
                interval_loss.zero_()
                if log_progress:
                    logger.info(
                        "rank %d epoch %d/%d step %d/%d loss %.4f",
                        info.rank,
                        epoch + 1,
                        config.epochs,
                        done,
                        steps_per_epoch,
                        global_interval,
                    )
                if on_log is not None and info.rank == 0:
                    on_log(global_step, {"loss": global_interval, "lr": scheduler.get_last_lr()[0]})
            if report_progress is not None:
                # The loss only when it is a new point of the curve: the page then draws the curve's points.
                report_progress(epoch * steps_per_epoch + done, total_steps, **point)
        accuracy = evaluate(model, test_set, info, config.test_batch_size)
        (mean_loss,) = _all_sum([float(epoch_loss) / steps_per_epoch], info)
        accuracies.append(accuracy)
        epoch_losses.append(mean_loss)
        if report_progress is not None:
            # The epoch's test accuracy at its last step: the last epoch's reaches the run's final line too.
            report_progress((epoch + 1) * steps_per_epoch, total_steps, accuracy=accuracy)
        if info.rank == 0:
            logger.info(
                "epoch %d/%d: test accuracy %.2f%%, train loss %.4f (mean over the epoch)",
                epoch + 1,
                config.epochs,
                accuracy,
                mean_loss,
            )
            if on_log is not None:
                on_log((epoch + 1) * steps_per_epoch, {"accuracy": accuracy, "epoch_loss": mean_loss})
            if checkpoint is not None:
                checkpoint.write(
                    _serialize(
                        {
                            "fingerprint": config.fingerprint(),
                            "epoch": epoch + 1,
                            "model": net.state_dict(),
                            "optimizer": optimizer.state_dict(),
                            "scheduler": scheduler.state_dict(),
                            "accuracies": accuracies,
                            "epoch_losses": epoch_losses,
                            "loss_curve": loss_curve,
                        }
                    )
                )
        if checkpoint is not None and info.backend:
            dist.barrier()  # a fault on another rank right after this epoch must not kill rank 0 mid-write
        if on_epoch_end is not None:
            on_epoch_end(EpochStats(epoch=epoch + 1, test_accuracy=accuracy, mean_loss=mean_loss))
    seconds = time.perf_counter() - started

    state_dict = {k: v.detach().to("cpu").contiguous() for k, v in net.state_dict().items()}
    return TrainResult(
        accuracies=accuracies,
        epoch_losses=epoch_losses,
        loss_curve=loss_curve,
        steps_per_epoch=steps_per_epoch,
        state_dict=state_dict,
        resumed_from_epoch=start_epoch,
        world_size=w,
        backend=info.backend,
        device=info.device.type,
        train_seconds=seconds,
        threads=threads,
    )


def main() -> None:
    """Train with default inputs from the command line (``python -m examples.mnist.train`` or under torchrun)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    result = train(TrainConfig(data_dir=os.environ.get("MNIST_DATA_DIR", "")))
    if result and _env_int("RANK", 0) == 0:
        print(json.dumps({"accuracies": result.accuracies, "train_seconds": round(result.train_seconds, 2)}))
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
