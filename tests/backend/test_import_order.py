"""Imports: no cycle among our modules (module-level or inside functions), and a pure core that loads no flytekit.

flytekit imports `backend_plugin.connector` from its `flytekit.plugins` entry points while flytekit itself is being
imported. A backend module that reached flytekit through a shared helper (the SDK's quantity parser once did, via
`flytekitplugins_pytorch/__init__`) therefore met its own half-initialized modules; an `import flytekit` at the top of
`backend_plugin/__init__` hid it. These tests keep the shared helpers in `pytorch_contract` and the builder free of
flytekit and kubernetes, and find any import cycle statically.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("pytorch_contract", "pytorch_core", "backend_plugin", "flytekitplugins_pytorch")
# Everything of the backend but the connector and the CLI (which serializes tasks with flytekit when asked).
PURE_BACKEND = (
    "backend_plugin.spec",
    "backend_plugin.frozen",
    "backend_plugin.template",
    "backend_plugin.pod_templates",
    "backend_plugin.pods",
    "backend_plugin.execution",
    "backend_plugin.secrets",
    "backend_plugin.config",
    "backend_plugin.status",
    "backend_plugin.logs",
    "backend_plugin.errors",
    "backend_plugin.retry",
    "backend_plugin.targets",
    "backend_plugin.targets.pytorchjob",
    "backend_plugin.targets.trainjob",
)
# Modules that must never name or compare a job kind: they take everything kind-specific from a `JobTarget`.
KIND_NEUTRAL = (
    "backend_plugin.connector",
    "backend_plugin.cli",
    "backend_plugin.errors",
    "backend_plugin.retry",
    "backend_plugin.status",
    "backend_plugin.logs",
    "backend_plugin.watch",
    "backend_plugin.targets.base",
)
KIND_PACKAGES = "backend_plugin.targets."


def _modules() -> dict[str, Path]:
    """Dotted name -> file of every module of our packages."""
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Our modules that importing `name` runs: every import statement anywhere in the file (functions included),
    `from a import b` counting `a.b` when it is a module, and the packages above each target that `name` is not
    itself inside (importing `a.b.c` from elsewhere runs `a/__init__` and `a/b/__init__` first)."""
    is_package = path.name == "__init__.py"
    here = name if is_package else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            targets.add(base)
            targets.update(f"{base}.{alias.name}" for alias in node.names)
    out = set()
    for target in targets:
        parts = target.split(".")
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            if prefix in modules and prefix != name and not (name + ".").startswith(prefix + "."):
                out.add(prefix)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_function_level_and_relative_imports() -> None:
    graph = _graph()
    assert "backend_plugin.spec" in graph["backend_plugin.template"]
    assert "pytorch_contract.quantity" in graph["pytorch_core.config"]
    # `from pytorch_core.launcher import run_distributed` inside `execute`
    assert "pytorch_core.launcher" in graph["flytekitplugins_pytorch.task"]
    # importing a submodule of another package runs that package's __init__ first (how flytekit got in)
    assert "pytorch_contract" in graph["pytorch_core.config"]
    # ... but a module inside a package does not depend on its own package's __init__
    assert "backend_plugin" not in graph["backend_plugin.template"]
    # a kind package's modules import their siblings, not the registry above them
    assert "backend_plugin.targets" not in graph["backend_plugin.targets.trainjob.links"]
    fake = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"d"}}
    assert _cycles(fake) == [["a", "b", "c"]]


def test_no_import_cycles() -> None:
    cycles = _cycles(_graph())
    assert cycles == [], f"import cycles among our modules: {cycles}"


def test_shared_contract_and_pure_backend_import_nothing_of_the_sdk() -> None:
    graph = _graph()
    reach: dict[str, set[str]] = {}

    def reachable(v: str) -> set[str]:
        if v not in reach:
            reach[v] = set()
            for w in graph[v]:
                reach[v] |= {w} | reachable(w)
        return reach[v]

    for name in [m for m in graph if m.startswith("pytorch_contract")] + list(PURE_BACKEND):
        sdk = sorted(m for m in reachable(name) if m.startswith("flytekitplugins_pytorch"))
        assert sdk == [], f"{name} imports SDK modules {sdk} (which import flytekit)"


