"""Preemption: on a SIGTERM every rank stops after the same step, global rank 0 saves a checkpoint, and the ranks
leave inside the termination grace.

A spot node reclaimed, a node drained, a pod preempted by the scheduler or by Kueue: Kubernetes sends SIGTERM to
the pod's container and SIGKILL ``terminationGracePeriodSeconds`` later (30 s by default). Locally, Ctrl-C and
``kill -TERM`` reach the launcher, and torch's agent forwards the signal to every rank, SIGKILL following after the
launcher's grace (``FLYTE_PYTORCH_TERMINATION_GRACE_S``, 5 s by default locally). Every rank that got the signal, or
learnt of it from a peer, stops at a **step boundary**: a call of ``report_progress(step)``, ``save_checkpoint(state,
step)`` or ``preemption_requested(step)``. A loop that calls any of them needs no other code.

The agreement. Ranks in different pods share no folder, but each holds a connection to the process group's TCP
store, and each has a watcher thread polling it (``_hang.py``). Under ``flyte-pytorch/<attempt>/preempt/``:

=====================  ===============================================================================================
``request``            the first rank that got a signal: which, its rank and pod, when, and the grace it counts on
                       (``compare_set``: the first request wins)
``at/<r>``             rank ``r``'s announcement: the last step boundary it passed (``-1``: none yet)
``stop``               the agreed step ``S`` (``compare_set``: whoever computes it first writes it; all adopt it)
``saved``              global rank 0's checkpoint step at the stop (``null``: nothing was saved)
``left/<r>``           rank ``r`` read ``saved`` (rank 0 keeps the store up until every rank did, or a second)
=====================  ===============================================================================================

1. A signalled rank's handler (armed: see below) only records the request and wakes its watcher, which publishes it.
   The other watchers see it within their poll (0.5 s).
2. Each watcher, on learning of the request, announces its rank's position ``a_r`` (the step of the last boundary
   its main thread passed) from its own thread, so an announcement never waits for a main thread that is inside a
   collective.
3. Once every rank announced (or the agreement wait passed: 40 % of the grace, 1 to 10 s), ``S = max(a_r) + 1``.
4. Each main thread goes on training until a boundary whose step is ``>= S``, and stops there.

Why ``max + 1``: ranks that all-reduce each step are never more than one step apart, so some rank may already have
passed boundary ``max(a)`` by the time the others announce; none can have passed ``max(a) + 1``, because a rank
never goes past boundary ``a_r + 1`` before it knows ``S``: it waits there (bounded by the grace). Every rank can
reach ``S`` (its ``a_r + 1 <= S``), and no rank passes it, so no rank waits in a collective for a rank that has
left. The rule holds for any step numbering the ranks share (a loop that reports every 10 steps stops at the first
boundary ``>= S`` on every rank). The watcher reads the rank's step after setting the boundary hook, and the main
thread records its step before it reads the hook, so a boundary that the announcement did not see is always checked.

At ``S`` every rank runs the loop's ``on_preemption`` callbacks; global rank 0 saves the mapping last given to
``save_checkpoint``/``load_checkpoint`` at step ``S`` (unless it just did), the other ranks wait for it (until the
grace is nearly over); every rank then raises :class:`Preempted` (a ``BaseException``, which ``except Exception`` in
a loop does not swallow). The rank exits with ``pytorch_contract.preemption.PREEMPTED_EXIT_CODE``, and the task ends
as preempted: a recoverable error of system origin in a pod, a resumable stop locally. A save still running a
moment before the grace ends is said in the log, naming the grace; if the SIGKILL comes first, the save's temporary
file is all it leaves, and the last complete checkpoint stands (``checkpoint.py`` writes, then renames).

Where a signal came from (``set_signal_source``: the rank entrypoint reads the launch's control directory, in the
handler). After a peer of this round failed (it reported an exception, or its process is gone without a word), the
signal is torch's agent stopping the ranks left, as torchrun's agent does: no preemption, no words, nothing saved;
global rank 0 hands over where it stood, and the signal does what it did before the rank armed (the rank ends). When
the launcher noted that it got the signal itself, the request says so (``by: "launcher"``) and only the first rank
its agent started says it, once; otherwise the rank names itself. Nothing promises a checkpoint before one is saved:
rank 0 says at the stop what it saved, or that nothing was, and what the next run starts from.

Arming. A rank handles SIGTERM and SIGINT only once its loop has used this API (a first ``report_progress`` with a
step, ``save_checkpoint``, ``load_checkpoint``, ``preemption_requested`` or ``on_preemption``): until then the
signals do what they always did (the process ends at once, or ``KeyboardInterrupt``), as under torchrun. A rank
without a watcher (one rank, or a group whose store cannot be cloned) decides alone: it stops at its next boundary.

Neither torch nor a Flyte SDK is imported at module level.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Optional

from pytorch_contract.preemption import (
    DEFAULT_TERMINATION_GRACE_S,
    ERROR_PREFIX,
    PreemptionRecord,
    format_message,
    termination_grace_s,
    what_comes_next,
)
from pytorch_core import _checkpoints, progress
from pytorch_core.frontend import PreemptedError

__all__ = [
    "preemption_requested",
    "on_preemption",
    "Preempted",
    "PreemptedError",
    "POLL_FAST_S",
]

#: The signals a rank stops at an agreed step for (SIGHUP and SIGQUIT keep their default action).
SIGNALS = ("SIGTERM", "SIGINT")
#: How often a watcher polls the store while a preemption is being agreed (its usual poll is ``_hang.POLL_S``).
POLL_FAST_S = 0.05
#: The agreement waits for every rank's announcement at most this share of the grace (within the bounds below).
AGREE_SHARE = 0.4
AGREE_MIN_S = 1.0
AGREE_MAX_S = 10.0
#: How long before the grace ends a rank stops waiting (for the agreed step, or rank 0's save) and leaves.
LEAVE_MARGIN_S = 1.0


class Preempted(BaseException):
    """Raised in a rank's function at the agreed step: the rank stops, and its task ends as preempted.

    A ``BaseException``, like ``KeyboardInterrupt``: a loop's ``except Exception`` lets it through.

    Args:
        record: what happened (``pytorch_contract.preemption.PreemptionRecord``).
        where: where the checkpoints are (for messages).
    """

    def __init__(self, record: PreemptionRecord, where: str = "") -> None:
        super().__init__(format_message(record))
        self.record = record
        self.where = where


_UNSET = object()


def _env_rank() -> int:
    raw = os.environ.get("RANK", "0").strip()
    return int(raw) if raw.isdigit() else 0


class _Run:
    """This process's part in one run of a task's function (see the module docstring)."""

    def __init__(self) -> None:
        self.armed = False
        self.handlers: dict[signal.Signals, Any] = {}
        self.request: Optional[dict[str, Any]] = None
        self.own_pending = False
        self.announced: Any = _UNSET
        self.stop_at: Optional[int] = None
        self.agreed = threading.Event()
        self.record: Optional[PreemptionRecord] = None
        self.where = ""
        self.callbacks: list[Callable[[int], None]] = []
        self.store: Any = None
        self.prefix = ""
        self.rank = _env_rank()
        self.world_size = 1
        self.wake: Optional[threading.Event] = None


_lock = threading.Lock()
_run = _Run()
#: Called once in a rank when it learns of a preemption (the rank entrypoint notes it in the control directory, so a
#: launcher whose program is exiting waits for the ranks' save; ``_processes._ranks_end_before_exit``).
_on_request: Optional[Callable[[], None]] = None


def on_request(callback: Optional[Callable[[], None]]) -> None:
    """Have ``callback()`` run once when this rank learns of a preemption (``None``: nothing).

    Args:
        callback: the function; what it raises is ignored.
    """
    global _on_request
    _on_request = callback


def _requested() -> None:
    callback = _on_request
    if callback is None:
        return
    try:
        callback()
    except Exception:  # noqa: BLE001 - a note for the launcher; the stop goes on without it
        pass


def _say(text: str) -> None:
    progress.say(f"preemption: {text}")


def _pod() -> str:
    return os.environ.get("_F_WN") or os.environ.get("HOSTNAME") or os.uname().nodename


def start() -> None:
    """A task's function starts in this process (a rank, or the launcher running it): forget any earlier run and
    arm at the first ``report_progress`` call with a step."""
    global _run, _signal_source_fn, _speaks_for_launcher
    end()
    _run = _Run()
    _signal_source_fn, _speaks_for_launcher = None, True
    progress.set_step_boundary_hook(_arm_on_step)


def end() -> None:
    """The function ended in this process: give the signals their previous handlers back."""
    run = _run
    for sig, previous in run.handlers.items():
        try:
            signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
        except (ValueError, OSError):  # not the main thread: the process ends soon anyway
            pass
    run.handlers = {}
    run.store = None
    if progress.step_boundary_hook() in (_arm_on_step, _boundary_hook):
        progress.set_step_boundary_hook(None)


def _arm_on_step(step: Optional[int]) -> None:
    """The first ``report_progress`` with a step arms this rank (the hook then leaves, unless a stop is pending)."""
    if step is None:
        return
    arm()
    if _run.request is not None:
        _boundary_hook(step)


def arm() -> None:
    """The loop uses this API: handle SIGTERM and SIGINT from now on (main thread only; elsewhere the peers' requests
    through the store still stop this rank)."""
    run = _run
    if run.armed:
        return
    run.armed = True
    if progress.step_boundary_hook() is _arm_on_step:
        progress.set_step_boundary_hook(_boundary_hook if run.request is not None else None)
    if threading.current_thread() is not threading.main_thread():
        return
    for name in SIGNALS:
        sig = getattr(signal, name, None)
        if sig is None:
            continue
        try:
            run.handlers[sig] = signal.getsignal(sig)
            signal.signal(sig, _on_signal)
        except (ValueError, OSError):
            run.handlers.pop(sig, None)


@contextlib.contextmanager
def signals_for_a_thread() -> Iterator[None]:
    """While the task's function runs in another thread of this process (an ``async def`` function in a process that
    already runs an event loop, as Flyte 2's runtime does in a pod): this, the main thread, handles SIGTERM and
    SIGINT on the function's behalf, since only the main thread may set handlers. Until the function's loop arms
    (see the module docstring) a signal does what it did before: the previous handler runs, or the default action
    is taken (SIGTERM ends the process); once armed, the ranks stop at an agreed step. Elsewhere it does nothing.

    Yields:
        None: for the block in which the function runs.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[signal.Signals, Any] = {}

    def on_behalf(signum: int, frame: Any) -> None:
        if _run.armed:
            _on_signal(signum, frame)
            return
        sig = signal.Signals(signum)
        before = previous.get(sig)
        if callable(before):
            before(signum, frame)
        elif before != signal.SIG_IGN:
            signal.signal(sig, signal.SIG_DFL)  # the default action, as if no handler had been set
            os.kill(os.getpid(), signum)

    for name in SIGNALS:
        sig = getattr(signal, name)
        try:
            previous[sig] = signal.getsignal(sig)
            signal.signal(sig, on_behalf)
        except (ValueError, OSError):
            previous.pop(sig, None)
    try:
        yield
    finally:
        for sig, before in previous.items():
            if signal.getsignal(sig) is on_behalf:
                signal.signal(sig, before if before is not None else signal.SIG_DFL)


