"""The Flyte 2 front-end of the launcher: `FLYTE2`, the `pytorch_core.frontend.FrontEnd` of Flyte 2 tasks.

A Flyte 2 task hands its function to the core launcher with this front-end, in a local run (``flyte.run`` after
``flyte.init()``) and in a pod that Flyte 2's entrypoint started. Flyte 2's task context holds nothing a rank has to
rebuild (no checkpoint object, no Decks collected per task), so a rank runs in its own working directory.

Flyte 2's error protocol: an exception is retried unless it is a ``flyte.errors.NonRecoverableError`` (the
entrypoint writes it as ``NON_RECOVERABLE``). So a recoverable failure of ours is the core's class itself, and a
permanent one (a rank's ``NonRecoverableError``, a hang with ``retry_hangs=False``) is ``Permanent<Base>``, also a
``NonRecoverableError``; those classes live here (made at first use) so that pickle finds them in every process.

Only global rank 0 writes outputs. In a pod that does not hold it, the task ends with `WithheldOutputs`, a
``SystemExit(0)``: Flyte 2's entrypoint lets it through (it handles ``Exception``), so the pod ends successfully
without writing outputs or an error, as flytekit's ``IgnoreOutputs`` does.

Imports neither flytekit nor torch; flyte only inside the functions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from pytorch_core import _failure
from pytorch_core.frontend import CheckpointPrefixes, PreemptedError, recoverable_class

__all__ = ["FLYTE2", "FLYTE2_DIRECT_CALL", "Flyte2FrontEnd", "Flyte2DirectCall", "Flyte2Snapshot", "WithheldOutputs"]

logger = logging.getLogger(__name__)
_BASES = ("RankFailure", "HangError", "PeerFailedError")


def __getattr__(name: str) -> type:
    """``PermanentRankFailure``, ``PermanentHangError`` or ``PermanentPeerFailedError``, made at first use.

    Args:
        name: the attribute asked for.

    Returns:
        type: the core's class that is also ``flyte.errors.NonRecoverableError``. Pickle finds it by this name.

    Raises:
        AttributeError: any other name.
    """
    if name == "Flyte2PreemptedError":
        return _preempted_class()
    base_name = name.removeprefix("Permanent")
    if not name.startswith("Permanent") or base_name not in _BASES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from flyte.errors import NonRecoverableError

    cls = recoverable_class(__name__, getattr(_failure, base_name), NonRecoverableError, prefix="Permanent")
    globals()[name] = cls
    return cls


def _preempted_class() -> type:
    """``Flyte2PreemptedError``: the core's ``PreemptedError`` and ``flyte.errors.RuntimeSystemError`` (code
    ``Preempted``), made at first use."""
    from flyte.errors import RuntimeSystemError

    class Flyte2PreemptedError(PreemptedError, RuntimeSystemError):
        """The ranks stopped for a preemption: Flyte 2 writes a recoverable error of system origin."""

        def __init__(self, message: str) -> None:
            RuntimeSystemError.__init__(self, "Preempted", message)

    Flyte2PreemptedError.__module__ = __name__
    globals()["Flyte2PreemptedError"] = Flyte2PreemptedError
    return Flyte2PreemptedError


#: In a rank: the checkpoint prefixes the task process captured (``Flyte2Snapshot.checkpoint``).
_rank_checkpoint: Optional[tuple[str, Optional[str]]] = None


def _prefixes() -> Optional[tuple[str, Optional[str]]]:
    """``flyte.ctx().checkpoint_paths`` as (this attempt's, the previous attempt's), or ``None``."""
    import flyte

    paths = getattr(flyte.ctx(), "checkpoint_paths", None)
    dest = str(getattr(paths, "checkpoint_path", None) or "").strip()
    if not dest:
        return None
    src = str(getattr(paths, "prev_checkpoint_path", None) or "").strip().strip('"')
    return dest, src or None


def revive_background_loops() -> int:
    """Give each of flyte's background event loops that lost its thread a new loop and thread, in place.

    flyte runs every syncified call (``flyte.syncify``: its clients, ``flyte.report``, flyte-migrate's Deck flush at
    the end of a task) on an event loop in a daemon thread it starts at import. A rank is forked from a process where
    that thread ran; the fork copies the loop but not its thread, so the rank's first syncified call would wait
    forever. The loops are found through the ``Syncify`` instances of flyte's modules (and ``__main__``'s) and
    repaired in place, so the wrappers made at decoration, which hold the same loop object, work too. Does nothing
    where flyte's syncify module is not loaded, or where its loop threads are alive.

    Returns:
        int: how many loops were given a new thread.
    """
    api = sys.modules.get("flyte.syncify._api")
    syncify_class = getattr(api, "Syncify", None)
    if syncify_class is None:
        return 0
    revived = 0
    seen: set[int] = set()
    for name, module in list(sys.modules.items()):
        if not (name == "__main__" or name == "flyte" or name.startswith(("flyte.", "flyte_"))):
            continue
        try:
            # No attribute lookups on what a module holds: flyte keeps lazy module objects (pandas, ...) that raise
            # ImportError on any of them, isinstance()'s __class__ included.
            values = list(object.__getattribute__(module, "__dict__").values())
        except (AttributeError, TypeError):
            continue
        for value in values:
            if not issubclass(type(value), syncify_class):
                continue
            loop = object.__getattribute__(value, "__dict__").get("_bg_loop")
            if loop is None or id(loop) in seen:
                continue
            seen.add(id(loop))
            try:
                if loop.thread.is_alive():
                    continue
                loop.loop = asyncio.new_event_loop()
                loop.thread = threading.Thread(name=loop.thread.name, target=loop._run, daemon=True)
                loop.thread.start()
                revived += 1
            except AttributeError as e:  # another flyte release's layout: say so, never fail the rank for it
                logger.debug("flyte's background loop could not be restarted in this rank: %s", e)
    return revived


@dataclass(frozen=True)
class Flyte2Snapshot:
    """What a rank of a Flyte 2 task takes from the task process.

    Attributes:
        working_dir: the working directory of the ranks.
        flytekit: for flytekit code that ``flyte-migrate`` made a Flyte 2 task (flytekit is loaded in the task
            process): the flytekit context its ranks get (``flytekitplugins_pytorch._context``), with a checkpoint
            in a folder of this run, as a flytekit local run gives; ``None`` otherwise.
        checkpoint: in a pod, the action's checkpoint prefixes (this attempt's, the previous attempt's) from
            ``flyte.ctx().checkpoint_paths``, for ``pytorch_core.checkpoint`` in the ranks; ``None`` locally.
    """

    working_dir: Optional[str] = None
    flytekit: Any = None
    checkpoint: Optional[tuple[str, Optional[str]]] = None


def _flytekit_snapshot() -> Any:
    """The flytekit context for the ranks of a migrated flytekit task, or None where flytekit is not loaded.

    Only when the task's code already imported flytekit: this front-end never imports it by itself.
    """
    if "flytekit" not in sys.modules:
        return None
    import dataclasses
    import tempfile

    from flytekitplugins_pytorch import _context

    snapshot = _context.snapshot_context()
    if snapshot.checkpoint_dest is None:  # flytekit's default context has none: its checkpoint raises
        folder = tempfile.mkdtemp(prefix="flyte2-pytorch-checkpoint-")
        snapshot = dataclasses.replace(snapshot, checkpoint_dest=folder)
    return snapshot


class _RankScope:
    def result_extras(self, value: Any) -> tuple[list[tuple[str, str]], Any]:
        return [], None


class WithheldOutputs(SystemExit):
    """A pod that does not hold global rank 0 ends here, successfully and without outputs (exit status 0)."""

    def __init__(self, message: str) -> None:
        super().__init__(0)
        self.message = message


class Flyte2FrontEnd:
    """Flyte 2 (``flyte.TaskEnvironment(plugin_config=PyTorch(...))``)."""

    name = "flyte"
    preload: tuple[str, ...] = ("flyte2_pytorch._frontend",)  # a rank unpickles FLYTE2
    user_frames: tuple[str, ...] = ("/flyte2_pytorch/", "/flyte/")
    launch_frames: tuple[str, ...] = ("/flyte/",)

    def __reduce__(self) -> str:
        return "FLYTE2"  # one instance per process: pickled by reference

    def is_local(self) -> bool:
        import flyte

        return bool(flyte.ctx().mode == "local")

    def snapshot(self) -> Flyte2Snapshot:
        return Flyte2Snapshot(flytekit=_flytekit_snapshot(), checkpoint=None if self.is_local() else _prefixes())

    def run_id(self) -> str:
        import flyte

        action = getattr(flyte.ctx(), "action", None)  # every pod of the job runs the same action
        return str(getattr(action, "run_name", None) or "")

    @contextlib.contextmanager
    def rank_scope(self, snapshot: Any, workdir: Path) -> Iterator[_RankScope]:
        global _rank_checkpoint
        workdir.mkdir(parents=True, exist_ok=True)
        revive_background_loops()
        _rank_checkpoint = getattr(snapshot, "checkpoint", None)
        try:
            if getattr(snapshot, "flytekit", None) is None:
                yield _RankScope()
                return
            from flytekitplugins_pytorch._frontend import FLYTEKIT  # flytekit is loaded: the task's code imported it

            with FLYTEKIT.rank_scope(snapshot.flytekit, workdir):  # flytekit.current_context() as in a flytekit rank
                yield _RankScope()
        finally:
            _rank_checkpoint = None

    def resumable_checkpoint(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def is_recoverable(self, exc: BaseException) -> bool:
        from flyte.errors import NonRecoverableError

        return not isinstance(exc, NonRecoverableError)

    def recoverable(self, base: type[BaseException]) -> type[BaseException]:
        return base  # Flyte 2 retries any exception but NonRecoverableError

    def permanent(self, base: type[BaseException]) -> type[BaseException]:
        cls: type[BaseException] = __getattr__(f"Permanent{base.__name__}")
        return cls

    def ignore_outputs(self, message: str) -> BaseException:
        logger.info("%s", message)
        return WithheldOutputs(message)

    def remove_recovered_errors(self) -> None:
        return None

    def adopt(self, decks: list[tuple[str, str]], value: Any, metadata: Any) -> None:
        return None

    def publish_progress(self, task: Any, html: str, final: bool) -> bool:
        from flyte2_pytorch import _progress

        return _progress.publish_progress(task, html, final)

    def write_output_file(self, name: str, data: bytes) -> Optional[str]:
        from flyte2_pytorch import _progress

        return _progress.write_output_file(name, data)

    def checkpoint_place(self) -> Optional[CheckpointPrefixes]:
        """The action's checkpoint prefixes (in a rank: as the task process saw them) with flyte's file system;
        ``None`` in a local run (the launcher's folder) or without a checkpoint path."""
        prefixes = _rank_checkpoint if _rank_checkpoint is not None else (None if self.is_local() else _prefixes())
        if prefixes is None:
            return None
        from flyte.storage._storage import get_underlying_filesystem

        dest, src = prefixes
        return CheckpointPrefixes(dest, src, lambda path: get_underlying_filesystem(path=path))

    def preempted(self, message: str) -> BaseException:
        """A ``flyte.errors.RuntimeSystemError`` that is also the core's ``PreemptedError``: Flyte 2's runtime
        writes it as a recoverable error of ``SYSTEM`` origin."""
        cls: type[BaseException] = __getattr__("Flyte2PreemptedError")
        return cls(message)


FLYTE2 = Flyte2FrontEnd()
"""The Flyte 2 front-end (one per process)."""


class Flyte2DirectCall(Flyte2FrontEnd):
    """Flyte 2, for a task called directly outside any Flyte run (``train(x=1)`` in a script): always this machine.

    Outside a run flyte's context is empty, which a pod's never is (Flyte 2's entrypoint runs the task in one), so
    only the direct call (`flyte2_pytorch.task.PyTorchTask.forward`) uses this front-end."""

    def __reduce__(self) -> str:
        return "FLYTE2_DIRECT_CALL"

    def is_local(self) -> bool:
        return True


FLYTE2_DIRECT_CALL = Flyte2DirectCall()
"""The Flyte 2 front-end of a direct call (one per process)."""
