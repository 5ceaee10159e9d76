"""docs/progress.md's ``snippet:progress`` runs as the page says: saved as ``file.py`` and run with ``python file.py``,
3 real ranks train for 10 to 20 s, the launcher prints a live progress line with percent and ETA (from rank 0 only,
never per rank, several times at the log interval), the Deck is published mid-run, and the result comes last, as its
``# prints ...`` comment says.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from tests.docs.markdown_blocks import ROOT, blocks, print_claims
from tests.sdk.guarded_run import run_guarded

PAGE = ROOT / "docs" / "progress.md"
MAX_PROCS = 12  # the interpreter, the launcher's helpers, the fork server and 3 ranks
BOUND_S = 240.0
LINE = re.compile(r"^progress: step (?P<step>\d+)/150 \((?P<percent>\d+)%\)(?P<rest>.*)$")


def _snippet() -> str:
    (block,) = [b for b in blocks(PAGE) if "snippet:progress" in b.markers]
    return block.body


@pytest.mark.slow
@pytest.mark.timeout(BOUND_S + 60)
def test_the_progress_snippet_shows_a_live_line_from_rank_0_and_prints_its_result_last(tmp_path: Path) -> None:
    body = _snippet()
    (tmp_path / "file.py").write_text(body, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYTE_PYTORCH_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    run = run_guarded([sys.executable, "file.py"], max_procs=MAX_PROCS, timeout_s=BOUND_S, cwd=str(tmp_path), env=env)
    assert run.killed_for == "", run.output[-4000:]
    assert run.returncode == 0, run.output[-4000:]
    assert run.leftover == [], run.leftover
    (claim,) = print_claims(body)
    lines = run.output.strip().splitlines()
    assert claim.ranks == 3 and lines[-1].strip() == claim.output == "y = 3.0x + 1.0", run.output[-4000:]

    shown = [m for m in (LINE.match(line) for line in lines) if m]
    assert not any("progress:" in line and "[rank" in line for line in lines), "a rank printed the progress line"
    steps = [int(m["step"]) for m in shown]
    assert len(steps) == len(set(steps)), f"a progress line was printed twice: {steps}"
    assert steps == sorted(steps) and steps[-1] == 150
    assert len(shown) >= 3, f"too few updates for a 10-20 s run at the 5 s log interval:\n{run.output[-3000:]}"
    mid = [m for m in shown if 0 < int(m["step"]) < 150]
    assert any(re.search(r", [\d.]+ steps/s, ETA \d+(m\d\ds)?s?, elapsed ", m["rest"]) for m in mid), run.output
    assert all(int(m["percent"]) == int(m["step"]) * 100 // 150 for m in shown)
    took = re.search(r"took (\d+)s", shown[-1]["rest"])
    assert took and 10 <= int(took.group(1)) <= 60, shown[-1].group(0)  # 150 steps of 0.08 s, slower under load

    # The Deck was published mid-run: flytekit's local sandbox holds a Deck at a step before the last.
    (deck_line,) = [line for line in lines if line.startswith("Deck of file.fit_line: file://")]
    sandbox = Path(deck_line.split("file://", 1)[1]).parent.parent
    pages = [p.read_text(encoding="utf-8") for p in sandbox.glob("*/deck.html")]
    seen = sorted(int(m.group(1)) for page in pages for m in re.finditer(r"<h3>step (\d+)/150", page))
    assert seen and seen[0] < 150 and seen[-1] == 150, seen
    assert any("<svg" in page and "loss" in page for page in pages)
