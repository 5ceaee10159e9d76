"""No fork bomb: a workflow called at module level is refused in every rank, with one message saying what to do.

The end-to-end cases run the quickstart's original snippet pattern (``wf()`` at module level, no ``__main__`` guard)
through ``python file.py`` and ``pyflyte run file.py wf``, in a new process group under a process-count guard and a
timeout (``tests/sdk/guarded_run.py``): before the fix, the first multiplied processes until the guard killed it and
the second ended with multiprocessing's bootstrapping traceback. Who refuses and what the headline says, on plain data:
``tests/core/test_nested.py``.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from pytorch_core._forkserver import FRESH_FORKSERVER_ENV
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
