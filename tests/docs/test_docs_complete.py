"""Nothing public goes undocumented.

- Drift: every keyword of ``pytorch_task``, every field of the config dataclasses and every member of the policy
  enums is documented in the section of ``docs/reference/decorator.md`` named for it; every ``BackendConfig``
  section and key in ``docs/reference/backend-config.md``, whose YAML examples load. A new option without its row in
  the reference fails here.
- Docstrings: every public symbol exported by ``flytekitplugins_pytorch`` and every public function / class (and
  its public methods) defined in any public module of ``backend_plugin`` (found by walking the package, so a new
  module is covered) has a docstring, with ``Args:`` when it takes arguments, ``Returns:`` when it returns a value
  and ``Raises:`` when its body raises.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import importlib
import inspect
import pkgutil
import re
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DECORATOR_PAGE = ROOT / "docs" / "reference" / "decorator.md"
BACKEND_PAGE = ROOT / "docs" / "reference" / "backend-config.md"

CONFIG_CLASSES = ("PyTorch", "Master", "Worker", "RunPolicy", "Elastic")
ENUMS = ("RestartPolicy", "CleanPodPolicy")


def _sections(page: Path) -> dict[str, str]:
    """Page text by heading: the first backticked name of a ``##``/``###`` heading -> its section's text.

    A heading without a backticked name (``### Scheduling``) continues the section of the name above it.
    """
    text = page.read_text(encoding="utf-8")
    out: dict[str, str] = {}
    current = ""
    parts = re.split(r"^(#{2,3} .*)$", text, flags=re.M)
    for heading, body in zip(parts[1::2], parts[2::2], strict=True):
        m = re.search(r"`([\w.]+)", heading)
        if m:
            current = m.group(1)
        elif heading.startswith("## "):
            current = ""
        if current:
            out[current] = out.get(current, "") + body
    return out


def _mentions(text: str, name: str) -> bool:
    """Whether `name` appears as inline code (`` `name` ``, `` `name=...` `` or `` `name: ...` ``)."""
    return re.search(rf"`{re.escape(name)}(`|\s*[=:(])", text) is not None


def _sdk():
    return importlib.import_module("flytekitplugins_pytorch")


def _decorator_keywords() -> list[str]:
    sig = inspect.signature(_sdk().pytorch_task)
    params = list(sig.parameters.values())
    # The first positional parameter is the decorated function (bare `@pytorch_task`), not an option.
    if params and params[0].kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
        params = params[1:]
    return [p.name for p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]


def test_decorator_keywords_documented():
    keywords = _decorator_keywords()
    assert keywords, "pytorch_task has no explicit keywords to document"
    section = _sections(DECORATOR_PAGE).get("pytorch_task", "")
    missing = [k for k in keywords if not _mentions(section, k)]
    assert missing == [], f"pytorch_task keywords not documented under '## `pytorch_task`': {missing}"


@pytest.mark.parametrize("cls_name", CONFIG_CLASSES)
def test_config_fields_documented(cls_name: str):
    cls = getattr(_sdk(), cls_name)
    fields = [f.name for f in dataclasses.fields(cls)]
    section = _sections(DECORATOR_PAGE).get(cls_name, "")
    assert section, f"docs/reference/decorator.md has no section headed `{cls_name}`"
    missing = [f for f in fields if not _mentions(section, f)]
    assert missing == [], f"{cls_name} fields not documented in its section: {missing}"


@pytest.mark.parametrize("enum_name", ENUMS)
def test_enum_members_documented(enum_name: str):
    cls = getattr(_sdk(), enum_name)
    assert issubclass(cls, enum.Enum)
    section = _sections(DECORATOR_PAGE).get(enum_name, "")
    assert section, f"docs/reference/decorator.md has no section headed `{enum_name}`"
    missing = [m.name for m in cls if m.name not in section or str(m.value) not in section]
    assert missing == [], f"{enum_name} members (name and value) not documented: {missing}"


def test_backend_config_sections_and_keys_documented():
    """Every section (its name and class, the kinds' own included) and every key users set is on the page."""
    config = importlib.import_module("backend_plugin.config")
    text = BACKEND_PAGE.read_text(encoding="utf-8")
    sections = [f.name for f in dataclasses.fields(config.BackendConfig) if f.name != "kinds"]
    classes = [type(getattr(config.BackendConfig(), s)).__name__ for s in sections if s != "target"]
    kinds = [(name, type(section).__name__) for name, section in config.BackendConfig().kinds.items()]
    missing = [n for n in (*sections, *classes, *(n for k in kinds for n in k)) if not _mentions(text, n)]
    assert missing == [], f"config sections not documented in docs/reference/backend-config.md: {missing}"
    missing = [k for k in config.KEYS if not _mentions(text, k)]
    assert missing == [], f"config keys not documented in docs/reference/backend-config.md: {missing}"


def test_backend_config_examples_load():
    """Each YAML example of the page is a config `BackendConfig.from_yaml` accepts (the sectioned one the same as
    the one written in keys)."""
    from tests.docs.markdown_blocks import all_blocks

    config = importlib.import_module("backend_plugin.config")
    blocks = [b for b in all_blocks() if b.lang == "yaml" and Path(b.path).name == BACKEND_PAGE.name]
    loaded = [config.BackendConfig.from_yaml(b.body) for b in blocks]
    assert len(loaded) >= 4
    keys, sections = loaded[0], loaded[1]
    assert sections.kinds["trainjob"] == keys.kinds["trainjob"] and sections.gpu == keys.gpu
    assert (sections.job, sections.run_policy, sections.status) == (keys.job, keys.run_policy, keys.status)


# --- docstrings ----------------------------------------------------------------------------------------------------


def _function_node(obj: Callable) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    try:
        source = textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError):
        return None
    tree = ast.parse(source)
    node = tree.body[0] if tree.body else None
    return node if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None


def _own_raises(node: ast.AST) -> bool:
    """Whether the function body raises an exception itself (not in a nested function, not a bare re-raise)."""
    stack = list(ast.iter_child_nodes(node))
    while stack:
        child = stack.pop()
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(child, ast.Raise) and child.exc is not None:
            return True
        stack.extend(ast.iter_child_nodes(child))
    return False


def _returns_value(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    ann = node.returns
    if ann is not None:
        return ast.unparse(ann) not in ("None", "NoReturn")
    for child in ast.walk(node):
        if isinstance(child, ast.Return) and child.value is not None:
            return True
    return False


def _problems(name: str, obj: object, doc_owner: object | None = None, is_property: bool = False) -> list[str]:
    """What is missing from the docstring of a function, method or class.

    A property getter documents an attribute (Google style), so it needs no ``Returns:`` section.
    """
    doc = inspect.getdoc(doc_owner if doc_owner is not None else obj) or ""
    if not doc.strip():
        return [f"{name}: no docstring"]
    if inspect.isclass(obj):
        return []
    node = _function_node(obj)  # type: ignore[arg-type]
    if node is None:
        return []
    out = []
    args = [a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)]
    args = [a for a in args if a not in ("self", "cls")]
    if node.args.vararg or node.args.kwarg or args:
        if "Args:" not in doc and "Arguments:" not in doc:
            out.append(f"{name}: takes {args or 'arguments'} but has no 'Args:' section")
    needs_returns = node.name != "__init__" and not is_property and _returns_value(node)
    if needs_returns and "Returns:" not in doc and "Yields:" not in doc:
        out.append(f"{name}: returns a value but has no 'Returns:' section")
    if _own_raises(node) and "Raises:" not in doc:
        out.append(f"{name}: raises but has no 'Raises:' section")
    return out


def _public_members(cls: type) -> Iterator[tuple[str, object, bool]]:
    for attr, value in vars(cls).items():
        if attr.startswith("_") and attr != "__init__":
            continue
        if attr == "__init__" and not inspect.isfunction(value):
            continue
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        is_property = isinstance(value, property)
        if is_property:
            value = value.fget
        if inspect.isfunction(value):
            yield attr, value, is_property


def _backend_modules() -> list[str]:
    """Every public module of ``backend_plugin``, found by walking the package (a new module is covered at once).

    ``__main__`` (importing it runs the CLI) and private modules (``_name``) are left out.
    """
    package = importlib.import_module("backend_plugin")
    names = [m.name for m in pkgutil.walk_packages(package.__path__, "backend_plugin.")]
    return sorted(n for n in names if not any(part.startswith("_") for part in n.split(".")[1:]))


def test_the_docstring_check_walks_every_backend_module():
    modules = _backend_modules()
    top = ROOT / "backend_plugin"
    files = sorted([p.stem for p in top.glob("[!_]*.py")] + [p.parent.name for p in top.glob("[!_]*/__init__.py")])
    assert [m.rsplit(".", 1)[-1] for m in modules if m.count(".") == 1] == files
    kinds = sorted(p.parent.name for p in (top / "targets").glob("[!_]*/__init__.py"))
    assert kinds and all(f"backend_plugin.targets.{k}.status" in modules for k in kinds)


def _symbols() -> list[tuple[str, object, object | None, bool]]:
    """(qualified name, object, object whose docstring documents it, is a property) for every public symbol."""
    out: list[tuple[str, object, object | None]] = []
    sdk = _sdk()
    exported = getattr(sdk, "__all__", [n for n in dir(sdk) if not n.startswith("_")])
    for name in exported:
        out.append((f"flytekitplugins_pytorch.{name}", getattr(sdk, name), None))
    for mod_name in _backend_modules():
        mod = importlib.import_module(mod_name)
        for name, obj in vars(mod).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != mod_name:
                continue
            if inspect.isfunction(obj) or inspect.isclass(obj):
                out.append((f"{mod_name}.{name}", obj, None))
    expanded: list[tuple[str, object, object | None, bool]] = []
    for qual, obj, owner in out:
        expanded.append((qual, obj, owner, False))
        if inspect.isclass(obj) and not issubclass(obj, enum.Enum):
            for attr, fn, is_property in _public_members(obj):
                if getattr(fn, "__module__", "").split(".")[0] not in ("flytekitplugins_pytorch", "backend_plugin"):
                    continue
                if dataclasses.is_dataclass(obj) and attr == "__init__":
                    continue  # generated; the class docstring documents the fields
                # An __init__ may be documented by its class docstring (Google style allows either), and a method
                # without a docstring that overrides a documented one is documented by it (as `inspect.getdoc` does).
                owner = obj if attr == "__init__" and not fn.__doc__ else _overridden(obj, attr, fn)
                expanded.append((f"{qual}.{attr}", fn, owner, is_property))
    return expanded


def _overridden(cls: type, attr: str, fn: object) -> object | None:
    """The documented method of a base class that `fn` (undocumented) overrides, else None."""
    if getattr(fn, "__doc__", None):
        return None
    for base in cls.__mro__[1:]:
        inherited = vars(base).get(attr)
        if inherited is not None and getattr(inherited, "__doc__", None):
            return inherited
    return None


def test_docstrings_have_args_returns_raises():
    problems = [p for qual, obj, owner, prop in _symbols() for p in _problems(qual, obj, owner, prop)]
    assert problems == [], "docstrings missing or incomplete:\n" + "\n".join(problems)
