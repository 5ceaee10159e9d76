"""Naming the rank that did not arrive, across pods, through the process group's own store.

Ranks in different pods share no folder, but every rank of a process group holds a connection to the group's store
(the TCP store at ``MASTER_ADDR:MASTER_PORT``, or the c10d rendezvous store). Once ``init_process_group`` returned,
each rank opens a second connection to it (``store.clone()``) and a daemon thread polls one key:

======================================  ===============================================================================
``flyte-pytorch/<attempt>/request``     set by the first rank whose collective failed as a consequence of a peer
                                        (a timeout, a lost connection): its rank
``flyte-pytorch/<attempt>/answer/<r>``  rank ``r``'s answer: its node, pod and the stack of its main thread
``flyte-pytorch/<attempt>/done/<r>``    rank ``r``'s function returned
``flyte-pytorch/<attempt>/failed/<r>``  rank ``r`` raised an exception of its own: its type and first line
``flyte-pytorch/<attempt>/preempt/...``  a preemption's request, announcements and agreed step: the watcher polls
                                        them too (``preemption.tick``; the protocol is in ``preemption.py``)
======================================  ===============================================================================

A rank that gives up waiting asks, collects the answers for up to :data:`ANSWER_WAIT_S`, and raises a
:class:`HangError` whose first line names the rank that did not arrive, its node and pod, and what it was doing
(``rank 1 (of 3) on node 1 (pod job-worker-0) did not arrive: still running at train.py:42 in step, outside
torch.distributed; rank 0 gave up waiting: DistBackendError: ... timed out``). Flyte's error document of that pod
then leads with the culprit.

A rank that answers a request and is still running :data:`SELF_STOP_S` later stops itself: its peers have given
up, so the group is broken, and a rank stuck outside ``torch.distributed`` (a dead data loader, a deadlock) would
otherwise hold its pod until the job's deadline. It first raises a :class:`HangError` in its main thread (which
reaches Flyte's error document when the main thread runs Python), then exits after :data:`SELF_EXIT_S` more.

``<attempt>`` is the torch agent's restart count and Flyte's attempt, so a restarted group never reads an old
request. The report is evidence, never the words of an error: a peer that raised its own exception is named with
its type (a :class:`PeerFailedError`, the task's own error, never retried); a peer still running the task's code, or
one that returned, is named in a :class:`HangError` that is not retried (it would be late again on every attempt);
only a peer that vanished (it neither answered nor left a word: its process or pod is gone) makes the hang
retryable (``retry_hangs``), because on a cluster that is a bad node or link and Flyte's retry runs on fresh pods.
Everything here is best effort: a store that cannot be cloned (a ``FileStore``) means no watch, and the rank's own
error is raised as before.

torch is imported inside functions only.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import threading
import time
from typing import Any, Optional

from pytorch_core import preemption, progress
from pytorch_core._failure import (
    HangError,
    PeerFailedError,
    activity,
    hang_error_class,
    peer_failed_class,
)
from pytorch_core.frontend import current
from pytorch_core.progress import report_progress

#: How often a rank's watcher checks for a request (one small store round trip each time).
POLL_S = 0.5
#: How long a rank that gave up waits for the others' answers (an answer takes at most POLL_S when its rank runs
#: Python; a rank that is dead or holds the interpreter never answers).
ANSWER_WAIT_S = 3.0
#: How long a rank that answered a request may keep running before it stops itself (see the module docstring).
SELF_STOP_S = 10.0
#: How long after the HangError was raised in its main thread the rank exits regardless (its main thread is
#: stuck where Python cannot run: a C call that never returns).
SELF_EXIT_S = 10.0
#: Exit code of a rank that had to exit itself: 1, a user error, unlike 128+ (signals) that the operator's
#: ``ExitCode`` restart policy retries in place: a restarted pod cannot rejoin a group whose peers have left.
SELF_EXIT_CODE = 1

_current: Optional[HangWatch] = None
#: Called with the HangError before a rank whose main thread did not stop exits (the rank entrypoint writes its
#: report and drains its console there, so the explanation is never lost to ``os._exit``).
_before_exit: list[Any] = []
#: (the opt-in collective timeout in use, torch's default for the backend), once ``init_process_group`` got one.
_timeout_note: Optional[tuple[Any, Any]] = None


def set_timeout_note(used: Any, torch_default: Any) -> None:
    """Remember that ``init_process_group`` got the opt-in ``collective_timeout`` instead of torch's default; a hang
    report then says so.

    Args:
        used: the timeout filled in (a ``timedelta``).
        torch_default: what torch would have used (a ``timedelta``).
    """
    global _timeout_note
    _timeout_note = (used, torch_default)


def timeout_note() -> str:
    """``"; collective_timeout=...s was in force (torch's default: ...s)"`` when it was, else ``""``."""
    if _timeout_note is None:
        return ""
    used, default = _timeout_note
    return (
        f"; the collective timeout was collective_timeout={used.total_seconds():g}s, shorter than torch's default "
        f"of {default.total_seconds():g}s"
        if used < default
        else f"; the collective timeout was collective_timeout={used.total_seconds():g}s"
    )


def on_self_exit(callback: Any) -> None:
    """Have ``callback(error)`` run before this rank exits itself (see :data:`_before_exit`).

    Args:
        callback: called with the HangError; exceptions it raises are ignored.
    """
    _before_exit.append(callback)


# ``report_progress`` lives in ``progress.py`` (the progress API of both front-ends); the watch reads when this rank
# last called it (``progress.last_report()``). The clock starts at the first call, so set-up before the loop (a slow
# import, loading the data) is never taken for a stop.


def _prefix() -> str:
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    attempt = os.environ.get("FLYTE_ATTEMPT_NUMBER", "0")
    return f"flyte-pytorch/{attempt}.{restart}/"


def where_am_i(rank: int) -> dict[str, str]:
    """This rank's node and pod, as its error names them.

    Args:
        rank: the global rank.

    Returns:
        dict[str, str]: ``node`` (``GROUP_RANK``, else rank // ``LOCAL_WORLD_SIZE``) and ``pod`` (Flyte's worker name
        ``_F_WN``, else the host name).
    """
    node = os.environ.get("GROUP_RANK")
    if node is None:
        local = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
        node = str(rank // max(1, local))
    pod = os.environ.get("_F_WN") or os.environ.get("HOSTNAME") or os.uname().nodename
    return {"node": node, "pod": pod}


def _main_stack() -> str:
    """The main thread's stack in ``faulthandler``'s format (what ``_failure.main_thread_frames`` reads)."""
    main = threading.main_thread().ident
    frame = sys._current_frames().get(main or 0)
    lines = [f"Thread 0x{(main or 0):016x} (most recent call first):"]
    while frame is not None:
        lines.append(f'  File "{frame.f_code.co_filename}", line {frame.f_lineno} in {frame.f_code.co_name}')
        frame = frame.f_back
    return "\n".join(lines) + "\n"


class HangWatch:
    """One rank's watch on the group's store (see the module docstring).

    Args:
        store: a connection of its own to the group's store.
        rank: this rank.
        world_size: ranks in the group.
        recoverable: a hang is raised as a recoverable error (``retry_hangs``).
        progress_timeout_s: stop this rank when it reported no progress for this long outside torch.distributed.
    """

    def __init__(
        self, store: Any, rank: int, world_size: int, *, recoverable: bool, progress_timeout_s: Optional[float] = None
    ) -> None:
        self.store = store
        self.progress_timeout_s = progress_timeout_s
        self.rank = rank
        self.world_size = world_size
        self.recoverable = recoverable
        self.prefix = _prefix()
        self.stopped = threading.Event()
        self.giving_up = threading.Event()
        #: Set to poll at once: the watch stops, or this rank got a signal to publish (``preemption.py``).
        self.wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pytorch-hang-watch", daemon=True)

    def start(self) -> None:
        """Start polling."""
        self._thread.start()

    def stop(self) -> None:
        """Stop polling (the group is gone or the function returned)."""
        self.stopped.set()
        self.wake.set()

    def mark_done(self) -> None:
        """Tell the others that this rank's function returned (a rank waiting for it learns it left), and stop."""
        self.stop()
        try:
            self.store.set(f"{self.prefix}done/{self.rank}", "1")
        except Exception:  # noqa: BLE001 - the store may be gone already (the group ended): nothing to tell
            pass

    def _run(self) -> None:
        request = f"{self.prefix}request"
        interval: Optional[float] = POLL_S
        try:
            while True:
                self.wake.wait(interval)
                self.wake.clear()
                if self.stopped.is_set():
                    return
                if self.store.check([request]):
                    break
                if self._stalled():
                    return
                # A preemption: publish this rank's signal, learn of a peer's, announce, agree (preemption.py).
                interval = preemption.tick(self.store) or POLL_S
            asker = self.store.get(request).decode()
            if self.giving_up.is_set() or asker == str(self.rank):
                return
            answer = {**where_am_i(self.rank), "stack": _main_stack()}
            self.store.set(f"{self.prefix}answer/{self.rank}", json.dumps(answer))
        except Exception:  # noqa: BLE001 - the store went away with the group: nothing to watch
            return
        self._stop_self(int(asker))

    def _stalled(self) -> bool:
        """Whether this rank made no progress for ``progress_timeout`` outside torch.distributed; if so, tell the
        others (they answer, and learn who stopped) and stop this rank with a HangError naming it."""
        limit = self.progress_timeout_s
        last = progress.last_report()
        if limit is None or last is None or time.monotonic() - last <= limit or self.giving_up.is_set():
            return False
        in_dist, doing = activity(_main_stack())
        if in_dist:
            return False  # waiting in a collective: the collective timeout bounds it
        where = where_am_i(self.rank)
        message = (
            f"rank {self.rank} (of {self.world_size}) on node {where['node']} (pod {where['pod']}) made no progress "
            f"for {limit:g}s and was stopped by progress_timeout={limit:g}s (report_progress() was not called, and "
            f"it was not waiting in torch.distributed): {doing}"
        )
        try:
            self.store.compare_set(f"{self.prefix}request", "", str(self.rank))
        except Exception:  # noqa: BLE001 - the store is gone: stop this rank all the same
            pass
        # The rank's own lack of progress, not a vanished peer: never retried.
        self._raise_in_main(message, recoverable=False)
        return True

    def _raise_in_main(self, message: str, *, recoverable: bool, culprit: Optional[int] = None) -> None:
        """Raise a HangError with ``message`` naming ``culprit`` (this rank by default) in the main thread; exit if
        it is still running SELF_EXIT_S later (after the callbacks of :func:`on_self_exit` reported it)."""
        rank = self.rank if culprit is None else culprit
        error = hang_error_class(recoverable)(message, rank=rank, world_size=self.world_size)
        main = threading.main_thread().ident
        if main is not None:
            _pending[main] = error
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(main), ctypes.py_object(_SelfStop))
        if self.stopped.wait(SELF_EXIT_S):
            return
        sys.stderr.write(f"{message}; its main thread did not stop, exiting\n")
        sys.stderr.flush()
        mark_failed(error)
        for callback in _before_exit:
            try:
                callback(error)
            except Exception:  # noqa: BLE001 - exiting regardless
                pass
        os._exit(SELF_EXIT_CODE)

    def _stop_self(self, asker: int) -> None:
        """A peer gave up on the group: end this rank too, however it is stuck (module docstring)."""
        if self.stopped.wait(SELF_STOP_S) or self.giving_up.is_set():
            return
        where = where_am_i(self.rank)
        in_dist, doing = activity(_main_stack())
        message = (
            f"rank {self.rank} (of {self.world_size}) on node {where['node']} (pod {where['pod']}) did not arrive: "
            f"{doing}; rank {asker} gave up waiting for it, and it was stopped {SELF_STOP_S:.0f}s later"
        )
        if in_dist:
            message = (
                f"rank {self.rank} (of {self.world_size}) on node {where['node']} (pod {where['pod']}) was stopped: "
                f"rank {asker} gave up on the group {SELF_STOP_S:.0f}s earlier, and this rank was still {doing}"
            )
        # Its peer gave up on it while it ran: evidence of a slow rank, not of a vanished one. A rank that waited in
        # a collective names the rank that gave up, never itself (its report is then a consequence, not a cause).
        self._raise_in_main(message, recoverable=False, culprit=asker if in_dist else self.rank)


