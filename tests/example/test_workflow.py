"""The MNIST workflow end to end through the real @pytorch_task decorator and local launcher (3 ranks), on a slice."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import torch

from examples.mnist.model import Net
from examples.mnist.workflow import _plot_html, mnist_workflow, train_mnist


def test_training_task_has_two_workers_and_no_secret_by_default() -> None:
    config = train_mnist.task_config
    assert config.worker.replicas == 2
    assert train_mnist.task_type == "pytorch"
    secrets = train_mnist.security_context.secrets if train_mnist.security_context else None
    assert not secrets  # W&B is off by default, so the task must not require the wandb secret


@pytest.mark.e2e
def test_workflow_on_a_slice(mnist_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MNIST_DATA_DIR", str(mnist_dir))
    accuracies, weights, report = mnist_workflow(train_limit=6000, test_limit=1000, epochs=2, log_interval=10)
    assert len(accuracies) == 2
    assert accuracies[-1] > 94.0, accuracies
    assert report.matches and report.accuracy == pytest.approx(accuracies[-1], abs=report.tolerance)
    assert "3 rank(s) (gloo on cpu)" in report.text
    model = Net()
    model.load_state_dict(torch.load(weights.download(), map_location="cpu", weights_only=True))


def test_deck_embeds_a_png_plot() -> None:
    html = _plot_html([(0.5, 1.0), (1.0, 0.5)], [97.0])
    assert html.startswith("<img")
    data = html.split("base64,", 1)[1].split('"', 1)[0]
    assert base64.b64decode(data)[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.gpu
def test_gpu_single_rank_uses_cuda(mnist_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from examples.mnist.train import TrainConfig, train

    monkeypatch.setenv("WORLD_SIZE", "1")
    result = train(TrainConfig(train_limit=6000, test_limit=1000, data_dir=str(mnist_dir)))
    assert result.device == "cuda" and result.accuracies[0] > 90.0
