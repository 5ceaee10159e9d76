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
import yaml

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (
    "pytorch_contract",
    "pytorch_core",
    "backend_plugin",
    "flytekitplugins_pytorch",
    "flyte2_pytorch",
    "flyte2_backend",
)
FRONT_ENDS = ("flytekitplugins_pytorch", "flyte2_pytorch")
"""The SDK front-ends: no backend module imports them (a Flyte 2 task is serialized by its front-end, found through
an entry point; a flytekit task with flytekit itself)."""
BACKENDS = ("backend_plugin", "flyte2_backend")
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
    "backend_plugin.kube.retry",
    "backend_plugin.settings",
    "backend_plugin.build",
    "backend_plugin.kube.api",
    "backend_plugin.kube.watch",
    "backend_plugin.kinds",
    "backend_plugin.admission",
    "backend_plugin.targets",
    "backend_plugin.targets.registry",
    "backend_plugin.targets.pytorchjob.target",
    "backend_plugin.targets.trainjob.target",
)
KIND_PACKAGES = "backend_plugin.targets."
REGISTRIES = ("backend_plugin.kinds", "backend_plugin.targets.registry")
"""The registries: the modules outside the kinds' own that name each kind (one import, one entry each): the kinds'
declarations and their targets."""
PRODUCT_NAME = ("backend_plugin.config", "PROGRAM")
"""`PROGRAM = "pytorchjob"`: the program's (and its environment variables') name, not a kind's."""


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


def _unit(name: str) -> str:
    """The package a module belongs to, one level below its top package (`backend_plugin.targets`,
    `backend_plugin.admission`), or the module itself at the top (`backend_plugin.config`)."""
    parts = name.split(".")
    if len(parts) <= 2:
        return name
    return ".".join(parts[:2])


def test_no_import_cycles_between_packages() -> None:
    """The backend's packages and top modules import each other in one direction: the kinds' declarations below the
    config and the admission model, those below the targets, the targets below the connector and the CLI. A cycle of
    packages (config -> targets -> config) is what the registry once loaded its targets by name to get around."""
    graph: dict[str, set[str]] = {}
    for name, targets in _graph().items():
        if not name.startswith(BACKENDS):
            continue
        unit = _unit(name)
        graph.setdefault(unit, set()).update(_unit(t) for t in targets if t.startswith(BACKENDS) and _unit(t) != unit)
    assert "backend_plugin.kinds" in graph and "backend_plugin.targets" in graph["backend_plugin.cli"]
    cycles = _cycles(graph)
    assert cycles == [], f"import cycles among the backend's packages: {cycles}"
    assert _cycles({"a": {"b.x"}, "b.x": {"a"}}) == [["a", "b.x"]]


def test_no_module_loads_another_by_name() -> None:
    """Every import is one `ast` sees (and the import-order tests check): no `importlib.import_module` or `__import__`
    in the backend."""
    found = [
        f"{name}:{node.lineno}"
        for name, path in _modules().items()
        if name.startswith(BACKENDS)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Attribute)
        and node.attr == "import_module"
        or isinstance(node, ast.Name)
        and node.id == "__import__"
    ]
    assert found == []


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


def test_neither_backend_package_imports_an_sdk_front_end() -> None:
    """Statically, functions included: no module of `backend_plugin` or `flyte2_backend` reaches a front-end."""
    graph = _graph()
    reach: dict[str, set[str]] = {}

    def reachable(v: str) -> set[str]:
        if v not in reach:
            reach[v] = set()
            for w in graph[v]:
                reach[v] |= {w} | reachable(w)
        return reach[v]

    backend = [m for m in graph if m.split(".")[0] in BACKENDS]
    assert "backend_plugin.cli" in backend and "flyte2_backend.connector" in backend
    found = {m: sorted(r for r in reachable(m) if r.split(".")[0] in FRONT_ENDS) for m in backend}
    assert {m: f for m, f in found.items() if f} == {}
    assert "flyte2_pytorch.task" in reachable("flyte2_pytorch") and "flyte2_pytorch.template" in graph  # it sees them


