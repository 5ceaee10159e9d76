"""What a local run says when it fails, stops or resumes, on 3 real ranks through the core launcher (``python -m
tests.faults.preempt_run``, the loops of ``edge_tasks.py`` and ``preempt_tasks.py``): each drill does what a user
did, and checks that every line read at the end states what happened and what happens next, and nothing else.

- a rank's failure: the ranks left are stopped by the launcher without a word of preemption, and the last progress
  line is where rank 0 stood, not its last periodic report;
- ``kill -TERM`` of the launcher: said as the launcher's signal (not a rank picked at random), a stop with nothing
  to save promises no checkpoint and says the next run starts from the beginning;
- the run after a stop says which checkpoint it resumes from;
- a ``kill -TERM`` while the ranks are still starting says that they stopped before their first step.

The false positives are checked beside them: a SIGTERM to one rank is still announced as that rank's preemption
(``test_preemption_drills.py`` has the rest), and a loop without the API still ends at once (``test_parity.py``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path
from typing import Any, Optional

import pytest

from tests.faults import drills_preempt as drills
from tests.faults.edge_tasks import last_steps

pytestmark = [pytest.mark.faults, pytest.mark.slow]

#: The console line in a log, every half second, so that a drill sees where the run stands.
LINE = {"FLYTE_PYTORCH_PROGRESS_LINE": "1", "FLYTE_PYTORCH_PROGRESS_LOG_S": "0.5"}
PROGRESS = re.compile(r"^progress: .*$", re.M)


def _run(directory: Path, run: str, mode: str, inputs: Optional[dict[str, Any]] = None, **kw: Any) -> drills.Launch:
    env = drills._env(directory, run, {**LINE, **kw.pop("env", {})})
    cmd = [drills.PY, "-m", "tests.faults.preempt_run", mode, json.dumps(inputs or {})]
    return drills.launch(cmd, env, **kw)


def _last_progress(output: str) -> str:
    lines = PROGRESS.findall(output)
    assert lines, output[-3000:]
    return lines[-1]


def _term_launcher_once() -> Any:
    def act(proc: Any, first: bool) -> Optional[float]:
        if first:
            proc.send_signal(signal.SIGTERM)
            return time.time()
        return None

    return act


def test_a_ranks_failure_is_no_preemption_and_the_last_line_is_where_the_ranks_stopped(tmp_path: Path) -> None:
    """Rank 2 raises ValueError at step 8 of a loop that calls report_progress; torch's agent then SIGTERMs ranks 0
    and 1, which are armed for a preemption. Nothing was preempted and nothing is saved: no preemption words."""
    run = _run(tmp_path, "a", "reports", {"fail_rank": 2, "fail_at": 8})
    assert run.killed_for == "" and run.returncode == 1, run.output[-4000:]
    assert "preemption" not in run.output, run.output[-4000:]
    assert "saves a checkpoint" not in run.output and "checkpoint stands" not in run.output
    assert "pytorch task failed: rank 2 (of 3) failed: ValueError: injected failure on rank 2 at step 8" in run.output
    reached = last_steps(tmp_path, "a")[0]
    last = _last_progress(run.output)
    found = re.match(r"progress: stopped at step (\d+)/40 \(\d+%\) after \d+s, loss \S+$", last)
    assert found, last
    assert int(found[1]) >= reached >= 7, (last, reached)  # where rank 0 stood, not its last hand-off
    assert "ETA" not in last and "steps/s" not in last
    assert run.leftover == []


def test_a_sigterm_to_the_launcher_is_said_as_such_and_nothing_to_save_promises_nothing(tmp_path: Path) -> None:
    """``kill -TERM`` of the launcher at step 10 of a loop that only reports progress: one line says the launcher got
    it, nobody promises a checkpoint, and the end says nothing was saved and the next run starts from the beginning.
    It is still a preemption (the false positive the other way): every rank stops after one agreed step."""

    def up() -> bool:
        steps = last_steps(tmp_path, "a")
        return len(steps) == 3 and min(steps.values()) >= 10

    run = _run(tmp_path, "a", "reports", {"steps": 60, "step_seconds": 0.15}, ready=up, act=_term_launcher_once())
    assert run.killed_for == "" and run.returncode == -signal.SIGTERM, run.output[-4000:]
    out = run.output
    assert out.count("preemption: the launcher got SIGTERM: every rank stops after the next step") == 1, out[-4000:]
    assert re.search(r"preemption: rank \d got SIGTERM", out) is None  # no rank named at random
    assert "saves a checkpoint" not in out and "checkpoint stands" not in out
    said = re.search(
        r"every rank stopped after step (\d+); nothing to save: .*; the next run starts from the beginning$", out, re.M
    )
    assert said, out[-4000:]
    stopped = int(said[1])
    assert (
        f"pytorch task preempted: the launcher (pod {os.uname().nodename}) got SIGTERM; every rank stopped after step "
        f"{stopped}; nothing was saved: the next run starts from the beginning"
    ) in out
    last = _last_progress(out)
    assert last.startswith(f"progress: stopped at step {stopped}/60 "), (last, stopped)
    assert run.leftover == []


def test_the_run_after_a_stop_says_which_checkpoint_it_resumes_from(tmp_path: Path) -> None:
    """The preemption drills' loop (a checkpoint every 4 steps), the launcher SIGTERMed mid-run, then run again: the
    second run says it resumes, from which step and which folder; an uninterrupted first run says nothing of it."""

    def past_step_5() -> bool:
        steps = drills.notes(tmp_path, "a")["steps"]
        return bool(steps) and max(steps) >= 5

    first = drills.run_local(tmp_path, "a", env=LINE, ready=past_step_5, act=_term_launcher_once())
    assert first.returncode == -signal.SIGTERM, first.output[-4000:]
    assert "checkpoint: resuming" not in first.output  # a fresh start says nothing of the sort
    saved = re.search(r"checkpoint of step (\d+) saved in (\S+)", first.output)
    assert saved, first.output[-4000:]
    second = drills.run_local(tmp_path, "b", env=LINE)
    assert second.returncode == 0, second.output[-4000:]
    assert f"checkpoint: resuming from the checkpoint of step {saved[1]} in {saved[2]}" in second.output
    assert second.output.count("checkpoint: resuming from") == 1  # rank 0 says it, once


def test_a_sigterm_while_the_ranks_start_says_they_stopped_before_their_first_step(tmp_path: Path) -> None:
    """``kill -TERM`` of the launcher while every rank is still starting (no step yet): besides torch's own line, the
    run says what happened and what happens next, and still ends as a SIGTERM ends it."""

    def up() -> bool:
        return len(list(tmp_path.glob("up-a-*"))) == 3

    run = _run(tmp_path, "a", "slow-start", {"start_seconds": 60}, ready=up, act=_term_launcher_once())
    assert run.killed_for == "" and run.returncode == -signal.SIGTERM, run.output[-4000:]
    assert (
        f"pytorch task preempted: the launcher (pod {os.uname().nodename}) got SIGTERM; the ranks stopped before "
        "their first step; nothing was saved: the next run starts from the beginning"
    ) in run.output, run.output[-4000:]
    assert run.wall_s < 45  # the ranks ended at once, as torchrun's do
    assert run.leftover == []
