"""Preemption drills: SIGTERM (then SIGKILL after the grace) to ranks, to every rank, to the launcher, to one pod of
three, at the moments that matter; then the next run resumes. ``tests/faults/test_preemption_drills.py`` asserts on
the reports, ``benchmarks/fault_report.py`` could print them.

Local drills launch ``tests.faults.preempt_run`` (3 real ranks through the core launcher) in a process group of its
own, with ``TMPDIR`` pointing into the drill's folder: the launcher's automatic checkpoint folder for the execution
(the same task with the same inputs) lives there, so a second run of the same command resumes from it, and a run
that ends without a preemption removes it. The pod drill starts three ``pyflyte-execute`` processes with the
operator's variables (one rank per pod, ``_run_direct``), each its own "pod" over loopback sharing only the process
group's store, as on a cluster; its second attempt is a Flyte retry (a new checkpoint prefix, the first attempt's as
``--prev-checkpoint``).

Every run has a process-count guard and a timeout; every drill runs once.

Each report states: the step every rank stopped after, the step the next run resumed at, the steps recomputed (the
steps the interrupted run completed beyond the checkpoint the next run resumed from), the retries charged to the
user (a local re-run is not a retry; a Flyte retry of an error document of system origin is the system's), whether
the final weights equal an uninterrupted run's, and the wall time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from tests.sdk.guarded_run import group_members

REPO_ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
#: The launcher, its fork server and resource tracker, 3 ranks, slack (a nested launch would pass it).
MAX_PROCS = 10
#: One launch must end within this (a few seconds on an idle machine; CI's is shared).
RUN_TIMEOUT_S = 150.0
#: The grace the drills run with: a local launcher's own (FLYTE_PYTORCH_TERMINATION_GRACE_S, default 5 s).
GRACE_S = 5.0
#: The inputs every drill trains with (10 steps of 0.2 s, a checkpoint every 4).
INPUTS: dict[str, Any] = {"steps": 10, "step_seconds": 0.2, "every": 4}


@dataclass
class Launch:
    """One run of a drill.

    Attributes:
        returncode: its exit status (``None``: the guard killed it).
        output: stdout and stderr.
        wall_s: seconds it ran.
        killed_for: why the guard killed it, or ``""``.
        signalled_at: ``time.time()`` of the first signal sent, or ``None``.
        leftover: processes of its group alive after it ended (killed afterwards).
    """

    returncode: Optional[int]
    output: str
    wall_s: float
    killed_for: str = ""
    signalled_at: Optional[float] = None
    leftover: list[int] = field(default_factory=list)


def _env(directory: Path, run: str, extra: Optional[dict[str, str]] = None) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("FLYTE_PYTORCH_", "PET_", "TORCHELASTIC"))
        and k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK")
    }
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env["TMPDIR"] = str(directory / "tmp")
    env["PREEMPT_DRILL_RUN"] = run
    env["PREEMPT_DRILL_DIR"] = str(directory)
    env["FLYTE_PYTORCH_PROGRESS_LINE"] = "0"
    (directory / "tmp").mkdir(parents=True, exist_ok=True)
    env.update(extra or {})
    return env


def _pids(directory: Path, run: str) -> dict[int, int]:
    found = {}
    for path in directory.glob(f"pid-{run}-*"):
        try:
            found[int(path.name.rsplit("-", 1)[1])] = int(path.read_text())
        except (OSError, ValueError):
            continue
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def launch(
    cmd: list[str],
    env: dict[str, str],
    *,
    ready: Any = None,
    act: Any = None,
    timeout_s: float = RUN_TIMEOUT_S,
    max_procs: int = MAX_PROCS,
) -> Launch:
    """Run ``cmd`` in a new session under a process-count guard; once ``ready()`` is true, call ``act(proc)`` (it
    sends the signals and returns the time of the first) and keep calling it (``act`` may act again later, e.g. a
    SIGKILL after the grace) until the command ends.

    Args:
        cmd: the command.
        env: its environment.
        ready: a function returning True when the drill may act (polled every 20 ms), or ``None``.
        act: ``act(proc, first_call) -> Optional[float]``.
        timeout_s: wall-clock limit.
        max_procs: the most processes its group may hold.

    Returns:
        Launch: what happened; its whole group is SIGKILLed before this returns.
    """
    log = Path(env["PREEMPT_DRILL_DIR"]) / f"log-{env['PREEMPT_DRILL_RUN']}-{time.monotonic_ns()}.txt"
    env = {**env, "PYTHONFAULTHANDLER": "1"}  # a run stopped for its time limit shows where each process was
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, cwd=str(REPO_ROOT), env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    started = time.monotonic()
    killed_for, signalled_at, acted = "", None, False
    try:
        while proc.poll() is None:
            if len(group_members(proc.pid)) > max_procs:
                killed_for = f"more than {max_procs} processes"
                break
            if time.monotonic() - started > timeout_s:
                killed_for = f"still running after {timeout_s:.0f}s"
                break
            if act is not None and (acted or ready is None or ready()):
                when = act(proc, not acted)
                acted = True
                if signalled_at is None and when is not None:
                    signalled_at = when
            time.sleep(0.02)
        wall = time.monotonic() - started
        if killed_for.startswith("still running"):
            _dump_stacks(group_members(proc.pid))
        left = group_members(proc.pid)
        deadline = time.monotonic() + 5.0
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = group_members(proc.pid)
        return Launch(
            returncode=None if killed_for else proc.returncode,
            output=log.read_text(errors="replace"),
            wall_s=wall,
            killed_for=killed_for,
            signalled_at=signalled_at,
            leftover=left,
        )
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def _dump_stacks(pids: list[int]) -> None:
    """Have every process of a run that ran out of time write its Python stacks to the run's log (faulthandler,
    enabled by ``PYTHONFAULTHANDLER``, dumps them on SIGABRT), so that its failure says where it hung."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGABRT)
        except ProcessLookupError:
            pass
    time.sleep(2.0)


