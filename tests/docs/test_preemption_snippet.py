"""docs/faults.md's ``snippet:preemption`` runs as the page says: saved as ``file.py`` and run with ``python file.py``
(3 real ranks, 40 ``torch.optim`` steps over 10 to 20 s). An uninterrupted run prints its ``# prints ...`` line; a run
stopped by SIGTERM half-way ends as a SIGTERM ends it, after every rank stopped at one step and rank 0 saved it; the
next run of the same command resumes after that step and prints the same line; and none of them leaves a checkpoint
behind once the execution is over.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.docs.markdown_blocks import ROOT, blocks, print_claims
from tests.sdk.guarded_run import group_members, run_guarded

PAGE = ROOT / "docs" / "checkpoints.md"
MAX_PROCS = 12  # the interpreter, the launcher's helpers, the fork server and 3 ranks
BOUND_S = 240.0
PROGRESS = re.compile(r"^progress: step (\d+)/40\b", re.M)
PROGRESS_ANY = re.compile(r"^progress: .*$", re.M)


def _snippet() -> str:
    (block,) = [b for b in blocks(PAGE) if "snippet:preemption" in b.markers]
    return block.body


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYTE_PYTORCH_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env["TMPDIR"] = str(tmp_path / "tmp")  # the launcher's checkpoint folder of this execution goes there
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return env


def _run_and_stop_half_way(tmp_path: Path, env: dict[str, str], *, ctrl_c: bool = False) -> tuple[int | None, str]:
    """``python file.py``, SIGTERM to it once its progress line passed step 15 (after the step-10 checkpoint); or
    Ctrl-C: SIGINT to its whole process group, as a terminal sends it."""
    log = tmp_path / "stopped.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "file.py"],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    started, sent = time.monotonic(), False
    try:
        while proc.poll() is None:
            assert len(group_members(proc.pid)) <= MAX_PROCS, "a nested launch"
            assert time.monotonic() - started < BOUND_S, log.read_text(errors="replace")[-3000:]
            steps = [int(s) for s in PROGRESS.findall(log.read_text(errors="replace"))]
            if not sent and steps and max(steps) >= 15:
                if ctrl_c:
                    os.killpg(proc.pid, signal.SIGINT)
                else:
                    proc.send_signal(signal.SIGTERM)
                sent = True
            time.sleep(0.05)
        return proc.returncode, log.read_text(errors="replace")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


@pytest.mark.slow
@pytest.mark.timeout(3 * BOUND_S + 60)
def test_a_run_stopped_half_way_resumes_and_prints_what_an_uninterrupted_run_prints(tmp_path: Path) -> None:
    body = _snippet()
    (tmp_path / "file.py").write_text(body, encoding="utf-8")
    env = _env(tmp_path)
    (claim,) = print_claims(body)
    assert claim.ranks == 3 and claim.output is not None

    whole = run_guarded([sys.executable, "file.py"], max_procs=MAX_PROCS, timeout_s=BOUND_S, cwd=str(tmp_path), env=env)
    assert whole.killed_for == "" and whole.returncode == 0, whole.output[-4000:]
    assert whole.leftover == []
    assert whole.output.strip().splitlines()[-1] == claim.output, whole.output[-3000:]
    took = re.search(r"progress: step 40/40 \(100%\), took (\d+)s", whole.output)
    assert took and 10 <= int(took[1]) <= 60, whole.output[-2000:]  # 40 steps of 0.3 s; slower under load
    assert "preemption" not in whole.output  # nothing said about a preemption that never came
    assert list((tmp_path / "tmp").rglob("pytorch-checkpoint.json")) == []  # the execution is over

    returncode, stopped = _run_and_stop_half_way(tmp_path, env)
    assert returncode == -signal.SIGTERM, stopped[-4000:]  # as a SIGTERM'd run always ended
    saved = re.search(r"every rank stopped after step (\d+); checkpoint of step \1 saved in (\S+)", stopped)
    assert saved, stopped[-4000:]
    step, folder = int(saved[1]), saved[2]
    assert 15 <= step < 40
    assert f"the next run of this task with the same inputs resumes from step {step}" in stopped
    assert claim.output not in stopped  # it did not finish
    # The page's words: the launcher got the signal, said once; the last progress line is where the ranks stopped.
    said = "preemption: the launcher got SIGTERM: every rank stops after the next step all of them can reach"
    assert stopped.count(said) == 1, stopped[-4000:]
    assert (
        f"pytorch task preempted: the launcher (pod {os.uname().nodename}) got SIGTERM; every rank stopped " in stopped
    )
    assert PROGRESS_ANY.findall(stopped)[-1].startswith(f"progress: stopped at step {step}/40 ")

    resumed = run_guarded(
        [sys.executable, "file.py"], max_procs=MAX_PROCS, timeout_s=BOUND_S, cwd=str(tmp_path), env=env
    )
    assert resumed.killed_for == "" and resumed.returncode == 0, resumed.output[-4000:]
    assert resumed.leftover == []
    assert f"[rank 0] checkpoint: resuming from the checkpoint of step {step} in {folder}" in resumed.output
    first = min(int(s) for s in PROGRESS.findall(resumed.output))
    assert first == step + 1, resumed.output[-3000:]  # no step done twice
    assert resumed.output.strip().splitlines()[-1] == claim.output  # the uninterrupted run's line
    last_loss = re.compile(r"progress: step 40/40 \(100%\), took \d+s, loss (\S+)")
    assert last_loss.search(resumed.output)[1] == last_loss.search(whole.output)[1]  # and the same last loss
    assert list((tmp_path / "tmp").rglob("pytorch-checkpoint.json")) == []


@pytest.mark.slow
@pytest.mark.timeout(BOUND_S + 60)
def test_ctrl_c_ends_the_run_as_the_page_says(tmp_path: Path) -> None:
    """checkpoints.md: Ctrl-C stops the ranks at one step, saved, "and the run then ends with exit status 1, with no
    traceback"."""
    page = PAGE.read_text(encoding="utf-8")
    assert "the run then ends\nwith exit status 1, with no traceback" in page or (
        "ends with exit status 1, with no traceback" in " ".join(page.split())
    )
    (tmp_path / "file.py").write_text(_snippet(), encoding="utf-8")
    returncode, stopped = _run_and_stop_half_way(tmp_path, _env(tmp_path), ctrl_c=True)
    assert returncode == 1, stopped[-4000:]
    assert re.search(r"every rank stopped after step \d+; checkpoint of step \d+ saved in ", stopped), stopped[-4000:]
    assert "got SIGINT" in stopped
    assert "Traceback" not in stopped and "KeyboardInterrupt" not in stopped
