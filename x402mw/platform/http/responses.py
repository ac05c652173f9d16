"""JSON answers serialised from response models (`x402mw.platform.objects`): the only way a handler
answers JSON, so that every answer is the shape the OpenAPI document generates from the same model.

::

    return ModelResponse(PaymentIntentEnvelope(payment_intent=order), status_code=201)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel
from starlette.responses import Response

from x402mw.protocol.models import WireModel


def answer_body(model: BaseModel) -> bytes:
    """``model`` as the JSON an answer carries (UTF-8, compact). A response model answers its
    camelCase members; an x402 wire model (`x402mw.protocol.models.WireModel`) answers as
    ``to_wire`` writes it, nulls left out."""
    if isinstance(model, WireModel):
        return model.model_dump_json(by_alias=True, exclude_none=True).encode()
    return model.model_dump_json().encode()


class ModelResponse(Response):
    """A JSON answer (``application/json``) serialised from a response model."""

    media_type = "application/json"

    def __init__(self, content: BaseModel, status_code: int = 200, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(content, status_code, headers)

    def render(self, content: Any) -> bytes:
        return answer_body(content)
