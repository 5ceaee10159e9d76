"""Do no harm: each function of `parity_cases.py` runs under the plugin and under torch's own launcher, and ends the
same way: it completes, or it fails naming the same rank with the same error type.

Local cases run three ranks with the plugin's launcher (``python -m tests.faults.parity_run plugin CASE``) and with
``python -m torch.distributed.run --nproc-per-node 3``. Pod cases run two pods of one rank each with the operator's
variables, through the plugin's in-pod path (``pod``) and as the bare function (``plain``: what such a pod runs
without the plugin). Defaults are read inside a rank; every other case uses scaled timeouts. Where the plugin is
stricter on purpose (an opt-in ``progress_timeout``, a rank that left while the others wait in
``init_process_group``), the test says what torchrun does instead. Every run has a process-count guard and a
timeout (`tests/sdk/guarded_run.py`).
"""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.faults import parity_cases
from tests.sdk.guarded_run import Guarded, run_guarded

pytestmark = [pytest.mark.faults, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
#: Launcher, agent, fork server, resource tracker, 3 ranks with 2 DataLoader workers each, and slack.
MAX_PROCS = 24
RUN_TIMEOUT_S = 150.0
#: Variables of an enclosing launch that must not leak into a run.
_LAUNCH_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "GROUP_RANK", "PET_RDZV_ENDPOINT")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCH_VARS and not k.startswith(("PET_", "TORCHELASTIC"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


def _guarded(cmd: list[str], env: dict[str, str], timeout_s: float = RUN_TIMEOUT_S) -> Guarded:
    run = run_guarded(cmd, max_procs=MAX_PROCS, timeout_s=timeout_s, cwd=str(ROOT), env=env)
    assert not run.killed_for, f"{run.killed_for}\n{run.output[-4000:]}"
    assert run.leftover == [], run.leftover
    return run


def _since(run: Guarded, ended: float, event: str) -> float:
    """Seconds from the case's ``mark(event)`` to ``ended`` (the run's end): a bound that start-up on a loaded
    machine does not eat into."""
    found = re.search(rf"MARK {event} ([0-9.]+)", run.output)
    assert found, run.output[-4000:]
    return ended - float(found[1])


def _outcomes(output: str) -> list[dict[str, Any]]:
    return [json.loads(line.split("PARITY ", 1)[1]) for line in output.splitlines() if "PARITY {" in line]


@functools.cache
def plugin(case: str) -> tuple[dict[str, Any], Guarded]:
    """The case as a local pytorch_task: its one outcome (one run per case: the parity test and the timeout tests
    read the same run of `default_timeout` and `explicit_timeout`; no test changes what it reads)."""
    run = _guarded([PY, "-m", "tests.faults.parity_run", "plugin", case], _env())
    (outcome,) = _outcomes(run.output)
    return outcome, run


def torchrun(case: str) -> tuple[dict[str, Any], Guarded]:
    """The case under torchrun: ``{"ok": True, "value": rank 0's}`` or the root-cause rank torchrun names, with the
    type that rank raised."""
    run = _guarded(
        [
            PY,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            str(parity_cases.WORLD),
            "-m",
            "tests.faults.parity_run",
            "torchrun",
            case,
        ],
        _env(),
    )
    by_rank = {o["rank"]: o for o in _outcomes(run.output)}
    if run.returncode == 0:
        return {"ok": True, "value": by_rank[0]["value"]}, run
    # torchrun's rule is "the first observed failure". It observes the ranks' exits in the order its monitor sees
    # them, so a peer whose collective failed a few milliseconds after the raising rank exited is now and then named
    # instead. The rule is applied here to the times the ranks themselves recorded when they raised; torchrun's own
    # Root Cause line is the answer only where no rank recorded one (a rank killed by a signal).
    raised = [o for o in by_rank.values() if not o.get("ok", True) and "time" in o]
    if raised:
        first = min(raised, key=lambda o: o["time"])
        return {"ok": False, "rank": first["rank"], "type": first["type"]}, run
    root = run.output[run.output.index("Root Cause") :]
    rank = int(re.search(r"rank\s*:\s*(\d+)", root)[1])  # type: ignore[index]
    return {"ok": False, "rank": rank, "type": by_rank.get(rank, {}).get("type", "")}, run


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pods(case: str, mode: str, *, worker_delay_s: float = 0.0) -> dict[int, dict[str, Any]]:
    """Two pods of one rank each (the operator's variables), the worker started ``worker_delay_s`` late: pod rank ->
    its outcome."""
    port = _free_port()
    launch = f"{PY} -m tests.faults.parity_run {mode} {case}"
    script = f"RANK=0 {launch} & (sleep {worker_delay_s}; RANK=1 {launch}) & wait"
    env = _env(WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), _F_WN="pod")
    run = _guarded(["bash", "-c", script], env)
    found = {o["pod"]: o for o in _outcomes(run.output)}
    assert sorted(found) == [0, 1], run.output[-4000:]
    return found


def same(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    """The same outcome: both completed with the same value, or both failed naming the same rank and type."""
    assert ours["ok"] == theirs["ok"], (ours, theirs)
    if ours["ok"]:
        assert ours["value"] == theirs["value"], (ours, theirs)
    else:
        assert ours["rank"] == theirs["rank"], (ours, theirs)
        ours_type = (ours.get("type_name") or ours["type"]).rsplit(".", 1)[-1]
        assert ours_type == theirs["type"], (ours, theirs)


# ---------------------------------------------------------------- local: the plugin's launcher against torchrun -----


@pytest.mark.timeout(400)
@pytest.mark.parametrize(
    "case",
    ["default_timeout", "none_timeout", "explicit_timeout", "slow_rank", "slow_loading", "never_init", "new_group"],
)
def test_completes_as_under_torchrun(case: str) -> None:
    ours, _ = plugin(case)
    theirs, _ = torchrun(case)
    same(ours, theirs)


@pytest.mark.timeout(400)
def test_the_default_timeout_is_torchs_own() -> None:
    import torch.distributed.constants as constants

    ours, _ = plugin("default_timeout")
    assert ours == {"ok": True, "value": constants.default_pg_timeout.total_seconds()}


@pytest.mark.timeout(400)
def test_an_explicit_timeout_wins_over_collective_timeout() -> None:
    assert parity_cases.SETTINGS["explicit_timeout"]["collective_timeout"] < parity_cases.USER_TIMEOUT
    ours, _ = plugin("explicit_timeout")
    assert ours == {"ok": True, "value": parity_cases.USER_TIMEOUT.total_seconds()}


@pytest.mark.timeout(400)
@pytest.mark.parametrize(
    ("case", "error"), [("dataloader_timeout", "RuntimeError"), ("user_timeout_error", "TimeoutError")]
)
def test_a_ranks_own_error_is_named_as_torchrun_names_it(case: str, error: str) -> None:
    ours, _ = plugin(case)
    theirs, _ = torchrun(case)
    assert theirs == {"ok": False, "rank": 1, "type": error}
    same(ours, theirs)
    assert ours["type"] == error and not ours["recoverable"], ours


@pytest.mark.timeout(400)
def test_dataloader_workers_with_a_lambda_as_under_torchrun() -> None:
    ours, _ = plugin("dataloader_lambda")
    theirs, _ = torchrun("dataloader_lambda")
    same(ours, theirs)
    assert ours["value"]["forkserver"] is False  # no extra interpreter per rank


@pytest.mark.timeout(400)
def test_progress_timeout_leaves_ranks_waiting_in_ddp_backward_alone() -> None:
    ours, _ = plugin("progress_ddp_reporting")
    theirs, _ = torchrun("progress_ddp_reporting")
    same(ours, theirs)


@pytest.mark.timeout(400)
def test_progress_timeout_names_the_rank_that_stopped_reporting() -> None:
    """Stricter than torchrun on purpose (opt-in): torchrun would wait for the collective timeout."""
    ours, run = plugin("progress_stall")
    ended = time.time()
    assert ours["ok"] is False and ours["rank"] == 2 and ours["type"] == "HangError", ours
    assert not ours["recoverable"]
    assert f"progress_timeout={parity_cases.PROGRESS_S}s" in ours["message"], ours
    # The stopped rank's own explanation reached the console before it exited.
    assert re.search(r"\[rank 2\] .*progress_timeout=", run.output), run.output[-4000:]
    assert _since(run, ended, "stalled") < parity_cases.STALL_S  # it did not wait for the stalled call to return


@pytest.mark.timeout(400)
def test_a_rank_that_leaves_without_joining_fails_the_run_within_seconds() -> None:
    """torchrun waits in init_process_group for the whole timeout (torch's default: 30 minutes; 20 s here)."""
    ours, run = plugin("exit_without_join")
    ours_took = _since(run, time.time(), "left")
    assert ours["ok"] is False and ours["rank"] == 2 and ours["type"] == "HangError", ours
    assert "returned without" in ours["message"], ours
    theirs, slow = torchrun("exit_without_join")
    theirs_took = _since(slow, time.time(), "left")
    timeout = parity_cases.USER_TIMEOUT.total_seconds()
    assert theirs["ok"] is False and theirs_took >= timeout, (theirs, theirs_took)
    assert ours_took < timeout, ours_took  # seconds (the launcher's grace is 5 s), not the timeout


# ---------------------------------------------------------------- one rank per pod: the in-pod path ---------------


@pytest.mark.timeout(400)
@pytest.mark.parametrize(
    ("case", "error"), [("dataloader_timeout", "RuntimeError"), ("user_timeout_error", "TimeoutError")]
)
def test_in_pods_a_ranks_own_error_is_named_and_never_retried(case: str, error: str) -> None:
    ours = pods(case, "pod")
    theirs = pods(case, "plain")
    assert theirs[1]["ok"] is False and theirs[1]["type"] == error
    # The failing pod's error document: its own exception, not retryable.
    assert ours[1]["type"] == error and not ours[1]["recoverable"], ours
    # The waiting pod's: the peer's failure with its type, not a retryable hang.
    assert ours[0]["ok"] is False and ours[0]["rank"] == 1 and not ours[0]["recoverable"], ours
    assert ours[0]["type_name"].endswith(error) and ours[0]["type"] != "RecoverableHangError", ours


@pytest.mark.timeout(400)
def test_in_pods_the_preflight_waits_for_a_late_worker() -> None:
    """collective_timeout is 3 s and the worker pod starts 8 s late; the task's own timeout is 60 s."""
    ours = pods("late_worker", "pod", worker_delay_s=8)
    theirs = pods("late_worker", "plain", worker_delay_s=8)
    assert theirs[0] == {"ok": True, "value": 2.0, "pod": 0, "rank": 0}
    assert ours[0]["ok"] and ours[1]["ok"], ours


@pytest.mark.timeout(400)
def test_in_pods_the_task_can_host_a_store_on_master_port() -> None:
    ours = pods("user_tcpstore", "pod")
    theirs = pods("user_tcpstore", "plain")
    assert theirs[0]["ok"] and theirs[1]["ok"], theirs
    assert ours[0]["ok"] and ours[1]["ok"], ours


# ---------------------------------------------------------------- SIGTERM to a loop that uses none of the API ----


def _sigterm_launcher(
    cmd: list[str], tmp_path: Path, *, group: bool = False, said: list[str] | None = None
) -> tuple[int | None, float]:
    """Start ``cmd`` (3 ranks of ``preempt_tasks.plain_loop``), SIGTERM the launcher (``group``: its whole process
    group) once every rank is up; return its exit status and the seconds until every rank was gone."""
    from tests.faults import drills_preempt as drills

    env = drills._env(tmp_path, "plain")
    ranks_gone: dict[str, float] = {}

    def act(proc, first: bool) -> float | None:
        pids = drills._pids(tmp_path, "plain")
        if first:
            ranks_gone["sent"] = time.time()
            if group:
                os.killpg(proc.pid, signal.SIGTERM)
            else:
                proc.send_signal(signal.SIGTERM)
            return ranks_gone["sent"]
        if "gone" not in ranks_gone and not any(drills._alive(pid) for pid in pids.values()):
            ranks_gone["gone"] = time.time()
        return None

    run = drills.launch(cmd, env, ready=drills._ready_after(tmp_path, "plain"), act=act, max_procs=MAX_PROCS)
    assert not run.killed_for and run.leftover == [], run.output[-12000:]
    if said is not None:
        said.append(run.output)
    pids = drills._pids(tmp_path, "plain")
    assert len(pids) == 3 and not any(drills._alive(pid) for pid in pids.values())
    gone = ranks_gone.get("gone", time.time())
    return run.returncode, gone - ranks_gone["sent"]


@pytest.mark.timeout(400)
def test_sigterm_ends_the_ranks_of_a_loop_without_the_api_at_once_as_torchrun_does(tmp_path: Path) -> None:
    """A loop that never calls report_progress(step) nor the checkpoint API keeps the signals' default actions: its
    ranks end within moments of the SIGTERM under both launchers, not at the end of a grace (5 s locally, 30 s
    torchrun's). The launchers' own exit statuses differ, as they always did (the plugin's ends as SIGTERM ends a
    process; torchrun's raises)."""
    ours, ours_s = _sigterm_launcher([PY, "-m", "tests.faults.preempt_run", "plain"], tmp_path / "plugin")
    theirs, theirs_s = _sigterm_launcher(
        [PY, "-m", "torch.distributed.run", "--nproc-per-node", "3", "-m", "tests.faults.preempt_run", "rank"],
        tmp_path / "torchrun",
    )
    assert ours == -signal.SIGTERM and theirs not in (0, None), (ours, theirs)
    assert ours_s < 3.0 and theirs_s < 3.0, (ours_s, theirs_s)


@pytest.mark.timeout(400)
def test_sigterm_to_the_process_group_ends_a_loop_without_the_api_at_once_as_torchrun_does(tmp_path: Path) -> None:
    """The same loop, with SIGTERM sent to the whole process group (``kill -TERM -- -PGID``, systemd's control group):
    every rank gets it directly. Under the plugin the fork server lives on (it ignores SIGTERM), and its ranks start
    with SIGTERM at its default action, so they end within moments as torchrun's do, not at the end of a grace. With
    ``start_method="fork"`` the ranks are forked from the launcher itself and start at the defaults too: SIGTERM ends
    them, it raises nothing in the loop (torch's agent's ``SignalException`` would)."""
    ours, ours_s = _sigterm_launcher([PY, "-m", "tests.faults.preempt_run", "plain"], tmp_path / "plugin", group=True)
    said: list[str] = []
    forked, forked_s = _sigterm_launcher(
        [PY, "-m", "tests.faults.preempt_run", "plain-fork"], tmp_path / "fork", group=True, said=said
    )
    theirs, theirs_s = _sigterm_launcher(
        [PY, "-m", "torch.distributed.run", "--nproc-per-node", "3", "-m", "tests.faults.preempt_run", "rank"],
        tmp_path / "torchrun",
        group=True,
    )
    assert ours == forked == -signal.SIGTERM and theirs not in (0, None), (ours, forked, theirs)
    assert ours_s < 3.0 and forked_s < 3.0 and theirs_s < 3.0, (ours_s, forked_s, theirs_s)
    assert "SignalException" not in said[0], said[0][-3000:]
