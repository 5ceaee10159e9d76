"""A Flyte 2 local run (``flyte.run`` after ``flyte.init()``) runs real ranks with the core launcher the flytekit
front-end uses: the same per-node variables, the same failure report, rank 0's typed output.

Each run is a fresh interpreter under a process-count guard and a timeout (tests/sdk/guarded_run.py).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.sdk.guarded_run import run_guarded

ROOT = Path(__file__).resolve().parents[2]
MAX_PROCS = 12  # the interpreter, the elastic agent's helpers, the fork server, up to 4 ranks
BOUND_S = 120.0


def run_case(case: str, tmp_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYTE_PYTORCH_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    result = run_guarded(
        [sys.executable, "-m", "tests.flyte2.local_tasks", case],
        max_procs=MAX_PROCS,
        timeout_s=BOUND_S,
        cwd=str(tmp_path),
        env=env,
    )
    assert result.killed_for == "", result.output[-4000:]
    assert result.returncode == 0, result.output[-4000:]
    assert result.leftover == [], result.leftover
    return json.loads(result.output.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.timeout(BOUND_S + 60)
def test_three_ranks_all_reduce_and_rank_0_returns(tmp_path: Path) -> None:
    out = run_case("all_reduce", tmp_path)
    assert out["output"] == [0, 3, 10 + 11 + 12]


@pytest.mark.slow
@pytest.mark.timeout(BOUND_S + 60)
def test_each_rank_sees_the_per_node_variables(tmp_path: Path) -> None:
    views = run_case("env_views", tmp_path)["output"]
    assert [v["RANK"] for v in views] == ["0", "1", "2", "3"]
    assert [v["LOCAL_RANK"] for v in views] == ["0", "1", "0", "1"]
    assert [v["PET_NODE_RANK"] for v in views] == ["0", "0", "1", "1"]
    assert {v["WORLD_SIZE"] for v in views} == {"4"} and {v["PET_NNODES"] for v in views} == {"2"}
    assert {v["MASTER_ADDR"] for v in views} == {"127.0.0.1"} and len({v["MASTER_PORT"] for v in views}) == 1


@pytest.mark.slow
@pytest.mark.timeout(BOUND_S + 60)
def test_a_failing_rank_is_reported_by_number_type_and_traceback(tmp_path: Path) -> None:
    out = run_case("failing", tmp_path)
    assert (out.get("error"), out["code"], out["kind"]) == ("RuntimeUserError", "ValueError", "user")
    assert out["message"].startswith("rank 2 (of 3) failed: ValueError: boom on rank 2")
    assert "--- traceback of rank 2 ---" in out["message"] and "local_tasks.py" in out["message"]


@pytest.mark.slow
@pytest.mark.timeout(BOUND_S + 60)
def test_a_syncified_flyte_call_in_a_rank_returns(tmp_path: Path) -> None:
    """flyte runs syncified calls on an event loop in a thread of its own; a rank forked from a process where that
    thread ran must get one of its own, or the call waits forever (flyte-migrate's Deck flush is such a call)."""
    out = run_case("syncified_in_ranks", tmp_path)
    assert out["output"] == [10, 11, 12], out