class _SelfStop(BaseException):
    """Raised in a stuck main thread (a type, as ``PyThreadState_SetAsyncExc`` needs); turned into the HangError."""


#: main thread id -> the HangError its _SelfStop stands for.
_pending: dict[int, BaseException] = {}


def pending_error(exc: BaseException) -> BaseException:
    """The :class:`HangError` a ``_SelfStop`` stands for, else ``exc`` itself.

    Args:
        exc: what the rank's function raised.

    Returns:
        BaseException: the exception to report.
    """
    if isinstance(exc, _SelfStop):
        error = _pending.pop(threading.get_ident(), None)
        if error is not None:
            error.__cause__ = None
            return error
    return exc


def start_watch(*, recoverable: bool, progress_timeout_s: Optional[float] = None) -> None:
    """Start watching the default process group's store (called right after ``init_process_group`` returned).

    Args:
        recoverable: a hang is raised as a recoverable error (``retry_hangs``).
        progress_timeout_s: ``progress_timeout`` in seconds, or ``None`` (off).
    """
    global _current
    progress.reset()
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    if _current is not None:
        _current.stop()
        _current = None
    if progress_timeout_s is not None:
        _wrap_work_wait()
    try:
        store = c10d._get_default_store().clone()  # type: ignore[attr-defined]
        watch = HangWatch(
            store,
            dist.get_rank(),
            dist.get_world_size(),
            recoverable=recoverable,
            progress_timeout_s=progress_timeout_s,
        )
    except Exception:  # noqa: BLE001 - a store that cannot be cloned (FileStore): no watch, errors as before
        return
    _current = watch
    preemption.attach(watch.store, watch.wake, watch.rank, watch.world_size, watch.prefix)
    watch.start()


