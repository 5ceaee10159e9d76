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
    """A tensor is read (``.item()``, a device sync) only in the calls that hand a snapshot off, never in the others:
    the points of the curves are kept as given and read together then."""
    sent: list[dict[str, Any]] = []
    progress.start_reporting(sent.append)
    metrics = [CountingMetric(1.0 / (step + 1)) for step in range(1000)]
    read_in_calls_without_a_hand_off = 0
    for step in range(1000):
        clock.now += 0.01
        before, handed = sum(m.conversions for m in metrics), len(sent)
        report_progress(step, loss=metrics[step])
        if len(sent) == handed:
            read_in_calls_without_a_hand_off += sum(m.conversions for m in metrics) - before
    assert len(sent) == 5  # at 0 s, 2 s, 4 s, 6 s, 8 s
    assert read_in_calls_without_a_hand_off == 0  # not 1000 device syncs, one per step
    assert sent[-1]["metrics"] == {"loss": 1.0 / (sent[-1]["step"] + 1)}
    assert all(m.conversions <= 2 for m in metrics)  # a point is read once (and the latest value once more)


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


def test_a_metric_that_is_not_a_number_is_refused_at_the_call_that_gives_it(clock: Clock) -> None:
    """``report_progress(5, 10, loss=None)`` between two hand-offs fails there, naming the metric: not at a later
    call, and not after the function returned."""
    sent: list[dict[str, Any]] = []
    progress.start_reporting(sent.append)
    report_progress(1, 10, loss=0.5)  # the first hand-off
    for bad in (None, "low", b"x", [0.5], object()):
        with pytest.raises(TypeError, match=r"report_progress\(loss=.*\): a metric must be a number"):
            report_progress(5, 10, loss=bad)
    clock.now += 3
    report_progress(6, 10)  # the next hand-off: the bad values were never kept
    progress.finish_reporting()
    assert [s["metrics"] for s in sent] == [{"loss": 0.5}] * 3
    assert sent[-1]["final"] and sent[-1]["step"] == 6


@pytest.mark.parametrize("good", [0, 1, 0.5, True, float("nan"), 10**30], ids=repr)
def test_numbers_of_every_kind_are_metrics(clock: Clock, good: object) -> None:
    """No false positive: what ``float()`` reads is a metric (NumPy and tensors: below)."""
    sent: list[dict[str, Any]] = []
    progress.start_reporting(sent.append)
    report_progress(1, loss=good)
    assert list(sent[0]["metrics"]) == ["loss"]


def test_tensors_and_numpy_values_are_metrics_and_a_tensor_of_many_elements_is_not(clock: Clock) -> None:
    import numpy as np

    torch = pytest.importorskip("torch")
    sent: list[dict[str, Any]] = []
    progress.start_reporting(sent.append)
    report_progress(1, a=np.float32(0.5), b=np.int64(3), c=torch.tensor(0.25), d=torch.tensor([2.0]))
    assert sent[0]["metrics"] == {"a": 0.5, "b": 3.0, "c": 0.25, "d": 2.0}
    with pytest.raises(TypeError, match=r"report_progress\(loss=\.\.\.\): .* a Tensor of 3 elements"):
        report_progress(2, loss=torch.ones(3))


def test_a_metric_that_cannot_be_read_never_fails_the_function_after_it_returned(clock: Clock) -> None:
    """A value whose conversion fails only when read (here its ``__float__`` raises) is left out of the final
    snapshot: the task's result is not lost to a progress line."""

    class Unreadable:
        def __float__(self) -> float:
            raise RuntimeError("device lost")

    sent: list[dict[str, Any]] = []
    progress.start_reporting(sent.append)
    report_progress(1, 2, loss=0.5)
    report_progress(2, 2, loss=Unreadable())  # no hand-off due: kept, not read
    progress.finish_reporting()  # the function returned: this must not raise
    assert sent[-1]["final"] and sent[-1]["metrics"] == {}


