"""Live progress in a Flyte 2 local run: the report's Progress tab is flushed mid-run when the task has a report
(``report.html`` on disk holds the page of that moment), nothing is flushed without one, and the front-end's file
access writes beside the outputs. Each run is a fresh interpreter under a process-count guard and a timeout.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from tests.sdk.guarded_run import run_guarded

ROOT = Path(__file__).resolve().parents[2]
MAX_PROCS = 12
BOUND_S = 180.0


def run_case(case: str, tmp_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYTE_PYTORCH_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env["FLYTE_PYTORCH_PROGRESS_INTERVAL_S"] = "1"
    result = run_guarded(
        [sys.executable, "-m", "tests.flyte2.progress_tasks", case],
        max_procs=MAX_PROCS,
        timeout_s=BOUND_S,
        cwd=str(tmp_path),
        env=env,
    )
    assert result.killed_for == "" and result.returncode == 0, result.output[-4000:]
    assert result.leftover == [], result.leftover
    return json.loads(result.output.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.timeout(BOUND_S + 60)
def test_the_report_is_flushed_mid_run_with_the_progress_of_that_moment(tmp_path: Path) -> None:
    out = run_case("report", tmp_path)
    assert out["output"] == 80
    mid_run = [s for s in out["seen"] if not s["final"]]
    assert len(mid_run) >= 2, out["seen"]  # every second over a 4 s loop
    assert all(s["published"] and s["on_disk"] == s["page"] for s in mid_run), mid_run
    assert any(not s["page"].startswith("step 80/80") for s in mid_run)
    assert out["seen"][-1]["final"] and out["seen"][-1]["page"].startswith("step 80/80 (100%)")


@pytest.mark.slow
@pytest.mark.timeout(BOUND_S + 60)
def test_a_task_without_a_report_is_not_flushed(tmp_path: Path) -> None:
    out = run_case("no_report", tmp_path)
    assert out["output"] == 40
    assert [s["published"] for s in out["seen"]] == [False]  # asked once, never again


@pytest.mark.slow
@pytest.mark.timeout(BOUND_S + 60)
def test_the_front_end_writes_beside_the_outputs(tmp_path: Path) -> None:
    path, content = run_case("output_file", tmp_path)["output"].split("|", 1)
    assert path.endswith("/pytorch-progress.json") and content == '{"step": 1}'


@pytest.mark.slow
@pytest.mark.timeout(BOUND_S + 60)
def test_a_local_run_names_the_file_its_report_is_in(tmp_path: Path) -> None:
    """Flyte 2 writes a local run's report into the run's metadata folder and names it nowhere: the run says where,
    and the file there holds the Progress tab."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYTE_PYTORCH_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    result = run_guarded(
        [sys.executable, "-m", "tests.flyte2.progress_tasks", "report"],
        max_procs=MAX_PROCS,
        timeout_s=BOUND_S,
        cwd=str(tmp_path),
        env=env,
    )
    assert result.returncode == 0, result.output[-4000:]
    found = re.search(r"^Report of progress-three\.with_report: file://(\S+/report\.html)$", result.output, re.M)
    assert found, result.output[-4000:]
    assert "Progress" in Path(found[1]).read_text(encoding="utf-8")
    assert result.output.count("Report of ") == 1
