"""Refunds (spec 2.2, 4.1): ``POST /payment-intents/:paymentId/refunds``, ``GET /refunds`` and
``GET /refunds/:refundId``."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from x402mw.platform.api.auth import authenticate
from x402mw.platform.api.bodies import parse_body, path_uuid, read_json
from x402mw.platform.api.errors import ApiError
from x402mw.platform.api.pagination import list_page, query_id
from x402mw.platform.db import tables
from x402mw.platform.services.refunds import refund_json

__all__ = ["RefundCreate", "routes"]


class RefundCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str | None = Field(default=None, max_length=500)


async def create(request: Request) -> JSONResponse:
    caller = await authenticate(request)
    payment_id = path_uuid(request, "payment_id", "payment intent")
    body = parse_body(RefundCreate, await read_json(request, allow_empty=True) or {})
    platform = request.app.state.platform
    refund = await platform.refunds.create(caller.merchant_id, caller.livemode, payment_id, body.reason)
    return JSONResponse({"refund": refund}, status_code=201)


async def retrieve(request: Request) -> JSONResponse:
    caller = await authenticate(request)
    refund_id = path_uuid(request, "refund_id", "refund")
    table = tables.refunds
    async with request.app.state.platform.engine.connect() as conn:
        query = table.select().where(table.c.id == refund_id, *caller.owns(table))
        row = (await conn.execute(query)).mappings().first()
    if row is None:
        raise ApiError.missing("refund", refund_id)
    return JSONResponse({"refund": refund_json(row)})


async def list_refunds(request: Request) -> JSONResponse:
    caller = await authenticate(request)
    table = tables.refunds
    filters = caller.owns(table)
    payment_id = query_id(request, "paymentId")
    if payment_id is not None:
        filters.append(table.c.payment_intent_id == payment_id)

    def render(row: Any) -> dict[str, Any]:
        return refund_json(row)

    async with request.app.state.platform.engine.connect() as conn:
        page = await list_page(conn, table, filters, request, render)
    return JSONResponse(page)


routes = [
    Route("/payment-intents/{payment_id}/refunds", create, methods=["POST"]),
    Route("/refunds", list_refunds, methods=["GET"]),
    Route("/refunds/{refund_id}", retrieve, methods=["GET"]),
]
