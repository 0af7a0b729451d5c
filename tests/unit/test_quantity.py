"""Quantities parse as Kubernetes parses them, and are written as people write them."""

from __future__ import annotations

from decimal import Decimal

import pytest

from vk.api.quantity import InvalidQuantity, format_quantity, parse_quantity


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
    for _ in range(2):  # each time: the texts parsed once are only the valid ones
        with pytest.raises(InvalidQuantity, match="not a Kubernetes quantity"):
            parse_quantity(text)


@pytest.mark.parametrize(
    ("resource", "value", "shown"),
    [
        ("cpu", Decimal(4), "4"),
        ("cpu", Decimal("0.25"), "250m"),
        ("cpu", Decimal("3.5"), "3500m"),
        ("cpu", Decimal("0.0001"), "100u"),
        ("cpu", Decimal(2048), "2048"),  # counts get no suffix
        ("pods", Decimal(110), "110"),
        ("nvidia.com/gpu", Decimal(2000), "2000"),
        ("memory", Decimal(8 * 2**30), "8Gi"),
        ("memory", Decimal(1536 * 2**20), "1536Mi"),
        ("memory", Decimal(10**9), "1G"),  # binary where it divides, else decimal
        ("memory", Decimal(100), "100"),
        ("memory", Decimal(0), "0"),
        ("ephemeral-storage", Decimal(20 * 2**30), "20Gi"),
        ("hugepages-2Mi", Decimal(4 * 2**20), "4Mi"),
    ],
)
def test_quantities_are_written_as_people_write_them(
    resource: str, value: Decimal, shown: str
) -> None:
    assert format_quantity(resource, value) == shown
    assert parse_quantity(shown) == value


@pytest.mark.parametrize(
    "value",
    ["1e30000000", "9223372036854775808", "8Ei", "10000000000000000k", "-1e30000000", "1e-40"],
)
def test_a_quantity_beyond_what_kubernetes_keeps_is_refused_at_once(value: str) -> None:
    with pytest.raises(InvalidQuantity, match="out of range"):
        parse_quantity(value)


def test_the_largest_quantity_parses_and_a_huge_sum_formats_at_once() -> None:
    assert parse_quantity("9223372036854775807") == Decimal(2**63 - 1)
    assert parse_quantity("7Ei") == Decimal(7 * 2**60)
    # Written out digit by digit, this would take minutes.
    assert format_quantity("cpu", Decimal("1e30000000")) == "1.000000e+30000000"
