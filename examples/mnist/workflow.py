"""Distributed MNIST on Flyte: train with DistributedDataParallel on 3 replicas, then verify the saved weights.

Run locally (3 real processes; data from a local directory, or downloaded and cached on first use)::

    MNIST_DATA_DIR=../shared/data/mnist pyflyte run examples/mnist/workflow.py mnist_workflow

``pyflyte run examples/mnist/workflow.py mnist_workflow --help`` lists every input with one line of help. The run
prints one named result, ``MnistResult(accuracy=..., accuracies=[...], model=<weights file>, report=...)``.

On a cluster, the training task becomes a PyTorchJob with one master and two workers, each with 1 GPU (NCCL); on a
machine with fewer GPUs than ranks it falls back to gloo on CPU. Inputs beyond the classic ones:

- ``data_dir``: directory with the IDX files; empty means ``$MNIST_DATA_DIR``, else the cache
  ``~/.cache/flytekitplugins-pytorch/mnist``, else download from public mirrors (checked by SHA-256).
- ``train_limit`` / ``test_limit``: train / evaluate on the first N images only (0 = all); for quick tests.
- ``log_ranks``: which ranks print progress lines: ``0`` (the default), ``all``, or a list such as ``0,2`` (the loss
  they print is the same global loss on every rank). A string rather than a flag: flytekit declares boolean inputs
  twice on the ``pyflyte run`` command line, which makes click print a warning on every run.

Retries resume: after each epoch rank 0 writes the model, optimizer and schedule state to the task checkpoint, and
a retried attempt continues from the last finished epoch with the same final result as an uninterrupted run.
``MNIST_TRACKING=wandb,tensorboard`` (at registration and run time) turns on experiment tracking; see
:mod:`examples.mnist.tracking`. ``FLYTE_PYTORCH_INPROCESS=1`` runs the training in one process for debugging.

This module imports no torch at module level: ``pyflyte`` imports it to find the workflow (``--help`` stays quick),
and so does every rank process; the tasks import torch and the training code when they run.
"""

from __future__ import annotations

import dataclasses
import html
import logging
import os
from typing import NamedTuple

import flytekit
from flytekit import Deck, ImageSpec, Secret, task, workflow
from flytekit.deck import DeckField
from flytekit.types.file import FlyteFile

from flytekitplugins_pytorch import pytorch_task, report_progress

from . import tracking

logger = logging.getLogger(__name__)

#: The wheel ``python -m build`` writes (the package is not on an index yet); register from the repository root, where
#: this relative path points at it.
MNIST_WHEEL = "dist/flytekitplugins_pytorch-0.1.0-py3-none-any.whl"

#: The image that runs this example on a cluster, as a flytekit ImageSpec (the same content as ``Dockerfile.gpu``):
#: ``copy`` puts the wheel and the pins CI tested under /root/ and ``commands`` (run after the copy) installs the wheel
#: with its ``examples`` extra into the base image's Python (``python_exec``), whose torch 2.13.0 satisfies the pin.
#: Not used by local runs; pass ``container_image=mnist_image`` to the tasks to build and use it on registration.
mnist_image = ImageSpec(
    name="flytekitplugins-pytorch-mnist",
    base_image="pytorch/pytorch:2.13.0-cuda12.8-cudnn9-runtime",
    python_exec="/opt/conda/bin/python",
    copy=[MNIST_WHEEL, "constraints.txt"],
    commands=[f"uv pip install -c /root/constraints.txt '/root/{MNIST_WHEEL}[examples]'"],
)

_TRACKERS = tracking.enabled_trackers()
# Only a run that asks for W&B requests the secret, so the default run works on clusters that do not have it.
_EXTRA_TASK_OPTIONS: dict = (
    {
        "secret_requests": [Secret(group=tracking.WANDB_SECRET_GROUP, key=tracking.WANDB_SECRET_KEY)],
        "environment": {tracking.TRACKING_ENV: ",".join(_TRACKERS)},
    }
    if "wandb" in _TRACKERS
    else {"environment": {tracking.TRACKING_ENV: ",".join(_TRACKERS)}}
    if _TRACKERS
    else {}
)


