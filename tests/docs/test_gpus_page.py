"""The GPUs page's first example is one a cluster can schedule: its accelerator matches a node label under the
default backend settings, so `pytorchjob render` has no accelerator warning for it (a short name such as ``A100``
gets one; the page explains why)."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend_plugin.cli import main
from tests.docs.markdown_blocks import ROOT, blocks

IMAGE = "ghcr.io/example/train:1.0"


def _first_example() -> str:
    first = next(b for b in blocks(ROOT / "docs" / "gpus.md") if b.lang == "python")
    assert "accelerator=" in first.body, "the GPUs page's first example no longer sets an accelerator"
    return first.body


def _accelerator_warnings(source: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> list[str]:
    (tmp_path / "file.py").write_text(source, encoding="utf-8")
    capfd.readouterr()
    assert main(["render", str(tmp_path / "file.py"), "train", "--image", IMAGE]) == 0
    return [line for line in capfd.readouterr().err.splitlines() if "accelerator" in line]


def test_the_first_gpu_example_matches_a_node_by_default(tmp_path: Path, capfd, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    source = _first_example()
    assert _accelerator_warnings(source, tmp_path, capfd) == []
    short = source.replace('accelerator="NVIDIA-A100-SXM4-80GB"', 'accelerator="A100"')
    assert short != source and len(_accelerator_warnings(short, tmp_path, capfd)) == 1
