"""Local fault drills for the launcher: inject a fault into one rank (or the launcher) and measure what happens.

Each drill returns ``{drill, injected, expected, observed, detect_s, leftover_procs}``; ``benchmarks/fault_report.py``
and ``tests/faults/test_local_faults.py`` call :func:`run_drill`. ``detect_s`` is measured from the moment the fault
was injected (written by the faulty rank, or taken when the signal was sent) to the moment the task's exception
reached the caller (or the launcher process exited).
"""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from flytekitplugins_pytorch import pytorch_task
from pytorch_core._forkserver import FORKED_SERVER_NAME

#: Collective timeout of the hang drill; small so the drill is quick.
HANG_TIMEOUT_S = 5.0
#: The launcher must report a fault within this many seconds (plus the collective timeout for the hang drill).
DEFAULT_BOUND_S = 30.0
MARKER_ENV = "FLYTE_DRILL_MARKER"
REPO_ROOT = Path(__file__).resolve().parents[2]


def _note(directory: str, name: str) -> None:
    Path(directory, name).write_text(repr(time.time()))


def _step_loop(victim: int, directory: str, fault: str) -> int:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dist.all_reduce(torch.ones(1))  # everybody is up
    _note(directory, f"up-{rank}")
    if rank == victim:
        time.sleep(0.5)
        _note(directory, "injected")
        if fault == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        if fault == "raise":
            raise ValueError(f"injected failure on rank {rank}")
        if fault == "hang":
            time.sleep(3600)
    for _ in range(1000):  # "training": the others sit in collectives
        dist.all_reduce(torch.ones(1))
        time.sleep(0.05)
    return rank


@pytorch_task(workers_count=2, collective_timeout=datetime.timedelta(seconds=HANG_TIMEOUT_S))
def drill_task(victim: int, directory: str, fault: str) -> int:
    """Three ranks in an all-reduce loop; ``victim`` injects ``fault`` ("sigkill", "raise", "hang", "none")."""
    return _step_loop(victim, directory, fault)


@pytorch_task(workers_count=2, collective_timeout=datetime.timedelta(seconds=HANG_TIMEOUT_S))
def no_join_task(victim: int, directory: str, fault: str) -> int:
    """Three ranks; ``victim`` returns without ever calling ``init_process_group`` (the others wait for it)."""
    import os as _os

    if int(_os.environ["RANK"]) == victim:
        _note(directory, "injected")
        return victim
    return _step_loop(-1, directory, fault)


def _procs_with_marker(marker: str) -> list[int]:
    """Pids whose initial environment carries ``FLYTE_DRILL_MARKER=<marker>``."""
    needle = f"{MARKER_ENV}={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def descendants(pid: int) -> list[int]:
    """Living descendants of ``pid`` (from /proc), zombies excluded.

    Args:
        pid: the ancestor.

    Returns:
        list[int]: pids of its children, grandchildren, ...
    """
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] == "Z":
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def is_multiprocessing_helper(pid: int) -> bool:
    """multiprocessing's resource tracker or fork server: one each per parent process, both exit with the parent.

    The fork server stays between launches so that later ones start ranks in under a second; the ranks it forks
    are separate processes and are still counted.
    """
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        # A server forked from the launcher keeps the launcher's command line; it names itself instead.
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return False
    return b"resource_tracker" in cmdline or b"multiprocessing.forkserver" in cmdline or comm == FORKED_SERVER_NAME


def _wait_gone(marker: str, within_s: float = 10.0) -> list[int]:
    deadline = time.monotonic() + within_s
    left = _procs_with_marker(marker)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = _procs_with_marker(marker)
    return left


_SCRIPT = """
import sys
from tests.faults.drills_local import drill_task
if __name__ == "__main__":
    drill_task(victim=-1, directory=sys.argv[1], fault="none")
"""


