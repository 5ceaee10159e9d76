"""The launcher's failures as flytekit sees them, through `FLYTEKIT` (``flytekitplugins_pytorch/_frontend.py``).

The core decides which rank failed and whether Flyte may retry (``tests/core``: ``test_failure.py``, ``test_hang.py``
and ``test_control.py`` run without any SDK); flytekit's front-end says it in flytekit's words: a retryable failure
is a ``FlyteRecoverableException``, a replica that is not global rank 0 ends with ``IgnoreOutputs``, and a rank's
stack leaves out the frames of ``pyflyte run``.
"""

from __future__ import annotations

import pickle

import pytest
from flytekit.core.base_task import IgnoreOutputs
from flytekit.exceptions.user import FlyteRecoverableException

from flytekitplugins_pytorch import PyTorch
from pytorch_core import _hang, launcher
from pytorch_core._control import ControlRecord
from pytorch_core._failure import (
    HangError,
    PeerFailedError,
    RankFailedError,
    RankFailure,
    find_root_cause,
    to_exception,
)
from pytorch_core._plan import plan_launch
from pytorch_core._processes import AgentResult
from tests.core.test_failure import outcomes, report, timeout_report
from tests.helpers.tcp_store import tcp_store

# ---------------------------------------------------------------- the exception the task raises -------------------


@pytest.mark.parametrize(
    "original", [pytest.param(FlyteRecoverableException("flaky storage"), id="FlyteRecoverableException")]
)
def test_a_rebuilt_exception_is_its_own_type_and_pickles(original: BaseException) -> None:
    error = report(1, 1.0, original, recoverable=isinstance(original, FlyteRecoverableException))
    exc = to_exception(find_root_cause(outcomes(error)))
    back = pickle.loads(pickle.dumps(exc))
    assert type(exc) is type(original) and type(back) is type(original)
    assert str(back) == str(exc) and (back.rank, back.world_size) == (1, 3)
    assert back.__dict__ == exc.__dict__
    try:
        raise exc
    except type(original) as caught:  # ``except ValueError`` catches it, as the user expects
        assert caught is exc


@pytest.mark.parametrize(
    ("recoverable", "expected"),
    [pytest.param(True, FlyteRecoverableException, id="recoverable-without-its-type")],
)
@pytest.mark.parametrize("exc_bytes", [None, b"not a pickle"], ids=["unpicklable", "corrupt"])
def test_a_type_that_cannot_be_rebuilt_falls_back_to_rank_failure(recoverable, expected, exc_bytes) -> None:
    error = report(2, 1.0, recoverable=recoverable, exc_bytes=exc_bytes)
    exc = to_exception(find_root_cause(outcomes(error)))
    assert isinstance(exc, expected) and isinstance(exc, RankFailure) and not isinstance(exc, RankFailedError)
    assert (exc.rank, exc.world_size, exc.type_name, exc.original_message) == (2, 3, "builtins.ValueError", "boom")
    assert str(exc).startswith("rank 2 (of 3) failed: ValueError: boom")
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is type(exc) and isinstance(back, expected) and back.rank == 2


# ---------------------------------------------------------------- a rank's stack under pyflyte run ----------------

PYFLYTE_RUN_DUMP = """Current thread 0x00007f0000000001 (most recent call first):
  File "/home/me/train.py", line 42 in step_loop
  File "/work/pytorch_core/_rank.py", line 230 in rank_entrypoint
  File "/venv/torch/distributed/elastic/multiprocessing/api.py", line 600 in _wrap
  File "/venv/flytekit/core/base_task.py", line 767 in dispatch_execute
  File "/venv/flytekit/clis/sdk_in_container/run.py", line 500 in invoke
  File "/venv/click/core.py", line 794 in invoke
  File "/venv/click/core.py", line 1078 in main
  File "/venv/bin/pyflyte", line 8 in <module>
"""


def test_a_hang_report_drops_click_and_flytekit_frames_and_keeps_the_users_and_torchs() -> None:
    cause = find_root_cause(
        outcomes(timeout_report(2, 1.0), timeout_report(0, 1.1), stacks={1: PYFLYTE_RUN_DUMP}, exit_codes={2: 1})
    )
    start = cause.details.index("--- stack of rank 1 when rank 2 gave up (most recent call first) ---")
    assert cause.details[start + 1 :] == (
        "  /home/me/train.py:42 in step_loop",
        "  /work/pytorch_core/_rank.py:230 in rank_entrypoint",
        "  /venv/torch/distributed/elastic/multiprocessing/api.py:600 in _wrap",
        "  /venv/bin/pyflyte:8 in <module>",
        "  (4 click and flytekit frames left out)",
    )


# ---------------------------------------------------------------- naming the rank that did not arrive -------------


@pytest.fixture
def store():
    with tcp_store() as connect:
        yield connect


def test_a_vanished_rank_is_a_retryable_hang(store, monkeypatch) -> None:
    waiting = _hang.HangWatch(store(), 0, 2, recoverable=True)
    monkeypatch.setattr(_hang, "_current", waiting)
    monkeypatch.setattr(_hang, "ANSWER_WAIT_S", 0.3)
    error = _hang.name_culprit(RuntimeError("Connection closed by peer"))
    assert isinstance(error, HangError) and isinstance(error, FlyteRecoverableException)
    assert error.rank == 1


def test_a_peers_recoverable_error_stays_recoverable(store, monkeypatch) -> None:
    waiting = _hang.HangWatch(store(), 0, 2, recoverable=False)
    failing = _hang.HangWatch(store(), 1, 2, recoverable=False)
    monkeypatch.setattr(_hang, "_current", failing)
    _hang.mark_failed(FlyteRecoverableException("flaky storage"))
    monkeypatch.setattr(_hang, "_current", waiting)
    error = _hang.name_culprit(RuntimeError("Connection closed by peer"))
    assert isinstance(error, PeerFailedError) and isinstance(error, FlyteRecoverableException)
    assert error.rank == 1 and "failed: FlyteRecoverableException: " in str(error) and "flaky storage" in str(error)


# ---------------------------------------------------------------- a replica that is not global rank 0 -------------

POD_PLAN = plan_launch(
    PyTorch(nproc_per_node=2),
    {"RANK": "1", "WORLD_SIZE": "4", "MASTER_ADDR": "m", "PET_NNODES": "2", "PET_NODE_RANK": "1"},
    local=False,
)


def test_a_pod_without_rank_0_ignores_outputs() -> None:
    with pytest.raises(IgnoreOutputs):
        launcher._outcome(AgentResult(record=ControlRecord(done=frozenset({2, 3}))), POD_PLAN)
