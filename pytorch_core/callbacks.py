"""Live progress for the HF Transformers ``Trainer`` and for Lightning, without a loop of one's own.

- ``HFProgressCallback``: a ``transformers.TrainerCallback``; add it with one line,
  ``Trainer(..., callbacks=[HFProgressCallback()])`` (Transformers has no hook through which a package adds a
  callback of its own). At each step it calls ``report_progress(state.global_step, state.max_steps, **latest logs)``
  (``loss``, ``learning_rate``, ``grad_norm``, ``epoch``, evaluation metrics: what the Trainer last logged); each
  log is reported at the step it was logged at, and once more when training ends. Inside a
  TrainJob, Transformers adds its own ``KubeflowCallback`` (``report_to`` gets ``"kubeflow"``), which writes
  ``trainerStatus`` itself; this callback then leaves that field to it, so that one writer owns it.
- ``LightningProgressCallback`` (``lightning.pytorch``) and ``PyTorchLightningProgressCallback``
  (``pytorch_lightning``): a ``Callback`` that calls ``report_progress(trainer.global_step,
  trainer.estimated_stepping_batches, **callback_metrics)`` after each training batch. Lightning adds it by itself
  to every ``Trainer`` built inside a ``pytorch`` task (the package registers it under Lightning's
  ``*.callbacks_factory`` entry points: :func:`lightning_callbacks`, :func:`pytorch_lightning_callbacks`), so a
  Lightning user writes nothing; one given explicitly is used instead, never both. The metrics (tensors) are read
  only when rank 0 hands a snapshot off, at most every 2 s, and once more when training ends (``on_train_end``), so
  the last line has the final step's metrics.

The classes are made at first use (``module.__getattr__``), so importing this module imports neither library.
"""

from __future__ import annotations

import math
from typing import Any

from pytorch_core import progress
from pytorch_core.progress import report_progress

# and, made at first use (``__getattr__``): HFProgressCallback, LightningProgressCallback,
# PyTorchLightningProgressCallback.
__all__ = [
    "lightning_callbacks",
    "pytorch_lightning_callbacks",
]

_made: dict[str, type] = {}


def _numbers(logs: Any) -> dict[str, float]:
    found = {}
    for name, value in (logs or {}).items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            found[str(name)] = float(value)
    return found


def _total(state: Any) -> Any:
    return state.max_steps if state.max_steps and state.max_steps > 0 else None


def _make_hf() -> type:
    from transformers import TrainerCallback

    class HFProgressCallback(TrainerCallback):
        """Reports the HF ``Trainer``'s progress with ``report_progress`` at each step (see the module docstring)."""

        def __init__(self) -> None:
            self.latest: dict[str, float] = {}

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            report_to = args.report_to or []
            if "kubeflow" in (report_to if isinstance(report_to, (list, tuple)) else [report_to]):
                progress.leave_trainer_status("HF Transformers' KubeflowCallback (report_to has 'kubeflow')")

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            # The Trainer logs after its step's on_step_end: report the logged values at the step they belong to,
            # not one logging interval late.
            logged = _numbers(logs)
            self.latest.update(logged)
            if logged:
                report_progress(state.global_step, _total(state), **logged)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            report_progress(state.global_step, _total(state), **self.latest)

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            # The last word: the final step with every value logged, which the function's end then hands over.
            report_progress(state.global_step, _total(state), **self.latest)

    HFProgressCallback.__qualname__ = "HFProgressCallback"
    HFProgressCallback.__module__ = __name__
    return HFProgressCallback


def _lightning_metrics(trainer: Any) -> dict[str, Any]:
    return {
        str(key): value for key, value in trainer.callback_metrics.items() if getattr(value, "numel", lambda: 1)() == 1
    }


def _make_lightning(package: str, name: str) -> type:
    import importlib

    base = importlib.import_module(package).Callback

    class ProgressCallback(base):  # type: ignore[misc,valid-type]
        """Reports a Lightning ``Trainer``'s progress with ``report_progress`` (see the module docstring)."""

        def __init__(self) -> None:
            self.inert = False
            self.total: Any = None

        def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
            # Given explicitly and added by the entry point too: the first one reports, the others stay silent.
            first = next(c for c in trainer.callbacks if type(c).__name__ == type(self).__name__)
            self.inert = first is not self

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            total = trainer.estimated_stepping_batches
            self.total = int(total) if isinstance(total, (int, float)) and math.isfinite(total) else None

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            if self.inert:
                return
            if progress.hand_off_due():  # rank 0, a snapshot is due: read the metrics (tensors) now only
                report_progress(trainer.global_step, self.total, **_lightning_metrics(trainer))
            else:
                report_progress(trainer.global_step, self.total)

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            # The last word: the final step with the metrics as training left them (a hand-off may not have been due
            # at the last batch), which the function's end then hands over.
            if not self.inert:
                report_progress(trainer.global_step, self.total, **_lightning_metrics(trainer))

    ProgressCallback.__name__ = ProgressCallback.__qualname__ = name
    ProgressCallback.__module__ = __name__
    return ProgressCallback


def __getattr__(name: str) -> type:
    """``HFProgressCallback``, ``LightningProgressCallback`` or ``PyTorchLightningProgressCallback``, made at first
    use (the library is imported then).

    Args:
        name: the attribute asked for.

    Returns:
        type: the callback class (found by this name by pickle).

    Raises:
        AttributeError: any other name.
    """
    if name not in _made:
        if name == "HFProgressCallback":
            _made[name] = _make_hf()
        elif name == "LightningProgressCallback":
            _made[name] = _make_lightning("lightning.pytorch", name)
        elif name == "PyTorchLightningProgressCallback":
            _made[name] = _make_lightning("pytorch_lightning", name)
        else:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _made[name]


def lightning_callbacks() -> list[Any]:
    """Lightning's ``lightning.pytorch.callbacks_factory`` entry point: the progress callback for a ``Trainer`` built
    inside a ``pytorch`` task, nothing elsewhere."""
    return [__getattr__("LightningProgressCallback")()] if progress.active() else []


def pytorch_lightning_callbacks() -> list[Any]:
    """The same for ``pytorch_lightning``'s ``pytorch_lightning.callbacks_factory`` entry point."""
    return [__getattr__("PyTorchLightningProgressCallback")()] if progress.active() else []
