"""Read-only JSON data and fresh copies of it: `freeze` for what the reader shares, `thaw` for what a writer changes.

The reader freezes every mapping and list it puts into a `TaskSpec` (the spec is cached and shared); the writers
thaw the parts they turn into a job, so no two jobs, and no job and the spec, share an object. Pure, standard
library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

__all__ = ["freeze", "thaw"]


def freeze(value: Any) -> Any:
    """A read-only copy of JSON-like data: dicts become `MappingProxyType`s, lists become tuples.

    Args:
        value: JSON-like data.

    Returns:
        The frozen copy (scalars as they are).
    """
    if isinstance(value, Mapping):
        return MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """A fresh mutable copy of JSON-like (or frozen) data: mappings become dicts, tuples and lists become lists.

    Faster than `copy.deepcopy` for JSON data, and every dict in the result is new: shared objects would turn into
    YAML anchors in `pytorchjob render` output.

    Args:
        value: JSON-like or `freeze`d data.

    Returns:
        The copy.
    """
    kind = type(value)
    if kind is dict or kind is MappingProxyType:  # exact types first: this runs for every field of every job
        return {k: thaw(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [thaw(v) for v in value]
    if kind in _SCALARS:
        return value
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw(v) for v in value]
    return value


_SCALARS = frozenset({str, int, float, bool, type(None)})
