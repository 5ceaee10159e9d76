"""What runs inside each rank process that the launcher starts.

torch's elastic agent calls :func:`rank_entrypoint` with the launcher's :class:`~._control.RankSpec` in each rank
process. The entrypoint:

1. dies with the launcher (:func:`die_with_parent`), so a killed launcher never leaves ranks behind;
2. sets the ``PET_*`` variables the Kubeflow operator sets on a cluster, and an even share of the cores;
3. fills the task's opt-in ``collective_timeout`` into ``torch.distributed.init_process_group`` calls without
   ``timeout=`` (none set: torch's own default stays; see :func:`install_collective_timeout`; the in-process and
   single-process pod modes of the launcher use it too);
4. rebuilds the task process's execution context through the task's front-end (``frontend.py``);
5. runs the function and reports through the control directory (``_control.py``): rank 0's return value and Decks,
   or the exception with a high-resolution timestamp, so the launcher can name the earliest failing rank.

torch is imported inside functions only; this module imports without it.
"""

from __future__ import annotations

import datetime
import faulthandler
import functools
import inspect
import json
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import cloudpickle

from pytorch_contract.preemption import PREEMPTED_EXIT_CODE
from pytorch_core import _checkpoints, preemption, progress
from pytorch_core._codefiles import restore_code_files
from pytorch_core._console import RANK_PREFIX_ENV, RankConsole, prefix_enabled
from pytorch_core._control import STACK_SIGNAL, ControlDir, RankError, RankResult, RankSpec, dumps, pid_alive
from pytorch_core._failure import HangError, is_collateral
from pytorch_core._forkserver import set_process_name
from pytorch_core._hang import (
    mark_done,
    mark_failed,
    name_culprit,
    on_self_exit,
    pending_error,
    set_timeout_note,
    start_watch,
)
from pytorch_core._nested import LAUNCHER_PID_ENV, raise_if_refused_at_preload
from pytorch_core._plan import node_view
from pytorch_core._preflight import run_preflight
from pytorch_core.frontend import current, enter
from pytorch_core.preemption import Preempted


def call_function(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    """Call the task's function; an ``async def`` function's coroutine is run to its end, so the rank returns the
    value as for a plain function (Flyte 2 tasks are often ``async def``).

    The coroutine gets an event loop of its own: ``asyncio.run`` in a rank process; a thread of its own where this
    thread already runs a loop (the in-process and single-rank pod modes run inside Flyte 2's task loop).

    Args:
        fn: the user's function.
        kwargs: its inputs.

    Returns:
        Any: the function's value (the coroutine's result for an ``async def`` function).
    """
    value = fn(**kwargs)
    if not inspect.iscoroutine(value):
        return value
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(value)
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="pytorch-task") as pool:
        with preemption.signals_for_a_thread():  # only this thread may handle signals for the function's loop
            return pool.submit(asyncio.run, value).result()


#: Environment variable: collective timeout in seconds used for ``init_process_group`` calls without ``timeout=``.
#: It wins over ``collective_timeout`` in the task config (it is the knob for one run, e.g. a local debugging session).
COLLECTIVE_TIMEOUT_ENV = "FLYTE_PYTORCH_COLLECTIVE_TIMEOUT"

#: How often a rank checks that its launcher is alive (see :func:`die_with_parent`).
PARENT_POLL_S = 0.5
#: How long a rank whose error is collateral lingers before exiting, so the agent sees the real cause exit first.
COLLATERAL_GRACE_S = 1.0


def torch_default_timeout(backend: Any = None) -> datetime.timedelta:
    """The timeout torch's ``init_process_group`` uses for ``backend`` when given ``timeout=None``, read from torch.

    Args:
        backend: the ``backend`` argument of ``init_process_group``; ``None`` for the longest default of any backend
            (what a wait that must outlast the user's own ``init_process_group`` needs).

    Returns:
        datetime.timedelta: ``torch.distributed.constants.default_pg_timeout`` (30 minutes in torch 2.x), or
        ``default_pg_nccl_timeout`` for NCCL where torch has it.
    """
    from torch.distributed import constants

    general: datetime.timedelta = constants.default_pg_timeout
    nccl = getattr(constants, "default_pg_nccl_timeout", None)
    nccl = nccl if isinstance(nccl, datetime.timedelta) else general
    if backend is None:
        return max(general, nccl)
    return nccl if str(backend).strip().lower() == "nccl" else general


