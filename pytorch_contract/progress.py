"""The progress record: what global rank 0 of a running task writes next to the task's outputs, and how a reader
(the connector) turns it into one line for Flyte's UI.

A task that calls ``report_progress(step, total, **metrics)`` has its launcher write :data:`FILE_NAME` under the
task's output prefix (the prefix Flyte gave the pod, where ``outputs.pb`` and the error documents go) at most every
``interval_s`` seconds (:data:`WRITE_INTERVAL_S` unless ``FLYTE_PYTORCH_PROGRESS_INTERVAL_S`` says otherwise). A task
that reports nothing writes nothing. The file is one JSON object, at most :data:`MAX_RECORD_BYTES`:

==================  ================================================================================================
``version``         :data:`VERSION` (a reader refuses a newer major version rather than guess at it)
``step``            the latest step rank 0 reported (an integer >= 0)
``total``           the total number of steps it gave, or ``null``
``metrics``         the latest value of each metric it gave, in the order first given (at most :data:`MAX_METRICS`,
                    names at most :data:`MAX_METRIC_NAME` characters); a value is a number, or ``"nan"``, ``"inf"``,
                    ``"-inf"``
``rate``            steps per second over the last reports (``null`` until two reports differ)
``eta_s``           seconds left at ``reported_at`` (``null`` without a total or a rate)
``started_at``      when rank 0 first reported, seconds since the epoch (rank 0's clock)
``reported_at``     when rank 0 made the latest report the record holds (rank 0's clock)
``interval_s``      how often the writer writes (``N``)
``stale_after_s``   how long rank 0 may be silent before a reader calls the record stale (:func:`stale_after`)
``done``            the task's function returned: the record is final and never stale
==================  ================================================================================================

Staleness (:func:`is_stale`): a record that is not ``done`` is stale when ``now - reported_at > stale_after_s``.
The writer sets ``stale_after_s`` to ``max(60, 3 * interval_s, 3 * seconds per step)``: a healthy run refreshes
``reported_at`` every ``interval_s`` seconds or every step, whichever is slower, so it is never called stale, and
60 s absorbs the skew between rank 0's clock and the reader's. A stale record is shown as stale, never as current
(:func:`format_message`).

A reader's whole job: read at most :data:`MAX_RECORD_BYTES` of :func:`record_path` (the attempt's output prefix) and
call :func:`message_from_file` with its content (``None`` when the file does not exist) and the time; ``None`` back
means "show what you would show without progress".

Only the standard library is imported: the connector reads records with no SDK installed.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Optional, Union

__all__ = [
    "FILE_NAME",
    "VERSION",
    "WRITE_INTERVAL_S",
    "STALE_AFTER_MIN_S",
    "MAX_RECORD_BYTES",
    "MAX_METRICS",
    "MAX_METRIC_NAME",
    "MESSAGE_METRICS",
    "ProgressRecord",
    "record_path",
    "parse_record",
    "stale_after",
    "is_stale",
    "percent",
    "eta_at",
    "format_message",
    "message_from_file",
    "format_line",
    "format_count",
    "format_duration",
    "format_value",
]

FILE_NAME = "pytorch-progress.json"
"""The record's name under the task's output prefix (beside ``outputs.pb``, ``error.pb`` and ``deck.html``)."""

VERSION = 1
"""The record's format version."""

WRITE_INTERVAL_S = 10.0
"""Default seconds between two writes of the record (``N``): a blob write every 10 s is nothing next to a training
step's cost, and a reader that looks every 30 s (the connector) sees a record at most 10 s older than rank 0's last
report."""

STALE_AFTER_MIN_S = 60.0
"""The least silence that makes a record stale: above the write interval, a step, and the clock skew between pods
and the reader."""

MAX_RECORD_BYTES = 16 * 1024
"""A reader reads at most this much; the writer's records are far smaller (16 metrics of 64-character names)."""

MAX_METRICS = 16
"""Metrics kept in a record (the first ones given); the rest are left out of the record only."""

MAX_METRIC_NAME = 64
"""Longest metric name kept (Kubeflow Trainer's limit on a metric name, too); longer names are cut."""

MESSAGE_METRICS = 3
"""Metrics shown in the one-line message (the first ones given)."""

Number = Union[int, float]


@dataclass(frozen=True)
class ProgressRecord:
    """One progress record (see the module docstring for each field)."""

    step: int
    total: Optional[int] = None
    metrics: dict[str, float] = field(default_factory=dict)
    rate: Optional[float] = None
    eta_s: Optional[float] = None
    started_at: float = 0.0
    reported_at: float = 0.0
    interval_s: float = WRITE_INTERVAL_S
    stale_after_s: float = STALE_AFTER_MIN_S
    done: bool = False
    version: int = VERSION

    def to_json(self) -> bytes:
        """The record as the file holds it (compact JSON, UTF-8).

        Returns:
            bytes: the file's content.
        """
        body = {
            "version": self.version,
            "step": self.step,
            "total": self.total,
            "metrics": {name: _encode_float(value) for name, value in self.metrics.items()},
            "rate": _round(self.rate),
            "eta_s": _round(self.eta_s),
            "started_at": round(self.started_at, 3),
            "reported_at": round(self.reported_at, 3),
            "interval_s": self.interval_s,
            "stale_after_s": self.stale_after_s,
            "done": self.done,
        }
        return json.dumps(body, separators=(",", ":"), allow_nan=False).encode()


