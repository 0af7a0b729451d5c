"""Node selectors: kubectl's selector syntax in, core/v1 semantics for checking, matching and
ANDing, and the same syntax out for messages."""

from __future__ import annotations

import copy
import itertools
import re
from typing import Any

import pytest

from vk.api.nodeselector import (
    JSON,
    InvalidSelector,
    format_selector,
    merge_node_selectors,
    node_selector_from_flags,
    parse_selector_term,
    pod_node_affinity_matches,
    selector_matches,
    selector_problems,
)


def expr(key: str, operator: str, *values: str) -> JSON:
    requirement: JSON = {"key": key, "operator": operator}
    if values:
        requirement["values"] = list(values)
    return requirement


def node_name(operator: str, *values: str) -> JSON:
    return {"key": "metadata.name", "operator": operator, "values": list(values)}


def selector(*terms: Any) -> JSON:
    return {"nodeSelectorTerms": list(terms)}


def term(*expressions: Any, fields: list[JSON] | None = None) -> JSON:
    built: JSON = {}
    if expressions:
        built["matchExpressions"] = list(expressions)
    if fields:
        built["matchFields"] = fields
    return built


@pytest.mark.parametrize(
    ("text", "expressions"),
    [
        ("region=europe", [expr("region", "In", "europe")]),
        ("region==europe", [expr("region", "In", "europe")]),
        ("region!=europe", [expr("region", "NotIn", "europe")]),
        ("region=", [expr("region", "In", "")]),
        ("region in (europe,us-west)", [expr("region", "In", "europe", "us-west")]),
        ("region notin (europe)", [expr("region", "NotIn", "europe")]),
        ("region in(europe , us-west )", [expr("region", "In", "europe", "us-west")]),
        ("region in (europe,europe)", [expr("region", "In", "europe")]),
        ("region in (europe,)", [expr("region", "In", "europe", "")]),
        ("staging", [expr("staging", "Exists")]),
        ("!staging", [expr("staging", "DoesNotExist")]),
        ("! staging", [expr("staging", "DoesNotExist")]),
        ("cpus>4", [expr("cpus", "Gt", "4")]),
        ("cpus < -1", [expr("cpus", "Lt", "-1")]),
        (
            "region in (europe,us-west), !staging",
            [expr("region", "In", "europe", "us-west"), expr("staging", "DoesNotExist")],
        ),
        (
            "  topology.kubernetes.io/region = europe ,liqo.io/type  ",
            [
                expr("topology.kubernetes.io/region", "In", "europe"),
                expr("liqo.io/type", "Exists"),
            ],
        ),
        (
            "a notin (x, y),b=1,!c,d",
            [
                expr("a", "NotIn", "x", "y"),
                expr("b", "In", "1"),
                expr("c", "DoesNotExist"),
                expr("d", "Exists"),
            ],
        ),
        ("in=notin", [expr("in", "In", "notin")]),
        ("A_b.c-9=Z_y.x-0", [expr("A_b.c-9", "In", "Z_y.x-0")]),
        (f"{'a' * 253}/{'b' * 63}={'c' * 63}", [expr(f"{'a' * 253}/{'b' * 63}", "In", "c" * 63)]),
    ],
)
def test_a_selector_string_is_one_term_of_anded_expressions(
    text: str, expressions: list[JSON]
) -> None:
    parsed = parse_selector_term(text)

    assert parsed == {"matchExpressions": expressions}
    assert selector_problems(selector(parsed)) == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "the selector is empty: write KEY in"),
        ("   ", "the selector is empty"),
        ("region in europe", "'region in europe' is not a selector requirement: write KEY in"),
        ("region in (europe", "'region in (europe' is not a selector requirement"),
        ("region in europe)", "is not a selector requirement"),
        ("region in ()", "'region in ()' lists no values: write KEY in"),
        ("region notin ( )", "lists no values: write KEY notin"),
        ("a=1,,b", "'a=1,,b' has an empty requirement between commas"),
        ("a=1,", "empty requirement"),
        ("a=b=c", "'a=b=c' is not a selector requirement"),
        ("!a=b", "'!a=b' is not a selector requirement"),
        ("a b", "'a b' is not a selector requirement"),
        ("region IN (a)", "is not a selector requirement"),
        ("-region=a", "'-region' is not a valid label key: write NAME or PREFIX/NAME"),
        ("Example.com/region", "'Example.com/region' is not a valid label key"),
        ("a/b/c", "'a/b/c' is not a valid label key"),
        ("/region", "'/region' is not a valid label key"),
        ("liqo.io/", "'liqo.io/' is not a valid label key"),
        ("b" * 64, "is not a valid label key"),
        (f"{'a' * 254}/b", "is not a valid label key"),
        ("region=-eu", "'-eu' is not a valid label value"),
        ("region in (eu,us west)", "'us west' is not a valid label value"),
        (f"region={'v' * 64}", "is not a valid label value"),
        ("cpus>four", "'four' is not an integer: write KEY>N"),
        ("cpus<", "'' is not an integer"),
        ("cpus>1.5", "'1.5' is not an integer"),
    ],
)
def test_what_is_not_a_selector_says_how_to_write_one(text: str, message: str) -> None:
    with pytest.raises(InvalidSelector, match=re.escape(message)):
        parse_selector_term(text)


