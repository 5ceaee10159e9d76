"""Loops for the drills of what a run says when it fails, stops or resumes (``tests/faults/test_edge_words.py``). A
module, not a test file: the ranks import it.

Each loop notes under ``$PREEMPT_DRILL_DIR`` what a drill waits for or checks (``<run>`` is the drill's run name,
``$PREEMPT_DRILL_RUN``):

- ``pid-<run>-<rank>``: the rank's pid;
- ``at-<run>-<rank>``: the last step the rank finished (rewritten each step);
- ``up-<run>-<rank>``: the rank is inside the function (before its first step, for :func:`slow_start`).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.faults.preempt_tasks import _note


def _where() -> tuple[str, str]:
    return os.environ["PREEMPT_DRILL_DIR"], os.environ.get("PREEMPT_DRILL_RUN", "a")


def reports_only(steps: int = 40, step_seconds: float = 0.15, fail_rank: int = -1, fail_at: int = -1) -> int:
    """``report_progress(step, steps, loss=...)`` each step, and nothing else of the API (no checkpoint). No
    collective: a rank that fails leaves the others running, as ranks of a data loader that raised do.

    Args:
        steps: steps in all.
        step_seconds: seconds a step lasts.
        fail_rank: the rank that raises ``ValueError`` (-1: none).
        fail_at: the step it raises at.

    Returns:
        int: ``steps``.
    """
    from pytorch_core.progress import report_progress

    directory, run = _where()
    rank = int(os.environ["RANK"])
    _note(directory, f"pid-{run}-{rank}", str(os.getpid()))
    for step in range(1, steps + 1):
        time.sleep(step_seconds)
        if rank == fail_rank and step == fail_at:
            raise ValueError(f"injected failure on rank {rank} at step {step}")
        report_progress(step, steps, loss=1.0 / step)
        _note(directory, f"at-{run}-{rank}", str(step))
    return steps


def slow_start(start_seconds: float = 30.0) -> int:
    """A rank that takes ``start_seconds`` to start (imports, data, a model): its first step comes after that.

    Args:
        start_seconds: how long it starts for.

    Returns:
        int: 1.
    """
    from pytorch_core.progress import report_progress

    directory, run = _where()
    rank = int(os.environ["RANK"])
    _note(directory, f"pid-{run}-{rank}", str(os.getpid()))
    _note(directory, f"up-{run}-{rank}", str(time.time()))
    time.sleep(start_seconds)
    report_progress(1, 1)
    return 1


def last_steps(directory: Path, run: str) -> dict[int, int]:
    """The last step each rank finished (``at-<run>-<rank>``)."""
    found = {}
    for path in directory.glob(f"at-{run}-*"):
        try:
            found[int(path.name.rsplit("-", 1)[1])] = int(path.read_text())
        except (OSError, ValueError):
            continue
    return found
