"""The progress page's curves (``_progress_page.py``), read as a user reads them: a log axis when the values span
decades, a point per reported step on a short run, a title on each axis, and tick labels that are round values,
outside the plot, clear of each other."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET

import pytest

from pytorch_contract.progress import ProgressRecord
from pytorch_core._progress_page import _curve, render_page

SVG = "{http://www.w3.org/2000/svg}"


def _svg(name: str, points: list[tuple[int, float]]) -> ET.Element:
    return ET.fromstring(_curve(name, points))


def _labels(svg: ET.Element, kind: str) -> list[ET.Element]:
    return [t for t in svg.iter(f"{SVG}text") if t.get("class") == kind]


def _box(text: ET.Element) -> tuple[float, float, float, float]:
    """(left, top, right, bottom) of a label, its width estimated at 0.6 em a character (sans-serif digits are
    narrower: an overestimate)."""
    size = float(text.get("font-size") or 11)
    width = 0.6 * size * len(text.text or "")
    x, y = float(text.get("x") or 0), float(text.get("y") or 0)
    anchor = text.get("text-anchor") or "start"
    left = {"start": x, "middle": x - width / 2, "end": x - width}[anchor]
    top = y - size / 2 if text.get("dominant-baseline") == "middle" else y - 0.8 * size
    return left, top, left + width, top + size


def _overlap(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _plot(svg: ET.Element) -> tuple[float, float, float, float]:
    (rect,) = [r for r in svg.iter(f"{SVG}rect") if r.get("fill") == "none"]
    x, y, w, h = (float(rect.get(k) or 0) for k in ("x", "y", "width", "height"))
    return x, y, x + w, y + h


# The snippet of docs/progress.md: 150 steps, a loss from 4.2 to 0.00016, a point per reported step.
FALLING = [(step, 4.2 * math.exp(-step / 14.6)) for step in range(1, 151)]


def test_a_loss_that_spans_decades_is_drawn_on_a_log_axis_with_a_point_per_step() -> None:
    svg = _svg("loss", FALLING)
    assert "(log scale)" in (svg.get("aria-label") or "")
    (line,) = svg.iter(f"{SVG}polyline")
    ys = [float(p.split(",")[1]) for p in (line.get("points") or "").split()]
    assert len(ys) == 150  # a point per reported step
    # On a log axis an exponential fall is a straight slope: the last quarter of the steps still falls by a quarter of
    # the height (a linear axis drew it as a flat line after step 25).
    plot = _plot(svg)
    assert ys[-1] - ys[len(ys) * 3 // 4] > 0.2 * (plot[3] - plot[1])
    ticks = [t.text for t in _labels(svg, "tick-y")]
    assert ticks == ["0.001", "0.01", "0.1", "1"] or set(ticks) >= {"0.01", "1"}, ticks


def test_the_axes_have_titles() -> None:
    svg = _svg("loss", FALLING)
    assert [t.text for t in _labels(svg, "axis-x")] == ["step"]
    assert [t.text for t in _labels(svg, "axis-y")] == ["loss (log scale)"]
    linear = _svg("accuracy", [(s, 90 + s / 20) for s in range(0, 200, 10)])
    assert [t.text for t in _labels(linear, "axis-y")] == ["accuracy"]


@pytest.mark.parametrize(
    "points",
    [
        FALLING,
        [(s, 90 + s / 20) for s in range(0, 200, 10)],  # an accuracy: linear
        [(s, math.sin(s / 5)) for s in range(0, 60)],  # negative values: linear
        [(s, 0.5) for s in range(1, 5)],  # flat
        [(0, 1e6), (10, 3.5e6), (5_000, 2e6)],  # large values and steps
        [(1, 0.97), (2, 0.98)],  # two points of a short run
    ],
    ids=["falling-loss", "accuracy", "negative", "flat", "large", "two-points"],
)
def test_tick_labels_are_outside_the_plot_and_clear_of_each_other(points: list[tuple[int, float]]) -> None:
    svg = _svg("metric", points)
    plot = _plot(svg)
    ticks_y, ticks_x = _labels(svg, "tick-y"), _labels(svg, "tick-x")
    assert len(ticks_y) >= 2 and len(ticks_x) >= 2, ET.tostring(svg)
    boxes = [_box(t) for t in ticks_y + ticks_x + _labels(svg, "axis-x") + _labels(svg, "title")]
    for box in [_box(t) for t in ticks_y]:
        assert box[2] <= plot[0], box  # left of the plot
    for box in [_box(t) for t in ticks_x]:
        assert box[1] >= plot[3], box  # below the plot
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert not _overlap(a, b), (a, b)
    values = sorted(float(t.text or "nan") for t in ticks_y)
    log = "(log scale)" in (svg.get("aria-label") or "")
    gaps = [math.log10(b / a) if log else b - a for a, b in zip(values[:-1], values[1:], strict=True)]
    assert max(gaps) - min(gaps) < 1e-9 * max(abs(g) for g in gaps), values  # evenly spaced
    mantissa = f"{gaps[0]:e}".split("e")[0].rstrip("0").rstrip(".")
    assert mantissa in ("1", "2", "5"), values  # round steps: 1, 2 or 5 times a power of ten


def test_the_page_says_where_a_stopped_run_stopped() -> None:
    record = ProgressRecord(step=20, total=40, metrics={"loss": 0.25}, rate=10.0, eta_s=2.0, reported_at=100.0)
    page = render_page(record, [(1, {"loss": 4.0}), (20, {"loss": 0.25})], 100.0, 3.0, stopped=True)
    heading = re.search(r"<h3>(.*?)</h3>", page)
    assert heading and heading[1] == "stopped at step 20/40 (50%) after 3s, loss 0.25"
