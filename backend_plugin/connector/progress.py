"""Live progress in the connector's answers: per running task attempt, the progress record last read, and when the
next read is due.

Global rank 0 of a task that calls `report_progress(step, ...)` writes `pytorch-progress.json` beside the attempt's
outputs every 10 s (`pytorch_contract.progress`). The connector adds the record's line to the message of a RUNNING
answer, on every kind ("running (3/3 replicas active); step 1,200/5,000 (24%), ETA 3m10s, loss 0.124"). This module
is the bookkeeping, with no I/O of its own: the connector asks `claim` whether a read is due, reads the record through
`blobs.read_progress_record` off the event loop, hands the bytes to `store`, and asks `message` for the line.

- A read is due when the attempt was never read, when the last read started `interval_s` ago, plus a jitter of up
  to `JITTER` of it drawn at each read (a record found missing, malformed or unreadable waits as long: a task that
  reports nothing costs one read per interval), or, once, when the record held turns stale before then (so that
  "stale" is said of what rank 0 last wrote, never of an old read). One read per attempt is under way at a time. The
  jitter spreads the reads of attempts first read together (a connector that starts with thousands of running
  tasks) instead of repeating their burst every interval, as client-go jitters its resyncs.
- A poll waits for a read (bounded, off the event loop) only when it is the attempt's first or the one before a
  record is called stale (`Read.AWAITED`); a read that refreshes a record held runs in the background, and the poll
  that starts it shows the record held (`Read.BACKGROUND`), so a steady poll never waits on storage.
- Between reads, a poll shows the record held, formatted at the poll's time (`pytorch_contract.progress
  .format_message`): its ETA counts down, and it is called stale as soon as rank 0's silence passes the record's
  `stale_after_s`. The record in storage is never older than the one held, so a record that reads fresh at a poll is
  fresh in fact: a stale record is never shown as current.
- Nothing is shown for an attempt without a record. A record that is malformed or larger than
  `pytorch_contract.progress.MAX_RECORD_BYTES` is shown as nothing when it is the first read, and leaves the record held
  in place after that (a store that writes in place, a local or NFS path, can be read mid-write); a read that fails
  does the same. Each is logged once per attempt.
- Memory: per attempt, the record held, cut to the metrics the line shows, and a few numbers: about 1,000 bytes with
  a record, 200 without (tracemalloc, the benchmark's record of three metrics). An attempt is forgotten when its job
  ends (`forget`, called by the connector on a terminal phase or a job gone), when no poll asked for it for
  `idle_s`, and, oldest first, past `max_attempts`.

Thread-safe: the event loop claims and formats, pool threads store.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
from collections import OrderedDict
from collections.abc import Callable
from enum import Enum
from typing import Any, Optional

from pytorch_contract.progress import (
    MAX_RECORD_BYTES,
    MESSAGE_METRICS,
    ProgressRecord,
    format_message,
    is_stale,
    parse_record,
)

__all__ = ["JITTER", "MAX_ATTEMPTS", "LiveProgress", "Read"]

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 100_000
"""The most attempts held at once (the least recently polled go first): ten times the 10,000 running tasks the
connector is measured with, about 100 MB at the most, so a connector that is never told a job ended stays bounded."""


class Read(Enum):
    """What `LiveProgress.claim` tells a poll to do."""

    NONE = "none"
    """No read: the record held (or none) is what there is."""
    BACKGROUND = "background"
    """Read, without waiting: the record held serves this poll, the read the next ones."""
    AWAITED = "awaited"
    """Read, and wait for it (bounded): the attempt's first read, or the read before its record is called stale."""


JITTER = 0.1
"""The next read of an attempt is due `interval_s` times 1 to 1 + `JITTER` after the last one started: never sooner
than the interval, at most 10% later (33 s at the default), which spreads reads begun in the same second over 3 s
more at each interval."""


