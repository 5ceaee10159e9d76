"""docs/flyte2.md's snippets run as the page says: ``snippet:flyte2`` saved as ``file.py`` and run with
``python file.py`` prints what its ``# prints ...`` comment states, with real ranks under a process-count guard;
``snippet:flyte2-connector`` defines a task our connector serves.

Here rather than in tests/docs: the snippets need ``flyte``, which this directory's conftest requires.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.docs.markdown_blocks import ROOT, blocks, print_claims
from tests.sdk.guarded_run import run_guarded

PAGE = ROOT / "docs" / "flyte2.md"
MAX_PROCS = 12  # the interpreter, the launcher's helpers, the fork server and 3 ranks
BOUND_S = 240.0


def _snippet(name: str) -> str:
    (block,) = [b for b in blocks(PAGE) if f"snippet:{name}" in b.markers]
    return block.body


@pytest.mark.slow
@pytest.mark.timeout(BOUND_S + 60)
def test_the_opening_snippet_prints_its_result_with_three_real_ranks(tmp_path: Path) -> None:
    body = _snippet("flyte2")
    (tmp_path / "file.py").write_text(body, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYTE_PYTORCH_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    run = run_guarded([sys.executable, "file.py"], max_procs=MAX_PROCS, timeout_s=BOUND_S, cwd=str(tmp_path), env=env)
    assert run.killed_for == "", run.output[-4000:]
    assert run.returncode == 0, run.output[-4000:]
    assert run.leftover == [], run.leftover
    (claim,) = print_claims(body)
    assert claim.ranks == 3 and claim.output == "33"  # 10+0 + 10+1 + 10+2: only three ranks sum to this
    assert run.output.strip().splitlines()[-1].strip() == claim.output, run.output[-4000:]


def test_the_connector_snippet_defines_a_task_for_our_connector(tmp_path: Path) -> None:
    import importlib.util

    from flyte2_pytorch.task_types import CONNECTOR_TASK_TYPE

    path = tmp_path / "connector_snippet.py"
    path.write_text(_snippet("flyte2-connector"), encoding="utf-8")
    spec = importlib.util.spec_from_file_location("connector_snippet", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.train.task_type == CONNECTOR_TASK_TYPE
    assert module.train.config(None)["pytorch.queue"] == "team-a"