@pytest.mark.parametrize("module", PURE_BACKEND)
def test_pure_backend_modules_load_neither_flytekit_nor_kubernetes(module: str) -> None:
    code = (
        f"import sys, json, {module}\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('flytekit', 'kubernetes'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout) == []


@pytest.mark.parametrize(
    "first", ["backend_plugin.targets", "backend_plugin.config", "backend_plugin.cli", "backend_plugin.connector"]
)
def test_backend_modules_import_first_and_register_the_connector(first: str) -> None:
    code = (
        f"import {first}\n"
        "import backend_plugin.targets, backend_plugin.config as c, backend_plugin.connector\n"
        "from flytekit.extend.backend.base_connector import ConnectorRegistry\n"
        "print(c.is_quantity.__module__, type(ConnectorRegistry.get_connector('pytorch', 1)).__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["pytorch_contract.quantity", "ServedJobConnector"]


# ---------------------------------------------------------------------------------------------------------------
# The kind-neutral modules never name a kind, never compare one, and nothing reaches into another module's privates.

_KIND_WORDS = re.compile(r"PyTorchJob|TrainJob|pytorchjobs|trainjobs|kubeflow\.org|jobset\.")


def _kind_names() -> set[str]:
    """Every registered kind's `kind`, `plural` and API group (its `config_name` is also the name of the `pytorchjob`
    program and its environment prefix, so it is caught where it matters: a comparison or a kind package import)."""
    from backend_plugin.targets import KINDS

    names = set()
    for t in KINDS:
        names |= {t.kind, t.plural, t.group}
    return names


def _registered() -> tuple:
    from backend_plugin.targets import KINDS

    return KINDS


def kind_findings(name: str, source: str) -> list[str]:
    """Where `source` (module `name`) names or compares a job kind: a string naming a kind, its plural or its API
    group; an identifier spelled like a kind constant (`TRAINJOB`, `PyTorchJobTarget`); an import of a kind's
    package; a comparison with `.kind`, a kind constant or a kind's name."""
    kinds = _kind_names()
    found = []
    for node in ast.walk(ast.parse(source)):
        where = f"{name}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if _KIND_WORDS.search(node.value) or node.value in kinds:
                found.append(f"{where} string {node.value[:60]!r}")
        elif isinstance(node, (ast.Name, ast.Attribute)):
            ident = node.id if isinstance(node, ast.Name) else node.attr
            if re.search(r"PYTORCHJOB|TRAINJOB|PyTorchJob|TrainJob", ident):
                found.append(f"{where} identifier {ident}")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if isinstance(node, ast.ImportFrom) and node.module == "backend_plugin.targets":
                modules += [f"backend_plugin.targets.{a.name}" for a in node.names]
            named = [a.name for a in node.names if re.search(r"PYTORCHJOB|TRAINJOB|PyTorchJob|TrainJob", a.name)]
            found.extend(f"{where} imports the name {n}" for n in named)
            packages = {t.config_name for t in _registered()}
            for module in modules:
                if module.startswith(KIND_PACKAGES) and module.split(".")[2] in packages:
                    found.append(f"{where} imports {module}")
        elif isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                own = isinstance(side, ast.Attribute) and isinstance(side.value, ast.Name) and side.value.id == "self"
                if isinstance(side, ast.Attribute) and side.attr in ("kind", "plural", "config_name") and not own:
                    found.append(f"{where} compares .{side.attr}")
                elif isinstance(side, ast.Constant) and side.value in {t.config_name for t in _registered()}:
                    found.append(f"{where} compares with {side.value!r}")
    return found


def private_imports(name: str, source: str) -> list[str]:
    """`from backend_plugin.x import _private` (or `x._private`) in a `backend_plugin` module, `x` not itself."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("backend_plugin"):
            for alias in node.names:
                if alias.name.startswith("_") and node.module != name:
                    found.append(f"{name}:{node.lineno} imports {node.module}.{alias.name}")
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            base = node.value
            if isinstance(base, ast.Name) and base.id in _backend_module_aliases(source):
                found.append(f"{name}:{node.lineno} reads {base.id}.{node.attr}")
    return found


def _backend_module_aliases(source: str) -> set[str]:
    """Names bound to `backend_plugin` modules by `import backend_plugin.x as y` or `from backend_plugin import y`."""
    modules = _modules()
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out |= {a.asname for a in node.names if a.asname and a.name.startswith("backend_plugin")}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("backend_plugin"):
            out |= {a.asname or a.name for a in node.names if f"{node.module}.{a.name}" in modules}
    return out


def test_kind_neutral_modules_never_name_or_compare_a_kind() -> None:
    modules = _modules()
    found = [f for name in KIND_NEUTRAL for f in kind_findings(name, modules[name].read_text(encoding="utf-8"))]
    assert found == [], "kind-neutral modules name or compare a job kind:\n" + "\n".join(found)


def test_the_kind_check_finds_names_comparisons_and_imports() -> None:
    bad = (
        "from backend_plugin.targets import TRAINJOB\n"
        "from backend_plugin.targets.trainjob import writer\n"
        'if target.kind == "x": pass\n'
        'msg = "create PyTorchJob ns/name failed"\n'
        'resource = "trainjobs"\n'
        'if choice == "trainjob": pass\n'
    )
    found = kind_findings("m", bad)
    assert len(found) == 6, found
    assert kind_findings("m", 'msg = f"create {target.kind} failed"\nprog = "pytorchjob render"\n') == []


def test_no_private_cross_imports_inside_backend_plugin() -> None:
    modules = _modules()
    found = [
        f
        for name, path in modules.items()
        if name.startswith("backend_plugin")
        for f in private_imports(name, path.read_text(encoding="utf-8"))
    ]
    assert found == [], "private names imported across backend_plugin modules:\n" + "\n".join(found)
    assert private_imports("m", "from backend_plugin.status import _fatal_waiting\n") != []
    assert private_imports("m", "from backend_plugin import status\nstatus._replica(p)\n") != []
