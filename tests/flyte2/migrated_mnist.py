"""The MNIST example (``examples/mnist/workflow.py``, flytekit code) run locally under ``flyte-migrate`` with this
project's translation: ``python -m tests.flyte2.migrated_mnist DATA_DIR``. Prints one JSON line: the translated task's
class, then the run's output (or the error).
"""

from __future__ import annotations

import json
import sys

import flyte_migrate  # noqa: F401 - patches flytekit: its decorators make Flyte 2 tasks

from flyte2_pytorch import migrate

migrate.register()


def main(data_dir: str) -> None:
    import flyte

    from examples.mnist import workflow

    task = workflow.train_mnist
    out: dict = {"class": type(task).__name__, "workers": task.plugin_config.worker.replicas}
    flyte.init()
    run = flyte.run(task, data_dir=data_dir, train_limit=1920, test_limit=300)
    accuracies, _weights, summary = run.outputs()
    out.update(accuracies=accuracies, world_size=summary.world_size)
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
