"""Distributed MNIST on Flyte 2: the training loop of ``train.py`` on 3 ranks (1 master, 2 workers).

The twin of ``workflow.py`` for the ``flyte`` SDK (the ``flyte2`` extra). Run locally from the repository root (3 real
rank processes; data from ``$MNIST_DATA_DIR``, else the cache, else downloaded)::

    MNIST_DATA_DIR=/path/to/mnist python -m examples.mnist.workflow_flyte2 --train-limit 6000 --test-limit 1000

It prints one line of JSON: rank 0's ``MnistRun``. What ``workflow.py`` adds on top of the loop (the Deck, the weights
file, the independent evaluation task, task checkpoints, experiment tracking) uses flytekit's context and is not
repeated here. On a cluster the task is a PyTorchJob of Flyte 2's native plugin; wrap the config in
``flyte2_pytorch.Connector(...)`` to run it through this project's connector (a TrainJob, for example).
"""

from __future__ import annotations

import argparse
import dataclasses
import json

import flyte

from flyte2_pytorch import Master, PyTorch, Worker, report_progress

_ROLE = {"requests": flyte.Resources(cpu="500m", memory="4Gi"), "limits": flyte.Resources(memory="8Gi", gpu=1)}

env = flyte.TaskEnvironment(
    name="mnist",
    plugin_config=PyTorch(
        master=Master(**_ROLE),
        worker=Worker(replicas=2, **_ROLE),
        # DistributedDataParallel imports torch._dynamo when it wraps the model: once in the launcher, not per rank.
        preload_modules=("torch._dynamo",),
    ),
)


@dataclasses.dataclass
class MnistRun:
    """What the training did, as rank 0 saw it.

    Attributes:
        accuracies: test accuracy in percent after each epoch.
        world_size: ranks that trained.
        backend: ``gloo`` or ``nccl``.
        device: ``cpu`` or ``cuda``.
        train_seconds: wall time of the epochs and evaluations on rank 0.
    """

    accuracies: list[float]
    world_size: int
    backend: str
    device: str
    train_seconds: float


@env.task
def train_mnist(
    epochs: int = 1,
    batch_size: int = 192,
    learning_rate: float = 0.03,
    seed: int = 1,
    data_dir: str = "",
    train_limit: int = 0,
    test_limit: int = 0,
) -> MnistRun:
    """Train the MNIST CNN with DistributedDataParallel on every rank; rank 0's value is the task's output.

    Args:
        epochs: passes over the training set.
        batch_size: global batch size (split across ranks).
        learning_rate: peak learning rate (Adam, one-cycle schedule).
        seed: seeds the weights and the data order.
        data_dir: MNIST directory; empty: ``$MNIST_DATA_DIR``, else the cache, else download.
        train_limit: train on the first N images only (0: all 60,000).
        test_limit: evaluate on the first N test images only (0: all 10,000).

    Returns:
        The accuracies and how the run was spread.
    """
    from examples.mnist.train import TrainConfig, train

    config = TrainConfig(
        epochs=epochs,
        batch_size=batch_size,
        learning_rate=learning_rate,
        seed=seed,
        data_dir=data_dir,
        train_limit=train_limit,
        test_limit=test_limit,
    )
    result = train(config, report_progress=report_progress)
    return MnistRun(result.accuracies, result.world_size, result.backend, result.device, round(result.train_seconds, 3))


def main(argv: list[str] | None = None) -> None:
    """Run `train_mnist` locally with the given inputs and print rank 0's result as JSON.

    Args:
        argv: ``--epochs``, ``--train-limit``, ``--test-limit``, ``--data-dir`` (``sys.argv[1:]`` when None).
    """
    parser = argparse.ArgumentParser(prog="python -m examples.mnist.workflow_flyte2")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--train-limit", type=int, default=0)
    parser.add_argument("--test-limit", type=int, default=0)
    parser.add_argument("--data-dir", default="")
    args = parser.parse_args(argv)
    flyte.init()
    run = flyte.run(
        train_mnist,
        epochs=args.epochs,
        train_limit=args.train_limit,
        test_limit=args.test_limit,
        data_dir=args.data_dir,
    )
    print(json.dumps(dataclasses.asdict(run.outputs()[0])))


if __name__ == "__main__":
    main()
