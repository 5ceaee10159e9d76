"""The preemption protocol (``pytorch_core.preemption``) in one process: arming, the stop of a rank alone, the
explicit API, and the agreement through a real TCP store with three simulated ranks (each its own state and store
connection, as ranks in three pods have). The same protocol on three real ranks: tests/faults/test_preemption_drills.py.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from pytorch_core import _checkpoints, preemption, progress
from pytorch_core.checkpoint import load_checkpoint, save_checkpoint
from pytorch_core.preemption import Preempted, on_preemption, preemption_requested
from pytorch_core.progress import report_progress
from tests.helpers.tcp_store import tcp_store

torch = pytest.importorskip("torch")

SIGNALS = (signal.SIGTERM, signal.SIGINT)


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """A fresh run as global rank 0 with its checkpoints in ``tmp_path``; the handlers it arms are given back."""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv(_checkpoints.CHECKPOINT_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("FLYTE_PYTORCH_TERMINATION_GRACE_S", "5")
    before = {sig: signal.getsignal(sig) for sig in SIGNALS}
    _checkpoints.reset()
    progress.start_rank()
    preemption.start()
    yield
    preemption.end()
    progress.set_step_boundary_hook(None)
    _checkpoints.reset()
    assert {sig: signal.getsignal(sig) for sig in SIGNALS} == before


def test_a_loop_that_uses_none_of_the_api_keeps_its_signal_handlers() -> None:
    """No false positive: ``report_progress()`` without a step (the keep-alive of progress_timeout) arms nothing,
    so SIGTERM and Ctrl-C do what they always did."""
    before = {sig: signal.getsignal(sig) for sig in SIGNALS}
    for _ in range(3):
        report_progress()
    assert {sig: signal.getsignal(sig) for sig in SIGNALS} == before
    assert progress.step_boundary_hook() is not None  # only the arming hook, which a step would run


def test_the_first_step_arms_the_rank_and_the_hook_then_leaves() -> None:
    report_progress(1, 10)
    assert all(signal.getsignal(sig) is preemption._on_signal for sig in SIGNALS)
    assert progress.step_boundary_hook() is None  # a step costs what it cost before: one global read
    preemption.end()
    assert all(signal.getsignal(sig) is not preemption._on_signal for sig in SIGNALS)


def test_a_rank_alone_stops_at_its_next_boundary_and_saves_there(tmp_path: Path) -> None:
    model = torch.nn.Linear(2, 1)
    state = {"model": model}
    seen: list[int] = []
    on_preemption(seen.append)
    assert load_checkpoint(state) == 0
    report_progress(1)
    report_progress(2)
    preemption.request_stop("SIGTERM")  # as the handler does when the signal comes
    with pytest.raises(Preempted) as stop:
        report_progress(3)
    record = stop.value.record
    assert (record.stopped_at, record.checkpoint_step, record.signal, record.rank) == (3, 3, "SIGTERM", 0)
    assert seen == [3]  # the callback ran at the stop, once
    assert (tmp_path / "pytorch-checkpoint-3.pt").exists()
    with pytest.raises(Preempted):  # any later boundary stops it again, without saving twice
        report_progress(4)
    assert seen == [3] and not (tmp_path / "pytorch-checkpoint-4.pt").exists()


def test_a_stop_at_a_checkpoint_step_saves_once() -> None:
    state = {"model": torch.nn.Linear(2, 1)}
    load_checkpoint(state)
    preemption.request_stop("SIGINT")
    with pytest.raises(Preempted) as stop:
        save_checkpoint(state, 4)
    assert stop.value.record.checkpoint_step == 4 and stop.value.record.signal == "SIGINT"
    assert _checkpoints.last_saved_step() == 4


def test_preemption_requested_hands_the_stop_to_the_loop() -> None:
    state = {"model": torch.nn.Linear(2, 1)}
    load_checkpoint(state)
    assert preemption_requested(1) is False
    preemption.request_stop()
    assert preemption_requested(2) is True  # saved by now
    assert _checkpoints.last_saved_step() == 2
    stopped = preemption.outcome()  # the loop returned: the run still ends as preempted
    assert stopped is not None and stopped.record.stopped_at == 2


def test_preemption_requested_without_a_step_needs_one_reported() -> None:
    with pytest.raises(TypeError, match="pass step="):
        preemption_requested()
    report_progress(5)
    assert preemption_requested() is False


def test_no_state_means_a_stop_without_a_checkpoint(capfd) -> None:
    report_progress(1)
    preemption.request_stop()
    with pytest.raises(Preempted) as stop:
        report_progress(2)
    assert stop.value.record.checkpoint_step is None
    assert "nothing to save" in capfd.readouterr().err


# ---------------------------------------------------------------- the agreement through the store -----------------


class _Rank:
    """One simulated rank: its own preemption state, step and store connection."""

    def __init__(self, rank: int, store: object) -> None:
        self.rank, self.store, self.step = rank, store, None
        self.state = preemption._Run()
        self.state.rank = rank
        self.wake = threading.Event()


@contextmanager
def _as(rank: _Rank, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run as ``rank``: its state is the module's, its step progress's."""
    saved_run, saved_step = preemption._run, progress._step
    preemption._run, progress._step = rank.state, rank.step
    try:
        yield
    finally:
        rank.step = progress._step
        preemption._run, progress._step = saved_run, saved_step


