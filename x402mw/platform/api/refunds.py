"""Refunds (spec 2.2, 4.1): ``POST /payment-intents/:paymentId/refunds``, ``GET /refunds`` and
``GET /refunds/:refundId``."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.routing import Route

from x402mw.platform.api.auth import authenticate
from x402mw.platform.db import tables
from x402mw.platform.http.bodies import PAYMENT_PREFIX, parse_body, path_uuid, read_json
from x402mw.platform.http.errors import HttpError
from x402mw.platform.http.pagination import list_page, query_id
from x402mw.platform.http.responses import ModelResponse
from x402mw.platform.http.state import platform_of
from x402mw.platform.objects.payments import RefundEnvelope, RefundList
from x402mw.platform.services.refunds import refund_of

__all__ = ["RefundCreate", "routes"]


class RefundCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str | None = Field(default=None, max_length=500)


async def create(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    payment_id = path_uuid(request, "payment_id", "payment intent", prefix=PAYMENT_PREFIX)
    body = parse_body(RefundCreate, await read_json(request, allow_empty=True) or {})
    refund = await platform_of(request).refunds.create(caller.merchant_id, caller.livemode, payment_id, body.reason)
    return ModelResponse(RefundEnvelope(refund=refund), status_code=201)


async def retrieve(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    refund_id = path_uuid(request, "refund_id", "refund")
    table = tables.refunds
    async with platform_of(request).engine.connect() as conn:
        query = table.select().where(table.c.id == refund_id, *caller.owns(table))
        row = (await conn.execute(query)).mappings().first()
    if row is None:
        raise HttpError.missing("refund", refund_id)
    return ModelResponse(RefundEnvelope(refund=refund_of(row)))


async def list_refunds(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    table = tables.refunds
    filters = caller.owns(table)
    payment_id = query_id(request, "paymentId", prefix=PAYMENT_PREFIX)
    if payment_id is not None:
        filters.append(table.c.payment_intent_id == payment_id)
    async with platform_of(request).engine.connect() as conn:
        data, more = await list_page(conn, table, filters, request, refund_of)
    return ModelResponse(RefundList(data=data, has_more=more))


routes = [
    Route("/payment-intents/{payment_id}/refunds", create, methods=["POST"]),
    Route("/refunds", list_refunds, methods=["GET"]),
    Route("/refunds/{refund_id}", retrieve, methods=["GET"]),
]
