"""The connector's blob storage: the task's inputs (`inputs.pb`), its error documents, its outputs (`outputs.pb`) and
its progress record (`pytorch-progress.json`).

Everything goes through flytekit's file access (fsspec), so s3, gcs, abfs and local prefixes all work. Reads never
raise: a failure is reported in the result, because the job's own status still decides the phase.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Optional

from flytekit.models.literals import LiteralMap
from google.protobuf.message import Message

from backend_plugin.task_errors import MAX_ERROR_FILES, ErrorReport, is_error_file, report_of
from pytorch_contract.progress import MAX_RECORD_BYTES, record_path

logger = logging.getLogger(__name__)


def _filesystem(prefix: str) -> tuple[Any, str]:
    """(fsspec filesystem, prefix without a trailing '/') for a blob prefix, through flytekit's file access."""
    from flytekit.core.context_manager import FlyteContextManager

    file_access = FlyteContextManager.current_context().file_access
    return file_access.get_filesystem_for_path(prefix), prefix.rstrip("/")


def write_inputs(inputs: Optional[LiteralMap], path: str) -> None:
    """Write the inputs LiteralMap (empty when None) to `path` (pyflyte-execute always reads one).

    Flyte 1's form: flytekit's entrypoint reads a `flyteidl.core.LiteralMap`. Another entrypoint reads another
    message (Flyte 2's reads `flyteidl2.task.Inputs`); its connector writes that with `write_message`.

    Args:
        inputs: the task's inputs.
        path: where `inputs.pb` goes.
    """
    write_message((inputs or LiteralMap(literals={})).to_flyte_idl(), path)


def write_message(message: Message, path: str) -> None:
    """Write a protobuf message, serialized, to `path` (a local path or any prefix flytekit's file access writes).

    Args:
        message: the message.
        path: the file to write.
    """
    from flytekit.core import utils
    from flytekit.core.context_manager import FlyteContextManager

    ctx = FlyteContextManager.current_context()
    local = ctx.file_access.get_random_local_path()
    utils.write_proto_to_file(message, local)
    ctx.file_access.put_data(local, path)


def read_error_report(output_prefix: str, max_bytes: int) -> ErrorReport:
    """Read the task's error documents under `output_prefix` (`error.pb`, `error-<uuid>.pb`), bounded.

    Args:
        output_prefix: the execution's output prefix.
        max_bytes: the largest document read (`error_document_max_bytes`).

    Returns:
        The documents read (at most `MAX_ERROR_FILES`, `max_bytes` each), and what went wrong.
    """
    try:
        fs, base = _filesystem(output_prefix)
        try:
            entries = fs.ls(base, detail=False)
        except FileNotFoundError:
            return ErrorReport()
        names = sorted(str(e) for e in entries if is_error_file(str(e).rstrip("/").rsplit("/", 1)[-1]))
        documents, problems = [], []
        for path in names[:MAX_ERROR_FILES]:
            with fs.open(path, "rb") as f:
                data = f.read(max_bytes + 1)
            source = path.rsplit("/", 1)[-1]
            if len(data) > max_bytes:
                problems.append(f"{source} is larger than error_document_max_bytes={max_bytes}")
                continue
            documents.append((source, data))
        return report_of(documents, "; ".join(problems), max(0, len(names) - MAX_ERROR_FILES))
    except Exception as e:  # noqa: BLE001 - any storage failure is reported, never allowed to hide the phase
        logger.warning("reading error documents under %s failed: %s", output_prefix, e)
        return ErrorReport(problem=f"{type(e).__name__}: {e} (under {output_prefix})")


def outputs_written(output_prefix: str) -> bool:
    """Whether `outputs.pb` exists under `output_prefix` (False when it cannot be told).

    Args:
        output_prefix: the execution's output prefix.

    Returns:
        True when the task wrote its outputs.
    """
    try:
        fs, base = _filesystem(output_prefix)
        return bool(fs.exists(f"{base}/outputs.pb"))
    except Exception as e:  # noqa: BLE001 - unknown is "not written": the caller then reports what it knows
        logger.warning("checking outputs.pb under %s failed: %s", output_prefix, e)
        return False


@dataclass(frozen=True)
class RecordRead:
    """What one read of a progress record found.

    Attributes:
        data: the record's first `MAX_RECORD_BYTES + 1` bytes (more than `MAX_RECORD_BYTES`: the record is too
            large, which the contract's reader refuses); None when there is none, or it could not be read.
        problem: why it could not be read ("" when it was read, or does not exist).
    """

    data: Optional[bytes] = None
    problem: str = ""


def read_progress_record(output_prefix: str) -> RecordRead:
    """Read the progress record global rank 0 writes under `output_prefix` (`pytorch_contract.progress.record_path`),
    bounded to one byte more than a record may hold.

    Args:
        output_prefix: the task attempt's output prefix.

    Returns:
        The bytes read (None when the file does not exist, as for a task that reports no progress), or why the read
        failed; never raises.
    """
    try:
        fs, base = _filesystem(output_prefix)
        try:
            with fs.open(record_path(base), "rb") as f:
                return RecordRead(f.read(MAX_RECORD_BYTES + 1))
        except FileNotFoundError:
            return RecordRead()
    except Exception as e:  # noqa: BLE001 - any storage failure is reported, never allowed to fail a poll
        return RecordRead(problem=f"{type(e).__name__}: {e} (under {output_prefix})")
