"""Pages that were out of step with what the code does, checked against it.

- trainer-v2.md: its `pyflyte ... package` command runs in the README's environment (the `examples` extra; Flyte 2's
  SDK not installed) as the page writes it, where the package form (`--pkgs examples.mnist`) ends in
  `ModuleNotFoundError: No module named 'flyte'`, as the page says; its `target` comment names every kind there is.
- jobset.md: says how to check a task against the cluster's own JobSet CRD (`render --check --crd`), where that CRD
  comes from, and that JobSet v0.9 is refused, which `render` does with the repository's v0.9.1 CRD.
- checkpoints.md is the guide of the checkpoint and preemption calls, and faults.md points there.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from backend_plugin.cli import main
from backend_plugin.targets.registry import BY_CONFIG
from tests.docs.markdown_blocks import ROOT, blocks
from tests.docs.test_doc_snippets import README_EXTRA, _env, _with_only

PAGES = ROOT / "docs"


def _pyflyte_package_line() -> str:
    for block in blocks(PAGES / "trainer-v2.md"):
        for line in block.body.splitlines():
            if line.startswith("pyflyte ") and " package " in line:
                return line
    raise AssertionError("trainer-v2.md lost its pyflyte package command")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_trainjob_preview_packages_in_the_readmes_environment(tmp_path: Path) -> None:
    line = _pyflyte_package_line().replace("/tmp/flyte-package.tgz", str(tmp_path / "package.tgz"))
    env = _with_only(_env(False), {README_EXTRA}, tmp_path / "site")
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    done = subprocess.run(["bash", "-c", line], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "package.tgz").stat().st_size > 0
    # What the page says of the package form, in the same environment: the Flyte 2 example needs Flyte 2's SDK.
    package_form = line.replace("--pkgs examples.mnist.workflow ", "--pkgs examples.mnist ")
    assert package_form != line
    failed = subprocess.run(
        ["bash", "-c", package_form], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert failed.returncode != 0 and "No module named 'flyte'" in failed.stdout + failed.stderr
    page = " ".join((PAGES / "trainer-v2.md").read_text(encoding="utf-8").split())
    assert "ModuleNotFoundError: No module named 'flyte'" in page and "[examples,flyte2]" in page


def test_the_trainer_v2_page_names_every_target() -> None:
    text = (PAGES / "trainer-v2.md").read_text(encoding="utf-8")
    (comment,) = re.findall(r"^target: trainjob\s+# (.*)$", text, re.M)
    named = [word.strip().removesuffix(" (default)") for word in comment.split("|")]
    assert named == [*BY_CONFIG, "auto"], named
    assert "two CRDs" not in text and "two kinds" not in text


def test_the_jobset_page_says_how_to_check_against_the_clusters_crd(tmp_path: Path, capsys) -> None:
    text = " ".join((PAGES / "jobset.md").read_text(encoding="utf-8").split())
    assert "pytorchjob render --target jobset --check --crd crd.yaml" in text
    assert "kubectl get crd jobsets.jobset.x-k8s.io -o yaml > crd.yaml" in text
    assert "tests/data/crds/jobsets-v0.9.1.yaml" in text
    # What the page says of JobSet v0.9: refused, naming the release and what to do.
    seed = tmp_path / "seed.py"
    seed.write_text(
        "from flytekitplugins_pytorch import pytorch_task\n"
        "@pytorch_task(workers_count=2)\n"
        "def train(epochs: int) -> float:\n"
        "    return float(epochs)\n"
    )
    crd = ROOT / "tests" / "data" / "crds" / "jobsets-v0.9.1.yaml"
    args = ["render", "--target", "jobset", "--check", "--crd", str(crd), str(seed), "train"]
    code = main([*args, "--image", "ghcr.io/example/train:1.0"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "JobSet v0.9 or earlier" in out and "upgrade JobSet to v0.10 or later" in out
    assert "JobSet v0.9 or earlier is refused" in text and "upgrade JobSet to v0.10 or later" in text


def test_the_checkpoint_calls_have_a_guide_page_of_their_own() -> None:
    guide = (PAGES / "checkpoints.md").read_text(encoding="utf-8")
    for call in ("save_checkpoint", "load_checkpoint", "preemption_requested", "on_preemption"):
        assert re.search(rf"^\| `{call}\(", guide, re.M), call
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    guides = nav[nav.index("  - Guides:") : nav.index("  - Reference:")]
    assert "checkpoints.md" in guides
    faults = (PAGES / "faults.md").read_text(encoding="utf-8")
    assert "(checkpoints.md)" in faults and "### The checkpoint API" not in faults


def test_no_table_cell_of_the_fault_drills_is_a_page_long() -> None:
    """faults.md's "When a node goes, by kind" once had cells of 20 lines at 1280 px: a cell holds a few words, the
    details are in the text below the table."""
    text = (PAGES / "faults.md").read_text(encoding="utf-8")
    section = text[text.index("### When a node goes, by kind") : text.index("### Drills\n")]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| ---")]
    cells = [cell.strip() for row in rows for cell in row.strip("|").split("|")]
    assert len(rows) >= 9 and max(len(cell) for cell in cells) <= 120, max(cells, key=len)
