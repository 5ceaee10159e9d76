"""Kubernetes resource quantities ("500m", "4Gi", "1e3"), parsed exactly.

The grammar is the one of `k8s.io/apimachinery/pkg/api/resource.Quantity`::

    quantity        ::= signedNumber suffix          (digits are ASCII 0-9 only)
    signedNumber    ::= [+-] number
    number          ::= digits | digits "." digits | digits "." | "." digits
    suffix          ::= binarySI | decimalExponent | decimalSI
    binarySI        ::= Ki | Mi | Gi | Ti | Pi | Ei
    decimalSI       ::= n | u | m | "" | k | M | G | T | P | E
    decimalExponent ::= ("e" | "E") signedInteger

Values are `decimal.Decimal`, so "0.1" + "0.2" compare exactly and "1Ki" == 1024. Used by the SDK to validate
settings at decoration time and by the backend to compare and render sizes. No Kubernetes client and no flytekit
are needed: both sides import this module (`pytorch_contract`).
"""

from __future__ import annotations

import decimal
import functools
import re
from decimal import Decimal
from typing import Union

__all__ = ["QuantityError", "parse_quantity", "is_quantity", "QuantityLike"]

QuantityLike = Union[str, int, Decimal]
"""What `parse_quantity` accepts: a quantity string, an int, or a Decimal (floats are converted via `repr`)."""

_BINARY = {"Ki": 1, "Mi": 2, "Ti": 4, "Gi": 3, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}

# One regex for the whole grammar; the suffix alternatives are tried longest-first by the regex engine because
# the whole string must match (fullmatch), so "1E" is exa while "1E3" is an exponent.
# Digits are ASCII only: `\d` (and `Decimal`) accept Unicode digits such as "١" or "４", which Kubernetes rejects.
_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))"
    r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)|[eE](?P<exponent>[+-]?[0-9]+)|(?P<decimal>[numkMGTPE]?))"
)

# Quantities beyond this exponent are not representable by Kubernetes (it caps at 2^63-1 milli-units);
# the bound only keeps Decimal arithmetic from being asked for absurd precision on hostile input.
_MAX_EXPONENT = 64

_EXAMPLES = "e.g. '500m', '2', '4Gi', '512Mi', '1.5', '1e3'"


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity."""


def parse_quantity(value: QuantityLike) -> Decimal:
    """Parse a Kubernetes quantity into its exact numeric value.

    Args:
        value: a quantity string such as ``"500m"``, ``"4Gi"``, ``"1e3"``, ``"-1"``; an ``int``; a ``Decimal``;
            or a ``float`` (converted through ``repr``, as flytekit's ``Resources(cpu=0.5)`` does with ``str``).

    Returns:
        The value in base units (cores, bytes, ...) as a ``Decimal``: ``parse_quantity("500m") == Decimal("0.5")``,
        ``parse_quantity("1Ki") == 1024``. Signs are kept (``"-1"`` is a valid quantity); callers that need a
        non-negative amount check the sign themselves.

    Raises:
        QuantityError: `value` is not a quantity (wrong type, empty, unknown suffix, malformed number).
    """
    if isinstance(value, bool) or not isinstance(value, (str, int, float, Decimal)):
        raise QuantityError(f"{value!r} is not a Kubernetes quantity ({type(value).__name__}); use {_EXAMPLES}")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise QuantityError(f"{value!r} is not a Kubernetes quantity (not finite); use {_EXAMPLES}")
        return value
    parsed = _parse_text(repr(value) if isinstance(value, float) else value)
    if isinstance(parsed, str):
        raise QuantityError(f"{value!r} is not a Kubernetes quantity{parsed}; use {_EXAMPLES}")
    return parsed


@functools.lru_cache(maxsize=4096)
def _parse_text(text: str) -> Union[Decimal, str]:
    """The value of a quantity string, or what is wrong with it ("" for a malformed one).

    Cached: `Decimal`s are immutable, and jobs repeat the same few quantities.
    """
    match = _QUANTITY.fullmatch(text)
    if match is None:
        return ""
    number = Decimal(match["number"])
    with decimal.localcontext() as ctx:
        ctx.prec = 80  # exact for every representable quantity
        if match["binary"] is not None:
            return number * (Decimal(1024) ** _BINARY[match["binary"]])
        if match["exponent"] is not None:
            exponent = int(match["exponent"])
            if abs(exponent) > _MAX_EXPONENT:
                return " (exponent out of range)"
            return number.scaleb(exponent)
        return number.scaleb(_DECIMAL[match["decimal"]])


def is_quantity(value: object) -> bool:
    """Whether `value` is a Kubernetes quantity (see `parse_quantity` for what is accepted).

    Args:
        value: anything.

    Returns:
        True when `parse_quantity(value)` succeeds.
    """
    try:
        parse_quantity(value)  # type: ignore[arg-type]
    except QuantityError:
        return False
    return True
