"""A Flyte 2 task in the pods of a PyTorchJob: two real pod processes on loopback, with the operator's variables.

Each pod runs this pod's ranks through the core launcher; only the pod holding global rank 0 returns a value, the
other ends with exit status 0 and no output; a rank's failure reaches Flyte 2's error conversion recoverable or
permanent as the rank raised it. Every pod runs in its own process group under a process-count guard and a timeout.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from pytorch_core._processes import free_port
from tests.sdk.guarded_run import Guarded, run_guarded

ROOT = Path(__file__).resolve().parents[2]
BOUND_S = 150.0
MAX_PROCS = 10  # the pod process, the elastic agent's helpers, the fork server, 2 ranks


def run_pods(case: str, nproc_per_node: int, tmp_path: Path) -> list[Guarded]:
    """Start pod 0 (master) and pod 1 (worker) of a 2-pod PyTorchJob at once, and wait for both."""
    from concurrent.futures import ThreadPoolExecutor

    port = free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("FLYTE_PYTORCH_", "PET_", "FLYTE_"))}
    base["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), base.get("PYTHONPATH", "")) if p)

    def pod(rank: int) -> Guarded:
        env = dict(base, RANK=str(rank), WORLD_SIZE=str(2 * nproc_per_node), MASTER_ADDR="127.0.0.1")
        env.update(MASTER_PORT=str(port), PET_NNODES="2", PET_NODE_RANK=str(rank))
        env["PET_NPROC_PER_NODE"] = str(nproc_per_node)
        work = tmp_path / f"pod-{rank}"
        work.mkdir()
        return run_guarded(
            [sys.executable, "-m", "tests.flyte2.pod_tasks", case],
            max_procs=MAX_PROCS,
            timeout_s=BOUND_S,
            cwd=str(work),
            env=env,
        )

    with ThreadPoolExecutor(2) as pool:
        pods = list(pool.map(pod, (0, 1)))
    for result in pods:
        assert result.killed_for == "", result.output[-4000:]
        assert result.leftover == [], result.leftover
    return pods


def last_json(result: Guarded) -> dict:
    lines = [line for line in result.output.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


@pytest.mark.slow
@pytest.mark.timeout(BOUND_S + 60)
def test_two_pods_of_two_ranks_only_global_rank_0_returns(tmp_path: Path) -> None:
    pods = run_pods("all_reduce", 2, tmp_path)
    assert [p.returncode for p in pods] == [0, 0], [p.output[-3000:] for p in pods]
    assert last_json(pods[0]) == {"output": [0, 4, 10 + 11 + 12 + 13], "rank": "0"}
    # The worker pod ran ranks 2 and 3 and ends successfully without a value: no output, exit status 0.
    withheld = last_json(pods[1])
    assert withheld["exit"] == 0 and "only it writes the task outputs" in withheld["withheld"], withheld


@pytest.mark.slow
@pytest.mark.timeout(BOUND_S + 60)
@pytest.mark.parametrize(("case", "recoverable"), [("permanent", False), ("recoverable", True)])
def test_a_ranks_failure_stays_recoverable_or_permanent_in_flyte2s_error(
    case: str, recoverable: bool, tmp_path: Path
) -> None:
    """Rank 1 raises NonRecoverableError (Flyte 2 must not retry) or ValueError (it may): the pod that raised and
    the pod whose rank waited for it both fail with an error Flyte 2 classifies that way."""
    pods = run_pods(case, 1, tmp_path)
    assert [p.returncode for p in pods] == [1, 1], [p.output[-3000:] for p in pods]
    raised, waited = last_json(pods[1]), last_json(pods[0])
    assert raised["recoverable"] is recoverable, raised
    assert raised["error"] == ("NonRecoverableError" if case == "permanent" else "ValueError")
    assert waited["recoverable"] is recoverable, waited
    assert "rank 1" in waited["message"], waited
