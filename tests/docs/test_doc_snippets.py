"""The docs' code blocks are true: Python snippets run, shown outputs match, YAML and JSON parse, the site builds.

Each Python block of README.md and docs/**/*.md runs the way the docs tell users to run a file: saved as ``file.py``
in an empty directory and run with ``python file.py`` (real ranks; ``FLYTE_PYTORCH_INPROCESS=1`` only for a block
marked ``<!-- inprocess -->``), and also with ``pyflyte run file.py WF`` when marked ``<!-- pyflyte-run: WF -->``.
Launches run under a process-count guard and a timeout, so an unguarded module-level workflow call can only fail
the test, never load the machine. A ``text`` block marked
``<!-- output -->`` right after a Python block is that block's exact standard output, so error messages quoted in
the reference are the ones the code prints today. A block marked ``<!-- extra: NAME -->`` runs in the README's
environment plus that extra: the modules that only other extras install cannot be imported (a ``sitecustomize`` on
``PYTHONPATH`` refuses them), and without the named extra's modules too it must fail, so the page's word that it
needs the extra stays true. A ``# prints ...`` comment on a ``print(...)`` line is checked
against the real-ranks run, and against a run under ``FLYTE_PYTORCH_INPROCESS=1`` when it names one. Markers are
described in ``tests/docs/markdown_blocks.py``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.docs.markdown_blocks import ROOT, Block, all_blocks, print_claims, python_with_output
from tests.sdk.guarded_run import run_guarded

PY_CASES = python_with_output()
YAML_BLOCKS = [b for b in all_blocks() if b.lang in ("yaml", "yml") and "no-test" not in b.markers]
JSON_BLOCKS = [b for b in all_blocks() if b.lang == "json" and "no-test" not in b.markers]


#: A snippet's launcher, fork server, resource tracker and ranks (3 at most in the docs); more means a nested launch.
MAX_PROCS = 12


def _env(inprocess: bool) -> dict[str, str]:
    """The environment of a snippet: ours minus FLYTE_PYTORCH_* settings, the repository importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYTE_PYTORCH_")}
    if inprocess:
        env["FLYTE_PYTORCH_INPROCESS"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


README_EXTRA = "examples"
"""The extra the README's set-up installs (its run command, `pip install -c constraints.txt -e '.[examples]'`)."""


def _extra_of(block: Block) -> str | None:
    """The extra a block's page says it needs (``<!-- extra: NAME -->``), or None."""
    for marker in block.markers:
        if marker.startswith("extra:"):
            return marker.split(":", 1)[1].strip()
    return None


def _modules_of(extras: set[str | None]) -> set[str]:
    """The top-level modules of the distributions this package requires with `extras` (None: without an extra)."""
    from importlib.metadata import packages_distributions, requires

    wanted = set()
    for requirement in requires("flytekitplugins-pytorch") or []:
        marker = re.search(r"extra == \"([^\"]+)\"", requirement)
        if (marker.group(1) if marker else None) in extras:
            wanted.add(re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower().replace("_", "-"))
    return {
        module
        for module, dists in packages_distributions().items()
        if any(d.lower().replace("_", "-") in wanted for d in dists)
    }


def blocked_modules(allowed: set[str]) -> list[str]:
    """The modules only extras outside `allowed` install (the CLI's own table of them, `EXTRA_MODULES`), for a block
    run as the page says: those the base install and the `allowed` extras require directly stay importable (the
    README's `examples` extra installs torch).

    Args:
        allowed: the extras installed (the README's, and the one the page names).

    Returns:
        Top-level module names, sorted.
    """
    from backend_plugin.cli import EXTRA_MODULES

    kept = _modules_of({None, *allowed})
    return sorted(m for m, extra in EXTRA_MODULES.items() if extra not in allowed and m not in kept)


_BLOCKER = """import importlib.abc, sys
BLOCKED = {blocked!r}
class _Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}} (not installed here)", name=name)
        return None
sys.meta_path.insert(0, _Blocked())
"""


def _with_only(env: dict[str, str], allowed: set[str], where: Path) -> dict[str, str]:
    """`env` in which only the modules of the base install and of `allowed` extras can be imported."""
    where.mkdir(exist_ok=True)
    (where / "sitecustomize.py").write_text(_BLOCKER.format(blocked=blocked_modules(allowed)), encoding="utf-8")
    return {**env, "PYTHONPATH": os.pathsep.join([str(where), env["PYTHONPATH"]])}


def _launches(block: Block) -> bool:
    """The block starts ranks (it runs a workflow or task under ``__main__``): slow."""
    return "__main__" in block.body and "inprocess" not in block.markers


def _pyflyte_workflow(block: Block) -> str | None:
    for marker in block.markers:
        if marker.startswith("pyflyte-run:"):
            return marker.split(":", 1)[1].strip()
    return None


def _cases() -> list:
    params = []
    for block, expected in PY_CASES:
        # every snippet runs in a fresh interpreter that imports flytekit (seconds apiece): the slow tier
        params.append(pytest.param(block, expected, "python", id=block.id, marks=[pytest.mark.slow]))
        workflow = _pyflyte_workflow(block)
        if workflow:
            params.append(pytest.param(block, None, workflow, id=f"{block.id}:pyflyte", marks=[pytest.mark.slow]))
        if "inprocess" not in block.markers and any(c.inprocess for c in print_claims(block.body)):
            params.append(
                pytest.param(block, None, "python-inprocess", id=f"{block.id}:inprocess", marks=[pytest.mark.slow])
            )
    return params


def _checked_print_comments() -> list[pytest.param]:
    return [
        pytest.param(claim, id=f"{block.id}:{claim.line[:40]}")
        for block in all_blocks()
        if block.lang in ("python", "py") and "no-test" not in block.markers
        for claim in print_claims(block.body)
    ]


@pytest.mark.parametrize("claim", _checked_print_comments())
def test_print_comments_are_checkable_claims(claim):
    """A comment saying what a line prints is one the snippet runs check; free text there would go stale unseen."""
    assert claim.output is not None, (
        f"{claim.line!r}: write the comment as '# prints OUTPUT with N real ranks' or '# prints OUTPUT under "
        "FLYTE_PYTORCH_INPROCESS=1', or move the remark to its own line"
    )


def test_there_are_snippets_to_run():
    assert len(PY_CASES) >= 5, "the docs lost their runnable examples"


@pytest.mark.parametrize(("block", "expected", "how"), _cases())
def test_python_snippet_runs(block: Block, expected: Block | None, how: str, tmp_path: Path):
    script = tmp_path / "file.py"
    script.write_text(block.body, encoding="utf-8")
    env = _env("inprocess" in block.markers or how == "python-inprocess")
    extra = _extra_of(block)
    if extra is not None:
        env = _with_only(env, {README_EXTRA, extra}, tmp_path / "site")
    if how in ("python", "python-inprocess"):
        cmd = [sys.executable, str(script)]
    else:
        cmd = [str(Path(sys.executable).parent / "pyflyte"), "run", str(script), how]
    if not _launches(block) and how == "python":
        out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, f"{block.id} exited {out.returncode}:\n{out.stderr[-4000:]}"
        stdout = out.stdout
    else:
        run = run_guarded(cmd, max_procs=MAX_PROCS, timeout_s=300, cwd=str(tmp_path), env=env)
        assert run.killed_for == "", f"{block.id} ({how}): killed: {run.killed_for}\n{run.output[-4000:]}"
        assert run.returncode == 0, f"{block.id} ({how}) exited {run.returncode}:\n{run.output[-4000:]}"
        assert run.leftover == [], f"{block.id} ({how}): processes left running: {run.leftover}"
        stdout = run.output
    if expected is not None:
        assert stdout.strip() == expected.body.strip(), (
            f"{block.id}: the output shown at {expected.id} is not what the snippet prints today"
        )
    lines = [line.strip() for line in stdout.splitlines()]
    inprocess = "inprocess" in block.markers or how == "python-inprocess"
    for claim in print_claims(block.body):
        if how.startswith("python") and claim.output is not None and claim.inprocess == inprocess:
            assert claim.output in lines, f"{block.id} ({how}): {claim.line!r} is not what it prints:\n{stdout}"


EXTRA_BLOCKS = [b for b, _ in PY_CASES if _extra_of(b) is not None]


@pytest.mark.parametrize("block", EXTRA_BLOCKS, ids=[b.id for b in EXTRA_BLOCKS])
def test_a_block_that_needs_an_extra_says_how_to_install_it(block: Block) -> None:
    page = (ROOT / block.path).read_text(encoding="utf-8")
    before = page.split(block.body, 1)[0].rsplit("\n\n", 3)  # the paragraphs just above the block
    assert f"pip install -c constraints.txt -e '.[{_extra_of(block)}]'" in "\n\n".join(before[1:]), block.id


@pytest.mark.slow
@pytest.mark.parametrize("block", EXTRA_BLOCKS, ids=[b.id for b in EXTRA_BLOCKS])
def test_a_block_that_needs_an_extra_fails_without_it(block: Block, tmp_path: Path) -> None:
    """In the README's environment alone the block does not do what the page shows: the extra is needed, as said."""
    script = tmp_path / "file.py"
    script.write_text(block.body, encoding="utf-8")
    env = _with_only(_env(False), {README_EXTRA}, tmp_path / "site")
    out = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    expected = dict(PY_CASES)[block]
    assert out.returncode != 0 or (expected is not None and out.stdout.strip() != expected.body.strip()), out.stdout


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
