"""Root-cause analysis of a failed launch: which rank to blame, and the exception the task raises. Pure.

:func:`find_root_cause` takes :class:`RankOutcomes` (plain data: what the ranks reported through the control
directory plus the exit codes torch's agent recorded) and returns a :class:`RootCause`; :func:`to_exception` turns
that into the exception the task raises. Neither starts a process, so every case is a table row in
``tests/core/test_failure.py``.

The rules, in order:

1. the **earliest** rank whose exception is its own (not raised by a collective) is the root cause, whatever its
   text says;
2. else a rank that died without reporting an exception (a signal, ``os._exit``, a segfault: its peers then fail
   with connection errors), the lowest such rank;
3. else, when every reported error is a lost-peer / timeout error, the ranks that **did not arrive**: those whose
   function returned while the others waited for them, and those still running outside ``torch.distributed`` (from
   the stack each one dumped when a waiting rank gave up; the ones waiting in another collective when no other
   rank is left) -- the headline names them and what they were doing;
4. else the earliest lost-peer / timeout error;
5. else nobody can be named, and the agent's own error is reported.

The message names the rank, ``rank 2 (of 3) failed: ValueError: boom``, then the other ranks (failed afterwards,
still running, never started), then the root cause's traceback. The exception is of the rank's own type when it can be
rebuilt here and pickles back as itself; otherwise it is a :class:`RankFailure` that carries the type's name, its
message and the rank. A ``FlyteRecoverableException`` stays recoverable either way, so Flyte retries the task.

Whether an exception is collateral (raised by a collective, so possibly a consequence of a lost peer) is decided in
the rank, where its type and traceback are known (:func:`is_collateral`), and travels in the report. Neither torch
nor flytekit is imported at module level.
"""

from __future__ import annotations

import pickle
import re
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Optional, cast

from pytorch_core._control import RankError
from pytorch_core._nested import HOW_TO_FIX, NESTED_LAUNCH_EXIT_CODE
from pytorch_core.frontend import RecoverableError, current

#: Where an exception raised by a collective comes from: torch.distributed itself (gloo and NCCL raise a plain
#: ``RuntimeError`` from ``distributed_c10d.py``), DDP's forward, and the autograd engine (DDP's gradient all-reduce
#: fails inside ``backward()``; counted only while a process group of more than one rank is up).
_DIST_FRAMES = ("/torch/distributed/", "/torch/nn/parallel/")
_AUTOGRAD_FRAMES = ("/torch/autograd/", "/torch/_tensor.py")


def _innermost_file(exc: BaseException) -> str:
    tb = exc.__traceback__
    path = ""
    while tb is not None:
        path = tb.tb_frame.f_code.co_filename
        tb = tb.tb_next
    return path.replace("\\", "/")


def _group_up() -> bool:
    dist = sys.modules.get("torch.distributed")
    try:
        return bool(dist is not None and dist.is_initialized() and dist.get_world_size() > 1)
    except Exception:  # noqa: BLE001 - a group torn down half-way: no group
        return False


def is_collateral(exc: BaseException) -> bool:
    """Whether ``exc`` may be a consequence of another rank's failure (lost peer, timeout in a collective).

    Decided by where and what was raised, never by the message's words: a user's ``TimeoutError("metadata service
    timed out")`` or torch's ``RuntimeError: DataLoader timed out`` is that rank's own error.

    Args:
        exc: the exception a rank raised.

    Returns:
        bool: True for torch's ``DistError`` family, a :class:`HangError` or :class:`PeerFailedError` (a waiting
        rank's report), and a runtime, connection or timeout error raised inside ``torch.distributed`` (or DDP's
        backward while a group is up).
    """
    if isinstance(exc, (HangError, PeerFailedError)):
        return True  # a waiting rank's report: the cause is the rank it names
    dist = sys.modules.get("torch.distributed")
    if dist is not None and isinstance(exc, getattr(dist, "DistError", ())):
        return True
    if not isinstance(exc, (RuntimeError, ConnectionError, TimeoutError)):
        return False
    where = _innermost_file(exc)
    if any(part in where for part in _DIST_FRAMES):
        return True
    return any(part in where for part in _AUTOGRAD_FRAMES) and _group_up()


