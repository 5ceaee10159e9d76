"""The launcher's side of live progress: follow global rank 0's snapshots and show them, in a thread of its own.

Rank 0 hands a snapshot to its launcher at most every 2 s (``progress.py``): through ``progress.json`` in the
control directory when it is a rank process, or by a call when the function runs in the launcher's own process (the
in-process mode, a pod with one rank). :class:`ProgressFollower` turns the snapshots into a
``pytorch_contract.progress.ProgressRecord`` (rate over the last :data:`RATE_WINDOW_S`, ETA, a history for the
curves) and gives it to its sinks, each throttled on its own:

==================  ======================================  =========================================================
sink                where                                   how often
==================  ======================================  =========================================================
console line        the launcher's stderr: redrawn in       every :data:`REDRAW_S` on a terminal; a line every
                    place on a terminal, a line at          ``FLYTE_PYTORCH_PROGRESS_LOG_S`` (5 s locally, 30 s in a
                    intervals in a log                      pod) elsewhere; ``FLYTE_PYTORCH_PROGRESS_LINE=0``: none
page                the front-end's: flytekit's             every ``FLYTE_PYTORCH_PROGRESS_INTERVAL_S`` (10 s), when
                    ``Progress`` Deck published, Flyte 2's  the task has Decks or a report
                    ``Progress`` report tab flushed
record              ``pytorch-progress.json`` beside the    every ``FLYTE_PYTORCH_PROGRESS_INTERVAL_S`` (10 s), on a
                    task's outputs (cluster only)           cluster only
trainerStatus       Kubeflow Trainer's status server        at most every 5 s, when ``KUBEFLOW_TRAINER_SERVER_URL``
                    (``_trainer_status.py``)                is set
==================  ======================================  =========================================================

The line is drawn by the launcher, not by a rank: it is never prefixed ``[rank N]`` and never repeated per rank. On a
terminal it is redrawn with ``\\r`` and erased by the ranks' own lines (``_console.py`` starts each with an erase on a
terminal), so a rank's print never lands in the middle of it. The page, the record and the status are sent from
this thread with the task's context (``contextvars``), never from the training loop; a sink that fails is logged
once and training goes on.

The thread does its work only between forks of this process (``_FORK_GUARD``): ``start_method="fork"`` forks the
ranks from the launcher while the thread runs, and a fork taken while it held a lock (a module it was importing, a
stream it was writing) would leave that lock held forever in every rank, which then hangs at its first use.

Neither torch nor a Flyte SDK is imported here.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import shutil
import threading
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional

from pytorch_contract.progress import (
    FILE_NAME,
    WRITE_INTERVAL_S,
    ProgressRecord,
    format_line,
    is_stale,
    stale_after,
)
from pytorch_core import _trainer_status
from pytorch_core._progress_page import Point, render_page
from pytorch_core.frontend import FrontEnd
from pytorch_core.progress import environment_interval

__all__ = [
    "ProgressFollower",
    "Tracker",
    "LINE_ENV",
    "LOG_INTERVAL_ENV",
    "INTERVAL_ENV",
]

logger = logging.getLogger(__name__)

LINE_ENV = "FLYTE_PYTORCH_PROGRESS_LINE"
"""``0`` (or ``false``, ``no``, ``off``): no console line."""
LOG_INTERVAL_ENV = "FLYTE_PYTORCH_PROGRESS_LOG_S"
"""Seconds between two console lines when stderr is not a terminal."""
INTERVAL_ENV = "FLYTE_PYTORCH_PROGRESS_INTERVAL_S"
"""Seconds between two writes of the record beside the outputs (``N``), and of the page."""

TICK_S = 0.25
"""How often the follower looks for a new snapshot."""
REDRAW_S = 1.0
"""Redraw period of the line on a terminal (the ETA and elapsed time move between snapshots)."""
LOCAL_LOG_S = 5.0
"""Default seconds between console lines in a local run whose stderr is not a terminal."""
POD_LOG_S = 30.0
"""Default seconds between console lines in a pod (its log)."""
RATE_WINDOW_S = 30.0
"""The rate is measured over the snapshots of the last 30 s."""
MAX_POINTS = 500
"""Points kept for the curves; past that, every other one is dropped (the curve keeps its shape)."""
LINE_PREFIX = "progress: "

_FORK_GUARD = threading.RLock()
"""Held by a follower's thread while it works, and by a thread that forks this process until the fork is made (in
the parent and in the child): a rank forked from the launcher never inherits a lock the thread held mid-work.
Reentrant: a sink that forks from the thread itself (a subprocess through ``multiprocessing``) does not wait on
itself."""

if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_FORK_GUARD.acquire, after_in_parent=_FORK_GUARD.release, after_in_child=_FORK_GUARD.release
    )


def _enabled(value: Optional[str]) -> bool:
    return (value or "").strip().lower() not in ("0", "false", "no", "off")


def _decode_metrics(raw: Mapping[str, Any]) -> dict[str, float]:
    metrics = {}
    for name, value in raw.items():
        try:
            metrics[str(name)] = float(value)
        except (TypeError, ValueError):
            continue
    return metrics


class Tracker:
    """Snapshots in, records out: the rate, the ETA and the history of one run.

    Args:
        interval_s: the record's write interval (it sets the staleness threshold).
    """

    def __init__(self, interval_s: float = WRITE_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.record: Optional[ProgressRecord] = None
        self.history: list[Point] = []
        self.started_at: Optional[float] = None
        self.final = False
        self.stopped = False
        self.trainer_status = True
        self.trainer_status_owner = ""
        self.snapshots = 0
        self._window: deque[tuple[float, int]] = deque()
        self._rate: Optional[float] = None

    def add(self, snapshot: Mapping[str, Any]) -> Optional[ProgressRecord]:
        """Take one snapshot of rank 0.

        Args:
            snapshot: what rank 0 handed over (``progress._Reporter.snapshot``).

        Returns:
            Optional[ProgressRecord]: the new record, or ``None`` when the snapshot has no step.
        """
        step = snapshot.get("step")
        if not isinstance(step, int):
            return None
        stamp = snapshot.get("time")
        when = float(stamp) if isinstance(stamp, (int, float)) else time.time()
        total = snapshot.get("total")
        total = total if isinstance(total, int) and total > 0 else None
        if self.started_at is None:
            self.started_at = when
        if self._window and step < self._window[-1][1]:
            self._window.clear()  # the loop went back (resumed from a checkpoint): measure anew
            self._rate = None
        self._window.append((when, step))
        while len(self._window) > 2 and when - self._window[0][0] > RATE_WINDOW_S:
            self._window.popleft()
        (t0, s0), (t1, s1) = self._window[0], self._window[-1]
        if t1 > t0 and s1 > s0:
            self._rate = (s1 - s0) / (t1 - t0)
        rate = self._rate
        eta: Optional[float] = None
        if total is not None and rate:
            eta = max(0, total - step) / rate
        self.final = bool(snapshot.get("final"))
        self.stopped = bool(snapshot.get("stopped"))
        self.trainer_status = bool(snapshot.get("trainer_status", True))
        self.trainer_status_owner = str(snapshot.get("trainer_status_owner") or "another writer")
        metrics = _decode_metrics(snapshot.get("metrics") or {})
        self.record = ProgressRecord(
            step=step,
            total=total,
            metrics=metrics,
            rate=rate,
            eta_s=eta,
            started_at=self.started_at,
            reported_at=when,
            interval_s=self.interval_s,
            stale_after_s=stale_after(self.interval_s, 1 / rate if rate else None),
            done=self.final,
        )
        points = snapshot.get("points")
        if isinstance(points, list):  # a point per report since the last snapshot (what rank 0 kept of them)
            for point in points:
                if isinstance(point, list) and len(point) == 2 and isinstance(point[0], int) and point[1]:
                    self._keep((point[0], _decode_metrics(point[1])))
        elif not self.history or self.history[-1][0] != step or self.final:
            self._keep((step, metrics))  # a writer that sends no points: a point per snapshot
        self.snapshots += 1
        return self.record

    def _keep(self, point: Point) -> None:
        self.history.append(point)
        if len(self.history) > MAX_POINTS:
            self.history = self.history[:-1:2] + [self.history[-1]]  # every other point, and the latest

    def elapsed_s(self, now: float) -> Optional[float]:
        """Seconds since the first report (to the last report once final)."""
        if self.started_at is None or self.record is None:
            return None
        end = self.record.reported_at if self.final else now
        return max(0.0, end - self.started_at)


class _ConsoleLine:
    """The progress line on the launcher's stderr."""

    def __init__(self, fd: int, *, log_interval_s: float) -> None:
        self.fd = fd
        self.tty = os.isatty(fd)
        self.log_interval_s = log_interval_s
        self.last_draw: Optional[float] = None
        self.last_text = ""
        self.drawn = False

    def _write(self, text: str) -> None:
        data = text.encode("utf-8", "replace")
        try:
            while data:
                data = data[os.write(self.fd, data) :]
        except OSError:  # the console went away
            pass

    def update(self, tracker: Tracker, now: float, new: bool) -> None:
        record = tracker.record
        if record is None:
            return
        clock = time.monotonic()
        if self.tty:
            if new or self.last_draw is None or clock - self.last_draw >= REDRAW_S:
                self._draw(tracker, now)
                self.last_draw = clock
        elif new and (self.last_draw is None or clock - self.last_draw >= self.log_interval_s):
            self._print(tracker, now)
            self.last_draw = clock

    def _text(self, tracker: Tracker, now: float, *, ended: bool = False) -> str:
        """The line: as of rank 0's last report (the step, the ETA and the elapsed time of one moment, so that they
        move together), or as of ``now`` once the record is stale; once the run ended without returning, where it
        stopped (``stopped``: the step rank 0 stood at, or its last report when it could not say)."""
        record = tracker.record
        assert record is not None
        if ended and not record.done:
            at = record.reported_at
            text = format_line(record, at, elapsed_s=tracker.elapsed_s(at), stopped=True)
            if not tracker.stopped:
                text = f"stopped; rank 0's last report: {text.removeprefix('stopped at ')}"
            return LINE_PREFIX + text
        at = now if is_stale(record, now) else record.reported_at
        return LINE_PREFIX + format_line(record, at, elapsed_s=tracker.elapsed_s(at))

    def _draw(self, tracker: Tracker, now: float, *, ended: bool = False) -> None:
        width = shutil.get_terminal_size((120, 24)).columns
        text = self._text(tracker, now, ended=ended)[: max(20, width - 1)]
        if text == self.last_text and not ended:
            return  # nothing moved since the last draw
        self._write(f"\r\x1b[K{text}")
        self.last_text = text
        self.drawn = True

    def _print(self, tracker: Tracker, now: float, *, ended: bool = False) -> None:
        text = self._text(tracker, now, ended=ended)
        self._write(text + "\n")
        self.last_text = text

    def close(self, tracker: Tracker, now: float, success: bool) -> None:
        if tracker.record is None:
            return
        if self.tty:
            self._draw(tracker, now, ended=True)
            self._write("\n")
        else:
            text = self._text(tracker, now, ended=True)
            if text != self.last_text:
                self._print(tracker, now, ended=True)


