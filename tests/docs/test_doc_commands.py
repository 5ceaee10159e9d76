"""The docs' `pytorchjob render` commands do what the pages say, run as the pages write them.

- Every runnable Python snippet that defines pytorch tasks renders each of them to exactly one valid job on stdout,
  whatever the snippet prints at import (a module-level ``print`` once ended up in the YAML). In-process, through
  the command's own ``main``, with file-descriptor capture: fast.
- Every ``pytorchjob render`` command the pages give (in a ``bash`` block not marked ``no-test``, or inline in the
  text) runs as written in a shell, from a directory that holds the page's example as ``file.py`` (the Python block
  above the command) and the repository's ``examples/``; its stdout is one valid job of the kind it asks for.
  Commands with an elided part (``...``) or a placeholder (``FILE``) are shapes, not commands, and are left out.
  Slow: one interpreter each.
- What the pages claim about a rendered job (which field ``Elastic(nproc_per_node=8)`` sets, how many replicas the
  front page's example has, that both TrainJob previews agree) is checked against the render.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from backend_plugin.cli import main
from backend_plugin.targets.registry import BY_CONFIG, BY_KIND
from tests.docs.markdown_blocks import ROOT, Block, blocks, pages
from tests.targets.conftest import facts_of

IMAGE = "ghcr.io/example/train:1.0"
_INLINE = re.compile(r"`(pytorchjob render [^`]+)`")


def _task_names(source: str) -> list[str]:
    """Functions decorated with ``@pytorch_task(...)`` or ``@task(task_config=...)``."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef):
            continue
        for dec in node.decorator_list:
            call = dec if isinstance(dec, ast.Call) else None
            func = call.func if call else dec
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if name == "pytorch_task" or (
                name == "task" and call is not None and any(k.arg == "task_config" for k in call.keywords)
            ):
                names.append(node.name)
    return names


def _python_blocks() -> list[Block]:
    """Every Python block that runs as a file (the README's example included)."""
    return [b for p in pages() for b in blocks(p) if b.lang in ("python", "py") and "no-test" not in b.markers]


def _snippet_tasks() -> list:
    return [
        pytest.param(block, task, id=f"{block.id}:{task}")
        for block in _python_blocks()
        for task in _task_names(block.body)
    ]


def _assert_one_valid_job(stdout: str, kind: str = "PyTorchJob") -> dict:
    documents = list(yaml.safe_load_all(stdout))
    assert len(documents) == 1, f"stdout holds {len(documents)} YAML documents, not one job:\n{stdout[:2000]}"
    (job,) = documents
    assert isinstance(job, dict) and job.get("kind") == kind, f"not a {kind}:\n{stdout[:2000]}"
    facts_of(BY_KIND[kind]).validate(job)  # the kind's validator (tests/targets/<kind>/facts.py)
    return job


def test_the_docs_have_tasks_to_render():
    assert len(_snippet_tasks()) >= 8, "the docs lost the snippets whose tasks are rendered"


