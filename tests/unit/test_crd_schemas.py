"""The generated CRDs: structural schemas, Liqo's names, `kubectl get` columns as on the pages."""

import re
from typing import Any

import pytest

from vk.api.crds import CUSTOM_RESOURCES, crd_manifests
from vk.api.meta import KubeObject

MANIFESTS = {m["spec"]["names"]["kind"]: m for m in crd_manifests()}

# Header lines verbatim from Liqo's "Offloading in depth" page and the offloading tutorial.
REFERENCE_HEADERS = {
    "ResourceSlice": "NAMESPACE                  NAME     AUTHENTICATION   RESOURCES   AGE",
    "Quota": "NAMESPACE                   NAME                  ENFORCEMENT   CORDONED   AGE",
    "VirtualNode": "NAMESPACE                  NAME     CLUSTERID      CREATE NODE   AGE",
    "ForeignCluster": (
        "NAME       OUTGOING PEERING   INCOMING PEERING   NETWORKING    AUTHENTICATION   AGE"
    ),
}

# What Kubernetes accepts in a structural schema (and what we use of it).
ALLOWED_KEYS = {
    "type",
    "format",
    "description",
    "enum",
    "default",
    "pattern",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "minItems",
    "maxItems",
    "required",
    "properties",
    "items",
    "additionalProperties",
    "anyOf",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-map-type",
    "x-kubernetes-list-type",
    "x-kubernetes-validations",
}
INT_OR_STRING = [{"type": "integer"}, {"type": "string"}]


