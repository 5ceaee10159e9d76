"""Local fault drills: a rank killed, raising inside a collective, hanging; the launcher itself signalled."""

from __future__ import annotations

import pytest

from pytorch_core.launcher import RankFailure
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
    assert type(error) is ValueError and error.rank == 2  # the rank's own type, not a hidden subclass
    assert "rank 2 (of 3) failed: ValueError: injected failure on rank 2" in str(error)
    assert report["detect_s"] < DEFAULT_BOUND_S
    assert report["leftover_procs"] == []


def test_a_hanging_rank_is_the_headline_with_where_it_was() -> None:
    report = run_drill("hang")
    error = report["error"]
    headline = next(line.strip() for line in str(error).splitlines() if "(of 3)" in line)
    assert isinstance(error, RankFailure) and error.rank == 1
    assert headline.startswith("rank 1 (of 3) did not arrive: still running at "), headline
    assert "drills_local.py:" in headline and "in _step_loop, outside torch.distributed" in headline
    assert "gave up waiting" in headline and ("timed out" in headline.lower() or "timeout" in headline.lower())
    assert "--- stack of rank 1 when rank " in str(error) and "in _step_loop\n" in str(error)
    assert HANG_TIMEOUT_S - 1 <= report["detect_s"] < HANG_TIMEOUT_S + DEFAULT_BOUND_S
    assert report["leftover_procs"] == []


def test_a_rank_that_never_joins_is_the_headline() -> None:
    report = run_drill("no_join")
    error = report["error"]
    headline = next(line.strip() for line in str(error).splitlines() if "(of 3)" in line)
    assert isinstance(error, RankFailure) and error.rank == 1
    expected = "rank 1 (of 3) did not arrive: its function returned without joining the others; rank "
    assert headline.startswith(expected), headline
    assert "gave up waiting" in headline
    assert report["detect_s"] < HANG_TIMEOUT_S + DEFAULT_BOUND_S
    assert report["leftover_procs"] == []


@pytest.mark.parametrize("drill", ["sigterm", "sigint"])
def test_signalling_the_launcher_stops_every_rank(drill: str) -> None:
    report = run_drill(drill)
    assert report["returncode"] != 0
    assert report["detect_s"] < DEFAULT_BOUND_S
    assert report["leftover_procs"] == []