def run_local(directory: Path, run: str, *, inputs: Optional[dict[str, Any]] = None, **kw: Any) -> Launch:
    """One local launch of the drill loop (see :func:`launch` for the keywords)."""
    body = {**INPUTS, **(inputs or {}), "directory": str(directory)}
    env = _env(directory, run, kw.pop("env", None))
    return launch([PY, "-m", "tests.faults.preempt_run", "train", json.dumps(body)], env, **kw)


def result(run: Launch) -> Optional[list[float]]:
    """The weights a run printed, or ``None``."""
    for line in run.output.splitlines():
        if line.startswith("RESULT "):
            return list(json.loads(line[len("RESULT ") :]))
    return None


def _ints(directory: Path, pattern: str) -> dict[int, int]:
    found = {}
    for path in directory.glob(pattern):
        try:
            found[int(path.name.rsplit("-", 1)[1])] = int(path.read_text().strip())
        except (OSError, ValueError):
            continue
    return found


def notes(directory: Path, run: str) -> dict[str, Any]:
    """What the ranks of ``run`` noted: start and stop step per rank, rank 0's completed steps."""
    steps_file = directory / f"steps-{run}"
    steps = [int(line) for line in steps_file.read_text().split()] if steps_file.exists() else []
    return {
        "start": _ints(directory, f"start-{run}-*"),
        "stop": _ints(directory, f"stop-{run}-*"),
        "steps": steps,
    }


def _ready_after(directory: Path, run: str, kind: str = "up") -> Any:
    return lambda: len(list(directory.glob(f"{kind}-{run}-*"))) >= 3 and len(_pids(directory, run)) >= 3


def signal_ranks(directory: Path, run: str, ranks: list[int], *, kill_after_s: float = GRACE_S) -> Any:
    """An ``act`` that sends SIGTERM to ``ranks`` (their pids), then SIGKILL to those still alive after the grace,
    as the kubelet does to a pod."""
    sent: dict[str, float] = {}

    def act(proc: subprocess.Popen, first: bool) -> Optional[float]:
        pids = _pids(directory, run)
        if first:
            sent["at"] = time.time()
            for rank in ranks:
                os.kill(pids[rank], signal.SIGTERM)
            return sent["at"]
        if "killed" not in sent and time.time() - sent["at"] >= kill_after_s:
            sent["killed"] = time.time()
            for rank in ranks:
                if _alive(pids[rank]):
                    os.kill(pids[rank], signal.SIGKILL)
        return None

    return act


def ctrl_c() -> Any:
    """An ``act`` that sends SIGINT to the run's whole process group once, as a terminal's Ctrl-C does: the launcher,
    its fork server and every rank get it (and the launcher's agent forwards it again)."""

    def act(proc: subprocess.Popen, first: bool) -> Optional[float]:
        if first:
            at = time.time()
            os.killpg(proc.pid, signal.SIGINT)
            return at
        return None

    return act


