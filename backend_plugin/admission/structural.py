"""The API server's structural-schema handling of a custom resource, modelled on `apiextensions-apiserver`: pruning
(a field the schema does not declare is dropped, or refused with `fieldValidation=Strict`), nulls, types,
`required`, `enum`, lengths, `maxItems`, `maxProperties`, list-set and list-map uniqueness, `pattern`, integer
formats.

What each step follows upstream:

- unknown fields: `pruning.PruneWithOptions` (`pkg/apiserver/schema/pruning`), whose paths `fieldValidation=Strict`
  turns into a 400 `strict decoding error`;
- nulls: `defaulting.PruneNonNullableNullsWithoutDefaults`, run right after it, drops a `null` map value whose schema
  is neither `nullable` nor has a `default`, and reports nothing (Strict included: the create succeeds, as if the
  field were not set); `defaulting.Default` then replaces a non-nullable `null` that has a `default` by it. A `null`
  list item is neither dropped nor defaulted without an items `default`, and the schema validation that follows
  refuses it (kube-openapi's type validator: `must be of type object: "null"`). So a `null` is a note here, or
  rejected in a list, never "pruned";
- `pattern`: kube-openapi's validator with Go's `regexp` (RE2, `MatchString`), through
  `pytorch_contract.crd_patterns.pattern_matches`, so that `$` is the end of the text (`"1Gi\\n"` fails);
- types, formats, lengths (in characters), `enum`, `minimum`/`maximum`, `maxItems`/`minItems`, `maxProperties`,
  `required`: kube-openapi's `validate` package as `apiextensions-apiserver/pkg/apiserver/validation` configures it;
- list types: `x-kubernetes-list-type` `set` and `map` (with its keys): `structural/listtype` validation.

Pure: an object and a schema in, findings out. `prune` returns the object as the server would store it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

from pytorch_contract.crd_patterns import pattern_matches

__all__ = ["Finding", "Path", "check", "prune", "format_path", "REJECTED", "PRUNED", "NOTE"]

Path = tuple[Union[str, int], ...]

REJECTED = "rejected"
"""The API server refuses the create."""

PRUNED = "pruned"
"""The API server drops the value silently (without `fieldValidation=Strict`; with it, the create is refused)."""

NOTE = "note"
"""Said, not refused: the server stores something other than what was sent and the create succeeds (a `null` it
drops or defaults), or a rule this model could not evaluate."""

_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
_ROOT_META = ("apiVersion", "kind", "metadata")


@dataclass(frozen=True)
class Finding:
    """One thing the API server would refuse or drop.

    Attributes:
        verdict: `REJECTED`, `PRUNED` or `NOTE`.
        path: where in the object.
        detail: what is wrong, in the schema's terms.
    """

    verdict: str
    path: Path
    detail: str


def format_path(path: Path) -> str:
    """A path as text.

    Args:
        path: e.g. `("spec", "trainer", "env", 3, "name")`.

    Returns:
        E.g. `spec.trainer.env[3].name`.
    """
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def check(obj: Mapping[str, Any], schema: Mapping[str, Any]) -> list[Finding]:
    """Every finding of `obj` (a whole custom resource) against its CRD's `openAPIV3Schema`.

    The root's `metadata` is the API server's own ObjectMeta, not the schema's (checked elsewhere).

    Args:
        obj: the object as it would be sent.
        schema: the CRD version's `openAPIV3Schema`.

    Returns:
        Findings in document order.
    """
    return list(_walk(obj, schema, (), root=True))


def _walk(
    value: Any, schema: Mapping[str, Any], path: Path, root: bool = False, item: bool = False
) -> Iterator[Finding]:
    if value is None:
        yield from _null(schema, path, item)
        return
    if schema.get("x-kubernetes-int-or-string"):
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            yield Finding(REJECTED, path, f"must be an integer or a string, got {type(value).__name__}")
        elif isinstance(value, str):
            yield from _string(value, schema, path)
        return
    kind = schema.get("type")
    if kind == "object" or (kind is None and ("properties" in schema or "additionalProperties" in schema)):
        yield from _object(value, schema, path, root)
    elif kind == "array":
        yield from _array(value, schema, path)
    elif kind == "string":
        if not isinstance(value, str):
            yield Finding(REJECTED, path, f"must be a string, got {type(value).__name__} {value!r}")
        else:
            yield from _string(value, schema, path)
    elif kind == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            yield Finding(REJECTED, path, f"must be an integer, got {type(value).__name__} {value!r}")
        else:
            yield from _number(value, schema, path)
    elif kind == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            yield Finding(REJECTED, path, f"must be a number, got {type(value).__name__} {value!r}")
        else:
            yield from _number(value, schema, path)
    elif kind == "boolean":
        if not isinstance(value, bool):
            yield Finding(REJECTED, path, f"must be true or false, got {type(value).__name__} {value!r}")


def _null(schema: Mapping[str, Any], path: Path, item: bool) -> Iterator[Finding]:
    """A `null` as the API server decodes it (see the module's docstring): kept when nullable, else defaulted when
    the schema has a `default`, else dropped from a map (a note: nothing is refused) or refused in a list."""
    if schema.get("nullable"):
        return
    if "default" in schema:
        yield Finding(NOTE, path, f"null is replaced by the CRD's default {schema['default']!r}; the create succeeds")
    elif item:
        kind = schema.get("type") or "a value"
        yield Finding(REJECTED, path, f"null is not of type {kind} (the list's items are not nullable)")
    else:
        yield Finding(
            NOTE,
            path,
            "null is dropped by the API server (the field is not nullable and has no default), as if it were not "
            "set; the create succeeds",
        )


def _dropped_null(value: Any, schema: Any) -> bool:
    """Whether the server drops `value` (`PruneNonNullableNullsWithoutDefaults`) under the property `schema`."""
    return value is None and isinstance(schema, Mapping) and not schema.get("nullable") and "default" not in schema


def _object(value: Any, schema: Mapping[str, Any], path: Path, root: bool) -> Iterator[Finding]:
    if not isinstance(value, Mapping):
        yield Finding(REJECTED, path, f"must be an object, got {type(value).__name__}")
        return
    props: Mapping[str, Any] = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    keep_unknown = bool(schema.get("x-kubernetes-preserve-unknown-fields")) or extra is True
    embedded = bool(schema.get("x-kubernetes-embedded-resource"))
    for name in schema.get("required") or ():
        if name not in value or _dropped_null(value[name], props.get(name)):
            yield Finding(REJECTED, (*path, name), "is required")
    limit = schema.get("maxProperties")
    if limit is not None and len(value) > limit:
        yield Finding(REJECTED, path, f"has {len(value)} entries, more than the {limit} allowed")
    for key, item in value.items():
        if root and key == "metadata":
            continue  # ObjectMeta: the API server's own rules, not the CRD's
        if key in props:
            yield from _walk(item, props[key], (*path, key))
        elif isinstance(extra, Mapping):
            yield from _walk(item, extra, (*path, key))
        elif keep_unknown or ((root or embedded) and key in _ROOT_META):
            continue
        else:
            yield Finding(PRUNED, (*path, key), "is not declared in the CRD's schema")


def _array(value: Any, schema: Mapping[str, Any], path: Path) -> Iterator[Finding]:
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
        yield Finding(REJECTED, path, f"must be a list, got {type(value).__name__}")
        return
    most, least = schema.get("maxItems"), schema.get("minItems")
    if most is not None and len(value) > most:
        yield Finding(REJECTED, path, f"has {len(value)} items, more than the {most} allowed (maxItems)")
    if least is not None and len(value) < least:
        yield Finding(REJECTED, path, f"has {len(value)} items, fewer than the {least} required (minItems)")
    list_type = schema.get("x-kubernetes-list-type")
    if list_type == "map":
        keys = schema.get("x-kubernetes-list-map-keys") or ()
        seen: dict[tuple[Any, ...], int] = {}
        for i, item in enumerate(value):
            if isinstance(item, Mapping):
                key = tuple(item.get(k) for k in keys)
                if key in seen:
                    shown = ", ".join(f"{k}={v!r}" for k, v in zip(keys, key, strict=True))
                    yield Finding(REJECTED, (*path, i), f"duplicates item [{seen[key]}] ({shown}): keys must be unique")
                seen.setdefault(key, i)
    elif list_type == "set":
        for i, item in enumerate(value):
            if item in value[:i]:
                yield Finding(REJECTED, (*path, i), f"duplicates {item!r}: the list is a set")
    items = schema.get("items")
    if isinstance(items, Mapping):
        for i, item in enumerate(value):
            yield from _walk(item, items, (*path, i), item=True)


def _string(value: str, schema: Mapping[str, Any], path: Path) -> Iterator[Finding]:
    most, least = schema.get("maxLength"), schema.get("minLength")
    if most is not None and len(value) > most:  # characters (runes), as the API server counts
        yield Finding(REJECTED, path, f"is {len(value):,} characters, more than the {most:,} allowed (maxLength)")
    if least is not None and len(value) < least:
        yield Finding(REJECTED, path, f"is {len(value)} characters, fewer than the {least} required (minLength)")
    if "enum" in schema and value not in schema["enum"]:
        yield Finding(REJECTED, path, f"{value!r} is not one of {schema['enum']}")
    pattern = schema.get("pattern")
    if pattern:
        try:
            matches = pattern_matches(pattern, value)
        except ValueError as e:  # RE2 syntax Python's re cannot read: said, never refused
            yield Finding(NOTE, path, f"pattern not checked here: {e}")
        else:
            if not matches:
                yield Finding(REJECTED, path, f"{value!r} does not match {pattern}")


def _number(value: Union[int, float], schema: Mapping[str, Any], path: Path) -> Iterator[Finding]:
    bounds = _INT_RANGES.get(schema.get("format", ""))
    if bounds and not bounds[0] <= value <= bounds[1]:
        yield Finding(REJECTED, path, f"{value} does not fit {schema['format']}")
    if "minimum" in schema and value < schema["minimum"]:
        yield Finding(REJECTED, path, f"{value} is less than the minimum {schema['minimum']}")
    if "maximum" in schema and value > schema["maximum"]:
        yield Finding(REJECTED, path, f"{value} is more than the maximum {schema['maximum']}")
    if "enum" in schema and value not in schema["enum"]:
        yield Finding(REJECTED, path, f"{value!r} is not one of {schema['enum']}")


def prune(obj: Any, schema: Mapping[str, Any], root: bool = True) -> Any:
    """`obj` as the API server stores it: undeclared fields dropped, and a non-nullable `null` replaced by its
    schema's `default`, or else dropped from a map (`PruneNonNullableNullsWithoutDefaults`, then `Default`).

    Args:
        obj: the object as sent.
        schema: its schema (the CRD version's `openAPIV3Schema` for a whole object).
        root: whether `obj` is a whole object (its `metadata` is kept as it is).

    Returns:
        A pruned copy.
    """
    if isinstance(obj, Mapping):
        if schema.get("x-kubernetes-int-or-string"):
            return obj
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        keep = bool(schema.get("x-kubernetes-preserve-unknown-fields")) or extra is True
        embedded = bool(schema.get("x-kubernetes-embedded-resource"))
        out = {}
        for key, item in obj.items():
            declared = props.get(key) if key in props else extra if isinstance(extra, Mapping) else None
            if item is None and isinstance(declared, Mapping) and not declared.get("nullable"):
                if "default" in declared:
                    out[key] = copy.deepcopy(declared["default"])
                continue
            if root and key == "metadata":
                out[key] = item
            elif key in props:
                out[key] = prune(item, props[key], root=False)
            elif isinstance(extra, Mapping):
                out[key] = prune(item, extra, root=False)
            elif keep or ((root or embedded) and key in _ROOT_META):
                out[key] = item
        return out
    if isinstance(obj, list):
        items = schema.get("items")
        if not isinstance(items, Mapping):
            return list(obj)
        fill = items.get("default") if not items.get("nullable") else None
        return [copy.deepcopy(fill) if i is None else prune(i, items, root=False) for i in obj]
    return obj
