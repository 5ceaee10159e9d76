"""Rank processes: start them, stop them on a signal, never leave one behind.

:func:`run_ranks` starts a :class:`~pytorch_core._plan.LaunchPlan`'s ranks with torch's elastic agent,
waits for them, and returns an :class:`AgentResult` (plain data: what the ranks wrote to the control directory and
which ones the agent saw fail). It owns:

- **the run directory**: ``pytorch-ranks-*`` under the task's working directory, with the control directory (see
  ``_control.py``) and torch's logs; removed afterwards (the rank working directories stay with the task's);
- **the fork server**: with ``start_method="forkserver"`` (the default) multiprocessing's server is started once per
  task process and serves every later launch. When the launching process can be forked safely it is a fork of it
  (``_forkserver.py``: it starts at once and shares the launcher's memory); otherwise it is a fresh interpreter that
  preloads torch, flytekit, the rank entrypoint and the task's module (:func:`_preload_forkserver`). Either way a
  rank starts in a fraction of a second;
- **signals**: for the whole launch, SIGTERM/SIGINT/SIGHUP/SIGQUIT make the agent stop every rank (it forwards the
  signal, then SIGKILLs after :data:`LOCAL_SHUTDOWN_TIMEOUT_S` locally, or ``FLYTE_PYTORCH_TERMINATION_GRACE_S``);
  then the previous handler acts as if the signal had just arrived (default SIGTERM ends the process, default SIGINT
  raises ``KeyboardInterrupt``). Ranks whose loop uses the checkpoint or progress API stop after an agreed step
  first (``preemption.py``), and the launcher says where the next run resumes before the handler acts;
- **orphans**: a live launcher stops its ranks (the agent on a failure, the handlers above on a signal); when the
  launcher itself dies, each rank ends itself (``_rank.die_with_parent``, the first thing a rank does).

Which rank to blame for a failure is not decided here (``_failure.py``). torch is imported inside functions only.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

from pytorch_contract.preemption import termination_grace_s
from pytorch_core._codefiles import code_files
from pytorch_core._control import ControlDir, ControlRecord, RankSpec, dumps, pid_alive
from pytorch_core._failure import RankFailedError
from pytorch_core._forkserver import start_forked_server
from pytorch_core._nested import LAUNCHER_PID_ENV, PRELOAD_ENV
from pytorch_core._plan import LOCAL_ADDR, ExecutionKind, LaunchPlan
from pytorch_core._progress_follow import ProgressFollower
from pytorch_core._rank import rank_entrypoint
from pytorch_core.config import ConfigError
from pytorch_core.frontend import FrontEnd, current

logger = logging.getLogger(__name__)

#: Seconds between SIGTERM and SIGKILL when the local agent stops its ranks (torch's default, 30 s, is for pods):
#: a rank that ignores Ctrl-C (stuck in a C call) costs this long. ``FLYTE_PYTORCH_TERMINATION_GRACE_S`` sets it
#: (``local_grace_s``), for a preemption-safe loop whose checkpoint takes longer to save.
LOCAL_SHUTDOWN_TIMEOUT_S = 5
#: The role name torchrun gives its workers (``ROLE_NAME``; ``--role`` defaults to it); torch's ``LaunchConfig``
#: would say ``default_role``, which code written for torchrun does not expect.
TORCHRUN_ROLE = "default"
#: torch's switch for a rendezvous store of its own per round (see ``run_ranks``); a value the user set wins.
SHARED_RDZV_STORE_ENV = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
#: Signals during which a launch stops its ranks and then lets the previous handler act.
_HANDLED_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")
#: Modules the fork server imports once, before it forks any rank. The task's own module is imported last, through
#: ``_preload`` (named by ``FLYTE_PYTORCH_PRELOAD``), which keeps an error raised by its import from ending the server.
FORKSERVER_PRELOAD = (
    "torch",
    "torch.distributed",
    "pytorch_core._rank",
    "pytorch_core._preload",
)


@dataclass(frozen=True)
class AgentResult:
    """How the ranks of one launch ended.

    Attributes:
        record: what the ranks wrote to the control directory.
        exit_codes: global rank -> exit code of every rank the agent saw fail (empty when none failed).
        agent_error: the agent's description of the failure, ``""`` when none failed.
        elapsed_s: seconds from the start of the agent to its end.
        interrupted: the signal the launcher got, when its ranks stopped at the agreed step of a preemption, or
            before any of them reported a step (a launch stopped by a signal otherwise, its ranks failing for reasons
            of their own, is not returned: the signal's handler acts).
        before_first_step: the launcher got ``interrupted`` before any rank reported a step (the ranks were still
            starting, or the loop reports none): they ended at once, with nothing to save.
    """

    record: ControlRecord
    exit_codes: Mapping[int, Optional[int]] = field(default_factory=dict)
    agent_error: str = ""
    elapsed_s: float = 0.0
    interrupted: Optional[signal.Signals] = None
    before_first_step: bool = False

    @property
    def failed(self) -> bool:
        """The agent saw a rank fail, or a rank reported an exception."""
        return bool(self.agent_error or self.exit_codes or self.record.errors)


def run_ranks(
    fn: Callable[..., Any], kwargs: dict[str, Any], plan: LaunchPlan, *, follower: Optional[ProgressFollower] = None
) -> AgentResult:
    """Start the plan's ranks with torch's elastic agent and wait until they all ended.

    Args:
        fn: the user's function.
        kwargs: its inputs.
        plan: a ``LOCAL``, ``CLUSTER_FANOUT`` or ``CLUSTER_ELASTIC`` plan.
        follower: shows global rank 0's progress (``_progress_follow.py``) while the ranks run: it follows the
            control directory's ``progress.json`` from after the fork server started until the ranks ended.

    Returns:
        AgentResult: the control directory's record and the agent's view of failed ranks.

    Raises:
        RankFailedError: the launch was stopped by a signal whose previous handler returned (the ranks were stopped
            first). ``KeyboardInterrupt`` (default SIGINT handler) or the end of the process (default SIGTERM) come
            first when those handlers are in place.
    """
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch

    frontend = current()
    snapshot = frontend.snapshot()
    base_dir = snapshot.working_dir if snapshot.working_dir and os.path.isdir(snapshot.working_dir) else None
    run_dir = Path(tempfile.mkdtemp(prefix="pytorch-ranks-", dir=base_dir))
    control = run_dir / "control"
    control.mkdir()
    if snapshot.working_dir is None or base_dir is None:
        snapshot = replace(snapshot, working_dir=str(run_dir))
    spec = rank_spec(fn, kwargs, plan, control_dir=control, context=snapshot, frontend=frontend)
    local = plan.kind is ExecutionKind.LOCAL
    launch_config = _agent_config(plan, log_dir=run_dir / "torchelastic")
    # Everything started during the launch (the fork server, the ranks, what they start) carries the launcher's pid,
    # so that a launch attempted there is refused (``_nested.py``) instead of multiplying processes.
    launch_env = {LAUNCHER_PID_ENV: str(os.getpid())}
    if plan.rdzv_backend != "static" and SHARED_RDZV_STORE_ENV not in os.environ:
        # torch 2.13's c10d rendezvous shares one TCP store across restarts of the group, and the restarted ranks
        # then read their predecessors' gloo addresses from it ("Connection refused" at init_process_group after an
        # elastic restart, 4 times in 6 local runs). A store per round, as before torch shared it, has no stale keys.
        launch_env[SHARED_RDZV_STORE_ENV] = "1"
    if plan.start_method != "spawn":
        import_preloads(plan.preload_modules)  # shared by every rank forked from here or from the forked server
    if plan.start_method == "forkserver":
        launch_env[PRELOAD_ENV] = _preload_forkserver(fn, plan.preload_modules)
    saved_handlers = _install_handlers(ControlDir(control))
    off_main = threading.current_thread() is not threading.main_thread()
    stop_waiting = _ranks_end_before_exit(ControlDir(control), plan) if off_main else None
    interrupted: Optional[signal.Signals] = None
    failure: Optional[ChildFailedError] = None
    started = time.monotonic()
    try:
        with EnvPatch(launch_env):
            if plan.start_method == "forkserver":
                # Inside the patch: the server (and every rank it forks) inherits the launch's environment.
                why_fresh = start_forked_server()
                if why_fresh is not None:
                    logger.debug("fork server: a fresh interpreter (%s)", why_fresh)
            if follower is not None:
                follower.start(ControlDir(control).progress_file)
            try:
                with _quiet_torch_logs(local), _agent_handler_marks(ControlDir(control)):
                    try:
                        elastic_launch(launch_config, rank_entrypoint)(spec)
                    except ChildFailedError as exc:
                        failure = exc
                    except SignalException as exc:
                        interrupted = exc.sigval
            finally:
                if follower is not None:
                    failed = failure is not None or interrupted is not None or sys.exc_info()[0] is not None
                    follower.stop(failed=failed)
        if interrupted is None:
            return AgentResult(
                record=ControlDir(control).read(),
                exit_codes={rank: rec.exitcode for rank, rec in (failure.failures if failure else {}).items()},
                agent_error=(str(failure) or type(failure).__name__) if failure is not None else "",
                elapsed_s=time.monotonic() - started,
            )
        stopped = ControlDir(control).read()
        if stopped.preempted or stopped.stopping:
            # The ranks stopped at the agreed step of a preemption (``preemption.py``): the launcher says so first.
            return AgentResult(record=stopped, elapsed_s=time.monotonic() - started, interrupted=interrupted)
        if _ended_by_the_signal(stopped):
            # No rank reported a step: they were still starting (or the loop reports none) and ended at once, as
            # torchrun's do. Nothing was saved; the launcher says so, and where the next run starts, first.
            return AgentResult(
                record=stopped, elapsed_s=time.monotonic() - started, interrupted=interrupted, before_first_step=True
            )
    finally:
        _restore_handlers(saved_handlers)
        shutil.rmtree(control, ignore_errors=True)
        shutil.rmtree(run_dir / "torchelastic", ignore_errors=True)
        if base_dir is None and interrupted is not None:
            shutil.rmtree(run_dir, ignore_errors=True)
        if stop_waiting is not None:
            stop_waiting()
    # The ranks are stopped; now let the previous handler act as if the signal had arrived now.
    signal.raise_signal(interrupted)
    raise RankFailedError(f"the launch was stopped by {interrupted.name}; the ranks were stopped")


def rank_spec(
    fn: Callable[..., Any],
    kwargs: dict[str, Any],
    plan: LaunchPlan,
    *,
    control_dir: Path,
    context: Any,
    frontend: Optional[FrontEnd] = None,
) -> RankSpec:
    """What every rank of the plan is handed (the same spec for all: a rank learns its number from ``RANK``).

    Args:
        fn: the user's function (cloudpickled into the spec).
        kwargs: its inputs (cloudpickled).
        plan: the launch plan.
        control_dir: the launch's control directory.
        context: the front-end's snapshot of the task process's context, with the working directory the ranks work
            under.
        frontend: the front-end the ranks run under (default: the current one).

    Returns:
        RankSpec: the spec.
    """
    return RankSpec(
        fn_bytes=dumps(fn),
        fn_files=code_files(fn),
        kwargs_bytes=dumps(kwargs),
        control_dir=str(control_dir),
        context=context,
        frontend=frontend if frontend is not None else current(),
        threads=plan.threads,
        collective_timeout_s=plan.collective_timeout_s,
        env=dict(plan.rank_env),
        nproc_per_node=plan.procs_per_node,
        virtual_nodes=plan.virtual_nodes,
        node_gpus=plan.node_gpus,
        parent_pid=os.getpid(),
        import_roots=_import_roots(fn),
        retry_hangs=plan.retry_hangs,
        preflight=plan.preflight,
        preflight_local=plan.kind is ExecutionKind.LOCAL,
        shm_size=plan.shm_size,
        progress_timeout_s=plan.progress_timeout_s,
    )


def _agent_config(plan: LaunchPlan, *, log_dir: Path) -> Any:
    """torch's ``LaunchConfig`` for the plan (locally: loopback only, and a short SIGTERM-to-SIGKILL grace)."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.launcher.api import LaunchConfig

    local = plan.kind is ExecutionKind.LOCAL
    endpoint = plan.rdzv_endpoint
    if plan.rdzv_backend == "static" and endpoint == f"{LOCAL_ADDR}:0":
        endpoint = f"{LOCAL_ADDR}:{free_port()}"  # the static store needs a real port: ranks are told this one
    # Locally our own grace (the variable sets it); in a pod torch's (30 s, TORCH_ELASTIC_SHUTDOWN_TIMEOUT) unless the
    # variable says what the pod's terminationGracePeriodSeconds is.
    grace = local_grace_s(os.environ) if local else termination_grace_s(os.environ, 0.0)
    return LaunchConfig(
        min_nodes=plan.min_nodes,
        max_nodes=plan.max_nodes,
        nproc_per_node=plan.nproc_per_node,
        run_id=_run_id(plan),
        role=TORCHRUN_ROLE,
        rdzv_backend=plan.rdzv_backend,
        rdzv_endpoint=endpoint,
        rdzv_configs=dict(plan.rdzv_configs),
        max_restarts=plan.max_restarts,
        monitor_interval=plan.monitor_interval,
        start_method=plan.start_method,
        local_addr=LOCAL_ADDR if local else None,
        logs_specs=DefaultLogsSpecs(log_dir=str(log_dir)),
        shutdown_timeout=math.ceil(grace) if grace > 0 else None,
    )


def local_grace_s(env: Mapping[str, str]) -> float:
    """Seconds between the SIGTERM a local launcher's agent forwards to its ranks and the SIGKILL that follows:
    ``FLYTE_PYTORCH_TERMINATION_GRACE_S``, else :data:`LOCAL_SHUTDOWN_TIMEOUT_S`.

    Args:
        env: the launcher's environment.

    Returns:
        float: seconds.

    Raises:
        ValueError: the variable is set but not a positive number of seconds.
    """
    return termination_grace_s(env, float(LOCAL_SHUTDOWN_TIMEOUT_S))


def _run_id(plan: LaunchPlan) -> str:
    """The rendezvous id: unique per local launch; the execution's name in a pod (every pod of the job shares it)."""
    if plan.kind is ExecutionKind.LOCAL:
        return f"flyte-local-{uuid.uuid4().hex[:12]}"
    try:
        name = current().run_id()
    except Exception:  # noqa: BLE001 - no execution id: any id shared by the pods works, they all lack it
        name = ""
    return name or "flyte-pytorch"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago.

    Returns:
        int: the port.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOCAL_ADDR, 0))
        return int(sock.getsockname()[1])