def mark_done() -> None:
    """The function returned: tell the watch (if any)."""
    global _current
    if _current is not None:
        _current.mark_done()
        _current = None


def name_culprit(exc: BaseException) -> Optional[BaseException]:
    """Ask the other ranks where they are and name the one that did not arrive.

    Args:
        exc: the collateral error this rank got (a timeout or a lost peer).

    Returns:
        Optional[BaseException]: a :class:`HangError` naming the culprit (its cause is ``exc``), or ``None`` when
        there is no watch or nobody can be named.
    """
    watch = _current
    if watch is None or isinstance(exc, HangError):
        return None  # a HangError already names the rank (this one, when it stopped for want of progress)
    watch.giving_up.set()
    watch.stop()
    store, prefix = watch.store, watch.prefix
    started = time.monotonic()
    answers: dict[int, dict[str, str]] = {}
    failed: dict[int, dict[str, str]] = {}
    done: set[int] = set()
    others = [r for r in range(watch.world_size) if r != watch.rank]
    try:
        store.compare_set(f"{prefix}request", "", str(watch.rank))
        while time.monotonic() - started < ANSWER_WAIT_S:
            for r in others:
                if r in answers or r in done or r in failed:
                    continue
                if store.check([f"{prefix}failed/{r}"]):
                    failed[r] = json.loads(store.get(f"{prefix}failed/{r}").decode())
                elif store.check([f"{prefix}done/{r}"]):
                    done.add(r)
                elif store.check([f"{prefix}answer/{r}"]):
                    answers[r] = json.loads(store.get(f"{prefix}answer/{r}").decode())
            if len(answers) + len(done) + len(failed) == len(others):
                break
            time.sleep(0.05)
    except Exception:  # noqa: BLE001 - the store is gone (its host rank exited): name what we have
        pass
    mine = where_am_i(watch.rank)
    summary = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    gave_up = (
        f"rank {watch.rank} on node {mine['node']} (pod {mine['pod']}) gave up waiting: "
        f"{type(exc).__name__}: {summary}{timeout_note()}"
    )
    if failed:
        # A peer raised its own exception: that is the cause, with its type, whatever its text says.
        first_failed = min(failed)
        report = failed[first_failed]
        short = report.get("type", "").rsplit(".", 1)[-1]
        where = f" on node {report['node']} (pod {report['pod']})" if "node" in report else ""
        error: BaseException = peer_failed_class(bool(report.get("recoverable")))(
            f"rank {first_failed} (of {watch.world_size}){where} failed: {short}: {report.get('message', '')}; "
            + gave_up,
            type_name=report.get("type", ""),
            original_message=report.get("message", ""),
            rank=first_failed,
            world_size=watch.world_size,
        )
        return error
    culprits: dict[int, str] = {r: "its function returned without joining the others" for r in sorted(done)}
    waiting: dict[int, str] = {}
    for r, answer in sorted(answers.items()):
        in_dist, doing = activity(answer.get("stack", ""))
        (waiting if in_dist else culprits)[r] = doing
    silent = [r for r in others if r not in answers and r not in done]
    vanished = False
    if not culprits and silent:
        # No answer and no word: its process or pod is gone (or stuck where Python cannot run). The only evidence
        # of infrastructure trouble, and the only hang retried.
        culprits = {
            r: f"did not answer within {ANSWER_WAIT_S:.0f}s (its process or pod is gone, or stuck where Python "
            f"cannot run)"
            for r in silent
        }
        vanished = True
    if not culprits:
        culprits = waiting
    if not culprits:
        return None
    culprits = dict(sorted(culprits.items()))
    first = next(iter(culprits))

    def place(r: int) -> str:
        info = answers.get(r)
        return f" on node {info['node']} (pod {info['pod']})" if info else ""

    names = "; ".join(
        f"rank {r} (of {watch.world_size}){place(r)} did not arrive: {doing}" for r, doing in culprits.items()
    )
    hang = hang_error_class(watch.recoverable and vanished)(
        f"{names}; {gave_up}", rank=first, world_size=watch.world_size
    )
    hang.type_name = f"{type(exc).__module__}.{type(exc).__qualname__}"
    hang.original_message = str(exc)
    return hang