def _run_in_subprocess(fault: str, directory: str, marker: str, bound_s: float) -> dict[str, Any]:
    """SIGTERM / SIGINT drill: run the task in a child Python, signal it once all ranks are up."""
    sig = signal.SIGTERM if fault == "sigterm" else signal.SIGINT
    env = dict(os.environ, **{MARKER_ENV: marker, "PYTHONPATH": str(REPO_ROOT)})
    proc = subprocess.Popen(
        [sys.executable, "-c", _SCRIPT, directory],
        env=env,
        cwd=str(REPO_ROOT),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list(Path(directory).glob("up-*"))) < 3 and proc.poll() is None:
        time.sleep(0.1)
    injected = time.time()
    proc.send_signal(sig)
    try:
        output, _ = proc.communicate(timeout=bound_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        output, _ = proc.communicate()
    detect_s = time.time() - injected
    leftover = _wait_gone(marker, within_s=2.0)
    return {
        "observed": f"launcher exit code {proc.returncode}; last output: {output.decode(errors='replace')[-300:]!r}",
        "detect_s": round(detect_s, 2),
        "leftover_procs": leftover,
        "returncode": proc.returncode,
    }


DRILLS = {
    "sigkill": (
        "rank 1 SIGKILLs itself while the others are in an all-reduce loop",
        "task fails naming rank 1 and SIGKILL",
    ),
    "raise": (
        "rank 2 raises ValueError while the others are inside an all-reduce",
        "ValueError of rank 2 is the root cause",
    ),
    "hang": (
        f"rank 1 never reaches the next collective; collective timeout {HANG_TIMEOUT_S:.0f}s",
        "fails at the collective timeout; the headline names rank 1, still running, and where it was",
    ),
    "no_join": (
        f"rank 1 returns without calling init_process_group; collective timeout {HANG_TIMEOUT_S:.0f}s",
        "fails at the collective timeout, naming rank 1 as returned without joining",
    ),
    "sigterm": ("SIGTERM to the launching process while 3 ranks train", "all ranks stop, no orphans, prompt exit"),
    "sigint": ("SIGINT (Ctrl-C) to the launching process while 3 ranks train", "all ranks stop, no orphans"),
}
VICTIM = {"sigkill": 1, "raise": 2, "hang": 1, "no_join": 1}


def run_drill(drill: str, bound_s: float = DEFAULT_BOUND_S) -> dict[str, Any]:
    """Run one local fault drill and report what happened.

    Args:
        drill: one of ``DRILLS`` ("sigkill", "raise", "hang", "sigterm", "sigint").
        bound_s: seconds the launcher may take to report the fault (the hang drill adds its collective timeout).

    Returns:
        dict[str, Any]: ``drill``, ``injected``, ``expected``, ``observed`` (the error text or the exit code),
        ``detect_s`` (seconds from injection to failure), ``leftover_procs`` (pids still alive afterwards), and
        ``error`` (the exception, for in-process drills).

    Raises:
        ValueError: unknown ``drill``.
    """
    if drill not in DRILLS:
        raise ValueError(f"drill={drill!r} is unknown; use one of {sorted(DRILLS)}")
    injected, expected = DRILLS[drill]
    report: dict[str, Any] = {"drill": drill, "injected": injected, "expected": expected}
    marker = uuid.uuid4().hex
    with tempfile.TemporaryDirectory(prefix=f"drill-{drill}-") as directory:
        if drill in ("sigterm", "sigint"):
            report.update(_run_in_subprocess(drill, directory, marker, bound_s))
            return report
        before = set(descendants(os.getpid()))
        error: BaseException | None = None
        try:
            task = no_join_task if drill == "no_join" else drill_task
            task(victim=VICTIM[drill], directory=directory, fault=drill)
        except Exception as exc:  # noqa: BLE001 - the drill reports whatever came out
            error = exc
        failed_at = time.time()
        injected_file = Path(directory, "injected")
        start = float(injected_file.read_text()) if injected_file.exists() else failed_at
        leftover = [pid for pid in descendants(os.getpid()) if pid not in before and not is_multiprocessing_helper(pid)]
        report.update(
            {
                "observed": f"{type(error).__name__}: {error}" if error is not None else "the task succeeded",
                "detect_s": round(failed_at - start, 2),
                "leftover_procs": leftover,
                "error": error,
            }
        )
    return report


if __name__ == "__main__":
    for name in sys.argv[1:] or list(DRILLS):
        result = run_drill(name)
        result.pop("error", None)
        print(result)