class EnvPatch:
    """Set environment variables for a block and restore the exact previous environment afterwards.

    torch's agent writes variables into ``os.environ`` of the launching process; the task process must not keep them.

    Args:
        values: variables to set for the block.
    """

    def __init__(self, values: Optional[Mapping[str, str]] = None) -> None:
        self._values = dict(values or {})
        self._saved: dict[str, str] = {}

    def __enter__(self) -> EnvPatch:
        self._saved = dict(os.environ)
        os.environ.update(self._values)
        return self

    def __exit__(self, *exc: object) -> None:
        for key in set(os.environ) - set(self._saved):
            del os.environ[key]
        for key, value in self._saved.items():
            if os.environ.get(key) != value:
                os.environ[key] = value


def _import_roots(fn: Callable[..., Any]) -> tuple[str, ...]:
    """The directory the task's module was imported from (the root of its package), when it is not on sys.path.

    ``pyflyte run examples/mnist/workflow.py`` imports ``mnist.workflow`` with ``examples/`` on ``sys.path`` and
    removes it afterwards, so a rank process could not import the module to unpickle the task function.
    """
    name = getattr(fn, "__module__", None)
    module = sys.modules.get(name or "")
    path = getattr(module, "__file__", None)
    if not name or name == "__main__" or not path:
        return ()
    depth = len(name.split("."))
    file = Path(path).resolve()
    root = file.parents[depth] if file.name == "__init__.py" else file.parents[depth - 1]
    return () if str(root) in sys.path else (str(root),)


