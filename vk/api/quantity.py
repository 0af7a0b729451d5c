"""resource.Quantity as numbers: `500m` is 0.5, `8Gi` is 8 * 2^30, `1e3` is 1000.

Exact (Decimal), so sums of requests against a Quota never drift."""

from __future__ import annotations

import functools
import re
from decimal import Decimal, InvalidOperation

from vk.api.meta import QUANTITY_RE

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}


# Counted in bytes: written with binary suffixes where they divide (8Gi), as people do.
_BYTES = re.compile(r"^(memory|storage|ephemeral-storage|hugepages-.*)$")


class InvalidQuantity(ValueError):
    """Not a Kubernetes quantity."""


# The largest quantity Kubernetes keeps (an int64), and the finest (a nano). A CRD's quantity
# pattern admits `1e30000000`, whose digits would take minutes to write out: a number is
# checked against these bounds before any arithmetic is done with it.
MAX_QUANTITY = Decimal(2**63 - 1)
_MAX_DIGITS_BEFORE_POINT = 20
_MIN_EXPONENT = -30


def _number(text: str, whole: str) -> Decimal:
    """The number `text` (the quantity `whole` without its suffix), within bounds."""
    try:
        number = Decimal(text)
    except InvalidOperation as error:
        raise InvalidQuantity(f"{whole!r} is not a Kubernetes quantity") from error
    if not number.is_finite() or (
        number != 0
        and (number.adjusted() >= _MAX_DIGITS_BEFORE_POINT or number.adjusted() < _MIN_EXPONENT)
    ):
        raise InvalidQuantity(
            f"{whole[:40]!r} is out of range: Kubernetes quantities are at most 2^63-1"
        )
    return number


def parse_quantity(value: int | str) -> Decimal:
    """The quantity's value; InvalidQuantity if it is none, or beyond what Kubernetes keeps
    (2^63-1)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return _within_range(Decimal(value), str(value))
    if not isinstance(value, str):
        raise InvalidQuantity(f"{value!r} is not a Kubernetes quantity (e.g. 4, 500m, 8Gi)")
    return _parse_text(value)


# The same few quantities come again and again (every replica's requests, every reservation
# of a Quota's ledger, read at each admission): each text is parsed once. A Decimal is
# immutable; an invalid text raises every time (functools caches no exception).
@functools.lru_cache(maxsize=4096)
def _parse_text(value: str) -> Decimal:
    if not QUANTITY_RE.match(value):
        raise InvalidQuantity(f"{value!r} is not a Kubernetes quantity (e.g. 4, 500m, 8Gi)")
    if binary := next((s for s in _BINARY if value.endswith(s)), None):
        number = _number(value[: -len(binary)], value) * _BINARY[binary]
    elif value[-1:] in _DECIMAL and not value[-1:].isdigit():
        number = _number(value[:-1], value) * _DECIMAL[value[-1]]
    else:
        number = _number(value, value)  # plain or with an exponent: 1e3, 12E-1
    return _within_range(number, value)


def _within_range(number: Decimal, text: str) -> Decimal:
    if abs(number) > MAX_QUANTITY:
        raise InvalidQuantity(
            f"{text[:40]!r} is out of range: Kubernetes quantities are at most 2^63-1"
        )
    return number


def format_quantity(resource: str, value: Decimal) -> str:
    """A quantity of `resource` as people write it: `500m` or `4` CPUs, `110` pods, `8Gi` or
    `1G` of memory (bytes get the largest suffix that divides them, binary first)."""
    if value.is_finite() and value != 0 and value.adjusted() >= 2 * _MAX_DIGITS_BEFORE_POINT:
        return f"{value:.6e}"  # a sum beyond any quantity: never written out digit by digit
    if value != value.to_integral_value():
        for suffix in ("m", "u", "n"):
            scaled = value / _DECIMAL[suffix]
            if scaled == scaled.to_integral_value():
                return f"{int(scaled)}{suffix}"
        return str(value)
    whole = int(value)
    if whole == 0 or not _BYTES.match(resource):
        return str(whole)
    for suffix, factor in sorted(_BINARY.items(), key=lambda item: -item[1]):
        if whole % factor == 0:
            return f"{whole // factor}{suffix}"
    for suffix in ("E", "P", "T", "G", "M", "k"):
        factor = int(_DECIMAL[suffix])
        if whole % factor == 0:
            return f"{whole // factor}{suffix}"
    return str(whole)
