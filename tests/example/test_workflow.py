"""The MNIST workflow end to end through the real @pytorch_task decorator and local launcher (3 ranks), on a slice;
its interface as ``pyflyte run`` shows it (named outputs, one line of help per input) and its Deck."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch
from flytekit.deck import DeckField

from examples.mnist.model import Net
from examples.mnist.workflow import (
    TrainingSummary,
    _facts_html,
    _plot_html,
    evaluate_mnist,
    mnist_workflow,
    train_mnist,
)
from tests.mnist_data import SLICE, SLICE_ACCURACY

ROOT = Path(__file__).resolve().parents[2]
SVG = "{http://www.w3.org/2000/svg}"


def test_training_task_has_two_workers_and_no_secret_by_default() -> None:
    config = train_mnist.task_config
    assert config.worker.replicas == 2
    assert train_mnist.task_type == "pytorch"
    secrets = train_mnist.security_context.secrets if train_mnist.security_context else None
    assert not secrets  # W&B is off by default, so the task must not require the wandb secret


def test_training_deck_skips_the_pip_dependency_listing() -> None:
    # flytekit's Dependencies Deck runs `pip list` and `pip freeze` after every run of the task.
    assert train_mnist.enable_deck
    assert DeckField.DEPENDENCIES not in train_mnist.deck_fields
    assert DeckField.TIMELINE in train_mnist.deck_fields


def test_workflow_outputs_are_named() -> None:
    assert list(mnist_workflow.python_interface.outputs) == ["accuracy", "accuracies", "model", "report"]
    assert list(evaluate_mnist.python_interface.outputs) == ["accuracy", "report"]


def test_every_workflow_input_has_its_own_help_line() -> None:
    inputs = mnist_workflow.interface.inputs  # what `pyflyte run ... --help` prints for each option
    descriptions = {name: var.description for name, var in inputs.items()}
    assert set(descriptions) == set(train_mnist.python_interface.inputs)
    for name, text in descriptions.items():
        assert text and "\n" not in text and "see " not in text.lower(), (name, text)
    assert len(set(descriptions.values())) == len(descriptions), descriptions


def test_momentum_input_is_named_after_the_optimizer_that_uses_it() -> None:
    assert "sgd_momentum" not in mnist_workflow.python_interface.inputs
    assert "adam_beta1" in mnist_workflow.python_interface.inputs


@pytest.mark.slow
def test_pyflyte_help_shows_each_input_help() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYTE_PYTORCH_")}
    out = subprocess.run(
        [str(Path(sys.executable).with_name("pyflyte")), "run", "examples/mnist/workflow.py", "mnist_workflow",
         "--help"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    text = " ".join(out.stdout.split())  # rich wraps the table; compare with whitespace collapsed
    assert "see :func:" not in text
    assert "used more than once" not in out.stderr  # click's warning for flytekit's boolean options
    for phrase in ("Passes over the training set", "Adam's beta1", "0 (default), all", "(0: all 10,000)"):
        assert phrase in text, text


@pytest.mark.e2e
def test_workflow_on_a_slice(mnist_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MNIST_DATA_DIR", str(mnist_dir))
    result = mnist_workflow(**SLICE)
    assert type(result).__name__ == "MnistResult"
    assert len(result.accuracies) == SLICE["epochs"]
    assert result.accuracies[-1] > SLICE_ACCURACY, result.accuracies
    report = result.report
    assert report.matches and result.accuracy == report.accuracy
    assert report.accuracy == pytest.approx(result.accuracies[-1], abs=report.tolerance)
    assert "3 rank(s) (gloo on cpu)" in report.text
    model = Net()
    model.load_state_dict(torch.load(result.model.download(), map_location="cpu", weights_only=True))


def test_deck_draws_both_curves_as_inline_svg() -> None:
    loss = [(2.0, 2.0), (4.0, 1.0), (6.0, 0.7), (7.0, 0.5), (9.0, 0.45), (14.0, 0.4)]  # (global step, loss)
    root = ET.fromstring(_plot_html(loss, [97.0, 98.5], steps_per_epoch=7))
    assert root.tag == f"{SVG}svg"
    lines = root.findall(f".//{SVG}polyline")
    assert [len(line.get("points", "").split()) for line in lines] == [len(loss), 2]
    loss_y = [float(p.split(",")[1]) for p in lines[0].get("points", "").split()]
    assert loss_y == sorted(loss_y)  # falling loss: y grows downwards in SVG
    titles = [t.text for t in root.iter(f"{SVG}text")]
    assert "training loss (all ranks)" in titles and "test accuracy" in titles
    assert "step" in titles and "step (end of each epoch)" in titles
    # both panels share the x axis 0..14 steps: the last loss point and the second epoch's accuracy line up
    loss_x = [float(p.split(",")[0]) for p in lines[0].get("points", "").split()]
    accuracy_x = [float(p.split(",")[0]) for p in lines[1].get("points", "").split()]
    assert loss_x[-1] == pytest.approx(accuracy_x[-1])  # each panel is drawn in its own translated group
    assert loss_x[3] == pytest.approx(accuracy_x[0])  # step 7: the end of epoch 1
    assert titles.count("0") == 2 and titles.count("14") == 2


def test_deck_shows_the_accuracy_per_epoch_and_the_run_as_tables() -> None:
    summary = TrainingSummary(
        final_accuracy=98.91, epochs=2, resumed_from_epoch=1, world_size=3, backend="gloo", device="cpu",
        train_seconds=61.234, parameters=23_530, global_batch_size=192, test_examples=10_000,
    )  # fmt: skip
    root = ET.fromstring(f"<div>{_facts_html(summary, [97.5, 98.91], [0.61, 0.52], '/tmp/w<1>&/mnist_cnn.pt')}</div>")
    per_epoch, run = root.findall("table")
    assert [[td.text for td in tr.findall("td")] for tr in per_epoch.iter("tr") if tr.findall("td")] == [
        ["1", "97.50%", "0.6100"],
        ["2", "98.91%", "0.5200"],
    ]
    facts = {tr.findall("td")[0].text: tr.findall("td")[1].text for tr in run.iter("tr") if tr.findall("td")}
    assert facts["ranks"] == "3: a master and 2 workers" and facts["world size"] == "3"
    assert facts["wall time of training"].startswith("61.2 s")
    assert facts["final test accuracy"] == "98.91% on 10,000 images"
    assert facts["weights"].startswith("/tmp/w<1>&/mnist_cnn.pt ")  # escaped in the HTML, itself once parsed
    assert facts["epochs"] == "2 (resumed after 1)"
    assert "TrainingSummary(" not in ET.tostring(root, encoding="unicode")


@pytest.mark.parametrize(
    ("loss", "accuracies"),
    [pytest.param([], [], id="nothing-yet"), pytest.param([(1.0, 0.5)], [99.0], id="one-point-each")],
)
def test_deck_handles_degenerate_curves(loss: list[tuple[float, float]], accuracies: list[float]) -> None:
    root = ET.fromstring(_plot_html(loss, accuracies))
    for line in root.findall(f".//{SVG}polyline"):
        assert "nan" not in line.get("points", "") and "inf" not in line.get("points", "")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")  # before the data fixture is asked for
def test_gpu_single_rank_uses_cuda(mnist_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from examples.mnist.train import TrainConfig, train

    monkeypatch.setenv("WORLD_SIZE", "1")
    result = train(TrainConfig(train_limit=6000, test_limit=1000, data_dir=str(mnist_dir)))
    assert result.device == "cuda" and result.accuracies[0] > 90.0