@dataclasses.dataclass
class TrainingSummary:
    """What the training run did.

    Attributes:
        final_accuracy: test accuracy after the last epoch, in percent.
        epochs: epochs in the run (including resumed ones).
        resumed_from_epoch: epochs restored from the task checkpoint (0: fresh start).
        world_size: ranks that trained.
        backend: ``gloo``, ``nccl``, or empty for a single process.
        device: ``cpu`` or ``cuda``.
        train_seconds: wall time of the training loop (epochs and evaluation) on rank 0.
        parameters: trainable parameters of the model.
        global_batch_size: examples per optimizer step, over all ranks.
        test_examples: test images the accuracy was measured on.
    """

    final_accuracy: float
    epochs: int
    resumed_from_epoch: int
    world_size: int
    backend: str
    device: str
    train_seconds: float
    parameters: int
    global_batch_size: int
    test_examples: int


class TrainingOutputs(NamedTuple):
    """Outputs of :func:`train_mnist`."""

    accuracies: list[float]
    weights: FlyteFile
    summary: TrainingSummary


@dataclasses.dataclass
class EvaluationReport:
    """The independent check of the saved weights.

    Attributes:
        accuracy: test accuracy recomputed from the weights file, in percent.
        reported_accuracy: the accuracy the training task reported.
        matches: whether the two agree within ``tolerance``.
        tolerance: allowed difference in percentage points (floating point may flip a borderline prediction when
            the test set is split into different batches).
        text: a one-paragraph human-readable report.
    """

    accuracy: float
    reported_accuracy: float
    matches: bool
    tolerance: float
    text: str


