"""The progress page: an HTML fragment with the progress line, the latest metrics and a curve per metric (inline SVG,
no plotting library), shown as flytekit's ``Progress`` Deck or Flyte 2's ``Progress`` report tab. Pure: the same
record and history give the same page.

A curve has a point per reported step while the run is short (rank 0 keeps one per report, ``progress.py``), a
title on each axis, and tick labels at round values that sit outside the plot, never over the line or each other.
Its value axis is logarithmic when the values are all positive and span two decades or more (a loss that falls from
4 to 0.0002 is a slope, not a cliff and then a flat line); it says so in its title.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Optional

from pytorch_contract.progress import ProgressRecord, format_line, format_value

__all__ = ["render_page", "Point", "LOG_SPAN"]

#: One point of the curves: (step, {metric: value}).
Point = tuple[int, dict[str, float]]

#: Curves drawn (the first metrics given); the table lists every metric.
MAX_CURVES = 4
#: The value axis is logarithmic when the largest value is at least this many times the smallest (all positive).
LOG_SPAN = 100.0
#: Points drawn as dots as well as joined by the line, up to this many (past it the dots would merge into the line).
MAX_DOTS = 120

_WIDTH, _HEIGHT = 560, 240
_LEFT, _RIGHT, _TOP, _BOTTOM = 78, 16, 30, 46  # room for the value labels and title, the step labels and title
_FONT = 11
_COLOR = "#e4572e"


def _nice_step(span: float, count: int) -> float:
    """A round tick spacing (1, 2 or 5 times a power of ten) giving about ``count`` ticks over ``span``."""
    raw = span / max(1, count)
    power = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if factor * power >= raw:
            return factor * power
    return 10 * power


def _linear_ticks(low: float, high: float, count: int, *, cover: bool = False) -> list[float]:
    """Round values every nice step within [low, high]; ``cover``: from the one at or below ``low`` to the one at or
    above ``high`` (a value axis then begins and ends on a labelled value)."""
    if high <= low:
        return [low]
    step = _nice_step(high - low, count)
    first = (math.floor(low / step + 1e-9) if cover else math.ceil(low / step - 1e-9)) * step
    last = (math.ceil(high / step - 1e-9) if cover else math.floor(high / step + 1e-9)) * step
    ticks = []
    for index in range(round((last - first) / step) + 1):
        value = first + index * step
        ticks.append(0.0 if abs(value) < step * 1e-9 else round(value, 12))
    return ticks


def _log_ticks(low: float, high: float) -> list[float]:
    """Powers of ten within [low, high], thinned to at most 6."""
    first, last = math.ceil(math.log10(low) - 1e-9), math.floor(math.log10(high) + 1e-9)
    exponents = list(range(first, last + 1))
    stride = max(1, math.ceil(len(exponents) / 6))
    return [10.0**e for e in exponents[::stride]]


def _tick_text(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1e4 or abs(value) < 1e-3:
        mantissa, exponent = f"{value:.0e}".split("e")
        return f"{mantissa}e{int(exponent)}"
    return f"{value:.6g}"


def _step_text(step: float) -> str:
    return f"{int(step):,}"


def _curve(name: str, points: Sequence[tuple[int, float]]) -> str:
    """One metric's curve over the steps, as an SVG element."""
    finite = [(s, v) for s, v in points if math.isfinite(v)]
    title = html.escape(name)
    if len(finite) < 2:
        return f"<p><b>{title}</b>: {len(finite)} point(s) so far</p>"
    steps = [s for s, _ in finite]
    values = [v for _, v in finite]
    s0, s1 = min(steps), max(steps)
    v0, v1 = min(values), max(values)
    log = v0 > 0 and v1 / v0 >= LOG_SPAN
    inner_w, inner_h = _WIDTH - _LEFT - _RIGHT, _HEIGHT - _TOP - _BOTTOM

    if log:
        lo, hi = math.log10(v0), math.log10(v1)
        y_ticks = _log_ticks(v0, v1)
    else:
        if v1 == v0:
            pad = abs(v0) * 0.05 or 1.0
            v0, v1 = v0 - pad, v1 + pad
        y_ticks = _linear_ticks(v0, v1, 4, cover=True)
        v0, v1 = min(v0, y_ticks[0]), max(v1, y_ticks[-1])
        lo, hi = v0, v1
    span_v = (hi - lo) or 1.0
    span_s = (s1 - s0) or 1

    def x_of(step: float) -> float:
        return _LEFT + (step - s0) / span_s * inner_w

    def y_of(value: float) -> float:
        scaled = math.log10(value) if log else value
        return _TOP + inner_h - (scaled - lo) / span_v * inner_h

    x_ticks = [t for t in _linear_ticks(s0, s1, 5) if s0 <= t <= s1 and float(t).is_integer()] or [s0, s1]
    bottom = _TOP + inner_h
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{_HEIGHT}" role="img" '
        f'aria-label="{title} by step{" (log scale)" if log else ""}" font-family="sans-serif" font-size="{_FONT}">',
        f'<rect x="0" y="0" width="{_WIDTH}" height="{_HEIGHT}" fill="#fff" stroke="#ddd"/>',
        f'<text class="title" x="{_LEFT}" y="18" font-size="13" font-weight="bold">{title}</text>',
    ]
    for value in y_ticks:
        y = y_of(value)
        parts.append(
            f'<line x1="{_LEFT}" y1="{y:.1f}" x2="{_LEFT + inner_w}" y2="{y:.1f}" stroke="#eee"/>'
            f'<text class="tick-y" x="{_LEFT - 6}" y="{y:.1f}" text-anchor="end" dominant-baseline="middle">'
            f"{html.escape(_tick_text(value))}</text>"
        )
    for step in x_ticks:
        x = x_of(step)
        parts.append(
            f'<line x1="{x:.1f}" y1="{bottom}" x2="{x:.1f}" y2="{bottom + 4}" stroke="#999"/>'
            f'<text class="tick-x" x="{x:.1f}" y="{bottom + 16}" text-anchor="middle">{_step_text(step)}</text>'
        )
    parts.append(
        f'<rect x="{_LEFT}" y="{_TOP}" width="{inner_w}" height="{inner_h}" fill="none" stroke="#bbb"/>'
        f'<text class="axis-x" x="{_LEFT + inner_w / 2:.1f}" y="{_HEIGHT - 8}" text-anchor="middle">step</text>'
        f'<text class="axis-y" x="14" y="{_TOP + inner_h / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 14 {_TOP + inner_h / 2:.1f})">{title}{" (log scale)" if log else ""}</text>'
    )
    line = " ".join(f"{x_of(s):.1f},{y_of(v):.1f}" for s, v in finite)
    parts.append(f'<polyline fill="none" stroke="{_COLOR}" stroke-width="2" points="{line}"/>')
    if len(finite) <= MAX_DOTS:
        parts.extend(f'<circle cx="{x_of(s):.1f}" cy="{y_of(v):.1f}" r="2" fill="{_COLOR}"/>' for s, v in finite)
    parts.append("</svg>")
    return "".join(parts)


