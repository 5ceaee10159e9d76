"""The docs' code blocks are true: Python snippets run, shown outputs match, YAML and JSON parse, the site builds.

Each Python block of README.md and docs/**/*.md runs in a fresh interpreter in an empty directory, in-process
(``FLYTE_PYTORCH_INPROCESS=1``, world size 1) unless marked ``<!-- distributed -->``. A ``text`` block marked
``<!-- output -->`` right after a Python block is that block's exact standard output, so error messages quoted in
the reference are the ones the code prints today. Markers are described in ``tests/docs/markdown_blocks.py``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.docs.markdown_blocks import ROOT, Block, all_blocks, python_with_output

PY_CASES = python_with_output()
YAML_BLOCKS = [b for b in all_blocks() if b.lang in ("yaml", "yml") and "no-test" not in b.markers]
JSON_BLOCKS = [b for b in all_blocks() if b.lang == "json" and "no-test" not in b.markers]


def _env(distributed: bool) -> dict[str, str]:
    """The environment of a snippet: ours minus FLYTE_PYTORCH_* settings, the repository importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYTE_PYTORCH_")}
    if not distributed:
        env["FLYTE_PYTORCH_INPROCESS"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _cases() -> list:
    return [pytest.param(block, expected, id=block.id) for block, expected in PY_CASES]


def test_there_are_snippets_to_run():
    assert len(PY_CASES) >= 5, "the docs lost their runnable examples"


@pytest.mark.slow  # each snippet runs in a fresh interpreter that imports flytekit: seconds apiece
@pytest.mark.parametrize(("block", "expected"), _cases())
def test_python_snippet_runs(block: Block, expected: Block | None, tmp_path: Path):
    distributed = "distributed" in block.markers
    script = tmp_path / "snippet.py"
    script.write_text(block.body, encoding="utf-8")
    out = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=_env(distributed),
        capture_output=True,
        text=True,
        timeout=300 if distributed else 120,
    )
    assert out.returncode == 0, f"{block.id} exited {out.returncode}:\n{out.stderr[-4000:]}"
    if expected is not None:
        assert out.stdout.strip() == expected.body.strip(), (
            f"{block.id}: the output shown at {expected.id} is not what the snippet prints today"
        )


@pytest.mark.parametrize("block", YAML_BLOCKS, ids=[b.id for b in YAML_BLOCKS])
def test_yaml_block_parses(block: Block):
    documents = list(yaml.safe_load_all(block.body))
    assert documents and all(d is not None for d in documents), f"{block.id} has an empty YAML document"


@pytest.mark.parametrize("block", JSON_BLOCKS, ids=[b.id for b in JSON_BLOCKS])
def test_json_block_parses(block: Block):
    assert isinstance(json.loads(block.body), (dict, list))


def test_output_blocks_follow_a_python_block():
    """An ``<!-- output -->`` block that is not right after a runnable Python block would never be checked."""
    checked = {expected.id for _, expected in PY_CASES if expected is not None}
    orphans = [b.id for b in all_blocks() if "output" in b.markers and b.id not in checked]
    assert orphans == []


@pytest.mark.slow  # a whole mkdocs build (CI's readme job also runs `mkdocs build --strict` itself)
@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None, reason="mkdocs is not installed (the docs extra)")
def test_site_builds_strict(tmp_path: Path):
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    assert (tmp_path / "site" / "reference" / "decorator" / "index.html").is_file()