def _round(value: Optional[float]) -> Optional[float]:
    return None if value is None or not math.isfinite(value) else round(value, 4)


def _encode_float(value: float) -> Union[float, str]:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def record_path(output_prefix: str) -> str:
    """Where the record of a task attempt lives.

    Args:
        output_prefix: the attempt's output prefix (``s3://.../0``, a local folder), with or without a trailing ``/``.

    Returns:
        str: ``<output_prefix>/pytorch-progress.json``.
    """
    return f"{output_prefix.rstrip('/')}/{FILE_NAME}"


def _number(body: dict[str, Any], key: str, *, optional: bool = False) -> Optional[float]:
    value = body.get(key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"progress record: {key}={value!r} is not a finite number")
    return float(value)


def parse_record(data: Union[bytes, str]) -> ProgressRecord:
    """Read a record written by :meth:`ProgressRecord.to_json` (or by a writer of the same version).

    Unknown keys are ignored, so a writer may add fields without breaking older readers.

    Args:
        data: the file's content (at most :data:`MAX_RECORD_BYTES`).

    Returns:
        ProgressRecord: the record.

    Raises:
        ValueError: the content is too long, not JSON, of a newer version, or a field has the wrong type; the message
            names the field and the value.
    """
    if len(data) > MAX_RECORD_BYTES:
        raise ValueError(f"progress record: {len(data)} bytes, more than the {MAX_RECORD_BYTES} a record may hold")
    try:
        body = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"progress record: not JSON ({e})") from e
    if not isinstance(body, dict):
        raise ValueError(f"progress record: a JSON object is expected, not {type(body).__name__}")
    version = body.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(f"progress record: version={version!r} is not a format version")
    if version > VERSION:
        raise ValueError(f"progress record: version {version} is newer than this reader's ({VERSION})")
    step = body.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise ValueError(f"progress record: step={step!r} is not a whole number >= 0")
    total = body.get("total")
    if total is not None and (not isinstance(total, int) or isinstance(total, bool) or total < 0):
        raise ValueError(f"progress record: total={total!r} is not a whole number >= 0 or null")
    raw_metrics = body.get("metrics") or {}
    if not isinstance(raw_metrics, dict):
        raise ValueError(f"progress record: metrics={raw_metrics!r} is not an object")
    metrics: dict[str, float] = {}
    for name, value in list(raw_metrics.items())[:MAX_METRICS]:
        if isinstance(value, str) and value in ("nan", "inf", "-inf"):
            metrics[str(name)[:MAX_METRIC_NAME]] = float(value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            metrics[str(name)[:MAX_METRIC_NAME]] = float(value)
        else:
            raise ValueError(f"progress record: metric {name!r}={value!r} is not a number")
    done = body.get("done", False)
    if not isinstance(done, bool):
        raise ValueError(f"progress record: done={done!r} is not true or false")
    return ProgressRecord(
        step=step,
        total=total,
        metrics=metrics,
        rate=_number(body, "rate", optional=True),
        eta_s=_number(body, "eta_s", optional=True),
        started_at=_number(body, "started_at") or 0.0,
        reported_at=_number(body, "reported_at") or 0.0,
        interval_s=_number(body, "interval_s", optional=True) or WRITE_INTERVAL_S,
        stale_after_s=_number(body, "stale_after_s", optional=True) or STALE_AFTER_MIN_S,
        done=done,
        version=version,
    )


def stale_after(interval_s: float, seconds_per_step: Optional[float] = None) -> float:
    """How long rank 0 may be silent before its record is stale (the writer stores it in the record).

    Args:
        interval_s: seconds between two writes of the record.
        seconds_per_step: the run's recent time per step, or ``None`` when not known yet.

    Returns:
        float: ``max(60, 3 * interval_s, 3 * seconds_per_step)``, rounded up to a whole second.
    """
    step_s = seconds_per_step if seconds_per_step is not None and math.isfinite(seconds_per_step) else 0.0
    return float(math.ceil(max(STALE_AFTER_MIN_S, 3 * interval_s, 3 * step_s)))


def is_stale(record: ProgressRecord, now: float) -> bool:
    """Whether rank 0 has been silent for longer than the record allows.

    Args:
        record: the record read.
        now: the reader's clock, seconds since the epoch.

    Returns:
        bool: ``True`` when the record is not ``done`` and ``now - reported_at > stale_after_s``.
    """
    return not record.done and now - record.reported_at > record.stale_after_s


def percent(record: ProgressRecord) -> Optional[int]:
    """Whole percent done (rounded down, 0 to 100), or ``None`` without a total.

    Args:
        record: the record.

    Returns:
        Optional[int]: the percentage.
    """
    if not record.total:
        return None
    return max(0, min(100, record.step * 100 // record.total))


def eta_at(record: ProgressRecord, now: float) -> Optional[float]:
    """Seconds left at ``now``: the record's estimate less the time since rank 0 made it (never below 0).

    Args:
        record: the record.
        now: seconds since the epoch.

    Returns:
        Optional[float]: ``None`` without an estimate, when done, or when the record is stale.
    """
    if record.eta_s is None or record.done or is_stale(record, now):
        return None
    return max(0.0, record.eta_s - max(0.0, now - record.reported_at))


def format_count(value: int) -> str:
    """``1200`` -> ``"1,200"``."""
    return f"{value:,}"


def format_duration(seconds: float) -> str:
    """A duration in the largest two units: ``42s``, ``3m10s``, ``2h05m``, ``3d04h``.

    Args:
        seconds: the duration (negative counts as 0).

    Returns:
        str: the text.
    """
    s = int(round(max(0.0, seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def format_value(value: float) -> str:
    """A metric's value in 4 significant digits (``0.1235``, ``1.235e+04``, ``nan``)."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.4g}"


def _head(record: ProgressRecord) -> str:
    if record.total and record.step > record.total:
        return f"step {format_count(record.step)}/{format_count(record.total)} (past the total)"
    if record.total:
        return f"step {format_count(record.step)}/{format_count(record.total)} ({percent(record)}%)"
    return f"step {format_count(record.step)}"


def _metrics_text(record: ProgressRecord, count: Optional[int]) -> list[str]:
    items = list(record.metrics.items())
    if count is not None:
        items = items[:count]
    return [f"{name} {format_value(value)}" for name, value in items]


def format_message(record: ProgressRecord, now: float) -> str:
    """The one line a reader shows for a record, e.g. ``step 1,200/5,000 (24%), ETA 3m10s, loss 0.124``.

    A stale record says so and drops its ETA: ``step 1,200/5,000 (24%), loss 0.124 (stale: rank 0 silent for
    12m03s)``. A done record has no ETA.

    Args:
        record: the record read.
        now: the reader's clock, seconds since the epoch.

    Returns:
        str: the message (its first :data:`MESSAGE_METRICS` metrics).
    """
    parts = [_head(record)]
    eta = eta_at(record, now)
    if eta is not None:
        parts.append(f"ETA {format_duration(eta)}")
    parts.extend(_metrics_text(record, MESSAGE_METRICS))
    text = ", ".join(parts)
    if is_stale(record, now):
        text += f" (stale: rank 0 silent for {format_duration(now - record.reported_at)})"
    return text


def message_from_file(data: Optional[Union[bytes, str]], now: float) -> Optional[str]:
    """The reader's one call: a record file's content (or ``None`` when there is none) -> the message, never raising.

    Args:
        data: what the reader read from :func:`record_path` (at most :data:`MAX_RECORD_BYTES`), or ``None`` when
            the file does not exist (a run that reports nothing writes none).
        now: the reader's clock, seconds since the epoch.

    Returns:
        Optional[str]: :func:`format_message` of the record; ``None`` without a file or for a malformed one (the
        reader then shows what it would show without progress).
    """
    if data is None:
        return None
    try:
        return format_message(parse_record(data), now)
    except ValueError:
        return None


def format_line(record: ProgressRecord, now: float, *, elapsed_s: Optional[float] = None, stopped: bool = False) -> str:
    """The console's progress line: the message with the rate, the elapsed time and every metric.

    Args:
        record: the latest record.
        now: seconds since the epoch.
        elapsed_s: seconds since the first report (shown when given).
        stopped: the run stopped before its function returned (it failed, or its ranks were stopped): the line says
            where they stopped, with neither a rate nor an ETA.

    Returns:
        str: e.g. ``step 1,200/5,000 (24%), 41.2 steps/s, ETA 1m32s, elapsed 29s, loss 0.124, acc 0.93``; stopped:
        ``stopped at step 1,200/5,000 (24%) after 29s, loss 0.124, acc 0.93``.
    """
    if stopped:
        head = f"stopped at {_head(record)}"
        if elapsed_s is not None:
            head += f" after {format_duration(elapsed_s)}"
        return ", ".join([head, *_metrics_text(record, None)])
    parts = [_head(record)]
    if record.rate is not None and not record.done:
        parts.append(f"{record.rate:.3g} steps/s")
    eta = eta_at(record, now)
    if eta is not None:
        parts.append(f"ETA {format_duration(eta)}")
    if elapsed_s is not None:
        parts.append(f"{'took' if record.done else 'elapsed'} {format_duration(elapsed_s)}")
    parts.extend(_metrics_text(record, None))
    text = ", ".join(parts)
    if is_stale(record, now):
        text += f" (stale: rank 0 silent for {format_duration(now - record.reported_at)})"
    return text
