"""The README stays true: exactly two set-up commands, and its snippets run.

The test command itself is what CI runs (.ci/run extracts it from README.md), so here we only check that it
exists; the run command and the example snippet are executed for real.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.markdown_blocks import print_claims
from tests.mnist_data import require_mnist
from tests.sdk.guarded_run import run_guarded

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import release_figures  # noqa: E402

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


def test_ci_takes_the_mnist_data_from_its_environment_or_the_data_folder_beside_the_clone(tmp_path):
    """`.ci/run` reads MNIST through MNIST_DATA_DIR; when that is unset it takes the data folder CI lays beside its
    clone (shared/data/mnist) and nothing else. With neither, or with a folder that lacks one of the four files, it
    stops at once, saying how (before any job, so nothing is set up). The README's install script names no such
    folder: a user's run downloads and verifies the files."""
    ci_text = (ROOT / ".ci" / "run").read_text()
    assert "../shared" not in (ROOT / ".ci" / "readme_install.py").read_text()
    clone = tmp_path / "clone"
    (clone / ".ci").mkdir(parents=True)
    (clone / ".ci" / "run").write_text(ci_text)
    env = {k: v for k, v in os.environ.items() if k != "MNIST_DATA_DIR"}

    def ci(extra=None):
        return subprocess.run(
            ["bash", str(clone / ".ci" / "run"), "readme"], env={**env, **(extra or {})}, capture_output=True,
            text=True, timeout=60,
        )  # fmt: skip

    unset = ci()
    assert unset.returncode == 2 and "MNIST_DATA_DIR is not set" in unset.stderr, unset.stderr
    beside = tmp_path / "shared" / "data" / "mnist"
    beside.mkdir(parents=True)
    (beside / "train-images-idx3-ubyte.gz").write_bytes(b"")
    from_beside = ci()
    assert from_beside.returncode == 2 and f"MNIST_DATA_DIR={clone}/../shared/data/mnist has no train-labels" in (
        from_beside.stderr
    ), from_beside.stderr
    given = tmp_path / "given"
    given.mkdir()
    (given / "train-labels-idx1-ubyte").write_bytes(b"")
    partial = ci({"MNIST_DATA_DIR": str(given)})  # the variable wins over the folder beside the clone
    assert partial.returncode == 2 and "has no train-images-idx3-ubyte" in partial.stderr, partial.stderr


def _installer():
    """``.ci/readme_install.py`` as a module: the helpers CI uses to run the README's commands."""
    spec = importlib.util.spec_from_file_location("readme_install", ROOT / ".ci" / "readme_install.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _clone_of_the_working_tree(target: Path) -> None:
    """What a clone of this checkout holds: the tracked files and new files git does not ignore (no .venv, no
    caches), as they are now (a clone of HEAD would miss uncommitted changes)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode()  # fmt: skip
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():  # a deleted but still tracked file is listed too
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def test_no_page_names_a_folder_of_ours_outside_the_repository():
    """The README and every docs page work in any clone: no command reads a folder beside the checkout."""
    offenders = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        offenders += [f"{page.relative_to(ROOT)}: {m}" for m in re.findall(r"\S*\.\./shared\S*", text)]
    assert offenders == []


def test_generated_benchmark_commands_name_no_folder_outside_the_repository():
    assert "../shared" not in release_figures.MNIST_CMD


#: Set by CI's readme job for its later tiers: `.ci/readme_install.py` ran the README's run command verbatim in a fresh
#: clone of HEAD, with MNIST only from MNIST_DATA_DIR, and checked what the test below checks.
README_RUN_CHECKED_ENV = "README_RUN_COMMAND_CHECKED"


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.skipif(
    os.environ.get(README_RUN_CHECKED_ENV) == "1",
    reason=".ci/readme_install.py ran the README's run command in a fresh clone earlier in this job, with these checks",
)
def test_run_command_in_a_fresh_clone_with_data_only_from_mnist_data_dir(tmp_path):
    """The first README command, verbatim, in a fresh copy of the repository with nothing beside it: a new .venv
    from the system python3, the installs, the MNIST workflow. The data comes only through MNIST_DATA_DIR (as CI
    gives it): the cache starts empty and the download mirrors are a loopback port nothing answers."""
    installer = _installer()
    repo = tmp_path / "clone" / "repo"
    _clone_of_the_working_tree(repo)
    env = installer.mnist_env({**installer.clean_env(), "MNIST_DATA_DIR": str(require_mnist())}, tmp_path)
    env = {k: v for k, v in env.items() if not k.startswith(("FLYTE_PYTORCH_", "PYTORCHJOB_"))}
    result = run_guarded(["bash", "-c", _block("command:run")], max_procs=40, timeout_s=1500, cwd=str(repo), env=env)
    assert result.killed_for == "", f"killed: {result.killed_for}\n{result.output[-4000:]}"
    assert result.returncode == 0, result.output[-6000:]
    assert result.leftover == [], f"processes left running: {result.leftover}"
    assert os.listdir(repo.parent) == ["repo"], "the command wrote beside the clone"
    # the data went through MNIST_DATA_DIR into the (empty) cache, verified: no download could have answered
    assert sorted(p.name for p in (tmp_path / "mnist-cache").iterdir() if not p.name.startswith(".")) == sorted(
        installer.MNIST_FILES
    )
    accuracies = [float(a) for a in re.findall(r"test accuracy (\d+\.\d+)% on \d+ images", result.output)]
    assert accuracies, f"no evaluation report in the output:\n{result.output[-3000:]}"
    assert accuracies[-1] >= installer.MIN_ACCURACY, f"default run reached only {accuracies[-1]}% test accuracy"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_missing_data_error_is_one_ranks_failure(tmp_path):
    """Without data and without a reachable mirror, the run fails with the data error of one rank (the first of the
    host, which alone tries to find and download the files); the other ranks only waited for it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLYTE_PYTORCH_", "MNIST_"))}
    env.update({"MNIST_CACHE_DIR": str(tmp_path / "cache"), "MNIST_MIRRORS": "http://127.0.0.1:9/"})
    env["PYTHONPATH"] = str(ROOT)
    pyflyte = str(Path(sys.executable).with_name("pyflyte"))
    cmd = [pyflyte, "run", str(ROOT / "examples" / "mnist" / "workflow.py"), "mnist_workflow"]
    result = run_guarded(cmd, max_procs=16, timeout_s=240, cwd=str(tmp_path), env=env)
    assert result.killed_for == "" and result.leftover == [], (result.killed_for, result.leftover)
    assert result.returncode != 0
    failed = re.findall(r"rank (\d+) \(of 3\) failed: (\w+)", result.output)
    assert failed and set(failed) == {("0", "MnistDataError")}, result.output[-4000:]
    assert "traceback of rank 1" not in result.output and "traceback of rank 2" not in result.output
    assert "not found in" in result.output and "MNIST_DATA_DIR=<dir>" in result.output
