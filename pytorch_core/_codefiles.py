"""The source files of a function pickled by value, carried beside it so that a rank's tracebacks name them.

cloudpickle pickles a function by value when its module cannot be imported by name in the receiving process (a
script run as ``__main__``, a module loaded from a path). From cloudpickle 3.1.3 it also replaces each code object's
``co_filename`` with ``"<dynamic-code>"``, so a traceback raised in a rank names no file and shows no source line.
The launcher records, before pickling, the file of every code object the function and its module's other functions
hold; the rank puts them back after unpickling. Code pickled by reference is untouched.
"""

from __future__ import annotations

import types
from typing import Any

DYNAMIC_CODE = "<dynamic-code>"

CodeKey = tuple[str, str, int]
"""(module, qualified name, first line) of a code object."""


def _functions(fn: Any) -> list[types.FunctionType]:
    """`fn`, the functions it wraps (``__wrapped__``), and the functions of their modules that their globals hold
    (those cloudpickle pickles along by value)."""
    found: list[types.FunctionType] = []
    seen: set[int] = set()
    current = fn
    while isinstance(current, types.FunctionType) and id(current) not in seen:
        found.append(current)
        seen.add(id(current))
        current = getattr(current, "__wrapped__", None)
    for root in list(found):
        for value in root.__globals__.values():
            if isinstance(value, types.FunctionType) and id(value) not in seen and value.__module__ == root.__module__:
                found.append(value)
                seen.add(id(value))
    return found


def _codes(code: types.CodeType) -> list[types.CodeType]:
    out, stack = [], [code]
    while stack:
        current = stack.pop()
        out.append(current)
        stack.extend(c for c in current.co_consts if isinstance(c, types.CodeType))
    return out


def code_files(fn: Any) -> dict[CodeKey, str]:
    """The file of each code object `fn` and its module's functions hold, keyed as `CodeKey`.

    Args:
        fn: the user's function (anything else gives an empty map).

    Returns:
        A small map, pickled beside the function.
    """
    files: dict[CodeKey, str] = {}
    for f in _functions(fn):
        for code in _codes(f.__code__):
            files[(f.__module__, getattr(code, "co_qualname", code.co_name), code.co_firstlineno)] = code.co_filename
    return files


def _restored(code: types.CodeType, module: str, files: dict[CodeKey, str]) -> types.CodeType:
    consts = tuple(_restored(c, module, files) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    changes: dict[str, Any] = {}
    # by identity: code objects that differ only in their file compare equal
    if any(new is not old for new, old in zip(consts, code.co_consts, strict=True)):
        changes["co_consts"] = consts
    if code.co_filename == DYNAMIC_CODE:
        name = files.get((module, getattr(code, "co_qualname", code.co_name), code.co_firstlineno))
        if name:
            changes["co_filename"] = name
    return code.replace(**changes) if changes else code


def restore_code_files(fn: Any, files: dict[CodeKey, str]) -> None:
    """Give the unpickled `fn` (and its module's functions) back the files `code_files` recorded.

    Args:
        fn: the function as unpickled in the rank.
        files: what `code_files` returned in the launcher.
    """
    if not files:
        return
    for f in _functions(fn):
        if any(c.co_filename == DYNAMIC_CODE for c in _codes(f.__code__)):
            f.__code__ = _restored(f.__code__, f.__module__, files)
