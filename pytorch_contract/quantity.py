"""Kubernetes resource quantities ("500m", "4Gi", "1e3"), parsed exactly as the cluster reads them.

A quantity in a job passes two readers: the CRD's OpenAPI pattern (RE2, so `$` is the end of the text), when the API
server admits the job, and `k8s.io/apimachinery/pkg/api/resource.ParseQuantity`, when the operator decodes it and
the API server validates the pods. A value counts as a quantity here when both accept it::

    quantity        ::= signedNumber suffix          (digits are ASCII 0-9 only; no spaces, no newline)
    signedNumber    ::= [+-] number
    number          ::= digits | digits "." digits | digits "." | "." digits
    suffix          ::= binarySI | decimalExponent | decimalSI
    binarySI        ::= Ki | Mi | Gi | Ti | Pi | Ei
    decimalSI       ::= n | u | m | "" | k | M | G | T | P | E
    decimalExponent ::= ("e" | "E") [+-] digits       (ParseQuantity reads a 64-bit integer; the pattern would take
                                                        "1e1.5", which ParseQuantity refuses)

The value is the one ParseQuantity computes: exact, except that a non-zero value with more than nine decimals is
rounded away from zero to a whole nano-unit, an exponent is taken modulo 2^32 (Go's int32), and a binary-suffixed
value is capped at 2^63-1. Values are `decimal.Decimal`, so "0.1" + "0.2" compare exactly and "1Ki" == 1024. Used
by the SDK to validate settings at decoration time and by the backend to compare and render sizes. No Kubernetes
client and no flytekit are needed: both sides import this module (`pytorch_contract`).
"""

from __future__ import annotations

import decimal
import functools
import re
from decimal import Decimal
from typing import Union

__all__ = [
    "QuantityError",
    "parse_quantity",
    "is_quantity",
    "is_whole_quantity",
    "quantity_problem",
    "QuantityLike",
    "MAX_WHOLE_QUANTITY",
]

QuantityLike = Union[str, int, float, Decimal]
"""What `parse_quantity` accepts: a quantity string, an int, a float (read through `repr`), or a Decimal."""

_BINARY = {"Ki": 1, "Mi": 2, "Ti": 4, "Gi": 3, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}

# One regex for the whole grammar, matched against the whole string (fullmatch), so "1E" is exa while "1E3" is an
# exponent. Digits are ASCII only: `\d` (and `Decimal`) accept Unicode digits such as "١" or "４", which Kubernetes
# rejects.
_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))"
    r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)|[eE](?P<exponent>[+-]?[0-9]+)|(?P<decimal>[numkMGTPE]?))"
)

_INT64_MAX = 2**63 - 1
_NANO = Decimal("1e-9")

MAX_WHOLE_QUANTITY = _INT64_MAX // 1000
"""The largest whole amount whose `MilliValue()` (what Kubernetes checks an integer resource with) fits an int64."""

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
        # Exact arithmetic for any value the grammar can spell (no division happens here).
        ctx.prec, ctx.Emax, ctx.Emin = decimal.MAX_PREC, decimal.MAX_EMAX, decimal.MIN_EMIN
        if match["binary"] is not None:
            value = number * (Decimal(1024) ** _BINARY[match["binary"]])
        elif match["exponent"] is not None:
            exponent = int(match["exponent"])
            if not -(2**63) <= exponent <= _INT64_MAX:  # strconv.ParseInt(..., 64) fails: ErrSuffix
                return " (its exponent is not a 64-bit integer)"
            wrapped = (exponent + 2**31) % 2**32 - 2**31  # ParseQuantity keeps it as an int32
            value = number.scaleb(wrapped)
        else:
            value = number.scaleb(_DECIMAL[match["decimal"]])
        if value and value.as_tuple().exponent < -9:  # type: ignore[operator]
            value = value.quantize(_NANO, rounding=decimal.ROUND_UP)  # "you asked for some, you get some"
        if match["binary"] is not None and abs(value) > _INT64_MAX:
            value = Decimal(_INT64_MAX).copy_sign(value)
        return value


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


def is_whole_quantity(value: object) -> bool:
    """Whether `value` is a quantity Kubernetes takes for an integer resource (GPUs and other extended resources):
    `ValidateResourceQuantityValue` requires ``MilliValue() % 1000 == 0``, so "2", "2.0", "2000m", "1e1" and "+2"
    are whole, "1.5", "500m" and "1.0001" are not.

    Args:
        value: anything.

    Returns:
        True for a quantity whose value, rounded up to a thousandth, is a whole number between 0 and
        `MAX_WHOLE_QUANTITY` (beyond it `MilliValue()` overflows).
    """
    try:
        amount = parse_quantity(value)  # type: ignore[arg-type]
    except QuantityError:
        return False
    if abs(amount) > MAX_WHOLE_QUANTITY:
        return False
    milli = (amount * 1000).to_integral_value(rounding=decimal.ROUND_CEILING)
    return milli % 1000 == 0


def quantity_problem(value: object, *, negative_ok: bool = False, whole: bool = False) -> str | None:
    """What the cluster refuses in `value` as a resource amount, or None.

    Args:
        value: the amount (a string, int, float or Decimal).
        negative_ok: whether a negative amount is allowed (container resources are not:
            `ValidateNonnegativeQuantity`).
        whole: whether the resource counts whole units (GPUs and other extended resources).

    Returns:
        A short description of the problem (for a message), or None when the CRD pattern, `ParseQuantity` and the
        pod's resource validation all accept it.
    """
    try:
        amount = parse_quantity(value)  # type: ignore[arg-type]
    except QuantityError:
        return f"not a Kubernetes quantity; use {_EXAMPLES}"
    if amount < 0 and not negative_ok:
        return "negative; Kubernetes takes only amounts >= 0"
    if whole and not is_whole_quantity(value):
        if abs(amount) > MAX_WHOLE_QUANTITY:
            return f"above {MAX_WHOLE_QUANTITY}, more units than Kubernetes counts"
        return "not a whole number of units (Kubernetes requires MilliValue() % 1000 == 0 for this resource)"
    return None