def render_page(
    record: ProgressRecord,
    history: Sequence[Point],
    now: float,
    elapsed_s: Optional[float],
    *,
    stopped: bool = False,
) -> str:
    """The page for ``record``, with a curve per metric from ``history``.

    Args:
        record: the latest record.
        history: the points so far, oldest first.
        now: seconds since the epoch (for the ETA).
        elapsed_s: seconds since the first report.
        stopped: the run stopped before its function returned: the heading says where, with no rate or ETA.

    Returns:
        str: an HTML fragment (no ``<html>``: the SDK's page template wraps it).
    """
    line = format_line(record, now, elapsed_s=elapsed_s, stopped=stopped)
    parts = [
        '<div class="pytorch-progress" style="font-family: sans-serif">',
        f"<h3>{html.escape(line)}</h3>",
    ]
    if record.total:
        done = min(1.0, record.step / record.total)
        parts.append(
            f'<div style="width: {_WIDTH}px; max-width: 100%; height: 14px; background: #eee; border-radius: 3px">'
            f'<div style="width: {done * 100:.1f}%; height: 14px; background: {_COLOR}; border-radius: 3px"></div>'
            "</div>"
        )
    if record.metrics:
        rows = "".join(
            f"<tr><td>{html.escape(name)}</td><td>{html.escape(format_value(value))}</td></tr>"
            for name, value in record.metrics.items()
        )
        parts.append(f'<table style="margin: 10px 0"><tr><th>metric</th><th>latest</th></tr>{rows}</table>')
    for name in list(record.metrics)[:MAX_CURVES]:
        parts.append(_curve(name, [(step, values[name]) for step, values in history if name in values]))
    parts.append("</div>")
    return "\n".join(parts)
