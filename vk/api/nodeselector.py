"""core/v1 NodeSelectors as plain JSON: parsed from the selector strings people type, checked,
matched against labels, ANDed together and printed back.

NamespaceOffloading's clusterSelector picks the providers a namespace is offloaded to, and the pod
webhook ANDs that selector into each offloaded pod's required node affinity: both use these rules,
and so does the virtual kubelet when it admits a pod to its node as a kubelet does.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from vk.api.jsondata import json_copy
from vk.api.labels import is_label_value, is_qualified_name
from vk.api.offloading import NodeSelectorOperator as Op

JSON = dict[str, Any]

NODE_NAME_FIELD = "metadata.name"
"""The only field a matchFields requirement may name."""

_SYNTAX = (
    "write KEY in (V1,V2), KEY notin (V1,V2), KEY=V, KEY!=V, KEY>N, KEY<N, KEY or !KEY, "
    "separated by commas"
)
_KEY_RULE = (
    "write NAME or PREFIX/NAME, NAME at most 63 letters, digits, '-', '_' or '.' that start and "
    "end with a letter or digit, PREFIX a lowercase DNS subdomain of at most 253 characters "
    "(e.g. topology.kubernetes.io/region)"
)
_VALUE_RULE = (
    "a label value is empty or at most 63 letters, digits, '-', '_' or '.' that start and end "
    "with a letter or digit"
)

_INTEGER = re.compile(r"[+-]?[0-9]+")

# What kubectl's lexer reads as one word: anything up to a space or an operator character.
_WORD = r"[^\s!=<>(),]"
_SET_REQUIREMENT = re.compile(rf"(?P<key>{_WORD}+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)")
_COMPARISON = re.compile(rf"(?P<key>{_WORD}+)\s*(?P<op>==|!=|=|<|>)\s*(?P<value>{_WORD}*)")
_EXISTENCE = re.compile(rf"(?P<bang>!?)\s*(?P<key>{_WORD}+)")
_OPERATOR_OF = {
    "in": Op.IN,
    "notin": Op.NOT_IN,
    "=": Op.IN,
    "==": Op.IN,
    "!=": Op.NOT_IN,
    ">": Op.GT,
    "<": Op.LT,
}


class InvalidSelector(ValueError):
    """The text is not a label selector; the message says how to write one."""


def parse_selector_term(text: str) -> JSON:
    """One label selector (`kubectl get -l`, liqoctl's `--selector`) as one NodeSelectorTerm:
    its comma-separated requirements are ANDed, in the order written."""
    if not text.strip():
        raise InvalidSelector(f"the selector is empty: {_SYNTAX}")
    return {
        "matchExpressions": [
            _parse_requirement(part.strip(), text) for part in _split_requirements(text)
        ]
    }


def node_selector_from_flags(selectors: Sequence[str]) -> JSON | None:
    """liqoctl's repeated `--selector`: one term per flag, ORed; no flag, no selector."""
    if not selectors:
        return None
    return {"nodeSelectorTerms": [parse_selector_term(text) for text in selectors]}


def selector_problems(selector: Mapping[str, Any] | None) -> list[str]:
    """What the API server would reject in this NodeSelector (as a pod's node affinity), one
    sentence per problem, terms numbered from 1. No terms is fine: Liqo reads it as "all"."""
    if selector is None:
        return []
    terms = selector.get("nodeSelectorTerms") or []
    if not isinstance(terms, list):
        return [f"nodeSelectorTerms must be a list of terms, not {terms!r}"]
    problems = []
    for number, term in enumerate(terms, start=1):
        if not isinstance(term, Mapping):
            problems.append(f"term {number}: {term!r} is not a term with matchExpressions")
            continue
        if not term.get("matchExpressions") and not term.get("matchFields"):
            # Kubernetes' rule: it selects nothing. Merged into a pod's node affinity with the
            # strategy's own requirement, it would select every virtual node instead.
            problems.append(
                f"term {number} has no requirements, and so selects no cluster: remove it, or "
                "give it matchExpressions"
            )
            continue
        for field, check in (
            ("matchExpressions", _expression_problems),
            ("matchFields", _field_problems),
        ):
            requirements = term.get(field) or []
            if not isinstance(requirements, list):
                problems.append(f"term {number}: {field} must be a list, not {requirements!r}")
                continue
            problems += [f"term {number}: {problem}" for r in requirements for problem in check(r)]
    return problems


def selector_matches(
    selector: Mapping[str, Any] | None, labels: Mapping[str, str], name: str | None = None
) -> bool:
    """Whether an object with these labels (and this name, for matchFields) is selected.

    No selector or no terms selects everything (Liqo's rule for a clusterSelector); a term with
    no requirements selects nothing (Kubernetes' rule); a requirement that selector_problems
    would report selects nothing either.
    """
    terms = _terms(selector)
    if not terms:
        return True
    return any(_term_matches(term, labels, name) for term in terms)


def pod_node_affinity_matches(
    pod_spec: Mapping[str, Any], labels: Mapping[str, str], node_name: str
) -> bool:
    """Whether a node of these labels and name is one the pod's `nodeSelector` and required
    node affinity allow (component-helpers' `GetRequiredNodeAffinity(pod).Match`, which the
    scheduler's NodeAffinity filter and the kubelet's admission both use): every nodeSelector
    label equal, and some term of the affinity matched. The API server refuses a required node
    affinity without terms, so the "no terms selects everything" of `selector_matches` never
    applies to a pod's."""
    node_selector = pod_spec.get("nodeSelector") or {}
    if any(labels.get(key) != value for key, value in node_selector.items()):
        return False
    node_affinity = (pod_spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    return selector_matches(required, labels, node_name)


def merge_node_selectors(
    first: Mapping[str, Any] | None, second: Mapping[str, Any] | None
) -> JSON | None:
    """The AND of two NodeSelectors: every term of one ANDed with every term of the other.

    A selector that is None or has no terms selects everything, so the other is kept as it is.
    """
    if first is None or not _terms(first):
        kept = second if second is not None else first
    elif second is None or not _terms(second):
        kept = first
    else:
        pairs = itertools.product(_terms(first), _terms(second))
        return {"nodeSelectorTerms": [_merge_terms(one, other) for one, other in pairs]}
    return None if kept is None else json_copy(dict(kept))


def format_selector(selector: Mapping[str, Any] | None) -> str:
    """The selector as people write it, for messages: `region in (eu,us), !staging OR tier=gold`."""
    return " OR ".join(_format_term(term) for term in _terms(selector))


def _split_requirements(text: str) -> Iterator[str]:
    # Commas inside parentheses separate the values of one `in`/`notin`, not requirements.
    depth, start = 0, 0
    for index, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(depth - 1, 0)
        elif char == "," and depth == 0:
            yield text[start:index]
            start = index + 1
    yield text[start:]


def _parse_requirement(text: str, selector: str) -> JSON:
    if not text:
        raise InvalidSelector(f"{selector!r} has an empty requirement between commas: {_SYNTAX}")
    if match := _SET_REQUIREMENT.fullmatch(text):
        listed = match["values"].strip()
        if not listed:
            raise InvalidSelector(f"{text!r} lists no values: write KEY {match['op']} (V1,V2)")
        values = [value.strip() for value in listed.split(",")]
        return _requirement(text, match["key"], _OPERATOR_OF[match["op"]], values)
    if match := _COMPARISON.fullmatch(text):
        return _requirement(text, match["key"], _OPERATOR_OF[match["op"]], [match["value"]])
    if match := _EXISTENCE.fullmatch(text):
        operator = Op.DOES_NOT_EXIST if match["bang"] else Op.EXISTS
        return _requirement(text, match["key"], operator, [])
    raise InvalidSelector(f"{text!r} is not a selector requirement: {_SYNTAX}")


def _requirement(text: str, key: str, operator: Op, values: list[str]) -> JSON:
    if problem := _label_key_problem(key):
        raise InvalidSelector(f"{text!r}: {problem}")
    for value in values:
        if operator in (Op.GT, Op.LT):
            if _as_integer(value) is None:
                raise InvalidSelector(f"{text!r}: {value!r} is not an integer: write KEY>N, KEY<N")
        elif not is_label_value(value):
            raise InvalidSelector(f"{text!r}: {value!r} is not a valid label value: {_VALUE_RULE}")
    requirement: JSON = {"key": key, "operator": operator.value}
    if values:
        requirement["values"] = list(dict.fromkeys(values))  # `in (a,a)` is the set {a}
    return requirement


def _label_key_problem(key: object) -> str | None:
    if is_qualified_name(key):
        return None
    return f"{key!r} is not a valid label key: {_KEY_RULE}"


def _as_integer(text: object) -> int | None:
    # Gt and Lt compare int64s, as Kubernetes does; anything else compares as no match.
    if not isinstance(text, str) or not _INTEGER.fullmatch(text):
        return None
    number = int(text)
    return number if -(2**63) <= number < 2**63 else None


def _expression_problems(expression: Any) -> list[str]:
    if not isinstance(expression, Mapping):
        return [f"{expression!r} is not a requirement with key, operator and values"]
    key, operator = expression.get("key"), expression.get("operator")
    values = expression.get("values") or []
    problems = [problem] if (problem := _label_key_problem(key)) else []
    if not isinstance(values, list) or not all(isinstance(value, str) for value in values):
        return [*problems, f"key {key!r}: values must be a list of strings, not {values!r}"]
    if operator not in tuple(Op):
        allowed = ", ".join(Op)
        problems.append(f"key {key!r}: operator {operator!r} is not one of {allowed}")
    elif operator in (Op.IN, Op.NOT_IN) and not values:
        problems.append(f"key {key!r}: {operator} needs at least one value")
    elif operator in (Op.EXISTS, Op.DOES_NOT_EXIST) and values:
        problems.append(f"key {key!r}: {operator} takes no values, but has {values}")
    elif operator in (Op.GT, Op.LT) and (len(values) != 1 or _as_integer(values[0]) is None):
        problems.append(f"key {key!r}: {operator} needs exactly one integer value, not {values}")
    return problems


def _field_problems(field: Any) -> list[str]:
    if not isinstance(field, Mapping):
        return [f"{field!r} is not a field requirement with key, operator and values"]
    key, operator, values = field.get("key"), field.get("operator"), field.get("values")
    if key != NODE_NAME_FIELD:
        return [f"field {key!r}: matchFields only supports {NODE_NAME_FIELD!r}"]
    problems = []
    if operator not in (Op.IN, Op.NOT_IN):
        problems.append(f"field {key!r}: operator {operator!r} is not In or NotIn")
    if not isinstance(values, list) or len(values) != 1 or not isinstance(values[0], str):
        problems.append(f"field {key!r}: needs exactly one value, not {values!r}")
    return problems


def _terms(selector: Mapping[str, Any] | None) -> list[Any]:
    return list(selector.get("nodeSelectorTerms") or []) if selector is not None else []


def _term_matches(term: Mapping[str, Any], labels: Mapping[str, str], name: str | None) -> bool:
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False
    return all(_expression_matches(expression, labels) for expression in expressions) and all(
        _field_matches(field, name) for field in fields
    )


def _expression_matches(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, operator = expression.get("key"), expression.get("operator")
    values = expression.get("values") or []
    value = labels.get(key) if isinstance(key, str) else None
    match operator:
        case Op.IN:
            return value is not None and value in values
        case Op.NOT_IN:
            return value is None or value not in values  # a missing label is not in any set
        case Op.EXISTS:
            return value is not None
        case Op.DOES_NOT_EXIST:
            return value is None
        case Op.GT | Op.LT if len(values) == 1:
            have, bound = _as_integer(value), _as_integer(values[0])
            if have is None or bound is None:
                return False
            return have > bound if operator == Op.GT else have < bound
        case _:
            return False


def _field_matches(field: Mapping[str, Any], name: str | None) -> bool:
    if field.get("key") != NODE_NAME_FIELD:
        return False
    values = field.get("values") or []
    match field.get("operator"):
        case Op.IN:
            return name is not None and name in values
        case Op.NOT_IN:
            return name is None or name not in values
        case _:
            return False


def _merge_terms(one: Mapping[str, Any], other: Mapping[str, Any]) -> JSON:
    # An empty term selects nothing, and so does its AND with anything: concatenating would
    # turn it into the other term and widen the selection.
    if _is_empty_term(one) or _is_empty_term(other):
        return {}
    merged: JSON = {}
    for field in ("matchExpressions", "matchFields"):
        requirements = [*(one.get(field) or []), *(other.get(field) or [])]
        if requirements:
            merged[field] = json_copy(requirements)
    return merged


def _is_empty_term(term: Mapping[str, Any]) -> bool:
    return not term.get("matchExpressions") and not term.get("matchFields")


def _format_term(term: Mapping[str, Any]) -> str:
    requirements = [*(term.get("matchExpressions") or []), *(term.get("matchFields") or [])]
    return ", ".join(_format_requirement(r) for r in requirements) or "(empty term)"


def _format_requirement(requirement: Mapping[str, Any]) -> str:
    key, operator = requirement.get("key", ""), requirement.get("operator")
    values = [str(value) for value in requirement.get("values") or []]
    listed = ",".join(values)
    match operator, len(values):
        case Op.IN, 1:
            return f"{key}={listed}"
        case Op.NOT_IN, 1:
            return f"{key}!={listed}"
        case Op.IN, _:
            return f"{key} in ({listed})"
        case Op.NOT_IN, _:
            return f"{key} notin ({listed})"
        case Op.EXISTS, 0:
            return f"{key}"
        case Op.DOES_NOT_EXIST, 0:
            return f"!{key}"
        case Op.GT, 1:
            return f"{key}>{listed}"
        case Op.LT, 1:
            return f"{key}<{listed}"
        case _:
            return f"{key} {operator} ({listed})"  # invalid, but shown as it was written