@pytest.fixture
def ranks(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[_Rank]]:
    with tcp_store() as connect:
        group = [_Rank(r, connect()) for r in range(3)]
        for rank in group:
            with _as(rank, monkeypatch):
                preemption.attach(rank.store, rank.wake, rank.rank, 3, "flyte-pytorch/0.0/")
        yield group


def _tick(rank: _Rank, monkeypatch) -> None:
    with _as(rank, monkeypatch):
        preemption.tick(rank.store)


def test_every_rank_stops_one_past_the_furthest_announced_step(ranks: list[_Rank], monkeypatch) -> None:
    """Rank 1 got SIGTERM at step 7; rank 2 was already one step ahead (8), rank 0 behind (7): S = 9."""
    for rank, step in zip(ranks, (7, 7, 8), strict=True):
        rank.step = step
    with _as(ranks[1], monkeypatch):
        preemption.request_stop()
    for rank in (ranks[1], ranks[0], ranks[2]):  # the signalled rank publishes, then the others learn and announce
        _tick(rank, monkeypatch)
    for rank in ranks:
        _tick(rank, monkeypatch)
    assert [rank.state.stop_at for rank in ranks] == [9, 9, 9]
    assert ranks[0].state.request["rank"] == 1 and ranks[2].state.request["signal"] == "SIGTERM"


def test_a_rank_past_its_announcement_waits_for_the_agreed_step(ranks: list[_Rank], monkeypatch) -> None:
    """A rank never passes its announced step + 1 before it knows S: at that boundary it waits, and goes on (or
    stops) once the others' announcements make S known."""
    for rank in ranks:
        rank.step = 4
    with _as(ranks[0], monkeypatch):
        preemption.request_stop()
    _tick(ranks[0], monkeypatch)  # rank 0 announced 4; ranks 1 and 2 have not yet
    decided: list[bool] = []

    def boundary() -> None:
        decided.append(preemption._decide(5, ranks[0].state))

    waiting = threading.Thread(target=boundary)
    waiting.start()
    time.sleep(0.3)
    assert waiting.is_alive() and decided == []  # waits at 5 = its announcement + 1
    ranks[1].step = ranks[2].step = 5  # they moved on meanwhile: S = 6
    for rank in (*ranks[1:], ranks[0], ranks[1]):  # they announce and agree; the others' watchers adopt S
        _tick(rank, monkeypatch)
    waiting.join(5)
    assert decided == [False] and [rank.state.stop_at for rank in ranks[1:]] == [6, 6]
    with _as(ranks[0], monkeypatch):
        assert preemption._decide(6) is True


def test_a_rank_that_never_announces_does_not_hold_the_others_past_the_agreement_wait(
    ranks: list[_Rank], monkeypatch
) -> None:
    for rank in ranks:
        rank.step = 2
    with _as(ranks[0], monkeypatch):
        preemption.request_stop()
    _tick(ranks[0], monkeypatch)
    _tick(ranks[1], monkeypatch)  # rank 2's watcher is gone (its pod, say)
    assert ranks[0].state.stop_at is None  # within the agreement wait: still waiting for rank 2
    ranks[0].state.request["time"] -= 3.0  # the agreement wait (40 % of a 5 s grace, 2 s) has passed
    _tick(ranks[0], monkeypatch)
    assert ranks[0].state.stop_at == 3 and ranks[1].state.stop_at is None
    _tick(ranks[1], monkeypatch)
    assert ranks[1].state.stop_at == 3  # adopted from the store, not computed again


def test_a_save_that_fails_at_the_stop_leaves_the_last_checkpoint_and_is_still_a_preemption(monkeypatch, capfd) -> None:
    """A blob store that fails just then must not turn the preemption into the user's own error."""
    state = {"model": torch.nn.Linear(2, 1)}
    load_checkpoint(state)
    save_checkpoint(state, 2)

    def broken(state: object, step: int) -> str:
        raise OSError("the store is unreachable")

    monkeypatch.setattr(_checkpoints, "write_checkpoint", broken)
    preemption.request_stop()
    with pytest.raises(Preempted) as stop:
        report_progress(3)
    assert stop.value.record.checkpoint_step is None
    assert "could not be saved (OSError: the store is unreachable); the last complete checkpoint stands (step 2)" in (
        capfd.readouterr().err
    )


def test_a_function_in_another_thread_has_its_signals_handled_by_the_main_thread() -> None:
    """An ``async def`` function in a process that already runs an event loop (Flyte 2's runtime in a pod) runs in a
    thread of its own, which cannot set handlers: the main thread holds them for it. Unarmed, a signal does what it
    did (here Ctrl-C raises KeyboardInterrupt); once the function's loop arms, SIGTERM asks for the agreed stop."""

    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own (flytekit, if loaded, sets one)
    try:
        _signals_for_a_thread()
    finally:
        signal.signal(signal.SIGINT, before)


