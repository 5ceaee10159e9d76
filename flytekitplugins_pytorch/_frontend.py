"""The flytekit front-end of the launcher: `FLYTEKIT`, the `pytorch_core.frontend.FrontEnd` of flytekit tasks.

The core launcher asks it for everything that is flytekit's: the execution context a rank rebuilds and its
checkpoint (``_context.py``), which exceptions Flyte retries (``FlyteRecoverableException``), ``IgnoreOutputs`` for
the replicas that are not global rank 0, the error documents a restarted run left behind, rank 0's Decks and output
metadata, and the checkpoint prefixes of ``pytorch_core.checkpoint``. ``RecoverableRankFailure``,
``RecoverableHangError`` and ``RecoverablePeerFailedError`` live here (made at first use), so that pickle finds them
in the rank and in the launcher.

flytekit is imported inside the methods (a rank imports it once, in the fork server); torch is never imported.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

from flytekitplugins_pytorch import _context, _progress
from pytorch_core import _failure
from pytorch_core.frontend import CheckpointPrefixes, PreemptedError, recoverable_class

__all__ = ["FLYTEKIT", "FlytekitFrontEnd"]

logger = logging.getLogger(__name__)

#: flytekit's error documents: ``error.pb``, or ``error-<uuid hex>.pb`` per replica (Flyte's ``_F_DES``).
_ERROR_DOCUMENT = re.compile(r"^error(?:-[0-9a-f]{32})?\.pb\Z")
_RECOVERABLE_BASES = ("RankFailure", "HangError", "PeerFailedError")


def __getattr__(name: str) -> type:
    """``RecoverableRankFailure``, ``RecoverableHangError`` or ``RecoverablePeerFailedError``, made at first use.

    Args:
        name: the attribute asked for.

    Returns:
        type: the core's class that is also flytekit's ``FlyteRecoverableException``, so that Flyte retries the
        task. Pickle finds it by this name.

    Raises:
        AttributeError: any other name.
    """
    base_name = name.removeprefix("Recoverable")
    if not name.startswith("Recoverable") or base_name not in _RECOVERABLE_BASES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from flytekit.exceptions.user import FlyteRecoverableException

    cls = recoverable_class(__name__, getattr(_failure, base_name), FlyteRecoverableException)
    globals()[name] = cls
    return cls


class _RankScope:
    """A rank's flytekit context: where its Decks collect and its output metadata tracker."""

    def __init__(self, params: Any, ctx: Any) -> None:
        self.params = params
        self.ctx = ctx

    def result_extras(self, value: Any) -> tuple[list[tuple[str, str]], Any]:
        from flytekit.deck.deck import TimeLineDeck

        decks = [(deck.name, deck.html) for deck in self.params.decks if not isinstance(deck, TimeLineDeck)]
        tracker = self.ctx.output_metadata_tracker
        return decks, tracker.get(value) if tracker is not None else None