BLOCKED_FRONT_ENDS = """
import importlib.abc, importlib.metadata, json, sys
import importlib_metadata

FRONT_ENDS = ("flytekitplugins_pytorch", "flyte2_pytorch")

class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in FRONT_ENDS:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
        return None

def without_front_ends(entry_points):
    # an install without the front-ends has no entry points of theirs (flytekit loads its plugins by entry point)
    def wrapped(**select):
        found = entry_points(**select)
        if not select:
            return found
        return type(found)(p for p in found if p.value.split(".")[0].split(":")[0] not in FRONT_ENDS)
    return wrapped

importlib.metadata.entry_points = without_front_ends(importlib.metadata.entry_points)
importlib_metadata.entry_points = without_front_ends(importlib_metadata.entry_points)
sys.meta_path.insert(0, Blocked())
import importlib.util
import backend_plugin.cli, backend_plugin.connector
if importlib.util.find_spec("flyte") is not None:  # the Flyte 2 connector needs the flyte2-backend extra
    import flyte2_backend.connector
from backend_plugin.cli import main
code = main(["render", "--template", sys.argv[1], "--target", "trainjob"])
print(json.dumps({"code": code, "front_ends": sorted(m for m in sys.modules if m.split(".")[0] in (
    "flytekitplugins_pytorch", "flyte2_pytorch"))}))
"""


def test_the_backend_renders_and_serves_with_the_front_ends_blocked() -> None:
    """At run time: with both front-ends unimportable, the CLI, the connector and the Flyte 2 connector import, and a
    serialized template renders."""
    template = ROOT / "tests" / "data" / "templates" / "hand_cpu.json"
    out = subprocess.run([sys.executable, "-c", BLOCKED_FRONT_ENDS, str(template)], capture_output=True, text=True,
                         timeout=180, cwd=ROOT)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"code": 0, "front_ends": []}
    assert yaml.safe_load(out.stdout.rsplit("\n{", 1)[0])["kind"] == "TrainJob"


