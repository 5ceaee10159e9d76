"""Naming the rank that did not arrive through the group's store (``_hang.py``), with a real TCP store in-process.

Each "rank" is a :class:`HangWatch` with its own connection to one store, as ranks in different pods have; the
watches answer with this process's main thread stack (the test function: outside torch.distributed).
"""

from __future__ import annotations

import json
import time

import pytest

from pytorch_core import _hang
from pytorch_core._failure import HangError, PeerFailedError
from pytorch_core.frontend import RecoverableError
from tests.helpers.tcp_store import tcp_store


@pytest.fixture
def store():
    with tcp_store() as connect:
        yield connect


def test_the_rank_outside_torch_distributed_is_named_with_its_node_and_pod(store, monkeypatch) -> None:
    monkeypatch.setenv("_F_WN", "job-worker-0")
    monkeypatch.setenv("GROUP_RANK", "1")
    waiting = _hang.HangWatch(store(), 0, 3, recoverable=True)
    stuck = _hang.HangWatch(store(), 1, 3, recoverable=True)
    returned = _hang.HangWatch(store(), 2, 3, recoverable=True)
    monkeypatch.setattr(_hang, "_current", waiting)
    try:
        stuck.start()
        returned.mark_done()
        started = time.monotonic()
        error = _hang.name_culprit(RuntimeError("Timed out waiting 10000ms for recv operation to complete"))
        took = time.monotonic() - started
    finally:
        stuck.stop()
    # rank 1 was still running the task's code: not evidence of a bad node, so not retried despite retry_hangs
    assert type(error) is HangError and not isinstance(error, RecoverableError)
    assert error.rank == 1 and error.world_size == 3 and error.type_name == "builtins.RuntimeError"
    text = str(error)
    assert text.startswith("rank 1 (of 3) on node 1 (pod job-worker-0) did not arrive: still running at "), text
    assert "test_hang.py" in text and "outside torch.distributed" in text
    assert "rank 2 (of 3) did not arrive: its function returned without joining the others" in text
    assert "rank 0 on node 1 (pod job-worker-0) gave up waiting: RuntimeError: Timed out" in text
    assert took < _hang.ANSWER_WAIT_S  # every other rank answered or had left: no waiting out the deadline


def test_a_rank_that_never_answers_is_named_after_the_wait(store, monkeypatch) -> None:
    waiting = _hang.HangWatch(store(), 0, 2, recoverable=False)
    monkeypatch.setattr(_hang, "_current", waiting)
    monkeypatch.setattr(_hang, "ANSWER_WAIT_S", 0.3)
    error = _hang.name_culprit(RuntimeError("Connection closed by peer"))
    assert type(error) is HangError  # retry_hangs=False: permanent
    assert str(error).startswith("rank 1 (of 2) did not arrive: did not answer within 0s (its process or pod is gone")


def test_a_vanished_rank_is_a_retryable_hang(store, monkeypatch) -> None:
    waiting = _hang.HangWatch(store(), 0, 2, recoverable=True)
    monkeypatch.setattr(_hang, "_current", waiting)
    monkeypatch.setattr(_hang, "ANSWER_WAIT_S", 0.3)
    error = _hang.name_culprit(RuntimeError("Connection closed by peer"))
    assert isinstance(error, HangError) and isinstance(error, RecoverableError)
    assert error.rank == 1


@pytest.mark.parametrize(
    "own",
    [RuntimeError("DataLoader timed out after 1 seconds"), TimeoutError("metadata service timed out")],
    ids=["dataloader-timeout", "user-timeout"],
)
def test_a_peer_that_raised_its_own_error_is_named_with_its_type_and_never_retried(store, monkeypatch, own) -> None:
    waiting = _hang.HangWatch(store(), 0, 2, recoverable=True)
    failing = _hang.HangWatch(store(), 1, 2, recoverable=True)
    monkeypatch.setattr(_hang, "_current", failing)
    _hang.mark_failed(own)
    monkeypatch.setattr(_hang, "_current", waiting)
    error = _hang.name_culprit(RuntimeError("Connection closed by peer"))
    assert isinstance(error, PeerFailedError) and not isinstance(error, (HangError, RecoverableError))
    assert error.rank == 1 and error.type_name == f"builtins.{type(own).__name__}"
    assert str(error).startswith("rank 1 (of 2) on node "), str(error)
    assert f"failed: {type(own).__name__}: {own}; rank 0 " in str(error)


def test_a_request_of_an_earlier_attempt_is_not_read(store, monkeypatch) -> None:
    client = store()
    client.set(_hang._prefix() + "request", "0")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    watch = _hang.HangWatch(client, 1, 2, recoverable=True)
    assert watch.prefix != _hang._prefix().replace(".1/", ".0/")
    assert not client.check([watch.prefix + "request"])


def test_no_watch_names_nobody(monkeypatch) -> None:
    monkeypatch.setattr(_hang, "_current", None)
    assert _hang.name_culprit(RuntimeError("timed out")) is None


def test_an_answer_carries_the_main_threads_stack(store) -> None:
    client = store()
    watch = _hang.HangWatch(client, 1, 2, recoverable=True)
    watch.start()
    try:
        client.set(watch.prefix + "request", "0")
        deadline = time.monotonic() + 5
        while not client.check([watch.prefix + "answer/1"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        answer = json.loads(client.get(watch.prefix + "answer/1").decode())
    finally:
        watch.stop()
    assert "in test_an_answer_carries_the_main_threads_stack" in answer["stack"]


def test_a_peers_recoverable_error_stays_recoverable(store, monkeypatch) -> None:
    waiting = _hang.HangWatch(store(), 0, 2, recoverable=False)
    failing = _hang.HangWatch(store(), 1, 2, recoverable=False)
    monkeypatch.setattr(_hang, "_current", failing)
    _hang.mark_failed(RecoverableError("flaky storage"))
    monkeypatch.setattr(_hang, "_current", waiting)
    error = _hang.name_culprit(RuntimeError("Connection closed by peer"))
    assert isinstance(error, PeerFailedError) and isinstance(error, RecoverableError)
    assert error.rank == 1 and "failed: RecoverableError: " in str(error) and "flaky storage" in str(error)
