"""A task for the preflight drill (`tests/faults/test_preflight_drill.py`): a master and a worker; the task's own code
writes `ran-<rank>` into `marker_dir` and never talks to its peer."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

from flytekitplugins_pytorch import pytorch_task

#: The drill's collective timeout: how long the preflight waits for a peer that cannot join.
JOIN_TIMEOUT_S = 5


@pytorch_task(workers_count=1, collective_timeout=datetime.timedelta(seconds=JOIN_TIMEOUT_S))
def two_ranks(marker_dir: str) -> int:
    """Record that the task's code ran on this rank.

    Args:
        marker_dir: where to write the marker.

    Returns:
        0.
    """
    Path(marker_dir, f"ran-{os.environ['RANK']}").write_text("ran")
    return 0
