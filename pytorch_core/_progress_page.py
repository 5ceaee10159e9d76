"""The progress page: an HTML fragment with the progress line, the latest metrics and a curve per metric (inline SVG,
no plotting library), shown as flytekit's ``Progress`` Deck or Flyte 2's ``Progress`` report tab. Pure: the same
record and history give the same page.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Optional

from pytorch_contract.progress import ProgressRecord, format_line, format_value

__all__ = ["render_page", "Point"]

#: One point of the curves: (step, {metric: value}).
Point = tuple[int, dict[str, float]]

#: Curves drawn (the first metrics given); the table lists every metric.
MAX_CURVES = 4
_WIDTH, _HEIGHT, _PAD = 560, 200, 40


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
    span_s = (s1 - s0) or 1
    span_v = (v1 - v0) or (abs(v1) or 1.0)
    inner_w, inner_h = _WIDTH - 2 * _PAD, _HEIGHT - 2 * _PAD

    def xy(step: int, value: float) -> str:
        x = _PAD + (step - s0) / span_s * inner_w
        y = _PAD + inner_h - (value - v0) / span_v * inner_h
        return f"{x:.1f},{y:.1f}"

    line = " ".join(xy(s, v) for s, v in finite)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{_HEIGHT}" role="img" '
        f'aria-label="{title} by step">'
        f'<rect x="0" y="0" width="{_WIDTH}" height="{_HEIGHT}" fill="#fff" stroke="#ddd"/>'
        f'<text x="{_PAD}" y="20" font-family="sans-serif" font-size="13" font-weight="bold">{title}</text>'
        f'<polyline fill="none" stroke="#e4572e" stroke-width="2" points="{line}"/>'
        f'<text x="4" y="{_PAD + 4}" font-family="sans-serif" font-size="11">{html.escape(format_value(v1))}</text>'
        f'<text x="4" y="{_PAD + inner_h}" font-family="sans-serif" font-size="11">'
        f"{html.escape(format_value(v0))}</text>"
        f'<text x="{_PAD}" y="{_HEIGHT - 8}" font-family="sans-serif" font-size="11">step {s0:,}</text>'
        f'<text x="{_WIDTH - _PAD}" y="{_HEIGHT - 8}" font-family="sans-serif" font-size="11" '
        f'text-anchor="end">step {s1:,}</text>'
        "</svg>"
    )


def render_page(record: ProgressRecord, history: Sequence[Point], now: float, elapsed_s: Optional[float]) -> str:
    """The page for ``record``, with a curve per metric from ``history``.

    Args:
        record: the latest record.
        history: the points so far, oldest first.
        now: seconds since the epoch (for the ETA).
        elapsed_s: seconds since the first report.

    Returns:
        str: an HTML fragment (no ``<html>``: the SDK's page template wraps it).
    """
    parts = [
        '<div class="pytorch-progress" style="font-family: sans-serif">',
        f"<h3>{html.escape(format_line(record, now, elapsed_s=elapsed_s))}</h3>",
    ]
    if record.total:
        done = min(1.0, record.step / record.total)
        parts.append(
            f'<div style="width: {_WIDTH}px; height: 14px; background: #eee; border-radius: 3px">'
            f'<div style="width: {done * 100:.1f}%; height: 14px; background: #e4572e; border-radius: 3px"></div>'
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
