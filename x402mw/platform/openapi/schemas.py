"""The building blocks of the OpenAPI document's schemas, shared by its modules (the schemas
themselves are generated: request bodies from the handlers' pydantic models,
`x402mw.platform.openapi.models`; answers from the response models,
`x402mw.platform.openapi.answers`; see `x402mw.platform.openapi.document`)."""

from __future__ import annotations

from x402mw.platform.http.routing import STRING, TEXT, Schema

__all__ = ["REF", "STRING", "TEXT", "Schema", "ref"]

REF = "#/components/schemas/{model}"


def ref(name: str) -> Schema:
    return {"$ref": REF.format(model=name)}
