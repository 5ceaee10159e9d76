"""Optional experiment tracking (Weights & Biases, TensorBoard) for rank 0; off unless ``MNIST_TRACKING`` names one.

Why an environment variable and not a task input: W&B needs an API key, which on Flyte comes from a secret, and a
task's secret requests are fixed when the task is defined. ``MNIST_TRACKING=wandb`` at registration time adds the
``wandb/api_key`` secret request and passes the variable to the pods; without it the task requests no secret at all,
so clusters without that secret run the example unchanged. The key is never part of the image.

The packages are the ``tracking`` extra (``pip install -c constraints.txt -e '.[tracking]'``). Locally, flytekit
reads the secret from ``_FSEC_WANDB_API_KEY`` (else ``WANDB_API_KEY`` is used); ``WANDB_MODE=offline`` keeps the run
on disk under ``$WANDB_DIR/wandb/offline-run-*`` and needs no key at all (``wandb sync <that directory>`` uploads it
later, with a key). Both trackers get the loss and
learning rate of every logged step and, at the step that ends each epoch, the test accuracy and the epoch's mean
training loss; TensorBoard writes to ``$MNIST_TENSORBOARD_DIR``. ``tests/example/test_tracking.py`` runs both and
reads back what they wrote.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

logger = logging.getLogger(__name__)

TRACKING_ENV = "MNIST_TRACKING"
"""Comma-separated trackers to enable: ``wandb``, ``tensorboard``. Empty (the default): no tracking."""

TENSORBOARD_DIR_ENV = "MNIST_TENSORBOARD_DIR"
"""Where TensorBoard's event files go. Unset: the task's working directory, which is gone when the task ends (a
pod's disk, or a local run's temporary directory); set it to a directory that outlives the task to keep them."""

KNOWN = ("wandb", "tensorboard")

OFFLINE_MODES = ("offline", "dryrun")
"""``WANDB_MODE`` values under which W&B needs no API key: the run is written to disk only."""
WANDB_SECRET_GROUP = "wandb"
WANDB_SECRET_KEY = "api_key"


def enabled_trackers(value: str | None = None) -> tuple[str, ...]:
    """Parse the tracker list.

    Args:
        value: the list; ``None`` reads ``$MNIST_TRACKING``.

    Returns:
        The enabled tracker names, in a fixed order.

    Raises:
        ValueError: a name is not one of :data:`KNOWN`.
    """
    raw = os.environ.get(TRACKING_ENV, "") if value is None else value
    names = {n.strip().lower() for n in raw.split(",") if n.strip()}
    unknown = sorted(names - set(KNOWN))
    if unknown:
        raise ValueError(f"{TRACKING_ENV}={raw!r} names unknown trackers {unknown}; use a subset of {list(KNOWN)}")
    return tuple(n for n in KNOWN if n in names)


def _wandb_key() -> str | None:
    try:
        import flytekit

        return flytekit.current_context().secrets.get(WANDB_SECRET_GROUP, WANDB_SECRET_KEY)
    except Exception:  # noqa: BLE001 - no secret mounted: fall back to the standard variable
        return os.environ.get("WANDB_API_KEY")


def make_logger(run_name: str, config: dict, log_dir: str) -> tuple[Callable[[int, dict[str, float]], None], Callable]:
    """Build the rank-0 metric callback for the enabled trackers (missing packages are skipped with a log line).

    Args:
        run_name: name of the run in the trackers.
        config: hyperparameters to record.
        log_dir: directory for TensorBoard event files when ``$MNIST_TENSORBOARD_DIR`` is not set.

    Returns:
        ``(on_log, close)``: ``on_log(step, metrics)`` records metrics; ``close()`` flushes and ends the run.
    """
    sinks: list[Callable[[int, dict[str, float]], None]] = []
    closers: list[Callable[[], None]] = []
    for name in enabled_trackers():
        if name == "tensorboard":
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                logger.warning("%s=tensorboard but the tensorboard package is not installed; skipping", TRACKING_ENV)
                continue
            writer = SummaryWriter(log_dir=os.environ.get(TENSORBOARD_DIR_ENV) or log_dir)
            sinks.append(lambda step, m, w=writer: [w.add_scalar(k, v, step) for k, v in m.items()])
            closers.append(writer.close)
        elif name == "wandb":
            try:
                import wandb
            except ImportError:
                logger.warning("%s=wandb but the wandb package is not installed; skipping", TRACKING_ENV)
                continue
            key = _wandb_key()
            offline = os.environ.get("WANDB_MODE", "").strip().lower() in OFFLINE_MODES
            if key:
                wandb.login(key=key)
            elif offline:
                # W&B writes an offline run to disk without an account; `wandb sync` uploads it later, with a key.
                logger.info("W&B offline without a key: the run stays on disk (wandb sync uploads it later)")
            else:
                logger.warning(
                    "W&B enabled but no secret %s/%s and no WANDB_API_KEY; skipping (WANDB_MODE=offline needs no key)",
                    WANDB_SECRET_GROUP,
                    WANDB_SECRET_KEY,
                )
                continue
            run = wandb.init(project=os.environ.get("WANDB_PROJECT", "flyte-mnist"), name=run_name, config=config)
            sinks.append(lambda step, m, r=run: r.log(m, step=step))
            closers.append(run.finish)

    def on_log(step: int, metrics: dict[str, float]) -> None:
        for sink in sinks:
            sink(step, metrics)

    def close() -> None:
        for closer in closers:
            closer()

    return on_log, close
