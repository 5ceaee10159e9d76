"""The connector's blob storage: the task's inputs (`inputs.pb`), its error documents, its outputs (`outputs.pb`), its
progress record (`pytorch-progress.json`) and its preemption record (`pytorch-preemption.json`).

Everything goes through flytekit's file access (fsspec), so s3, gcs, abfs and local prefixes all work. Every read has
three answers: found, absent (the store said there is no such file), or unknown (the store did not answer, or failed):
unknown raises `errors.StorageUnavailable`, never an answer a phase could be decided on. A document that is found but
cannot be used (larger than allowed, not an error document) is found: `ErrorReport.problem` says why.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Optional

from flytekit.models.literals import LiteralMap
from google.protobuf.message import Message

from backend_plugin.errors import StorageUnavailable
from backend_plugin.task_errors import MAX_ERROR_FILES, ErrorReport, is_error_file, report_of
from pytorch_contract import preemption
from pytorch_contract.progress import MAX_RECORD_BYTES, record_path

logger = logging.getLogger(__name__)


def _filesystem(prefix: str) -> tuple[Any, str]:
    """(fsspec filesystem, prefix without a trailing '/') for a blob prefix, through flytekit's file access."""
    from flytekit.core.context_manager import FlyteContextManager

    file_access = FlyteContextManager.current_context().file_access
    return file_access.get_filesystem_for_path(prefix), prefix.rstrip("/")


@contextlib.contextmanager
def _fresh(prefix: str) -> Iterator[tuple[Any, str]]:
    """`_filesystem`, with the client's listing of the prefix dropped before the reads and after them.

    s3fs, gcsfs and adlfs keep every `ls` in the filesystem's `dircache` (`use_listings_cache` is on, with no expiry,
    by default), answer `open`, `info` and `exists` of a file under a folder they listed from that listing, and fsspec
    keeps one filesystem per store for the process: a document a task wrote after any earlier poll listed its prefix
    would read as absent for the connector's lifetime (a preemption record read as none, the failure charged to the
    task's retries), and the listings of every task would stay in memory. Each read here asks the store.
    """
    fs, base = _filesystem(prefix)
    fs.invalidate_cache(base)
    try:
        yield fs, base
    finally:
        fs.invalidate_cache(base)


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
        The documents read (at most `MAX_ERROR_FILES`, `max_bytes` each; none when the prefix holds none), and what
        kept a document found from being used.

    Raises:
        StorageUnavailable: the store did not answer: whether the task reported an error is unknown.
    """
    try:
        with _fresh(output_prefix) as (fs, base):
            try:
                entries = fs.ls(base, detail=False)
            except FileNotFoundError:
                return ErrorReport()  # absent: the task wrote nothing under its prefix
            names = sorted(str(e) for e in entries if is_error_file(str(e).rstrip("/").rsplit("/", 1)[-1]))
            documents, problems = [], []
            for path in names[:MAX_ERROR_FILES]:
                try:
                    with fs.open(path, "rb") as f:
                        data = f.read(max_bytes + 1)
                except FileNotFoundError:
                    continue  # removed since it was listed (a retried task's cleanup): absent
                source = path.rsplit("/", 1)[-1]
                if len(data) > max_bytes:
                    problems.append(f"{source} is larger than error_document_max_bytes={max_bytes}")
                    continue
                documents.append((source, data))
    except Exception as e:  # noqa: BLE001 - any failure of the store's client: unknown
        logger.warning("reading error documents under %s failed: %s", output_prefix, e)
        raise StorageUnavailable("the task's error documents", output_prefix, e) from None
    return report_of(documents, "; ".join(problems), max(0, len(names) - MAX_ERROR_FILES))


def outputs_written(output_prefix: str) -> bool:
    """Whether `outputs.pb` exists under `output_prefix`.

    Args:
        output_prefix: the execution's output prefix.

    Returns:
        True when the task wrote its outputs, False when the store says there are none.

    Raises:
        StorageUnavailable: the store did not answer: whether the task wrote its outputs is unknown.
    """
    try:
        with _fresh(output_prefix) as (fs, base):
            return bool(fs.exists(f"{base}/outputs.pb"))
    except Exception as e:  # noqa: BLE001 - any failure of the store's client: unknown
        logger.warning("checking outputs.pb under %s failed: %s", output_prefix, e)
        raise StorageUnavailable("outputs.pb", output_prefix, e) from None


@dataclass(frozen=True)
class RecordRead:
    """What one read of a progress record found.

    Attributes:
        data: the record's first `MAX_RECORD_BYTES + 1` bytes (more than `MAX_RECORD_BYTES`: the record is too
            large, which the contract's reader refuses); None when there is none, or it could not be read.
        problem: why it could not be read ("" when it was read, or does not exist): the store did not answer.
    """

    data: Optional[bytes] = None
    problem: str = ""


def read_progress_record(output_prefix: str) -> RecordRead:
    """Read the progress record global rank 0 writes under `output_prefix` (`pytorch_contract.progress.record_path`),
    bounded to one byte more than a record may hold.

    Args:
        output_prefix: the task attempt's output prefix.

    Returns:
        The bytes read, or None when the file does not exist (a task that reports no progress).

    Raises:
        StorageUnavailable: the store did not answer (the caller keeps the record it holds).
    """
    try:
        with _fresh(output_prefix) as (fs, base):
            try:
                with fs.open(record_path(base), "rb") as f:
                    return RecordRead(f.read(MAX_RECORD_BYTES + 1))
            except FileNotFoundError:
                return RecordRead()
    except Exception as e:  # noqa: BLE001 - any failure of the store's client: unknown
        raise StorageUnavailable("the progress record", output_prefix, e) from None


def read_preemption_record(output_prefix: str) -> RecordRead:
    """Read the preemption record a preempted run writes under `output_prefix`
    (`pytorch_contract.preemption.record_path`), bounded to one byte more than a record may hold.

    Args:
        output_prefix: the task attempt's output prefix.

    Returns:
        The bytes read, or None when the file does not exist (no rank of the attempt got a SIGTERM).

    Raises:
        StorageUnavailable: the store did not answer: whether the attempt was preempted is unknown.
    """
    try:
        with _fresh(output_prefix) as (fs, base):
            try:
                with fs.open(preemption.record_path(base), "rb") as f:
                    return RecordRead(f.read(preemption.MAX_RECORD_BYTES + 1))
            except FileNotFoundError:
                return RecordRead()
    except Exception as e:  # noqa: BLE001 - any failure of the store's client: unknown
        raise StorageUnavailable("the preemption record", output_prefix, e) from None
