"""Pod templates: a role's own pod template (`pytorch.<role>.pod_template`) parsed, checked and merged over the task's
pod, and every pod spec checked against the core/v1 `PodSpec` model.

The check uses the `kubernetes` client's model classes (`V1PodSpec.from_dict`), imported inside `check_pod_spec`
only, so importing this module (or the reader that calls it) loads no Kubernetes client until a pod template is
read. Pure otherwise: a problem is a `TemplateError` naming the field, the value and what is allowed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from backend_plugin.errors import TemplateError
from backend_plugin.frozen import freeze, thaw
from backend_plugin.spec import PodTemplateSpec
from pytorch_contract import template_keys as keys

__all__ = ["read_role_pod", "merge_role_pod", "check_pod_spec", "whole_numbers_as_ints"]

_QUANTITY_MAPS = ("limits", "requests")


def _err(path: str, value: Any, rule: str) -> TemplateError:
    return TemplateError(f"{path}={value!r}: {rule}")


def read_role_pod(text: str, key: str) -> dict[str, Any]:
    """Parse and check the JSON of a `pytorch.<role>.pod_template` config value.

    Args:
        text: the config value.
        key: its key, for messages.

    Returns:
        `{"labels", "annotations", "primary", "spec"}`: the pod's metadata, its primary container's name, and a
        checked core/v1 PodSpec (`containers` may be empty).

    Raises:
        TemplateError: not JSON, unknown keys, a bad pod spec, or a primary container with a command or args.
    """
    where = f"config[{key!r}]"
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise _err(where, text[:80], f"is not JSON ({e})") from None
    allowed = {"metadata", "primaryContainerName", "podSpec"}
    if not isinstance(doc, dict) or set(doc) - allowed:
        extra = sorted(set(doc) - allowed) if isinstance(doc, dict) else type(doc).__name__
        raise _err(where, extra, f"must be a JSON object with keys {sorted(allowed)}")
    meta = doc.get("metadata") or {}
    if not isinstance(meta, dict) or set(meta) - {"labels", "annotations"}:
        raise _err(f"{where}.metadata", meta, "must be {'labels': {...}, 'annotations': {...}}")
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    for name, mapping in (("labels", labels), ("annotations", annotations)):
        if not isinstance(mapping, dict) or not all(isinstance(v, str) for v in mapping.values()):
            raise _err(f"{where}.metadata.{name}", mapping, "must map strings to strings")
    primary = doc.get("primaryContainerName") or "primary"
    spec = doc.get("podSpec") or {}
    if isinstance(spec, dict) and "containers" not in spec:
        spec = {**spec, "containers": []}
    spec = check_pod_spec(whole_numbers_as_ints(spec), f"{where}.podSpec")
    for i, container in enumerate(spec["containers"]):
        if container.get("name") == primary:
            for field_name in ("command", "args"):
                if container.get(field_name):
                    raise _err(
                        f"{where}.podSpec.containers[{i}].{field_name}",
                        container[field_name],
                        "the task's own command (pyflyte-execute) runs in every replica; remove it",
                    )
        elif not container.get("image"):
            raise _err(f"{where}.podSpec.containers[{i}].image", container.get("image"), "a sidecar needs an image")
        elif container.get("name") == keys.PRIMARY_CONTAINER:
            raise _err(
                f"{where}.podSpec.containers[{i}].name",
                keys.PRIMARY_CONTAINER,
                f"is the primary container's name; name the primary {primary!r} or rename the sidecar",
            )
    return {"labels": labels, "annotations": annotations, "primary": primary, "spec": spec}


_BY_NAME = {"containers": "name", "initContainers": "name", "volumes": "name", "ephemeralContainers": "name"}
"""PodSpec lists whose items a role's pod template replaces by this key (others are appended to)."""


def merge_role_pod(base: PodTemplateSpec, role: Mapping[str, Any]) -> PodTemplateSpec:
    """A role's pod template merged over the task's pod; the role's values win.

    Labels and annotations: the role's keys win. PodSpec fields: a list of named items (containers, init
    containers, volumes) replaces an item of the same name and appends the others; other lists (tolerations,
    image pull secrets, ...) are appended to, without duplicates; a mapping (nodeSelector, securityContext,
    affinity, ...) gets the role's keys; a scalar is the role's. The role's primary container (named by
    `primaryContainerName`) merges into the task's `pytorch` container the same way: `env` by name,
    `volumeMounts` by mount path, `resources` per request and limit.

    Args:
        base: the task's pod (`TaskSpec.pod`).
        role: `read_role_pod`'s result.

    Returns:
        The merged pod, as frozen as `base`.
    """
    spec = thaw(base.spec)
    for key, value in role["spec"].items():
        if key == "containers":
            primary = next(c for c in spec["containers"] if c.get("name") == keys.PRIMARY_CONTAINER)
            for container in value:
                if container.get("name") == role["primary"]:
                    _merge_container(primary, container)
                else:
                    _merge_named(spec, key, [container])
        elif key in _BY_NAME:
            _merge_named(spec, key, value)
        elif isinstance(value, list):
            items = spec.setdefault(key, [])
            items.extend(v for v in value if v not in items)
        elif isinstance(value, dict) and isinstance(spec.get(key), dict):
            spec[key] = {**spec[key], **value}
        else:
            spec[key] = value
    return PodTemplateSpec(
        labels=freeze({**base.labels, **role["labels"]}),
        annotations=freeze({**base.annotations, **role["annotations"]}),
        spec=freeze(spec),
    )