class RankFailure(RuntimeError):
    """A rank failed and its exception cannot be raised as its own type here; the message names the rank.

    Raised when the rank's exception could not be rebuilt in the task process as an exception of its own type that
    survives pickling (its class is not importable here, its constructor needs other arguments, ...). When it can
    be, the task raises that type itself (``type(e) is ValueError``, ``except ValueError`` catches it), with the
    attributes below added unless the exception has its own of the same name. Instances pickle.

    Args:
        message: the whole text: the headline naming the rank, the other ranks, the rank's traceback.
        type_name: ``module.QualName`` of the rank's exception type (``""`` when the rank raised nothing).
        original_message: ``str()`` of the rank's exception.
        rank: global rank whose failure is the root cause (-1 when none could be named).
        world_size: global ranks in the run.

    Attributes:
        type_name: as above.
        original_message: as above.
        rank: as above.
        world_size: as above.
    """

    def __init__(
        self, message: str, *, type_name: str = "", original_message: str = "", rank: int = -1, world_size: int = 0
    ) -> None:
        super().__init__(message)
        self.type_name = type_name
        self.original_message = original_message
        self.rank = rank
        self.world_size = world_size
        # When it was raised, where flytekit's exceptions keep it: Flyte's error document carries it, and the
        # recoverable variants read it (a rank's own time replaces it when the failure came from a rank).
        self._timestamp = time.time()

    def __str__(self) -> str:
        # The message as given, also in ``RecoverableRankFailure`` (flytekit's exceptions prefix their kind).
        return str(self.args[0]) if len(self.args) == 1 else super().__str__()


class RankFailedError(RankFailure):
    """A rank of a distributed task failed without an exception of its own (killed by a signal, exited, did not
    arrive), or the launch itself failed; the message names the rank when one can be named."""


class PeerFailedError(RankFailure):
    """A waiting rank's report that a peer raised its own exception (``rank`` is that peer; ``type_name`` its
    exception's type): never a hang, and retried only when the peer's own exception is (``RecoverablePeerFailedError``
    for a ``FlyteRecoverableException``; see ``_hang.py``)."""


class HangError(RankFailedError):
    """A rank did not arrive at a collective in time: the message leads with that rank, its node and pod, and what it
    was doing; ``rank`` is that rank (see ``_hang.py``). Raised as ``RecoverableHangError`` (also a
    ``FlyteRecoverableException``) when hangs are retryable (``retry_hangs``, the default)."""


class RecoverableRankFailure(RankFailure, RecoverableError):
    """A recoverable RankFailure of a launch without a Flyte SDK (`pytorch_core.frontend.PLAIN`)."""


class RecoverableHangError(HangError, RecoverableError):
    """A recoverable HangError of a launch without a Flyte SDK."""


class RecoverablePeerFailedError(PeerFailedError, RecoverableError):
    """A recoverable PeerFailedError of a launch without a Flyte SDK."""


def hang_error_class(recoverable: bool) -> type[HangError]:
    """The class a hang is raised as.

    Args:
        recoverable: hangs are retryable (``retry_hangs``).

    Returns:
        type[HangError]: ``RecoverableHangError`` or :class:`HangError`.
    """
    frontend = current()
    return cast("type[HangError]", frontend.recoverable(HangError) if recoverable else frontend.permanent(HangError))


def peer_failed_class(recoverable: bool) -> type[PeerFailedError]:
    """The class a peer's own failure is reported as by a waiting rank.

    Args:
        recoverable: the peer's exception was a ``FlyteRecoverableException``.

    Returns:
        type[PeerFailedError]: ``RecoverablePeerFailedError`` or :class:`PeerFailedError`.
    """
    frontend = current()
    chosen = frontend.recoverable(PeerFailedError) if recoverable else frontend.permanent(PeerFailedError)
    return cast("type[PeerFailedError]", chosen)


