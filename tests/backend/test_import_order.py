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
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("pytorch_contract", "backend_plugin", "flytekitplugins_pytorch")
# Everything of the backend but the connector and the CLI (which serializes tasks with flytekit when asked).
PURE_BACKEND = (
    "backend_plugin.builder",
    "backend_plugin.template",
    "backend_plugin.pytorchjob",
    "backend_plugin.pods",
    "backend_plugin.execution",
    "backend_plugin.secrets",
    "backend_plugin.config",
    "backend_plugin.status",
    "backend_plugin.logs",
    "backend_plugin.errors",
    "backend_plugin.retry",
)


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
    assert "backend_plugin.template" in graph["backend_plugin.builder"]
    assert "pytorch_contract.quantity" in graph["flytekitplugins_pytorch.quantity"]
    # `from flytekitplugins_pytorch.launcher import run_distributed` inside `execute`
    assert "flytekitplugins_pytorch.launcher" in graph["flytekitplugins_pytorch.task"]
    # importing a submodule of another package runs that package's __init__ first (how flytekit got in)
    assert "pytorch_contract" in graph["flytekitplugins_pytorch.quantity"]
    # ... but a module inside a package does not depend on its own package's __init__
    assert "backend_plugin" not in graph["backend_plugin.builder"]
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
    "first", ["backend_plugin.builder", "backend_plugin.config", "backend_plugin.cli", "backend_plugin.connector"]
)
def test_backend_modules_import_first_and_register_the_connector(first: str) -> None:
    code = (
        f"import {first}\n"
        "import backend_plugin.builder, backend_plugin.config as c, backend_plugin.connector\n"
        "from flytekit.extend.backend.base_connector import ConnectorRegistry\n"
        "print(c.is_quantity.__module__, type(ConnectorRegistry.get_connector('pytorch', 1)).__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["pytorch_contract.quantity", "PyTorchJobConnector"]