def import_preloads(modules: tuple[str, ...]) -> None:
    """Import the config's ``preload_modules`` in the launching process (before the ranks start).

    Args:
        modules: the module names (already checked to be names at decoration).

    Raises:
        ConfigError: a module failed to import; the message names it and the import's error.
    """
    import importlib

    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - any failure of the import is the setting's
            raise ConfigError(
                f"preload_modules={list(modules)!r}: importing {name!r} failed ({type(exc).__name__}: {exc}); "
                "list only modules the task's environment can import",
                field="preload_modules",
                value=list(modules),
            ) from exc


def _preload_forkserver(fn: Callable[..., Any], extra: tuple[str, ...] = ()) -> str:
    """Have a fresh fork server import torch, flytekit, the rank entrypoint, ``extra`` and the task's module once.

    Each spawned rank would otherwise spend seconds re-importing them (about 3 s of CPU per rank on a laptop core),
    which dominated the wall time of short local runs. The server starts at the first launch and serves later ones;
    a module that fails to import there is skipped (``_preload``) and imported by the rank as usual. A server forked
    from the launcher (``_forkserver.py``) ignores the list: it holds the launcher's modules already.

    Args:
        fn: the task function (its module is preloaded last).
        extra: the config's ``preload_modules``.

    Returns:
        str: the value of ``FLYTE_PYTORCH_PRELOAD`` for the launch (the task's module, or ``""`` for ``__main__``).
    """
    import multiprocessing

    # A fresh server imports these itself; the task's module comes last, through ``_preload`` (see above).
    preload = [*FORKSERVER_PRELOAD[:-1], *current().preload, *extra, FORKSERVER_PRELOAD[-1]]
    multiprocessing.set_forkserver_preload(list(dict.fromkeys(preload)))
    module = getattr(fn, "__module__", None)
    return module if module and module != "__main__" else ""


