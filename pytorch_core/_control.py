"""The control protocol between the launcher and its ranks: what goes in (``RankSpec``), what comes back (files).

Both sides import this module and nothing else to talk to each other. The launcher hands every rank a
:class:`RankSpec` (through torch's agent, pickled); each rank reports through files in the spec's control directory,
written atomically (write a temporary file, then rename), so the launcher never reads half a file:

===========================  ==========================================================================
``rank-<n>.started``         the rank's entrypoint began (content: its pid); absent = never got that far
``rank-<n>.error``           a :class:`RankError`, pickled: the rank's exception with a timestamp
``rank-0.result``            a :class:`RankResult`, cloudpickled: rank 0's return value, Decks, metadata
``rank-<n>.done``            the function returned (and, on rank 0, its result was written)
``rank-<n>.stack``           the rank's Python stacks, written by ``faulthandler`` when a peer that timed out
                             asked for them (:meth:`ControlDir.request_stacks`); empty = never asked
``progress.json``            global rank 0's latest progress snapshot (``progress.py``), rewritten at most every
                             2 s while it reports; the launcher's follower reads it while the ranks run
``rank-<n>.stopping``        the rank learnt of a preemption and is stopping at the agreed step
``rank-<n>.preempted``       the rank stopped at the agreed step of a preemption (``preemption.py``): the
                             preemption record as JSON, with ``where`` (the checkpoint place)
===========================  ==========================================================================

``<n>`` is the global rank. After the ranks ended the launcher reads the whole directory once with
:meth:`ControlDir.read` into a :class:`ControlRecord`, plain data that the failure analysis takes.

Neither torch nor flytekit is imported here.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import pickle
import signal
from collections import ChainMap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import cloudpickle

from pytorch_core.frontend import PLAIN, FrontEnd, PlainSnapshot


class _Pickler(cloudpickle.Pickler):
    """cloudpickle, with `dataclasses.MISSING` pickled by reference.

    cloudpickle carries a class of ``__main__`` (a script run with ``python file.py``, ``python -m``) by value, and
    loading it in a process that has the class already sets its state again: each field's ``default`` and
    ``default_factory`` become a new ``_MISSING_TYPE`` object instead of the ``dataclasses.MISSING`` singleton, and
    code that asks ``field.default is MISSING`` (flyte's type engine, through mashumaro) then fails on that class.
    """

    dispatch_table = ChainMap(
        {type(dataclasses.MISSING): lambda missing: "MISSING"}, cloudpickle.Pickler.dispatch_table
    )


def dumps(value: Any) -> bytes:
    """Pickle a user value (function, inputs, result, exception) for another process: `cloudpickle.dumps` that keeps
    `dataclasses.MISSING` the singleton (see `_Pickler`).

    Args:
        value: anything cloudpickle can pickle.

    Returns:
        bytes: the pickle; `cloudpickle.loads` reads it.
    """
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.DEFAULT_PROTOCOL).dump(value)
    return buffer.getvalue()


RESULT_FILE = "rank-{rank}.result"
ERROR_FILE = "rank-{rank}.error"
DONE_FILE = "rank-{rank}.done"
START_FILE = "rank-{rank}.started"
STACK_FILE = "rank-{rank}.stack"
PROGRESS_FILE = "progress.json"
PREEMPTED_FILE = "rank-{rank}.preempted"
STOPPING_FILE = "rank-{rank}.stopping"
LAUNCHER_SIGNAL_FILE = "launcher.signal"
#: The signal on which a rank dumps its stacks to ``rank-<n>.stack`` (``faulthandler``; rarely used by programs).
STACK_SIGNAL = signal.SIGUSR2


@dataclass(frozen=True)
class RankSpec:
    """Everything one rank process needs, pickled by torch's agent into the child.

    Attributes:
        fn_bytes: the user function, cloudpickled.
        kwargs_bytes: the task inputs (keyword arguments), cloudpickled.
        control_dir: directory for the per-rank result / error / marker files.
        context: the front-end's snapshot of the task process's context (a dataclass with ``working_dir``).
        frontend: the front-end the rank rebuilds that context with (``pytorch_core.frontend``).
        threads: intra-op threads for this rank (``OMP_NUM_THREADS`` unless the user set it).
        collective_timeout_s: timeout filled into ``init_process_group``; ``None`` = per-backend default.
        env: extra variables every rank sees (the ``PET_*`` set).
        nproc_per_node: processes per (virtual) node; used for the node's view when ``virtual_nodes``.
        virtual_nodes: locally, several declared nodes share one agent: give each rank its node's view
            (``_plan.node_view``: ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ...).
        node_gpus: per declared node, its ranks' ``CUDA_VISIBLE_DEVICES`` (empty: leave the devices as they are).
        parent_pid: pid of the launching process, for the die-with-parent check.
        retry_hangs: a hang is raised as a recoverable error (``_hang.py``).
        preflight: run the preflight before the task's code (``_preflight.py``).
        preflight_local: every rank runs on this host (the local launcher): the preflight's local check, not the
            all-reduce that crosses the network between pods.
        shm_size: the ``/dev/shm`` size the preflight checks (``None``: not checked).
        progress_timeout_s: ``progress_timeout`` in seconds (``_hang.py``), or ``None``.
        import_roots: directories the task's module is imported from, put on ``sys.path`` before the function is
            unpickled (``pyflyte run dir/wf.py`` adds the package root to ``sys.path`` only while it imports).
        fn_files: the source file of each code object of the function (``_codefiles.code_files``), put back in the
            rank where cloudpickle pickled the function by value and dropped them, so its tracebacks name the file.
    """

    fn_bytes: bytes
    kwargs_bytes: bytes
    control_dir: str
    context: Any = field(default_factory=PlainSnapshot)
    frontend: FrontEnd = PLAIN
    threads: Optional[int] = None
    collective_timeout_s: Optional[float] = None
    env: dict[str, str] = field(default_factory=dict)
    nproc_per_node: int = 1
    virtual_nodes: bool = False
    node_gpus: tuple[str, ...] = ()
    parent_pid: Optional[int] = None
    import_roots: tuple[str, ...] = ()
    fn_files: dict = field(default_factory=dict)
    retry_hangs: bool = True
    preflight: bool = True
    preflight_local: bool = False
    shm_size: Optional[str] = None
    progress_timeout_s: Optional[float] = None


@dataclass(frozen=True)
class RankError:
    """What a failing rank reports to the launcher (``rank-<n>.error``).

    Attributes:
        rank: global rank of the failing process.
        timestamp: ``time.time()`` when the exception reached the entrypoint.
        type_name: ``module.QualName`` of the exception type.
        message: ``str(exception)``.
        traceback_text: the formatted traceback, as the rank printed it.
        recoverable: the exception is a ``FlyteRecoverableException``.
        collateral: the exception looks like a consequence of another rank's failure (communication error/timeout).
        exc_bytes: the exception cloudpickled, or ``None`` if it could not be pickled and loaded back.
        culprit: for a rank that gave up waiting and learnt from the group's store which rank did not arrive
            (``_hang.py``), that rank; its message leads with it.
    """

    rank: int
    timestamp: float
    type_name: str
    message: str
    traceback_text: str
    recoverable: bool
    collateral: bool
    exc_bytes: Optional[bytes] = None
    culprit: Optional[int] = None


@dataclass(frozen=True)
class RankResult:
    """What rank 0 returns to the launcher (``rank-0.result``).

    Attributes:
        value: the function's return value.
        decks: rank 0's Decks as ``(name, html)`` pairs (flytekit's timeline Deck excluded).
        metadata: the output metadata flytekit's tracker held for ``value``, or ``None``.
    """

    value: Any
    decks: list[tuple[str, str]] = field(default_factory=list)
    metadata: Any = None


@dataclass(frozen=True)
class ControlRecord:
    """Everything the ranks wrote, read once after they ended.

    Attributes:
        result_bytes: rank 0's :class:`RankResult`, still pickled (see :meth:`load_result`), or ``None`` when no
            rank 0 of this launch wrote one.
        errors: the reported exceptions, earliest first.
        started: global ranks whose entrypoint began.
        done: global ranks whose function returned.
        stacks: global rank -> its stack dump (``faulthandler`` text), for ranks asked for one.
        preempted: global rank -> what it wrote when it stopped for a preemption (the record's JSON fields and
            ``where``).
        stopping: global ranks that learnt of a preemption (whether or not they stopped before they were killed).
    """

    result_bytes: Optional[bytes] = None
    errors: tuple[RankError, ...] = ()
    started: frozenset[int] = frozenset()
    done: frozenset[int] = frozenset()
    stacks: dict[int, str] = field(default_factory=dict)
    preempted: dict[int, dict[str, Any]] = field(default_factory=dict)
    stopping: frozenset[int] = frozenset()

    def load_result(self) -> Optional[RankResult]:
        """Unpickle rank 0's result (only a successful launch needs it: a failed one never unpickles user values).

        Returns:
            Optional[RankResult]: the result, or ``None`` when none was written.
        """
        return cloudpickle.loads(self.result_bytes) if self.result_bytes is not None else None


#: A peer's start marker older than the asking rank's start by more than this is taken for an earlier round's (an
#: elastic restart's ranks start within seconds of each other; a round that ended and restarted took longer).
STARTED_SLACK_S = 10.0


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, a dead process not yet reaped, counts as gone): the launcher's and the ranks'
    one test of a process they watch.

    Args:
        pid: the process id.

    Returns:
        bool: it runs.
    """
    if pid <= 0:
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


