"""The README stays true: exactly two set-up commands, and its snippets run.

The test command itself is what CI runs (.ci/run extracts it from README.md), so here we only check that it
exists; the run command and the example snippet are executed for real.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from examples.mnist.data import prepare_mnist
from tests.docs.markdown_blocks import print_claims
from tests.mnist_data import require_mnist

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _block(marker: str) -> str:
    m = re.search(rf"<!-- {marker} -->\s*```(?:bash|python)\n(.*?)```", README, re.S)
    assert m, f"README.md has no fenced block after <!-- {marker} -->"
    return m.group(1).strip()


def test_exactly_two_setup_commands():
    markers = re.findall(r"<!-- command:(\w+) -->", README)
    assert markers == ["run", "test"]
    for name in markers:
        cmd = _block(f"command:{name}")
        assert "\n" not in cmd, f"the {name} command must be one line a newcomer can paste"
        assert "pip install torch==2.13.0" in cmd, "torch must be pinned first (an unpinned torch pulls CUDA)"
        assert "pip install -c constraints.txt -e" in cmd, "the install must use the pins CI tested"


def test_the_quickstart_shows_the_readme_commands():
    quickstart = (ROOT / "docs" / "quickstart.md").read_text(encoding="utf-8")
    shown = re.findall(r"```bash\n(.*?)```", quickstart, re.S)
    assert [c.strip() for c in shown[:2]] == [_block("command:run"), _block("command:test")]


def test_ci_runs_the_readme_commands():
    """CI runs both commands as written: .ci/run starts with .ci/readme_install.py, which reads them from here."""
    ci = (ROOT / ".ci" / "run").read_text()
    installer = (ROOT / ".ci" / "readme_install.py").read_text()
    assert "python3 .ci/readme_install.py" in ci
    assert '"command:run"' in installer and '"command:test"' in installer and '"snippet:example"' in installer
    for setup in ("--upgrade pip", "-U pip", "install pip"):
        assert setup not in ci, f"CI must not set up what the README does not ({setup!r})"


@pytest.mark.slow
def test_example_snippet_runs_distributed(tmp_path):
    script = tmp_path / "example.py"
    script.write_text(_block("snippet:example"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYTE_PYTORCH_")}
    out = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
    )
    assert out.returncode == 0, out.stderr[-4000:]
    (claim,) = print_claims(_block("snippet:example"))  # the snippet's own "# prints ..." comment
    assert claim.ranks == 3 and out.stdout.strip().splitlines()[-1] == claim.output


@pytest.mark.slow
def test_run_command_trains_mnist(tmp_path):
    """The first README command, as written, from the repository root (its install steps are no-ops here).

    The command names ``MNIST_DATA_DIR=../shared/data/mnist``; where that is absent the example falls back to its
    cache, which this test fills first from the data the tests find (tests/mnist_data.py), so no download happens.
    """
    cmd = _block("command:run")
    env = dict(os.environ)
    env["MNIST_CACHE_DIR"] = str(prepare_mnist(require_mnist(), cache_dir=tmp_path / "mnist-cache", download=False))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    out = subprocess.run(["bash", "-c", cmd], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, (out.stdout[-3000:], out.stderr[-3000:])
    # the workflow's outputs: per-epoch test accuracies (percent), then the evaluation report
    accuracies = [float(a) for a in re.findall(r"test accuracy (\d+\.\d+)% on \d+ images", out.stdout)]
    assert accuracies, f"no evaluation report in the output:\n{out.stdout[-3000:]}"
    assert accuracies[-1] >= 99.0, f"default run reached only {accuracies[-1]}% test accuracy"