class _quiet_torch_logs:
    """Locally, torch's agent logs its whole launch config at INFO; keep its logger at WARNING for the launch."""

    def __init__(self, enabled: bool) -> None:
        self._enabled = enabled
        self._saved: list[tuple[logging.Logger, int]] = []

    def __enter__(self) -> _quiet_torch_logs:
        if self._enabled:
            # The agent logs each failed rank's traceback at ERROR; the task's exception carries the root cause's.
            levels = {
                "torch.distributed.elastic": logging.WARNING,
                "torch.distributed.launcher": logging.WARNING,
                "torch.distributed.elastic.multiprocessing.api": logging.CRITICAL,
                # "Terminating process N via signal SIGTERM", once per rank the agent stops after a failure, with no
                # rank in it: the task's error already lists those ranks (failed afterwards, still running).
                "torch.multiprocessing.spawn": logging.ERROR,
            }
            for name, level in levels.items():
                log = logging.getLogger(name)
                self._saved.append((log, log.level))
                if log.getEffectiveLevel() < level:
                    log.setLevel(level)
        return self

    def __exit__(self, *exc: object) -> None:
        for log, level in self._saved:
            log.setLevel(level)


_Handler = Any  # what signal.getsignal returns: a callable, SIG_DFL/SIG_IGN, or None