class _Page:
    """The front-end's page (flytekit's Deck, Flyte 2's report)."""

    def __init__(self, frontend: FrontEnd, task: Any, interval_s: float) -> None:
        self.frontend = frontend
        self.task = task
        self.interval_s = interval_s
        self.last: Optional[float] = None
        self.enabled = True
        self._complained = False

    def _publish(self, tracker: Tracker, now: float, final: bool, *, stopped: bool = False) -> None:
        record = tracker.record
        assert record is not None
        at = now if is_stale(record, now) and not stopped else record.reported_at  # as the console line reads it
        page = render_page(record, tracker.history, at, tracker.elapsed_s(at), stopped=stopped)
        try:
            self.enabled = bool(self.frontend.publish_progress(self.task, page, final))
        except Exception as e:  # noqa: BLE001 - the page never fails training
            if not self._complained:
                self._complained = True
                logger.warning("could not publish the progress page: %s: %s; training goes on", type(e).__name__, e)

    def update(self, tracker: Tracker, now: float, new: bool) -> None:
        clock = time.monotonic()
        if not self.enabled or not new or tracker.record is None:
            return
        if self.last is not None and clock - self.last < self.interval_s:
            return
        self.last = clock
        self._publish(tracker, now, final=False)

    def close(self, tracker: Tracker, now: float, success: bool) -> None:
        if self.enabled and tracker.record is not None:
            self._publish(tracker, now, final=True, stopped=not success and not tracker.record.done)