def mark_failed(exc: BaseException) -> None:
    """Tell the others that this rank raised ``exc`` of its own (best effort; only once a watch runs).

    A peer that gives up waiting for this rank then names it with its exception's type rather than calling it a
    hang (:func:`name_culprit`).

    Args:
        exc: the rank's own exception (not a collective's).
    """
    watch = _current
    if watch is None or isinstance(exc, PeerFailedError):
        return
    if isinstance(exc, HangError) and exc.rank != watch.rank:
        return  # it names another rank: this one did not fail of itself
    text = str(exc).strip()
    report = {
        **where_am_i(watch.rank),
        "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
        "message": text.splitlines()[0] if text else "",
        "recoverable": _recoverable(exc),
    }
    try:
        watch.store.set(f"{watch.prefix}failed/{watch.rank}", json.dumps(report))
    except Exception:  # noqa: BLE001 - the store is gone: the peers see a vanished rank
        pass


def _recoverable(exc: BaseException) -> bool:
    return current().is_recoverable(exc)


def _wait_for_work(work: Any, *args: Any, **kwargs: Any) -> Any:
    """``Work.wait`` with a frame of its own, so that a rank blocked in it counts as waiting in torch.distributed
    (``_failure.activity``); installed only with ``progress_timeout``."""
    return _original_wait(work, *args, **kwargs)


_original_wait: Any = None


def _wrap_work_wait() -> None:
    global _original_wait
    import torch.distributed as dist

    work = getattr(dist, "Work", None)
    if work is None or _original_wait is not None:
        return
    try:
        _original_wait = work.wait
        work.wait = _wait_for_work
    except (AttributeError, TypeError):  # a build whose Work cannot be patched: its waits show torch frames only
        _original_wait = None


__all__ = [
    "HangError",
    "HangWatch",
    "start_watch",
    "mark_done",
    "mark_failed",
    "name_culprit",
    "on_self_exit",
    "pending_error",
    "report_progress",
    "set_timeout_note",
]
