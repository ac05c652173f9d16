"""The OpenAPI document's answers, generated from the response models the handlers serialise
(`x402mw.platform.objects`), as the wire sees them (see `x402mw.platform.openapi.document`).

Each model is described in serialisation mode: camelCase members, money and minor units as the
strings they are answered as, every member required but those left out while ``None``, which are
never ``null``. An `Envelope` (``{"paymentIntent": {...}}``) and a ``RootModel`` (an answer that is
one of several objects) are written inline in their operations; every other model is a component of
its own, referenced by name.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, RootModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue, models_json_schema
from pydantic_core import core_schema

from x402mw.platform.objects.base import Envelope
from x402mw.platform.openapi.schemas import REF, Schema, ref

__all__ = ["answer_schemas"]


class _AnswerJsonSchema(GenerateJsonSchema):
    """Pydantic's generator, adjusted to answers: no field titles (they only repeat the name), no
    defaults (an answer's members have values), and a member that may be left out is never null."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        return self.generate_inner(schema["schema"])

    def model_fields_schema(self, schema: core_schema.ModelFieldsSchema) -> JsonSchemaValue:
        answer = super().model_fields_schema(schema)
        required = set(answer.get("required", ()))
        for name, member in answer.get("properties", {}).items():
            options = member.get("anyOf")
            if name in required or not options or {"type": "null"} not in options:
                continue
            kept = [option for option in options if option != {"type": "null"}]
            del member["anyOf"]
            member.update(kept[0] if len(kept) == 1 else {"anyOf": kept})
        return answer


def _inline(model: type[BaseModel]) -> bool:
    return issubclass(model, Envelope | RootModel)


def answer_schemas(models: Sequence[type[BaseModel]]) -> tuple[dict[str, Schema], dict[type[BaseModel], Schema]]:
    """The component schemas of ``models`` and of every model they hold, by class name; and for
    each of ``models``, the schema an operation answering it names: a reference to its component,
    or, for an `Envelope` or a ``RootModel``, its own schema (which references components)."""
    _keys, document = models_json_schema(
        [(model, "serialization") for model in models], ref_template=REF, schema_generator=_AnswerJsonSchema
    )
    components: dict[str, Schema] = document.get("$defs", {})
    answers: dict[type[BaseModel], Schema] = {}
    for model in models:
        if model.__name__ not in components:
            raise RuntimeError(
                f"pydantic named the schema of {model.__qualname__} otherwise: two models share its name"
            )
        answers[model] = components.pop(model.__name__) if _inline(model) else ref(model.__name__)
    written = json.dumps(components)
    for model in models:
        if _inline(model) and json.dumps(ref(model.__name__))[1:-1] in written:
            raise RuntimeError(f"{model.__qualname__} is written inline in its operations: no object may hold one")
    return components, answers
