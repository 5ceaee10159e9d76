"""The MNIST example under Flyte 2, locally with real ranks on a slice of the data (``MNIST_DATA_DIR``, as
tests/mnist_data.py finds it): the Flyte 2 twin (``examples/mnist/workflow_flyte2.py``), and the flytekit example
translated by ``flyte-migrate`` with ``flyte2_pytorch.migrate``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.mnist_data import require_mnist
from tests.sdk.guarded_run import run_guarded

ROOT = Path(__file__).resolve().parents[2]
MAX_PROCS = 12  # the interpreter, the launcher's helpers, the fork server and 3 ranks
BOUND_S = 240.0


def _run(module: str, *args: str, tmp_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYTE_PYTORCH_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    run = run_guarded(
        [sys.executable, "-m", module, *args], max_procs=MAX_PROCS, timeout_s=BOUND_S, cwd=str(tmp_path), env=env
    )
    assert run.killed_for == "", run.output[-4000:]
    assert run.returncode == 0, run.output[-4000:]
    assert run.leftover == [], run.leftover
    return json.loads(run.output.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.timeout(BOUND_S + 60)
def test_the_flyte2_twin_trains_on_three_ranks(tmp_path: Path) -> None:
    data = str(require_mnist())
    out = _run(
        "examples.mnist.workflow_flyte2", "--train-limit", "1920", "--test-limit", "300", "--data-dir", data,
        tmp_path=tmp_path,
    )  # fmt: skip
    assert out["world_size"] == 3 and out["backend"] == "gloo"
    (accuracy,) = out["accuracies"]
    assert 10.0 < accuracy <= 100.0  # ten steps on 1,920 images: better than chance, not a trained model


@pytest.mark.slow
@pytest.mark.timeout(BOUND_S + 60)
def test_the_flytekit_example_translated_by_flyte_migrate_runs_locally(tmp_path: Path) -> None:
    out = _run("tests.flyte2.migrated_mnist", str(require_mnist()), tmp_path=tmp_path)
    assert out["class"] == "PyTorchTask" and out["workers"] == 2
    assert out["world_size"] == 3 and len(out["accuracies"]) == 1
