"""resource.Quantity as numbers: `500m` is 0.5, `8Gi` is 8 * 2^30, `1e3` is 1000.

Exact (Decimal), so sums of requests against a Quota never drift."""

from __future__ import annotations

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


class InvalidQuantity(ValueError):
    """Not a Kubernetes quantity."""


def parse_quantity(value: int | str) -> Decimal:
    if isinstance(value, int) and not isinstance(value, bool):
        return Decimal(value)
    if not isinstance(value, str) or not QUANTITY_RE.match(value):
        raise InvalidQuantity(f"{value!r} is not a Kubernetes quantity (e.g. 4, 500m, 8Gi)")
    for suffix, factor in _BINARY.items():
        if value.endswith(suffix):
            return Decimal(value[: -len(suffix)]) * factor
    if value[-1:] in _DECIMAL and not value[-1:].isdigit():
        return Decimal(value[:-1]) * _DECIMAL[value[-1]]
    try:
        return Decimal(value)  # plain or with an exponent: 1e3, 12E-1
    except InvalidOperation as error:
        raise InvalidQuantity(f"{value!r} is not a Kubernetes quantity") from error
