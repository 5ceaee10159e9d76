"""What the fake API server does with fields a custom resource's schema does not declare, as kube-apiserver does.

A walk of the CRD's own `openAPIV3Schema` (read here from the vendored CRD file, not through the backend's admission
model, so that the server is a second, independent reading of the same schema): an object keeps the properties its
schema declares, every value of a map with an `additionalProperties` schema, and everything under
`x-kubernetes-preserve-unknown-fields`; the root and an `x-kubernetes-embedded-resource` keep `apiVersion`, `kind`
and `metadata`, whose fields are ObjectMeta's. Anything else is an unknown field: with `fieldValidation=Strict` the
create is refused (400 BadRequest, `strict decoding error: unknown field "<path>"`), otherwise it is dropped and a
`Warning` header names it (the API server's default, `Warn`, since 1.27).
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import yaml

from backend_plugin.targets import DECLARED

CRD_DIR = Path(__file__).resolve().parents[2] / "backend_plugin" / "crds"
CRD_FILES = {d.plural: (d.crd.file, d.version) for d in DECLARED}
"""plural -> (the CRD file the cluster installed, the served version), for every registered kind."""

OBJECT_META_FIELDS = frozenset(
    "name generateName namespace selfLink uid resourceVersion generation creationTimestamp deletionTimestamp "
    "deletionGracePeriodSeconds labels annotations ownerReferences finalizers managedFields".split()
)
"""The fields of metav1.ObjectMeta: a metadata field outside them is unknown."""


@functools.cache
def _vendored(plural: str) -> dict[str, Any]:
    file, version = CRD_FILES[plural]
    crd = yaml.safe_load((CRD_DIR / file).read_text(encoding="utf-8"))
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return dict(served["schema"]["openAPIV3Schema"])


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