@dataclass(frozen=True)
class RankOutcomes:
    """What is known about the ranks of one launch after it ended.

    Attributes:
        world_size: global ranks in the run.
        ranks: the global ranks this launch ran (every rank locally; this node's block in a pod).
        errors: the exceptions the ranks reported, earliest first.
        started: ranks whose entrypoint began.
        done: ranks whose function returned.
        exit_codes: global rank -> exit code of each rank the agent saw fail (negative: killed by that signal).
        agent_error: the agent's own description of the failure, for when no rank can be named.
        elapsed_s: seconds from the launch to its end.
        stacks: global rank -> the ``faulthandler`` dump a rank wrote when a waiting peer gave up.
    """

    world_size: int
    ranks: range
    errors: tuple[RankError, ...] = ()
    started: frozenset[int] = frozenset()
    done: frozenset[int] = frozenset()
    exit_codes: Mapping[int, Optional[int]] = field(default_factory=dict)
    agent_error: str = ""
    elapsed_s: float = 0.0
    stacks: Mapping[int, str] = field(default_factory=dict)


class CauseKind(Enum):
    """How the root-cause rank failed (the rule of the module docstring that picked it)."""

    RAISED = "raised"
    DIED = "died"
    NOT_ARRIVED = "not arrived"
    COLLATERAL = "collateral"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class RootCause:
    """The rank to blame and what to say about it.

    Attributes:
        kind: which rule picked it.
        rank: its global rank, or ``None`` for ``UNKNOWN``.
        world_size: global ranks in the run.
        headline: the first line, e.g. ``rank 2 (of 3) failed: ValueError: boom``.
        details: lines about the other ranks (failed afterwards, still running, never started).
        error: the rank's report when it raised (``RAISED``, ``COLLATERAL``).
        vanished: the rank that did not arrive is gone (its process or pod): the only hang that is retried.
    """

    kind: CauseKind
    rank: Optional[int]
    world_size: int
    headline: str
    details: tuple[str, ...] = ()
    error: Optional[RankError] = None
    vanished: bool = False

    @property
    def message(self) -> str:
        """The exception's text: headline, details, then the rank's traceback when it raised."""
        text = "\n".join((self.headline, *self.details))
        if self.error is not None:
            text += f"\n--- traceback of rank {self.error.rank} ---\n{self.error.traceback_text.rstrip()}"
        return text


def _exit_text(exitcode: Optional[int]) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"was killed by {signal.Signals(-exitcode).name} (exit code {exitcode})"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with code {exitcode} without raising an exception"


#: Appended when a rank died before its entrypoint began: almost always the script's main module re-imported.
NEVER_RAN_HINT = (
    " before it ran the task (see its stderr above; with start_method 'forkserver' (the default) or "
    "'spawn' the script's main module is imported again, so a script must run its workflow under "
    "`if __name__ == '__main__':`)"
)


#: The headline when ranks exited with ``NESTED_LAUNCH_EXIT_CODE`` before they began: they refused a launch while
#: importing the script's ``__main__`` (see ``_nested.py``; they could not report an exception).
NESTED_LAUNCH_HEADLINE = (
    "refused to start a new launch while importing the script: the script calls its workflow at module level, and "
    f"every rank imports the script again; {HOW_TO_FIX}"
)


#: A root cause raised because the process group was never set up (a rank that never called
#: ``init_process_group``, or called it wrongly): no collective ever began, so the others are not said to be in one.
_NO_GROUP = re.compile(r"process group has not been initialized|init_process_group", re.IGNORECASE)


def _others(root: int, outcomes: RankOutcomes, *, group_up: bool = True) -> tuple[str, ...]:
    """Lines about the other ranks: who failed as a consequence, who was still running, who never started.

    ``group_up`` False (the root cause is a rank without a process group) drops the still-running line: it would say
    the others had not reached a collective that nobody began.
    """
    reported = {err.rank for err in outcomes.errors}
    failed = [f"{err.rank} ({err.type_name.rsplit('.', 1)[-1]})" for err in outcomes.errors if err.rank != root]
    running = [rank for rank in outcomes.ranks if rank != root and rank not in outcomes.done and rank not in reported]
    lines = []
    if failed:
        lines.append(f"ranks that failed afterwards: {', '.join(failed)}")
    stuck = [rank for rank in running if rank in outcomes.started]
    never = [rank for rank in running if rank not in outcomes.started]
    if stuck and group_up:
        lines.append(
            f"ranks still running when the job was stopped (they had not reached or finished the collective): {stuck}"
        )
    if never:
        lines.append(f"ranks that never started: {never}")
    return tuple(lines)


