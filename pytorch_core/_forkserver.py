"""The fork server, forked from the launching process when that is safe, instead of started as a fresh interpreter.

multiprocessing's fork server (``start_method="forkserver"``, the default) is a new interpreter that imports torch,
flytekit, the rank entrypoint and the task's module before it forks the first rank. On a laptop that is seconds on the
critical path of every first launch (``import torch`` alone takes 1 to 2 s of one core), and it is a second copy of
everything the launching process has already imported: the ranks share the server's pages, not the launcher's.

When the launching process itself can be forked safely, :func:`start_forked_server` makes the server a fork of it:
it starts in milliseconds, already holds every module the launcher imported (torch, flytekit, the task's module, even
functions defined in ``__main__``), and the launcher, the server and the ranks share those pages. Everything else is
multiprocessing's own fork server: its ``main`` loop and protocol, one server per launching process that serves every
later launch and exits with it. The server is single-threaded, so each rank it forks is as clean as with a fresh
server, except for what the launcher's memory held when the server was forked.

Forking the launcher is refused (and the fresh interpreter used, as before) when

- the platform is not Linux (forking is unsafe on macOS), or Python's fork server is not the one this was written
  against (3.10 to 3.13; 3.14 authenticates its clients), or the fork server already runs;
- CUDA is initialized in the launcher, or its driver library is loaded there (a forked child cannot use CUDA);
- the launcher has started an OpenMP thread team (it ran a parallel torch op): GNU OpenMP does not survive a fork, and
  a forked child hangs in its first parallel op. :func:`openmp_survives_fork` tests exactly that in a throwaway fork;
- ``FLYTE_PYTORCH_FRESH_FORKSERVER=1`` is set (always start a fresh interpreter).

As with ``start_method="fork"``, the ranks inherit the launcher's open files and module state; unlike it, they never
inherit its threads or a state reached after the server was forked. Neither torch nor flytekit is imported at module
level here.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import socket
import sys
import threading
import traceback
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Optional

logger = logging.getLogger(__name__)

#: Set to ``1`` to always start the fork server as a fresh interpreter (multiprocessing's own way).
FRESH_FORKSERVER_ENV = "FLYTE_PYTORCH_FRESH_FORKSERVER"
#: The name (``/proc/<pid>/comm``, what ``top`` and ``ps -o comm`` show) of a fork server forked from the launcher.
FORKED_SERVER_NAME = "pt-forkserver"
#: Seconds the throwaway fork gets to run one parallel op; a hang (or a machine this slow) means: do not fork.
OPENMP_PROBE_TIMEOUT_S = 1.0
#: Elements of the probe's op: well above torch's grain size (32,768), so that two threads split it in a parallel
#: region.
_PROBE_ELEMENTS = 1 << 18


def fork_refusal(environ: Mapping[str, str], *, platform: str, version: tuple[int, int]) -> Optional[str]:
    """Why the launcher must not be forked into the fork server, from what is known without torch. Pure.

    Args:
        environ: the process environment.
        platform: ``sys.platform``.
        version: ``sys.version_info[:2]``.

    Returns:
        Optional[str]: the reason, or ``None`` when the checks that need torch (:func:`torch_refusal`) decide.
    """
    if environ.get(FRESH_FORKSERVER_ENV, "").strip().lower() in ("1", "true", "yes"):
        return f"{FRESH_FORKSERVER_ENV} is set"
    if not platform.startswith("linux"):
        return f"forking is not safe on {platform}"
    if not (3, 10) <= version <= (3, 13):
        return f"Python {version[0]}.{version[1]}'s fork server protocol is not the one this forks into"
    return None


#: Shared libraries whose presence in the launcher means a GPU driver may be initialized there: the CUDA driver
#: (``cuInit``, which ``torch.cuda.is_available()`` calls unless ``PYTORCH_NVML_BASED_CUDA_CHECK=1``) and ROCm's HIP
#: runtime. A forked child then fails its first CUDA call ("Cannot re-initialize CUDA in forked subprocess"). NVML
#: (``libnvidia-ml``, what ``torch.cuda.device_count()`` reads) is safe to fork.
GPU_DRIVER_LIBRARIES = ("libcuda.so", "libamdhip64.so")


def gpu_driver_loaded(maps: str) -> Optional[str]:
    """The GPU driver library mapped into a process, from the text of its ``/proc/<pid>/maps``. Pure.

    Args:
        maps: the text of ``/proc/<pid>/maps``.

    Returns:
        Optional[str]: the library's file name, or ``None``.
    """
    for line in maps.splitlines():
        name = line.rsplit("/", 1)[-1] if "/" in line else ""
        for library in GPU_DRIVER_LIBRARIES:
            if name.startswith(library):
                return name
    return None


def torch_refusal() -> Optional[str]:
    """Why the launcher must not be forked, from torch's state in it (``None``: it can be).

    Returns:
        Optional[str]: the reason, or ``None``.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return None  # nothing has run yet: no CUDA context, no OpenMP team
    try:
        if torch.cuda.is_initialized():
            return "CUDA is initialized in the launching process"
    except Exception:  # noqa: BLE001 - a torch without a working CUDA module has no CUDA state to inherit
        pass
    try:
        driver = gpu_driver_loaded(Path("/proc/self/maps").read_text())
    except OSError:
        driver = None
    if driver is not None:
        return f"a GPU driver is loaded in the launching process ({driver}: a CUDA call ran there)"
    if not openmp_survives_fork():
        return "the launching process started an OpenMP thread team (a forked child would hang in its next parallel op)"
    return None