def test_pure_backend_modules_load_neither_flytekit_nor_kubernetes() -> None:
    """One fresh interpreter imports every pure module: what none of them loads, none of them loads alone."""
    code = (
        f"import sys, json, {', '.join(PURE_BACKEND)}\n"
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
        "import backend_plugin.targets, backend_plugin.settings as c, backend_plugin.connector\n"
        "from flytekit.extend.backend.base_connector import ConnectorRegistry\n"
        "print(c.is_quantity.__module__, type(ConnectorRegistry.get_connector('pytorch', 1)).__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["pytorch_contract.quantity", "ServedJobConnector"]


# ---------------------------------------------------------------------------------------------------------------
# Outside the kind packages, no code line names or compares a kind, and nothing reaches into another module's privates.


def _kind_words() -> set[str]:
    """Every registered kind's `kind`, `plural`, API group, `config_name` and CRD file, lower-cased: a token that
    contains one names the kind."""
    from backend_plugin.kinds import DECLARED

    return {w.lower() for d in DECLARED for w in (d.kind, d.plural, d.group, d.config_name, d.crd.file)}


def _kind_packages() -> set[str]:
    from backend_plugin.kinds import DECLARED

    return {d.package for d in DECLARED}


def _docstrings(tree: ast.AST) -> set[int]:
    """The string constants that are documentation, not code: module, class and function docstrings, and the bare
    string statements that document an attribute."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    }


def _identifiers(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.arg):
        return [node.arg]
    if isinstance(node, ast.keyword) and node.arg:
        return [node.arg]
    if isinstance(node, ast.alias):
        return [node.name, node.asname or ""]
    if isinstance(node, ast.ImportFrom):
        return [node.module or ""]
    return []


def _product_name(name: str, node: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """Whether `node` is the string of the one allowed assignment, `PRODUCT_NAME`."""
    parent = parents.get(id(node))
    if not isinstance(parent, ast.Assign) or len(parent.targets) != 1:
        return False
    target = parent.targets[0]
    return isinstance(target, ast.Name) and (name, target.id) == PRODUCT_NAME


def kind_findings(name: str, source: str) -> list[str]:
    """Where the code of `source` (module `name`) names or compares a job kind: a string (not a docstring) or an
    identifier (a name, attribute, function, class, argument, keyword or import) that contains a registered kind's
    `kind`, `plural`, group, `config_name` or CRD file, in any case; a comparison with `.kind`, `.plural` or
    `.config_name` of another object."""
    words = _kind_words()
    tree = ast.parse(source)
    docs = _docstrings(tree)
    parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []
    for node in ast.walk(tree):
        where = f"{name}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            if any(w in node.value.lower() for w in words) and not _product_name(name, node, parents):
                found.append(f"{where} string {node.value[:60]!r}")
        found += [f"{where} identifier {i}" for i in _identifiers(node) if any(w in i.lower() for w in words)]
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                own = isinstance(side, ast.Attribute) and isinstance(side.value, ast.Name) and side.value.id == "self"
                if isinstance(side, ast.Attribute) and side.attr in ("kind", "plural", "config_name") and not own:
                    found.append(f"{where} compares .{side.attr}")
    return found


def _outside_kind_packages() -> dict[str, Path]:
    """Every module of the backend packages but the kinds' own (their target package, their declaration module and
    what it names, `backend_plugin.kinds.<config_name>...`) and the registries."""
    from backend_plugin.kinds import DECLARED

    kinds = _kind_packages()
    declared = tuple(f"backend_plugin.kinds.{d.config_name}" for d in DECLARED)
    backend = {**_modules(), **_flyte2_backend_modules()}
    return {
        name: path
        for name, path in backend.items()
        if name.startswith(("backend_plugin", "flyte2_backend"))
        and name not in REGISTRIES
        and not name.startswith(declared)
        and not any(name == k or name.startswith(k + ".") for k in kinds)
    }


def _flyte2_backend_modules() -> dict[str, Path]:
    return {
        ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): path
        for path in sorted((ROOT / "flyte2_backend").rglob("*.py"))
    }


def test_no_code_outside_the_kind_packages_names_or_compares_a_kind() -> None:
    modules = _outside_kind_packages()
    assert "backend_plugin.connector" in modules and "backend_plugin.targets.base" in modules
    assert not any(".targets.trainjob" in m or ".targets.pytorchjob" in m for m in modules)
    found = [f for name, path in sorted(modules.items()) for f in kind_findings(name, path.read_text(encoding="utf-8"))]
    assert found == [], "code outside a kind's own modules names or compares a job kind:\n" + "\n".join(found)


def test_the_kind_check_finds_names_comparisons_and_imports() -> None:
    bad = (
        "from backend_plugin.targets import trainjob\n"
        "from backend_plugin.targets.trainjob import writer\n"
        'if target.kind == "x": pass\n'
        'msg = f"create PyTorchJob {ns}/{name} failed"\n'
        'resource = "trainjobs"\n'
        'if choice == "trainjob": pass\n'
        "TRAINJOB_RUNTIME_KINDS = ()\n"
        "def to_pytorchjob(spec): pass\n"
        'CRD = {"kubeflow.org/v1": 1}\n'
    )
    found = kind_findings("m", bad)
    assert len(found) >= 9, found
    for line in range(1, 10):
        assert any(f.startswith(f"m:{line} ") for f in found), (line, found)
    neutral = (
        '"""A docstring may say PyTorchJob."""\n'
        'msg = f"create {target.kind} failed"\n'
        'prog = f"{PROGRAM} render"\n'
        "if self.kind == kind: pass\n"
    )
    assert kind_findings("m", neutral) == []
    assert kind_findings("backend_plugin.config", 'PROGRAM = "pytorchjob"\n') == []
    assert kind_findings("backend_plugin.cli", 'PROGRAM = "pytorchjob"\n') != []


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
