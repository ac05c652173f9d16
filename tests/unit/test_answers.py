"""The check every JSON answer of the suite goes through (`tests.answers`): it finds an answer that
departs from the OpenAPI document, and passes one the response models made."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse
from starlette.routing import Route

from tests.answers import Answer, AnswerRecorder, AnswerSchemas
from x402mw.platform.objects.payments import Customer, PaymentIntent, PaymentIntentEnvelope, PaymentMethods
from x402mw.platform.objects.service import Error, ErrorEnvelope
from x402mw.platform.openapi.document import build_document

ORDER_ID = "4f1c2a9e-0b5d-4c1e-9a7b-2d6e8f0a1b3c"


@pytest.fixture(scope="module")
def schemas() -> AnswerSchemas:
    return AnswerSchemas(build_document())  # not the suite's own: its coverage counts stay as they are


def _order() -> dict[str, Any]:
    now = datetime(2026, 11, 21, 23, 25, 16, 464000, tzinfo=UTC)
    order = PaymentIntent(
        payment_id=ORDER_ID,
        id=ORDER_ID,
        status="requires_payment",
        order_id="order-1",
        amount=Decimal("12.5"),
        amount_received=Decimal("0"),
        currency="USDC",
        accepted_currencies=["USDC"],
        payment_methods=PaymentMethods(wallet=True, transfer=True, transfer_default_open=False),
        checkout_url=f"https://pay.example/checkout/pi_{ORDER_ID}",
        x402_url=f"https://pay.example/x402/pay/pi_{ORDER_ID}",
        payment_link_id=None,
        description=None,
        success_url=None,
        cancel_url=None,
        customer=Customer(email=None, name=None),
        metadata={},
        exceptions=[],
        network=None,
        paid_currency=None,
        payer=None,
        tx_hash=None,
        paid_at=None,
        expires_at=None,
        livemode=False,
        created_at=now,
        updated_at=now,
    )
    return PaymentIntentEnvelope(payment_intent=order).model_dump(mode="json")


def _created(body: Any, status: int = 201) -> Answer:
    return Answer("POST", "/v1/payment-intents", status, json.dumps(body).encode())


def _envelope() -> dict[str, Any]:
    error = Error(type="invalid_request_error", code="resource_missing", message="no", request_id="req_1")
    return ErrorEnvelope(error=error).model_dump(mode="json")


def test_an_answer_the_models_made_keeps_to_the_document(schemas: AnswerSchemas) -> None:
    assert schemas.problems(_created(_order())) == []
    assert schemas.covered["post", "/v1/payment-intents", "201"] == 1
    found = Answer("GET", f"/v1/payment-intents/{ORDER_ID}", 200, json.dumps(_order()).encode())
    assert schemas.problems(found) == []  # the templated path of the operation
    assert (
        schemas.problems(Answer("GET", f"/v1/payment-intents/{ORDER_ID}", 404, json.dumps(_envelope()).encode())) == []
    )


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        (lambda order: order.pop("livemode"), "'livemode' is a required property"),
        (lambda order: order.update(riskScore="low"), "Additional properties are not allowed ('riskScore'"),
        (lambda order: order.update(amount=12.5), "12.5 is not of type 'string'"),
        (lambda order: order.update(amount="12,50"), "does not match"),
        (lambda order: order.update(status="paid"), "'paid' is not one of"),
        (lambda order: order.update(createdAt="yesterday"), "is not a 'date-time'"),
        (lambda order: order.update(successUrl=7), "7 is not valid under any of the given schemas"),
    ],
)
def test_an_answer_that_departs_from_its_schema_is_a_problem(
    schemas: AnswerSchemas, change: Any, complaint: str
) -> None:
    body = _order()
    change(body["paymentIntent"])
    problems = schemas.problems(_created(body))
    assert len(problems) == 1 and complaint in problems[0], problems
    assert problems[0].startswith("POST /v1/payment-intents -> 201: the schema of POST /v1/payment-intents 201")


def test_statuses_and_paths_the_document_does_not_name(schemas: AnswerSchemas) -> None:
    # a status the operation does not document
    assert "status 202 is not documented" in schemas.problems(_created(_order(), 202))[0]
    # 500 and 405 are not documented anywhere, but must still be the error envelope
    assert schemas.problems(_created(_envelope(), 500)) == []
    assert schemas.problems(Answer("PUT", "/v1/payment-intents", 405, json.dumps(_envelope()).encode())) == []
    assert schemas.problems(_created({"oops": True}, 500))
    # an unknown path answers the envelope, and nothing else
    assert schemas.problems(Answer("GET", "/v1/nothing-here", 404, json.dumps(_envelope()).encode())) == []
    assert schemas.problems(Answer("GET", "/v1/nothing-here", 404, b'{"detail": "Not Found"}'))
    assert "not JSON" in schemas.problems(Answer("GET", "/v1/health", 200, b"ok"))[0]


@pytest.mark.anyio
async def test_the_recorder_keeps_the_json_answers_as_sent() -> None:
    async def as_json(_request: Request) -> JSONResponse:
        return JSONResponse({"a": 1}, status_code=201)

    async def as_html(_request: Request) -> HTMLResponse:
        return HTMLResponse("<p>page</p>")

    sink: list[Answer] = []
    app = Starlette(
        routes=[Route("/json", as_json, methods=["POST"]), Route("/page", as_html)],
        middleware=[Middleware(AnswerRecorder, sink=sink)],
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://testserver") as client:
        assert (await client.post("/json")).status_code == 201
        assert (await client.get("/page")).status_code == 200
        assert (await client.head("/page")).status_code == 200
    assert sink == [Answer("POST", "/json", 201, b'{"a":1}')]