def group_sigterm() -> Any:
    """An ``act`` that sends SIGTERM to the run's whole process group once, as ``kill -TERM -- -PGID``, systemd's
    ``KillMode=control-group``, Slurm's step signal or ``tini -g`` do: the launcher, its fork server, the resource
    tracker and every rank get it (and the launcher's agent forwards it again)."""

    def act(proc: subprocess.Popen, first: bool) -> Optional[float]:
        if first:
            at = time.time()
            os.killpg(proc.pid, signal.SIGTERM)
            return at
        return None

    return act


def signal_launcher(sig: signal.Signals = signal.SIGTERM) -> Any:
    """An ``act`` that sends ``sig`` to the launcher once (its agent forwards it, and SIGKILLs after its grace)."""

    def act(proc: subprocess.Popen, first: bool) -> Optional[float]:
        if first:
            at = time.time()
            proc.send_signal(sig)
            return at
        return None

    return act


def same(a: Optional[list[float]], b: Optional[list[float]]) -> bool:
    """Equal weights (within 1e-6; the drills have found them bitwise equal)."""
    if a is None or b is None or len(a) != len(b):
        return False
    return all(abs(x - y) <= 1e-6 for x, y in zip(a, b, strict=True))


def recomputed(first: dict[str, Any], resumed_at: int) -> int:
    """Steps the interrupted run completed that the next run does again."""
    return sum(1 for step in first["steps"] if step > resumed_at)


def _collective(directory: Path, run: str, rank: int) -> list[tuple[str, int, float]]:
    path = directory / f"collective-{run}-{rank}"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3:
            out.append((parts[0], int(parts[1]), float(parts[2])))
    return out


def in_collective_now(directory: Path, run: str, rank: int) -> Any:
    """A ``ready`` for :func:`launch`: every rank is up and ``rank`` entered an all-reduce it has not left, within the
    last 50 ms (the slow rank keeps it there for a step's work)."""
    up = _ready_after(directory, run)

    def ready() -> bool:
        events = _collective(directory, run, rank)
        return up() and bool(events) and events[-1][0] == "enter" and time.time() - events[-1][2] < 0.05

    return ready


def inside_collective(directory: Path, run: str, rank: int, at: float) -> Optional[int]:
    """The step whose all-reduce ``rank`` was inside at ``at`` (it entered before and left after), or ``None``."""
    entered: dict[int, float] = {}
    for kind, step, when in _collective(directory, run, rank):
        if kind == "enter":
            entered[step] = when
        elif step in entered and entered[step] <= at <= when:
            return step
    return None


# ---------------------------------------------------------------- one rank per pod: three pyflyte-execute ---------


@dataclass
class Pod:
    """One pod of a pod drill's attempt.

    Attributes:
        rank: its rank (``RANK``).
        returncode: the container's exit code (``None``: the guard killed it).
        log: its output.
    """

    rank: int
    returncode: Optional[int]
    log: str


def _serialized_args() -> list[str]:
    from collections import OrderedDict

    from flytekit.configuration import Image, ImageConfig, SerializationSettings
    from flytekit.tools.translator import get_serializable

    from tests.faults.preempt_pod_tasks import pod_train

    image = Image.look_up_image_info("default", "localhost/flytekitplugins-pytorch-drill:venv")
    settings = SerializationSettings(image_config=ImageConfig(default_image=image, images=[image]))
    return list(get_serializable(OrderedDict(), settings, pod_train).template.container.args)


def write_pod_inputs(path: Path, inputs: dict[str, Any]) -> None:
    """Write the pod task's ``inputs.pb`` as propeller would.

    Args:
        path: the file.
        inputs: the task's inputs.
    """
    from flytekit.core import utils
    from flytekit.core.context_manager import FlyteContextManager
    from flytekit.core.type_engine import TypeEngine

    from tests.faults.preempt_pod_tasks import pod_train

    hints = {name: var for name, var in pod_train.python_interface.inputs.items()}
    literals = TypeEngine.dict_to_literal_map(FlyteContextManager.current_context(), inputs, hints)
    utils.write_proto_to_file(literals.to_flyte_idl(), str(path))