def _merge_named(spec: dict[str, Any], key: str, items: list[dict[str, Any]]) -> None:
    current = spec.setdefault(key, [])
    for item in items:
        index = next((i for i, c in enumerate(current) if c.get(_BY_NAME[key]) == item.get(_BY_NAME[key])), None)
        if index is None:
            current.append(item)
        else:
            current[index] = item


def _merge_container(primary: dict[str, Any], role: Mapping[str, Any]) -> None:
    for key, value in role.items():
        if key == "name":
            continue
        if key in ("env", "envFrom", "volumeMounts", "ports", "volumeDevices"):
            by = {"env": "name", "volumeMounts": "mountPath", "volumeDevices": "devicePath"}.get(key)
            current = primary.setdefault(key, [])
            for item in value:
                index = (
                    None if by is None else next((i for i, c in enumerate(current) if c.get(by) == item.get(by)), None)
                )
                if index is None:
                    if item not in current:
                        current.append(item)
                else:
                    current[index] = item
        elif key == "resources" and isinstance(primary.get("resources"), dict):
            merged = dict(primary["resources"])
            for kind, section in value.items():
                merged[kind] = {**(merged.get(kind) or {}), **section} if isinstance(section, dict) else section
            primary["resources"] = merged
        elif isinstance(value, dict) and isinstance(primary.get(key), dict):
            primary[key] = {**primary[key], **value}
        else:
            primary[key] = value


def whole_numbers_as_ints(value: Any) -> Any:
    """JSON-like data with whole floats as ints: Struct JSON turns every number into a float, and the API server
    rejects 1000.0 for an int field.

    Args:
        value: JSON-like data.

    Returns:
        A copy with every whole float an int (other values as they are).
    """
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: whole_numbers_as_ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [whole_numbers_as_ints(v) for v in value]
    return value


def check_pod_spec(spec: Any, path: str) -> dict[str, Any]:
    """Check a pod spec against the core/v1 PodSpec model of the `kubernetes` client: types, required fields,
    no unknown fields. A `null` field is left out, as the API server reads it (JSON `null` leaves a Go field unset,
    and a CRD's structural schema drops a non-nullable `null`, `PruneNonNullableNullsWithoutDefaults`): the pod is
    the same as without it. A `null` list item is refused: decoded, it is an empty object the API server rejects
    (an empty toleration, a container without a name), and a CRD's schema refuses it outright.

    Args:
        spec: the pod spec dict (numbers already turned into ints where whole).
        path: where it is in the template, for messages (``"k8sPod.podSpec"``).

    Returns:
        `spec`, with numeric resource quantities written as strings (``1`` -> ``"1"``), as Kubernetes reads them.

    Raises:
        TemplateError: the spec would be rejected by the API server; the message names the field.
    """
    from kubernetes.client import V1PodSpec  # lazy: importing the reader loads no kubernetes client

    if not isinstance(spec, Mapping):
        raise TemplateError(f"{path}={spec!r}: must be a core/v1 PodSpec dict")
    spec = _quantities_as_strings(_without_nulls(spec, path))
    try:
        parsed = V1PodSpec.from_dict(spec)
    except (ValueError, TypeError, AttributeError, KeyError) as e:  # pydantic's ValidationError is a ValueError
        detail = " ".join(str(e).split("For further information")[0].split())
        raise TemplateError(f"{path}: not a valid core/v1 PodSpec: {detail}") from e
    if parsed is None:  # from_dict(None) only; spec is a dict here
        raise TemplateError(f"{path}={spec!r}: must be a core/v1 PodSpec dict")
    _unknown_keys(spec, parsed.to_dict(serialize=True), path)
    return spec


def _without_nulls(value: Any, path: str) -> Any:
    """A copy of `value` without its `null` map values; a `null` list item is a TemplateError naming its place."""
    if isinstance(value, Mapping):
        return {k: _without_nulls(v, f"{path}.{k}") for k, v in value.items() if v is not None}
    if isinstance(value, list):
        for i, item in enumerate(value):
            if item is None:
                raise TemplateError(
                    f"{path}[{i}]=None: a null list item is not a value Kubernetes accepts (it reads as an empty "
                    "object); remove it"
                )
        return [_without_nulls(item, f"{path}[{i}]") for i, item in enumerate(value)]
    return value


def _quantities_as_strings(spec: dict[str, Any]) -> dict[str, Any]:
    for key in ("containers", "initContainers"):
        containers = spec.get(key)
        if not isinstance(containers, list):
            continue
        for container in containers:
            resources = container.get("resources") if isinstance(container, Mapping) else None
            if not isinstance(resources, dict):
                continue
            for kind in _QUANTITY_MAPS:
                section = resources.get(kind)
                if isinstance(section, Mapping):
                    resources[kind] = {
                        k: str(v) if isinstance(v, int) and not isinstance(v, bool) else v for k, v in section.items()
                    }
    return spec


def _unknown_keys(given: Any, known: Any, path: str) -> None:
    """Keys of `given` that the parsed model dropped (unknown fields, explicit nulls), and dicts taken for lists."""
    if isinstance(known, list) and not isinstance(given, list):
        raise TemplateError(f"{path}={given!r}: must be a list")
    if isinstance(given, Mapping) and isinstance(known, Mapping):
        for key, value in given.items():
            where = f"{path}.{key}"
            if value is None:
                raise TemplateError(f"{where}=None: null is not allowed; omit the field")
            if key not in known:
                raise TemplateError(f"{where}: unknown field of core/v1 PodSpec (a typo, or a newer Kubernetes field?)")
            _unknown_keys(value, known[key], where)
    elif isinstance(given, list) and isinstance(known, list) and len(given) == len(known):
        for i, (a, b) in enumerate(zip(given, known, strict=True)):
            _unknown_keys(a, b, f"{path}[{i}]")