def grace_s() -> float:
    """The termination grace this rank counts on (``FLYTE_PYTORCH_TERMINATION_GRACE_S``; 30 s in a pod unless the
    launcher set it).

    Returns:
        float: seconds.
    """
    try:
        return termination_grace_s(os.environ, DEFAULT_TERMINATION_GRACE_S)
    except ValueError:
        return DEFAULT_TERMINATION_GRACE_S


def _agree_wait_s(grace: float) -> float:
    return min(AGREE_MAX_S, max(AGREE_MIN_S, AGREE_SHARE * grace))


def _on_signal(signum: int, frame: object) -> None:
    run = _run
    sig = signal.Signals(signum)
    if run.request is not None or run.record is not None:
        return  # already stopping (a terminal's Ctrl-C reaches the rank, then the agent forwards it again)
    source = _signal_source()
    if source == FAILURE:
        _stop_for_a_failure(sig, frame)
        return
    grace = grace_s()
    by = "launcher" if source == LAUNCHER else "rank"
    run.request = {
        "signal": sig.name,
        "rank": run.rank,
        "pod": _pod(),
        "by": by,
        "time": time.time(),
        "grace_s": grace,
    }
    run.own_pending = True
    if by == "launcher" and not _speaks_for_launcher:
        pass  # the launcher passed the signal on to every rank it started: the first of them says so
    else:
        who = "the launcher" if by == "launcher" else f"rank {run.rank}"
        text = (
            f"preemption: {who} got {sig.name}: every rank stops after the next step all of them can reach "
            f"(termination grace {grace:g}s)\n"
        )
        try:
            # Straight to the descriptor: the handler may run inside a write to sys.stderr that a signal interrupted,
            # and a second write to the same buffered stream from here would raise in the loop's thread.
            os.write(2, text.encode())
        except OSError:
            pass
    progress.set_step_boundary_hook(_boundary_hook)
    if run.wake is not None:
        run.wake.set()