def default_collective_timeout(configured_s: Optional[float]) -> Optional[datetime.timedelta]:
    """The timeout a rank's ``init_process_group`` gets when the user passes none (or ``timeout=None``).

    Args:
        configured_s: ``collective_timeout`` from the task config in seconds, or ``None``.

    Returns:
        Optional[datetime.timedelta]: ``$FLYTE_PYTORCH_COLLECTIVE_TIMEOUT`` if set, else ``configured_s``; ``None``
        (torch's own default for the backend: nothing is filled in) when neither is set.

    Raises:
        ValueError: ``$FLYTE_PYTORCH_COLLECTIVE_TIMEOUT`` is not a positive number of seconds.
    """
    raw = os.environ.get(COLLECTIVE_TIMEOUT_ENV)
    if raw:
        try:
            seconds = float(raw)
        except ValueError:
            seconds = -1.0
        if seconds <= 0:
            raise ValueError(f"{COLLECTIVE_TIMEOUT_ENV}={raw!r} is not valid; use a positive number of seconds")
        return datetime.timedelta(seconds=seconds)
    if configured_s is not None:
        return datetime.timedelta(seconds=configured_s)
    return None


def preflight_timeout_s(configured_s: Optional[float]) -> float:
    """How long the preflight waits for every rank to join: as long as the task's own ``init_process_group`` would
    wait without ``timeout=``: the opt-in collective timeout when set, else torch's longest default. A join that
    takes longer is a warning, never a failure (``_preflight.py``), so a task that passes a longer ``timeout=`` of its
    own still gets it.

    Args:
        configured_s: ``collective_timeout`` from the task config in seconds, or ``None``.

    Returns:
        float: seconds.
    """
    configured = default_collective_timeout(configured_s)
    return (configured if configured is not None else torch_default_timeout(None)).total_seconds()


#: The one line a rank raises for ``backend="nccl"`` on a machine without CUDA (torch's own error is a page long).
NCCL_WITHOUT_CUDA = (
    "init_process_group(backend={backend!r}) needs CUDA and NCCL, and this machine has {missing}: "
    "use backend='gloo' to run locally, or backend=None, which picks nccl where CUDA is available and gloo elsewhere"
)


def refuse_nccl_without_cuda(backend: Any) -> None:
    """Refuse a plain NCCL backend where it cannot work, with one line saying what to use instead.

    Only a backend that is NCCL alone is checked (``"nccl"``, ``Backend.NCCL``); a device map such as
    ``"cpu:gloo,cuda:nccl"`` is left to torch. CUDA is asked about only when the backend is NCCL.

    Args:
        backend: the ``backend`` argument of ``init_process_group``.

    Raises:
        ValueError: the backend is NCCL and this machine has no CUDA device, or torch was built without NCCL.
    """
    if backend is None or str(backend).strip().lower() != "nccl":
        return
    import torch
    import torch.distributed as dist

    if not torch.cuda.is_available():
        missing = "no CUDA device"
    elif not dist.is_nccl_available():
        missing = "a torch built without NCCL"
    else:
        return
    raise ValueError(NCCL_WITHOUT_CUDA.format(backend=str(backend), missing=missing))


