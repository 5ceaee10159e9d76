"""report_progress: cheap on every rank, throttled hand-offs on global rank 0, clear errors, the step-boundary hook."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from pytorch_core import _hang, progress
from pytorch_core.progress import HANDOFF_INTERVAL_S, report_progress


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(progress, "_monotonic", fake)
    return fake


@pytest.fixture(autouse=True)
def clean_state() -> Iterator[None]:
    yield
    progress.stop_reporting()
    progress.set_step_boundary_hook(None)
    progress.reset()


class CountingMetric:
    """A stand-in for a tensor: counts how often it is turned into a float (a tensor's device sync)."""

    def __init__(self, value: float) -> None:
        self.value = value
        self.conversions = 0

    def __float__(self) -> float:
        self.conversions += 1
        return self.value


def test_the_old_import_path_of_the_no_argument_call_is_the_one_function() -> None:
    assert _hang.report_progress is report_progress


def test_the_no_argument_call_only_feeds_the_hang_watch(clock: Clock) -> None:
    sent: list[dict[str, Any]] = []
    progress.start_reporting(sent.append)
    report_progress()
    assert progress.last_report() == clock.now
    assert sent == []  # nothing to show: no step


def test_a_rank_that_is_not_rank_zero_only_notes_the_time(clock: Clock) -> None:
    for step in range(100):
        clock.now += 1
        report_progress(step, 100, loss=0.5)
    assert progress.last_report() == clock.now
    assert progress._reporter is None  # nothing kept, nothing sent


def test_rank_zero_hands_off_at_once_then_at_most_every_interval(clock: Clock) -> None:
    sent: list[dict[str, Any]] = []
    progress.start_reporting(sent.append)
    for step in range(1, 101):
        clock.now += 0.1  # 10 steps a second for 10 s
        report_progress(step, 100, loss=1 / step)
    assert [s["step"] for s in sent] == [1, 21, 41, 61, 81]
    assert all(s["total"] == 100 and not s["final"] for s in sent)
    assert sent[1]["metrics"] == {"loss": 1 / 21}
    progress.finish_reporting()
    assert sent[-1]["step"] == 100 and sent[-1]["final"] is True
    assert HANDOFF_INTERVAL_S == 2.0


def test_a_run_that_reports_no_step_hands_off_nothing(clock: Clock) -> None:
    sent: list[dict[str, Any]] = []
    progress.start_reporting(sent.append)
    for _ in range(10):
        report_progress()
    progress.finish_reporting()
    assert sent == []


def test_metrics_are_converted_only_at_a_hand_off(clock: Clock) -> None:
    sent: list[dict[str, Any]] = []
    progress.start_reporting(sent.append)
    metric = CountingMetric(0.25)
    for step in range(1000):
        clock.now += 0.01
        report_progress(step, loss=metric)
    assert metric.conversions == len(sent) == 5  # at 0 s, 2 s, 4 s, 6 s, 8 s: not 1000 device syncs
    assert sent[-1]["metrics"] == {"loss": 0.25}


def test_a_metric_given_once_keeps_its_value(clock: Clock) -> None:
    sent: list[dict[str, Any]] = []
    progress.start_reporting(sent.append)
    report_progress(1, loss=0.9, accuracy=0.1)
    clock.now += 3
    report_progress(2, loss=0.8)
    assert sent[-1]["metrics"] == {"loss": 0.8, "accuracy": 0.1}


def test_non_finite_metrics_travel_as_words(clock: Clock) -> None:
    sent: list[dict[str, Any]] = []
    progress.start_reporting(sent.append)
    report_progress(1, loss=float("nan"), scale=float("-inf"))
    assert sent[0]["metrics"] == {"loss": "nan", "scale": "-inf"}


def test_numpy_and_tensor_steps_are_whole_numbers(clock: Clock) -> None:
    import numpy as np
    import torch

    sent: list[dict[str, Any]] = []
    progress.start_reporting(sent.append)
    report_progress(np.int64(3), torch.tensor(10), loss=torch.tensor(0.5))
    assert sent[0]["step"] == 3 and sent[0]["total"] == 10 and sent[0]["metrics"] == {"loss": 0.5}


@pytest.mark.parametrize(
    ("args", "error", "text"),
    [
        pytest.param((1.5,), TypeError, "report_progress(step=1.5): step must be a whole number", id="float-step"),
        pytest.param(("3",), TypeError, "report_progress(step='3')", id="string-step"),
        pytest.param((True,), TypeError, "report_progress(step=True)", id="bool-step"),
        pytest.param((3, 2.5), TypeError, "report_progress(total=2.5)", id="float-total"),
        pytest.param((-1,), ValueError, "report_progress(step=-1): step must be >= 0", id="negative-step"),
    ],
)
def test_a_bad_step_or_total_is_refused_naming_it(args: tuple[Any, ...], error: type, text: str) -> None:
    sent: list[dict[str, Any]] = []
    progress.start_reporting(sent.append)
    with pytest.raises(error) as caught:
        report_progress(*args)
    assert text in str(caught.value)


def test_a_metric_that_is_not_a_number_is_refused_at_the_hand_off(clock: Clock) -> None:
    progress.start_reporting(lambda snapshot: None)
    with pytest.raises(TypeError, match=r"report_progress\(loss=\.\.\.\): a metric must be a number"):
        report_progress(1, loss="low")


def test_the_step_boundary_hook_runs_in_the_loop_at_each_call(clock: Clock) -> None:
    """What preemption builds on: a watcher sets the hook, the loop's next call runs it between two steps."""
    seen: list[Any] = []
    report_progress(1)
    progress.set_step_boundary_hook(seen.append)
    report_progress(2)
    report_progress()
    progress.set_step_boundary_hook(None)
    report_progress(3)
    assert seen == [2, None]


def test_the_hook_can_stop_the_loop_at_the_boundary(clock: Clock) -> None:
    class Stop(Exception):
        pass

    def stop_at_5(step: Any) -> None:
        if step is not None and step >= 5:
            raise Stop(step)

    progress.set_step_boundary_hook(stop_at_5)
    done = []
    with pytest.raises(Stop):
        for step in range(10):
            done.append(step)
            report_progress(step)
    assert done == [0, 1, 2, 3, 4, 5]


def test_leaving_trainer_status_is_carried_in_the_snapshots(clock: Clock) -> None:
    sent: list[dict[str, Any]] = []
    progress.start_reporting(sent.append)
    report_progress(1)
    progress.leave_trainer_status("transformers")
    clock.now += 3
    report_progress(2)
    assert [s["trainer_status"] for s in sent] == [True, False]


def test_hand_off_due_tells_callbacks_when_to_read_costly_metrics(clock: Clock) -> None:
    assert not progress.hand_off_due()  # not rank 0
    progress.start_reporting(lambda snapshot: None)
    assert progress.hand_off_due()
    report_progress(1)
    assert not progress.hand_off_due()
    clock.now += HANDOFF_INTERVAL_S
    assert progress.hand_off_due()


def test_the_hang_watch_reads_the_same_clock(clock: Clock) -> None:
    """progress_timeout is unchanged: the watch compares its limit with the time of the last call, any form."""
    report_progress(7, 10, loss=1.0)
    assert progress.last_report() == 1000.0
    progress.reset()  # what start_watch does when the group is set up
    assert progress.last_report() is None


def test_a_negative_step_is_refused_on_every_rank() -> None:
    assert progress._reporter is None  # not rank 0
    with pytest.raises(ValueError, match=r"report_progress\(step=-3\): step must be >= 0"):
        report_progress(-3)