#: What :func:`set_signal_source` may answer: a peer of this launch failed, so the signal is the launcher stopping the
#: ranks left (torch's agent does that after a rank's failure), not a preemption.
FAILURE = "failure"
#: The launcher of this rank got the signal and its agent passed it on.
LAUNCHER = "launcher"
_signal_source_fn: Optional[Callable[[], Optional[str]]] = None
_speaks_for_launcher = True


def set_signal_source(source: Optional[Callable[[], Optional[str]]], *, speaks_for_launcher: bool = True) -> None:
    """Have ``source()`` say, when a signal comes, where it came from: :data:`FAILURE` (a peer of this launch failed:
    the launcher is stopping the ranks left), :data:`LAUNCHER` (the launcher got it and passed it on), or ``None``
    (this rank got it). The rank entrypoint reads the launch's control directory for it; without a source (a pod
    with one rank, the in-process mode) a signal is this rank's own.

    Args:
        source: the function (it must be quick and never raise: it runs in the signal handler), or ``None``.
        speaks_for_launcher: this rank is the first its launcher's agent started: it says that the launcher got a
            signal (the others it passed the signal on to keep quiet).
    """
    global _signal_source_fn, _speaks_for_launcher
    _signal_source_fn = source
    _speaks_for_launcher = speaks_for_launcher