class _Record:
    """``pytorch-progress.json`` beside the outputs (a cluster run)."""

    def __init__(self, frontend: FrontEnd, interval_s: float) -> None:
        self.frontend = frontend
        self.interval_s = interval_s
        self.last: Optional[float] = None
        self.written = 0
        self.enabled = True
        self._complained = False

    def _write(self, record: ProgressRecord) -> None:
        try:
            where = self.frontend.write_output_file(FILE_NAME, record.to_json())
        except Exception as e:  # noqa: BLE001 - the record never fails training
            if not self._complained:
                self._complained = True
                logger.warning(
                    "could not write the progress record %s beside the outputs: %s: %s; training goes on",
                    FILE_NAME,
                    type(e).__name__,
                    e,
                )
            return
        if where is None:
            self.enabled = False  # this run has no output prefix
            return
        self.written += 1

    def update(self, tracker: Tracker, now: float, new: bool) -> None:
        clock = time.monotonic()
        if not self.enabled or not new or tracker.record is None:
            return
        if self.last is not None and clock - self.last < self.interval_s:
            return
        self.last = clock
        self._write(tracker.record)

    def close(self, tracker: Tracker, now: float, success: bool) -> None:
        if self.enabled and success and tracker.record is not None:
            self._write(tracker.record)


