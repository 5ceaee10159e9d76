"""Run a command in its own process group under a process-count guard and a timeout (for launches that could
multiply processes). Used by tests/sdk/test_nested_launch.py; also runnable by hand:

    python -m tests.sdk.guarded_run MAX_PROCS TIMEOUT_S -- command args...
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


def descendants(pid: int) -> list[int]:
    """Living descendants of ``pid`` (from /proc, zombies excluded).

    Args:
        pid: the ancestor.

    Returns:
        list[int]: the pids.
    """
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def group_members(pgid: int) -> list[int]:
    """Living processes of process group ``pgid`` (descendants that were re-parented to init included)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "(gone)"


@dataclass
class Guarded:
    """What a guarded run did.

    Attributes:
        returncode: the command's exit status (``None`` when it was killed by the guard).
        output: its stdout and stderr, interleaved.
        elapsed_s: seconds until it ended or was killed.
        peak_procs: the most processes (itself included) seen at once in its group.
        killed_for: ``""``, or why the guard killed it (too many processes, timeout).
        leftover: processes of its group still alive 10 s after it ended (before the guard's final kill), as
            ``"pid: command line"``.
    """

    returncode: int | None
    output: str
    elapsed_s: float
    peak_procs: int
    killed_for: str
    leftover: list[str]


def run_guarded(cmd: list[str], *, max_procs: int, timeout_s: float, cwd: str, env: dict[str, str]) -> Guarded:
    """Run ``cmd`` in a new session; kill its whole group when it exceeds ``max_procs`` processes or ``timeout_s``.

    Args:
        cmd: the command.
        max_procs: the most processes its group may hold at once.
        timeout_s: wall-clock limit.
        cwd: working directory.
        env: environment.

    Returns:
        Guarded: the outcome. The group is always killed (SIGKILL) before this returns.
    """
    # in the temp dir, not in `cwd`: a run from the repository root must not leave files a `git add -A` would take
    fd, name = tempfile.mkstemp(prefix="guarded-", suffix=".log")
    out_path = Path(name)
    with os.fdopen(fd, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    pgid = proc.pid
    start = time.monotonic()
    peak, killed_for = 1, ""
    try:
        while proc.poll() is None:
            count = len(group_members(pgid))
            peak = max(peak, count)
            if count > max_procs:
                killed_for = f"{count} processes (more than {max_procs})"
                break
            if time.monotonic() - start > timeout_s:
                killed_for = f"still running after {timeout_s:.0f}s"
                break
            time.sleep(0.05)
        elapsed = time.monotonic() - start
        if killed_for:
            os.killpg(pgid, signal.SIGKILL)
            proc.wait()
            left: list[int] = []
        else:
            # The fork server and the resource tracker notice their parent's end within moments; ranks never do.
            deadline = time.monotonic() + 10.0
            left = group_members(pgid)
            while left and time.monotonic() < deadline:
                time.sleep(0.1)
                left = group_members(pgid)
        return Guarded(
            returncode=None if killed_for else proc.returncode,
            output=out_path.read_text(errors="replace"),
            elapsed_s=elapsed,
            peak_procs=peak,
            killed_for=killed_for,
            leftover=[f"{pid}: {_cmdline(pid)}" for pid in left],
        )
    finally:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        out_path.unlink(missing_ok=True)


if __name__ == "__main__":
    sep = sys.argv.index("--")
    result = run_guarded(
        sys.argv[sep + 1 :],
        max_procs=int(sys.argv[1]),
        timeout_s=float(sys.argv[2]),
        cwd=os.getcwd(),
        env=dict(os.environ),
    )
    print(result.output[-3000:])
    print(
        f"returncode={result.returncode} elapsed={result.elapsed_s:.1f}s peak={result.peak_procs} "
        f"killed_for={result.killed_for!r} leftover={result.leftover}"
    )