class FlytekitFrontEnd:
    """flytekit 1.x (``@pytorch_task``, ``@task(task_config=PyTorch(...))``)."""

    name = "flytekit"
    preload: tuple[str, ...] = ("flytekit", "flytekitplugins_pytorch._frontend")  # a rank unpickles FLYTEKIT
    user_frames: tuple[str, ...] = ("/flytekitplugins_pytorch/", "/flytekit/")
    launch_frames: tuple[str, ...] = ("/flytekit/",)

    def __reduce__(self) -> str:
        return "FLYTEKIT"  # one instance per process: pickled by reference

    def is_local(self) -> bool:
        from flytekit.core.context_manager import FlyteContextManager

        state = FlyteContextManager.current_context().execution_state
        return bool(state is not None and state.mode is not None and state.is_local_execution())

    def snapshot(self) -> _context.ContextSnapshot:
        return _context.snapshot_context()

    def run_id(self) -> str:
        import flytekit

        return str(flytekit.current_context().execution_id.name or "")

    @contextlib.contextmanager
    def rank_scope(self, snapshot: Any, workdir: Path) -> Iterator[_RankScope]:
        from flytekit.core.context_manager import FlyteContextManager

        new_ctx, params = _context.rank_context(snapshot, workdir)
        with FlyteContextManager.with_context(new_ctx.new_builder()) as ctx:
            yield _RankScope(params, ctx)

    @contextlib.contextmanager
    def resumable_checkpoint(self) -> Iterator[None]:
        """``current_context().checkpoint`` reads this attempt's own checkpoint when a restarted run of the attempt
        wrote one (``_context.resume_source``), for the block only."""
        from flytekit.core.context_manager import FlyteContextManager

        ctx = FlyteContextManager.current_context()
        params = ctx.user_space_params
        original = getattr(params, "_checkpoint", None) if params is not None else None
        if original is None:
            yield
            return
        params._checkpoint = _context.resumed_checkpoint(original, ctx.file_access)  # noqa: SLF001 - no setter
        try:
            yield
        finally:
            params._checkpoint = original  # noqa: SLF001

    def is_recoverable(self, exc: BaseException) -> bool:
        from flytekit.exceptions.user import FlyteRecoverableException

        return isinstance(exc, FlyteRecoverableException)

    def recoverable(self, base: type[BaseException]) -> type[BaseException]:
        cls: type[BaseException] = __getattr__(f"Recoverable{base.__name__}")
        return cls

    def permanent(self, base: type[BaseException]) -> type[BaseException]:
        return base  # flytekit retries only a FlyteRecoverableException

    def ignore_outputs(self, message: str) -> BaseException:
        from flytekit.core.base_task import IgnoreOutputs

        return IgnoreOutputs(message)

    def remove_recovered_errors(self) -> None:
        """Delete the error documents in this attempt's output prefix (its global rank 0 succeeded).

        A container that failed and was restarted within the attempt (``OnFailure``, ``ExitCode``, an elastic
        restart of its pod) left flytekit's error document behind; the attempt then recovered, so no reader should
        find it next to the outputs. Best effort: a document that cannot be listed or deleted is logged.
        """
        from flytekit.core.context_manager import FlyteContextManager

        ctx = FlyteContextManager.current_context()
        params = ctx.user_space_params
        prefix = getattr(params, "output_metadata_prefix", None) if params is not None else None
        if not prefix:
            return
        try:
            fs = ctx.file_access.get_filesystem_for_path(prefix)
            listed = fs.ls(prefix, detail=False)
            stale = [path for path in listed if _ERROR_DOCUMENT.match(str(path).rsplit("/", 1)[-1])]
            for path in stale:
                fs.rm(path)
                logger.info("removed %s: a restarted run of this attempt failed there and the attempt recovered", path)
        except Exception as exc:  # noqa: BLE001 - outputs matter more than the clean-up
            logger.warning("could not remove recovered error documents under %s: %s", prefix, exc)

    def adopt(self, decks: list[tuple[str, str]], value: Any, metadata: Any) -> None:
        """Add rank 0's Decks and output metadata to the task process's current context.

        Rank 0's Decks go ahead of the ``Progress`` Deck, in rank 0's order: mid-run the Deck opens on progress, and
        once the run has ended on the tab the user's code chose (flytekit opens the first Deck).
        """
        from flytekit.core.context_manager import FlyteContextManager
        from flytekit.deck.deck import Deck

        params = FlyteContextManager.current_context().user_space_params
        held = list(params.decks) if params is not None else []
        added = [Deck(name, html) for name, html in decks]  # a new Deck adds itself to the context's decks
        if params is not None and added:
            kept = [d for d in params.decks if all(d is not a for a in added)]
            at = next((i for i, d in enumerate(kept) if d.name == _progress.DECK_NAME and d in held), len(kept))
            params.decks[:] = kept[:at] + added + kept[at:]
        if metadata is None:
            return
        tracker = FlyteContextManager.current_context().output_metadata_tracker
        if tracker is not None:
            tracker.add(value, metadata)

    def publish_progress(self, task: Any, html: str, final: bool) -> bool:
        """The ``Progress`` Deck, published mid-run when the task renders Decks (``_progress.py``)."""
        return _progress.publish_progress(task, html, final)

    def write_output_file(self, name: str, data: bytes) -> Optional[str]:
        """A file in the task's output metadata prefix, through flytekit's file access (``_progress.py``)."""
        return _progress.write_output_file(name, data)

    def checkpoint_place(self) -> Optional[CheckpointPrefixes]:
        """The prefixes of ``current_context().checkpoint`` (this attempt's, the previous attempt's) and flytekit's
        file system for them; ``None`` in a local run (the launcher's folder) or without a checkpoint."""
        from flytekit.core.context_manager import FlyteContextManager

        if self.is_local():
            return None
        ctx = FlyteContextManager.current_context()
        params = ctx.user_space_params
        checkpoint = getattr(params, "_checkpoint", None) if params is not None else None
        dest = getattr(checkpoint, "_checkpoint_dest", None)
        if not dest:
            return None
        src = getattr(checkpoint, "_checkpoint_src", None)
        return CheckpointPrefixes(str(dest), str(src) if src else None, ctx.file_access.get_filesystem_for_path)

    def preempted(self, message: str) -> BaseException:
        """The core's ``PreemptedError``: the task class raises it outside flytekit's user scope, so
        ``pyflyte-execute`` writes a ``RECOVERABLE`` error document of ``SYSTEM`` origin (``task.py``)."""
        return PreemptedError(message)


FLYTEKIT = FlytekitFrontEnd()
"""The flytekit front-end (one per process)."""
