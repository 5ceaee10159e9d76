"""The HF Transformers and Lightning callbacks, each with its real library on a tiny model built from a config
(nothing is downloaded). The libraries come with the ``integrations-test`` extra; without them these tests skip.

Each test makes this process global rank 0's reporter with a hand-off at every call, so every report the callback
makes is seen.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytorch_core import progress

needs_transformers = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="transformers is not installed (integrations-test extra)"
)
needs_lightning = pytest.mark.skipif(
    importlib.util.find_spec("lightning") is None, reason="lightning is not installed (integrations-test extra)"
)


@pytest.fixture
def snapshots() -> Iterator[list[dict[str, Any]]]:
    sent: list[dict[str, Any]] = []
    progress.start_rank()
    progress.start_reporting(sent.append, interval_s=0.0)
    yield sent
    progress.stop_reporting()
    progress.end_rank()


def test_importing_the_callbacks_imports_neither_library() -> None:
    import subprocess
    import sys

    front_ends = "flytekitplugins_pytorch.callbacks" + (
        ", flyte2_pytorch.callbacks" if importlib.util.find_spec("flyte") is not None else ""
    )
    code = (
        f"import sys, {front_ends}, pytorch_core.callbacks;"
        "print([m for m in ('transformers', 'lightning', 'pytorch_lightning') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


def test_outside_a_task_the_lightning_factories_add_nothing() -> None:
    from pytorch_core.callbacks import lightning_callbacks, pytorch_lightning_callbacks

    assert not progress.active()
    assert lightning_callbacks() == [] and pytorch_lightning_callbacks() == []


# -- HF Transformers -----------------------------------------------------------------------------------------------


def _tiny_bert() -> Any:
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(
        vocab_size=64,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
        num_labels=2,
    )
    return BertForSequenceClassification(config)


def _hf_dataset(n: int = 32) -> list[dict[str, Any]]:
    import torch

    generator = torch.Generator().manual_seed(0)
    return [
        {
            "input_ids": torch.randint(1, 64, (8,), generator=generator),
            "attention_mask": torch.ones(8, dtype=torch.long),
            "labels": torch.tensor(i % 2),
        }
        for i in range(n)
    ]


def _hf_train(tmp_path: Path, report_to: str = "none") -> Any:
    from transformers import Trainer, TrainingArguments

    from flytekitplugins_pytorch.callbacks import HFProgressCallback

    args = TrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=6,
        per_device_train_batch_size=4,
        logging_steps=2,
        report_to=report_to,
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        learning_rate=1e-3,
    )
    trainer = Trainer(model=_tiny_bert(), args=args, train_dataset=_hf_dataset(), callbacks=[HFProgressCallback()])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the library's own deprecation notices are not ours to fail on
        trainer.train()
    return trainer


@needs_transformers
@pytest.mark.slow
def test_the_hf_trainer_reports_each_step_with_its_logged_metrics(
    tmp_path: Path, snapshots: list[dict[str, Any]]
) -> None:
    _hf_train(tmp_path)
    # Each step; a step that logged once more with what it logged (2, 4, 6); the end of training once more (6).
    assert [s["step"] for s in snapshots] == [1, 2, 2, 3, 4, 4, 5, 6, 6, 6, 6]
    assert all(s["total"] == 6 for s in snapshots)
    assert "loss" not in snapshots[0]["metrics"]  # nothing logged before step 2
    logged = snapshots[-1]["metrics"]
    assert {"loss", "learning_rate", "epoch"} <= set(logged) and logged["loss"] > 0
    assert all(s["trainer_status"] for s in snapshots)


@needs_transformers
@pytest.mark.slow
def test_inside_a_trainjob_the_hf_trainer_keeps_trainer_status_to_its_own_callback(
    tmp_path: Path, snapshots: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Transformers adds its KubeflowCallback by itself where KUBEFLOW_TRAINER_SERVER_URL is set; ours then leaves
    trainerStatus to it (one writer). The URL is a closed loopback port: that callback's POSTs fail silently."""
    monkeypatch.setenv("KUBEFLOW_TRAINER_SERVER_URL", "https://127.0.0.1:9/status")
    trainer = _hf_train(tmp_path, report_to="none")
    assert "kubeflow" in trainer.args.report_to
    assert snapshots and not any(s["trainer_status"] for s in snapshots)


# -- Lightning -----------------------------------------------------------------------------------------------------


def _lightning_fit(explicit: bool, package: str = "lightning.pytorch") -> Any:
    import importlib

    import torch

    pl = importlib.import_module(package)

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.layer(x), y)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    generator = torch.Generator().manual_seed(0)
    inputs, targets = torch.randn(64, 4, generator=generator), torch.randn(64, 1, generator=generator)
    data = torch.utils.data.TensorDataset(inputs, targets)
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    callbacks = []
    if explicit:
        from pytorch_core import callbacks as ours

        name = "LightningProgressCallback" if package == "lightning.pytorch" else "PyTorchLightningProgressCallback"
        callbacks.append(getattr(ours, name)())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's advice (num_workers, log steps) is not ours to fail on
        trainer = pl.Trainer(
            max_steps=6,
            accelerator="cpu",
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=callbacks,
        )
        trainer.fit(Tiny(), loader)
    return trainer


