"""What runs inside each rank process that the launcher starts (private to :mod:`flytekitplugins_pytorch.launcher`).

The parent (the Flyte task process) takes a :class:`ContextSnapshot` of its Flyte execution context, pickles the user
function with cloudpickle and hands both to :func:`rank_entrypoint` through torch's elastic agent. In the child the
entrypoint:

1. dies with its parent (``PR_SET_PDEATHSIG`` on Linux), so a killed launcher never leaves ranks behind;
2. sets the ``PET_*`` variables the Kubeflow operator sets on a cluster, and an even share of the cores;
3. fills a default ``timeout=`` into ``torch.distributed.init_process_group`` (see :func:`install_collective_timeout`);
4. rebuilds the parent's ``flytekit.current_context()`` (checkpoint, working directory, execution id, decks);
5. runs the function and writes its outcome to a control directory: rank 0's return value and Decks, or the
   exception with a high-resolution timestamp, so the parent can name the earliest failing rank.

torch is imported inside functions only; this module imports without it.
"""

from __future__ import annotations

import datetime
import functools
import inspect
import os
import pickle
import re
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import cloudpickle

#: Environment variable: collective timeout in seconds used for ``init_process_group`` calls without ``timeout=``.
#: It wins over ``collective_timeout`` in the task config (it is the knob for one run, e.g. a local debugging session).
COLLECTIVE_TIMEOUT_ENV = "FLYTE_PYTORCH_COLLECTIVE_TIMEOUT"

#: Default collective timeout for gloo (CPU). CPU collectives on small tensors finish in milliseconds; a rank that is
#: 5 minutes late is hung or dead, and torch's own 30-minute default leaves the other ranks idle for half an hour.
DEFAULT_GLOO_TIMEOUT_S = 300.0

#: Default collective timeout for NCCL. Twice gloo's: the first collective also creates the NCCL communicators, and
#: rank 0 commonly writes a checkpoint or evaluates while the other ranks wait at the next barrier.
DEFAULT_NCCL_TIMEOUT_S = 600.0

RESULT_FILE = "rank-{rank}.result"
ERROR_FILE = "rank-{rank}.error"
DONE_FILE = "rank-{rank}.done"
START_FILE = "rank-{rank}.started"