def _signal_source() -> Optional[str]:
    source = _signal_source_fn
    if source is None:
        return None
    try:
        return source()
    except Exception:  # noqa: BLE001 - a signal handler never raises for want of a source: the signal is its own
        return None


def _stop_for_a_failure(sig: signal.Signals, frame: object) -> None:
    """A peer failed and the launcher stops this rank: no agreed step, nothing saved, no preemption words. Global rank
    0 hands over where it stood (the launcher's last progress line says it), then the signal does what it did before
    the loop armed this rank (under the launcher, the default action: the rank ends, as a torchrun rank does)."""
    progress.hand_off_stop()
    previous = _run.handlers.get(sig)
    if callable(previous) and previous is not _on_signal:
        previous(int(sig), frame)
        return
    if previous == signal.SIG_IGN:
        return
    try:
        signal.signal(sig, signal.SIG_DFL)
    except (ValueError, OSError):  # not the main thread: the default action cannot be had from here
        return
    os.kill(os.getpid(), int(sig))


def request_stop(signal_name: str = "SIGTERM") -> None:
    """Act as if this rank had just got ``signal_name`` (what the signal handler does; for tests and drills).

    Args:
        signal_name: the signal's name, for the record.
    """
    _on_signal(int(getattr(signal, signal_name)), None)


def attach(store: Any, wake: threading.Event, rank: int, world_size: int, prefix: str) -> None:
    """The group is up: agree through its store (called when the watcher of ``_hang.py`` starts).

    Args:
        store: the watcher's own connection to the group's store.
        wake: set to wake the watcher at once (a signal arrived).
        rank: this rank.
        world_size: ranks in the group.
        prefix: the attempt's key prefix (``flyte-pytorch/<attempt>/``).
    """
    run = _run
    run.store, run.wake, run.rank, run.world_size = store, wake, rank, world_size
    run.prefix = f"{prefix}preempt/"
    if run.request is not None:
        wake.set()


