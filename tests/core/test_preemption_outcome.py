"""How the launcher ends a launch whose ranks stopped for a preemption (``launcher._preemption_of``,
``launcher._preempted``): which launches count as preempted, whose record it takes, and what each kind raises."""

from __future__ import annotations

import dataclasses
import json
import signal
import time

import pytest

from pytorch_contract.preemption import FILE_NAME, PreemptionRecord, parse_record
from pytorch_core import launcher, preemption
from pytorch_core._control import ControlRecord, RankError
from pytorch_core._plan import ExecutionKind, LaunchPlan
from pytorch_core._processes import AgentResult
from pytorch_core.frontend import PreemptedError

LOCAL = LaunchPlan(kind=ExecutionKind.LOCAL, start_method="forkserver", collective_timeout_s=None, world_size=3)
POD = LaunchPlan(kind=ExecutionKind.CLUSTER_FANOUT, start_method="forkserver", collective_timeout_s=None)


def _mark(rank: int, checkpoint_step: int | None) -> dict:
    record = PreemptionRecord(7, checkpoint_step, "SIGTERM", 1, "pod-1", time.time(), 5.0)
    return {**json.loads(record.to_json()), "where": "/ckpt"}


def _error(rank: int, collateral: bool) -> RankError:
    return RankError(rank, time.time(), "builtins.ValueError", "boom", "", recoverable=False, collateral=collateral)


@pytest.mark.parametrize(
    ("record", "exit_codes", "interrupted", "expected"),
    [
        pytest.param(
            ControlRecord(preempted={0: _mark(0, 7), 1: _mark(1, 7), 2: _mark(2, 7)}),
            {0: 200, 1: 200, 2: 200},
            None,
            (7, 7),
            id="every-rank-stopped-rank-0-saved",
        ),
        pytest.param(
            ControlRecord(preempted={1: _mark(1, None), 2: _mark(2, None)}),
            {0: -9, 1: 200, 2: 200},
            signal.SIGTERM,
            (7, None),
            id="rank-0-killed-mid-save",
        ),
        pytest.param(
            ControlRecord(preempted={1: _mark(1, 7)}, errors=(_error(2, collateral=True),)),
            {1: 200, 2: 1},
            None,
            (7, 7),
            id="a-peer-lost-a-rank-that-left",
        ),
        pytest.param(ControlRecord(stopping=frozenset({1, 2})), {}, signal.SIGTERM, (None, None), id="grace-too-short"),
        pytest.param(
            ControlRecord(preempted={1: _mark(1, 7)}, errors=(_error(2, collateral=False),)),
            {1: 200, 2: 1},
            None,
            None,
            id="a-ranks-own-error-wins",
        ),
        pytest.param(ControlRecord(), {}, signal.SIGTERM, None, id="unarmed-ranks-as-before"),
        pytest.param(ControlRecord(preempted={0: _mark(0, 7)}), {}, None, None, id="too-late-the-run-finished"),
    ],
)
def test_which_launches_ended_in_a_preemption(record, exit_codes, interrupted, expected) -> None:
    result = AgentResult(record=record, exit_codes=exit_codes, interrupted=interrupted)
    found = launcher._preemption_of(result, LOCAL)
    if expected is None:
        assert found is None
    else:
        assert found is not None
        assert (found[0].stopped_at, found[0].checkpoint_step) == expected


RECORD = PreemptionRecord(7, 7, "SIGTERM", 1, "pod-1", 1_800_000_000.0, 5.0)


def test_locally_the_error_says_where_the_next_run_resumes(capfd) -> None:
    error = launcher._preempted(RECORD, "/tmp/ckpt", LOCAL, None)
    assert isinstance(error, PreemptedError)
    assert str(error).startswith("preempted: rank 1 (pod pod-1) got SIGTERM; every rank stopped after step 7")
    assert "the next run of this task with the same inputs resumes from step 7 (/tmp/ckpt)" in str(error)
    assert capfd.readouterr().err.startswith("pytorch task preempted: rank 1")


def test_in_a_pod_the_record_goes_beside_the_outputs_and_the_exit_code_is_set(monkeypatch) -> None:
    written: dict[str, bytes] = {}
    exits: list[bool] = []
    front = launcher.current()
    monkeypatch.setattr(front, "write_output_file", lambda name, data: written.setdefault(name, data))
    monkeypatch.setattr(launcher, "exit_as_preempted", lambda: exits.append(True))  # not atexit in pytest
    error = launcher._preempted(RECORD, "s3://bucket/ckpt", POD, signal.SIGTERM)
    assert isinstance(error, PreemptedError)
    assert "Flyte retries it as a system error" in str(error)
    assert parse_record(written[FILE_NAME]) == RECORD
    assert exits == [True]


# ---------------------------------------------------------------- a signal before any rank reported a step ----------