def _schema(kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = MANIFESTS[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _structural_problems(node: dict[str, Any], path: str) -> list[str]:
    problems = [f"{path}: unsupported key {key!r}" for key in set(node) - ALLOWED_KEYS]
    int_or_string = node.get("x-kubernetes-int-or-string") is True
    if int_or_string:
        if node.get("anyOf") != INT_OR_STRING or "type" in node:
            problems.append(f"{path}: int-or-string must be anyOf integer|string without type")
    elif "anyOf" in node:
        problems.append(f"{path}: anyOf outside an int-or-string")
    elif "type" not in node:
        problems.append(f"{path}: no type")
    if node.get("x-kubernetes-preserve-unknown-fields") is True and node.get("type") != "object":
        problems.append(f"{path}: preserve-unknown-fields on a non-object")
    if node.get("type") == "null":
        problems.append(f"{path}: null type")
    if "properties" in node and "additionalProperties" in node:
        problems.append(f"{path}: both properties and additionalProperties")
    if "additionalProperties" in node and not isinstance(node["additionalProperties"], dict):
        problems.append(f"{path}: additionalProperties must be a schema")
    if node.get("type") == "array" and "items" not in node:
        problems.append(f"{path}: array without items")
    for name in node.get("required", []):
        if name not in node.get("properties", {}):
            problems.append(f"{path}: required {name!r} is not a property")
    if "enum" in node and node.get("type") != "string":
        problems.append(f"{path}: enum on a non-string")
    for name, sub in node.get("properties", {}).items():
        problems += _structural_problems(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        problems += _structural_problems(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        problems += _structural_problems(node["additionalProperties"], f"{path}{{}}")
    return problems


def _column_headers(manifest: dict[str, Any], *, wide: bool = False) -> list[str]:
    """What `kubectl get <kind> -A` prints as headers for this CRD."""
    columns = manifest["spec"]["versions"][0]["additionalPrinterColumns"]
    prefix = ["NAMESPACE", "NAME"] if manifest["spec"]["scope"] == "Namespaced" else ["NAME"]
    return prefix + [c["name"].upper() for c in columns if wide or not c.get("priority", 0)]


def _schema_at(schema: dict[str, Any], json_path: str) -> dict[str, Any]:
    """Follow a printer-column JSONPath through the schema, checking filters against enums."""
    node = schema
    for segment in re.findall(
        r"\.((?:[^.\[\\]|\\.)+)(\[\?\(@\.type==\"([^\"]+)\"\)\])?", json_path
    ):
        name, has_filter, condition_type = segment
        name = name.replace("\\.", ".")
        if "properties" in node:
            assert name in node["properties"], f"{json_path}: no field {name!r}"
            node = node["properties"][name]
        else:
            # A label or annotation key inside a string map.
            assert node["additionalProperties"] == {"type": "string"}, json_path
            node = node["additionalProperties"]
        if has_filter:
            assert node["type"] == "array", f"{json_path}: filter on a non-list {name!r}"
            node = node["items"]
            assert condition_type in node["properties"]["type"]["enum"], (
                f"{json_path}: {condition_type!r} is not a condition type of {name!r}"
            )
    return node


@pytest.mark.parametrize("kind", sorted(MANIFESTS))
def test_schema_is_structural(kind: str) -> None:
    schema = _schema(kind)

    assert _structural_problems(schema, kind) == []
    assert schema["properties"]["metadata"] == {"type": "object"}
    assert schema["properties"]["apiVersion"] == {"type": "string"}
    assert schema["properties"]["kind"] == {"type": "string"}


def test_schema_has_no_pydantic_leftovers() -> None:
    text = repr(crd_manifests())
    for leftover in ("$ref", "$defs", "'title'", "'null'", "'allOf'", "'const'"):
        assert leftover not in text


def test_quantities_are_int_or_string_as_kubernetes_has_them() -> None:
    hard = _schema("VirtualNode")["properties"]["spec"]["properties"]["resourceQuota"]
    quantity = hard["properties"]["hard"]["additionalProperties"]

    assert quantity["anyOf"] == INT_OR_STRING
    assert quantity["x-kubernetes-int-or-string"] is True


def test_embedded_core_types_preserve_unknown_fields() -> None:
    spec = _schema("VirtualNode")["properties"]["spec"]["properties"]

    assert spec["template"]["type"] == "object"
    assert spec["template"]["x-kubernetes-preserve-unknown-fields"] is True
    assert "properties" not in spec["template"]
    assert spec["offloadingPatch"]["properties"]["affinity"]["x-kubernetes-preserve-unknown-fields"]


def test_byte_fields_are_base64_strings() -> None:
    spec = _schema("ResourceSlice")["properties"]["spec"]["properties"]
    auth = _schema("ResourceSlice")["properties"]["status"]["properties"]["authParams"]

    assert spec["csr"] == {
        "description": spec["csr"]["description"],
        "format": "byte",
        "type": "string",
    }
    assert auth["properties"]["signedCRT"]["format"] == "byte"
    assert auth["properties"]["ca"]["format"] == "byte"


def test_enums_and_defaults_follow_liqo() -> None:
    spec = _schema("NamespaceOffloading")["properties"]["spec"]["properties"]
    quota = _schema("Quota")["properties"]["spec"]

    assert spec["namespaceMappingStrategy"]["enum"] == [
        "EnforceSameName",
        "DefaultName",
        "SelectedName",
    ]
    assert spec["namespaceMappingStrategy"]["default"] == "DefaultName"
    assert spec["podOffloadingStrategy"]["default"] == "LocalAndRemote"
    assert sorted(quota["properties"]["limitsEnforcement"]["enum"]) == ["Hard", "None", "Soft"]
    assert quota["required"] == ["resources", "user"]


@pytest.mark.parametrize(
    ("kind", "plural", "group", "scope", "short_names"),
    [
        ("ResourceSlice", "resourceslices", "authentication.liqo.io", "Namespaced", ["rslice"]),
        (
            "VirtualNode",
            "virtualnodes",
            "offloading.liqo.io",
            "Namespaced",
            ["vn", "vnode", "virno", "vno"],
        ),
        (
            "NamespaceOffloading",
            "namespaceoffloadings",
            "offloading.liqo.io",
            "Namespaced",
            ["nso", "nsof", "nsoff", "nsoffloading"],
        ),
        ("NamespaceMap", "namespacemaps", "offloading.liqo.io", "Namespaced", ["nm", "nsmap"]),
        ("Quota", "quotas", "offloading.liqo.io", "Namespaced", ["qt"]),
        ("ForeignCluster", "foreignclusters", "core.liqo.io", "Cluster", ["fc"]),
    ],
)
def test_crd_names_are_liqos(
    kind: str, plural: str, group: str, scope: str, short_names: list[str]
) -> None:
    manifest = MANIFESTS[kind]
    version = manifest["spec"]["versions"][0]

    assert manifest["metadata"]["name"] == f"{plural}.{group}"
    assert manifest["spec"]["group"] == group
    assert manifest["spec"]["scope"] == scope
    assert manifest["spec"]["names"]["plural"] == plural
    assert manifest["spec"]["names"]["shortNames"] == short_names
    assert manifest["spec"]["names"]["categories"] == ["liqo"]
    assert (version["name"], version["served"], version["storage"]) == ("v1beta1", True, True)
    assert version["subresources"] == {"status": {}}


@pytest.mark.parametrize("kind", sorted(REFERENCE_HEADERS))
def test_kubectl_get_headers_match_the_reference_pages(kind: str) -> None:
    assert _column_headers(MANIFESTS[kind]) == re.split(r"\s{2,}", REFERENCE_HEADERS[kind])


def test_wide_columns_only_add_to_the_default_headers() -> None:
    fc = MANIFESTS["ForeignCluster"]

    assert _column_headers(fc, wide=True) == [*_column_headers(fc), "ROLE", "CLUSTERID"]


def test_namespace_offloading_headers_are_liqos() -> None:
    assert _column_headers(MANIFESTS["NamespaceOffloading"]) == [
        "NAMESPACE",
        "NAME",
        "NAMESPACEMAPPINGSTRATEGY",
        "PODOFFLOADINGSTRATEGY",
        "OFFLOADINGPHASE",
        "AGE",
    ]


@pytest.mark.parametrize("kind", sorted(MANIFESTS))
def test_printer_columns_point_at_fields_of_the_schema(kind: str) -> None:
    manifest = MANIFESTS[kind]
    schema = _schema(kind)
    schema["properties"]["metadata"] = {
        "properties": {
            "creationTimestamp": {"type": "string"},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        }
    }
    types = {"string": "string", "boolean": "boolean", "date": "string", "integer": "integer"}

    for column in manifest["spec"]["versions"][0]["additionalPrinterColumns"]:
        target = _schema_at(schema, column["jsonPath"])
        assert target["type"] == types[column["type"]], column


def test_every_model_of_the_table_is_a_top_level_kind() -> None:
    for resource in CUSTOM_RESOURCES:
        assert issubclass(resource.model, KubeObject)
        assert resource.filename == f"{resource.model.GROUP}_{resource.model.PLURAL}.yaml"