def _ended_by_the_signal(record: ControlRecord) -> bool:
    """Whether the ranks' only trace of a launch the launcher got a signal during is the signal itself: no rank
    reported a step (none armed for a preemption, none stopping), and what they reported is the interrupt a signal
    raises (Ctrl-C's ``KeyboardInterrupt``, ``SystemExit``) or a peer lost with them, never an error of their own."""
    for error in record.errors:
        own = error.type_name.rsplit(".", 1)[-1] not in ("KeyboardInterrupt", "SystemExit")
        if own and not error.collateral:
            return False
    return True


def _mark_then(control: ControlDir, handler: Callable[[int, Any], Any]) -> Callable[[int, Any], Any]:
    """``handler``, after it noted in the control directory that the launcher got the signal: the ranks its agent
    passes it on to then say that the launcher got it (``preemption.py``), not each one that it did."""

    def marked(signum: int, frame: Any) -> Any:
        try:
            control.mark_launcher_signal(signal.Signals(signum).name)
        except OSError:  # the directory is gone: the ranks name themselves, as before
            pass
        return handler(signum, frame)

    return marked


def _signal_exception_handler(signum: int, frame: object) -> None:
    from torch.distributed.elastic.multiprocessing.api import SignalException

    sig = signal.Signals(signum)
    raise SignalException(f"process {os.getpid()} got {sig.name} while launching ranks", sigval=sig)


