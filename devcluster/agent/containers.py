"""One container's process and its status, as the kubelet and a container runtime keep them.

The process is started in a session of its own (its group is the container; what its command forks stays in it),
its output appended to the container's log. `stop` is the runtime's StopContainer: SIGTERM to the main process only,
then, after the grace period, SIGKILL to everything left of the container (its process group) — and the pod's
sandbox teardown kills whatever is left in its network namespace, as a cgroup kill would.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LOG_TAIL_LINES = 80
LOG_TAIL_BYTES = 2048
"""FallbackToLogsOnError: the kubelet keeps the last 80 lines of a failed container's log, at most 2048 bytes."""


def all_at_once(calls: list[Callable[[], object]]) -> None:
    """Run `calls` each in a thread of its own and wait for all of them: stops whose grace periods run together, as
    the kubelet's do."""
    threads = [threading.Thread(target=call, daemon=True) for call in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def image_paths(argv: list[str]) -> list[str]:
    """The folders that stand for the container's image: this machine's environment (the repository and its
    virtual environment) and the folder of a built binary the command names. A volume mounted over one of their
    parents (an emptyDir on /tmp, with the repository cloned under /tmp) must not hide them: an image's files stay
    where they are whatever volume a pod mounts beside them."""
    paths = [str(Path(__file__).resolve().parents[2]), sys.prefix]
    if argv and os.path.isabs(argv[0]):
        paths.append(os.path.dirname(argv[0]))
    return list(dict.fromkeys(os.path.normpath(p) for p in paths))


@dataclass
class Container:
    """A container of a pod (init, sidecar or regular) and what the kubelet reports of it."""

    spec: dict
    kind: str  # "init", "sidecar" or "regular"
    log_dir: Path
    termination_file: Path
    restart_count: int = 0
    process: subprocess.Popen | None = None
    container_id: str = ""
    started_at: str = ""
    state: dict = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: dict = field(default_factory=dict)
    ready: bool = False
    exit_code: int | None = None
    next_start: float = 0.0  # monotonic time before which a restart waits (the crash-loop back-off)
    judged: bool = False  # its last exit was judged by the restart policy
    final: bool = False  # it exited and will not be restarted
    backoff_s: float = 0.0
    running_since: float = 0.0
    probe: Any = None  # the readiness prober, when the container has a readinessProbe
    liveness: Any = None
    startup: Any = None
    started_ok: bool = False  # its startup probe succeeded (or it has none)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    @property
    def log_file(self) -> Path:
        return self.log_dir / f"{self.restart_count}.log"

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(
        self, argv: list[str], env: dict[str, str], mounts: list, netns: str, hostname: str, spec_file: Path
    ) -> None:
        """Start the container's command in the pod's namespaces."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.termination_file.parent.mkdir(parents=True, exist_ok=True)
        self.termination_file.write_bytes(b"")
        spec_file.write_text(
            json.dumps(
                {
                    "argv": argv,
                    "env": env,
                    "workingDir": self.spec.get("workingDir"),
                    "mounts": mounts,
                    "hostname": hostname,
                    "image": image_paths(argv),
                }
            )
        )
        out = self.log_file.open("ab")
        try:
            self.process = subprocess.Popen(
                ["ip", "netns", "exec", netns, sys.executable, "-m", "devcluster.agent.exec", str(spec_file)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(Path(__file__).parents[2])},
            )
        finally:
            out.close()
        self.container_id = f"devcluster://{uuid.uuid4().hex}"
        self.started_at = now_rfc3339()
        self.running_since = time.monotonic()
        self.exit_code = None
        self.judged = self.final = self.started_ok = False
        self.state = {"running": {"startedAt": self.started_at}}
        self.ready = True  # until a readiness probe says otherwise

    def finished(self) -> int | None:
        """The exit code once the process ended (128 + n for a signal), else None; records the terminated state."""
        if self.process is None or self.exit_code is not None:
            return self.exit_code
        code = self.process.poll()
        if code is None:
            return None
        self.exit_code = 128 - code if code < 0 else code
        reason = "Completed" if self.exit_code == 0 else "Error"
        terminated: dict[str, Any] = {
            "exitCode": self.exit_code,
            "reason": reason,
            "startedAt": self.started_at,
            "finishedAt": now_rfc3339(),
            "containerID": self.container_id,
        }
        if code < 0:
            terminated["signal"] = -code
        message = self._termination_message()
        if message:
            terminated["message"] = message
        self.state = {"terminated": terminated}
        self.ready = False
        return self.exit_code

    def _termination_message(self) -> str:
        try:
            text = self.termination_file.read_text(errors="replace")[:4096]
        except OSError:
            text = ""
        if text or self.spec.get("terminationMessagePolicy") != "FallbackToLogsOnError" or self.exit_code == 0:
            return text
        try:
            data = self.log_file.read_bytes()
        except OSError:
            return ""
        lines = data.splitlines(keepends=True)[-LOG_TAIL_LINES:]
        return b"".join(lines)[-LOG_TAIL_BYTES:].decode(errors="replace")

    def stop(self, grace_s: float) -> None:
        """SIGTERM to the main process, SIGKILL to the container's process group after `grace_s`."""
        proc = self.process
        if proc is None or proc.poll() is not None:
            return
        try:
            os.kill(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + max(grace_s, 0)
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()

    def stop_probes(self) -> None:
        for prober in (self.probe, self.liveness, self.startup):
            if prober is not None:
                prober.stop()
        self.probe = self.liveness = self.startup = None

    def kill_leftovers(self) -> None:
        """SIGKILL what is left of the container's process group after its main process ended."""
        if self.process is not None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def status(self, image: str) -> dict:
        out: dict[str, Any] = {
            "name": self.name,
            "image": image,
            "imageID": f"devcluster://{image}",
            "ready": self.ready,
            "restartCount": self.restart_count,
            "state": self.state,
            "lastState": self.last_state,
            "started": "running" in self.state and self.started_ok,
        }
        if self.container_id:
            out["containerID"] = self.container_id
        return out