def install_collective_timeout(
    configured_s: Optional[float],
    *,
    retry_hangs: bool = True,
    progress_timeout_s: Optional[float] = None,
    control: Optional[ControlDir] = None,
) -> Callable[[], None]:
    """Make ``torch.distributed.init_process_group`` use the opt-in collective timeout, and watch for hangs.

    Calls that pass a ``timeout=`` are unchanged; without one (or with ``timeout=None``) torch's own default for the
    backend stays unless ``collective_timeout`` (or ``$FLYTE_PYTORCH_COLLECTIVE_TIMEOUT``) is set. Both
    ``torch.distributed.init_process_group`` and ``torch.distributed.distributed_c10d.init_process_group`` are
    replaced, so ``import torch.distributed as dist`` and ``from torch.distributed import init_process_group`` (done
    after this call) both see it. Once the
    group is up (more than one rank), the rank watches the group's store for peers that gave up (``_hang.py``).

    Args:
        configured_s: ``collective_timeout`` from the task config in seconds, or ``None`` for the backend default.
        retry_hangs: a hang is raised as a recoverable error (the config's ``retry_hangs``).
        progress_timeout_s: the config's ``progress_timeout`` in seconds, or ``None``.
        control: the launch's control directory (a local rank): while ``init_process_group`` waits, a peer whose
            function returned without joining fails this rank within seconds (:class:`_JoinWatch`).

    Returns:
        Callable[[], None]: undoes the replacement (used by the in-process mode, which runs in the task process).
    """
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    original: Callable[..., Any] = c10d.init_process_group
    if getattr(original, "_flyte_collective_timeout", False):
        original = getattr(original, "__wrapped__")  # noqa: B009 - set by functools.wraps; unknown to the stubs
    signature = inspect.signature(original)

    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind_partial(*args, **kwargs)
        refuse_nccl_without_cuda(bound.arguments.get("backend"))
        if bound.arguments.get("timeout") is None:
            # Only an opt-in shorter timeout is filled in; otherwise torch picks its own default for the backend.
            chosen = default_collective_timeout(configured_s)
            if chosen is not None:
                bound.arguments["timeout"] = chosen
                set_timeout_note(chosen, torch_default_timeout(bound.arguments.get("backend")))
        join_watch = _JoinWatch(control) if control is not None else None
        try:
            value = original(*bound.args, **bound.kwargs)
        finally:
            if join_watch is not None:
                join_watch.stop()
        if dist.get_world_size() > 1:
            start_watch(recoverable=retry_hangs, progress_timeout_s=progress_timeout_s)
        return value

    init_process_group._flyte_collective_timeout = True  # type: ignore[attr-defined]
    previous = (dist.init_process_group, c10d.init_process_group)
    dist.init_process_group = init_process_group
    c10d.init_process_group = init_process_group

    def restore() -> None:
        dist.init_process_group, c10d.init_process_group = previous

    return restore


#: How long after a peer's function returned a rank may still be inside ``init_process_group`` before that peer
#: counts as never joining: a peer that joined lets the others' ``init_process_group`` return within milliseconds.
JOIN_GRACE_S = 5.0


class _JoinWatch:
    """While this rank waits in ``init_process_group``: a peer whose function returned :data:`JOIN_GRACE_S` ago
    never joined and never will, so this rank reports it (it names that rank) and exits, instead of waiting out the
    timeout (torch's default is 30 minutes). torch's agent then stops the others."""

    def __init__(self, control: ControlDir) -> None:
        self.control = control
        self.rank = int(os.environ.get("RANK", "0"))
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.stopped = threading.Event()
        threading.Thread(target=self._run, name="pytorch-join-watch", daemon=True).start()

    def stop(self) -> None:
        self.stopped.set()

    def _run(self) -> None:
        while not self.stopped.wait(PARENT_POLL_S):
            left = self.control.returned_before(time.time() - JOIN_GRACE_S)
            left.discard(self.rank)
            if not left or self.stopped.is_set():
                continue
            first = min(left)
            error = HangError(
                f"rank {first} (of {self.world_size}) did not arrive: its function returned without calling "
                f"init_process_group, while rank {self.rank} waited in init_process_group",
                rank=first,
                world_size=self.world_size,
            )
            report_error(self.control, self.rank, error)
            sys.stderr.write(f"{error}\n")
            sys.stderr.flush()
            os._exit(1)


