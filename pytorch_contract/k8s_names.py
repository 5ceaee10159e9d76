"""Kubernetes name grammars, written once for the SDK's decoration-time checks and the backend's template checks.

Each pattern is anchored with `^` and `\\Z` (not `$`, which also matches before a final newline and so let
values such as ``"flyte\\n"`` through), so `pattern.match(s)` and `pattern.fullmatch(s)` agree. Character classes
are spelled out as ASCII: Kubernetes rejects the Unicode letters and digits that `\\w` and `\\d` accept.
Lengths are part of each pattern, as in `k8s.io/apimachinery/pkg/util/validation`.
"""

from __future__ import annotations

import re

__all__ = [
    "DNS1123_LABEL",
    "DNS1123_SUBDOMAIN",
    "DNS1035_LABEL",
    "LABEL_VALUE",
    "QUALIFIED_NAME",
    "EXTENDED_RESOURCE_NAME",
    "is_label_value",
    "NVIDIA_GPU",
]

NVIDIA_GPU = "nvidia.com/gpu"
"""The extended resource NVIDIA's device plugin advertises, and the one flytekit writes for `Resources(gpu=...)`."""

_LABEL = r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"  # one DNS-1123 label, at most 63 characters
_PART = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"  # one part of a subdomain (Kubernetes bounds only the whole)
_SUBDOMAIN = rf"(?=[-a-z0-9.]{{1,253}}(?:/|\Z)){_PART}(?:\.{_PART})*"  # dot-separated parts, at most 253
_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"  # the name part of a qualified name, at most 63

DNS1123_LABEL = re.compile(rf"^{_LABEL}\Z")
"""A DNS-1123 label: namespaces, container names, pod and Service name parts (lower case, digits, '-'; <= 63)."""

DNS1035_LABEL = re.compile(r"^[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?\Z")
"""A DNS-1035 label: a DNS-1123 label that starts with a letter (job names; Services are named after them)."""

DNS1123_SUBDOMAIN = re.compile(rf"^{_SUBDOMAIN}\Z")
"""A DNS-1123 subdomain: PriorityClass, ServiceAccount and most object names (dot-separated labels; <= 253)."""

LABEL_VALUE = re.compile(rf"^{_NAME}\Z")
"""A non-empty label value (letters, digits, '-', '_', '.'; alphanumeric at both ends; <= 63). Kubernetes also
accepts the empty value: see `is_label_value`."""

QUALIFIED_NAME = re.compile(rf"^(?:{_SUBDOMAIN}/)?{_NAME}\Z")
"""A qualified name: label and annotation keys, resource names (`cpu`, `nvidia.com/gpu`): an optional
DNS-subdomain prefix and `/`, then a name of at most 63 characters."""

EXTENDED_RESOURCE_NAME = re.compile(rf"^{_SUBDOMAIN}/{_NAME}\Z")
"""An extended resource name: a qualified name whose prefix is mandatory (`nvidia.com/gpu`, `amd.com/gpu`,
`nvidia.com/mig-1g.5gb`), as device plugins advertise them."""


def is_label_value(value: object, *, allow_empty: bool = True) -> bool:
    """Whether `value` is a Kubernetes label value.

    Args:
        value: anything.
        allow_empty: whether the empty string counts (Kubernetes accepts it on objects; a queue name needs text).

    Returns:
        True for a string of at most 63 characters of [A-Za-z0-9-_.], alphanumeric at both ends.
    """
    if not isinstance(value, str):
        return False
    return (allow_empty and value == "") or LABEL_VALUE.match(value) is not None