def _signals_for_a_thread() -> None:
    import os

    before = signal.getsignal(signal.SIGINT)
    with preemption.signals_for_a_thread():
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # the handler runs at the next bytecode; the sleep is interrupted
        worker = threading.Thread(target=lambda: report_progress(1))  # the loop's first step arms it
        worker.start()
        worker.join()
        assert preemption._run.armed
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.1)
    assert preemption._run.request is not None and preemption._run.request["signal"] == "SIGTERM"
    assert signal.getsignal(signal.SIGINT) is before


# ---------------------------------------------------------------- what a signal is, and what is said -------------


def test_a_signal_after_a_peers_failure_is_no_preemption(capfd) -> None:
    """torch's agent SIGTERMs the ranks left after a rank failed; an armed rank must not take that for a
    preemption: no request, no agreed step, no words; global rank 0 hands over where it stood; then the signal does
    what it did before the rank armed (here a recording handler stands for the default action, which ends the rank)."""
    sent: list[dict] = []
    progress.start_reporting(sent.append)
    seen: list[int] = []
    preemption.set_signal_source(lambda: preemption.FAILURE)
    report_progress(1, 10, loss=0.5)  # arms the rank
    before = preemption._run.handlers[signal.SIGTERM]
    preemption._run.handlers[signal.SIGTERM] = lambda signum, frame: seen.append(signum)
    report_progress(9, 10, loss=0.1)
    try:
        preemption._on_signal(signal.SIGTERM, None)
    finally:
        preemption._run.handlers[signal.SIGTERM] = before
    assert seen == [signal.SIGTERM]
    assert preemption._run.request is None and not preemption.stopping()
    assert "preemption" not in capfd.readouterr().err
    assert sent[-1]["stopped"] is True and sent[-1]["step"] == 9 and sent[-1]["metrics"] == {"loss": 0.1}
    report_progress(10, 10)  # no stop at a boundary: nothing was agreed


def test_a_signal_the_launcher_passed_on_is_said_once_as_the_launchers(capfd) -> None:
    preemption.set_signal_source(lambda: preemption.LAUNCHER, speaks_for_launcher=True)
    report_progress(1)
    preemption._on_signal(signal.SIGTERM, None)
    assert preemption._run.request["by"] == "launcher"
    err = capfd.readouterr().err
    assert (
        err == "preemption: the launcher got SIGTERM: every rank stops after the next step all of them can reach "
        "(termination grace 5s)\n"
    )
    with pytest.raises(Preempted) as stop:
        report_progress(2)
    assert stop.value.record.by == "launcher"
    assert str(stop.value).startswith("preempted: the launcher (pod ")


def test_the_other_ranks_the_launcher_passed_the_signal_to_keep_quiet(capfd) -> None:
    preemption.set_signal_source(lambda: preemption.LAUNCHER, speaks_for_launcher=False)
    report_progress(1)
    preemption._on_signal(signal.SIGTERM, None)
    assert preemption._run.request is not None and capfd.readouterr().err == ""


def test_a_signal_to_this_rank_is_still_announced_as_its_preemption(capfd) -> None:
    """The false positive the other way: no peer failed, the launcher got nothing: this rank's own preemption."""
    preemption.set_signal_source(lambda: None)
    report_progress(1)
    preemption._on_signal(signal.SIGTERM, None)
    err = capfd.readouterr().err
    assert err.startswith("preemption: rank 0 got SIGTERM: every rank stops after the next step")
    assert "saves a checkpoint" not in err  # nothing is promised before it is known


def test_a_stop_with_nothing_to_save_says_the_next_run_starts_from_the_beginning(capfd) -> None:
    report_progress(1)
    preemption.request_stop()
    with pytest.raises(Preempted) as stop:
        report_progress(2)
    record = stop.value.record
    assert (record.checkpoint_step, record.resume_known, record.resumes_from) == (None, True, None)
    assert str(stop.value).endswith(
        "every rank stopped after step 2; nothing was saved: the next run starts from the beginning"
    )
    err = capfd.readouterr().err
    assert "the next run starts from the beginning" in err and "checkpoint stands" not in err


def test_a_stop_whose_save_failed_names_the_checkpoint_the_next_run_resumes_from(monkeypatch, capfd) -> None:
    state = {"model": torch.nn.Linear(2, 1)}
    load_checkpoint(state)
    save_checkpoint(state, 4)

    def broken(state: object, step: int) -> str:
        raise OSError("the store is unreachable")

    monkeypatch.setattr(_checkpoints, "write_checkpoint", broken)
    preemption.request_stop()
    with pytest.raises(Preempted) as stop:
        report_progress(6)
    record = stop.value.record
    assert (record.checkpoint_step, record.resumes_from) == (None, 4)
    assert str(stop.value).endswith(
        "no checkpoint saved at the stop: the next run resumes from the checkpoint of step 4"
    )
