"""docs/benchmarks.md's figures table is what benchmarks/release_figures.py renders from the saved figures."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import release_figures  # noqa: E402

SAVED = ROOT / "benchmarks" / "release_figures.json"
PAGE = ROOT / "docs" / "benchmarks.md"


def _section(page: str) -> str:
    start = page.index(release_figures.BEGIN)
    return page[start : page.index(release_figures.END) + len(release_figures.END)]


def test_the_page_shows_the_saved_figures_as_rendered() -> None:
    figures = json.loads(SAVED.read_text())
    assert _section(PAGE.read_text()) == release_figures.render(figures)


def test_goals_are_judged_from_the_figures() -> None:
    figures = json.loads(SAVED.read_text())
    worse = copy.deepcopy(figures)
    worse.pop("gpu", None)
    worse["mnist"]["ratios"]["wall"] = 0.61
    worse["builder"]["jobs_per_s"] = 4999.0
    rows = {line.split(" | ")[0]: line for line in release_figures.render(worse).splitlines() if line.startswith("| ")}
    wall = next(v for k, v in rows.items() if "MNIST wall time" in k)
    build = next(v for k, v in rows.items() if "builder throughput" in k)
    assert "**0.61x**" in wall and wall.endswith("**not met** |")
    assert build.endswith("**not met** |")
    assert "No GPU was lent" in release_figures.render(worse)
    worse["gpu"] = {"device": "H100", "runs": 3, "train_s": 1.42, "accuracy": 99.17}
    assert "| MNIST on one H100, training wall to 99.17% (one process) | **1.42 s** (median of 3) | <= 3 s | met |" in (
        release_figures.render(worse)
    )


def test_replacing_needs_the_markers() -> None:
    page = f"before\n{release_figures.BEGIN}\nold\n{release_figures.END}\nafter\n"
    assert release_figures.replace_section(page, "NEW") == "before\nNEW\nafter\n"
    with pytest.raises(ValueError, match="no release-figures markers"):
        release_figures.replace_section("no markers here", "NEW")