def test_each_selector_flag_is_one_term_and_the_terms_are_ored() -> None:
    assert node_selector_from_flags(["region=europe, !staging", "tier=gold"]) == selector(
        term(expr("region", "In", "europe"), expr("staging", "DoesNotExist")),
        term(expr("tier", "In", "gold")),
    )


def test_no_selector_flag_is_no_selector() -> None:
    assert node_selector_from_flags([]) is None


def test_a_bad_flag_among_good_ones_is_refused() -> None:
    with pytest.raises(InvalidSelector, match="'tier gold' is not a selector requirement"):
        node_selector_from_flags(["region=europe", "tier gold"])


@pytest.mark.parametrize(
    "valid",
    [
        None,
        {},
        selector(),
        selector(
            term(
                expr("region", "In", "europe", "us-west"),
                expr("zone", "NotIn", "a"),
                expr("staging", "DoesNotExist"),
                expr("liqo.io/type", "Exists"),
                expr("cpus", "Gt", "4"),
                expr("cpus", "Lt", "-64"),
            ),
            term(fields=[node_name("In", "milan")]),
            term(fields=[node_name("NotIn", "naples")]),
        ),
        selector(term({"key": "staging", "operator": "Exists", "values": []})),
    ],
)
def test_a_valid_selector_has_no_problems(valid: JSON | None) -> None:
    assert selector_problems(valid) == []


@pytest.mark.parametrize(
    ("invalid", "problems"),
    [
        (
            selector(term(expr("region", "in", "europe"))),
            [
                "term 1: key 'region': operator 'in' is not one of "
                "In, NotIn, Exists, DoesNotExist, Gt, Lt"
            ],
        ),
        (
            selector(term(expr("region", "In", "europe")), term(expr("region", "In"))),
            ["term 2: key 'region': In needs at least one value"],
        ),
        (
            selector(term(expr("region", "NotIn"))),
            ["term 1: key 'region': NotIn needs at least one value"],
        ),
        (
            selector(term(expr("staging", "Exists", "yes"))),
            ["term 1: key 'staging': Exists takes no values, but has ['yes']"],
        ),
        (
            selector(term(expr("staging", "DoesNotExist", "yes"))),
            ["term 1: key 'staging': DoesNotExist takes no values, but has ['yes']"],
        ),
        (
            selector(term(expr("cpus", "Gt"))),
            ["term 1: key 'cpus': Gt needs exactly one integer value, not []"],
        ),
        (
            selector(term(expr("cpus", "Lt", "1", "2"))),
            ["term 1: key 'cpus': Lt needs exactly one integer value, not ['1', '2']"],
        ),
        (
            selector(term(expr("cpus", "Gt", "four"))),
            ["term 1: key 'cpus': Gt needs exactly one integer value, not ['four']"],
        ),
        (
            selector(term(expr("-region", "Exists"))),
            ["term 1: '-region' is not a valid label key: write NAME or PREFIX/NAME, NAME at most"],
        ),
        (
            selector(term({"operator": "Exists"})),
            ["term 1: None is not a valid label key"],
        ),
        (
            selector(term({"key": "region", "operator": "In", "values": "europe"})),
            ["term 1: key 'region': values must be a list of strings, not 'europe'"],
        ),
        (
            selector(term(fields=[{"key": "metadata.namespace", "operator": "In"}])),
            ["term 1: field 'metadata.namespace': matchFields only supports 'metadata.name'"],
        ),
        (
            selector(term(fields=[node_name("Exists")])),
            [
                "term 1: field 'metadata.name': operator 'Exists' is not In or NotIn",
                "term 1: field 'metadata.name': needs exactly one value, not []",
            ],
        ),
        (
            selector(term(fields=[node_name("In", "milan", "naples")])),
            ["term 1: field 'metadata.name': needs exactly one value, not ['milan', 'naples']"],
        ),
        (
            selector(term(expr("a", "Gt"), expr("b/c/d", "Exists")), term(expr("e", "Lt", "x"))),
            [
                "term 1: key 'a': Gt needs exactly one integer value, not []",
                "term 1: 'b/c/d' is not a valid label key",
                "term 2: key 'e': Lt needs exactly one integer value, not ['x']",
            ],
        ),
        ({"nodeSelectorTerms": "region=europe"}, ["nodeSelectorTerms must be a list of terms"]),
        (selector("region=europe"), ["term 1: 'region=europe' is not a term"]),
        (
            selector({"matchExpressions": {"key": "a"}}),
            ["term 1: matchExpressions must be a list"],
        ),
        (selector(term("region")), ["term 1: 'region' is not a requirement"]),
        # Kubernetes' empty term selects nothing; merged into a pod's affinity, every virtual node.
        (
            selector(term(expr("region", "In", "europe")), {}),
            ["term 2 has no requirements, and so selects no cluster"],
        ),
    ],
)
def test_each_problem_names_its_term_and_key(invalid: JSON, problems: list[str]) -> None:
    found = selector_problems(invalid)

    assert len(found) == len(problems), found
    for sentence, expected in zip(found, problems, strict=True):
        assert sentence.startswith(expected)


