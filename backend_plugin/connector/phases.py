"""A task's phase never goes back from RUNNING: `Started`.

Each kind's status table reads one snapshot of the job, and some moments of a real run look, in one snapshot, like a
job that has not started: a TrainJob whose node Job failed and whose pods are being deleted, before its JobSet and the
Trainer count the failure (every count 0, no pod left: seen on the real controllers); a job a queue suspended again.
Flyte shows such an answer as the task going back to Queued. The connector remembers, per attempt, that it answered
RUNNING, and answers RUNNING again, with the snapshot's own words, until the job ends. One return to QUEUED is real and
stays: a job whose spec holds it again (`suspend`, Kueue's preemption), which waits for admission (docs/faults.md).

The memory is one replica's (a connector restarted, or another replica, answers from the snapshot alone) and bounded:
`MAX_HELD` attempts, the oldest let go first; an attempt is let go when its answer is terminal.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Optional

from flyteidl.core.execution_pb2 import TaskExecution

from backend_plugin.connector.metadata import Answer, JobMetadata

__all__ = ["Started", "MAX_HELD", "BEFORE_RUNNING", "held_by_spec"]

MAX_HELD = 100_000
"""Attempts remembered (about 100 bytes each): more than the tasks one connector serves at once."""

BEFORE_RUNNING = (TaskExecution.QUEUED, TaskExecution.WAITING_FOR_RESOURCES, TaskExecution.INITIALIZING)
"""The phases that come before RUNNING in Flyte's order."""


def held_by_spec(job: Optional[Mapping[str, Any]]) -> bool:
    """Whether the job's spec holds it: `spec.suspend` (JobSet, TrainJob) or `spec.runPolicy.suspend` (PyTorchJob).

    Args:
        job: the job as read, or None.

    Returns:
        True for a suspended job.
    """
    spec = (job or {}).get("spec") or {}
    run_policy = spec.get("runPolicy") if isinstance(spec, Mapping) else None
    return isinstance(spec, Mapping) and (
        spec.get("suspend") is True or (isinstance(run_policy, Mapping) and run_policy.get("suspend") is True)
    )


class Started:
    """The attempts this replica answered RUNNING, by (namespace, name, uid); safe across threads."""

    def __init__(self, max_held: int = MAX_HELD) -> None:
        """An empty memory.

        Args:
            max_held: the most attempts remembered (`MAX_HELD`); the oldest is let go first.
        """
        self._lock = threading.Lock()
        self._held: OrderedDict[tuple[str, str, str], None] = OrderedDict()
        self._max = max_held

    def hold(self, meta: JobMetadata, answer: Answer, job: Optional[Mapping[str, Any]] = None) -> Answer:
        """Remember a RUNNING answer; forget a terminal one; turn a phase before RUNNING into RUNNING when the attempt
        was answered RUNNING before (its message kept, after saying so), unless the job's spec holds it.

        Args:
            meta: what `create` returned.
            answer: this poll's answer.
            job: the job the answer was read from (None when it is gone).

        Returns:
            The answer to give.
        """
        key = (meta.namespace, meta.name, meta.uid or "")
        with self._lock:
            if answer.terminal:
                self._held.pop(key, None)
                return answer
            if answer.phase == TaskExecution.RUNNING:
                self._held[key] = None
                self._held.move_to_end(key)
                while len(self._held) > self._max:
                    self._held.popitem(last=False)
                return answer
            if answer.phase not in BEFORE_RUNNING or key not in self._held or held_by_spec(job):
                return answer
        return replace(answer, phase=TaskExecution.RUNNING, message=f"was running; now {answer.message}")