def tick(store: Any) -> Optional[float]:
    """One poll of the watcher: publish this rank's request, learn of a peer's, announce, agree.

    Args:
        store: the watcher's connection to the group's store.

    Returns:
        Optional[float]: seconds to the next poll while a stop is being agreed, else ``None`` (the usual poll).
    """
    run = _run
    key = run.prefix
    if not key:
        return None
    if run.own_pending:
        body = json.dumps(run.request)
        first = store.compare_set(f"{key}request", "", body).decode()
        run.own_pending = False
        _requested()
        if first != body:
            run.request = json.loads(first)
    if run.request is None:
        if not store.check([f"{key}request"]):
            return None
        run.request = json.loads(store.get(f"{key}request").decode())
        _requested()
        if run.rank == 0:
            who = _who(run.request)
            _say(f"{who} got {run.request['signal']}: every rank stops after the next step all of them can reach")
        progress.set_step_boundary_hook(_boundary_hook)
    if run.announced is _UNSET:
        with _lock:
            progress.set_step_boundary_hook(_boundary_hook)  # before the step is read (see the module docstring)
            step = progress.last_step()
            run.announced = -1 if step is None else step
        store.set(f"{key}at/{run.rank}", str(run.announced))
    if run.stop_at is not None:
        return None
    if store.check([f"{key}stop"]):
        _adopt(run, int(store.get(f"{key}stop").decode()))
        return None
    keys = [f"{key}at/{r}" for r in range(run.world_size)]
    late = time.time() > float(run.request["time"]) + _agree_wait_s(float(run.request["grace_s"]))
    if store.check(keys):
        values = [int(v.decode()) for v in store.multi_get(keys)]
        missing: list[int] = []
    elif late:
        present = [k for k in keys if store.check([k])]
        values = [int(store.get(k).decode()) for k in present]
        missing = [r for r, k in enumerate(keys) if k not in present]
    else:
        return POLL_FAST_S
    proposed = max(values) + 1
    agreed = int(store.compare_set(f"{key}stop", "", str(proposed)).decode())
    if missing and agreed == proposed:
        _say(f"ranks {missing} did not say where they stand in time; agreed on step {agreed} without them")
    _adopt(run, agreed)
    return None


def _who(request: dict[str, Any]) -> str:
    if request.get("by") == "launcher":
        return f"the launcher (pod {request.get('pod')})"
    return f"rank {request.get('rank')} (pod {request.get('pod')})"


def _adopt(run: _Run, step: int) -> None:
    with _lock:
        run.stop_at = step
        run.agreed.set()
    if run.announced is not _UNSET and run.announced >= step:
        _say(f"rank {run.rank} was already past the agreed step {step}; it stops at its next boundary")
    elif run.rank == 0:
        _say(f"every rank stops after the first step >= {step} (their boundaries were announced)")


def _deadline() -> float:
    request = _run.request or {}
    return float(request.get("time", time.time())) + float(request.get("grace_s", grace_s()))


def _decide(step: int, run: Optional[_Run] = None) -> bool:
    """At a boundary: whether this rank stops here (it waits for the agreed step when it must, see the module
    docstring)."""
    run = run if run is not None else _run
    if run.record is not None:
        return True
    request = run.request
    if request is None:
        return False
    asked_at, grace = float(request["time"]), float(request["grace_s"])
    while True:
        with _lock:
            if run.stop_at is None and run.store is None:
                run.stop_at = step  # no store to agree through: this rank alone decides, here
                run.agreed.set()
                _requested()
            if run.stop_at is not None:
                return step >= run.stop_at
            announced = run.announced
        if announced is _UNSET:
            # The watcher has not said where this rank stands: it reads the step when it does, so going on is safe.
            if time.time() < asked_at + _agree_wait_s(grace):
                return False
            why = "its watcher never said where it stands (the group's store is gone)"
        elif step <= announced:
            return False
        else:
            left = asked_at + grace - LEAVE_MARGIN_S - time.time()
            if left > 0 and run.agreed.wait(timeout=left):
                continue
            why = f"no step was agreed before the termination grace ({grace:g}s) nearly ran out"
        with _lock:
            if run.stop_at is None:
                _say(f"rank {run.rank} stops after step {step} on its own: {why}")
                run.stop_at = step
                run.agreed.set()


