"""The task's own error documents: what flytekit writes under the output prefix when the task raises (pure).

`pyflyte-execute` catches the task's exception and writes a `flyteidl.core.ErrorDocument` to `<output prefix>/error.pb`
(or, with Flyte's distributed error strategy `_F_DES` set, to `error-<uuid>.pb`, one per replica, naming the worker
from `_F_WN`). Its `kind` is `RECOVERABLE` for a `FlyteRecoverableException` (and for errors flytekit attributes to
the system) and `NON_RECOVERABLE` for any other user exception; its `timestamp` is when the exception was raised
(the launcher carries the failing rank's time into it).

This module only parses and ranks documents already read; reading them (blob storage I/O, bounded) is the
connector's job. `status.failed_job_status` turns the result into a phase.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Optional

from flyteidl.core import errors_pb2, execution_pb2
from google.protobuf.message import DecodeError

__all__ = [
    "TaskError",
    "ErrorReport",
    "parse_error_document",
    "is_error_file",
    "ERROR_FILE",
    "MAX_ERROR_FILES",
]

ERROR_FILE = "error.pb"
"""flytekit's error document name (`flytekit.core.constants.ERROR_FILE_NAME`)."""

_ERROR_FILE = re.compile(r"^error(?:-[0-9a-f]{32})?\.pb\Z")  # error.pb, or error-<uuid hex>.pb with _F_DES

MAX_ERROR_FILES = 64
"""At most this many error documents are read per `get`: with `_F_DES` each failing replica writes one; past this
many, the earliest among the first 64 (by name) is used, and the message says so."""

SUMMARY_LIMIT = 600
"""Characters of the exception's summary line kept in a phase message."""

TRACE_LIMIT = 2000
"""Characters of the traceback's tail kept in a phase message."""


@dataclass(frozen=True)
class TaskError:
    """One error document, reduced to what a phase and its message need.

    Attributes:
        kind: `RECOVERABLE` or `NON_RECOVERABLE` (flyteidl `ContainerError.Kind`).
        origin: `USER`, `SYSTEM` or `UNKNOWN` (flyteidl `ExecutionError.ErrorKind`).
        code: flytekit's error code (e.g. `USER:RuntimeError`).
        message: the document's message: flytekit's "Trace: ... Message: ..." text.
        worker: the pod that wrote it (`_F_WN`), "" when unknown.
        timestamp: when the exception was raised, None when the document has none.
        source: the file it came from (`error.pb`, `error-<uuid>.pb`).
    """

    kind: str
    origin: str
    code: str
    message: str
    worker: str = ""
    timestamp: Optional[datetime.datetime] = None
    source: str = ERROR_FILE

    @property
    def recoverable(self) -> bool:
        """Whether Flyte would retry the task for this error (`kind` is `RECOVERABLE`)."""
        return self.kind == "RECOVERABLE"

    @property
    def summary(self) -> str:
        """The exception as one line: the `Message:` part flytekit writes after the trace, else the last line."""
        text = self.message
        marker = text.rfind("\nMessage:")
        tail = text[marker + len("\nMessage:") :] if marker >= 0 else text
        lines = [line.strip() for line in tail.strip().splitlines() if line.strip()]
        if not lines:
            return self.code or "error"
        first = lines[0] if marker >= 0 else lines[-1]
        return first if len(first) <= SUMMARY_LIMIT else first[: SUMMARY_LIMIT - 3] + "..."

    @property
    def trace_tail(self) -> str:
        """The last `TRACE_LIMIT` characters of the trace (before `Message:`), "" when there is none."""
        text = self.message
        marker = text.rfind("\nMessage:")
        trace = text[:marker] if marker >= 0 else ""
        trace = trace.removeprefix("Trace:").strip("\n")
        return trace[-TRACE_LIMIT:]


@dataclass(frozen=True)
class ErrorReport:
    """What the connector found under the output prefix.

    Attributes:
        errors: the error documents read (empty: the task wrote none, e.g. its container was killed first).
        problem: why the documents could not be (fully) read, "" when they could; the phase still comes from the
            job's replicas then.
        skipped: documents not read because of `MAX_ERROR_FILES`.
    """

    errors: tuple[TaskError, ...] = ()
    problem: str = ""
    skipped: int = 0

    @property
    def earliest(self) -> Optional[TaskError]:
        """The root cause: the document with the earliest timestamp (those without one last, then by file name),
        as Flyte's `earliest` error aggregation picks it."""
        if not self.errors:
            return None
        never = datetime.datetime.max.replace(tzinfo=datetime.timezone.utc)
        return min(self.errors, key=lambda e: (e.timestamp or never, e.source))


def is_error_file(name: str) -> bool:
    """Whether a file name (the last path part) is an error document flytekit writes.

    Args:
        name: a file name such as `error.pb` or `error-0b2f....pb`.

    Returns:
        True for `error.pb` and `error-<32 hex>.pb`.
    """
    return _ERROR_FILE.match(name) is not None


def parse_error_document(data: bytes, source: str = ERROR_FILE) -> TaskError:
    """Parse a serialized `flyteidl.core.ErrorDocument`.

    Args:
        data: the file's bytes.
        source: its name, for messages.

    Returns:
        The reduced error.

    Raises:
        ValueError: the bytes are not an ErrorDocument (or an empty one).
    """
    doc = errors_pb2.ErrorDocument()
    try:
        doc.ParseFromString(bytes(data))
    except DecodeError as e:
        raise ValueError(f"{source} is not a flyteidl.core.ErrorDocument: {e}") from e
    if not doc.HasField("error"):
        raise ValueError(f"{source} is an ErrorDocument without an error")
    err = doc.error
    stamp = None
    if err.HasField("timestamp"):
        stamp = err.timestamp.ToDatetime(tzinfo=datetime.timezone.utc)
    return TaskError(
        kind=errors_pb2.ContainerError.Kind.Name(err.kind),
        origin=_origin(err.origin),
        code=err.code,
        message=err.message,
        worker=err.worker,
        timestamp=stamp,
        source=source,
    )


def _origin(value: int) -> str:
    try:
        return str(execution_pb2.ExecutionError.ErrorKind.Name(value))
    except ValueError:
        return "UNKNOWN"


def report_of(documents: Iterable[tuple[str, bytes]], problem: str = "", skipped: int = 0) -> ErrorReport:
    """An `ErrorReport` from raw documents; one that does not parse is named in `problem`, the others are kept.

    Args:
        documents: (file name, bytes) pairs.
        problem: a reading problem already known.
        skipped: documents left unread.

    Returns:
        The report.
    """
    errors = []
    problems = [problem] if problem else []
    for source, data in documents:
        try:
            errors.append(parse_error_document(data, source))
        except ValueError as e:
            problems.append(str(e))
    return ErrorReport(tuple(errors), "; ".join(problems), skipped)
