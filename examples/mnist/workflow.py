"""Distributed MNIST on Flyte: train with DistributedDataParallel on 3 replicas, then verify the saved weights.

Run locally (3 real processes; data from a local directory, or downloaded and cached on first use)::

    MNIST_DATA_DIR=../shared/data/mnist pyflyte run examples/mnist/workflow.py mnist_workflow

On a cluster, the training task becomes a PyTorchJob with one master and two workers, each with 1 GPU (NCCL); on a
machine with fewer GPUs than ranks it falls back to gloo on CPU. Inputs beyond the classic ones:

- ``data_dir``: directory with the IDX files; empty means ``$MNIST_DATA_DIR``, else the cache
  ``~/.cache/flytekitplugins-pytorch/mnist``, else download from public mirrors (checked by SHA-256).
- ``train_limit`` / ``test_limit``: train / evaluate on the first N images only (0 = all); for quick tests.

Retries resume: after each epoch rank 0 writes the model, optimizer and schedule state to the task checkpoint, and
a retried attempt continues from the last finished epoch with the same final result as an uninterrupted run.
``MNIST_TRACKING=wandb,tensorboard`` (at registration and run time) turns on experiment tracking; see
:mod:`examples.mnist.tracking`. ``FLYTE_PYTORCH_INPROCESS=1`` runs the training in one process for debugging.
"""

from __future__ import annotations

import base64
import dataclasses
import io
import logging
import os
from typing import NamedTuple

import flytekit
from flytekit import Deck, ImageSpec, Secret, task, workflow
from flytekit.types.file import FlyteFile

from flytekitplugins_pytorch import pytorch_task

from . import tracking

logger = logging.getLogger(__name__)

#: The image that runs this example on a cluster, as a flytekit ImageSpec (the same content as ``Dockerfile.gpu``).
#: Not used by local runs; pass ``container_image=mnist_image`` to the tasks to build and use it on registration.
mnist_image = ImageSpec(
    name="flytekitplugins-pytorch-mnist",
    base_image="pytorch/pytorch:2.13.0-cuda12.8-cudnn9-runtime",
    packages=["flytekitplugins-pytorch[examples]"],
    python_exec="/opt/conda/bin/python",
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


def _plot_html(loss_curve: list[tuple[float, float]], accuracies: list[float]) -> str:
    """Render the loss and accuracy curves as an HTML snippet with an embedded PNG (text note without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot as plt
    except ImportError:
        return "<p>matplotlib is not installed, so no curves are drawn: <code>pip install matplotlib</code>.</p>"
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.2), dpi=100)
    if loss_curve:
        xs, ys = zip(*loss_curve, strict=True)
        left.plot(xs, ys, marker=".")
    left.set(title="training loss (all ranks)", xlabel="epoch", ylabel="cross-entropy")
    right.plot(range(1, len(accuracies) + 1), accuracies, marker="o", color="tab:green")
    right.set(title="test accuracy", xlabel="epoch", ylabel="%")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img alt="MNIST training curves" src="data:image/png;base64,{data}"/>'


@pytorch_task(
    workers_count=2,
    per_replica_cpu_request="500m",
    per_replica_memory_request="4Gi",
    per_replica_memory_limit="8Gi",
    per_replica_gpu_limit="1",
    enable_deck=True,
    **_EXTRA_TASK_OPTIONS,
)
def train_mnist(
    batch_size: int = 128,
    test_batch_size: int = 2000,
    epochs: int = 1,
    learning_rate: float = 0.01,
    sgd_momentum: float = 0.9,
    seed: int = 1,
    log_interval: int = 100,
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
        sgd_momentum: momentum (Adam's ``beta1``).
        seed: seeds the weights and the data order.
        log_interval: log the loss every this many steps.
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
        sgd_momentum=sgd_momentum, seed=seed, log_interval=log_interval, train_limit=train_limit,
        test_limit=test_limit, data_dir=data_dir,
    )  # fmt: skip
    ctx = flytekit.current_context()
    rank = int(os.environ.get("RANK", "0"))
    on_log, close = (None, None)
    if rank == 0 and _TRACKERS:
        on_log, close = tracking.make_logger(
            "mnist", dataclasses.asdict(config), os.path.join(ctx.working_directory, "tensorboard")
        )
    try:
        result = train(config, checkpoint=ctx.checkpoint, on_log=on_log)
    finally:
        if close is not None:
            close()

    # Every rank computes the same result, but only rank 0's return value is kept: only rank 0 writes files/Decks.
    path = os.path.join(ctx.working_directory, "mnist_cnn.pt")
    if rank == 0:
        torch.save(result.state_dict, path)
        Deck("Training", _plot_html(result.loss_curve, result.accuracies))
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
    return TrainingOutputs(result.accuracies, FlyteFile(path), summary)


@task
def evaluate_mnist(
    weights: FlyteFile, summary: TrainingSummary, data_dir: str = "", test_limit: int = 0
) -> EvaluationReport:
    """Reload the saved weights in a fresh model and recompute the test accuracy (single process).

    Args:
        weights: the state dict written by :func:`train_mnist`.
        summary: the training summary (its accuracy is what is checked).
        data_dir: as in :func:`train_mnist`.
        test_limit: as in :func:`train_mnist`.

    Returns:
        The report; ``matches`` is False when the recomputed accuracy differs by more than the tolerance.
    """
    import torch

    from .data import load_split, prepare_mnist
    from .model import Net

    model = Net()
    model.load_state_dict(torch.load(weights.download(), map_location="cpu", weights_only=True))
    model.eval()
    test = load_split(prepare_mnist(data_dir), "test", test_limit)
    with torch.no_grad():
        correct = sum(
            int((model(test.images[i : i + 2000]).argmax(1) == test.labels[i : i + 2000]).sum())
            for i in range(0, len(test), 2000)
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
    return EvaluationReport(
        accuracy=accuracy, reported_accuracy=summary.final_accuracy, matches=matches, tolerance=tolerance, text=text
    )


@workflow
def mnist_workflow(
    batch_size: int = 128,
    test_batch_size: int = 2000,
    epochs: int = 1,
    learning_rate: float = 0.01,
    sgd_momentum: float = 0.9,
    seed: int = 1,
    log_interval: int = 100,
    data_dir: str = "",
    train_limit: int = 0,
    test_limit: int = 0,
) -> tuple[list[float], FlyteFile, EvaluationReport]:
    """Train on 3 replicas, then verify the weights independently.

    Args:
        batch_size: see :func:`train_mnist`.
        test_batch_size: see :func:`train_mnist`.
        epochs: see :func:`train_mnist`.
        learning_rate: see :func:`train_mnist`.
        sgd_momentum: see :func:`train_mnist`.
        seed: see :func:`train_mnist`.
        log_interval: see :func:`train_mnist`.
        data_dir: see :func:`train_mnist`.
        train_limit: see :func:`train_mnist`.
        test_limit: see :func:`train_mnist`.

    Returns:
        Per-epoch test accuracies, the trained weights, and the evaluation report.
    """
    accuracies, weights, summary = train_mnist(
        batch_size=batch_size, test_batch_size=test_batch_size, epochs=epochs, learning_rate=learning_rate,
        sgd_momentum=sgd_momentum, seed=seed, log_interval=log_interval, data_dir=data_dir,
        train_limit=train_limit, test_limit=test_limit,
    )  # fmt: skip
    report = evaluate_mnist(weights=weights, summary=summary, data_dir=data_dir, test_limit=test_limit)
    return accuracies, weights, report