@needs_lightning
@pytest.mark.slow
def test_a_lightning_trainer_in_a_task_reports_with_no_line_of_code(snapshots: list[dict[str, Any]]) -> None:
    trainer = _lightning_fit(explicit=False)
    names = [type(c).__name__ for c in trainer.callbacks]
    assert names.count("LightningProgressCallback") == 1, (
        "the lightning.pytorch.callbacks_factory entry point did not add the callback: is the package installed "
        "from this setup.py (pip install -e .; a stale *.egg-info in the working directory hides the new one)?"
    )
    assert [s["step"] for s in snapshots] == [1, 2, 3, 4, 5, 6, 6]  # each batch, and the end of training
    assert all(s["total"] == 6 for s in snapshots)
    assert "train_loss" in snapshots[-1]["metrics"]


@needs_lightning
@pytest.mark.slow
def test_a_callback_given_explicitly_is_not_doubled_by_the_entry_point(snapshots: list[dict[str, Any]]) -> None:
    trainer = _lightning_fit(explicit=True)
    assert [type(c).__name__ for c in trainer.callbacks].count("LightningProgressCallback") == 2
    assert [s["step"] for s in snapshots] == [1, 2, 3, 4, 5, 6, 6]  # one report per step (and the end), not two


@pytest.mark.skipif(importlib.util.find_spec("pytorch_lightning") is None, reason="pytorch_lightning is not installed")
@pytest.mark.slow
def test_the_pytorch_lightning_package_gets_its_own_callback(snapshots: list[dict[str, Any]]) -> None:
    trainer = _lightning_fit(explicit=False, package="pytorch_lightning")
    assert [type(c).__name__ for c in trainer.callbacks].count("PyTorchLightningProgressCallback") == 1
    assert [s["step"] for s in snapshots] == [1, 2, 3, 4, 5, 6, 6]


@needs_lightning
@pytest.mark.slow  # importing Lightning takes seconds
def test_outside_a_task_a_lightning_trainer_gets_no_progress_callback() -> None:
    import lightning.pytorch as pl

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = pl.Trainer(max_steps=1, accelerator="cpu", logger=False, enable_progress_bar=False)
    assert "LightningProgressCallback" not in [type(c).__name__ for c in trainer.callbacks]


# -- The last word: what training ended with -----------------------------------------------------------------------


@pytest.fixture
def throttled() -> Iterator[list[dict[str, Any]]]:
    """Rank 0's reporter as a run has it: a hand-off at the first call, then at most every 2 s; the snapshots it
    hands over, the final one included once the test calls ``finish_reporting`` (the function returned)."""
    sent: list[dict[str, Any]] = []
    progress.start_rank()
    progress.start_reporting(sent.append)
    yield sent
    progress.stop_reporting()
    progress.end_rank()


@needs_transformers
@pytest.mark.slow
def test_the_hf_trainer_reports_each_log_at_its_own_step(tmp_path: Path, snapshots: list[dict[str, Any]]) -> None:
    """The Trainer logs after its step's ``on_step_end``: step 4's report must carry step 4's logged loss, not step
    2's."""
    trainer = _hf_train(tmp_path)
    logged = {entry["step"]: entry["loss"] for entry in trainer.state.log_history if "loss" in entry}
    assert sorted(logged) == [2, 4, 6]
    for step, loss in logged.items():
        at_step = [s["metrics"].get("loss") for s in snapshots if s["step"] == step]
        assert at_step[-1] == pytest.approx(loss), (step, at_step, loss)


@needs_transformers
@pytest.mark.slow
def test_the_hf_trainer_ends_with_its_final_metrics(tmp_path: Path, throttled: list[dict[str, Any]]) -> None:
    trainer = _hf_train(tmp_path)
    progress.finish_reporting()
    final = throttled[-1]
    assert final["final"] and final["step"] == 6
    last_loss = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry][-1]
    assert final["metrics"]["loss"] == pytest.approx(last_loss)


@needs_lightning
@pytest.mark.slow
def test_a_lightning_run_ends_with_its_final_metrics(throttled: list[dict[str, Any]]) -> None:
    """Metrics are read only when a hand-off is due (at most every 2 s): a short fit used to end with step 1's
    loss. ``on_train_end`` reports the metrics training ended with, which the function's end hands over."""
    trainer = _lightning_fit(explicit=False)
    progress.finish_reporting()
    final = throttled[-1]
    assert final["final"] and final["step"] == 6
    assert final["metrics"]["train_loss"] == pytest.approx(float(trainer.callback_metrics["train_loss"]))
    assert throttled[0]["metrics"].get("train_loss") != final["metrics"]["train_loss"]
