"""An API answer's shape, checked where it comes in, once: the JSON types of what the status readers and the log links
read, so that past this point a `KeyError`, `TypeError` or `AttributeError` is a bug of ours and surfaces as one.

Types only, never values: an object where the schema says object, a list where it says array, a string, an integer,
a number, a boolean. The API server writes exactly these types (a custom resource is validated against its CRD's
schema, a pod or an event is serialized from its Go type), and a field's type never changes within an API version,
so a cluster that runs another release of a controller than the vendored CRD passes (a field the vendored CRD does not
declare is not looked at, and `null` is taken as absent, as every reader does). What fails names the field and what
it holds: a proxy's answer, a corrupted object, or an API server that is not one.

- a job: its `metadata` (`OBJECT_META`) and, against the kind's vendored CRD (`admission.crds.schema_for`), its
  `spec` and `status`;
- a pod, an event: the core/v1 fields the status readers and the log links read (`POD`, `EVENT`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, Optional

from backend_plugin.admission.crds import schema_for

__all__ = ["job_problem", "pod_problem", "event_problem", "item_problem", "problem", "OBJECT_META", "POD", "EVENT"]

_STR: dict[str, Any] = {"type": "string"}
_INT: dict[str, Any] = {"type": "integer"}
_BOOL: dict[str, Any] = {"type": "boolean"}
_STR_MAP: dict[str, Any] = {"type": "object", "additionalProperties": _STR}


def _object(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


def _array(items: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": items}


OBJECT_META = _object(
    name=_STR,
    namespace=_STR,
    uid=_STR,
    resourceVersion=_STR,
    creationTimestamp=_STR,
    deletionTimestamp=_STR,
    labels=_STR_MAP,
    annotations=_STR_MAP,
)
"""meta/v1 ObjectMeta: what the connector and the readers read of it."""

_STATE = _object(
    waiting=_object(reason=_STR, message=_STR),
    running=_object(startedAt=_STR),
    terminated=_object(exitCode=_INT, signal=_INT, reason=_STR, message=_STR, startedAt=_STR, finishedAt=_STR),
)
_CONTAINER_STATUS = _object(name=_STR, ready=_BOOL, restartCount=_INT, state=_STATE, lastState=_STATE)
_CONDITION = _object(type=_STR, status=_STR, reason=_STR, message=_STR, lastTransitionTime=_STR)

POD = _object(
    metadata=OBJECT_META,
    spec=_object(nodeName=_STR, containers=_array(_object(name=_STR, image=_STR))),
    status=_object(
        phase=_STR,
        reason=_STR,
        message=_STR,
        startTime=_STR,
        conditions=_array(_CONDITION),
        containerStatuses=_array(_CONTAINER_STATUS),
        initContainerStatuses=_array(_CONTAINER_STATUS),
    ),
)
"""core/v1 Pod: the fields the status readers and the log links read, with their types."""

EVENT = _object(
    metadata=OBJECT_META,
    type=_STR,
    reason=_STR,
    message=_STR,
    note=_STR,
    count=_INT,
    eventTime=_STR,
    firstTimestamp=_STR,
    lastTimestamp=_STR,
    involvedObject=_object(kind=_STR, name=_STR),
)
"""core/v1 Event: the fields the status readers read, with their types."""

_JSON_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "object": ((dict,), "an object"),
    "array": ((list,), "a list"),
    "string": ((str,), "a string"),
    "integer": ((int,), "an integer"),
    "number": ((int, float), "a number"),
    "boolean": ((bool,), "a boolean"),
}


def problem(value: Any, schema: Mapping[str, Any], path: str) -> Optional[str]:
    """The first value in `value` whose JSON type is not the one `schema` declares for it.

    Args:
        value: a decoded JSON value.
        schema: an OpenAPI v3 schema (a CRD's, or one of this module's); an undeclared field is not looked at.
        path: where `value` is, for the message ("" at the top of an object).

    Returns:
        `<path> is <what it is>, not <the type>`, or None.
    """
    if value is None or schema.get("x-kubernetes-preserve-unknown-fields"):
        return None
    if schema.get("x-kubernetes-int-or-string"):
        ok = isinstance(value, (int, str)) and not isinstance(value, bool)
        return None if ok else f"{path or 'the answer'} is {_what(value)}, not an integer or a string"
    wanted = _JSON_TYPES.get(str(schema.get("type")))
    if wanted is not None:
        types, name = wanted
        if not isinstance(value, types) or isinstance(value, bool) and bool not in types:
            return f"{path or 'the answer'} is {_what(value)}, not {name}"
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        more = schema.get("additionalProperties")
        for key, item in value.items():
            sub = properties.get(key) if key in properties else more if isinstance(more, Mapping) else None
            if sub is not None:
                found = problem(item, sub, f"{path}.{key}" if path else str(key))
                if found:
                    return found
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(value):
            found = problem(item, schema["items"], f"{path}[{i}]")
            if found:
                return found
    return None


def _what(value: Any) -> str:
    if value is None:
        return "null"
    for types, name in _JSON_TYPES.values():
        if isinstance(value, types) and (not isinstance(value, bool) or bool in types):
            return name
    return f"a {type(value).__name__}"


@functools.cache
def _job_schema(api_version: str, kind: str) -> dict[str, Any]:
    schema = schema_for(api_version, kind)
    properties = dict(schema.get("properties") or {})
    properties["metadata"] = OBJECT_META
    return {**schema, "properties": properties}


def job_problem(job: Any) -> Optional[str]:
    """Whether a job, as the API or the watch answered it, has a shape no API server writes.

    Args:
        job: the decoded answer (its `apiVersion` and `kind` name its CRD).

    Returns:
        What is wrong, naming the field; None for a job of the shape its CRD declares.
    """
    if not isinstance(job, dict):
        return f"the answer is {_what(job)}, not an object"
    if not isinstance(job.get("metadata"), dict):
        return "metadata is missing or not an object"
    try:
        schema = _job_schema(str(job.get("apiVersion")), str(job.get("kind")))
    except KeyError:
        return f"apiVersion {job.get('apiVersion')!r} and kind {job.get('kind')!r} name no registered job kind"
    return problem(job, schema, "")


def item_problem(schema: Mapping[str, Any], what: str) -> Callable[[Any], Optional[str]]:
    """The check of a list's items against one of this module's schemas (`POD`, `EVENT`).

    Args:
        schema: the fields read, with their types.
        what: what an item is, for the message (`pod`, `event`).

    Returns:
        A check: what is wrong with an item, naming the field, or None for one of the shape core/v1 writes.
    """

    def check(item: Any) -> Optional[str]:
        return problem(item, schema, "") if isinstance(item, dict) else f"the {what} is {_what(item)}, not an object"

    check.__doc__ = f"""Whether a {what} of a list has a shape no API server writes.

        Args:
            item: an item of a {what} list.

        Returns:
            What is wrong, naming the field; None for a {what} of the shape core/v1 writes.
        """
    return check


pod_problem = item_problem(POD, "pod")
"""Whether a pod of a list has a shape no API server writes (the fields `POD` names)."""

event_problem = item_problem(EVENT, "event")
"""Whether an event of a list has a shape no API server writes (the fields `EVENT` names)."""