def die_with_parent(parent_pid: Optional[int]) -> None:
    """End this rank as soon as the launching process is gone, however it died (Linux; best effort elsewhere).

    Two guards, because the launcher is not always our direct parent: with ``start_method="forkserver"`` (the
    default) the rank is a child of multiprocessing's fork server, which itself exits when the launcher dies.
    ``PR_SET_PDEATHSIG`` kills us when the direct parent (the agent or the fork server) dies; a daemon thread
    polls the launcher's pid and covers the gap between the launcher's death and the server's.

    Args:
        parent_pid: the launcher's pid; ``None`` for the first guard only.
    """
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            pr_set_pdeathsig = 1
            libc.prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if parent_pid is None:
        return
    if not pid_alive(parent_pid):
        # The launcher died between starting us and now: nobody will collect our result.
        os._exit(1)

    def watch() -> None:
        while pid_alive(parent_pid):
            time.sleep(PARENT_POLL_S)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="pytorch-rank-parent-watch", daemon=True).start()


def _set_rank_env(spec: RankSpec, rank: int) -> None:
    os.environ.update(spec.env)
    # A launch attempted in this rank (e.g. by the task's module, imported below) is refused (``_nested.py``).
    os.environ[LAUNCHER_PID_ENV] = str(spec.parent_pid if spec.parent_pid is not None else os.getppid())
    elastic = "PET_RDZV_BACKEND" in spec.env
    if elastic:
        # The operator sets no PET_MASTER_* on an elastic job; locally the rendezvous store is the agent's.
        if "PET_RDZV_ENDPOINT" not in spec.env:
            os.environ["PET_RDZV_ENDPOINT"] = f"{os.environ.get('MASTER_ADDR', '')}:{os.environ.get('MASTER_PORT', '')}"
    else:
        # torch chose the port of the store the ranks meet at; publish it the way the operator does.
        os.environ.setdefault("PET_MASTER_ADDR", os.environ.get("MASTER_ADDR", ""))
        os.environ.setdefault("PET_MASTER_PORT", os.environ.get("MASTER_PORT", ""))
    if spec.virtual_nodes:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        view = node_view(rank, world, spec.nproc_per_node, elastic=elastic)
        os.environ.update(view)
        node = int(view["GROUP_RANK"])
        if node < len(spec.node_gpus):
            os.environ["CUDA_VISIBLE_DEVICES"] = spec.node_gpus[node]
    # init_process_group ends with a barrier: without it (torch's default since 2.3) a rank whose function returns
    # right after joining can close its sockets while a peer is still connecting its gloo mesh, and that peer fails
    # with "Connection closed by peer" (seen with the decorator reference's init-then-destroy snippet on a loaded
    # machine). A value the user set wins.
    os.environ.setdefault("TORCH_DIST_INIT_BARRIER", "1")
    if spec.threads is not None and "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = str(spec.threads)
    threads = os.environ.get("OMP_NUM_THREADS")
    if threads and threads.isdigit() and int(threads) > 0:
        import torch

        torch.set_num_threads(int(threads))