class ControlDir:
    """One launch's control directory: the rank side writes, the launcher side reads.

    Args:
        path: the directory (it must exist).
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    # -- rank side ---------------------------------------------------------------------------------------------------

    def mark_started(self, rank: int, pid: int) -> None:
        """Record that ``rank``'s entrypoint began.

        Args:
            rank: global rank.
            pid: the rank's process id.
        """
        _write_atomic(self.path / START_FILE.format(rank=rank), str(pid).encode())

    def stack_file(self, rank: int) -> Path:
        """Where ``rank`` dumps its stacks (the rank opens it at start and keeps it open for ``faulthandler``).

        Args:
            rank: global rank.

        Returns:
            Path: ``rank-<n>.stack``.
        """
        return self.path / STACK_FILE.format(rank=rank)

    def request_stacks(self, asking_rank: int) -> list[int]:
        """Ask every rank that started and has neither finished nor failed to dump its stacks (best effort).

        Called by a rank whose collective timed out or lost a peer, before it exits: the ranks it waited for are
        still alive then (the agent stops them once a rank exits), so what they were doing is recorded.

        Args:
            asking_rank: the calling rank (not asked).

        Returns:
            list[int]: the ranks signalled.
        """
        asked = []
        finished = self._ranks(DONE_FILE) | self._ranks(ERROR_FILE)
        for path in self.path.glob(START_FILE.format(rank="*")):
            rank = int(path.name.split(".")[0].split("-")[1])
            if rank == asking_rank or rank in finished:
                continue
            try:
                os.kill(int(path.read_text() or "0"), STACK_SIGNAL)
            except (OSError, ValueError):
                continue
            asked.append(rank)
        return sorted(asked)

    def write_progress(self, snapshot: dict[str, Any]) -> None:
        """Replace ``progress.json`` with global rank 0's latest snapshot (atomically: the follower never reads half).

        Args:
            snapshot: the snapshot (``progress._Reporter.snapshot``), JSON-ready.
        """
        _write_atomic(self.progress_file, json.dumps(snapshot, separators=(",", ":")).encode())

    @property
    def progress_file(self) -> Path:
        """``progress.json`` (see the module docstring)."""
        return self.path / PROGRESS_FILE

    def write_preempted(self, rank: int, record: dict[str, Any]) -> None:
        """Record that ``rank`` stopped for a preemption.

        Args:
            rank: global rank.
            record: the preemption record's fields and ``where``.
        """
        _write_atomic(self.path / PREEMPTED_FILE.format(rank=rank), json.dumps(record).encode())

    def mark_done(self, rank: int) -> None:
        """Record that ``rank``'s function returned.

        Args:
            rank: global rank.
        """
        _write_atomic(self.path / DONE_FILE.format(rank=rank), b"")

    def returned_before(self, when: float) -> set[int]:
        """The ranks whose function returned before ``when`` (a ``time.time()``).

        Args:
            when: the time.

        Returns:
            set[int]: those ranks.
        """
        found = set()
        for path in self.path.glob(DONE_FILE.format(rank="*")):
            try:
                if path.stat().st_mtime < when:
                    found.add(int(path.name.split(".")[0].split("-")[1]))
            except (OSError, ValueError):
                continue
        return found

    def write_error(self, error: RankError) -> None:
        """Write ``rank-<n>.error``.

        Args:
            error: the report.
        """
        _write_atomic(self.path / ERROR_FILE.format(rank=error.rank), pickle.dumps(error))

    def write_result(self, result: RankResult) -> None:
        """Write rank 0's result.

        Args:
            result: value, Decks and metadata.

        Raises:
            TypeError: the value cannot be pickled (the message names its type).
        """
        try:
            payload = dumps(result)
        except Exception as exc:
            raise TypeError(
                f"rank 0's return value of type {type(result.value).__name__} cannot be pickled to carry it to the "
                f"task process: {exc}"
            ) from exc
        _write_atomic(self.path / RESULT_FILE.format(rank=0), payload)

    # -- launcher side -----------------------------------------------------------------------------------------------

    def read(self) -> ControlRecord:
        """Read what the ranks wrote.

        Returns:
            ControlRecord: rank 0's result (pickled), the errors (earliest first; a half-written error file is
            skipped: that rank is then known only from torch's record of its exit) and the started / done markers.
        """
        errors = []
        for path in self.path.glob(ERROR_FILE.format(rank="*")):
            try:
                errors.append(pickle.loads(path.read_bytes()))
            except Exception:  # noqa: BLE001 - a half-written file: the rank is reported from torch's record instead
                continue
        result_path = self.path / RESULT_FILE.format(rank=0)
        return ControlRecord(
            result_bytes=result_path.read_bytes() if result_path.exists() else None,
            errors=tuple(sorted(errors, key=lambda err: err.timestamp)),
            started=self._ranks(START_FILE),
            done=self._ranks(DONE_FILE),
            stacks=self._stacks(),
            preempted=self._preempted(),
            stopping=self._ranks(STOPPING_FILE),
        )

    def mark_stopping(self, rank: int) -> None:
        """Record that ``rank`` is stopping at the agreed step of a preemption (its pid is in ``rank-<n>.started``).

        Args:
            rank: global rank.
        """
        _write_atomic(self.path / STOPPING_FILE.format(rank=rank), b"")

    def mark_launcher_signal(self, name: str) -> None:
        """Record, before the launcher's agent passes a signal on to the ranks, that the launcher got it (the ranks then
        say so, rather than each naming itself).

        Args:
            name: the signal's name.
        """
        _write_atomic(self.path / LAUNCHER_SIGNAL_FILE, name.encode())

    def launcher_signal(self) -> Optional[str]:
        """The signal the launcher got, when it got one (:meth:`mark_launcher_signal`), else ``None``."""
        try:
            return (self.path / LAUNCHER_SIGNAL_FILE).read_text() or None
        except OSError:
            return None

    def failed_peers(self, rank: int, since: float) -> list[int]:
        """The other ranks of this round that failed: they reported an exception, or their process is gone without
        having returned or stopped for a preemption. Read in a rank's signal handler (quick, never raising): when a
        peer failed, the signal is the launcher's agent stopping the ranks left, not a preemption.

        Args:
            rank: the asking rank (left out).
            since: when the asking rank started (``time.time()``): what an earlier round of an elastic restart left is
                older.

        Returns:
            list[int]: those ranks.
        """
        failed = set()
        for path in self.path.glob(ERROR_FILE.format(rank="*")):
            try:
                if path.stat().st_mtime >= since:
                    failed.add(int(path.name.split(".")[0].split("-")[1]))
            except (OSError, ValueError):
                continue
        ended_well = self._ranks(DONE_FILE) | self._ranks(PREEMPTED_FILE) | self._ranks(STOPPING_FILE)
        for path in self.path.glob(START_FILE.format(rank="*")):
            try:
                peer = int(path.name.split(".")[0].split("-")[1])
                if peer in ended_well or peer in failed or path.stat().st_mtime < since - STARTED_SLACK_S:
                    continue
                if not pid_alive(int(path.read_text() or "0")):
                    failed.add(peer)
            except (OSError, ValueError):
                continue
        failed.discard(rank)
        return sorted(failed)

    def stopping_pids(self) -> list[int]:
        """The pids of the ranks that are stopping for a preemption (``rank-<n>.stopping``).

        Returns:
            list[int]: the pids.
        """
        pids = []
        for rank in self._ranks(STOPPING_FILE):
            try:
                pids.append(int((self.path / START_FILE.format(rank=rank)).read_text()))
            except (OSError, ValueError):
                continue
        return pids

    def _preempted(self) -> dict[int, dict[str, Any]]:
        found = {}
        for path in self.path.glob(PREEMPTED_FILE.format(rank="*")):
            try:
                found[int(path.name.split(".")[0].split("-")[1])] = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
        return found

    def _stacks(self) -> dict[int, str]:
        stacks = {}
        for path in self.path.glob(STACK_FILE.format(rank="*")):
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            if text.strip():
                stacks[int(path.name.split(".")[0].split("-")[1])] = text
        return stacks

    def _ranks(self, pattern: str) -> frozenset[int]:
        return frozenset(
            int(path.name.split(".")[0].split("-")[1]) for path in self.path.glob(pattern.format(rank="*"))
        )
