"""Preemption drills on 3 real local ranks (``drills_preempt.py``): where every rank stopped, where the next run
resumed, how many steps it did again, what retries were charged, and that it ends with an uninterrupted run's
weights. Each drill prints its row of the table in docs/faults.md ("Preemption").
"""

from __future__ import annotations

import importlib.util
import json
import signal
import time
from pathlib import Path

import pytest

from pytorch_contract.preemption import PREEMPTED_EXIT_CODE
from tests.faults import drills_preempt as drills
from tests.faults.preempt_run import PREEMPTED_EXIT

pytestmark = [pytest.mark.faults, pytest.mark.slow]


def _row(name: str, stopped: object, resumed: object, recomputed: object, retries: str, wall_s: float) -> None:
    print(
        f"\n[preemption drill] {name}: stopped after {stopped}, resumed at {resumed}, recomputed {recomputed}, "
        f"retries charged {retries}, {wall_s:.1f}s"
    )


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> list[float]:
    """An uninterrupted run (same inputs): its weights, and that a run never signalled leaves no checkpoint."""
    directory = tmp_path_factory.mktemp("baseline")
    run = drills.run_local(directory, "base")
    assert run.returncode == 0, run.output[-4000:]
    assert drills.notes(directory, "base")["start"] == {0: 0, 1: 0, 2: 0}
    assert "preemption" not in run.output  # nothing said about a preemption that never came
    assert list((directory / "tmp").glob("flyte-pytorch-*/checkpoints/*")) == []  # removed: the run ended
    weights = drills.result(run)
    assert weights is not None
    return weights


def _resume(directory: Path, baseline: list[float], stopped_at: int, inputs: dict | None = None) -> tuple[int, float]:
    """The second run of the same execution: where it resumed, and that it ends as the uninterrupted run did."""
    second = drills.run_local(directory, "b", inputs=inputs)
    assert second.returncode == 0, second.output[-4000:]
    starts = drills.notes(directory, "b")["start"]
    assert len(set(starts.values())) == 1, starts
    assert drills.same(drills.result(second), baseline), (drills.result(second), baseline)
    assert second.leftover == []
    assert list((directory / "tmp").glob("flyte-pytorch-*/checkpoints/*")) == []  # the execution is over
    return starts[0], second.wall_s


def _agreed(first: drills.Launch, directory: Path) -> int:
    stops = drills.notes(directory, "a")["stop"]
    assert sorted(stops) == [0, 1, 2] and len(set(stops.values())) == 1, (stops, first.output[-4000:])
    return stops[0]


def test_sigterm_to_one_rank_inside_a_collective(baseline: list[float], tmp_path: Path) -> None:
    """Rank 1's pod gets SIGTERM while rank 1 waits inside an all-reduce for a slow rank 2 (SIGKILL after the grace):
    its peers learn of it through the group's store, every rank stops after the same step, rank 0 saves there."""
    began = time.monotonic()
    inputs = {"slow_rank": 2}
    first = drills.run_local(
        tmp_path,
        "a",
        inputs=inputs,
        ready=drills.in_collective_now(tmp_path, "a", 1),
        act=drills.signal_ranks(tmp_path, "a", [1]),
    )
    assert first.returncode == PREEMPTED_EXIT, first.output[-4000:]
    assert first.signalled_at is not None
    assert drills.inside_collective(tmp_path, "a", 1, first.signalled_at) is not None, first.output[-3000:]
    stopped = _agreed(first, tmp_path)
    assert f"checkpoint of step {stopped} saved" in first.output
    assert "rank 1 (pod " in first.output and "got SIGTERM" in first.output
    assert first.leftover == []
    resumed, _ = _resume(tmp_path, baseline, stopped, inputs)
    lost = drills.recomputed(drills.notes(tmp_path, "a"), resumed)
    assert resumed == stopped and lost == 0
    wall = time.monotonic() - began
    _row("SIGTERM to rank 1 inside an all-reduce", stopped, resumed, lost, "0 (a new local run)", wall)


def test_sigterm_to_every_rank_node_drain(baseline: list[float], tmp_path: Path) -> None:
    """Every rank's pod gets SIGTERM at once (a drained node), SIGKILL after the grace."""
    began = time.monotonic()
    first = drills.run_local(
        tmp_path, "a", ready=drills._ready_after(tmp_path, "a"), act=drills.signal_ranks(tmp_path, "a", [0, 1, 2])
    )
    assert first.returncode == PREEMPTED_EXIT, first.output[-4000:]
    stopped = _agreed(first, tmp_path)
    assert f"checkpoint of step {stopped} saved" in first.output
    resumed, _ = _resume(tmp_path, baseline, stopped)
    lost = drills.recomputed(drills.notes(tmp_path, "a"), resumed)
    assert resumed == stopped and lost == 0
    _row("SIGTERM to every rank (node drain)", stopped, resumed, lost, "0 (a new local run)", time.monotonic() - began)