def test_a_signal_before_the_first_step_is_a_preemption_with_nothing_saved(tmp_path, monkeypatch) -> None:
    """The launcher got SIGTERM while its ranks were still starting: no rank reported a step, they ended at once.
    Locally the record names the checkpoint the next run resumes from (none here)."""
    monkeypatch.delenv("FLYTE_PYTORCH_CHECKPOINT_DIR", raising=False)
    plan = dataclasses.replace(LOCAL, rank_env={"FLYTE_PYTORCH_CHECKPOINT_DIR": str(tmp_path)})
    result = AgentResult(record=ControlRecord(), interrupted=signal.SIGTERM, before_first_step=True)
    found = launcher._preemption_of(result, plan)
    assert found is not None
    record, where = found
    assert (record.by, record.before_first_step, record.stopped_at, record.checkpoint_step) == (
        "launcher",
        True,
        None,
        None,
    )
    assert (record.resume_known, record.resumes_from, where) == (True, None, str(tmp_path))
    message = preemption.error_message(record, where, local=True)
    assert message.endswith(
        "the ranks stopped before their first step; nothing was saved: the next run starts from the beginning"
    )


def test_before_the_first_step_an_earlier_checkpoint_still_stands(tmp_path, monkeypatch) -> None:
    (tmp_path / "pytorch-checkpoint.json").write_text('{"version": 1, "step": 20, "file": "x", "bytes": 1}')
    plan = dataclasses.replace(LOCAL, rank_env={"FLYTE_PYTORCH_CHECKPOINT_DIR": str(tmp_path)})
    result = AgentResult(record=ControlRecord(), interrupted=signal.SIGTERM, before_first_step=True)
    record, where = launcher._preemption_of(result, plan)
    assert record.resumes_from == 20
    assert preemption.error_message(record, where, local=True).endswith(
        f"no checkpoint saved at the stop: the next run resumes from the checkpoint of step 20 ({tmp_path})"
    )


def test_in_a_pod_a_signal_before_the_first_step_is_not_charged_to_the_users_retries(monkeypatch) -> None:
    """A pod whose launcher runs its ranks through torch's agent, preempted while it starts: the record beside the
    outputs, exit code 200, and the front-end's preempted error (recoverable, of system origin)."""
    monkeypatch.delenv("FLYTE_PYTORCH_CHECKPOINT_DIR", raising=False)
    written: dict[str, bytes] = {}
    exits: list[bool] = []
    front = launcher.current()
    monkeypatch.setattr(front, "write_output_file", lambda name, data: written.setdefault(name, data))
    monkeypatch.setattr(launcher, "exit_as_preempted", lambda: exits.append(True))
    result = AgentResult(record=ControlRecord(), interrupted=signal.SIGTERM, before_first_step=True)
    record, where = launcher._preemption_of(result, POD)
    assert record.resume_known is False  # its checkpoint prefix is not read: the record cannot tell
    error = launcher._preempted(record, where, POD, signal.SIGTERM)
    assert isinstance(error, PreemptedError) and exits == [True]
    assert "the ranks stopped before their first step" in str(error)
    assert parse_record(written[FILE_NAME]).before_first_step


@pytest.mark.parametrize(
    ("errors", "by_the_signal"),
    [
        ((), True),
        ((RankError(0, 1.0, "builtins.KeyboardInterrupt", "", "", False, False),), True),  # Ctrl-C in a rank
        ((RankError(1, 1.0, "torch.distributed.DistBackendError", "", "", False, True),), True),  # a lost peer
        ((RankError(2, 1.0, "builtins.ValueError", "boom", "", False, False),), False),  # a failure of its own
    ],
)
def test_which_stops_were_the_signals_alone(errors, by_the_signal) -> None:
    from pytorch_core._processes import _ended_by_the_signal

    assert _ended_by_the_signal(ControlRecord(errors=errors)) is by_the_signal


def test_when_rank_0_could_not_say_what_stands_the_local_folder_says(tmp_path) -> None:
    """Rank 0 was SIGKILLed mid-save at the stop: the others' records cannot tell which checkpoint stands; the
    launcher reads the folder on this machine, whose manifest still names the last complete one."""
    (tmp_path / "pytorch-checkpoint.json").write_text('{"version": 1, "step": 4, "file": "x", "bytes": 1}')
    plan = dataclasses.replace(LOCAL, rank_env={"FLYTE_PYTORCH_CHECKPOINT_DIR": str(tmp_path)})
    result = AgentResult(
        record=ControlRecord(preempted={1: _mark(1, None), 2: _mark(2, None)}),
        exit_codes={0: -9, 1: 200, 2: 200},
        interrupted=signal.SIGTERM,
    )
    record, _ = launcher._preemption_of(result, plan)
    assert (record.checkpoint_step, record.resumes_from) == (None, 4)