def _fork_quietly() -> int:
    """``os.fork()``, without Python 3.12's warning that forking a multi-threaded process may deadlock the child.

    The children forked here run no code that could wait on a lock another thread of the parent held: the probe runs
    one torch op, the fork server runs multiprocessing's loop (and is what the ranks are forked from). Python's
    standard streams are flushed first, as multiprocessing does before a fork: text the launcher printed but had not
    yet written (a pipe is block-buffered) would otherwise be written again by every rank.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, ValueError, OSError):
            pass  # no stream, or a closed one: nothing buffered to duplicate
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return os.fork()


def openmp_survives_fork(timeout_s: float = OPENMP_PROBE_TIMEOUT_S) -> bool:
    """Fork a throwaway child that runs one two-thread parallel op; True when it finishes within ``timeout_s``.

    GNU OpenMP keeps the thread team of the process that started one; a forked child inherits the team's bookkeeping
    but not its threads, and waits for them for ever in its first parallel region. The child is killed on a timeout.

    Args:
        timeout_s: how long the child may take.

    Returns:
        bool: the child ran the op and reported it.
    """
    read_fd, write_fd = os.pipe()
    pid = _fork_quietly()
    if pid == 0:  # the probe
        try:
            os.close(read_fd)
            import torch

            torch.set_num_threads(2)
            torch.ones(_PROBE_ELEMENTS).mul_(2)
            os.write(write_fd, b"1")
        finally:
            os._exit(0)
    os.close(write_fd)
    try:
        ready, _, _ = select.select([read_fd], [], [], timeout_s)
        finished = bool(ready) and os.read(read_fd, 1) == b"1"
    finally:
        os.close(read_fd)
        if not finished:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os.waitpid(pid, 0)
    return finished


def set_process_name(name: str) -> None:
    """Set ``/proc/self/comm`` (Linux; 15 bytes at most): what ``top`` and ``ps -o comm`` show for this process.

    Args:
        name: the name.
    """
    try:
        with open(f"/proc/{os.getpid()}/comm", "w") as comm:
            comm.write(name[:15])
    except OSError:
        pass


#: Signals the fork server ignores for its whole life (multiprocessing's loop ignores SIGINT itself).
SERVER_IGNORED_SIGNALS = ("SIGTERM",)
#: True in the fork server only: the next fork is a rank's, whose signals go back to their defaults.
_serving = False


def _in_fork_server() -> bool:
    """True when called, directly or not, from multiprocessing's fork server loop (``forkserver.main``)."""
    from multiprocessing import forkserver

    code = getattr(forkserver.main, "__code__", None)
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def protect_server() -> None:
    """In the fork server, before it forks its first rank: survive the signals sent to the whole process group, and
    have every rank it forks start with them at their defaults again.

    A SIGTERM to the launch's process group (``kill -TERM -- -PGID``, systemd's ``KillMode=control-group``, Slurm's
    step signal, ``tini -g``) reaches the launcher, the server and every rank alike. At its default action it would
    end the server, and every rank it forked dies with it (``PR_SET_PDEATHSIG``, ``_rank.die_with_parent``) before
    the ranks could stop at an agreed step and save. The server ignores it, as multiprocessing's loop ignores SIGINT
    and its resource tracker both; it still ends when the launcher and its ranks are gone (its "alive" pipe). The
    ranks get the signal itself, and the launcher's agent forwards it again. A rank starts as under torchrun: SIGTERM
    at its default action (restored right after the fork, before anything of the rank runs), SIGINT back at
    Python's ``KeyboardInterrupt`` (by multiprocessing).
    """
    global _serving
    if _serving:
        return
    for name in SERVER_IGNORED_SIGNALS:
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    _serving = True
    os.register_at_fork(after_in_child=_rank_signal_defaults)


