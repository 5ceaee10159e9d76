"""The one seam between the launcher and a Flyte SDK: what a front-end supplies so that the core runs its tasks.

The core (planning, processes, failure analysis, the rank entrypoint) knows no Flyte SDK. Everything that does
(the execution context a rank rebuilds, checkpoints, which exceptions Flyte retries, how a replica that is not
global rank 0 withholds outputs, Decks) sits behind :class:`FrontEnd`, which each front-end implements once:
``flytekitplugins_pytorch._frontend.FLYTEKIT`` for flytekit, ``flyte2_pytorch._frontend.FLYTE2`` for Flyte 2.

A front-end object travels to every rank inside its ``RankSpec``, so it must pickle by reference: a module-level
instance of a class without state. :func:`using` makes it the current one for a launch (the task process) or a
rank (the rank process); the failure classes of ``_failure`` and ``_hang`` ask :func:`current` which exceptions
count as recoverable.

Nothing here imports a Flyte SDK or torch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager as ContextManager
from dataclasses import dataclass
from typing import Any, Optional, Protocol, runtime_checkable

__all__ = [
    "FrontEnd",
    "CheckpointPrefixes",
    "RankScope",
    "RecoverableError",
    "PreemptedError",
    "current",
    "using",
    "enter",
    "set_default",
    "recoverable_class",
    "PLAIN",
]


class RankScope(Protocol):
    """What a rank holds while the function runs under the front-end's context (see `FrontEnd.rank_scope`)."""

    def result_extras(self, value: Any) -> tuple[list[tuple[str, str]], Any]:
        """Rank 0's Decks as ``(name, html)`` pairs and the output metadata of ``value`` (or ``None``)."""
        ...


@dataclass(frozen=True)
class CheckpointPrefixes:
    """Where a Flyte execution keeps its checkpoints (``pytorch_core.checkpoint``).

    Attributes:
        dest: this attempt's checkpoint prefix (Flyte's ``--checkpoint-path``): where saves go.
        src: the previous attempt's (``--prev-checkpoint``), or ``None`` on a first attempt.
        filesystem: the SDK's fsspec file system for a path (its credentials and endpoints configured).
    """

    dest: str
    src: Optional[str]
    filesystem: Callable[[str], Any]


@runtime_checkable
class FrontEnd(Protocol):
    """What the launcher asks of the Flyte SDK a task was defined with.

    Attributes:
        name: a short name for messages and logs (``"flytekit"``, ``"flyte2"``).
        preload: modules the fork server imports once before it forks the ranks (the SDK a rank rebuilds its
            context with), in addition to torch and the rank entrypoint.
        user_frames: path fragments of frames that are the SDK's, not the user's (left out of a rank's traceback).
        launch_frames: path fragments of frames that launched the task (click, the SDK's runner).
    """

    name: str
    preload: tuple[str, ...]
    user_frames: tuple[str, ...]
    launch_frames: tuple[str, ...]

    def is_local(self) -> bool:
        """The task runs locally (not in a pod of a cluster job)."""
        ...

    def snapshot(self) -> Any:
        """The picklable parts of the task process's execution context; a dataclass with a ``working_dir`` field."""
        ...

    def run_id(self) -> str:
        """The execution's name (every pod of a job shares it), or ``""``."""
        ...

    def rank_scope(self, snapshot: Any, workdir: Any) -> ContextManager[RankScope]:
        """In a rank: enter the execution context rebuilt from ``snapshot``, working in ``workdir``."""
        ...

    def resumable_checkpoint(self) -> ContextManager[None]:
        """For a function run in this process: its checkpoint reads this attempt's own when a restart wrote one."""
        ...

    def is_recoverable(self, exc: BaseException) -> bool:
        """Flyte retries a task that failed with ``exc``."""
        ...

    def recoverable(self, base: type[BaseException]) -> type[BaseException]:
        """``base`` made recoverable for this SDK (a subclass of both; importable by name, so it pickles)."""
        ...

    def permanent(self, base: type[BaseException]) -> type[BaseException]:
        """``base`` as a failure Flyte does not retry (``base`` itself where that is the SDK's default)."""
        ...

    def ignore_outputs(self, message: str) -> BaseException:
        """The exception a replica that is not global rank 0 ends with, so that it writes no outputs."""
        ...

    def remove_recovered_errors(self) -> None:
        """Delete the error documents a restarted run of this attempt left beside the outputs."""
        ...

    def adopt(self, decks: list[tuple[str, str]], value: Any, metadata: Any) -> None:
        """Add rank 0's Decks and output metadata to the task process's context."""
        ...

    def publish_progress(self, task: Any, html: str, final: bool) -> bool:
        """Show the progress page (an HTML fragment) where the SDK shows a task's pages, mid-run; ``final``: the run
        ended, update the page without publishing (the SDK publishes its pages at the end). Called from the
        launcher's progress thread, in the task's ``contextvars`` context. ``False``: the task has no such page
        (Decks or report off), do not ask again."""
        ...

    def write_output_file(self, name: str, data: bytes) -> Optional[str]:
        """Write ``data`` as ``name`` beside the task's outputs through the SDK's file access (on a cluster); the
        path written, or ``None`` when this execution has no output prefix."""
        ...

    def checkpoint_place(self) -> Optional[CheckpointPrefixes]:
        """In a pod: the execution's checkpoint prefixes and the SDK's file system for them; ``None`` in a local run
        (the launcher's own folder is used) or when the execution has none."""
        ...

    def preempted(self, message: str) -> BaseException:
        """The exception an attempt whose ranks stopped for a preemption ends with: the SDK writes it as a
        recoverable error of system origin, so Flyte spends a system retry, not one of the user's."""
        ...


