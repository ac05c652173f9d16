"""Refunds (spec 2.2, 4.1): ``POST /payment-intents/:paymentId/refunds``, ``GET /refunds`` and
``GET /refunds/:refundId``."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request

from x402mw.platform.api.auth import authenticate
from x402mw.platform.db import tables
from x402mw.platform.http.bodies import PAYMENT_PREFIX, parse_body, path_uuid, read_json
from x402mw.platform.http.errors import HttpError
from x402mw.platform.http.pagination import list_answer, query_id
from x402mw.platform.http.responses import ModelResponse
from x402mw.platform.http.routing import LIST_PARAMS, UUID, ApiRoute, Operation, query
from x402mw.platform.http.state import platform_of
from x402mw.platform.objects.payments import RefundEnvelope, RefundList
from x402mw.platform.services.refunds import refund_of


class RefundCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str | None = Field(
        default=None,
        max_length=500,
        description="why the order is refunded, at most 500 characters; shown in the refund",
    )


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
    return await list_answer(platform_of(request).engine, table, filters, request, refund_of, RefundList)


_TAG = "Refunds"
routes = [
    ApiRoute(
        "POST",
        "/payment-intents/{payment_id}/refunds",
        create,
        Operation(
            id="createRefund",
            tag=_TAG,
            summary="Refund a payment intent",
            description="Refunds everything the order received to the wallet that paid it, from the treasury "
            "through the relayer. Reserves the amount from the available balance atomically (422 "
            "`insufficient_balance`), then answers `processing` or, once the transfer has its "
            "confirmations, `completed`. 409 `payment_intent_unexpected_state` unless the order "
            "`succeeded`; 409 `payment_intent_already_refunded` while another refund is live.",
            answer=RefundEnvelope,
            status=201,
            body=RefundCreate,
            errors=(404, 409, 422),
        ),
    ),
    ApiRoute(
        "GET",
        "/refunds",
        list_refunds,
        Operation(
            id="listRefunds",
            tag=_TAG,
            summary="List refunds",
            description="Newest first; with `paymentId`, the refunds of that payment intent.",
            answer=RefundList,
            parameters=[*LIST_PARAMS, query("paymentId", "only this order's refunds", UUID)],
            errors=(400, 404),
        ),
    ),
    ApiRoute(
        "GET",
        "/refunds/{refund_id}",
        retrieve,
        Operation(id="retrieveRefund", tag=_TAG, summary="Retrieve a refund", answer=RefundEnvelope, errors=(404,)),
    ),
]