@pytest.mark.parametrize(
    ("calls", "said"),
    [
        ([(1, 0)], "total=0: no percentage and no ETA are shown"),
        ([(1, 40), (50, None)], "report_progress(step=50, total=40): the step is past the total"),
        ([(5, 4)], "report_progress(step=5, total=4): the step is past the total"),
    ],
)
def test_a_total_of_zero_or_a_step_past_the_total_is_said_once(clock: Clock, capfd, calls, said) -> None:
    progress.start_reporting(lambda snapshot: None)
    for _ in range(3):
        for step, total in calls:
            report_progress(step, total)
    err = capfd.readouterr().err
    assert err.count(said) == 1, err


def test_a_total_reached_exactly_says_nothing(clock: Clock, capfd) -> None:
    progress.start_reporting(lambda snapshot: None)
    for step in range(41):
        report_progress(step, 40)
    assert capfd.readouterr().err == ""


def test_outside_a_pytorch_task_the_call_says_once_where_it_works(monkeypatch, capfd) -> None:
    """A plain script (or a plain ``@flytekit.task``) calling it: one line, naming report_progress and where it works;
    on global rank 0 only (under torchrun every rank would say it), and not inside a task."""
    monkeypatch.setattr(progress, "_said_outside", False)
    monkeypatch.setattr(progress, "_active", False)  # no task runs in this process
    monkeypatch.delenv("RANK", raising=False)
    for step in range(5):
        report_progress(step, 5, loss=1.0)
    err = capfd.readouterr().err
    assert err.count("report_progress: called outside a pytorch task, so nothing is shown") == 1, err
    assert "@pytorch_task" in err

    monkeypatch.setattr(progress, "_said_outside", False)
    monkeypatch.setenv("RANK", "2")
    report_progress(1)
    assert capfd.readouterr().err == ""  # rank 2 of a torchrun job: rank 0 says it

    monkeypatch.setattr(progress, "_said_outside", False)
    monkeypatch.setenv("RANK", "0")
    progress.start_rank()  # inside a task: every rank's calls count
    try:
        report_progress(1)
    finally:
        progress.end_rank()
    assert capfd.readouterr().err == ""


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


class DeviceMetric:
    """A stand-in for a one-element tensor on a GPU: reading it alone (``float()``, a device sync) is counted; its
    ``detach()`` is a real CPU tensor, which the hand-off stacks with the others and copies once."""

    device = type("Device", (), {"type": "cuda", "__hash__": lambda self: 1, "__eq__": lambda s, o: True})()
    syncs = 0

    def __init__(self, value: float) -> None:
        self.value = value

    def numel(self) -> int:
        return 1

    def detach(self) -> Any:
        import torch

        return torch.tensor(self.value)

    def __float__(self) -> float:
        DeviceMetric.syncs += 1
        return self.value


def test_a_hand_off_reads_its_device_tensors_together_not_one_sync_per_point(clock: Clock) -> None:
    """A point per report must not cost a device synchronization per point: the hand-off stacks the device tensors
    it carries and copies them once (benchmarks/progress_gpu.py counts the syncs on a real GPU)."""
    pytest.importorskip("torch")
    sent: list[dict[str, Any]] = []
    progress.start_reporting(sent.append)
    DeviceMetric.syncs = 0
    report_progress(0, loss=DeviceMetric(1.0))  # the first hand-off
    for step in range(1, 41):
        clock.now += 0.01
        report_progress(step, loss=DeviceMetric(1.0 / step))
    clock.now += 3
    report_progress(41, loss=DeviceMetric(0.5))
    assert DeviceMetric.syncs == 0  # nothing read one by one
    points = sent[-1]["points"]
    assert [p[0] for p in points] == list(range(1, 42))
    assert points[9][1]["loss"] == pytest.approx(0.1) and sent[-1]["metrics"] == {"loss": 0.5}
