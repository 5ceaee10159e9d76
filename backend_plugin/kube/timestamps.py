"""Kubernetes timestamps: parsing what the API server writes (RFC 3339) and writing it back.

Shared by `status` (ages of jobs and pods) and `logs` (pod start and finish times in log links).
"""

from __future__ import annotations

import datetime
from typing import Any

__all__ = ["parse_time", "rfc3339", "EPOCH"]

EPOCH = datetime.datetime.min.replace(tzinfo=datetime.timezone.utc)
"""The earliest aware datetime: the sort key of a missing timestamp that must come first."""


def parse_time(value: Any) -> datetime.datetime | None:
    """Parse a Kubernetes RFC 3339 timestamp such as ``"2025-01-01T00:00:00Z"``.

    Args:
        value: the field's value (any type; the API server writes strings).

    Returns:
        An aware datetime (UTC when the text has no offset), or None for missing or malformed values.
    """
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.timezone.utc)


def rfc3339(t: datetime.datetime) -> str:
    """Format a time as Kubernetes does: UTC, whole seconds, ``Z`` suffix.

    Args:
        t: an aware datetime.

    Returns:
        e.g. ``"2025-01-01T00:00:00Z"``.
    """
    return t.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