@pytest.mark.parametrize(("block", "task"), _snippet_tasks())
def test_every_snippet_task_renders_to_one_job_on_stdout(block: Block, task: str, tmp_path: Path, capfd, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a snippet may write files at import
    (tmp_path / "file.py").write_text(block.body, encoding="utf-8")
    capfd.readouterr()
    code = main(["render", str(tmp_path / "file.py"), task, "--image", IMAGE])
    out, err = capfd.readouterr()
    assert code == 0, f"{block.id}: `pytorchjob render file.py {task}` exited {code}:\n{err[-3000:]}"
    _assert_one_valid_job(out)


def _migration_block() -> Block:
    (block,) = [b for b in _python_blocks() if b.path == "docs/migration.md" and "train_elastic" in b.body]
    return block


def test_elastic_nproc_per_node_is_where_the_three_pages_say(tmp_path: Path, capfd, monkeypatch):
    """migration.md, decorator.md and template-format.md agree with the job: an int goes to `spec.nprocPerNode`."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file.py").write_text(_migration_block().body, encoding="utf-8")
    capfd.readouterr()
    assert main(["render", "file.py", "train_elastic", "--image", IMAGE]) == 0
    job = _assert_one_valid_job(capfd.readouterr().out)
    assert job["spec"]["nprocPerNode"] == "8"
    assert job["spec"]["elasticPolicy"]["minReplicas"] == 1 and job["spec"]["elasticPolicy"]["maxReplicas"] == 4
    assert "nProcPerNode" not in job["spec"]["elasticPolicy"]

    migration = (ROOT / "docs" / "migration.md").read_text(encoding="utf-8")
    assert "`spec.nprocPerNode: '8'`" in migration and "no `nProcPerNode`" in migration
    decorator = (ROOT / "docs" / "reference" / "decorator.md").read_text(encoding="utf-8")
    elastic_table = decorator[decorator.index("## `Elastic`") :]
    row = next(line for line in elastic_table.splitlines() if line.startswith("| `nproc_per_node` |"))
    assert "`spec.nprocPerNode`" in row and "`spec.elasticPolicy.nProcPerNode` is not written" in row
    template_format = (ROOT / "docs" / "template-format.md").read_text(encoding="utf-8")
    (key_row,) = [line for line in template_format.splitlines() if line.startswith("| `pytorch.nproc_per_node` |")]
    assert "becomes `spec.nprocPerNode` too" in key_row
    assert "elasticPolicy.nProcPerNode`, which we do not write" in template_format


# --- the commands, as written --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """One documented render command with the shell lines that come before it in its block.

    Args:
        page: the page, relative to the repository root.
        line: where the command is on the page.
        lines: the shell lines to run, the render last.
        example: the Python block above the command (saved as ``file.py``), if any.
    """

    page: str
    line: int
    lines: tuple[str, ...]
    example: Block | None

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def _shell_lines(body: str) -> list[str]:
    """Lines of a shell block with ``\\`` continuations joined and comments dropped."""
    joined = body.replace("\\\n", " ")
    out = []
    for raw in joined.splitlines():
        words = shlex.split(raw, comments=True)
        if words:
            out.append(shlex.join(words))
    return out


def _is_shape(command: str) -> bool:
    """A command's shape rather than a command: an elided part (``...``) or a placeholder such as ``FILE``."""
    return "..." in command or any(re.fullmatch(r"[A-Z][A-Z_]+(=[A-Z_]+)?", w) for w in shlex.split(command))


def _commands() -> list[Command]:
    found = []
    for page in pages():
        text = page.read_text(encoding="utf-8")
        page_blocks = blocks(page)
        python = [b for b in _python_blocks() if b.path == page.relative_to(ROOT).as_posix()]

        def example_above(line: int, python: list[Block] = python) -> Block | None:
            above = [b for b in python if b.line < line]
            return above[-1] if above else None

        for b in page_blocks:
            if b.lang not in ("bash", "sh", "shell") or "no-test" in b.markers:
                continue
            lines = _shell_lines(b.body)
            for i, cmd in enumerate(lines):
                if cmd.startswith("pytorchjob render") and not _is_shape(cmd):
                    before = tuple(x for x in lines[:i] if not x.startswith("pytorchjob render"))
                    found.append(Command(b.path, b.line + 1 + i, (*before, cmd), example_above(b.line)))
        for m in _INLINE.finditer(text):
            if _is_shape(m.group(1)):
                continue
            line = text.count("\n", 0, m.start()) + 1
            if any(b.line <= line <= b.line + b.body.count("\n") + 1 for b in page_blocks):
                continue  # inside a fenced block: counted above
            found.append(Command(page.relative_to(ROOT).as_posix(), line, (m.group(1),), example_above(line)))
    return found


COMMANDS = _commands()


def test_the_docs_render_commands_are_found():
    pages_with_commands = {c.page for c in COMMANDS}
    assert {"README.md", "docs/index.md", "docs/migration.md", "docs/trainer-v2.md"} <= pages_with_commands


def _run_lines(command: Command, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLYTE_PYTORCH_", "PYTORCHJOB_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    out = None
    for line in command.lines:
        out = subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=180)
        assert out.returncode == 0, f"{command.id}: `{line}` exited {out.returncode}:\n{out.stderr[-3000:]}"
    assert out is not None
    return out


def _has_flyte() -> bool:
    import importlib.util

    return importlib.util.find_spec("flyte") is not None


def _workdir(command: Command, tmp_path: Path) -> Path:
    """The user's directory: the page's example as file.py, and the repository's examples (run from its root)."""
    (tmp_path / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    if command.example is not None:
        (tmp_path / "file.py").write_text(command.example.body, encoding="utf-8")
    return tmp_path


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize("command", COMMANDS, ids=[c.id for c in COMMANDS])
def test_documented_render_command_prints_one_job(command: Command, tmp_path: Path):
    if command.example is not None and "import flyte\n" in command.example.body and not _has_flyte():
        pytest.skip("a Flyte 2 example: needs the flyte2 extra")
    out = _run_lines(command, _workdir(command, tmp_path))
    target = re.search(r"--target (\w+)", command.lines[-1])
    kind = BY_CONFIG[target.group(1)].kind if target else "PyTorchJob"
    job = _assert_one_valid_job(out.stdout, kind)
    if command.page in ("README.md", "docs/index.md") and "all_reduce" in command.lines[-1]:
        # both pages: "the master and the 2 workers" / "one Master, two Workers"
        replicas = {role: spec["replicas"] for role, spec in job["spec"]["pytorchReplicaSpecs"].items()}
        assert replicas == {"Master": 1, "Worker": 2}


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_both_trainjob_previews_print_the_same_job(tmp_path: Path):
    """trainer-v2.md: "both renders print the same TrainJob but for the module the pods import"."""
    commands = [c for c in COMMANDS if c.page == "docs/trainer-v2.md"]
    assert len(commands) == 2 and commands[-1].lines[0].startswith("pyflyte ")
    workdir = _workdir(commands[-1], tmp_path)
    first = _run_lines(commands[0], workdir).stdout
    second = _run_lines(commands[-1], workdir).stdout  # `pyflyte package`, then the render of its archive
    assert first != second and "- mnist.workflow\n" in first and "- examples.mnist.workflow\n" in second
    # The spec digest the job carries (pytorch.flyte.org/spec-sha256) covers the module name too, so it differs with it.
    assert _unstamped(first) == _unstamped(second).replace("examples.mnist.workflow", "mnist.workflow")
    _assert_one_valid_job(first, "TrainJob")


def _unstamped(job_yaml: str) -> str:
    return "".join(line for line in job_yaml.splitlines(keepends=True) if "pytorch.flyte.org/spec-sha256:" not in line)
