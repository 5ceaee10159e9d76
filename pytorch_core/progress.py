"""``report_progress(step, total=None, **metrics)``: where a training run stands, from inside its loop.

Every rank may call it once per step. What happens on each call:

- every rank notes the time (a ``time.monotonic()`` read): ``progress_timeout`` (``_hang.py``) stops a rank that
  called it once and then not again for that long;
- global rank 0 also keeps the step, the total and the latest value of each metric (attribute stores), and at most
  every :data:`HANDOFF_INTERVAL_S` seconds hands a snapshot to its launcher: a small file in the launch's control
  directory (``_control.ControlDir.write_progress``), or, when the function runs in the launcher's own process (the
  in-process mode, a pod with one rank), a call into the launcher's follower. Metric values are turned into floats
  only then, so a tensor's ``.item()`` (a device sync) runs once per hand-off, not once per step;
- global rank 0 keeps, per call that gives metrics, a point of the curves (the values as given, a tensor detached
  and read only at the hand-off; bounded, and thinned on long runs), and checks each metric at the call: a value
  that is no number fails there, never at a later hand-off. The snapshot when the function returns, or when it stops
  before that (it raised, or its rank is stopped: marked ``stopped``), never raises;
- every rank records the step (one global store: the preemption watcher reads it, ``preemption.py``), and a
  step-boundary hook runs when one is set (:func:`set_step_boundary_hook`): one global read otherwise. The first
  call with a step arms the rank for a preemption (the hook that does it then leaves).

The launcher's follower (``_progress_follow.py``) shows what rank 0 handed over: the console line, the front-end's
page (flytekit's Deck, Flyte 2's report), the progress record beside the outputs on a cluster
(``pytorch_contract.progress``) and Kubeflow Trainer's ``trainerStatus`` where the TrainJob asks for it. Other ranks
never write anything. A run that never reports writes nothing. Outside a ``pytorch`` task (no launcher of ours: a
plain script, a plain ``@flytekit.task``, torchrun) the first call says once, on global rank 0, that nothing is shown.

The step boundary: a loop that calls ``report_progress(step)`` hands control to the plugin between two steps, on
every rank, at the same step. That is where a preemption stops the ranks at an agreed step (``preemption.py``: the
watcher of ``_hang.py`` learns through the group's store at which step every rank stops) without any other code in
the loop: the watcher sets the hook, and the hook runs in the main thread at the next call.

Neither torch nor a Flyte SDK is imported here.
"""

from __future__ import annotations

import math
import numbers
import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, Optional

from pytorch_contract.preemption import positive_seconds
from pytorch_contract.progress import MAX_METRIC_NAME, MAX_METRICS

__all__ = [
    "report_progress",
    "HANDOFF_INTERVAL_S",
    "set_step_boundary_hook",
    "step_boundary_hook",
    "last_report",
    "last_step",
    "note_step",
    "active",
    "hand_off_due",
    "leave_trainer_status",
]

POINTS_PER_HAND_OFF = 200
"""The most points of the curves one hand-off carries (a short run keeps one per report; past that, every other)."""
POINTS_PER_RUN = 500
"""Reports that keep their point before only every other one does (then every fourth, ...): the curves of a short run
have a point per reported step, and a long run's stay within what the page draws."""

HANDOFF_INTERVAL_S = 2.0
"""Seconds between two snapshots rank 0 hands to its launcher: often enough for a live console line, rare enough that
the hand-off (a ~300-byte file write) costs nothing per step."""

#: When this process last called ``report_progress`` (``time.monotonic()``), or ``None`` before its first call since
#: the group was set up (``_hang.start_watch`` resets it): set-up before the loop is never taken for a stop.
_last_report: Optional[float] = None
#: Global rank 0's reporter in this process, else ``None`` (other ranks only note the time).
_reporter: Optional[_Reporter] = None
#: Called with the step at each ``report_progress`` call, when set (the step boundary; see the module docstring).
_boundary_hook: Optional[Callable[[Optional[int]], None]] = None
#: This process runs a task's function under the plugin's launcher (any rank).
_active = False
#: The step this rank passed last (every rank: ``report_progress(step)``, ``save_checkpoint``), else ``None``. The
#: preemption watcher reads it when it announces where this rank stands (``preemption.py``).
_step: Optional[int] = None

