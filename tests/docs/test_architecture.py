"""docs/architecture.md says what is true: its table of backend modules names every module and only modules that
exist, the files it says a new job kind brings exist for every registered kind, and the import rules of its rooms
hold. (Figures such as line counts drift; what the page claims is checked instead.)"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from backend_plugin.kinds import DECLARED

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
BACKEND = ROOT / "backend_plugin"
FRONT_ENDS = {"flytekitplugins_pytorch", "flyte2_pytorch"}


def _section(title: str) -> str:
    text = PAGE.read_text(encoding="utf-8")
    start = text.index(title)
    end = text.find("\n#", start + len(title))
    return text[start : end if end != -1 else None]


def _table_modules() -> list[str]:
    """The first column of the backend modules table: `spec.py`, `targets/pytorchjob/`, `admission/`, ..."""
    rows = [line for line in _section("### Backend modules").splitlines() if line.startswith("| `")]
    return [name for row in rows for name in re.findall(r"`([^`]+)`", row.split("|")[1])]


def _backend_modules() -> set[str]:
    """What the table must name: every module and folder of `backend_plugin` (but its `__init__` and `__main__`),
    every module of `targets/`, and every kind package."""
    top = {p.name for p in BACKEND.glob("[!_]*.py")}
    folders = {f"{p.name}/" for p in BACKEND.iterdir() if p.is_dir() and not p.name.startswith("_")}
    targets = {f"targets/{p.name}" for p in (BACKEND / "targets").glob("*.py") if p.name != "__main__.py"}
    kinds = {f"targets/{p.name}/" for p in (BACKEND / "targets").iterdir() if (p / "__init__.py").is_file()}
    declarations = {f"kinds/{p.name}" for p in (BACKEND / "kinds").glob("*.py")}
    return (top | folders | targets | kinds | declarations) - {"targets/", "kinds/"}


def test_the_backend_modules_table_names_every_module_and_only_existing_ones() -> None:
    named = _table_modules()
    assert "build.py" in named and "kinds/declaration.py" in named  # the table is read
    missing = [n for n in named if not (BACKEND / n).exists()]
    assert missing == [], f"docs/architecture.md names modules that do not exist: {missing}"
    unnamed = sorted(_backend_modules() - set(named))
    assert unnamed == [], f"backend modules the architecture page does not name: {unnamed}"


def test_the_page_gives_no_line_counts() -> None:
    assert "wc -l" not in PAGE.read_text(encoding="utf-8")
    header = next(line for line in _section("### Backend modules").splitlines() if line.startswith("| module"))
    assert "lines" not in header


@pytest.mark.parametrize("declaration", DECLARED, ids=[d.config_name for d in DECLARED])
def test_the_files_a_new_kind_brings_exist_for_every_registered_kind(declaration) -> None:
    """What "where a new kind goes" lists, checked for the kinds there are."""
    section = _section("## The rooms of the backend, and where a new kind goes")
    name = declaration.config_name
    package = BACKEND / "targets" / name
    for module in ("__init__.py", "writer.py", "status.py", "links.py", "target.py"):
        assert f"`{module}`" in section and (package / module).is_file(), f"{package / module}"
    assert "`kinds/<kind>.py`" in section and (BACKEND / "kinds" / f"{name}.py").is_file()
    assert declaration.package == f"backend_plugin.targets.{name}"
    crd = BACKEND / "crds" / declaration.crd.file
    assert crd.is_file() and f"`{declaration.crd.file}`" in (BACKEND / "crds" / "PROVENANCE.md").read_text()
    tests = ROOT / "tests" / "targets" / name
    for module in ("facts.py", "test_writer.py", "test_status.py", "test_links.py"):
        assert f"`{module}`" in section and (tests / module).is_file(), f"{tests / module}"
    assert f'resources: ["{declaration.plural}"]' in (BACKEND / "deploy" / "rbac.yaml").read_text()
    assert f"`{name}`" in (ROOT / "docs" / "reference" / "backend-config.md").read_text()
    # the cluster tier runs it on its real controller: its place in the tier's kinds, and what each case checks of it
    for path, table in (("harness.py", "KINDS"), ("test_run.py", "SUCCEEDED_WITH_THREE_RANKS"),
                        ("test_failures.py", "RANK_TWO_FAILED")):  # fmt: skip
        assert f"`{table}`" in section
        module = ast.parse((ROOT / "tests" / "cluster" / path).read_text())
        value = next(
            n.value
            for n in module.body
            if isinstance(n, (ast.Assign, ast.AnnAssign))
            and table in [getattr(t, "id", "") for t in (n.targets if isinstance(n, ast.Assign) else [n.target])]
        )
        keys = value.keys if isinstance(value, ast.Dict) else getattr(value, "elts", [])
        assert name in [k.value for k in keys if isinstance(k, ast.Constant)], (path, table)


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level:
            out.add((node.module or "").split(".")[0])
    return out


def test_the_contract_imports_only_the_standard_library() -> None:
    """The rooms table: `pytorch_contract/` imports nothing beyond the standard library."""
    found = {
        path.name: sorted(m for m in _imports(path) if m not in sys.stdlib_module_names and m != "pytorch_contract")
        for path in (ROOT / "pytorch_contract").glob("*.py")
    }
    assert {k: v for k, v in found.items() if v} == {}


@pytest.mark.parametrize("room", ["backend_plugin", "flyte2_backend"])
def test_the_backend_rooms_import_no_front_end(room: str) -> None:
    """The rooms table: neither backend package imports an SDK front-end, anywhere in a module (functions too)."""
    found = {
        str(path.relative_to(ROOT)): sorted(
            m for m in _imports(path) if m in ("flytekitplugins_pytorch", "flyte2_pytorch")
        )
        for path in (ROOT / room).rglob("*.py")
    }
    assert {k: v for k, v in found.items() if v} == {}