EUROPE = {"region": "europe", "tier": "gold", "cpus": "8"}
US = {"region": "us-west", "tier": "silver", "cpus": "4", "staging": "true"}
BARE: dict[str, str] = {}


@pytest.mark.parametrize(
    ("selecting", "labels", "matches"),
    [
        (None, BARE, True),
        ({}, BARE, True),
        (selector(), US, True),
        (selector(term()), EUROPE, False),
        (selector({"matchExpressions": [], "matchFields": []}), EUROPE, False),
        (selector(term(expr("region", "In", "europe", "asia"))), EUROPE, True),
        (selector(term(expr("region", "In", "europe", "asia"))), US, False),
        (selector(term(expr("region", "In", "europe"))), BARE, False),
        (selector(term(expr("region", "NotIn", "europe"))), EUROPE, False),
        (selector(term(expr("region", "NotIn", "europe"))), US, True),
        (selector(term(expr("region", "NotIn", "europe"))), BARE, True),
        (selector(term(expr("staging", "Exists"))), US, True),
        (selector(term(expr("staging", "Exists"))), EUROPE, False),
        (selector(term(expr("staging", "DoesNotExist"))), US, False),
        (selector(term(expr("staging", "DoesNotExist"))), EUROPE, True),
        (selector(term(expr("cpus", "Gt", "4"))), EUROPE, True),
        (selector(term(expr("cpus", "Gt", "4"))), US, False),
        (selector(term(expr("cpus", "Lt", "8"))), US, True),
        (selector(term(expr("cpus", "Lt", "8"))), EUROPE, False),
        (selector(term(expr("cpus", "Gt", "-1"))), BARE, False),
        (selector(term(expr("region", "Gt", "1"))), EUROPE, False),
        (selector(term(expr("cpus", "Gt", "four"))), EUROPE, False),
        (selector(term(expr("cpus", "Gt", "1", "2"))), EUROPE, False),
        (selector(term(expr("cpus", "Lt", "9"))), {"cpus": "9_000"}, False),
        (selector(term(expr("region", "in", "europe"))), EUROPE, False),
        (selector(term(expr("region", "In", "europe"), expr("staging", "Exists"))), EUROPE, False),
        (selector(term(expr("region", "In", "europe"), expr("tier", "In", "gold"))), EUROPE, True),
        (
            selector(term(expr("region", "In", "asia")), term(expr("tier", "In", "gold"))),
            EUROPE,
            True,
        ),
        (selector(term(), term(expr("tier", "Exists"))), EUROPE, True),
        (
            selector(term(expr("region", "In", "asia")), term(expr("tier", "In", "x"))),
            EUROPE,
            False,
        ),
    ],
)
def test_terms_are_ored_and_their_expressions_anded(
    selecting: JSON | None, labels: dict[str, str], matches: bool
) -> None:
    assert selector_matches(selecting, labels) is matches