def _svg_panel(
    left: float,
    title: str,
    xlabel: str,
    ylabel: str,
    points: list[tuple[float, float]],
    color: str,
    x_range: tuple[float, float] | None = None,
) -> str:
    """One line chart, 400 x 240 px, whose top-left corner is at ``(left, 0)`` of the SVG; the x axis spans
    `x_range` when given (so that two panels share one axis), else the points."""
    width, height, pad_l, pad_r, pad_t, pad_b = 400.0, 240.0, 56.0, 12.0, 28.0, 40.0
    plot_w, plot_h = width - pad_l - pad_r, height - pad_t - pad_b
    parts = [
        f'<g transform="translate({left:.0f},0)" font-family="sans-serif" font-size="12">',
        f'<text x="{pad_l + plot_w / 2:.1f}" y="18" text-anchor="middle" font-size="14">{title}</text>',
        f'<rect x="{pad_l}" y="{pad_t}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>',
        f'<text x="{pad_l + plot_w / 2:.1f}" y="{height - 6}" text-anchor="middle">{xlabel}</text>',
        f'<text transform="translate(14,{pad_t + plot_h / 2:.1f}) rotate(-90)" text-anchor="middle">{ylabel}</text>',
    ]
    if points:
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        x_lo, x_hi = x_range if x_range is not None else (min(xs), max(xs))
        y_lo, y_hi = min(ys), max(ys)
        if x_hi == x_lo:
            x_lo, x_hi = x_lo - 0.5, x_hi + 0.5
        margin = (y_hi - y_lo) * 0.05 or max(abs(y_hi) * 0.01, 0.01)
        y_lo, y_hi = y_lo - margin, y_hi + margin

        def px(x: float) -> float:
            return pad_l + (x - x_lo) / (x_hi - x_lo) * plot_w

        def py(y: float) -> float:
            return pad_t + (y_hi - y) / (y_hi - y_lo) * plot_h

        for y in (y_lo, (y_lo + y_hi) / 2, y_hi):
            parts.append(f'<text x="{pad_l - 4}" y="{py(y) + 4:.1f}" text-anchor="end">{y:.3g}</text>')
        for x in (x_lo, x_hi):
            label = f"{x:.0f}" if float(x).is_integer() else f"{x:.3g}"  # step counts in full: 1252, not 1.25e+03
            parts.append(f'<text x="{px(x):.1f}" y="{pad_t + plot_h + 16}" text-anchor="middle">{label}</text>')
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in points)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        parts += [f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{color}"/>' for x, y in points]
    parts.append("</g>")
    return "".join(parts)


def _plot_html(loss_curve: list[tuple[float, float]], accuracies: list[float], steps_per_epoch: int = 1) -> str:
    """Draw the loss and accuracy curves as one inline SVG (no plotting library: importing matplotlib in rank 0
    costs more CPU time and memory than the rest of the Deck). Both share the x axis: the optimizer step.

    Args:
        loss_curve: ``(global step, mean training loss)`` pairs, one per logged step.
        accuracies: test accuracy after each epoch, in percent.
        steps_per_epoch: steps in one epoch; epoch ``e``'s accuracy is drawn at step ``e * steps_per_epoch``.

    Returns:
        An ``<svg>`` element, two charts side by side.
    """
    accuracy_points = [(float(i * steps_per_epoch), a) for i, a in enumerate(accuracies, start=1)]
    last = max([x for x, _ in loss_curve] + [x for x, _ in accuracy_points], default=0.0)
    steps = (0.0, float(last)) if last > 0 else None
    loss = _svg_panel(0, "training loss (all ranks)", "step", "cross-entropy", list(loss_curve), "#1f77b4", steps)
    accuracy = _svg_panel(420, "test accuracy", "step (end of each epoch)", "%", accuracy_points, "#2ca02c", steps)
    return (
        '<svg xmlns="http://www.w3.org/2000/svg" width="820" height="240" viewBox="0 0 820 240" role="img" '
        f'aria-label="MNIST training curves">{loss}{accuracy}</svg>'
    )


def _table(caption: str, header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    """An HTML table; every cell is escaped (a path may hold ``<`` or ``&``)."""
    head = "".join(f'<th style="text-align:left;padding:2px 12px 2px 0">{html.escape(h)}</th>' for h in header)
    body = "".join(
        "<tr>" + "".join(f'<td style="padding:2px 12px 2px 0">{html.escape(c)}</td>' for c in row) + "</tr>"
        for row in rows
    )
    return (
        f'<table style="border-collapse:collapse;margin:12px 0;font-family:sans-serif;font-size:13px">'
        f'<caption style="text-align:left;font-weight:bold;padding-bottom:4px">{html.escape(caption)}</caption>'
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    )


def _facts_html(summary: TrainingSummary, accuracies: list[float], epoch_losses: list[float], weights: str) -> str:
    """The run at a glance, as two tables: one row per epoch (test accuracy, mean training loss), then the run's
    facts (ranks, world size, wall time, final accuracy, where the weights went, ...)."""
    epochs = [
        (str(i), f"{accuracy:.2f}%", f"{loss:.4f}")
        for i, (accuracy, loss) in enumerate(zip(accuracies, epoch_losses, strict=True), start=1)
    ]
    workers = summary.world_size - 1
    ranks = f"{summary.world_size}: a master and {workers} worker{'s' if workers != 1 else ''}" if workers else "1"
    facts = [
        ("ranks", ranks),
        ("world size", str(summary.world_size)),
        ("backend, device", f"{summary.backend or 'single process'}, {summary.device}"),
        ("wall time of training", f"{summary.train_seconds:.1f} s (epochs and evaluation, rank 0)"),
        ("final test accuracy", f"{summary.final_accuracy:.2f}% on {summary.test_examples:,} images"),
        (
            "epochs",
            f"{summary.epochs}"
            + (f" (resumed after {summary.resumed_from_epoch})" if summary.resumed_from_epoch else ""),
        ),
        ("global batch", f"{summary.global_batch_size} images per step"),
        ("parameters", f"{summary.parameters:,}"),
        ("weights", f"{weights} (the weights output of this task; Flyte uploads it with the outputs)"),
    ]
    return _table("Test accuracy per epoch", ("epoch", "test accuracy", "mean training loss"), epochs) + _table(
        "The run", ("", ""), facts
    )


def _show_first(deck: Deck) -> None:
    """Make `deck` the tab a Deck opens on: flytekit opens the first Deck of the task's context. A Deck kept
    elsewhere (flyte-migrate's, which goes to Flyte 2's report) is left where it is."""
    decks = flytekit.current_context().decks
    if deck in decks:
        decks.insert(0, decks.pop(decks.index(deck)))


#: The Decks of the training task: our "Training" curves plus flytekit's source code, timeline, inputs and outputs.
#: Not flytekit's "Dependencies" Deck: it runs ``pip list`` and ``pip freeze`` in the task process after every run
#: (about 2 s where pip is installed, an error line where it is not) to list the image's packages.
TRAIN_DECK_FIELDS = (DeckField.SOURCE_CODE, DeckField.TIMELINE, DeckField.INPUT, DeckField.OUTPUT)


@pytorch_task(
    workers_count=2,
    per_replica_cpu_request="500m",
    per_replica_memory_request="4Gi",
    per_replica_memory_limit="8Gi",
    per_replica_gpu_limit="1",
    enable_deck=True,
    deck_fields=TRAIN_DECK_FIELDS,
    # DistributedDataParallel imports torch._dynamo when it wraps the model: import it once in the launcher, which
    # every rank shares, instead of once per rank (about 70 MB and 1.5 s of one laptop core each).
    preload_modules=["torch._dynamo"],
    **_EXTRA_TASK_OPTIONS,
)
def train_mnist(
    batch_size: int = 192,
    test_batch_size: int = 500,
    epochs: int = 1,
    learning_rate: float = 0.03,
    adam_beta1: float = 0.9,
    seed: int = 1,
    log_interval: int = 100,
    log_ranks: str = "0",
    data_dir: str = "",
    train_limit: int = 0,
    test_limit: int = 0,
) -> TrainingOutputs:
    """Train the MNIST CNN with DistributedDataParallel on every rank; rank 0's return value is the task output.

    Args:
        batch_size: global batch size (split across ranks; the result does not depend on the world size).
        test_batch_size: evaluation batch size per rank.
        epochs: passes over the training set.
        learning_rate: peak learning rate (Adam, one-cycle schedule).
        adam_beta1: Adam's ``beta1``, the decay of its running mean of gradients (the momentum of the classic example).
        seed: seeds the weights and the data order.
        log_interval: log the loss every this many steps.
        log_ranks: ranks that log progress lines: ``"0"`` (default), ``"all"``, or a list such as ``"0,2"``.
        data_dir: MNIST directory; empty: ``$MNIST_DATA_DIR``, else the cache, else download.
        train_limit: train on the first N images only (0: all 60,000).
        test_limit: evaluate on the first N test images only (0: all 10,000).

    Returns:
        Per-epoch test accuracies, the trained weights (a ``torch.save``'d state dict) and a summary.
    """
    import torch

    from .train import TrainConfig, train

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = TrainConfig(
        batch_size=batch_size, test_batch_size=test_batch_size, epochs=epochs, learning_rate=learning_rate,
        adam_beta1=adam_beta1, seed=seed, log_interval=log_interval, log_ranks=log_ranks,
        train_limit=train_limit, test_limit=test_limit, data_dir=data_dir,
    )  # fmt: skip
    ctx = flytekit.current_context()
    rank = int(os.environ.get("RANK", "0"))
    on_log, close = (None, None)
    if rank == 0 and _TRACKERS:
        on_log, close = tracking.make_logger(
            "mnist", dataclasses.asdict(config), os.path.join(ctx.working_directory, "tensorboard")
        )
    try:
        result = train(config, checkpoint=ctx.checkpoint, on_log=on_log, report_progress=report_progress)
    finally:
        if close is not None:
            close()

    # Every rank computes the same result, but only rank 0's return value is kept: only rank 0 writes files/Decks.
    path = os.path.join(ctx.working_directory, "mnist_cnn.pt")
    test_examples = test_limit or 10_000
    summary = TrainingSummary(
        final_accuracy=result.accuracies[-1],
        epochs=len(result.accuracies),
        resumed_from_epoch=result.resumed_from_epoch,
        world_size=result.world_size,
        backend=result.backend,
        device=result.device,
        train_seconds=round(result.train_seconds, 3),
        parameters=sum(int(t.numel()) for k, t in result.state_dict.items()),
        global_batch_size=batch_size,
        test_examples=min(test_examples, 10_000),
    )
    if rank == 0:
        torch.save(result.state_dict, path)
        chart = _plot_html(result.loss_curve, result.accuracies, result.steps_per_epoch)
        _show_first(Deck("Training", chart + _facts_html(summary, result.accuracies, result.epoch_losses, path)))
    return TrainingOutputs(result.accuracies, FlyteFile(path), summary)


class Evaluation(NamedTuple):
    """Outputs of :func:`evaluate_mnist`."""

    accuracy: float
    report: EvaluationReport


@task
def evaluate_mnist(weights: FlyteFile, summary: TrainingSummary, data_dir: str = "", test_limit: int = 0) -> Evaluation:
    """Reload the saved weights in a fresh model and recompute the test accuracy (single process).

    Args:
        weights: the state dict written by :func:`train_mnist`.
        summary: the training summary (its accuracy is what is checked).
        data_dir: as in :func:`train_mnist`.
        test_limit: as in :func:`train_mnist`.

    Returns:
        The recomputed accuracy in percent, and the report; ``report.matches`` is False when the recomputed accuracy
        differs from the training task's by more than the tolerance.
    """
    import torch

    from .data import load_raw_split, normalize, prepare_mnist
    from .model import Net

    model = Net()
    model.load_state_dict(torch.load(weights.download(), map_location="cpu", weights_only=True))
    model.eval()
    test = load_raw_split(prepare_mnist(data_dir), "test", test_limit)
    batch = 500  # as TrainConfig.test_batch_size: smaller activations, and not slower on a CPU
    with torch.inference_mode():
        correct = sum(
            int((model(normalize(test.images[i : i + batch])).argmax(1) == test.labels[i : i + batch]).sum())
            for i in range(0, len(test), batch)
        )
    accuracy = 100.0 * correct / len(test)
    tolerance = 0.05
    matches = abs(accuracy - summary.final_accuracy) <= tolerance
    text = (
        f"MNIST CNN ({summary.parameters} parameters), {summary.epochs} epoch(s) on {summary.world_size} rank(s) "
        f"({summary.backend or 'single process'} on {summary.device}), global batch {summary.global_batch_size}: "
        f"test accuracy {accuracy:.2f}% on {len(test)} images (training reported {summary.final_accuracy:.2f}%, "
        f"{'match' if matches else 'MISMATCH'}); training loop {summary.train_seconds:.1f} s"
        + (f", resumed after epoch {summary.resumed_from_epoch}" if summary.resumed_from_epoch else "")
        + "."
    )
    report = EvaluationReport(
        accuracy=accuracy, reported_accuracy=summary.final_accuracy, matches=matches, tolerance=tolerance, text=text
    )
    return Evaluation(accuracy, report)


class MnistResult(NamedTuple):
    """Outputs of :func:`mnist_workflow` (``pyflyte run`` prints them by name)."""

    accuracy: float
    accuracies: list[float]
    model: FlyteFile
    report: EvaluationReport


@workflow
def mnist_workflow(
    batch_size: int = 192,
    test_batch_size: int = 500,
    epochs: int = 1,
    learning_rate: float = 0.03,
    adam_beta1: float = 0.9,
    seed: int = 1,
    log_interval: int = 100,
    log_ranks: str = "0",
    data_dir: str = "",
    train_limit: int = 0,
    test_limit: int = 0,
) -> MnistResult:
    """Train on 3 replicas, then verify the weights independently.

    Args:
        batch_size: Images per optimizer step over all ranks (split between them; any world size learns the same).
        test_batch_size: Images per forward pass when a rank measures test accuracy.
        epochs: Passes over the training set.
        learning_rate: Peak learning rate of the one-cycle schedule (Adam).
        adam_beta1: Adam's beta1, the decay of its running mean of gradients (plays the role of SGD momentum).
        seed: Seeds the initial weights and the order of the training images.
        log_interval: Log the training loss every this many steps.
        log_ranks: Ranks that print progress lines: 0 (default), all, or a list such as 0,2.
        data_dir: Directory with the MNIST files; empty: $MNIST_DATA_DIR, else the cache, else download.
        train_limit: Train on the first N training images only (0: all 60,000).
        test_limit: Measure accuracy on the first N test images only (0: all 10,000).

    Returns:
        The final test accuracy recomputed from the saved weights (percent), the per-epoch accuracies the training
        measured, the trained weights, and the evaluation report.
    """
    accuracies, weights, summary = train_mnist(
        batch_size=batch_size, test_batch_size=test_batch_size, epochs=epochs, learning_rate=learning_rate,
        adam_beta1=adam_beta1, seed=seed, log_interval=log_interval, log_ranks=log_ranks,
        data_dir=data_dir, train_limit=train_limit, test_limit=test_limit,
    )  # fmt: skip
    accuracy, report = evaluate_mnist(weights=weights, summary=summary, data_dir=data_dir, test_limit=test_limit)
    return MnistResult(accuracy=accuracy, accuracies=accuracies, model=weights, report=report)