def read_pod_output(output_prefix: Path) -> Optional[list[float]]:
    """The weights in an attempt's ``outputs.pb``, or ``None`` when there is none.

    Args:
        output_prefix: the attempt's output prefix.

    Returns:
        Optional[list[float]]: the weights.
    """
    from flyteidl.core import literals_pb2
    from flytekit.core import utils
    from flytekit.core.context_manager import FlyteContextManager
    from flytekit.core.type_engine import TypeEngine
    from flytekit.models.literals import LiteralMap

    path = output_prefix / "outputs.pb"
    if not path.exists():
        return None
    literals = LiteralMap.from_flyte_idl(utils.load_proto_from_file(literals_pb2.LiteralMap, str(path)))
    values = TypeEngine.literal_map_to_kwargs(FlyteContextManager.current_context(), literals, {"o0": list[float]})
    return list(values["o0"])


def run_pods(
    directory: Path, run: str, *, attempt: int, checkpoint: Path, prev: str, act: Any = None, grace_s: float = GRACE_S
) -> tuple[list[Pod], Path, float]:
    """One attempt of the pod drill: three ``pyflyte-execute`` pods (ranks 0, 1, 2) over loopback.

    Args:
        directory: the drill's folder (``inputs.pb`` is written there first).
        run: this attempt's run name in the notes.
        attempt: Flyte's attempt number.
        checkpoint: this attempt's checkpoint prefix.
        prev: the previous attempt's, or ``""``.
        act: as for :func:`launch`, once every pod's rank finished its first step.
        grace_s: the termination grace the pods count on.

    Returns:
        tuple[list[Pod], Path, float]: the pods, the attempt's output prefix, and the attempt's wall time.
    """
    from tests.faults.drills_retry import fill_args
    from tests.helpers.tcp_store import free_port

    inputs_pb = directory / "inputs.pb"
    if not inputs_pb.exists():
        write_pod_inputs(
            inputs_pb, {**{k: INPUTS[k] for k in ("steps", "step_seconds", "every")}, "directory": str(directory)}
        )
    output_prefix = directory / f"out-{attempt}"
    cmd = fill_args(
        _serialized_args(),
        inputs=inputs_pb,
        output_prefix=output_prefix,
        raw=directory / "raw",
        checkpoint=checkpoint,
        prev=prev,
    )
    port = free_port()
    procs = []
    for rank in range(3):
        env = _env(
            directory,
            run,
            {
                "RANK": str(rank),
                "WORLD_SIZE": "3",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
                "_F_WN": f"pod-{rank}",
                "_F_DES": "Earliest",
                "FLYTE_FAIL_ON_ERROR": "true",
                "FLYTE_ATTEMPT_NUMBER": str(attempt),
                "FLYTE_PYTORCH_TERMINATION_GRACE_S": f"{grace_s:g}",
                "HOME": str(directory / "home"),
                "PATH": f"{Path(PY).parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
            },
        )
        (directory / "home").mkdir(exist_ok=True)
        log = (directory / f"pod-{run}-{rank}.log").open("wb")
        procs.append(
            (
                rank,
                subprocess.Popen(
                    cmd, cwd=str(directory), env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                ),
                log,
            )
        )
    started = time.monotonic()
    ready = _ready_after(directory, run)
    acted = False
    killed = False
    try:
        while any(p.poll() is None for _, p, _ in procs):
            count = sum(len(group_members(p.pid)) for _, p, _ in procs)
            if count > 3 * 4 or time.monotonic() - started > RUN_TIMEOUT_S:
                killed = True
                break
            if act is not None and (acted or ready()):
                act(None, not acted)
                acted = True
            time.sleep(0.02)
    finally:
        for _, p, log in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
            log.close()
    wall = time.monotonic() - started
    pods = [
        Pod(rank, None if killed else p.returncode, (directory / f"pod-{run}-{rank}.log").read_text(errors="replace"))
        for rank, p, _ in procs
    ]
    return pods, output_prefix, wall


def error_documents(output_prefix: Path) -> list[Any]:
    """The error documents an attempt's pods wrote (``error-<uuid>.pb``), as flyteidl messages."""
    from flyteidl.core import errors_pb2
    from flytekit.core import utils

    return [
        utils.load_proto_from_file(errors_pb2.ErrorDocument, str(p)) for p in sorted(output_prefix.glob("error*.pb"))
    ]