@pytest.mark.parametrize(
    ("fields", "name", "matches"),
    [
        ([node_name("In", "milan")], "milan", True),
        ([node_name("In", "milan")], "naples", False),
        ([node_name("In", "milan")], None, False),
        ([node_name("NotIn", "milan")], "naples", True),
        ([node_name("NotIn", "milan")], "milan", False),
        ([{"key": "metadata.namespace", "operator": "In", "values": ["milan"]}], "milan", False),
        ([node_name("Exists")], "milan", False),
    ],
)
def test_match_fields_compare_the_name(fields: list[JSON], name: str | None, matches: bool) -> None:
    assert selector_matches(selector(term(fields=fields)), BARE, name) is matches


def test_match_fields_and_expressions_of_one_term_are_anded() -> None:
    both = selector(term(expr("region", "In", "europe"), fields=[node_name("In", "milan")]))

    assert selector_matches(both, EUROPE, "milan")
    assert not selector_matches(both, EUROPE, "naples")
    assert not selector_matches(both, US, "milan")


def pod_spec(node_selector: dict[str, str] | None = None, required: JSON | None = None) -> JSON:
    spec: JSON = {"containers": [{"name": "app", "image": "nginx"}]}
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    if required is not None:
        spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}
        }
    return spec


@pytest.mark.parametrize(
    ("spec", "labels", "name", "matches"),
    [
        (pod_spec(), BARE, "milan", True),
        (pod_spec({}), BARE, "milan", True),
        (pod_spec({"region": "europe"}), EUROPE, "milan", True),
        (pod_spec({"region": "europe"}), US, "milan", False),
        (pod_spec({"region": "europe"}), BARE, "milan", False),
        (pod_spec({"region": "europe", "tier": "gold"}), EUROPE, "milan", True),
        (pod_spec({"region": "europe", "tier": "silver"}), EUROPE, "milan", False),
        (pod_spec(required=selector(term(expr("region", "In", "europe")))), EUROPE, "x", True),
        (pod_spec(required=selector(term(expr("region", "In", "europe")))), US, "x", False),
        (
            pod_spec(
                required=selector(
                    term(expr("region", "In", "asia")), term(expr("tier", "In", "silver"))
                )
            ),
            US,
            "x",
            True,
        ),
        (pod_spec(required=selector(term()), node_selector={}), EUROPE, "x", False),
        (pod_spec(required=selector(term(fields=[node_name("In", "milan")]))), BARE, "milan", True),
        (pod_spec(required=selector(term(fields=[node_name("In", "milan")]))), BARE, "rome", False),
        # Both are required: the nodeSelector's labels and a term of the affinity.
        (
            pod_spec({"tier": "gold"}, selector(term(expr("region", "In", "europe")))),
            EUROPE,
            "x",
            True,
        ),
        (
            pod_spec({"tier": "gold"}, selector(term(expr("region", "In", "us-west")))),
            EUROPE,
            "x",
            False,
        ),
        (
            pod_spec({"region": "us-west"}, selector(term(expr("tier", "Exists")))),
            EUROPE,
            "x",
            False,
        ),
        ({"affinity": {"podAntiAffinity": {}}}, BARE, "x", True),
        (
            {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}},
            BARE,
            "x",
            True,
        ),
    ],
)
def test_a_pods_node_selector_and_required_node_affinity_must_both_match(
    spec: JSON, labels: dict[str, str], name: str, matches: bool
) -> None:
    assert pod_node_affinity_matches(spec, labels, name) is matches


REGION = selector(term(expr("region", "In", "europe")), term(expr("region", "In", "us-west")))
GOLD = selector(term(expr("tier", "In", "gold")))
MILAN = selector(term(fields=[node_name("In", "milan")]))


@pytest.mark.parametrize(
    ("first", "second", "merged"),
    [
        (None, None, None),
        (None, GOLD, GOLD),
        (GOLD, None, GOLD),
        (selector(), GOLD, GOLD),
        (GOLD, {}, GOLD),
        ({}, None, {}),
        (None, selector(), selector()),
        (
            REGION,
            GOLD,
            selector(
                term(expr("region", "In", "europe"), expr("tier", "In", "gold")),
                term(expr("region", "In", "us-west"), expr("tier", "In", "gold")),
            ),
        ),
        (
            GOLD,
            REGION,
            selector(
                term(expr("tier", "In", "gold"), expr("region", "In", "europe")),
                term(expr("tier", "In", "gold"), expr("region", "In", "us-west")),
            ),
        ),
        (
            MILAN,
            GOLD,
            selector(term(expr("tier", "In", "gold"), fields=[node_name("In", "milan")])),
        ),
        (
            selector(term(expr("a", "Exists"), fields=[node_name("In", "milan")])),
            selector(term(expr("b", "Exists"), fields=[node_name("NotIn", "naples")])),
            selector(
                term(
                    expr("a", "Exists"),
                    expr("b", "Exists"),
                    fields=[node_name("In", "milan"), node_name("NotIn", "naples")],
                )
            ),
        ),
        (
            selector(term(), term(expr("a", "Exists"))),
            GOLD,
            selector(term(), term(expr("a", "Exists"), expr("tier", "In", "gold"))),
        ),
    ],
)
def test_merging_takes_the_cross_product_of_the_terms(
    first: JSON | None, second: JSON | None, merged: JSON | None
) -> None:
    assert merge_node_selectors(first, second) == merged