def _from_report(kind: CauseKind, err: RankError, outcomes: RankOutcomes) -> RootCause:
    short = err.type_name.rsplit(".", 1)[-1]
    return RootCause(
        kind=kind,
        rank=err.rank,
        world_size=outcomes.world_size,
        headline=f"rank {err.rank} (of {outcomes.world_size}) failed: {short}: {err.message}",
        details=_others(err.rank, outcomes, group_up=not _NO_GROUP.search(err.message)),
        error=err,
    )


def find_root_cause(outcomes: RankOutcomes) -> RootCause:
    """Pick the rank to blame for a failed launch (rules in the module docstring).

    Args:
        outcomes: what the ranks reported and how they ended.

    Returns:
        RootCause: the rank, the rule that picked it, and the text for the task's exception.
    """
    # A rank that stopped itself for want of progress names itself: its report is its own failure.
    own = [err for err in outcomes.errors if not err.collateral or err.culprit == err.rank]
    if own:
        return _from_report(CauseKind.RAISED, own[0], outcomes)
    reported = {err.rank for err in outcomes.errors}
    silent = sorted(rank for rank in outcomes.exit_codes if rank not in reported)
    nested = [r for r in silent if outcomes.exit_codes[r] == NESTED_LAUNCH_EXIT_CODE and r not in outcomes.started]
    if nested:
        names = f"rank {nested[0]}" if len(nested) == 1 else f"ranks {nested}"
        headline = f"{names} (of {outcomes.world_size}) {NESTED_LAUNCH_HEADLINE}"
        return RootCause(CauseKind.DIED, nested[0], outcomes.world_size, headline)
    if silent:
        rank = silent[0]
        headline = f"rank {rank} (of {outcomes.world_size}) {_exit_text(outcomes.exit_codes[rank])}"
        if rank not in outcomes.started:
            headline += NEVER_RAN_HINT
        return RootCause(CauseKind.DIED, rank, outcomes.world_size, headline, _others(rank, outcomes))
    if outcomes.errors:
        missing = _not_arrived(outcomes)
        if missing:
            return _missing_cause(missing, outcomes)
        named = next((err for err in outcomes.errors if err.culprit is not None), None)
        if named is not None:
            # A rank of another pod did not arrive: the waiting rank learnt which from the group's store (_hang.py).
            headline = named.message.strip().splitlines()[0]
            culprit = cast(int, named.culprit)
            return RootCause(
                CauseKind.NOT_ARRIVED, culprit, outcomes.world_size, headline, (), named, vanished=named.recoverable
            )
        return _from_report(CauseKind.COLLATERAL, outcomes.errors[0], outcomes)
    headline = f"the ranks failed after {outcomes.elapsed_s:.1f}s without reporting an error: {outcomes.agent_error}"
    return RootCause(CauseKind.UNKNOWN, None, outcomes.world_size, headline)


@dataclass(frozen=True)
class Frame:
    """One frame of a ``faulthandler`` dump."""

    path: str
    line: int
    function: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line} in {self.function}"


_THREAD = re.compile(r"^(Current thread|Thread) 0x[0-9a-f]+", re.M)
_FRAME = re.compile(r'^\s*File "(?P<path>.*)", line (?P<line>\d+) in (?P<fn>\S+)', re.M)
#: Frames of these files are not the user's (the rank entrypoint, torch); the front-end adds its SDK's.
_NOT_USER = ("/pytorch_core/", "/torch/", "/cloudpickle/")


#: Frames of these packages are left out of a stack in the hang report: they are how the task was started (``pyflyte
#: run``, ``python file.py``), inherited by a forked rank, never where it waits. The user's and torch's frames stay.
_LAUNCH_FRAMES = ("/click/",)


def main_thread_frames(dump: str) -> list[Frame]:
    """The frames of the thread that runs the task in a ``faulthandler`` dump, most recent first.

    Args:
        dump: the text ``faulthandler`` wrote (every thread).

    Returns:
        list[Frame]: the frames of the thread whose stack holds ``rank_entrypoint`` (else the first thread's).
    """
    # Several waiting ranks may have asked: keep the first dump (it ends where a thread header repeats).
    headers = [m for m in _THREAD.finditer(dump)]
    seen: set[str] = set()
    starts = []
    for m in headers:
        ident = m.group(0).split()[-1]
        if ident in seen:
            dump = dump[: m.start()]
            break
        seen.add(ident)
        starts.append(m.start())
    starts = starts or [0]
    blocks = [dump[a:b] for a, b in zip(starts, [*starts[1:], len(dump)], strict=True)]
    chosen = next((b for b in blocks if "in rank_entrypoint" in b), blocks[0])
    return [Frame(m["path"], int(m["line"]), m["fn"]) for m in _FRAME.finditer(chosen)]