class _Attempt:
    """One task attempt: the record held (None: none yet, or none found), when the last read started, whether one is
    under way, when a poll last asked."""

    __slots__ = ("record", "read_at", "due_at", "read_wall", "reading", "used_at", "claimed_at", "claimed_wall",
                 "logged")  # fmt: skip

    def __init__(self, used_at: float) -> None:
        self.record: Optional[ProgressRecord] = None
        self.read_at: Optional[float] = None
        self.due_at = 0.0
        self.read_wall = 0.0
        self.reading = False
        self.used_at = used_at
        self.claimed_at = 0.0
        self.claimed_wall = 0.0
        self.logged = False


class LiveProgress:
    """The progress records of the running task attempts a connector polls, each read at most once per `interval_s`.

    Args:
        interval_s: the least time between two reads of one attempt's record (`progress_read_interval_s`).
        idle_s: an attempt no poll asked for this long is forgotten (`watch_idle_s`: as a namespace's watch stops).
        max_attempts: the most attempts held; the least recently polled go first.
        jitter: the next read is due `interval_s * (1 + jitter * draw())` after the last one started.
        draw: a number in [0, 1) per read (`random.random`; tests pass a constant).

    Raises:
        ValueError: `interval_s` or `idle_s` not positive, `max_attempts` below 1, or `jitter` negative.
    """

    def __init__(
        self,
        interval_s: float,
        idle_s: float,
        max_attempts: int = MAX_ATTEMPTS,
        jitter: float = JITTER,
        draw: Callable[[], float] = random.random,
    ) -> None:
        if not interval_s > 0 or not idle_s > 0 or max_attempts < 1 or not jitter >= 0:
            raise ValueError(f"interval_s={interval_s!r} and idle_s={idle_s!r} must be positive, "
                             f"max_attempts={max_attempts!r} at least 1, jitter={jitter!r} at least 0")  # fmt: skip
        self.interval_s = float(interval_s)
        self.idle_s = float(idle_s)
        self.max_attempts = max_attempts
        self.jitter = float(jitter)
        self._draw = draw
        self._attempts: OrderedDict[str, _Attempt] = OrderedDict()
        self._lock = threading.Lock()
        self._swept_at: Optional[float] = None
        self._counts = {"reads": 0, "records": 0, "missing": 0, "malformed": 0, "failed": 0, "dropped": 0}

    def claim(self, key: str, now: float, wall: float) -> Read:
        """A poll of a running attempt: whether a read of its record is due, and if so, mark it under way (the caller
        then reads and calls `store`, or `release` when it cannot start the read). No I/O.

        Args:
            key: the attempt (its output prefix).
            now: a monotonic clock, seconds (what `interval_s` and `idle_s` are measured on).
            wall: the reader's clock, seconds since the epoch (what staleness is judged on).

        Returns:
            `Read.NONE` (no read now), `Read.BACKGROUND` (a read the record held covers while it runs) or
            `Read.AWAITED` (a read the poll should wait for: the attempt's first, or the one before its record is
            called stale).
        """
        with self._lock:
            attempt = self._attempts.get(key)
            if attempt is None:
                attempt = self._attempts[key] = _Attempt(now)
                while len(self._attempts) > self.max_attempts:
                    self._attempts.popitem(last=False)
                    self._counts["dropped"] += 1
            else:
                self._attempts.move_to_end(key)
                attempt.used_at = now
            due = Read.NONE if attempt.reading else self._due(attempt, now, wall)
            if due is not Read.NONE:
                attempt.reading, attempt.claimed_at, attempt.claimed_wall = True, now, wall
            return due

    def _due(self, attempt: _Attempt, now: float, wall: float) -> Read:
        if attempt.read_at is None:
            return Read.AWAITED  # nothing to show before it
        record = attempt.record
        if record is not None and is_stale(record, wall) and not is_stale(record, attempt.read_wall):
            return Read.AWAITED  # the record held turned stale since it was read: read again before saying so
        if now >= attempt.due_at or now < attempt.read_at:
            return Read.BACKGROUND
        return Read.NONE

    def release(self, key: str) -> None:
        """A claimed read that could not be started: the next poll may claim it again.

        Args:
            key: the attempt.
        """
        with self._lock:
            attempt = self._attempts.get(key)
            if attempt is not None:
                attempt.reading = False

    def store(self, key: str, data: Optional[bytes], problem: str = "", now: Optional[float] = None) -> None:
        """What a claimed read found: the record's bytes (at most one more than `MAX_RECORD_BYTES`), None when there
        is no record, or the `problem` that kept it from being read.

        Args:
            key: the attempt.
            data: the bytes read, or None.
            problem: why the read failed ("" when it did not).
            now: the monotonic clock, for the sweep of idle attempts (None: no sweep).
        """
        record: Optional[ProgressRecord] = None
        malformed = ""
        if data is not None and not problem:
            try:
                record = _for_the_message(parse_record(data[: MAX_RECORD_BYTES + 1]))
            except ValueError as e:
                malformed = str(e)
        with self._lock:
            self._counts["reads"] += 1
            attempt = self._attempts.get(key)
            if attempt is None or not attempt.reading:
                return  # forgotten (the job ended) while it was read
            attempt.reading = False
            attempt.read_at, attempt.read_wall = attempt.claimed_at, attempt.claimed_wall
            attempt.due_at = attempt.claimed_at + self.interval_s * (1.0 + self.jitter * self._draw())
            if problem or malformed:
                self._counts["failed" if problem else "malformed"] += 1
                log, attempt.logged = not attempt.logged, True
            elif data is None:
                self._counts["missing"] += 1
                attempt.record, log = None, False
            else:
                self._counts["records"] += 1
                attempt.record, log = record, False
            if now is not None and (self._swept_at is None or now - self._swept_at >= self.interval_s):
                self._sweep(now)
        if log:
            what = f"could not be read ({problem})" if problem else f"is not a progress record ({malformed})"
            logger.warning("the progress record under %s %s; its message shows the last record read, if any "
                           "(logged once per task attempt)", key, what)  # fmt: skip

    def _sweep(self, now: float) -> None:
        self._swept_at = now
        idle = [key for key, a in self._attempts.items() if now - a.used_at > self.idle_s and not a.reading]
        for key in idle:
            del self._attempts[key]
        self._counts["dropped"] += len(idle)

    def message(self, key: str, wall: float) -> Optional[str]:
        """The line of the attempt's record, judged at `wall` (ETA counted down, stale when rank 0's silence passed
        the record's `stale_after_s`); None when no record is held. No I/O.

        Args:
            key: the attempt.
            wall: the reader's clock, seconds since the epoch.

        Returns:
            The line, or None (show the message without progress).
        """
        with self._lock:
            attempt = self._attempts.get(key)
            record = attempt.record if attempt is not None else None
        return format_message(record, wall) if record is not None else None

    def forget(self, key: str) -> None:
        """Drop an attempt (its job ended, or is gone); a read under way for it is discarded.

        Args:
            key: the attempt.
        """
        with self._lock:
            if self._attempts.pop(key, None) is not None:
                self._counts["dropped"] += 1

    def stats(self) -> dict[str, Any]:
        """What is held and what the reads found (for tests, benchmarks and debugging).

        Returns:
            attempts (held), records (attempts holding a record), reading (reads under way), and the counts since
            start: reads (stored), found (a record), missing, malformed, failed, dropped (attempts forgotten).
        """
        with self._lock:
            attempts = list(self._attempts.values())
            counts = dict(self._counts)
        return {
            "attempts": len(attempts),
            "records": sum(a.record is not None for a in attempts),
            "reading": sum(a.reading for a in attempts),
            "reads": counts["reads"],
            "found": counts["records"],
            "missing": counts["missing"],
            "malformed": counts["malformed"],
            "failed": counts["failed"],
            "dropped": counts["dropped"],
        }


def _for_the_message(record: ProgressRecord) -> ProgressRecord:
    """The record as held: only the metrics the line shows (the first `MESSAGE_METRICS`)."""
    if len(record.metrics) <= MESSAGE_METRICS:
        return record
    return dataclasses.replace(record, metrics=dict(list(record.metrics.items())[:MESSAGE_METRICS]))
