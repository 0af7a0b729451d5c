"""Labels: their syntax, Kubernetes' own (apimachinery's IsQualifiedName and
IsValidLabelValue; resource names are qualified names too), the one check vk makes wherever a
label comes from; and label maps as people type them: `k1=v1,k2=v2` on a command line (Liqo's
string-map flags, `--cluster-labels`, `--node-extra-labels`)."""

from __future__ import annotations

import re

# A key is NAME or PREFIX/NAME: NAME at most 63 characters, PREFIX a DNS subdomain of at most
# 253; a value is empty or a NAME.
_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def is_qualified_name(key: object) -> bool:
    """Whether `key` is a label key, or a resource name: NAME or PREFIX/NAME."""
    if not isinstance(key, str):
        return False
    prefix, slash, name = key.rpartition("/")
    return (
        len(name) <= 63
        and _NAME.fullmatch(name) is not None
        and (not slash or (len(prefix) <= 253 and _DNS_SUBDOMAIN.fullmatch(prefix) is not None))
    )


def is_label_value(value: object) -> bool:
    return isinstance(value, str) and (
        value == "" or (len(value) <= 63 and _NAME.fullmatch(value) is not None)
    )


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