def activity(dump: str) -> tuple[bool, str]:
    """Where a still-running rank is, from its stack dump.

    Args:
        dump: the rank's stacks in ``faulthandler``'s format.

    Returns:
        tuple[bool, str]: (it waits in a ``torch.distributed`` call, text saying where).
    """
    frames = main_thread_frames(dump)
    if not frames:
        return False, "still running (no stack sample)"
    user = next((f for f in frames if not any(part in f.path for part in (*_NOT_USER, *current().user_frames))), None)
    # The frames above the task's innermost own frame: what it called and waits in.
    called = frames[: frames.index(user)] if user is not None else frames
    if any(_is_wait(f) for f in called):
        # The public call (all_reduce, barrier, ...) is defined in distributed_c10d.py; decorators wrap it.
        call = next(
            (f.function for f in called if f.path.endswith("distributed_c10d.py")),
            next((_WAIT_NAMES[f.function] for f in called if f.function in _WAIT_NAMES), called[0].function),
        )
        where = f"still running, waiting in torch.distributed's {call}"
        return True, where + (f" called at {user}" if user is not None else "")
    return False, f"still running at {user or frames[0]}, outside torch.distributed"


#: Frames that wait on the process group: torch.distributed's calls (not its elastic agent, which runs every rank),
#: DDP, the autograd engine (DDP's gradient all-reduce runs in ``backward()``), futures, and the plugin's wrapper of
#: ``Work.wait`` (a C++ method that leaves no frame of its own).
_WAIT_FRAMES = ("/torch/distributed/", "/torch/nn/parallel/", "/torch/autograd/", "/torch/futures/")
_WAIT_NAMES = {"_wait_for_work": "Work.wait", "_engine_run_backward": "backward (DDP's gradient all-reduce)"}


def _is_wait(frame: Frame) -> bool:
    if "/torch/distributed/elastic/" in frame.path:
        return False
    return frame.function in _WAIT_NAMES or any(part in frame.path for part in _WAIT_FRAMES)


def _not_arrived(outcomes: RankOutcomes) -> dict[int, str]:
    """Rank -> what it was doing, for the ranks the others waited for (rule 3); empty when none can be told."""
    reported = {err.rank for err in outcomes.errors}
    left = "its function returned without joining the others"
    returned = {r: left for r in sorted(outcomes.done) if r not in reported}
    running: dict[int, str] = {}
    waiting: dict[int, str] = {}
    for rank in outcomes.ranks:
        if rank in reported or rank in outcomes.done or rank not in outcomes.stacks:
            continue  # a running rank is named only on the evidence of its stack sample
        in_dist, where = activity(outcomes.stacks[rank])
        (waiting if in_dist else running)[rank] = where
    found = {**returned, **running}
    # Ranks that all sat in (other) collectives are still what the others waited for when nobody else is left.
    return dict(sorted((found or waiting).items()))


def _missing_cause(missing: dict[int, str], outcomes: RankOutcomes) -> RootCause:
    first = outcomes.errors[0]
    ranks = list(missing)
    names = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks}"
    doing = "; ".join(f"rank {r} {what}" if len(ranks) > 1 else what for r, what in missing.items())
    short = first.type_name.rsplit(".", 1)[-1]
    message = first.message.strip().splitlines()[0] if first.message.strip() else ""
    headline = (
        f"{names} (of {outcomes.world_size}) did not arrive: {doing}; "
        f"rank {first.rank} gave up waiting: {short}: {message}"
    )
    waited = ", ".join(f"{err.rank} ({err.type_name.rsplit('.', 1)[-1]})" for err in outcomes.errors)
    details = [f"ranks that gave up waiting: {waited}"]
    never = [r for r in outcomes.ranks if r not in outcomes.started and r not in missing]
    if never:
        details.append(f"ranks that never started: {never}")
    frontend = current()
    launch = (*_LAUNCH_FRAMES, *frontend.launch_frames)
    for rank in ranks:
        frames = main_thread_frames(outcomes.stacks[rank]) if rank in outcomes.stacks else []
        if frames:
            kept = [frame for frame in frames if not any(part in frame.path for part in launch)]
            details.append(f"--- stack of rank {rank} when rank {first.rank} gave up (most recent call first) ---")
            details.extend(f"  {frame}" for frame in kept)
            if len(kept) < len(frames):
                details.append(f"  ({len(frames) - len(kept)} click and {frontend.name} frames left out)")
    return RootCause(CauseKind.NOT_ARRIVED, ranks[0], outcomes.world_size, headline, tuple(details), first)


