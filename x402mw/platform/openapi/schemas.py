"""The building blocks of the OpenAPI document's schemas, shared by its modules (the schemas
themselves are generated: request bodies from the handlers' pydantic models,
`x402mw.platform.openapi.models`; answers from the response models,
`x402mw.platform.openapi.answers`; see `x402mw.platform.openapi.document`)."""

from __future__ import annotations

from typing import Any

from x402mw.platform.http.fields import NO_NUL

__all__ = ["REF", "STRING", "TEXT", "Schema", "enum", "ref"]

Schema = dict[str, Any]

REF = "#/components/schemas/{model}"

STRING: Schema = {"type": "string"}
TEXT: Schema = {"type": "string", "pattern": NO_NUL}
"""A string in a request: no JSON string a request carries may hold NUL (`read_json` refuses it)."""


def ref(name: str) -> Schema:
    return {"$ref": REF.format(model=name)}


def enum(*values: str) -> Schema:
    """A string parameter taking one of ``values``."""
    return {"type": "string", "enum": list(values)}