def rank_entrypoint(spec: RankSpec) -> None:
    """Run the user function as one rank; called by torch's elastic agent in each rank process.

    Args:
        spec: what to run and how (see :class:`~pytorch_core._control.RankSpec`).

    Raises:
        BaseException: whatever the user function raised, after it was written to ``rank-<n>.error``; torch's
            agent then sees the rank fail and stops the others.
    """
    die_with_parent(spec.parent_pid)
    enter(spec.frontend)  # this process is the rank's: its front-end classifies errors until it exits
    # flytekit's context manager installs its own SIGINT handler at import; a rank must stop on Ctrl-C (or the
    # agent forwarding it) at once, as a plain Python program does, or the agent waits out its shutdown timeout.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # torchrun's ranks are new interpreters: SIGTERM, SIGHUP and SIGQUIT at their default actions. A rank forked from
    # the launcher (start_method="fork") would otherwise carry the agent's handler, and a SIGTERM would raise torch's
    # SignalException in the task's loop instead of ending the rank (the fork server resets SIGTERM itself:
    # ``_forkserver.protect_server``).
    for name in ("SIGTERM", "SIGHUP", "SIGQUIT"):
        sig = getattr(signal, name, None)
        if sig is not None:
            signal.signal(sig, signal.SIG_DFL)
    rank = int(os.environ.get("RANK", "0"))
    # A rank forked from a forked fork server would otherwise carry the server's name in ``top`` and ``ps``.
    set_process_name(f"pt-rank-{rank}")
    control = ControlDir(spec.control_dir)
    _dump_stacks_on_request(control, rank)  # before the pid is published: the signal must never find us unprepared
    entered = time.time()
    agent_local_rank = os.environ.get("LOCAL_RANK", "0")  # the agent's, before a local run's node view replaces it
    control.mark_started(rank, os.getpid())
    _reset_start_method()
    with RankConsole(rank, enabled=prefix_enabled(os.environ.get(RANK_PREFIX_ENV))) as console:

        def report_before_exit(error: BaseException) -> None:
            report_error(control, rank, error)
            console.drain()

        on_self_exit(report_before_exit)
        try:
            _set_rank_env(spec, rank)
            install_collective_timeout(
                spec.collective_timeout_s,
                retry_hangs=spec.retry_hangs,
                progress_timeout_s=spec.progress_timeout_s,
                control=control,
            )
            if spec.preflight:
                # Before the task's module is unpickled: its import is the task's code too.
                run_preflight(
                    shm_size=spec.shm_size,
                    join_timeout_s=preflight_timeout_s(spec.collective_timeout_s),
                    local=spec.preflight_local,
                )
            for root in reversed(spec.import_roots):
                if root not in sys.path:
                    sys.path.insert(0, root)
            fn = cloudpickle.loads(spec.fn_bytes)
            restore_code_files(fn, spec.fn_files)
            raise_if_refused_at_preload(getattr(fn, "__module__", None))
            kwargs = cloudpickle.loads(spec.kwargs_bytes)
            base = Path(spec.context.working_dir) if spec.context.working_dir else Path(spec.control_dir)
            with spec.frontend.rank_scope(spec.context, base / f"rank-{rank}") as scope:
                _start_progress(control, rank, entered, speaks_for_launcher=agent_local_rank in ("0", ""))
                value = call_function(fn, kwargs)
                stopped = preemption.outcome()  # it returned because preemption_requested() said so
                if stopped is not None:
                    raise stopped
                progress.finish_reporting()
                mark_done()
                if rank == 0:
                    decks, metadata = scope.result_extras(value)
                    control.write_result(RankResult(value=value, decks=decks, metadata=metadata))
        except Preempted as stop:
            # Stopped at the agreed step of a preemption: not a failure of this rank; the launcher reads the record.
            progress.stop_reporting()
            control.write_preempted(rank, {**json.loads(stop.record.to_json()), "where": stop.where})
            raise SystemExit(PREEMPTED_EXIT_CODE) from None
        except BaseException as raised:
            progress.stop_reporting()
            exc = pending_error(raised)
            # A peer waiting for this rank names it with this type, not as a hang (a HangError naming this rank: it
            # stopped itself for want of progress).
            if isinstance(exc, HangError) or not is_collateral(exc):
                mark_failed(exc)
            if is_collateral(exc):
                # Ask the group's store which rank did not arrive (it may run in another pod: _hang.py).
                exc = name_culprit(exc) or exc
            report_error(control, rank, exc)
            if is_collateral(exc):
                # A lost peer or a collective timeout is a consequence, not a cause. Ask the ranks still running where
                # they are (the launcher names the one that did not arrive), and linger briefly so that the agent,
                # which records only the first rank it sees exit, sees the real cause first (a rank killed by a signal
                # leaves no error file; its exit code is the only trace of it). The error file is already written.
                control.request_stacks(rank)
                time.sleep(COLLATERAL_GRACE_S)
            if exc is not raised:
                raise exc from raised
            raise
        control.mark_done(rank)


