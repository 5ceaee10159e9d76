"""Processes devcluster starts, recorded before they run, so that `down` stops every one of them, even after a
crashed `up`.

Each process is started in a session of its own (it leads its process group, so a stop reaches its children) and
recorded in `<state>/processes.jsonl` with its pid and its start time in clock ticks (`/proc/<pid>/stat` field 22):
a pid the kernel has since given to another process is never signalled.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


def start_ticks(pid: int) -> int | None:
    """The start time of `pid` in clock ticks since boot, or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: fields are counted after its last ')'.
    return int(stat[stat.rindex(")") + 2 :].split()[19])


@dataclass(frozen=True)
class Proc:
    name: str
    pid: int
    ticks: int
    log: str
    argv: tuple[str, ...] = ()
    """What was run (with `ip netns exec <ns>` before it), for `Processes.restart`; () in an older record."""
    cwd: str = ""
    restartable: bool = False
    """Whether `argv` and `cwd` alone start it again (no environment of its own was given)."""

    def alive(self) -> bool:
        return start_ticks(self.pid) == self.ticks and not _zombie(self.pid)


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


_STARTED: dict[int, subprocess.Popen] = {}
"""Every process this Python process started, kept for its life: the cluster's processes outlive `up`, and a Popen
collected while its process runs warns (ResourceWarning), which a test session that starts the cluster itself turns
into an error of the first test's setup."""


class Processes:
    """The record of one cluster's processes."""

    def __init__(self, state: Path) -> None:
        self.file = state / "processes.jsonl"
        self.logs = state / "logs"
        self._children = _STARTED

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        netns: str | None = None,
    ) -> Proc:
        """Start `argv` (inside network namespace `netns` when given), its output to `logs/<name>.log`."""
        self.logs.mkdir(parents=True, exist_ok=True)
        log = self.logs / f"{name}.log"
        full = ["ip", "netns", "exec", netns, *argv] if netns else list(argv)
        with log.open("ab") as out:
            out.write(f"\n$ {' '.join(full)}\n".encode())
            out.flush()
            child = subprocess.Popen(
                full,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                start_new_session=True,
            )
        self._children[child.pid] = child
        ticks = start_ticks(child.pid) or 0
        proc = Proc(name, child.pid, ticks, str(log), tuple(full), str(cwd or ""), env is None)
        with self.file.open("a") as f:
            f.write(json.dumps(proc.__dict__) + "\n")
        return proc

    def restart(self, name: str, grace_s: float = 10.0) -> Proc:
        """Stop the newest running process called `name` (SIGTERM, SIGKILL after `grace_s`) and start it again as it
        was started (what the test tier does to the API server: a watch broken by a restart).

        Args:
            name: the recorded name, e.g. `kube-apiserver`.
            grace_s: how long it may take to stop.

        Returns:
            The new process (recorded, so that `down` stops it).

        Raises:
            RuntimeError: nothing of that name runs, or it cannot be started again from its record.
        """
        running = [p for p in self.recorded() if p.name == name and p.alive()]
        if not running:
            raise RuntimeError(f"no running process {name!r} in {self.file}")
        old = running[-1]
        if not old.restartable or not old.argv:
            raise RuntimeError(f"{name!r} was started with an environment of its own or by an older devcluster")
        self._stop(old, grace_s)
        argv = list(old.argv)
        netns = argv[3] if argv[:3] == ["ip", "netns", "exec"] else None
        return self.start(name, argv[4:] if netns else argv, cwd=Path(old.cwd) if old.cwd else None, netns=netns)

    def recorded(self) -> list[Proc]:
        if not self.file.exists():
            return []
        out = []
        for line in self.file.read_text().splitlines():
            if line.strip():
                record = json.loads(line)
                out.append(Proc(**{**record, "argv": tuple(record.get("argv") or ())}))
        return out

    def exited(self, proc: Proc) -> int | None:
        """The exit status of a process this object started, or None while it runs."""
        child = self._children.get(proc.pid)
        if child is not None:
            return child.poll()
        return None if proc.alive() else -1

    def stop_all(self, grace_s: float = 10.0) -> list[str]:
        """Stop every recorded process group, newest first and one at a time (the node agent and the controllers
        before the API server, the API server before etcd, which it still writes to while it shuts down): SIGTERM,
        then SIGKILL after `grace_s`. Returns the names of those that had to be killed."""
        killed = [p.name for p in reversed(self.recorded()) if p.alive() and self._stop(p, grace_s)]
        self._reap()
        return killed

    def _stop(self, proc: Proc, grace_s: float) -> bool:
        """SIGTERM to the process group, SIGKILL after `grace_s` (then up to 5 s for it to go); whether it was
        killed."""
        _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and proc.alive():
            self._reap()
            time.sleep(0.05)
        if not proc.alive():
            return False
        _signal_group(proc.pid, signal.SIGKILL)
        end = time.monotonic() + 5
        while time.monotonic() < end and proc.alive():
            self._reap()
            time.sleep(0.05)
        return True

    def _reap(self) -> None:
        for child in list(self._children.values()):
            child.poll()


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:
        os.kill(pid, sig)