def _install_handlers(control: ControlDir) -> dict[signal.Signals, _Handler]:
    """Install torch's kind of handler (raise ``SignalException``) for the whole launch; return the previous ones.

    torch's agent installs the same handlers when it starts the ranks, but not before the rendezvous and it never
    restores the previous ones; we cover the whole launch and restore them afterwards. Only the main thread can set
    handlers; elsewhere nothing is installed. Each notes the signal in the control directory first.
    """
    saved: dict[signal.Signals, _Handler] = {}
    if threading.current_thread() is not threading.main_thread():
        return saved
    handler = _mark_then(control, _signal_exception_handler)
    for name in _HANDLED_SIGNALS:
        sig = getattr(signal, name, None)
        if sig is None:
            continue
        saved[sig] = signal.getsignal(sig)
        signal.signal(sig, handler)
    return saved


class _agent_handler_marks:
    """While torch's agent runs: the handler it installs when it starts the ranks (its module's
    ``_terminate_process_handler``, looked up when it installs it) notes the signal in the control directory before
    it raises, as ours does (:func:`_install_handlers`). A torch without that name keeps its own handler: its ranks
    then name themselves when a signal reaches them."""

    def __init__(self, control: ControlDir) -> None:
        self._control = control
        self._module: Any = None
        self._original: Any = None

    def __enter__(self) -> _agent_handler_marks:
        from torch.distributed.elastic.multiprocessing import api

        original = getattr(api, "_terminate_process_handler", None)
        if callable(original):
            self._module, self._original = api, original
            setattr(api, "_terminate_process_handler", _mark_then(self._control, original))  # noqa: B010
        return self

    def __exit__(self, *exc: object) -> None:
        if self._module is not None:
            setattr(self._module, "_terminate_process_handler", self._original)  # noqa: B010


def _ranks_end_before_exit(control: ControlDir, plan: LaunchPlan) -> Callable[[], None]:
    """A launch outside Python's main thread (``flyte.run`` runs a task in a thread of its own) has no handlers for
    the launcher's signals (only the main thread may set them). A terminal's Ctrl-C still reaches the ranks: those
    whose loop uses the checkpoint API stop at an agreed step and save (``preemption.py``), while the main thread's
    ``KeyboardInterrupt`` ends the program, and the ranks with it. While a rank that said it is stopping so
    (``rank-<n>.stopping``) is alive, the program's exit waits for it (at most the grace and 5 s); a program that
    exits while no rank is stopping exits at once, as it did. Once the program is exiting, the launch's thread
    reports nothing (nobody is left to tell, and the SDK's thread would log into a half-finalized interpreter): it
    waits, quietly, for the end.

    Returns:
        Callable[[], None]: called when the launch ends: stops the waiting, or, when the program is exiting, parks
        the launch's thread for good.
    """
    limit = local_grace_s(os.environ) + 5.0 if plan.kind is ExecutionKind.LOCAL else 35.0
    exiting = threading.Event()

    def wait_for_the_ranks() -> None:
        exiting.set()
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline and any(pid_alive(pid) for pid in control.stopping_pids()):
            time.sleep(0.05)

    def launch_over() -> None:
        atexit.unregister(wait_for_the_ranks)
        if exiting.is_set():
            threading.Event().wait()  # a daemon thread of an exiting program: the interpreter ends it

    atexit.register(wait_for_the_ranks)
    return launch_over


def _restore_handlers(saved: dict[signal.Signals, _Handler]) -> None:
    for sig, previous in saved.items():
        signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