def _start_progress(control: ControlDir, rank: int, entered: float, *, speaks_for_launcher: bool = True) -> None:
    """``report_progress`` in this rank: every rank notes the time; global rank 0 also hands snapshots to the
    launcher through ``progress.json`` (``progress.py``); a snapshot that cannot be written is skipped. The step
    boundary arms the rank for a preemption (``preemption.py``), and the checkpoint API starts afresh. A signal is
    told apart (``preemption.set_signal_source``) by what the control directory holds since ``entered`` (when this
    rank's entrypoint began); the agent's first rank (``speaks_for_launcher``) is the one that says when the launcher
    got a signal."""
    progress.start_rank()
    _checkpoints.reset()
    preemption.start()
    preemption.on_request(lambda: control.mark_stopping(rank))

    def source() -> Optional[str]:
        # A peer of this round that failed first: torch's agent is stopping the ranks left (what torchrun's agent does
        # too), which is no preemption. Else the launcher's own signal, passed on by its agent; else this rank's.
        if control.failed_peers(rank, entered):
            return preemption.FAILURE
        if control.launcher_signal() is not None:
            return preemption.LAUNCHER
        return None

    preemption.set_signal_source(source, speaks_for_launcher=speaks_for_launcher)
    if rank != 0:
        return

    def send(snapshot: dict[str, Any]) -> None:
        try:
            control.write_progress(snapshot)
        except OSError:  # a full or vanished disk: the launcher shows nothing new; training goes on
            pass

    progress.start_reporting(send)


def _reset_start_method() -> None:
    """Give the rank the multiprocessing start method a fresh interpreter gets on this Python, as torchrun's ranks
    (fresh interpreters) have: ``fork`` on Linux before Python 3.14. A rank started by multiprocessing's fork server
    inherits ``forkserver`` from it, and its DataLoader workers would then need a picklable dataset (no lambdas) and
    a fork server interpreter of their own per rank. A method the task sets itself is its own business."""
    import multiprocessing

    try:
        multiprocessing.set_start_method(None, force=True)
    except (RuntimeError, ValueError):  # pragma: no cover - a context that refuses a reset: leave it
        pass


def _dump_stacks_on_request(control: ControlDir, rank: int) -> None:
    """Have ``faulthandler`` write this rank's Python stacks to ``rank-<n>.stack`` on ``STACK_SIGNAL``.

    faulthandler writes from its C signal handler, so a rank blocked in a C call (a gloo wait, ``time.sleep``, a
    data loader) still reports where it is. The file stays open for the life of the rank (faulthandler needs it).
    """
    try:
        stack_file = open(control.stack_file(rank), "w")  # noqa: SIM115 - kept open on purpose
        faulthandler.register(STACK_SIGNAL, file=stack_file, all_threads=True)
    except (OSError, ValueError, RuntimeError, AttributeError):  # no such signal here, or no file: best effort
        pass


def report_error(control: ControlDir, rank: int, exc: BaseException) -> None:
    """Write ``rank-<n>.error`` for ``exc`` (best effort: never raises).

    Args:
        control: the control directory.
        rank: global rank of this process.
        exc: the exception the user function raised.
    """
    try:
        exc_bytes: Optional[bytes]
        try:
            exc_bytes = dumps(exc)
            pickle.loads(exc_bytes)  # the launcher must be able to rebuild it; else report it as text only
        except Exception:
            exc_bytes = None
        control.write_error(
            RankError(
                rank=rank,
                timestamp=time.time(),
                type_name=f"{type(exc).__module__}.{type(exc).__qualname__}",
                message=str(exc),
                traceback_text="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
                recoverable=current().is_recoverable(exc),
                collateral=is_collateral(exc),
                exc_bytes=exc_bytes,
                culprit=exc.rank if isinstance(exc, HangError) else None,
            )
        )
    except Exception:  # noqa: BLE001 - reporting must never hide the user's exception
        traceback.print_exc()
