"""Local fault drills: a rank killed, raising inside a collective, hanging; the launcher itself signalled."""

from __future__ import annotations

import pytest

from flytekitplugins_pytorch.launcher import RankFailure
from tests.faults.drills_local import DEFAULT_BOUND_S, HANG_TIMEOUT_S, run_drill

pytestmark = [pytest.mark.faults, pytest.mark.slow]


def test_a_rank_killed_by_sigkill_is_named_with_the_signal() -> None:
    report = run_drill("sigkill")
    error = report["error"]
    assert isinstance(error, RankFailure) and error.rank == 1
    assert "rank 1 (of 3) was killed by SIGKILL" in str(error)
    assert report["detect_s"] < DEFAULT_BOUND_S
    assert report["leftover_procs"] == []


def test_a_rank_raising_inside_a_collective_is_the_root_cause() -> None:
    report = run_drill("raise")
    error = report["error"]
    assert isinstance(error, ValueError) and isinstance(error, RankFailure)
    assert "rank 2 (of 3) failed: ValueError: injected failure on rank 2" in str(error)
    assert report["detect_s"] < DEFAULT_BOUND_S
    assert report["leftover_procs"] == []


def test_a_hanging_rank_fails_the_others_at_the_collective_timeout() -> None:
    report = run_drill("hang")
    message = str(report["error"])
    assert "timed out" in message.lower() or "timeout" in message.lower()
    assert "still running" in message and "[1]" in message
    assert HANG_TIMEOUT_S - 1 <= report["detect_s"] < HANG_TIMEOUT_S + DEFAULT_BOUND_S
    assert report["leftover_procs"] == []


@pytest.mark.parametrize("drill", ["sigterm", "sigint"])
def test_signalling_the_launcher_stops_every_rank(drill: str) -> None:
    report = run_drill(drill)
    assert report["returncode"] != 0
    assert report["detect_s"] < DEFAULT_BOUND_S
    assert report["leftover_procs"] == []
