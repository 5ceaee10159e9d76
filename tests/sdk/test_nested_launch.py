"""No fork bomb: a workflow called at module level is refused in every rank, with one message saying what to do.

The end-to-end cases run the quickstart's original snippet pattern (``wf()`` at module level, no ``__main__`` guard)
through ``python file.py`` and ``pyflyte run file.py wf``, in a new process group under a process-count guard and a
timeout (``tests/sdk/guarded_run.py``): before the fix, the first multiplied processes until the guard killed it and
the second ended with multiprocessing's bootstrapping traceback.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from pytorch_core._failure import NESTED_LAUNCH_HEADLINE, RankOutcomes, find_root_cause
from pytorch_core._forkserver import FRESH_FORKSERVER_ENV
from pytorch_core._nested import (
    LAUNCHER_PID_ENV,
    NESTED_LAUNCH_EXIT_CODE,
    NestedLaunchError,
    nested_launch_reason,
    raise_if_refused_at_preload,
    refuse_nested_launch,
)
from tests.sdk.guarded_run import run_guarded

ROOT = Path(__file__).resolve().parents[2]
GUARD = '`if __name__ == "__main__":`'

# The pattern of docs/quickstart.md "Your own task" before it was fixed: the workflow is called at import.
UNGUARDED_SNIPPET = """
import os
from typing import List

from flytekit import workflow

from flytekitplugins_pytorch import pytorch_task


@pytorch_task(workers_count=1)
def ranks(tag: str) -> List[str]:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    mine = f"{tag}: rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']}, node {os.environ['PET_NODE_RANK']}"
    everyone: List[str] = [""] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    dist.destroy_process_group()
    return everyone


@workflow
def wf() -> List[str]:
    return ranks(tag="hello")


for line in wf():
    print(line)
"""

#: Launcher, fork server, resource tracker and 2 ranks are 5 processes (pyflyte adds none); a second generation of
#: launches would exceed this at once.
MAX_PROCS = 12
#: The refusal must come within this bound (most of it is importing torch and flytekit on a loaded 2-core machine).
BOUND_S = 90.0


@pytest.mark.parametrize(
    ("environ", "pid", "bootstrapping", "preloading", "expected"),
    [
        pytest.param({}, 10, False, False, None, id="top-level launch"),
        pytest.param({LAUNCHER_PID_ENV: "10"}, 10, False, False, None, id="the launcher itself"),
        pytest.param({LAUNCHER_PID_ENV: "10", "RANK": "1"}, 11, False, False, "rank 1 of a launch", id="in a rank"),
        pytest.param({LAUNCHER_PID_ENV: "10"}, 12, False, False, "a process started by a launch", id="descendant"),
        pytest.param({}, 11, True, False, "while it imports the script's __main__", id="bootstrapping"),
        pytest.param({LAUNCHER_PID_ENV: "10"}, 13, False, True, "the fork server", id="fork server preload"),
    ],
)
def test_nested_launch_reason(environ, pid, bootstrapping, preloading, expected):
    reason = nested_launch_reason(environ, pid, bootstrapping=bootstrapping, preloading=preloading)
    if expected is None:
        assert reason is None
    else:
        assert reason is not None and expected in reason and GUARD in reason


def test_a_rank_refuses_a_launch(monkeypatch):
    monkeypatch.setenv(LAUNCHER_PID_ENV, str(os.getpid() + 1))
    monkeypatch.setenv("RANK", "2")
    with pytest.raises(NestedLaunchError, match=r"^my\.task: .*rank 2 of a launch.*if __name__ == "):
        refuse_nested_launch("my.task")


def test_a_module_refused_at_preload_fails_its_ranks(monkeypatch):
    from pytorch_core import _nested

    monkeypatch.setitem(_nested._refused_at_preload, "user_mod", "user_mod.t: refused")
    raise_if_refused_at_preload("other_mod")  # another module: nothing to say
    with pytest.raises(NestedLaunchError, match="user_mod.t: refused"):
        raise_if_refused_at_preload("user_mod")


def test_ranks_that_refused_while_bootstrapping_are_the_headline():
    outcomes = RankOutcomes(
        world_size=3,
        ranks=range(3),
        exit_codes={0: NESTED_LAUNCH_EXIT_CODE, 1: NESTED_LAUNCH_EXIT_CODE, 2: NESTED_LAUNCH_EXIT_CODE},
        agent_error="ChildFailedError",
    )
    cause = find_root_cause(outcomes)
    assert cause.rank == 0
    assert cause.headline == f"ranks [0, 1, 2] (of 3) {NESTED_LAUNCH_HEADLINE}"
    assert GUARD in cause.headline


def _run_snippet(tmp_path: Path, how: str, *, fresh_server: bool):
    script = tmp_path / "file.py"
    script.write_text(UNGUARDED_SNIPPET, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYTE_PYTORCH_")}
    if fresh_server:
        env[FRESH_FORKSERVER_ENV] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    if how == "python":
        cmd = [sys.executable, str(script)]
    else:
        pyflyte = shutil.which("pyflyte", path=str(Path(sys.executable).parent)) or "pyflyte"
        cmd = [pyflyte, "run", str(script), "wf"]
    return run_guarded(cmd, max_procs=MAX_PROCS, timeout_s=BOUND_S, cwd=str(tmp_path), env=env)


@pytest.mark.slow
@pytest.mark.faults
@pytest.mark.timeout(BOUND_S + 60)
@pytest.mark.parametrize("how", ["python", "pyflyte"])
def test_module_level_workflow_call_is_refused_in_every_rank(tmp_path: Path, how: str):
    """With a fork server started as a fresh interpreter, every rank (and the server) imports the file again."""
    result = _run_snippet(tmp_path, how, fresh_server=True)
    assert result.killed_for == "", f"{how}: killed by the guard: {result.killed_for}\n{result.output[-3000:]}"
    assert result.returncode not in (0, None), result.output[-3000:]
    assert GUARD in result.output, result.output[-3000:]
    assert "bootstrapping phase" not in result.output  # multiprocessing's own error never shows
    assert "refused" in result.output
    assert result.leftover == [], f"still running after the launcher ended: {result.leftover}"
    assert result.peak_procs <= 6, result.peak_procs


@pytest.mark.slow
@pytest.mark.faults
@pytest.mark.timeout(BOUND_S + 60)
@pytest.mark.parametrize("how", ["python", "pyflyte"])
def test_module_level_workflow_call_runs_as_plain_python_with_a_forked_server(tmp_path: Path, how: str):
    """A server forked from the launcher holds the file already: no rank imports it again, so nothing multiplies.

    The call then behaves as it would for a plain flytekit task: ``python file.py`` runs the workflow once;
    ``pyflyte run file.py wf`` runs it while importing the file and once more as asked.
    """
    result = _run_snippet(tmp_path, how, fresh_server=False)
    assert result.killed_for == "", f"{how}: killed by the guard: {result.killed_for}\n{result.output[-3000:]}"
    assert result.returncode == 0, result.output[-3000:]
    assert "refused" not in result.output
    expected = ["hello: rank 0 of 2, node 0", "hello: rank 1 of 2, node 1"]
    # The module's own loop prints each line once; pyflyte then prints the outputs of its run as a list.
    assert [line for line in result.output.splitlines() if line.startswith("hello: rank")] == expected
    if how == "pyflyte":
        assert str(expected) in result.output, result.output[-3000:]
    assert result.leftover == [], f"still running after the launcher ended: {result.leftover}"
    assert result.peak_procs <= 6, result.peak_procs