def _conclude(step: int) -> PreemptionRecord:
    """At the agreed step: the loop's callbacks, rank 0's save, the others' wait for it; the record."""
    checkpoint = _checkpoints
    run = _run
    for callback in list(run.callbacks):
        callback(step)
    request = run.request or {}
    saved: Optional[int] = None
    where = ""
    state = checkpoint.registered_state()
    if state is not None:
        where = checkpoint.place().dest
    resume: Any = _UNSET
    if run.rank == 0:
        if state is None:
            saved = None
        elif checkpoint.last_saved_step() == step:
            saved = step
        else:
            saved = _timed_save(state, step)
        resume = saved if saved is not None else checkpoint.last_checkpoint_step()
        _publish_saved(saved, resume)
    else:
        saved, resume = _wait_saved()
    run.where = where
    run.record = PreemptionRecord(
        stopped_at=step,
        checkpoint_step=saved,
        signal=str(request.get("signal", "SIGTERM")),
        rank=int(request.get("rank", run.rank)),
        pod=str(request.get("pod", _pod())),
        requested_at=float(request.get("time", time.time())),
        grace_s=float(request.get("grace_s", grace_s())),
        by="launcher" if request.get("by") == "launcher" else "rank",
        resumes_from=None if resume is _UNSET else resume,
        resume_known=resume is not _UNSET,
    )
    if run.rank == 0:
        if saved is not None:
            _say(f"every rank stopped after step {step}; checkpoint of step {saved} saved in {where}")
        elif state is None:
            _say(
                f"every rank stopped after step {step}; nothing to save: the loop gave no state to save_checkpoint "
                "or load_checkpoint; the next run starts from the beginning"
            )
        else:
            _say(f"every rank stopped after step {step}; {what_comes_next(run.record)}")
    return run.record


def _timed_save(state: Any, step: int) -> Optional[int]:
    """Rank 0's save at the agreed step; a line in the log if it is still running shortly before the grace ends."""
    checkpoint = _checkpoints
    request = _run.request or {}
    grace = float(request.get("grace_s", grace_s()))
    previous = checkpoint.last_checkpoint_step()
    began = time.time()

    def overrun() -> None:
        stands = f"step {previous}" if previous is not None else "none: the next run starts from scratch"
        since = time.time() - float(request.get("time", began))
        _say(
            f"the checkpoint of step {step} is still being written {since:.1f}s "
            f"after {request.get('signal', 'SIGTERM')}; the termination grace is {grace:g}s "
            f"(FLYTE_PYTORCH_TERMINATION_GRACE_S, the pod's terminationGracePeriodSeconds): if the SIGKILL comes "
            f"first, the last complete checkpoint stands ({stands})"
        )

    timer = threading.Timer(max(0.0, _deadline() - LEAVE_MARGIN_S - began), overrun)
    timer.daemon = True
    timer.start()
    try:
        checkpoint.write_checkpoint(state, step)
    except Exception as exc:  # noqa: BLE001 - a store that fails now must not turn a preemption into the user's error
        stands = f"step {previous}" if previous is not None else "none"
        _say(
            f"the checkpoint of step {step} could not be saved ({type(exc).__name__}: {exc}); the last complete "
            f"checkpoint stands ({stands})"
        )
        return None
    finally:
        timer.cancel()
    return step


def _publish_saved(saved: Optional[int], resume: Optional[int]) -> None:
    run = _run
    store = run.store
    if store is None:
        return
    try:
        store.set(f"{run.prefix}saved", json.dumps({"saved": saved, "resumes_from": resume}))
        others = [f"{run.prefix}left/{r}" for r in range(1, run.world_size)]
        until = min(time.time() + 1.0, _deadline())
        while others and time.time() < until and not store.check(others):
            time.sleep(POLL_FAST_S)
    except Exception:  # noqa: BLE001 - the store went away: the others leave at the grace
        pass


def _wait_saved() -> tuple[Optional[int], Any]:
    """Rank 0's word on its save: (the step saved at the stop, the step the next run resumes from); the second is
    ``_UNSET`` when rank 0 never said (its store went away)."""
    run = _run
    store = run.store
    if store is None:
        return None, _UNSET
    until = _deadline() - LEAVE_MARGIN_S
    try:
        while time.time() < until:
            if store.check([f"{run.prefix}saved"]):
                said = json.loads(store.get(f"{run.prefix}saved").decode())
                store.set(f"{run.prefix}left/{run.rank}", "1")
                saved, resume = said.get("saved"), said.get("resumes_from")
                return (int(saved) if saved is not None else None), (int(resume) if resume is not None else None)
            time.sleep(POLL_FAST_S)
    except Exception:  # noqa: BLE001 - the store is gone with rank 0, which leaves only after it saved
        return None, _UNSET
    return None, _UNSET