def _rank_signal_defaults() -> None:
    """Just forked from the fork server (a rank): the signals the server ignores act as they do by default again.
    Forks made later by the rank (DataLoader workers) keep what the rank set."""
    global _serving
    if not _serving:
        return
    _serving = False
    for name in SERVER_IGNORED_SIGNALS:
        signal.signal(getattr(signal, name), signal.SIG_DFL)


def _serve(listener_fd: int, alive_r: int, alive_w: int) -> None:
    """In the forked child: become multiprocessing's fork server. Never returns."""
    from multiprocessing import forkserver

    code = 0
    try:
        os.close(alive_w)
        # The launcher may hold this lock right now (another thread asking for a rank): a fork copies it locked.
        forkserver._forkserver._lock = threading.Lock()  # type: ignore[attr-defined]
        # A fresh server has the default handlers; the launcher's (ours during a launch, a notebook's) must not act
        # here. multiprocessing's loop then ignores SIGINT and restores these in every rank it forks.
        for name in ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGCHLD", "SIGUSR1", "SIGUSR2"):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        protect_server()  # SIGTERM ignored here, at its default again in every rank
        set_process_name(FORKED_SERVER_NAME)
        # No preload: this process already holds every module the launcher imported.
        forkserver.main(listener_fd, alive_r, [])
    except SystemExit:
        pass  # the launcher is gone (the alive pipe reached its end)
    except BaseException:  # noqa: BLE001 - report and end: a server that failed must not run the launcher's code
        traceback.print_exc()
        code = 1
    finally:
        os._exit(code)


def start_forked_server() -> Optional[str]:
    """Make multiprocessing's fork server a fork of this process, unless it runs already or forking is not safe.

    Call it with torch imported (the server and the ranks then share the launcher's copy) and with the environment
    the ranks should inherit in place.

    Returns:
        Optional[str]: ``None`` when the forked server runs now, else why it was not forked (multiprocessing then
        starts a fresh one when the first rank is asked for).
    """
    from multiprocessing import connection, forkserver, resource_tracker, util

    reason = fork_refusal(os.environ, platform=sys.platform, version=sys.version_info[:2])
    server = getattr(forkserver, "_forkserver", None)
    if reason is None and not all(
        hasattr(server, attr) for attr in ("_lock", "_forkserver_pid", "_forkserver_address", "_forkserver_alive_fd")
    ):
        reason = "multiprocessing's fork server has changed"
    if reason is not None:
        return reason
    with server._lock:  # type: ignore[union-attr]
        pid = server._forkserver_pid  # type: ignore[union-attr]
        if pid is not None:
            if os.waitpid(pid, os.WNOHANG)[0] == 0:
                return "the fork server runs already"
            # It died: forget it, as multiprocessing does before it starts a new one.
            os.close(server._forkserver_alive_fd)  # type: ignore[union-attr]
            server._forkserver_address = server._forkserver_alive_fd = server._forkserver_pid = None  # type: ignore[union-attr]
    reason = torch_refusal()
    if reason is not None:
        return reason
    resource_tracker.ensure_running()  # before forking: the server and the ranks share the launcher's tracker
    with server._lock:  # type: ignore[union-attr]
        if server._forkserver_pid is not None:  # type: ignore[union-attr]
            return "the fork server was started meanwhile by another thread"
        with socket.socket(socket.AF_UNIX) as listener:
            address = connection.arbitrary_address("AF_UNIX")  # type: ignore[attr-defined]
            listener.bind(address)
            if not util.is_abstract_socket_namespace(address):
                os.chmod(address, 0o600)
            listener.listen()
            # Every client holds the write end of the "alive" pipe; the server ends when the read end reaches EOF.
            alive_r, alive_w = os.pipe()
            try:
                pid = _fork_quietly()
                if pid == 0:
                    _serve(listener.fileno(), alive_r, alive_w)
            except BaseException:
                os.close(alive_w)
                raise
            finally:
                os.close(alive_r)
        server._forkserver_address = address  # type: ignore[union-attr]
        server._forkserver_alive_fd = alive_w  # type: ignore[union-attr]
        server._forkserver_pid = pid  # type: ignore[union-attr]
    logger.debug("fork server %d forked from the launching process %d", pid, os.getpid())
    return None
