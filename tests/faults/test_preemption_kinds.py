"""Preemption drills on every kind's e2e player: the connector creates the job, the player (the training operator, the
Trainer, the JobSet controller, and the kubelet) runs three ``pyflyte-execute`` pods of one rank each
(``tests.faults.preempt_kind_tasks``, the loop of ``tests.faults.preempt_tasks``), and the drill disrupts them:

- ``one-worker``: SIGTERM to one worker pod mid-step (its ``DisruptionTarget`` condition first), SIGKILL after the
  grace;
- ``drain``: every pod at once (a drained node);
- ``slow-save``: the pod of rank 0 (the rank that saves) after the first periodic checkpoint, with a checkpoint at
  the preemption slower than the grace (the SIGKILL cuts it; the periodic checkpoint stands);
- ``kueue``: Kueue suspends the whole job (its pods are deleted) and admits it again;
- ``first-step``: one worker during the first step, before any checkpoint.

Each kind carries on its own way: a PyTorchJob with ``restart_policy="ExitCode"`` has its pods recreated by the
operator (exit 200 is retryable; ``backoffLimit`` is not spent), a JobSet restarts itself (the ``Preempted`` rule, not
counted toward ``maxRestarts``), a TrainJob of the default runtime fails retryably and Flyte retries it (one of the
task's ``retries``: the connector protocol carries no origin). Each drill prints its row: the step every rank stopped
after, the step the run resumed at, the steps recomputed, the retries charged, the time; and checks that the job
ends with the weights of an uninterrupted run (same seed, same world size).

Two combinations run in the faults tier (``IN_CI``), those the real control plane's tier does not run; the other
thirteen are in the slow tier and run with ``PREEMPT_KIND_DRILLS=all``. Every drill has a process-count guard and a
deadline.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from flyteidl.core.execution_pb2 import TaskExecution

from tests.connector.helpers import execution_metadata, make_connector
from tests.e2e import harness
from tests.e2e.harness import BlobStore, FakeJobSet, FakeOperator, FakeTrainer, JobRun, JobSetRun
from tests.fakeapi.fixtures import running_fake_api
from tests.faults import drills_preempt as drills
from tests.faults import preempt_kind_tasks
from tests.sdk.guarded_run import group_members

pytestmark = [pytest.mark.faults]

GRACE_S = 10.0
"""The pods' termination grace (the player's SIGKILL, `FLYTE_PYTORCH_TERMINATION_GRACE_S`): scaled down from 30 s,
still several steps' worth on a loaded 2-core machine (a rank that has not reached the agreed step by then is killed,
which is what the slow-save drill tests on purpose, not what the others test)."""
SLOW_SAVE_GRACE_S = 3.0
"""The grace in the slow-save drill."""
SLOW_SAVE_S = 8.0
"""The checkpoint at a preemption in the slow-save drill: longer than its grace."""
FIRST_STEP_S = 0.6  # `step_seconds` of the first-step drill: the drill signals a worker inside step 1
JOB_TIMEOUT_S = float(os.environ.get("PREEMPT_KIND_TIMEOUT_S", "150"))
MAX_PROCS = 3 * 6
"""Processes the job's pods may hold at once: pyflyte-execute, the launcher's rank and its helpers, per pod."""
INPUTS = {**drills.INPUTS}

PLAYERS = {"pytorchjob": FakeOperator, "trainjob": FakeTrainer, "jobset": FakeJobSet}
TASKS = {"pytorchjob": "kind_train_exit_code", "trainjob": "kind_train", "jobset": "kind_train"}
WORKER = {"pytorchjob": "worker-0", "trainjob": "node-1", "jobset": "worker-0"}
"""The pod of global rank 1 on each kind."""
MASTER = {"pytorchjob": "master-0", "trainjob": "node-0", "jobset": "master-0"}
"""The pod of global rank 0, the rank that saves."""

DRILLS = ("one-worker", "drain", "slow-save", "kueue", "first-step")
IN_CI = {("pytorchjob", "slow-save"), ("trainjob", "first-step")}
"""The combinations the faults tier runs (about 25 s each): the two the real control plane does not (a checkpoint
at the preemption slower than the grace; a preemption during the first step). One pod lost, a drain and Kueue run on
the real controllers instead (`tests/cluster/test_preemption.py`: an eviction, a `kubectl drain`, a spot loss, Kueue's
preemption). The other thirteen run with ``PREEMPT_KIND_DRILLS=all`` (the slow tier; the table in docs/faults.md has
every combination)."""
ALL = os.environ.get("PREEMPT_KIND_DRILLS") == "all"
KIND_DRILLS = [
    pytest.param(
        kind,
        drill,
        id=f"{kind}-{drill}",
        marks=(
            ()
            if (kind, drill) in IN_CI
            else (pytest.mark.slow, pytest.mark.skipif(not ALL, reason="the full matrix: PREEMPT_KIND_DRILLS=all"))
        ),
    )  # fmt: skip
    for kind in PLAYERS
    for drill in DRILLS
]


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> list[float]:
    """The weights of an uninterrupted run of the same loop and inputs on three local ranks."""
    directory = tmp_path_factory.mktemp("baseline")
    run = drills.run_local(directory, "base")
    assert run.returncode == 0, run.output[-4000:]
    weights = drills.result(run)
    assert weights is not None
    return weights


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return harness.package_tasks(["tests.faults.preempt_kind_tasks"], tmp_path_factory.mktemp("package"))


@contextmanager
def guarded(player: FakeOperator, errors: list[str]) -> Iterator[None]:
    """A process-count guard over every pod the player started: past `MAX_PROCS`, every pod is killed."""
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.2):
            with player._lock:
                pods = [r for run in player.runs.values() for r in run.replicas if r.process is not None]
            count = sum(len(group_members(r.process.pid)) for r in pods if r.process is not None)
            if count > MAX_PROCS:
                errors.append(f"{count} processes in the job's pods (more than {MAX_PROCS})")
                player._kill(pods)
                return

    thread = threading.Thread(target=watch, name="process-guard", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


def _wait(what: str, ready: Any, timeout_s: float = JOB_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _steps_done(directory: Path) -> int:
    return len(drills.notes(directory, "a")["steps"])


def _act(drill: str, player: FakeOperator, run: JobRun, kind: str, directory: Path, connector: Any, meta: Any) -> str:
    """Disrupt the job; returns the phase the connector reported while it was disrupted ("" when not polled)."""
    if drill == "first-step":
        # every rank armed: `on_preemption` comes before `load_checkpoint`, which notes the start. A rank signalled
        # before it armed ends at once, as under torchrun, and stops at no agreed step (seen under load, when the
        # drill waited for the ranks' pids only)
        _wait("every rank armed", drills._ready_after(directory, "a", "start"))
        assert _steps_done(directory) == 0
        player.preempt(run, WORKER[kind])
        return ""
    if drill == "slow-save":
        _wait("the first periodic checkpoint", lambda: _steps_done(directory) > INPUTS["every"])
        player.preempt(run, MASTER[kind])
        return ""
    _wait("two steps", lambda: _steps_done(directory) >= 2)
    if drill == "one-worker":
        player.preempt(run, WORKER[kind])
        return ""
    if drill == "drain":
        player.drain(run)
        return ""
    assert drill == "kueue"
    player.suspend(run)
    seen = connector.get(meta)
    assert seen.phase == TaskExecution.QUEUED, seen.message
    player.resume(run)
    return f"{TaskExecution.Phase.Name(seen.phase)} ({seen.message})"


@pytest.mark.parametrize(("kind", "drill"), KIND_DRILLS)
def test_a_preemption_on_each_kind(kind: str, drill: str, templates, baseline, tmp_path: Path) -> None:
    began = time.monotonic()
    directory = tmp_path / "notes"
    directory.mkdir()
    task = TASKS[kind]
    interface = getattr(preempt_kind_tasks, task).python_interface
    inputs = {**INPUTS, "directory": str(directory), "slow_save_s": SLOW_SAVE_S if drill == "slow-save" else 0.0}
    if drill == "first-step":  # a first step long enough to be signalled in on a loaded machine (same weights)
        inputs["step_seconds"] = FIRST_STEP_S
    literals = harness.to_literal_map(inputs, interface.inputs)
    grace_s = SLOW_SAVE_GRACE_S if drill == "slow-save" else GRACE_S
    env = {"PREEMPT_DRILL_RUN": "a", "FLYTE_PYTORCH_TERMINATION_GRACE_S": f"{grace_s:g}"}
    blobs = BlobStore(tmp_path / "blobs")
    errors: list[str] = []
    answers = []
    with running_fake_api() as (server, client):
        with (
            PLAYERS[kind](server, tmp_path / "pods", extra_env=env, grace_s=grace_s) as player,
            guarded(player, errors),
        ):
            connector = make_connector(client, api_timeout_s=5.0, target=kind, watch_cache=False)
            prefix = blobs.uri("metadata", "pk", "n0", "data", "0")
            meta = connector.create(templates[task], prefix, literals, execution_metadata("pk"))
            run = player.run_for(meta.name)
            while_disrupted = _act(drill, player, run, kind, directory, connector, meta)
            answers = _poll(connector, meta, player)
            attempts = 1
            recovered = [a.message for a in answers if a.message.startswith("recovering from a preemption")]
            if kind == "trainjob" and drill != "kueue":
                # the default runtime has no failure policy: the TrainJob fails, and the connector creates it again
                # (backend_plugin/connector/recovery.py), so the attempt goes on from its checkpoint, no retry charged
                assert recovered, [a.message for a in answers]
            leftover = [n for r in player.runs.values() for n in player.wait_processes_gone(r)]
        assert player.errors == [] and errors == [], (player.errors, errors)
    assert leftover == []
    assert answers[-1].phase == TaskExecution.SUCCEEDED, answers[-1].message
    weights = harness.read_outputs(prefix, interface.outputs)["o0"]
    notes = drills.notes(directory, "a")
    resumed_at, stopped = notes["start"][0], notes["stop"].get(0)
    recomputed = len(notes["steps"]) - INPUTS["steps"]
    assert drills.same(weights, baseline), (weights, baseline)
    assert stopped is not None and sorted(set(notes["start"].values())) == [resumed_at], notes
    assert notes["steps"][-1] == INPUTS["steps"] and recomputed == stopped - resumed_at, notes
    if drill == "slow-save":
        assert resumed_at < stopped and resumed_at % INPUTS["every"] == 0, notes  # the last periodic checkpoint
    else:
        assert resumed_at == stopped and recomputed == 0, notes
    if drill == "first-step":  # signalled before step 1 ended; the stop is agreed a step or so later
        assert stopped < INPUTS["every"], notes
    charged = _charged(kind, drill, run, attempts, len(recovered))
    print(
        f"\n[preemption kind drill] {kind} {drill}: stopped after {stopped}, resumed at {resumed_at}, recomputed "
        f"{recomputed}, retries charged: {charged}, {time.monotonic() - began:.1f}s"
        + (f"; while suspended: {while_disrupted}" if while_disrupted else "")
    )


def _poll(connector: Any, meta: Any, player: FakeOperator) -> list[Any]:
    try:
        return harness.poll_until_terminal(connector, meta, JOB_TIMEOUT_S)
    except TimeoutError as e:
        states = [(r.label, r.exit_code, r.recreated, r.process is not None) for run in player.runs.values()
                  for r in run.replicas]  # fmt: skip
        raise AssertionError(f"{e}; player errors {player.errors}; pods {states}") from None


def _charged(kind: str, drill: str, run: JobRun, attempts: int, recoveries: int) -> str:
    """What the disruption cost the user's budgets, checked against what the kind promises."""
    if drill == "kueue":
        assert attempts == 1
        if isinstance(run, JobSetRun):
            assert run.restarts == 0
        else:
            assert sum(r.restarts for r in run.replicas) == 0
        return "none (suspended and admitted again)"
    if kind == "pytorchjob":
        assert attempts == 1 and sum(r.restarts for r in run.replicas) == 0  # backoffLimit counts restartCount
        recreated = sum(r.recreated for r in run.replicas)
        assert recreated >= 1, [(r.label, r.recreated) for r in run.replicas]
        return f"none ({recreated} pods recreated by the operator, backoffLimit not spent)"
    if kind == "jobset":
        assert isinstance(run, JobSetRun) and attempts == 1
        assert (run.restarts, run.counted) == (1, 0), (run.restarts, run.counted)
        return "none (1 JobSet restart, 0 counted toward maxRestarts)"
    assert attempts == 1 and recoveries >= 1
    return "none (the default runtime has no failure policy: the connector created the job again)"
