"""What ``report_progress`` costs per call in a training loop, by case, in nanoseconds.

Each case calls ``report_progress`` N times in a tight loop (``--calls``, default 1,000,000), repeats that
``--repeats`` times (default 5) and prints the median time per call, next to the loop's floor (an empty function of
the same signature called the same way). The loop advances a fake clock by ``--step-ms`` per call (default 1 ms: a
1,000 steps/s loop, faster than any real training step), so rank 0 hands a snapshot off every 2 s of that clock, as it
would in a real run; the hand-offs' cost is in the per-call average.

Cases:

- ``no-argument``: ``report_progress()`` (the old call; feeds ``progress_timeout`` only);
- ``other-rank``: ``report_progress(step, total, loss=...)`` on a rank that is not global rank 0;
- ``rank-0, file``: global rank 0 in a rank process: the hand-off is an atomic write of ``progress.json`` (the
  control directory, in a temporary folder);
- ``rank-0, tensor metric``: the same with ``loss`` a one-element torch tensor (converted only at a hand-off);
- ``one hand-off``: the cost of one snapshot written to the file (microseconds; paid every 2 s).

Usage::

    python benchmarks/progress_overhead.py [--calls 1000000] [--repeats 5] [--step-ms 1] [--json PATH]

Figures on a shared or busy machine are noisy: compare the rows of one run, not runs of different days.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytorch_core import progress  # noqa: E402
from pytorch_core._control import ControlDir  # noqa: E402
from pytorch_core.progress import report_progress  # noqa: E402


class FakeClock:
    """``time.monotonic`` for the benchmark: advances ``step_s`` per read (one read per call)."""

    def __init__(self, step_s: float) -> None:
        self.now = 0.0
        self.step_s = step_s

    def __call__(self) -> float:
        self.now += self.step_s
        return self.now


def _floor(step: Optional[int] = None, total: Optional[int] = None, **metrics: Any) -> None:
    """The loop's own cost: a call of the same shape that does nothing."""


def _time_loop(fn: Callable[..., None], calls: int, metric: Any, with_args: bool) -> float:
    start = time.perf_counter_ns()
    if with_args:
        for step in range(calls):
            fn(step, calls, loss=metric)
    else:
        for _ in range(calls):
            fn()
    return (time.perf_counter_ns() - start) / calls


def run(calls: int, repeats: int, step_ms: float) -> dict[str, float]:
    """Every case's median nanoseconds per call (and one hand-off's microseconds)."""
    import torch

    figures: dict[str, float] = {}
    clock = FakeClock(step_ms / 1000)
    progress._monotonic = clock  # the only clock report_progress reads
    with tempfile.TemporaryDirectory() as folder:
        control = ControlDir(folder)

        def case(name: str, fn: Callable[..., None], metric: Any, with_args: bool, rank0: bool) -> None:
            samples = []
            handoffs = 0
            for _ in range(repeats):
                clock.now = 0.0
                if rank0:
                    progress.start_reporting(control.write_progress)
                samples.append(_time_loop(fn, calls, metric, with_args))
                if rank0:
                    assert progress._reporter is not None
                    handoffs = progress._reporter.reports
                    progress.stop_reporting()
            figures[name] = statistics.median(samples)
            extra = f" ({handoffs} hand-offs per {calls:,} calls)" if rank0 else ""
            print(f"{name:<34} {figures[name]:8.1f} ns/call{extra}")

        case("floor (empty call, same shape)", _floor, 0.5, True, False)
        case("no-argument", report_progress, None, False, False)
        case("other-rank", report_progress, 0.5, True, False)
        case("rank-0, file", report_progress, 0.5, True, True)
        case("rank-0, tensor metric", report_progress, torch.tensor(0.5), True, True)

        progress.start_reporting(control.write_progress)
        progress.report_progress(1, 10, loss=0.5)
        reporter = progress._reporter
        assert reporter is not None
        samples = []
        for _ in range(200):
            start = time.perf_counter_ns()
            reporter.hand_off(clock())
            samples.append((time.perf_counter_ns() - start) / 1000)
        progress.stop_reporting()
        figures["one hand-off (us)"] = statistics.median(samples)
        print(f"{'one hand-off (file write)':<34} {figures['one hand-off (us)']:8.1f} us, every 2 s")
    progress._monotonic = time.monotonic
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--step-ms", type=float, default=1.0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"load average {load:.2f}; {args.calls:,} calls x {args.repeats} repeats; python {sys.version.split()[0]}")
    figures = run(args.calls, args.repeats, args.step_ms)
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