def boundary(step: int) -> None:
    """A step boundary (``report_progress``, ``save_checkpoint``): stop here when the ranks agreed on this step.

    Args:
        step: the steps done.

    Raises:
        Preempted: this rank stops here.
    """
    run = _run
    if run.request is None and run.record is None:
        return
    if not _decide(step):
        return
    record = run.record if run.record is not None else _conclude(step)
    raise Preempted(record, run.where)


def _boundary_hook(step: Optional[int]) -> None:
    if step is None:
        return
    boundary(step)


def stopping() -> bool:
    """Whether this rank has stopped for a preemption (its record is made)."""
    return _run.record is not None


def outcome() -> Optional[Preempted]:
    """After the function returned: the stop, when it returned because :func:`preemption_requested` said so.

    Returns:
        Optional[Preempted]: the exception to end the rank with, or ``None`` (a normal end).
    """
    run = _run
    return Preempted(run.record, run.where) if run.record is not None else None


def preemption_requested(step: Optional[int] = None) -> bool:
    """Whether the ranks stop here for a preemption; call it once per step on every rank, for a loop that wants to
    decide what happens.

    ``True`` comes on every rank at the same step (the agreed one). By then the loop's ``on_preemption`` callbacks
    have run and global rank 0 has saved the state given to ``save_checkpoint``/``load_checkpoint`` (if any) at this
    step. The loop then finishes up and returns (the rank ends as preempted, and its return value is dropped), or
    calls ``report_progress``/``save_checkpoint``, which stop it.

    Args:
        step: the steps done so far; default: the step of this rank's last ``report_progress``/``save_checkpoint``.

    Returns:
        bool: ``True`` when the ranks stop after this step.

    Raises:
        TypeError: no step is given and none was reported yet, or ``step`` is not a whole number.
        ValueError: ``step`` is negative.
    """
    arm()
    if step is None:
        known = progress.last_step()
        if known is None:
            raise TypeError(
                "preemption_requested() needs the steps done so far: pass step=, or call report_progress(step) first"
            )
        value = known
    else:
        if isinstance(step, bool) or not hasattr(step, "__index__"):
            raise TypeError(f"preemption_requested(step={step!r}): step must be a whole number")
        value = int(step.__index__())
        if value < 0:
            raise ValueError(f"preemption_requested(step={value}): step must be >= 0")
        progress.note_step(value)
    run = _run
    if run.request is None and run.record is None:
        return False
    if not _decide(value):
        return False
    if run.record is None:
        _conclude(value)
    return True


def on_preemption(callback: Callable[[int], None]) -> None:
    """Have ``callback(step)`` run on every rank at the agreed step, before global rank 0 saves the checkpoint.

    For what the checkpoint's state does not hold: flushing a logger, saving a file of one's own. It runs in the
    training loop's thread. Registering it arms this rank (see the module docstring).

    Args:
        callback: called with the agreed step; what it raises fails the rank as the loop's own error would.

    Raises:
        TypeError: ``callback`` is not callable.
    """
    if not callable(callback):
        raise TypeError(f"on_preemption({callback!r}): give a function of the step")
    _run.callbacks.append(callback)
    arm()


def error_message(record: PreemptionRecord, where: str = "", *, local: bool) -> str:
    """The task's message for a preempted run.

    Args:
        record: the record.
        where: where the checkpoints are.
        local: a local run (it says how to resume).

    Returns:
        str: the message (starts with ``preempted: ``).
    """
    text = format_message(record)
    if local and record.checkpoint_step is not None:
        text += f"; the next run of this task with the same inputs resumes from step {record.checkpoint_step}"
        if where:
            text += f" ({where})"
    elif local and record.resumes_from is not None and where:
        text += f" ({where})"
    elif not local:
        text += "; Flyte retries it as a system error"
    assert text.startswith(ERROR_PREFIX)
    return text
