"""The OpenAPI document's request bodies, generated from the pydantic models the handlers validate
with, as the wire sees them (see `x402mw.platform.openapi.document`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from x402mw.platform.http.fields import MINOR_SCHEMA, NO_NUL, minor_units
from x402mw.platform.openapi.schemas import REF, TEXT, Schema, ref

__all__ = ["JSON_VALUE", "model_schemas"]

JSON_VALUE = "JsonValue"
"""The schema of any JSON a request may carry where a model takes anything: no NUL in its strings
or member names."""


def json_value_schema() -> Schema:
    any_json = ref(JSON_VALUE)
    return {
        "description": "Any JSON value, without NUL in its strings and member names.",
        "anyOf": [
            TEXT,
            {"type": ["number", "boolean", "null"]},
            {"type": "array", "items": any_json},
            {"type": "object", "propertyNames": TEXT, "additionalProperties": any_json},
        ],
    }


# An integer of the x402 wire (an amount, a Unix time) as its digit string; the models take any up to
# 2**256 - 1, the document promises those below 10**18.
_WIRE_DIGITS = {"type": "string", "pattern": "^(?:0|[1-9][0-9]{0,17})$"}
# Where `_WireJsonSchema` means `JSON_VALUE`: a marker, since pydantic accounts for every "$ref" it
# writes; `model_schemas` puts the reference in its place.
_ANY_JSON = {"x-any-json": True}


def _with_json_value(node: Any) -> Any:
    if node == _ANY_JSON:
        return ref(JSON_VALUE)
    if isinstance(node, dict):
        return {key: _with_json_value(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_with_json_value(value) for value in node]
    return node


class _WireJsonSchema(GenerateJsonSchema):
    """Pydantic's generator, adjusted to the wire: amounts that a ``mode="before"`` validator parses
    from digit strings into ``int`` are documented as the strings clients send (with `minor_units`,
    also as JSON integers); strings the model leaves free are documented without NUL, and members
    the model takes without a schema as `JSON_VALUE`; field titles (which only repeat the name) are
    left out."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def function_before_schema(self, schema: core_schema.BeforeValidatorFunctionSchema) -> JsonSchemaValue:
        inner = schema["schema"]
        base = inner["schema"] if inner["type"] == "nullable" else inner
        if base["type"] == "int":
            function = schema["function"]["function"]
            digits = dict(MINOR_SCHEMA) if function is minor_units else dict(_WIRE_DIGITS)
            return {"anyOf": [digits, {"type": "null"}]} if base is not inner else digits
        return super().function_before_schema(schema)

    def str_schema(self, schema: core_schema.StringSchema) -> JsonSchemaValue:
        answer = super().str_schema(schema)
        if "pattern" not in answer and "format" not in answer:
            answer["pattern"] = NO_NUL
        return answer

    def any_schema(self, schema: core_schema.AnySchema) -> JsonSchemaValue:
        return dict(_ANY_JSON)

    def dict_schema(self, schema: core_schema.DictSchema) -> JsonSchemaValue:
        answer = super().dict_schema(schema)
        answer.setdefault("propertyNames", TEXT)
        return answer

    def model_schema(self, schema: core_schema.ModelSchema) -> JsonSchemaValue:
        answer = super().model_schema(schema)
        target = answer
        if "$ref" in answer:
            target = self.definitions.get(answer["$ref"].split("/")[-1], answer)
        if target.get("type") == "object" and target.get("additionalProperties") is not False:
            # members the model ignores or keeps are read all the same: no NUL in them either
            target["additionalProperties"] = dict(_ANY_JSON)
            target.setdefault("propertyNames", TEXT)
        return answer


# SettleBody reads these two as dicts and validates them itself, with the models referenced here.
_PROPERTY_OVERRIDES: dict[str, dict[str, Schema]] = {
    "Authorization": {"nonce": {"type": "string", "pattern": "^0[xX][0-9a-fA-F]{64}$"}},
    "SettleBody": {
        "accepted": {"$ref": REF.format(model="PaymentRequirements")},
        "paymentPayload": {"$ref": REF.format(model="PaymentPayload")},
    },
}


def model_schemas(models: Sequence[type[BaseModel]]) -> dict[str, Schema]:
    """The request bodies' schemas: ``models`` and the models they hold, each field described by its
    ``Field(description=...)``, with property overrides (the members a model reads as dicts)."""
    found: dict[str, Schema] = {}
    for model in models:
        schema = model.model_json_schema(by_alias=True, ref_template=REF, schema_generator=_WireJsonSchema)
        schema = _with_json_value(schema)
        for name, sub in {**schema.pop("$defs", {}), model.__name__: schema}.items():
            if found.setdefault(name, sub) != sub:
                raise RuntimeError(f"two different JSON schemas are named {name}")
    found[JSON_VALUE] = json_value_schema()
    for name, replaced in _PROPERTY_OVERRIDES.items():
        properties = found[name]["properties"]
        for field, override in replaced.items():
            properties[field] = override | {"description": properties[field]["description"]}
    return found
