"""The pieces every Liqo kind is built from: the base models, ObjectMeta, and field types.

Each field type carries the OpenAPI schema Kubernetes uses for it (quantities are int-or-string,
byte slices are base64 strings), so `vk.api.crds` can derive the CRD schemas from the models
instead of anyone writing them by hand.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Annotated, Any, ClassVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_camel

# Kubernetes' own regular expression for a resource.Quantity in string form.
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
QUANTITY_RE = re.compile(QUANTITY_PATTERN)


def _check_quantity(value: int | str) -> int | str:
    if isinstance(value, str) and not QUANTITY_RE.match(value):
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. 4, 500m, 8Gi)")
    return value


def _decode_base64(value: Any) -> bytes:
    # Raw bytes come from Python code, base64 text from the API's JSON ([]byte in Go).
    if isinstance(value, bytes):
        return value
    if not isinstance(value, str):
        raise ValueError("expected base64-encoded text")
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error as error:
        raise ValueError(f"not valid base64: {error}") from error


def _encode_base64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


Quantity = Annotated[
    int | str,
    AfterValidator(_check_quantity),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True,
        }
    ),
]
"""A resource.Quantity as the API carries it: `4`, `"500m"`, `"8Gi"`."""

ResourceList = dict[str, Quantity]
"""A core/v1 ResourceList: resource name → quantity."""

Base64Bytes = Annotated[
    bytes,
    PlainValidator(_decode_base64),
    PlainSerializer(_encode_base64, return_type=str),
    WithJsonSchema({"type": "string", "format": "byte"}),
]
"""A Go []byte: raw bytes in Python, standard base64 text in JSON and in every dump."""

Time = Annotated[str, WithJsonSchema({"type": "string", "format": "date-time"})]
"""A metav1.Time, kept as the RFC 3339 text the API server writes (`2022-05-05T15:08:33Z`)."""

Int64 = Annotated[int, WithJsonSchema({"type": "integer", "format": "int64"})]

LooseObject = Annotated[
    dict[str, Any],
    WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
]
"""An embedded core type kept as plain JSON (a DeploymentSpec, an Affinity, a Toleration)."""


class KubeModel(BaseModel):
    """Base of every API struct: camelCase on the wire, snake_case in Python, unknown fields kept.

    Unknown fields are stored and dumped again, so an object written by a newer Liqo survives a
    read-modify-write through vk.
    """

    model_config = ConfigDict(
        extra="allow",
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        use_attribute_docstrings=True,
        # Validators built on a model's first use, not at import: the virtual kubelet, one
        # process per VirtualNode, validates with none of them (1.6 MiB each otherwise).
        defer_build=True,
    )


class ObjectMeta(KubeModel):
    """The part of metav1.ObjectMeta vk reads; the rest is kept as unknown fields."""

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: Time | None = None
    deletion_timestamp: Time | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    owner_references: list[dict[str, Any]] | None = None
    finalizers: list[str] | None = None


class KubeObject(KubeModel):
    """Base of the top-level kinds. Subclasses set the class constants and add spec/status.

    `apiVersion` and `kind` are filled in when absent and checked when present, so a manifest
    of another kind never parses silently.
    """

    GROUP: ClassVar[str]
    VERSION: ClassVar[str] = "v1beta1"
    KIND: ClassVar[str]
    PLURAL: ClassVar[str]
    NAMESPACED: ClassVar[bool] = True

    api_version: str = ""
    kind: str = ""
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)

    @classmethod
    def group_version(cls) -> str:
        """The `apiVersion` of this kind, e.g. `offloading.liqo.io/v1beta1`."""
        return f"{cls.GROUP}/{cls.VERSION}"

    @model_validator(mode="before")
    @classmethod
    def _identify(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for alias, name, expected in (
            ("kind", "kind", cls.KIND),
            ("apiVersion", "api_version", cls.group_version()),
        ):
            given = data.pop(name, None) or data.get(alias)
            if given and given != expected:
                raise ValueError(f"{alias} is {given!r}, expected {expected!r}")
            data[alias] = expected
        return data

    def manifest(self) -> dict[str, Any]:
        """The object as the API server takes it: JSON types, camelCase, no null fields."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def forge_failure_status(code: int, reason: str, message: str) -> dict[str, Any]:
    """A metav1.Status of a failed request, as the API server and the kubelet answer errors
    (kubectl prints its message)."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