def test_a_checkpoint_slower_than_the_grace_leaves_the_last_periodic_one(baseline: list[float], tmp_path: Path) -> None:
    """``kill -TERM`` of the launcher after step 5 with a 3 s grace and a checkpoint that takes 8 s: the launcher's
    agent SIGKILLs rank 0 mid-save, the log names the grace, and the next run resumes from the step-4 checkpoint."""
    began = time.monotonic()
    inputs = {"slow_save_s": 8.0}
    env = {"FLYTE_PYTORCH_TERMINATION_GRACE_S": "3"}
    steps_done = tmp_path / "steps-a"
    first = drills.run_local(
        tmp_path,
        "a",
        inputs=inputs,
        env=env,
        ready=lambda: steps_done.exists() and len(steps_done.read_text().split()) >= 5,
        act=drills.signal_launcher(signal.SIGTERM),
    )
    assert first.returncode == -signal.SIGTERM, first.output[-4000:]  # as a SIGTERM'd launcher always ended
    stopped = _agreed(first, tmp_path)
    assert "the termination grace is 3s (FLYTE_PYTORCH_TERMINATION_GRACE_S" in first.output, first.output[-3000:]
    assert "if the SIGKILL comes first, the last complete checkpoint stands (step 4)" in first.output
    assert "no checkpoint saved at the stop: the next run resumes from the checkpoint of step 4" in first.output
    assert first.leftover == []
    resumed, _ = _resume(tmp_path, baseline, stopped, inputs)
    lost = drills.recomputed(drills.notes(tmp_path, "a"), resumed)
    assert resumed == 4 and stopped > 4 and lost == stopped - 4
    _row("checkpoint slower than the grace", stopped, resumed, lost, "0 (a new local run)", time.monotonic() - began)


