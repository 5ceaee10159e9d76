"""Kubernetes metadata rules for labels and annotations, as the API server applies them to every object and to every
pod a controller creates from an embedded pod template (`k8s.io/apimachinery` `ValidateLabels`,
`ValidateAnnotations`).

A job whose own metadata breaks them is refused at create; a job whose *pod template* breaks them is admitted (the
CRDs do not validate embedded metadata) and then every pod create fails, so the job never starts. Both the SDK (at
decoration) and the backend (before create, and in `pytorchjob render --check`) call these functions. Each takes
`where`, the caller's own name for the setting (`Worker.pod_template labels`, `labels of the backend config`), and
returns one message per problem that names it, the value, what is allowed and what to do. No message means
Kubernetes accepts the mapping.
"""

from __future__ import annotations

from collections.abc import Mapping

from pytorch_contract.k8s_names import QUALIFIED_NAME, is_label_value

__all__ = [
    "LABEL_VALUE_MAX_LENGTH",
    "QUALIFIED_NAME_MAX_LENGTH",
    "ANNOTATIONS_TOTAL_MAX_BYTES",
    "annotations_size",
    "label_key_problem",
    "label_problems",
    "annotation_problems",
]

LABEL_VALUE_MAX_LENGTH = 63
"""`validation.LabelValueMaxLength`: a label value (and a node selector value) has at most 63 characters."""

QUALIFIED_NAME_MAX_LENGTH = 63
"""The name part of a label or annotation key (after an optional `<DNS subdomain>/` prefix of <= 253)."""

ANNOTATIONS_TOTAL_MAX_BYTES = 256 * 1024
"""`TotalAnnotationSizeLimitB`: the keys and values of one object's annotations together, in bytes."""

_KEY_RULE = (
    "a key is an optional DNS-subdomain prefix and '/', then a name of at most 63 letters, digits, '-', '_' or '.' "
    "that starts and ends with a letter or digit (e.g. 'team' or 'example.com/team')"
)
_VALUE_RULE = (
    "a label value is empty or at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or "
    "digit (e.g. 'ml-team'); put longer or free text in an annotation"
)


def _show(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 5]}...{text[-1]} ({len(str(value))} characters)"


def label_key_problem(key: object) -> str | None:
    """What is wrong with `key` as a label or annotation key, or None when Kubernetes accepts it.

    Args:
        key: the candidate key.

    Returns:
        The rule it breaks, for a message, or None.
    """
    if isinstance(key, str) and QUALIFIED_NAME.match(key):
        return None
    return _KEY_RULE


def label_problems(labels: Mapping[str, object], where: str) -> list[str]:
    """Problems of a label mapping (an object's, a pod template's, or a `nodeSelector`: the same rules).

    Args:
        labels: key -> value.
        where: the caller's name for the setting, e.g. `Worker.pod_template labels`.

    Returns:
        One message per bad key or value; empty when Kubernetes accepts them all.
    """
    out = []
    for key, value in labels.items():
        problem = label_key_problem(key)
        if problem is not None:
            out.append(f"{where}: key {_show(key)} is not a valid label key: {problem}")
        if not is_label_value(value):
            out.append(f"{where}: {key}={_show(value)} is not a valid label value: {_VALUE_RULE}")
    return out


def annotations_size(annotations: Mapping[str, object]) -> int:
    """The bytes Kubernetes counts against `ANNOTATIONS_TOTAL_MAX_BYTES`: every key and value, UTF-8 encoded.

    Args:
        annotations: key -> value.

    Returns:
        The total size in bytes.
    """
    return sum(len(str(k).encode()) + len(str(v).encode()) for k, v in annotations.items())


def annotation_problems(annotations: Mapping[str, object], where: str) -> list[str]:
    """Problems of an annotation mapping: bad keys (checked lower-cased, as Kubernetes does) and the 256 KiB total.

    Args:
        annotations: key -> value.
        where: the caller's name for the setting, e.g. `pod_template annotations`.

    Returns:
        One message per bad key, and one when the total is over the limit; empty when Kubernetes accepts them.
    """
    out = []
    for key in annotations:
        problem = label_key_problem(key.lower() if isinstance(key, str) else key)
        if problem is not None:
            out.append(f"{where}: key {_show(key)} is not a valid annotation key: {problem}")
    total = annotations_size(annotations)
    if total > ANNOTATIONS_TOTAL_MAX_BYTES:
        biggest = max(annotations, key=lambda k: len(str(annotations[k]).encode()))
        out.append(
            f"{where}: the annotations total {total:,} bytes, over Kubernetes' limit of "
            f"{ANNOTATIONS_TOTAL_MAX_BYTES:,} bytes (256 KiB) per object (the largest is {biggest!r}); keep large "
            "data out of annotations: mount a ConfigMap or Secret, or pass a path to a file in object storage"
        )
    return out
