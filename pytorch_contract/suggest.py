"""The "did you mean ...?" hint for a misspelled name, shared by the SDK's keyword errors and the backend config's
key errors, so both sides suggest with the same rule."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["closest", "did_you_mean"]

CUTOFF = 0.6
"""`difflib`'s similarity ratio a candidate needs (its own default): close enough to catch a dropped, doubled or
swapped letter or a missing suffix ('workers_cont', 'gpu_resource'), far enough to suggest nothing for a different
word."""


def closest(name: str, valid: Iterable[str], n: int = 3) -> list[str]:
    """The valid names nearest to `name`, best first.

    Args:
        name: the misspelled name.
        valid: every accepted name.
        n: the most names to return.

    Returns:
        Up to `n` names whose similarity to `name` is at least `CUTOFF`; empty when none is.
    """
    return difflib.get_close_matches(name, sorted(valid), n=n, cutoff=CUTOFF)


def did_you_mean(name: str, valid: Iterable[str]) -> str:
    """The end of an unknown-name error: the nearest names, or every valid one when none is near.

    Args:
        name: the misspelled name.
        valid: every accepted name.

    Returns:
        ``"did you mean 'a' or 'b'?"``, or ``"valid options: a, b, c"``.
    """
    names = sorted(valid)
    close = closest(name, names)
    if close:
        return f"did you mean {' or '.join(repr(c) for c in close)}?"
    return f"valid options: {', '.join(names)}"