class _Status:
    """Kubeflow Trainer's ``trainerStatus``."""

    def __init__(self, client: _trainer_status.TrainerStatusClient) -> None:
        self.client = client
        self.pending = False
        self._said_left = False

    def update(self, tracker: Tracker, now: float, new: bool) -> None:
        if tracker.record is None:
            return
        if not tracker.trainer_status:
            if not self._said_left:
                self._said_left = True
                logger.info("the TrainJob's trainerStatus is left to %s", tracker.trainer_status_owner)
            return
        self.pending = self.pending or new
        if self.pending and self.client.due():
            self.pending = False
            self.client.post(_trainer_status.trainer_status_body(tracker.record, now))

    def close(self, tracker: Tracker, now: float, success: bool) -> None:
        if tracker.record is None or not tracker.trainer_status or not success:
            return
        wait = self.client.wait_s()
        if wait > 0:
            time.sleep(wait)  # at most MIN_INTERVAL_S: the last word (100 %) is worth the wait
        self.client.post(_trainer_status.trainer_status_body(tracker.record, time.time(), final=True))


class ProgressFollower:
    """Follows global rank 0's progress snapshots for one launch and shows them (see the module docstring).

    Args:
        frontend: the task's front-end (its page and its file access).
        task: the task (the front-end reads its settings: Decks, report).
        local: a local run (console line defaults; no record beside the outputs).
        env: the environment (the ``FLYTE_PYTORCH_PROGRESS_*`` and ``KUBEFLOW_TRAINER_SERVER_*`` variables).
        fd: where the console line goes (stderr).

    Raises:
        ValueError: a ``FLYTE_PYTORCH_PROGRESS_*`` interval is not a positive number.
    """

    def __init__(
        self,
        frontend: FrontEnd,
        task: Any,
        *,
        local: bool,
        env: Mapping[str, str] = os.environ,
        fd: int = 2,
    ) -> None:
        self.interval_s = environment_interval(env, INTERVAL_ENV, WRITE_INTERVAL_S)
        log_s = environment_interval(env, LOG_INTERVAL_ENV, LOCAL_LOG_S if local else POD_LOG_S)
        self.tracker = Tracker(self.interval_s)
        self.sinks: list[Any] = []
        if _enabled(env.get(LINE_ENV)):
            self.sinks.append(_ConsoleLine(fd, log_interval_s=log_s))
        self.sinks.append(_Page(frontend, task, self.interval_s))
        if not local:
            self.sinks.append(_Record(frontend, self.interval_s))
        client = _trainer_status.client_from_env(env)
        if client is not None:
            self.sinks.append(_Status(client))
        self._path: Optional[Path] = None
        self._seen: Optional[tuple[int, int]] = None
        self._offered: Optional[Mapping[str, Any]] = None
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._context: Optional[contextvars.Context] = None

    # -- the two channels ----------------------------------------------------------------------------------------

    def offer(self, snapshot: Mapping[str, Any]) -> None:
        """Take a snapshot from rank 0 running in this process (the in-process channel).

        Args:
            snapshot: the snapshot.
        """
        with self._lock:
            self._offered = snapshot
            if self._thread is None and not self._stopped.is_set():
                self._start_thread()
        self._wake.set()

    def _take(self) -> Optional[Mapping[str, Any]]:
        with self._lock:
            offered, self._offered = self._offered, None
        if offered is not None:
            return offered
        if self._path is None:
            return None
        try:
            stat = self._path.stat()
        except OSError:
            return None
        seen = (stat.st_mtime_ns, stat.st_size)
        if seen == self._seen:
            return None
        try:
            snapshot = json.loads(self._path.read_bytes())
        except (OSError, ValueError):
            return None
        self._seen = seen
        return snapshot if isinstance(snapshot, dict) else None

    # -- the thread ------------------------------------------------------------------------------------------------

    def start(self, path: Optional[Path] = None) -> None:
        """Start following: ``path`` (the control directory's ``progress.json``) at once, or the in-process channel,
        whose thread starts at the first :meth:`offer` (a function that never reports costs no thread).

        The thread runs in a copy of the caller's ``contextvars`` context, so the front-end finds the task's
        context (flytekit's and Flyte 2's live there).

        Args:
            path: the file rank 0 writes, or ``None`` for :meth:`offer`.
        """
        self._path = path
        self._context = contextvars.copy_context()
        if path is not None:
            self._start_thread()

    def _start_thread(self) -> None:
        context = self._context if self._context is not None else contextvars.copy_context()
        self._thread = threading.Thread(target=context.run, args=(self._run,), name="pytorch-progress", daemon=True)
        self._thread.start()

    def stop(self, *, failed: bool = False) -> None:
        """Read the last snapshot, close every sink (the line ends, the final record and status are sent when the
        function returned), and end the thread.

        Args:
            failed: the launch failed (no final record or status, whatever rank 0 said).
        """
        self._stopped.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._drain(final=True, failed=failed)

    def _run(self) -> None:
        while not self._stopped.is_set():
            self._wake.wait(TICK_S)
            self._wake.clear()
            if self._stopped.is_set():
                return
            with _FORK_GUARD:
                self._drain(final=False, failed=False)

    def _drain(self, *, final: bool, failed: bool) -> None:
        snapshot = self._take()
        new = snapshot is not None and self.tracker.add(snapshot) is not None
        now = time.time()
        for sink in self.sinks:
            try:
                if final:
                    sink.close(self.tracker, now, self.tracker.final and not failed)
                else:
                    sink.update(self.tracker, now, new)
            except Exception as e:  # noqa: BLE001 - showing progress never fails training
                logger.debug("progress sink %s failed: %s", type(sink).__name__, e)