def test_ctrl_c_during_the_first_step(baseline: list[float], tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to the run's whole process group, as a terminal sends it) while the ranks run their first
    step, before any checkpoint exists: they stop after step 1, saved; the launcher ends with KeyboardInterrupt."""
    began = time.monotonic()
    first = drills.run_local(tmp_path, "a", ready=drills._ready_after(tmp_path, "a", "start"), act=drills.ctrl_c())
    assert first.returncode == -signal.SIGINT, first.output[-4000:]  # Python's end for an uncaught KeyboardInterrupt
    assert "KeyboardInterrupt" in first.output
    stopped = _agreed(first, tmp_path)
    assert stopped == 1, first.output[-3000:]
    assert "checkpoint of step 1 saved" in first.output
    assert "resumes from step 1" in first.output
    resumed, _ = _resume(tmp_path, baseline, stopped)
    lost = drills.recomputed(drills.notes(tmp_path, "a"), resumed)
    assert resumed == 1 and lost == 0
    _row("Ctrl-C during the first step", stopped, resumed, lost, "0 (a new local run)", time.monotonic() - began)


def test_sigterm_to_the_whole_process_group(baseline: list[float], tmp_path: Path) -> None:
    """SIGTERM to the run's whole process group mid-run (``kill -TERM -- -PGID``, systemd's control group, Slurm's
    step signal): the fork server lives on, so every rank stops after the same step and rank 0 saves it; the launcher
    ends as a SIGTERM ends it, and the next run resumes there."""
    began = time.monotonic()
    first = drills.run_local(tmp_path, "a", ready=drills._ready_after(tmp_path, "a"), act=drills.group_sigterm())
    assert first.returncode == -signal.SIGTERM, first.output[-4000:]  # as a SIGTERM'd launcher always ended
    assert "the ranks left before they reached an agreed step" not in first.output, first.output[-4000:]
    stopped = _agreed(first, tmp_path)
    assert f"every rank stopped after step {stopped}; checkpoint saved at step {stopped}" in first.output, first.output[
        -4000:
    ]
    assert first.leftover == []
    resumed, _ = _resume(tmp_path, baseline, stopped)
    lost = drills.recomputed(drills.notes(tmp_path, "a"), resumed)
    assert resumed == stopped and lost == 0
    _row("SIGTERM to the whole process group", stopped, resumed, lost, "0 (a new local run)", time.monotonic() - began)


def test_a_loop_without_the_api_stops_at_once_as_before(tmp_path: Path) -> None:
    """No false positive: a loop that uses none of the API is not held back by a SIGTERM; the launcher ends as it
    did (-15), every rank gone well inside the grace."""
    env = drills._env(tmp_path, "plain")
    first = drills.launch(
        [drills.PY, "-m", "tests.faults.preempt_run", "plain"],
        env,
        ready=drills._ready_after(tmp_path, "plain"),
        act=drills.signal_launcher(signal.SIGTERM),
    )
    assert first.returncode == -signal.SIGTERM, first.output[-4000:]
    assert first.signalled_at is not None
    assert "preemption" not in first.output
    assert first.leftover == []
    assert PREEMPTED_EXIT_CODE != -signal.SIGTERM


def test_one_pod_of_three_gets_sigterm_and_a_flyte_retry_resumes(baseline: list[float], tmp_path: Path) -> None:
    """Three pods of one rank each (``_run_direct`` in ``pyflyte-execute``), sharing only the group's store: pod 1
    gets SIGTERM mid-step (SIGKILL after the 5 s grace). Every pod stops after the same step and exits 200; each
    writes a recoverable error document of system origin and the preemption record. The retry (attempt 1, the first
    attempt's checkpoint prefix as ``--prev-checkpoint``) resumes at that step and ends as an uninterrupted run."""
    from flyteidl.core import errors_pb2, execution_pb2

    from pytorch_contract.preemption import FILE_NAME, parse_record

    began = time.monotonic()
    first_ckpt = tmp_path / "ckpt-0"
    pods, out0, _ = drills.run_pods(
        tmp_path, "a", attempt=0, checkpoint=first_ckpt, prev="", act=drills.signal_ranks(tmp_path, "a", [1])
    )
    logs = "\n".join(pod.log[-2500:] for pod in pods)
    assert [pod.returncode for pod in pods] == [PREEMPTED_EXIT_CODE] * 3, logs
    stopped = _agreed(drills.Launch(0, logs, 0.0), tmp_path)
    documents = drills.error_documents(out0)
    assert len(documents) == 3, logs
    for document in documents:
        assert document.error.kind == errors_pb2.ContainerError.RECOVERABLE
        assert document.error.origin == execution_pb2.ExecutionError.SYSTEM
        assert "PreemptedError: preempted: rank 1 (pod pod-1) got SIGTERM" in document.error.message
        assert f"every rank stopped after step {stopped}; checkpoint saved at step {stopped}" in document.error.message
    record = parse_record((out0 / FILE_NAME).read_bytes())
    assert (record.stopped_at, record.checkpoint_step, record.rank, record.pod) == (stopped, stopped, 1, "pod-1")
    assert not (out0 / "outputs.pb").exists()

    pods, out1, _ = drills.run_pods(tmp_path, "b", attempt=1, checkpoint=tmp_path / "ckpt-1", prev=str(first_ckpt))
    assert [pod.returncode for pod in pods] == [0, 0, 0], "\n".join(pod.log[-2500:] for pod in pods)
    resumed = drills.notes(tmp_path, "b")["start"]
    assert resumed == {0: stopped, 1: stopped, 2: stopped}
    assert drills.same(drills.read_pod_output(out1), baseline)
    lost = drills.recomputed(drills.notes(tmp_path, "a"), stopped)
    assert lost == 0
    _row(
        "SIGTERM to pod 1 of 3, then a Flyte retry",
        stopped,
        stopped,
        lost,
        "1, which the error documents mark as system (through the connector: one of the task's)",
        time.monotonic() - began,
    )


@pytest.mark.skipif(importlib.util.find_spec("flyte") is None, reason="the Flyte 2 SDK is not installed")
def test_ctrl_c_of_a_flyte_run(baseline: list[float], tmp_path: Path) -> None:
    """``flyte.run`` runs the task in a thread of Flyte 2's, where no signal handler can be set: the terminal's
    Ctrl-C reaches the ranks, which stop after one step and save it, and the program's exit waits for them."""
    began = time.monotonic()
    body = json.dumps({**{k: drills.INPUTS[k] for k in ("steps", "step_seconds", "every")}, "directory": str(tmp_path)})
    cmd = [drills.PY, "-m", "tests.faults.preempt_flyte2", body]
    first = drills.launch(
        cmd, drills._env(tmp_path, "a"), ready=drills._ready_after(tmp_path, "a"), act=drills.ctrl_c(), max_procs=14
    )
    assert first.returncode == -signal.SIGINT, first.output[-4000:]  # the KeyboardInterrupt ends it, as before
    stopped = _agreed(first, tmp_path)
    assert f"checkpoint of step {stopped} saved" in first.output
    assert first.leftover == []
    second = drills.launch(cmd, drills._env(tmp_path, "b"), max_procs=14)
    assert second.returncode == 0, second.output[-4000:]
    resumed = drills.notes(tmp_path, "b")["start"]
    assert resumed == {0: stopped, 1: stopped, 2: stopped}
    assert drills.same(drills.result(second), baseline)
    lost = drills.recomputed(drills.notes(tmp_path, "a"), stopped)
    assert lost == 0
    _row("Ctrl-C of a flyte.run", stopped, stopped, lost, "0 (a new local run)", time.monotonic() - began)