class RecoverableError(Exception):
    """The retryable marker of a front-end whose SDK has none of its own (`PLAIN`)."""


class PreemptedError(Exception):
    """A task whose ranks stopped for a preemption (SIGTERM, Ctrl-C): not the task's own failure.

    On a cluster the front-end has it written as a recoverable error of system origin (Flyte retries it from its
    system budget, and the retry resumes from the checkpoint); locally it ends the run, saying the step the next run
    resumes from (``pytorch_core.preemption``).

    Args:
        message: the message (it starts with ``preempted: ``).
    """


def recoverable_class(
    module: str, base: type[BaseException], marker: type[BaseException], prefix: str = "Recoverable"
) -> type[BaseException]:
    """``<prefix><Base>``: a subclass of ``base`` and ``marker``, named so that ``module`` finds it for pickle.

    Args:
        module: the module whose ``__getattr__`` returns the class by name.
        base: the core's class (``RankFailure``, ``HangError``, ``PeerFailedError``).
        marker: the SDK's exception class that decides whether Flyte retries (its retryable or its permanent one).
        prefix: ``"Recoverable"``, or ``"Permanent"`` for an SDK whose marker is the permanent one.

    Returns:
        type[BaseException]: the class.
    """
    name = f"{prefix}{base.__name__}"
    doc = f"A {base.__name__} that Flyte {'retries' if prefix == 'Recoverable' else 'does not retry'}."
    return type(name, (base, marker), {"__module__": module, "__qualname__": name, "__doc__": doc})


@contextlib.contextmanager
def _no_context() -> Iterator[None]:
    yield


class _PlainScope:
    def result_extras(self, value: Any) -> tuple[list[tuple[str, str]], Any]:
        return [], None


@dataclass(frozen=True)
class PlainSnapshot:
    """`PLAIN`'s execution context: only the working directory."""

    working_dir: Optional[str] = None


class _IgnoreOutputs(Exception):
    """A replica that is not global rank 0 ends without outputs (`PLAIN`)."""


class PlainFrontEnd:
    """No Flyte SDK: a local run, no context to carry, retries marked by `RecoverableError`."""

    name = "plain"
    preload: tuple[str, ...] = ()
    user_frames: tuple[str, ...] = ()
    launch_frames: tuple[str, ...] = ()

    def __reduce__(self) -> str:
        return "PLAIN"  # one instance per process: pickled by reference

    def is_local(self) -> bool:
        return True

    def snapshot(self) -> Any:
        return PlainSnapshot()

    def run_id(self) -> str:
        return ""

    @contextlib.contextmanager
    def rank_scope(self, snapshot: Any, workdir: Any) -> Iterator[RankScope]:
        workdir.mkdir(parents=True, exist_ok=True)
        yield _PlainScope()

    def resumable_checkpoint(self) -> ContextManager[None]:
        return _no_context()

    def is_recoverable(self, exc: BaseException) -> bool:
        return isinstance(exc, RecoverableError)

    def recoverable(self, base: type[BaseException]) -> type[BaseException]:
        # ``_failure`` defines ``Recoverable<Base>`` for every base it raises (this module imports none of ours).
        for cls in base.__subclasses__():
            if issubclass(cls, RecoverableError) and cls.__name__ == f"Recoverable{base.__name__}":
                return cls
        raise TypeError(f"{base.__name__} has no recoverable variant")

    def permanent(self, base: type[BaseException]) -> type[BaseException]:
        return base

    def ignore_outputs(self, message: str) -> BaseException:
        return _IgnoreOutputs(message)

    def remove_recovered_errors(self) -> None:
        return None

    def adopt(self, decks: list[tuple[str, str]], value: Any, metadata: Any) -> None:
        return None

    def publish_progress(self, task: Any, html: str, final: bool) -> bool:
        return False

    def write_output_file(self, name: str, data: bytes) -> Optional[str]:
        return None

    def checkpoint_place(self) -> Optional[CheckpointPrefixes]:
        return None

    def preempted(self, message: str) -> BaseException:
        return PreemptedError(message)


PLAIN: FrontEnd = PlainFrontEnd()
"""The front-end of a launch that no Flyte SDK started."""

_default: FrontEnd = PLAIN
_current: Optional[FrontEnd] = None


def set_default(frontend: FrontEnd) -> None:
    """The front-end `current` answers outside a launch (a front-end sets itself when its package is imported).

    Args:
        frontend: the front-end.
    """
    global _default
    _default = frontend


def current() -> FrontEnd:
    """The front-end of the launch or rank running in this process, else the default one."""
    return _current if _current is not None else _default


def enter(frontend: FrontEnd) -> None:
    """Make ``frontend`` `current` for the rest of this process (a rank process, which runs one task).

    Args:
        frontend: the front-end of the task whose rank this process is.
    """
    global _current
    _current = frontend


@contextlib.contextmanager
def using(frontend: FrontEnd) -> Iterator[FrontEnd]:
    """Make ``frontend`` `current` for the block (nested blocks restore the outer one).

    Args:
        frontend: the front-end of the task being launched, or of this rank.

    Yields:
        FrontEnd: ``frontend``.
    """
    global _current
    outer, _current = _current, frontend
    try:
        yield frontend
    finally:
        _current = outer
