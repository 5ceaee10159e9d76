"""Type checks of the parts of a task template the builder reads, before it reads them.

A template dict normally comes from protobuf JSON and is well-typed, but `custom` and `k8sPod.podSpec` are
`google.protobuf.Struct`s (any JSON), and `pytorchjob render` accepts hand-written JSON. Without these checks a wrong
type deep inside surfaces as a KeyError/TypeError in the builder, or worse, as a PyTorchJob the API server rejects.
Every problem is a `TemplateError` naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flyteidl.core import tasks_pb2
from google.protobuf import json_format

__all__ = ["check_task_template", "check_pod_spec"]

_QUANTITY_MAPS = ("limits", "requests")


def check_task_template(template: Mapping[str, Any], error: type[Exception]) -> None:
    """Check that `template` parses as a `flyteidl.core.TaskTemplate` (unknown keys are ignored).

    Args:
        template: the template as protobuf JSON (camelCase keys).
        error: the exception class to raise (the builder's `TemplateError`).

    Raises:
        error: a known field has the wrong type (the message is protobuf's, naming the field).
    """
    _messages_are_dicts(template, tasks_pb2.TaskTemplate.DESCRIPTOR, "", error)
    try:
        json_format.ParseDict(dict(template), tasks_pb2.TaskTemplate(), ignore_unknown_fields=True)
    except (json_format.ParseError, TypeError, ValueError) as e:
        raise error(f"template: not a flyteidl.core.TaskTemplate: {e}") from e


def _messages_are_dicts(value: Mapping[str, Any], descriptor: Any, path: str, error: type[Exception]) -> None:
    """Message-typed fields must be dicts: with unknown fields ignored, ParseDict takes the string "4Gi" for an
    empty message (it iterates over its characters as if they were keys)."""
    for fd in descriptor.fields:
        if fd.json_name not in value or fd.message_type is None:
            continue
        item, where = value[fd.json_name], f"{path}{fd.json_name}"
        if fd.message_type.full_name.startswith("google.protobuf."):
            continue  # Struct, wrappers, Duration, Timestamp: their JSON is not a dict of fields
        is_map = fd.message_type.GetOptions().map_entry
        repeated = _is_repeated(fd) and not is_map
        items = item if repeated else [item]
        if repeated and not isinstance(item, list):
            raise error(f"{where}={item!r}: must be a list")
        for i, element in enumerate(items):
            if not isinstance(element, Mapping):
                raise error(f"{where}={element!r}: must be a dict ({fd.message_type.name})")
            if not is_map:
                _messages_are_dicts(element, fd.message_type, f"{where}{'' if item is element else f'[{i}]'}.", error)


def _is_repeated(fd: Any) -> bool:
    """Whether a field is repeated, on every protobuf we support: `is_repeated` is the API from protobuf 5.29 on
    (7 removed `label`); older releases only have `label`."""
    is_repeated = getattr(fd, "is_repeated", None)
    if is_repeated is not None:
        return bool(is_repeated)
    return fd.label == fd.LABEL_REPEATED  # pragma: no cover - protobuf < 5.29


def check_pod_spec(spec: Any, path: str, error: type[Exception]) -> dict[str, Any]:
    """Check a pod spec against the core/v1 PodSpec model of the `kubernetes` client: types, required fields,
    no unknown fields, no nulls.

    Args:
        spec: the pod spec dict (numbers already turned into ints where whole).
        path: where it is in the template, for messages (``"k8sPod.podSpec"``).
        error: the exception class to raise.

    Returns:
        `spec`, with numeric resource quantities written as strings (``1`` -> ``"1"``), as Kubernetes reads them.

    Raises:
        error: the spec would be rejected by the API server; the message names the field.
    """
    from kubernetes.client import V1PodSpec  # lazy: the builder stays importable and fast to import

    if not isinstance(spec, Mapping):
        raise error(f"{path}={spec!r}: must be a core/v1 PodSpec dict")
    spec = _quantities_as_strings(dict(spec))
    try:
        parsed = V1PodSpec.from_dict(spec)
    except (ValueError, TypeError, AttributeError, KeyError) as e:  # pydantic's ValidationError is a ValueError
        detail = " ".join(str(e).split("For further information")[0].split())
        raise error(f"{path}: not a valid core/v1 PodSpec: {detail}") from e
    _unknown_keys(spec, parsed.to_dict(serialize=True), path, error)
    return spec


def _quantities_as_strings(spec: dict[str, Any]) -> dict[str, Any]:
    for key in ("containers", "initContainers"):
        containers = spec.get(key)
        if not isinstance(containers, list):
            continue
        for container in containers:
            resources = container.get("resources") if isinstance(container, Mapping) else None
            if not isinstance(resources, Mapping):
                continue
            for kind in _QUANTITY_MAPS:
                section = resources.get(kind)
                if isinstance(section, Mapping):
                    resources[kind] = {
                        k: str(v) if isinstance(v, int) and not isinstance(v, bool) else v for k, v in section.items()
                    }
    return spec


def _unknown_keys(given: Any, known: Any, path: str, error: type[Exception]) -> None:
    """Keys of `given` that the parsed model dropped (unknown fields, explicit nulls), and dicts taken for lists."""
    if isinstance(known, list) and not isinstance(given, list):
        raise error(f"{path}={given!r}: must be a list")
    if isinstance(given, Mapping) and isinstance(known, Mapping):
        for key, value in given.items():
            where = f"{path}.{key}"
            if value is None:
                raise error(f"{where}=None: null is not allowed; omit the field")
            if key not in known:
                raise error(f"{where}: unknown field of core/v1 PodSpec (a typo, or a newer Kubernetes field?)")
            _unknown_keys(value, known[key], where, error)
    elif isinstance(given, list) and isinstance(known, list) and len(given) == len(known):
        for i, (a, b) in enumerate(zip(given, known, strict=True)):
            _unknown_keys(a, b, f"{path}[{i}]", error)