# Error text from torch.distributed / gloo / NCCL that a rank raises *because another rank failed*. Such errors are
# collateral: the root cause is the peer that died or raised first.
_COLLATERAL_PATTERNS = re.compile(
    r"connection closed by peer|connection reset|broken pipe|timed out|timeout|nccl|gloo|"
    r"socket|Connection refused|ProcessGroup|store",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class ContextSnapshot:
    """The parts of the parent's Flyte execution context that a rank process rebuilds.

    Attributes:
        execution_id: ``flytekit.current_context().execution_id`` of the parent.
        task_id: the parent's task id, if any.
        execution_date: the parent's execution date.
        raw_output_prefix: where offloaded data (files, directories) is written.
        output_metadata_prefix: where primitive outputs are written, if set.
        checkpoint_dest: where this attempt's checkpoint is written; ``None`` without checkpointing.
        checkpoint_src: the previous attempt's checkpoint; ``None`` when there is none.
        enable_deck: whether Decks are rendered for this task.
        mode: ``ExecutionState.Mode`` value of the parent (``None`` when unknown).
        working_dir: the parent's working directory; each rank works in ``<working_dir>/rank-<n>``.
    """

    execution_id: Any = None
    task_id: Any = None
    execution_date: Any = None
    raw_output_prefix: Optional[str] = None
    output_metadata_prefix: Optional[str] = None
    checkpoint_dest: Optional[str] = None
    checkpoint_src: Optional[str] = None
    enable_deck: bool = False
    mode: Optional[int] = None
    working_dir: Optional[str] = None


@dataclass(frozen=True)
class RankSpec:
    """Everything one rank process needs, pickled by torch's agent into the child.

    Attributes:
        fn_bytes: the user function, cloudpickled.
        kwargs_bytes: the task inputs (keyword arguments), cloudpickled.
        control_dir: directory for the per-rank result / error / marker files.
        context: the parent's Flyte context (see :class:`ContextSnapshot`).
        threads: intra-op threads for this rank (``OMP_NUM_THREADS`` unless the user set it).
        collective_timeout_s: timeout filled into ``init_process_group``; ``None`` = per-backend default.
        env: extra variables every rank sees (the ``PET_*`` set).
        nproc_per_node: processes per (virtual) node; used for ``PET_NODE_RANK`` when ``virtual_nodes``.
        virtual_nodes: locally, several declared nodes share one agent: derive ``PET_NODE_RANK`` from ``RANK``.
        parent_pid: pid of the launching process, for the die-with-parent check.
        import_roots: directories the task's module is imported from, put on ``sys.path`` before the function is
            unpickled (``pyflyte run dir/wf.py`` adds the package root to ``sys.path`` only while it imports).
    """

    fn_bytes: bytes
    kwargs_bytes: bytes
    control_dir: str
    context: ContextSnapshot = field(default_factory=ContextSnapshot)
    threads: Optional[int] = None
    collective_timeout_s: Optional[float] = None
    env: dict[str, str] = field(default_factory=dict)
    nproc_per_node: int = 1
    virtual_nodes: bool = False
    parent_pid: Optional[int] = None
    import_roots: tuple[str, ...] = ()


@dataclass
class RankError:
    """What a failing rank reports to the parent (written to ``rank-<n>.error``).

    Attributes:
        rank: global rank of the failing process.
        timestamp: ``time.time()`` when the exception reached the entrypoint.
        type_name: ``module.QualName`` of the exception type.
        message: ``str(exception)``.
        traceback_text: the formatted traceback, as the rank printed it.
        recoverable: the exception is a ``FlyteRecoverableException``.
        collateral: the exception looks like a consequence of another rank's failure (communication error/timeout).
        exc_bytes: the exception cloudpickled, or ``None`` if it could not be pickled.
    """

    rank: int
    timestamp: float
    type_name: str
    message: str
    traceback_text: str
    recoverable: bool
    collateral: bool
    exc_bytes: Optional[bytes] = None


def snapshot_context() -> ContextSnapshot:
    """Capture the current Flyte execution context for the rank processes.

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


def default_collective_timeout(backend: Any, configured_s: Optional[float]) -> datetime.timedelta:
    """The timeout a rank uses for ``init_process_group`` when the user passes none.

    Args:
        backend: the ``backend`` argument of ``init_process_group`` (``None``, ``"gloo"``, ``"nccl"``,
            ``"cpu:gloo,cuda:nccl"``, a ``Backend``).
        configured_s: ``collective_timeout`` from the task config in seconds, or ``None``.

    Returns:
        datetime.timedelta: ``$FLYTE_PYTORCH_COLLECTIVE_TIMEOUT`` if set, else ``configured_s``, else 600 s when the
        backend is (or, for ``None`` with CUDA present, defaults to) NCCL and 300 s otherwise.

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
    name = str(backend).lower() if backend is not None else ""
    if not name:
        import torch

        name = "nccl" if torch.cuda.is_available() else "gloo"
    return datetime.timedelta(seconds=DEFAULT_NCCL_TIMEOUT_S if "nccl" in name else DEFAULT_GLOO_TIMEOUT_S)


def install_collective_timeout(configured_s: Optional[float]) -> Callable[[], None]:
    """Make ``torch.distributed.init_process_group`` default to our collective timeout.

    Calls that pass ``timeout=`` are unchanged. Both ``torch.distributed.init_process_group`` and
    ``torch.distributed.distributed_c10d.init_process_group`` are replaced, so ``import torch.distributed as dist``
    and ``from torch.distributed import init_process_group`` (done after this call) both see the default.

    Args:
        configured_s: ``collective_timeout`` from the task config in seconds, or ``None`` for the backend default.

    Returns:
        Callable[[], None]: undoes the replacement (used by the in-process mode, which runs in the parent).
    """
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    original = c10d.init_process_group
    if getattr(original, "_flyte_collective_timeout", False):
        original = original.__wrapped__
    signature = inspect.signature(original)

    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind_partial(*args, **kwargs)
        if bound.arguments.get("timeout") is None:
            bound.arguments["timeout"] = default_collective_timeout(bound.arguments.get("backend"), configured_s)
        return original(*bound.args, **bound.kwargs)

    init_process_group._flyte_collective_timeout = True  # type: ignore[attr-defined]
    previous = (dist.init_process_group, c10d.init_process_group)
    dist.init_process_group = init_process_group
    c10d.init_process_group = init_process_group

    def restore() -> None:
        dist.init_process_group, c10d.init_process_group = previous

    return restore


def _die_with_parent(parent_pid: Optional[int]) -> None:
    """End this rank as soon as the launching process is gone, however it died (Linux; best effort elsewhere).

    Two guards, because the launcher is not always our direct parent: with ``start_method="forkserver"`` (the
    default) the rank is a child of multiprocessing's fork server, which itself exits when the launcher dies.
    ``PR_SET_PDEATHSIG`` kills us when the direct parent (the agent or the fork server) dies; a daemon thread
    polls the launcher's pid and covers the gap between the launcher's death and the server's.
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
    if not _pid_alive(parent_pid):
        # The launcher died between starting us and now: nobody will collect our result.
        os._exit(1)
    import threading

    def watch() -> None:
        while _pid_alive(parent_pid):
            time.sleep(PARENT_POLL_S)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="pytorch-rank-parent-watch", daemon=True).start()


PARENT_POLL_S = 0.5
COLLATERAL_GRACE_S = 1.0


def _pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (a dead launcher not yet reaped counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _is_collateral(exc: BaseException) -> bool:
    """True when ``exc`` looks like a consequence of another rank's failure (lost peer, timeout in a collective)."""
    try:
        import torch.distributed as dist

        if isinstance(exc, getattr(dist, "DistError", ())):
            return True
    except ImportError:  # pragma: no cover - torch is always there in a rank process
        pass
    return isinstance(exc, (RuntimeError, ConnectionError, TimeoutError)) and bool(
        _COLLATERAL_PATTERNS.search(str(exc))
    )


def _rank_context(spec: RankSpec, rank: int) -> tuple[Any, Any]:
    """Build the FlyteContext and ExecutionParameters a rank runs under (see module docstring)."""
    import logging as _logging

    from flytekit.core.checkpointer import SyncCheckpoint
    from flytekit.core.context_manager import (
        ExecutionParameters,
        ExecutionState,
        FlyteContextManager,
        OutputMetadataTracker,
    )
    from flytekit.core.data_persistence import FileAccessProvider

    snap = spec.context
    base = Path(snap.working_dir) if snap.working_dir else Path(spec.control_dir)
    workdir = base / f"rank-{rank}"
    workdir.mkdir(parents=True, exist_ok=True)
    checkpoint = None
    if snap.checkpoint_dest:
        checkpoint = SyncCheckpoint(checkpoint_dest=snap.checkpoint_dest, checkpoint_src=snap.checkpoint_src)
    ctx = FlyteContextManager.current_context()
    raw_prefix = snap.raw_output_prefix or ctx.file_access.raw_output_prefix
    params = ExecutionParameters(
        execution_date=snap.execution_date or datetime.datetime.now(datetime.timezone.utc),
        tmp_dir=str(workdir),
        stats=ctx.user_space_params.stats if ctx.user_space_params is not None else None,
        execution_id=snap.execution_id,
        logging=_logging.getLogger("flytekit.user_space"),
        raw_output_prefix=raw_prefix,
        output_metadata_prefix=snap.output_metadata_prefix,
        checkpoint=checkpoint,
        decks=[],
        task_id=snap.task_id,
        enable_deck=snap.enable_deck,
    )
    file_access = FileAccessProvider(local_sandbox_dir=str(workdir / "sandbox"), raw_output_prefix=raw_prefix)
    mode = ExecutionState.Mode(snap.mode) if snap.mode is not None else ExecutionState.Mode.TASK_EXECUTION
    state = ExecutionState(working_dir=str(workdir), mode=mode, user_space_params=params)
    new_ctx = (
        ctx.new_builder()
        .with_file_access(file_access)
        .with_execution_state(state)
        .with_output_metadata_tracker(OutputMetadataTracker())
        .build()
    )
    return new_ctx, params


def _set_rank_env(spec: RankSpec, rank: int) -> None:
    os.environ.update(spec.env)
    # torch chose the port of the store the ranks meet at; publish it the way the operator does.
    os.environ.setdefault("PET_MASTER_ADDR", os.environ.get("MASTER_ADDR", ""))
    os.environ.setdefault("PET_MASTER_PORT", os.environ.get("MASTER_PORT", ""))
    if "PET_RDZV_BACKEND" in spec.env and "PET_RDZV_ENDPOINT" not in spec.env:
        os.environ["PET_RDZV_ENDPOINT"] = f"{os.environ['PET_MASTER_ADDR']}:{os.environ['PET_MASTER_PORT']}"
    if spec.virtual_nodes:
        os.environ["PET_NODE_RANK"] = str(rank // max(1, spec.nproc_per_node))
    if spec.threads is not None and "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = str(spec.threads)
    threads = os.environ.get("OMP_NUM_THREADS")
    if threads and threads.isdigit() and int(threads) > 0:
        import torch

        torch.set_num_threads(int(threads))


def rank_entrypoint(spec: RankSpec) -> None:
    """Run the user function as one rank; called by torch's elastic agent in each rank process.

    Args:
        spec: what to run and how (see :class:`RankSpec`).

    Raises:
        BaseException: whatever the user function raised, after it was written to ``rank-<n>.error``; torch's
            agent then sees the rank fail and stops the others.
    """
    _die_with_parent(spec.parent_pid)
    # flytekit's context manager installs its own SIGINT handler at import; a rank must stop on Ctrl-C (or the
    # agent forwarding it) at once, as a plain Python program does, or the agent waits out its shutdown timeout.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    rank = int(os.environ.get("RANK", "0"))
    control = Path(spec.control_dir)
    _write_atomic(control / START_FILE.format(rank=rank), str(os.getpid()).encode())
    try:
        _set_rank_env(spec, rank)
        install_collective_timeout(spec.collective_timeout_s)
        for root in reversed(spec.import_roots):
            if root not in sys.path:
                sys.path.insert(0, root)
        fn = cloudpickle.loads(spec.fn_bytes)
        kwargs = cloudpickle.loads(spec.kwargs_bytes)
        from flytekit.core.context_manager import FlyteContextManager

        new_ctx, params = _rank_context(spec, rank)
        with FlyteContextManager.with_context(new_ctx.new_builder()) as ctx:
            value = fn(**kwargs)
            if rank == 0:
                _write_result(control, value, params, ctx)
    except BaseException as exc:
        write_error(control, rank, exc)
        if _is_collateral(exc):
            # A lost peer or a collective timeout is a consequence, not a cause. Linger briefly so that the agent,
            # which records only the first rank it sees exit, sees the real cause first (a rank killed by a signal
            # leaves no error file; its exit code is the only trace of it). The error file is already written.
            time.sleep(COLLATERAL_GRACE_S)
        raise
    _write_atomic(control / DONE_FILE.format(rank=rank), b"")


def _write_result(control: Path, value: Any, params: Any, ctx: Any) -> None:
    """Write rank 0's return value, Decks and output metadata for the parent."""
    from flytekit.deck.deck import TimeLineDeck

    decks: list[tuple[str, str]] = [
        (deck.name, deck.html) for deck in params.decks if not isinstance(deck, TimeLineDeck)
    ]
    metadata = None
    tracker = ctx.output_metadata_tracker
    if tracker is not None:
        metadata = tracker.get(value)
    try:
        payload = cloudpickle.dumps({"value": value, "decks": decks, "metadata": metadata})
    except Exception as exc:
        raise TypeError(
            f"rank 0's return value of type {type(value).__name__} cannot be pickled to carry it to the task "
            f"process: {exc}"
        ) from exc
    _write_atomic(control / RESULT_FILE.format(rank=0), payload)


def write_error(control: Path, rank: int, exc: BaseException) -> None:
    """Write ``rank-<n>.error`` for ``exc`` (best effort: never raises).

    Args:
        control: the control directory.
        rank: global rank of this process.
        exc: the exception the user function raised.
    """
    try:
        from flytekit.exceptions.user import FlyteRecoverableException

        try:
            exc_bytes: Optional[bytes] = cloudpickle.dumps(exc)
            pickle.loads(exc_bytes)  # the parent must be able to rebuild it; else report it as text only
        except Exception:
            exc_bytes = None
        error = RankError(
            rank=rank,
            timestamp=time.time(),
            type_name=f"{type(exc).__module__}.{type(exc).__qualname__}",
            message=str(exc),
            traceback_text="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
            recoverable=isinstance(exc, FlyteRecoverableException),
            collateral=_is_collateral(exc),
            exc_bytes=exc_bytes,
        )
        _write_atomic(control / ERROR_FILE.format(rank=rank), pickle.dumps(error))
    except Exception:  # noqa: BLE001 - reporting must never hide the user's exception
        traceback.print_exc()