SELECTORS: list[JSON | None] = [
    None,
    selector(),
    selector(term()),
    REGION,
    GOLD,
    MILAN,
    selector(term(), term(expr("staging", "Exists"))),
    selector(term(expr("staging", "DoesNotExist"), expr("cpus", "Gt", "4"))),
    selector(term(expr("region", "NotIn", "europe")), term(fields=[node_name("NotIn", "milan")])),
]
OBJECTS = [(EUROPE, "milan"), (EUROPE, "naples"), (US, "milan"), (US, "rome"), (BARE, "milan")]


@pytest.mark.parametrize(("first", "second"), list(itertools.product(SELECTORS, SELECTORS)))
def test_a_merged_selector_selects_what_both_select(
    first: JSON | None, second: JSON | None
) -> None:
    merged = merge_node_selectors(first, second)

    for labels, name in OBJECTS:
        both = selector_matches(first, labels, name) and selector_matches(second, labels, name)
        assert selector_matches(merged, labels, name) is both, (labels, name)


def test_a_merged_selector_shares_nothing_with_its_inputs() -> None:
    first, second = copy.deepcopy(REGION), copy.deepcopy(GOLD)
    kept = merge_node_selectors(first, None)
    crossed = merge_node_selectors(first, second)
    assert kept is not None
    assert crossed is not None

    kept["nodeSelectorTerms"][0]["matchExpressions"][0]["values"].append("asia")
    crossed["nodeSelectorTerms"][0]["matchExpressions"][1]["values"].append("silver")

    assert first == REGION
    assert second == GOLD


@pytest.mark.parametrize(
    ("formatting", "text"),
    [
        (None, ""),
        ({}, ""),
        (selector(), ""),
        (
            selector(
                term(expr("region", "In", "europe", "us-west"), expr("staging", "DoesNotExist")),
                term(expr("tier", "In", "gold")),
            ),
            "region in (europe,us-west), !staging OR tier=gold",
        ),
        (selector(term(expr("region", "NotIn", "europe"))), "region!=europe"),
        (selector(term(expr("region", "NotIn", "europe", "asia"))), "region notin (europe,asia)"),
        (selector(term(expr("liqo.io/type", "Exists"))), "liqo.io/type"),
        (selector(term(expr("cpus", "Gt", "4"), expr("cpus", "Lt", "9"))), "cpus>4, cpus<9"),
        (selector(term(expr("region", "In", ""))), "region="),
        (selector(term(fields=[node_name("In", "milan")])), "metadata.name=milan"),
        (selector(term(), GOLD["nodeSelectorTerms"][0]), "(empty term) OR tier=gold"),
        (selector(term(expr("region", "in", "europe"))), "region in (europe)"),
        (selector(term(expr("staging", "Exists", "yes"))), "staging Exists (yes)"),
    ],
)
def test_a_selector_prints_as_people_write_it(formatting: JSON | None, text: str) -> None:
    assert format_selector(formatting) == text


@pytest.mark.parametrize(
    "text",
    [
        "region in (europe,us-west), !staging",
        "region=europe",
        "region!=europe",
        "region notin (europe,asia), tier, cpus>4, cpus<16",
        "topology.kubernetes.io/zone=",
    ],
)
def test_a_printed_selector_parses_back_to_itself(text: str) -> None:
    parsed = node_selector_from_flags([text, text])

    assert format_selector(parsed) == f"{text} OR {text}"
    assert node_selector_from_flags(format_selector(parsed).split(" OR ")) == parsed


def test_the_term_a_flag_gives_is_matched_as_kubectl_would() -> None:
    flags = node_selector_from_flags(["region in (europe,asia), !staging, cpus>4"])

    assert selector_matches(flags, EUROPE)
    assert not selector_matches(flags, US)
    assert not selector_matches(flags, {**EUROPE, "staging": "true"})
    assert not selector_matches(flags, {**EUROPE, "cpus": "4"})