def to_exception(cause: RootCause, *, retry_hangs: bool = True) -> BaseException:
    """The exception the task raises for ``cause``.

    Args:
        cause: the root cause.
        retry_hangs: a rank that did not arrive and vanished (its process or pod gone) is a recoverable
            :class:`HangError` (the config's ``retry_hangs``).

    Returns:
        BaseException: for a rank that raised, an exception of its very type (``type(e)`` is the rank's exception
        type) with ``cause.message`` as its text, when it can be rebuilt here and survives pickling; otherwise a
        :class:`RankFailure` carrying the type's name, its message and the rank (``RecoverableRankFailure``, also
        a ``FlyteRecoverableException``, when the rank's exception was recoverable). For a rank that raised
        nothing, a :class:`RankFailedError`, or a :class:`HangError` (``RecoverableHangError`` with ``retry_hangs``)
        when it did not arrive. ``rank`` and ``world_size`` are set whenever a rank is named.
    """
    rank = cause.rank if cause.rank is not None else -1
    if cause.error is None:
        return RankFailedError(cause.message, rank=rank, world_size=cause.world_size)
    if cause.kind is CauseKind.NOT_ARRIVED:
        # A rank that did not arrive raised nothing: the waiting rank's exception type would blame the wrong one.
        # Retried only when that rank vanished (its pod or process is gone): a rank still running the task's code,
        # or one that returned, would be late again on every attempt.
        hang = hang_error_class(retry_hangs and cause.vanished)
        error = hang(cause.message, rank=rank, world_size=cause.world_size)
        setattr(error, "_timestamp", cause.error.timestamp)  # noqa: B010 - flytekit's attribute (error timestamp)
        return error
    err = cause.error
    rebuilt = _load(err.exc_bytes)
    own = _own_type(rebuilt, cause.message, rank, cause.world_size) if rebuilt is not None else None
    if own is not None:
        return own
    frontend = current()
    chosen = frontend.recoverable(RankFailure) if err.recoverable else frontend.permanent(RankFailure)
    cls = cast("type[RankFailure]", chosen)
    failure = cls(
        cause.message, type_name=err.type_name, original_message=err.message, rank=rank, world_size=cause.world_size
    )
    if err.recoverable:
        setattr(failure, "_timestamp", err.timestamp)  # noqa: B010 - flytekit's attribute, unknown to RankFailure
    return cast(BaseException, failure)


def _load(exc_bytes: Optional[bytes]) -> Optional[BaseException]:
    if exc_bytes is None:
        return None
    try:
        loaded = pickle.loads(exc_bytes)
    except Exception:  # noqa: BLE001 - the type cannot be rebuilt here: fall back to RankFailure
        return None
    return loaded if isinstance(loaded, BaseException) else None


def _own_type(original: BaseException, message: str, rank: int, world_size: int) -> Optional[BaseException]:
    """``original``'s type itself, with ``message`` as its text and its attributes; ``None`` unless it pickles back
    as the same type with the same text (Flyte, multiprocessing and a user's own code pickle exceptions)."""
    cls = type(original)
    try:
        exc = cls.__new__(cls, message)
        exc.__dict__.update(getattr(original, "__dict__", {}))
        exc.args = (message,)
        for name, value in (("rank", rank), ("world_size", world_size)):
            if not hasattr(exc, name):
                setattr(exc, name, value)
        back = pickle.loads(pickle.dumps(exc))
        if type(back) is not cls or str(back) != str(exc):
            return None
        return exc
    except Exception:  # noqa: BLE001 - a constructor that needs other arguments, an unpicklable attribute, ...
        return None
