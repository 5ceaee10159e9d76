"""What the fake API server does with fields a custom resource's schema does not declare, as kube-apiserver does.

A walk of the CRD's own `openAPIV3Schema` (read here from the vendored CRD file, not through the backend's admission
model, so that the server is a second, independent reading of the same schema): an object keeps the properties its
schema declares, every value of a map with an `additionalProperties` schema, and everything under
`x-kubernetes-preserve-unknown-fields`; the root and an `x-kubernetes-embedded-resource` keep `apiVersion`, `kind`
and `metadata`, whose fields are ObjectMeta's. Anything else is an unknown field: with `fieldValidation=Strict` the
create is refused (400 BadRequest, `strict decoding error: unknown field "<path>"`), otherwise it is dropped and a
`Warning` header names it (the API server's default, `Warn`, since 1.27).

Then `null`s, as apiextensions-apiserver decodes a custom resource: `PruneNonNullableNullsWithoutDefaults` drops a
`null` map value whose schema is neither `nullable` nor has a `default`, and reports nothing (Strict included: the
create succeeds); `Default` then fills every missing property that has a `default`, and a non-nullable `null` that
has one (`drop_nulls`, `apply_defaults`). A `null` list item without an items `default` stays, and the schema
validation refuses it: 422 Invalid, `... in body must be of type object: "null"` (`null_items`).
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import yaml

from backend_plugin.kinds import DECLARED

CRD_DIR = Path(__file__).resolve().parents[2] / "backend_plugin" / "crds"
CRD_FILES = {d.plural: (d.crd.file, d.version) for d in DECLARED}
"""plural -> (the CRD file the cluster installed, the served version), for every registered kind."""

OBJECT_META_FIELDS = frozenset(
    "name generateName namespace selfLink uid resourceVersion generation creationTimestamp deletionTimestamp "
    "deletionGracePeriodSeconds labels annotations ownerReferences finalizers managedFields".split()
)
"""The fields of metav1.ObjectMeta: a metadata field outside them is unknown."""


@functools.cache
def _vendored_crd(plural: str) -> dict[str, Any]:
    file, _ = CRD_FILES[plural]
    crd: dict[str, Any] = yaml.safe_load((CRD_DIR / file).read_text(encoding="utf-8"))
    return crd


def _vendored(plural: str) -> dict[str, Any]:
    _, version = CRD_FILES[plural]
    (served,) = [v for v in _vendored_crd(plural)["spec"]["versions"] if v["name"] == version]
    return dict(served["schema"]["openAPIV3Schema"])


def vendored_crd(plural: str) -> dict[str, Any]:
    """A copy of the vendored CustomResourceDefinition of `plural` (what a cluster of the newest releases installs).

    Args:
        plural: a registered kind's plural.

    Returns:
        The whole CRD object.
    """
    return copy.deepcopy(_vendored_crd(plural))


def crd_schema(plural: str) -> dict[str, Any]:
    """A copy of the installed CRD's schema for `plural` (tests may change it to model another CRD release).

    Args:
        plural: a registered kind's plural.

    Returns:
        The `openAPIV3Schema`.
    """
    return copy.deepcopy(_vendored(plural))


def prune(obj: dict[str, Any], schema: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """`obj` without its unknown fields, and their paths in the API server's notation (`spec.a[0].b`).

    Args:
        obj: a whole custom resource as sent.
        schema: its CRD's `openAPIV3Schema`.

    Returns:
        (the pruned copy, the unknown fields' paths in document order).
    """
    unknown: list[str] = []
    kept = _value(copy.deepcopy(obj), schema, "", unknown, resource=True)
    return kept, unknown


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _value(value: Any, schema: dict[str, Any], path: str, unknown: list[str], resource: bool = False) -> Any:
    if schema.get("x-kubernetes-int-or-string"):
        return value
    if isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            return [_value(v, items, f"{path}[{i}]", unknown) for i, v in enumerate(value)]
        return value
    if not isinstance(value, dict):
        return value
    resource = resource or bool(schema.get("x-kubernetes-embedded-resource"))
    properties = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields")) or extra is True
    out = {}
    for key, item in value.items():
        where = _join(path, key)
        if resource and key == "metadata" and isinstance(item, dict):
            out[key] = _meta(item, where, unknown)  # ObjectMeta, whatever the schema says of it
        elif key in properties:
            out[key] = _value(item, properties[key], where, unknown)
        elif isinstance(extra, dict):
            out[key] = _value(item, extra, where, unknown)
        elif resource and key in ("apiVersion", "kind"):
            out[key] = item
        elif preserve:
            out[key] = item
        else:
            unknown.append(where)
    return out


def _meta(meta: dict[str, Any], path: str, unknown: list[str]) -> dict[str, Any]:
    out = {}
    for key, item in meta.items():
        if key in OBJECT_META_FIELDS:
            out[key] = item
        else:
            unknown.append(_join(path, key))
    return out


def strict_message(kind: str, version: str, unknown: list[str]) -> str:
    """The 400 BadRequest message kube-apiserver writes for a strict create with unknown fields.

    Args:
        kind: the object's kind.
        version: its apiVersion's version.
        unknown: the unknown fields' paths.

    Returns:
        `<Kind> in version "<v>" cannot be handled as a <Kind>: strict decoding error: unknown field "<path>", ...`.
    """
    fields = ", ".join(f'unknown field "{p}"' for p in unknown)
    return f'{kind} in version "{version}" cannot be handled as a {kind}: strict decoding error: {fields}'


def warning_header(path: str) -> str:
    """The `Warning` header the API server sends for one dropped field (RFC 7234 code 299).

    Args:
        path: the unknown field's path.

    Returns:
        The header's value.
    """
    return '299 - "unknown field \\"' + path + '\\""'


def _props(schema: Any) -> tuple[dict[str, Any], Any]:
    if not isinstance(schema, dict):
        return {}, None
    return schema.get("properties") or {}, schema.get("additionalProperties")


def _field_schema(schema: Any, key: str) -> Any:
    props, extra = _props(schema)
    if key in props:
        return props[key]
    return extra if isinstance(extra, dict) else None


def drop_nulls(value: Any, schema: Any, resource: bool = True) -> None:
    """Drop, in place, every `null` map value whose schema is neither nullable nor has a default
    (`PruneNonNullableNullsWithoutDefaults`); an unknown field's `null` has no schema and is left alone.

    Args:
        value: the decoded object (after `prune`).
        schema: its schema.
        resource: whether `value` is a whole object (its `metadata` is ObjectMeta's business).
    """
    if isinstance(value, dict):
        for key in list(value):
            if resource and key == "metadata":
                continue
            sub = _field_schema(schema, key)
            item = value[key]
            if item is None and isinstance(sub, dict) and not sub.get("nullable") and "default" not in sub:
                del value[key]
            else:
                embedded = bool(isinstance(sub, dict) and sub.get("x-kubernetes-embedded-resource"))
                drop_nulls(item, sub, resource=embedded)
    elif isinstance(value, list):
        items = schema.get("items") if isinstance(schema, dict) else None
        for item in value:
            drop_nulls(item, items, resource=False)


def apply_defaults(value: Any, schema: Any) -> None:
    """Fill, in place, each missing property that has a `default`, and each non-nullable `null` that has one
    (`Default`), at every level.

    Args:
        value: the object (after `drop_nulls`).
        schema: its schema.
    """
    if not isinstance(schema, dict):
        return
    if isinstance(value, dict):
        props, extra = _props(schema)
        for key, sub in props.items():
            if "default" in sub and (key not in value or (value[key] is None and not sub.get("nullable"))):
                value[key] = copy.deepcopy(sub["default"])
        for key, item in value.items():
            if key in props:
                apply_defaults(item, props[key])
            elif isinstance(extra, dict):
                if item is None and not extra.get("nullable") and "default" in extra:
                    value[key] = item = copy.deepcopy(extra["default"])
                apply_defaults(item, extra)
    elif isinstance(value, list):
        items = schema.get("items")
        if not isinstance(items, dict):
            return
        for i, item in enumerate(value):
            if item is None and not items.get("nullable") and "default" in items:
                value[i] = item = copy.deepcopy(items["default"])
            apply_defaults(item, items)


def null_items(value: Any, schema: Any, path: str = "") -> list[tuple[str, str]]:
    """The `null` list items the schema validation refuses (items neither nullable nor defaulted).

    Args:
        value: the object (after `apply_defaults`).
        schema: its schema.
        path: where `value` is.

    Returns:
        (path, the type the items must have) for each.
    """
    out: list[tuple[str, str]] = []
    if not isinstance(schema, dict):
        return out
    if isinstance(value, dict):
        for key, item in value.items():
            sub = _field_schema(schema, key)
            if sub is not None and not (path == "" and key == "metadata"):
                out += null_items(item, sub, _join(path, key))
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                if item is None and not items.get("nullable"):
                    out.append((f"{path}[{i}]", str(items.get("type") or "object")))
                else:
                    out += null_items(item, items, f"{path}[{i}]")
    return out


def invalid_message(kind: str, group: str, name: str, nulls: list[tuple[str, str]]) -> str:
    """The 422 Invalid message kube-apiserver writes for null list items.

    Args:
        kind: the object's kind.
        group: its API group.
        name: its name.
        nulls: `null_items`.

    Returns:
        `<Kind>.<group> "<name>" is invalid: <path>: Invalid value: "null": <path> in body must be of type <t>: "null"`.
    """
    causes = ", ".join(f'{p}: Invalid value: "null": {p} in body must be of type {t}: "null"' for p, t in nulls)
    return f'{kind}.{group} "{name}" is invalid: {causes}'
