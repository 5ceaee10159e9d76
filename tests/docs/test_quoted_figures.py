"""Figures quoted in more than one place come from one source: ``tests/docs/figures.json``.

Each kind of figure there has a pattern that finds every quote of that kind in the README, the docs, the deploy
manifests and the code's docstrings and comments (line breaks and comment markers do not hide one), the one value
all of them must carry, and where that value comes from: a measurement recorded beside it, or a figure of
``benchmarks/release_figures.json``. A page that quotes the figure differently, a value that no longer follows from
its source, or a pattern that finds fewer quotes than the kind expects (a rewording that escapes the check) fails.
To change a figure, change it in figures.json and in every place the failure lists.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIGURES = json.loads((Path(__file__).with_name("figures.json")).read_text(encoding="utf-8"))
RELEASE_FIGURES = ROOT / "benchmarks" / "release_figures.json"


def searched_files() -> list[Path]:
    """Where figures are quoted: README, docs pages, the backend's code and manifests, the examples."""
    files = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    for folder in ("backend_plugin", "flytekitplugins_pytorch", "pytorch_contract", "examples"):
        files += [p for ext in ("*.py", "*.yaml", "*.md") for p in (ROOT / folder).rglob(ext)]
    return sorted(set(files))


def flattened(text: str) -> str:
    """`text` as one line: wrapped lines joined, a continued ``#`` comment's marker dropped."""
    return re.sub(r"\s*\n\s*(?:#\s*)?", " ", text)


def quotes(pattern: str) -> list[tuple[str, str]]:
    """(file, the figure as written) for every quote that `pattern` finds."""
    found = []
    for path in searched_files():
        for m in re.finditer(pattern, flattened(path.read_text(encoding="utf-8"))):
            found.append((path.relative_to(ROOT).as_posix(), m.group("value")))
    return found


def _kinds() -> list:
    return [
        pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=kind["pending"]), id=name)
        if kind.get("pending")
        else pytest.param(name, id=name)
        for name, kind in FIGURES.items()
    ]


@pytest.mark.parametrize("name", _kinds())
def test_every_quote_carries_the_one_value(name: str) -> None:
    kind = FIGURES[name]
    found = quotes(kind["pattern"])
    assert len(found) >= kind["at_least"], f"{name}: only {found} found; a rewording escapes the pattern"
    wrong = [f"{where}: {value!r}" for where, value in found if value != kind["value"]]
    assert wrong == [], f"{name}: these quote other than {kind['value']!r} (figures.json):\n" + "\n".join(wrong)


def _number(text: str) -> float:
    return float(re.match(r"[\d.]+", text).group(0))  # type: ignore[union-attr]


def test_the_test_time_covers_what_was_measured() -> None:
    """The quoted range holds every recorded run on two cores of its own (in minutes, to the half minute); a run
    that shared them with other work is longer, as the pages say, never shorter."""
    kind = FIGURES["fast_tier_time"]
    low, high = (float(x) for x in re.findall(r"[\d.]+", kind["value"]))
    own = [run for run in kind["measured"] if "shared" not in run]
    assert len(own) >= 2, "record at least two runs that had the cores to themselves"
    for run in kind["measured"]:
        minutes = round(run["seconds"] / 60 * 2) / 2
        if "shared" in run:
            assert minutes >= low, f"{run} is {minutes} min, shorter than {kind['value']!r}"
        else:
            assert low <= minutes <= high, f"{run} is {minutes} min, outside {kind['value']!r}"


def test_the_download_size_is_the_files_sizes() -> None:
    kind = FIGURES["mnist_download"]
    assert f"{round(sum(kind['bytes'].values()) / 2**20)} MiB" == kind["value"]


def test_the_watch_cache_figure_follows_the_release_figures() -> None:
    """MiB per 1,000 jobs of the connector-scale run, as KiB per job (1 MiB / 1,000 = 1.024 KiB)."""
    kind = FIGURES["watch_cache_memory"]
    value: object = json.loads(RELEASE_FIGURES.read_text(encoding="utf-8"))
    for key in kind["from_release_figures"].split("."):
        value = value[key]  # type: ignore[index]
    assert f"{round(float(value) * 1.024)} KiB" == kind["value"]  # type: ignore[arg-type]


def test_a_different_quote_is_caught(tmp_path: Path) -> None:
    """The check can fail: a page quoting another value is listed."""
    kind = FIGURES["mnist_download"]
    page = "The first run downloads MNIST (12 MiB) and checks\neach file."
    assert [m.group("value") for m in re.finditer(kind["pattern"], flattened(page))] == ["12 MiB"]
    assert _number("12 MiB") != _number(kind["value"])
