"""Quantities parse as Kubernetes parses them."""

from __future__ import annotations

from decimal import Decimal

import pytest

from vk.api.quantity import InvalidQuantity, parse_quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("4", Decimal(4)),
        (4, Decimal(4)),
        ("500m", Decimal("0.5")),
        ("8Gi", Decimal(8 * 2**30)),
        ("1.5Ki", Decimal(1536)),
        ("20G", Decimal(20 * 10**9)),
        ("1e3", Decimal(1000)),
        ("12E-1", Decimal("1.2")),
        ("100u", Decimal("0.0001")),
        ("0", Decimal(0)),
    ],
)
def test_quantities_parse_as_kubernetes_does(text: str | int, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "four", "4 Gi", "1Gb", "--1", True])
def test_what_is_not_a_quantity_says_so(text: str) -> None:
    with pytest.raises(InvalidQuantity, match="not a Kubernetes quantity"):
        parse_quantity(text)