_monotonic = time.monotonic
#: Metric types taken as they are, with no further check (the common case: Python numbers).
_NUMBERS = frozenset({float, int})
#: Types with a ``numel()`` seen as metrics (tensors): their size is the one thing left to check.
_SIZED: set[type] = set()
#: ``report_progress`` was called outside a ``pytorch`` task in this process, and said so.
_said_outside = False


def say(text: str) -> None:
    """One line on stderr, never raising (a closed stderr: nothing to tell); for the few lines the loop's calls say
    (``report_progress``'s here, ``preemption.py``'s).

    Args:
        text: the line, without its newline.
    """
    try:
        sys.stderr.write(f"{text}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _warn(text: str) -> None:
    say(f"report_progress: {text}")


def _say_outside() -> None:
    """Once per process, on global rank 0 only: the call shows nothing here."""
    global _said_outside
    _said_outside = True
    if not in_rank_zero():
        return
    _warn(
        "called outside a pytorch task, so nothing is shown: it reports a run's progress only inside a function "
        "decorated with @pytorch_task, or a task with task_config=PyTorch(...) or Elastic(...) (flytekit), or "
        "plugin_config=PyTorch(...) (Flyte 2)"
    )


def report_progress(step: Optional[int] = None, total: Optional[int] = None, **metrics: Any) -> None:
    """Say where this rank's training stands; call it once per step, on every rank.

    Only global rank 0's reports are shown (console line, Deck or report, Flyte UI message, TrainJob status); other
    ranks' calls only tell ``progress_timeout`` that they are alive. Called with no argument it only does the latter,
    as it always has. It costs a clock read and a few stores; at most every 2 s rank 0 hands a small snapshot to its
    launcher, which does everything else in a thread of its own.

    Args:
        step: steps done so far (a whole number >= 0: an ``int``, a NumPy integer, a one-element integer tensor).
        total: the number of steps the run will take, when known (the same kinds); give it once or every time.
        **metrics: the latest value of each metric (numbers, or one-element tensors, converted at most every 2 s), e.g.
            ``loss=loss.detach()``. A metric given once keeps its value until given again.

    Raises:
        TypeError: ``step`` or ``total`` is not a whole number, or (on rank 0, at a hand-off) a metric is not a
            number.
        ValueError: ``step`` or ``total`` is negative.
    """
    global _last_report, _step
    now = _monotonic()
    _last_report = now
    if step is not None:
        if type(step) is not int:
            step = _count("step", step)
        elif step < 0:
            raise ValueError(f"report_progress(step={step}): step must be >= 0")
        _step = step  # before the hook is read: the preemption watcher relies on this order
    if total is not None and type(total) is not int:
        total = _count("total", total)
    reporter = _reporter
    if reporter is not None and step is not None:
        if metrics:
            # Checked first, so that a bad value fails this call and is never kept (a later hand-off would fail on it):
            # numbers and one-element tensors of a type seen before pass here; the rest is judged by _check_metrics.
            numbers = True
            for value in metrics.values():
                kind = type(value)
                if kind in _NUMBERS:
                    continue
                numbers = False
                if kind not in _SIZED or value.numel() != 1:
                    _check_metrics(metrics)
            reporter.metrics.update(metrics)
            kept = reporter.points_kept = reporter.points_kept + 1
            if not kept % reporter.stride:
                reporter.keep(step, metrics, numbers)
        reporter.step = step
        if total is not None:
            reporter.total = total
            if total <= step and not reporter.said_total and (total == 0 or step > total):
                reporter.check_total(step)
        elif reporter.total is not None and step > reporter.total and not reporter.said_total:
            reporter.check_total(step)
        if now >= reporter.due:
            reporter.hand_off(now)
    elif not _active and not _said_outside:
        _say_outside()
    hook = _boundary_hook
    if hook is not None:
        hook(step)


def _count(name: str, value: Any) -> int:
    """``value`` as a whole number >= 0, or a TypeError/ValueError naming ``name`` (the slow path of the check)."""
    if isinstance(value, bool) or not (isinstance(value, numbers.Integral) or hasattr(value, "__index__")):
        raise TypeError(
            f"report_progress({name}={value!r}): {name} must be a whole number (an int, a NumPy integer or a "
            f"one-element integer tensor), not {type(value).__name__}"
        )
    try:
        number = int(value.__index__())
    except (TypeError, ValueError, RuntimeError) as e:
        raise TypeError(f"report_progress({name}={value!r}): {name} must be a whole number ({e})") from e
    if number < 0:
        raise ValueError(f"report_progress({name}={number}): {name} must be >= 0")
    return number


def _check_metrics(metrics: dict[str, Any]) -> None:
    """Each metric is a number or a one-element tensor (a tensor is not read: its ``.item()`` waits for the device).

    Raises:
        TypeError: a value is neither, naming the metric, the value and what is allowed.
    """
    for name, value in metrics.items():
        kind = type(value)
        if kind is float or kind is int:
            continue
        if kind in _SIZED and value.numel() == 1:
            continue  # a one-element tensor of a type seen before: the common case after the first call
        size = getattr(value, "numel", None)
        if size is not None:
            try:
                count = size()
            except Exception:  # noqa: BLE001 - not a tensor's numel: judged as any other value below
                count = 1
            if count == 1:
                _SIZED.add(kind)
                continue
            raise TypeError(
                f"report_progress({name}=...): a metric must be a number or a one-element tensor, not a "
                f"{kind.__name__} of {count} elements (pass e.g. {name}=value.mean())"
            )
        if isinstance(value, (str, bytes)) or not (hasattr(value, "__float__") or hasattr(value, "__index__")):
            raise TypeError(
                f"report_progress({name}={value!r}): a metric must be a number or a one-element tensor, not "
                f"{kind.__name__}"
            )


def _on_a_device(value: Any) -> bool:
    return getattr(getattr(value, "device", None), "type", "cpu") != "cpu"


def _read_together(values: list[Any]) -> dict[int, float]:
    """The device tensors among ``values`` read in one copy per device (one device synchronization per hand-off,
    however many points it carries), by ``id``; what cannot be read so is left to :func:`metric_value`, one by one.

    Args:
        values: metric values (numbers, tensors).

    Returns:
        dict[int, float]: ``id(tensor)`` -> its value.
    """
    by_device: dict[Any, list[Any]] = {}
    for value in values:
        if type(value) not in _NUMBERS and _on_a_device(value):
            by_device.setdefault(value.device, []).append(value)
    read: dict[int, float] = {}
    if not by_device:
        return read
    import torch

    for tensors in by_device.values():
        try:
            together = torch.stack([t.detach().reshape(()).to(torch.float64) for t in tensors]).tolist()
        except Exception:  # noqa: BLE001 - a dtype or device that cannot be stacked: read one by one
            continue
        read.update(zip(map(id, tensors), together, strict=True))
    return read


def metric_value(name: str, value: Any) -> float:
    """A metric's value as a float (a tensor's ``.item()`` happens here).

    Args:
        name: the metric's name, for the message.
        value: what was given.

    Returns:
        float: the value.

    Raises:
        TypeError: ``value`` is not a number nor a one-element tensor.
    """
    if isinstance(value, float):
        return value
    try:
        return float(value)
    except (TypeError, ValueError, RuntimeError) as e:
        raise TypeError(
            f"report_progress({name}=...): a metric must be a number or a one-element tensor, not "
            f"{type(value).__name__} ({e})"
        ) from e


class _Reporter:
    """Global rank 0's state: the latest report, and when the next hand-off is due.

    Args:
        send: takes a snapshot (a dict, see :meth:`snapshot`) to the launcher; its errors are the caller's.
        interval_s: seconds between two hand-offs.
    """

    def __init__(self, send: Callable[[dict[str, Any]], None], interval_s: float = HANDOFF_INTERVAL_S) -> None:
        self.send = send
        self.interval_s = interval_s
        self.step: Optional[int] = None
        self.total: Optional[int] = None
        self.metrics: dict[str, Any] = {}
        self.due = 0.0  # the first report is handed off at once
        self.trainer_status = True
        self.trainer_status_owner = ""
        self.reports = 0
        self.points: list[tuple[int, dict[str, Any]]] = []
        self.points_kept = 0
        self.stride = 1
        self.said_total = False

    def keep(self, step: int, metrics: dict[str, Any], numbers: bool) -> None:
        """Keep the metrics given at ``step`` as a point of the curves: one per report, :data:`POINTS_PER_RUN` at most
        in all (past that only every other report keeps its point, then every fourth, ...: ``report_progress`` counts
        the reports and calls this for those that keep one). A tensor is kept detached from its graph, and read only at
        the hand-off.

        Args:
            step: the step reported.
            metrics: the call's own dict of metrics, checked.
            numbers: they are all Python numbers (nothing to detach).
        """
        if not numbers:  # the call's own dict, but a loss passed with its graph would keep every step's graph alive
            metrics = {
                name: value.detach() if getattr(value, "requires_grad", False) else value
                for name, value in metrics.items()
            }
        self.points.append((step, metrics))
        if self.points_kept >= POINTS_PER_RUN * self.stride:
            self.stride *= 2
        if len(self.points) > POINTS_PER_HAND_OFF:
            self.points = self.points[1::2]

    def check_total(self, step: int) -> None:
        """Say once that a total of 0, or a step past the total, shows no percentage or ETA."""
        if self.said_total:
            return
        total = self.total
        if total == 0:
            why = "total=0: no percentage and no ETA are shown; give the number of steps the run takes, or no total"
        elif total is not None and step > total:
            why = (
                f"report_progress(step={step}, total={total}): the step is past the total; the line says so and "
                "shows no ETA (give the total the run really takes)"
            )
        else:
            return
        self.said_total = True
        _warn(why)

    @staticmethod
    def _numbers(
        metrics: dict[str, Any], *, strict: bool = False, device: bool = True, read: Optional[dict[int, float]] = None
    ) -> dict[str, Any]:
        """Metrics as JSON numbers.

        Args:
            metrics: names to values.
            strict: a value that cannot be read raises (the loop's own call), else it is left out.
            device: read tensors on a device too (``False`` while a rank stops: a device may wait forever for a
                peer that is gone, so only numbers and CPU tensors are read).
            read: device tensors already read together (:func:`_read_together`), by ``id``.
        """
        numbers: dict[str, Any] = {}
        for name, value in list(metrics.items())[:MAX_METRICS]:
            if not device and _on_a_device(value):
                continue
            try:
                number = read[id(value)] if read is not None and id(value) in read else metric_value(name, value)
            except TypeError:
                if strict:
                    raise
                continue
            numbers[name[:MAX_METRIC_NAME]] = number if math.isfinite(number) else str(number)
        return numbers

    def snapshot(self, *, final: bool = False, stopped: bool = False) -> dict[str, Any]:
        """What the launcher gets: step, total, metrics as floats, the points since the last snapshot, rank 0's
        clock, and flags.

        Args:
            final: the function returned (nothing raises then: a metric that cannot be read is left out).
            stopped: the function is stopping before it returned (it raised, or its rank was stopped).

        Returns:
            dict[str, Any]: the snapshot (JSON-ready; non-finite metric values as ``"nan"``, ``"inf"``, ``"-inf"``).
        """
        points, self.points = self.points, []
        read = (
            None if stopped else _read_together([*self.metrics.values(), *(v for _, p in points for v in p.values())])
        )
        metrics = self._numbers(self.metrics, strict=not (final or stopped), device=not stopped, read=read)
        return {
            "step": self.step,
            "total": self.total,
            "metrics": metrics,
            "points": [[step, self._numbers(values, device=not stopped, read=read)] for step, values in points],
            "time": time.time(),
            "final": final,
            "stopped": stopped,
            "trainer_status": self.trainer_status,
            "trainer_status_owner": self.trainer_status_owner,
        }

    def hand_off(self, now: float) -> None:
        """Send a snapshot now and schedule the next one."""
        self.due = now + self.interval_s
        self.reports += 1
        self.send(self.snapshot())

    def finish(self) -> None:
        """Send the final snapshot (the function returned), if anything was reported."""
        if self.step is not None:
            self.send(self.snapshot(final=True))

    def stop(self) -> None:
        """Send where the run stood when it stopped before returning, if anything was reported (never raises)."""
        if self.step is None:
            return
        try:
            self.send(self.snapshot(stopped=True))
        except Exception:  # noqa: BLE001 - the last word of a stopping run must not hide why it stops
            pass


def start_reporting(send: Callable[[dict[str, Any]], None], *, interval_s: float = HANDOFF_INTERVAL_S) -> None:
    """Make this process global rank 0's reporter (the rank entrypoint of rank 0, or the launcher running the
    function itself).

    Args:
        send: takes each snapshot to the launcher.
        interval_s: seconds between two hand-offs.
    """
    global _reporter
    _reporter = _Reporter(send, interval_s)


def start_rank() -> None:
    """This process runs a task's function (any rank): the callbacks' factories see it (:func:`active`)."""
    global _active, _step
    _active = True
    _step = None


def end_rank() -> None:
    """The function ended in this process (the in-process mode: the task process goes on)."""
    global _active
    _active = False


def finish_reporting() -> None:
    """The function returned: hand off the final snapshot (rank 0, if it reported), and stop reporting."""
    global _reporter
    reporter, _reporter = _reporter, None
    if reporter is not None:
        reporter.finish()


def stop_reporting() -> None:
    """Stop reporting, handing off where the run stood (the function raised, or its rank was stopped): the launcher's
    last line then says the step the ranks reached, not the one of the last periodic hand-off."""
    global _reporter
    reporter, _reporter = _reporter, None
    if reporter is not None:
        reporter.stop()


def hand_off_stop() -> None:
    """Hand off where the run stands now, marked stopped, and stop reporting (rank 0; a signal handler calls it before
    the rank ends: it never raises and never waits for a device)."""
    stop_reporting()


def reset() -> None:
    """Forget everything (the group was set up again: a new round of an elastic job, or a new in-process launch)."""
    global _last_report
    _last_report = None


def last_step() -> Optional[int]:
    """The step this rank passed last (``report_progress(step)``, a checkpoint save or load), or ``None``."""
    return _step


def note_step(step: int) -> None:
    """Record that this rank passed ``step`` (a checkpoint was saved or loaded there).

    Args:
        step: the steps done.
    """
    global _step
    _step = step


def step_boundary_hook() -> Optional[Callable[[Optional[int]], None]]:
    """The hook :func:`set_step_boundary_hook` set, or ``None``."""
    return _boundary_hook


def last_report() -> Optional[float]:
    """When this process last called ``report_progress`` (``time.monotonic()``), or ``None``."""
    return _last_report


def active() -> bool:
    """This process runs a task's function under the plugin's launcher (any rank)."""
    return _active


def hand_off_due() -> bool:
    """Whether rank 0's next ``report_progress`` call hands a snapshot off (``False`` on other ranks): callbacks
    read costly metrics (Lightning's ``callback_metrics``) only then."""
    reporter = _reporter
    return reporter is not None and _monotonic() >= reporter.due


def leave_trainer_status(owner: str) -> None:
    """Leave Kubeflow Trainer's ``trainerStatus`` to another writer (HF Transformers' own ``KubeflowCallback``, which
    it adds by itself inside a TrainJob), so that one writer owns the field.

    Args:
        owner: who writes it instead (named in the launcher's log).
    """
    reporter = _reporter
    if reporter is not None:
        reporter.trainer_status = False
        reporter.trainer_status_owner = owner


def set_step_boundary_hook(hook: Optional[Callable[[Optional[int]], None]]) -> None:
    """Run ``hook(step)`` in the caller's thread at every later ``report_progress`` call (``None`` removes it).

    For a stop at an agreed step boundary: a watcher thread sets the hook; the training loop's next
    ``report_progress`` call runs it between two steps. Without a hook a call pays one global read.

    Args:
        hook: the function, or ``None``.
    """
    global _boundary_hook
    _boundary_hook = hook


def environment_interval(env: Mapping[str, str], name: str, default: float) -> float:
    """A positive number of seconds from the environment, else ``default``.

    Args:
        env: the environment.
        name: the variable.
        default: used when unset.

    Returns:
        float: the seconds.

    Raises:
        ValueError: the variable is set but not a positive number.
    """
    return positive_seconds(env, name, default)


def in_rank_zero(env: Mapping[str, str] = os.environ) -> bool:
    """Whether this process is global rank 0 (``RANK`` unset counts as 0: a single process)."""
    return env.get("RANK", "0").strip() in ("0", "")
