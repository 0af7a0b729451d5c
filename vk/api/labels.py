"""Label maps as people type them: `k1=v1,k2=v2` on a command line (Liqo's string-map flags,
`--cluster-labels`, `--node-extra-labels`)."""

from __future__ import annotations


class InvalidKeyValues(ValueError):
    """The text is not a comma-separated list of KEY=VALUE."""


def parse_key_values(text: str) -> dict[str, str]:
    """`k=v,k2=v2` -> dict; the first `=` splits, so values may contain `=`."""
    pairs = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidKeyValues(f"{item!r} is not KEY=VALUE")
        pairs[key] = value
    return pairs
