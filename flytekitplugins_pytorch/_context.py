"""The Flyte execution context across the process boundary: captured in the task process, rebuilt in each rank.

``flytekit.current_context()`` (checkpoint, working directory, execution id, Decks) lives in the task process; a rank
process starts without it. :func:`snapshot_context` takes its picklable parts in the task process and
:func:`rank_context` rebuilds a context from them in a rank, with the rank's own working directory. The two are
mirror images and stay side by side so that a field added to one is added to the other.

flytekit is imported inside the functions; torch is never imported.
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional


@dataclass(frozen=True)
class ContextSnapshot:
    """The parts of the task process's Flyte execution context that a rank process rebuilds.

    Attributes:
        execution_id: ``flytekit.current_context().execution_id`` of the task process (a flytekit identifier).
        task_id: the task process's task id (a flytekit identifier), if any.
        execution_date: the task process's execution date.
        raw_output_prefix: where offloaded data (files, directories) is written.
        output_metadata_prefix: where primitive outputs are written, if set.
        checkpoint_dest: where this attempt's checkpoint is written; ``None`` without checkpointing.
        checkpoint_src: the previous attempt's checkpoint; ``None`` when there is none.
        enable_deck: whether Decks are rendered for this task.
        mode: ``ExecutionState.Mode`` value of the task process (``None`` when unknown).
        working_dir: the task process's working directory; each rank works in ``<working_dir>/rank-<n>``.
    """

    execution_id: Any = None
    task_id: Any = None
    execution_date: Optional[datetime.datetime] = None
    raw_output_prefix: Optional[str] = None
    output_metadata_prefix: Optional[str] = None
    checkpoint_dest: Optional[str] = None
    checkpoint_src: Optional[str] = None
    enable_deck: bool = False
    mode: Optional[int] = None
    working_dir: Optional[str] = None


def snapshot_context() -> ContextSnapshot:
    """Capture the current Flyte execution context for the rank processes (runs in the task process).

    Returns:
        ContextSnapshot: the picklable parts of ``flytekit.current_context()`` and the execution mode.
    """
    from flytekit.core.context_manager import FlyteContextManager

    ctx = FlyteContextManager.current_context()
    params = ctx.user_space_params
    state = ctx.execution_state
    dest = src = None
    if params is not None and params._checkpoint is not None:  # noqa: SLF001 - flytekit has no public accessor
        dest = getattr(params._checkpoint, "_checkpoint_dest", None)
        src = getattr(params._checkpoint, "_checkpoint_src", None)
    working_dir = None
    if params is not None:
        wd = params.working_directory
        working_dir = str(getattr(wd, "name", wd))
    return ContextSnapshot(
        execution_id=params.execution_id if params is not None else None,
        task_id=params.task_id if params is not None else None,
        execution_date=params.execution_date if params is not None else None,
        raw_output_prefix=(params.raw_output_prefix if params is not None else None)
        or ctx.file_access.raw_output_prefix,
        output_metadata_prefix=params.output_metadata_prefix if params is not None else None,
        checkpoint_dest=str(dest) if dest else None,
        checkpoint_src=str(src) if src else None,
        enable_deck=bool(params.enable_deck) if params is not None else False,
        mode=state.mode.value if state is not None and state.mode is not None else None,
        working_dir=working_dir,
    )


def rank_context(snapshot: ContextSnapshot, workdir: Path) -> tuple[Any, Any]:
    """Rebuild the Flyte context a rank runs under (runs in the rank process).

    Args:
        snapshot: what the task process captured.
        workdir: this rank's own working directory (created if missing).

    Returns:
        tuple[Any, Any]: the ``FlyteContext`` to enter and its ``ExecutionParameters`` (where the rank's Decks
        collect).
    """
    from flytekit.core.checkpointer import SyncCheckpoint
    from flytekit.core.context_manager import (
        ExecutionParameters,
        ExecutionState,
        FlyteContextManager,
        OutputMetadataTracker,
    )
    from flytekit.core.data_persistence import FileAccessProvider

    workdir.mkdir(parents=True, exist_ok=True)
    checkpoint = None
    ctx = FlyteContextManager.current_context()
    if snapshot.checkpoint_dest:
        src = resume_source(ctx.file_access, snapshot.checkpoint_dest, snapshot.checkpoint_src)
        checkpoint = SyncCheckpoint(checkpoint_dest=snapshot.checkpoint_dest, checkpoint_src=src)
    raw_prefix = snapshot.raw_output_prefix or ctx.file_access.raw_output_prefix
    params = ExecutionParameters(
        execution_date=snapshot.execution_date or datetime.datetime.now(datetime.timezone.utc),
        tmp_dir=str(workdir),
        stats=ctx.user_space_params.stats if ctx.user_space_params is not None else None,
        execution_id=snapshot.execution_id,
        logging=logging.getLogger("flytekit.user_space"),
        raw_output_prefix=raw_prefix,
        output_metadata_prefix=snapshot.output_metadata_prefix,
        checkpoint=checkpoint,
        decks=[],
        task_id=snapshot.task_id,
        enable_deck=snapshot.enable_deck,
    )
    file_access = FileAccessProvider(local_sandbox_dir=str(workdir / "sandbox"), raw_output_prefix=raw_prefix)
    mode = ExecutionState.Mode(snapshot.mode) if snapshot.mode is not None else ExecutionState.Mode.TASK_EXECUTION
    state = ExecutionState(working_dir=str(workdir), mode=mode, user_space_params=params)
    new_ctx = (
        ctx.new_builder()
        .with_file_access(file_access)
        .with_execution_state(state)
        .with_output_metadata_tracker(OutputMetadataTracker())
        .build()
    )
    return new_ctx, params


def holds_checkpoint(file_access: Any, path: str) -> bool:
    """Whether ``path`` (a local folder or a blob prefix) holds a checkpoint: it exists and is not empty.

    Args:
        file_access: flytekit's ``FileAccessProvider`` (its file systems reach the blob store).
        path: this attempt's checkpoint prefix.

    Returns:
        bool: something was written there; ``False`` also when the store cannot be asked (logged).
    """
    try:
        fs = file_access.get_filesystem_for_path(path)
        return bool(fs.exists(path) and fs.ls(path))
    except Exception as exc:  # noqa: BLE001 - an unreachable store must not fail the task here: read as before
        logging.getLogger(__name__).warning("could not look for a checkpoint at %s: %s", path, exc)
        return False


def resume_source(file_access: Any, dest: str, src: Optional[str]) -> Optional[str]:
    """Where ``checkpoint.read()`` / ``restore()`` read from: the checkpoint to resume.

    flytekit's checkpoint reads only the previous Flyte attempt's prefix (``--prev-checkpoint``). When this attempt's
    own prefix already holds a checkpoint, an earlier run of this attempt wrote it and was restarted (an elastic
    restart, a container restarted by ``OnFailure`` or ``ExitCode``): that one is newer, so it is read instead. A
    Flyte retry then reads what the failed attempt wrote last, restarts included. One API on every layer.

    Args:
        file_access: flytekit's ``FileAccessProvider``.
        dest: this attempt's checkpoint prefix (where ``write()`` / ``save()`` go).
        src: the previous attempt's prefix, or ``None``.

    Returns:
        Optional[str]: ``dest`` when it holds a checkpoint, else ``src``.
    """
    return dest if holds_checkpoint(file_access, dest) else src


def resumed_checkpoint(checkpoint: Any, file_access: Any) -> Any:
    """The task process's own checkpoint, reading this attempt's prefix when a restarted run wrote one there.

    Args:
        checkpoint: flytekit's ``SyncCheckpoint`` of the context (or ``None``).
        file_access: flytekit's ``FileAccessProvider``.

    Returns:
        Any: ``checkpoint`` itself, or a ``SyncCheckpoint`` with the same destination that reads ``dest`` (see
        :func:`resume_source`).
    """
    from flytekit.core.checkpointer import SyncCheckpoint

    dest = getattr(checkpoint, "_checkpoint_dest", None)
    if not dest:
        return checkpoint
    src = getattr(checkpoint, "_checkpoint_src", None)
    chosen = resume_source(file_access, str(dest), src)
    return checkpoint if chosen == src else SyncCheckpoint(checkpoint_dest=str(dest), checkpoint_src=chosen)
