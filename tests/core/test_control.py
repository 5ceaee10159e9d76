"""The control protocol (``_control.py``) and what the launcher makes of a finished launch; files only, no processes."""

from __future__ import annotations

import pytest

from pytorch_core import launcher
from pytorch_core._control import ControlDir, ControlRecord, RankError, RankResult
from pytorch_core._plan import plan_launch
from pytorch_core._processes import AgentResult
from pytorch_core._rank import report_error
from pytorch_core.config import PyTorch, Worker
from pytorch_core.launcher import RankFailedError, RankFailure


def error(rank: int, at: float) -> RankError:
    return RankError(rank, at, "builtins.ValueError", f"boom {rank}", "Traceback ...", False, False)


def test_what_the_ranks_write_is_read_back(tmp_path) -> None:
    control = ControlDir(tmp_path)
    for rank in (0, 1, 2):
        control.mark_started(rank, 100 + rank)
    control.mark_done(0)
    control.mark_done(2)
    control.write_error(error(1, at=5.0))
    control.write_result(RankResult(value={"loss": 0.5}, decks=[("report", "<p>ok</p>")], metadata=None))

    record = control.read()
    assert (record.started, record.done) == ({0, 1, 2}, {0, 2})
    assert [err.rank for err in record.errors] == [1]
    assert record.load_result() == RankResult(value={"loss": 0.5}, decks=[("report", "<p>ok</p>")])
    assert (tmp_path / "rank-1.started").read_text() == "101"
    assert not list(tmp_path.glob("*.tmp")), "every write is renamed into place"


def test_errors_come_back_earliest_first_and_a_torn_file_is_skipped(tmp_path) -> None:
    control = ControlDir(tmp_path)
    control.write_error(error(2, at=9.0))
    control.write_error(error(0, at=3.0))
    (tmp_path / "rank-1.error").write_bytes(b"\x80\x04half a pickle")
    assert [err.rank for err in control.read().errors] == [0, 2]


def test_an_empty_directory_is_an_empty_record(tmp_path) -> None:
    assert ControlDir(tmp_path).read() == ControlRecord()
    assert ControlRecord().load_result() is None


def test_an_unpicklable_result_is_a_type_error_naming_the_type(tmp_path) -> None:
    with pytest.raises(TypeError, match="return value of type generator cannot be pickled"):
        ControlDir(tmp_path).write_result(RankResult(value=(i for i in range(3))))


def test_the_rank_side_report_of_an_exception(tmp_path) -> None:
    try:
        raise KeyError("missing")
    except KeyError as exc:
        report_error(ControlDir(tmp_path), 3, exc)
    (err,) = ControlDir(tmp_path).read().errors
    assert (err.rank, err.type_name, err.message, err.recoverable, err.collateral) == (
        3,
        "builtins.KeyError",
        "'missing'",
        False,
        False,
    )
    assert "raise KeyError" in err.traceback_text and err.exc_bytes is not None


# ---------------------------------------------------------------- the launcher's reading of an AgentResult --------

LOCAL_PLAN = plan_launch(PyTorch(worker=Worker(replicas=2)), {}, local=True)
POD_PLAN = plan_launch(
    PyTorch(nproc_per_node=2),
    {"RANK": "1", "WORLD_SIZE": "4", "MASTER_ADDR": "m", "PET_NNODES": "2", "PET_NODE_RANK": "1"},
    local=False,
)


def test_success_returns_rank_0s_value(tmp_path) -> None:
    control = ControlDir(tmp_path)
    control.write_result(RankResult(value=(0, 3, 6.0)))
    assert launcher._outcome(AgentResult(record=control.read()), LOCAL_PLAN) == (0, 3, 6.0)


def test_a_local_success_without_a_result_is_a_launcher_bug() -> None:
    with pytest.raises(RankFailedError, match="rank 0 wrote no result; this is a launcher bug"):
        launcher._outcome(AgentResult(record=ControlRecord(done=frozenset({0, 1, 2}))), LOCAL_PLAN)


def test_a_failure_is_analysed_on_this_pods_ranks() -> None:
    result = AgentResult(
        record=ControlRecord(started=frozenset({2, 3})), exit_codes={3: -9}, agent_error="ChildFailedError"
    )
    with pytest.raises(RankFailedError) as info:
        launcher._outcome(result, POD_PLAN)
    assert isinstance(info.value, RankFailure) and info.value.rank == 3
    assert str(info.value).startswith("rank 3 (of 4) was killed by SIGKILL")
    assert "[2]" in str(info.value) and "[0" not in str(info.value)


def test_a_reported_error_fails_even_when_the_agent_saw_none() -> None:
    result = AgentResult(record=ControlRecord(errors=(error(1, 1.0),), done=frozenset({0, 2})))
    assert result.failed
    with pytest.raises(Exception, match=r"rank 1 \(of 3\) failed: ValueError: boom 1") as info:
        launcher._outcome(result, LOCAL_PLAN)
    assert info.value.rank == 1


def test_the_peers_that_failed_are_the_ranks_signals_source(tmp_path) -> None:
    """What a rank's signal handler reads (quick, from the control directory): a peer of this round that reported an
    exception, or whose process is gone without having returned or stopped for a preemption; not the asking rank,
    not a peer that ended well, not what an earlier round left."""
    import os
    import subprocess
    import sys
    import time

    control = ControlDir(tmp_path)
    since = time.time()
    control.mark_started(0, os.getpid())
    control.mark_started(1, os.getpid())
    assert control.failed_peers(0, since) == []
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    control.mark_started(2, int(gone.stdout))  # a rank killed without a word (SIGKILL): its process is gone
    assert control.failed_peers(0, since) == [2]
    control.mark_done(2)  # ... unless it returned first
    assert control.failed_peers(0, since) == []
    control.write_error(RankError(1, time.time(), "builtins.ValueError", "boom", "", False, False))
    assert control.failed_peers(0, since) == [1]
    assert control.failed_peers(1, since) == []  # a rank is not its own peer
    assert control.failed_peers(0, time.time() + 60) == []  # an earlier round's error, for a rank that started later


def test_the_launchers_signal_is_noted_for_the_ranks(tmp_path) -> None:
    control = ControlDir(tmp_path)
    assert control.launcher_signal() is None
    control.mark_launcher_signal("SIGTERM")
    assert control.launcher_signal() == "SIGTERM"
