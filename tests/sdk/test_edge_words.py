"""What a flytekit user reads at the edges, run as they run it (``python file.py``, a fresh interpreter under a
process-count guard and a timeout): a bad ``FLYTE_PYTORCH_PROGRESS_*`` value is the first line, before the traceback
around it; ``report_progress`` in a plain ``@flytekit.task`` says once that it shows nothing there, and inside a
``pytorch`` task says nothing of the sort."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.sdk.guarded_run import run_guarded

ROOT = Path(__file__).resolve().parents[2]
MAX_PROCS = 10
BOUND_S = 180.0

FILE = """
import sys

import flytekit

from flytekitplugins_pytorch import pytorch_task, report_progress


@pytorch_task(workers_count=1)
def fit(steps: int = 3) -> int:
    for step in range(1, steps + 1):
        report_progress(step, steps)
    return steps


@flytekit.task
def plain(steps: int = 3) -> int:
    for step in range(1, steps + 1):
        report_progress(step, steps)
    return steps


@flytekit.workflow
def wf() -> int:
    return fit()


if __name__ == "__main__":
    print(plain() if sys.argv[1:] == ["plain"] else wf())
"""


def _run(tmp_path: Path, *args: str, **env: str):
    (tmp_path / "file.py").write_text(FILE, encoding="utf-8")
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FLYTE_PYTORCH_")}
    environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), environ.get("PYTHONPATH", "")) if p)
    environ.update(env)
    return run_guarded(
        [sys.executable, "file.py", *args], max_procs=MAX_PROCS, timeout_s=BOUND_S, cwd=str(tmp_path), env=environ
    )


@pytest.mark.timeout(BOUND_S + 60)
@pytest.mark.parametrize(
    ("variable", "value"),
    [("FLYTE_PYTORCH_PROGRESS_INTERVAL_S", "soon"), ("FLYTE_PYTORCH_PROGRESS_LOG_S", "-1")],
)
def test_a_bad_progress_variable_is_the_first_line_not_buried_in_the_traceback(
    tmp_path: Path, variable: str, value: str
) -> None:
    result = _run(tmp_path, **{variable: value})
    assert result.returncode != 0 and result.killed_for == "", result.output[-3000:]
    first = result.output.strip().splitlines()[0]
    assert first == f"pytorch task failed: {variable}={value!r} is not valid; use a positive number of seconds", (
        result.output[:3000]
    )
    assert result.leftover == []


@pytest.mark.timeout(BOUND_S + 60)
def test_report_progress_in_a_plain_flytekit_task_says_once_where_it_works(tmp_path: Path) -> None:
    result = _run(tmp_path, "plain")
    assert result.returncode == 0, result.output[-3000:]
    said = "report_progress: called outside a pytorch task, so nothing is shown"
    assert result.output.count(said) == 1, result.output[-3000:]
    assert "@pytorch_task" in result.output


@pytest.mark.timeout(BOUND_S + 60)
def test_report_progress_inside_a_pytorch_task_says_nothing_of_the_sort(tmp_path: Path) -> None:
    result = _run(tmp_path, FLYTE_PYTORCH_PROGRESS_LINE="0")
    assert result.returncode == 0, result.output[-3000:]
    assert "outside a pytorch task" not in result.output
    assert result.output.strip().splitlines()[-1] == "3"
