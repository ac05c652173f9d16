"""The merchant API client at the transport level (``httpx.MockTransport``, no network): requests on the
wire, retries with one idempotency key, ``Retry-After``, error mapping with request ids, parsing into
typed models, pagination across pages, sync and async. The sans-IO flow is also stepped by hand."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from email.utils import format_datetime
from typing import Any

import httpx
import pytest

from x402mw.client.merchant import (
    APIConnectionError,
    APIError,
    AsyncMerchantClient,
    AsyncPage,
    AuthenticationError,
    ConflictError,
    IdempotencyError,
    InvalidRequestError,
    MerchantClient,
    NotFoundError,
    Page,
    PaymentIntent,
    PaymentMethods,
    RateLimitError,
    ServerError,
    UnprocessableEntityError,
)
from x402mw.client.merchant.calls import Call, ClientConfig, Send, Sleep, call_flow
from x402mw.errors import ConfigurationError, PlatformError, X402Error

BASE = "https://api.test/v1"
KEY = "sk_test_0123456789abcdef"
STAMP = "2026-01-31T12:00:00.123Z"

Answer = httpx.Response | Exception


class Script:
    """A MockTransport handler: answers in order, records every request."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def body(self, index: int = -1) -> Any:
        return json.loads(self.requests[index].content)


@pytest.fixture
def sync_client() -> Iterator[Callable[..., MerchantClient]]:
    opened: list[httpx.Client] = []

    def make(script: Script, **options: Any) -> MerchantClient:
        http = httpx.Client(transport=httpx.MockTransport(script))
        opened.append(http)
        return MerchantClient(KEY, BASE, http_client=http, **options)

    yield make
    for http in opened:
        http.close()


def _async_client(script: Script, **options: Any) -> AsyncMerchantClient:
    return AsyncMerchantClient(
        KEY, BASE, http_client=httpx.AsyncClient(transport=httpx.MockTransport(script)), **options
    )


def intent_json(**changes: Any) -> dict[str, Any]:
    ident = changes.pop("id", str(uuid.uuid4()))
    return {
        "paymentId": ident,
        "id": ident,
        "object": "payment_intent",
        "status": "requires_payment",
        "orderId": "A-1001",
        "amount": "12.5",
        "amountReceived": "0",
        "currency": "USDC",
        "acceptedCurrencies": ["USDC"],
        "paymentMethods": {"wallet": True, "transfer": True, "transferDefaultOpen": False},
        "checkoutUrl": f"http://127.0.0.1:4402/checkout/pi_{ident}",
        "successUrl": None,
        "cancelUrl": None,
        "customer": {"email": None, "name": None},
        "metadata": {},
        "exceptions": [],
        "network": None,
        "paidCurrency": None,
        "payer": None,
        "txHash": None,
        "paidAt": None,
        "expiresAt": None,
        "livemode": False,
        "createdAt": STAMP,
        "updatedAt": STAMP,
    } | changes


def refund_json(**changes: Any) -> dict[str, Any]:
    return {
        "id": str(uuid.uuid4()),
        "object": "refund",
        "paymentId": str(uuid.uuid4()),
        "status": "processing",
        "amount": "12.5",
        "currency": "USDC",
        "network": "eip155:1337",
        "destination": "0x" + "ab" * 20,
        "reason": None,
        "txHash": None,
        "failureReason": None,
        "livemode": False,
        "createdAt": STAMP,
        "updatedAt": STAMP,
        "completedAt": None,
    } | changes


def ok(body: dict[str, Any], status: int = 200, **headers: str) -> httpx.Response:
    return httpx.Response(status, json=body, headers={"Request-Id": "req_ok", **headers})


def error(
    status: int, code: str, *, type: str = "invalid_request_error", param: str | None = None, **headers: str
) -> httpx.Response:
    body: dict[str, Any] = {"type": type, "code": code, "message": f"{code} happened", "requestId": f"req_{code}"}
    if param is not None:
        body["param"] = param
    return httpx.Response(status, json={"error": body}, headers={"Request-Id": f"req_{code}", **headers})


def page(items: list[dict[str, Any]], has_more: bool) -> httpx.Response:
    return ok({"object": "list", "data": items, "hasMore": has_more})


def test_create_sends_the_documented_request_and_parses_the_answer(
    sync_client: Callable[..., MerchantClient],
) -> None:
    answer = intent_json(amount="12.50", riskScore={"level": "low"})
    script = Script(ok({"paymentIntent": answer}, 201))
    client = sync_client(script)
    expires = datetime(2030, 1, 1, tzinfo=UTC)
    intent = client.payment_intents.create(
        order_id="A-1001",
        amount=Decimal("12.50"),
        currency="USDC",
        accepted_currencies=["USDC", "EURC"],
        customer_email="buyer@example.com",
        metadata={"cart": "42"},
        payment_methods=PaymentMethods(wallet=False, transfer=True, transfer_default_open=True),
        expires_at=expires,
    )
    request = script.requests[0]
    assert (request.method, str(request.url)) == ("POST", f"{BASE}/payment-intents")
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.headers["content-type"] == "application/json"
    assert uuid.UUID(request.headers["idempotency-key"]).version == 4
    assert script.body() == {
        "orderId": "A-1001",
        "amount": "12.50",
        "currency": "USDC",
        "acceptedCurrencies": ["USDC", "EURC"],
        "customerEmail": "buyer@example.com",
        "metadata": {"cart": "42"},
        "paymentMethods": {"wallet": False, "transfer": True, "transferDefaultOpen": True},
        "expiresAt": "2030-01-01T00:00:00+00:00",
    }
    assert isinstance(intent, PaymentIntent)
    assert intent.amount == Decimal("12.50") and isinstance(intent.amount, Decimal)
    assert intent.amount_received == Decimal(0)
    assert intent.created_at == datetime(2026, 1, 31, 12, 0, 0, 123000, tzinfo=UTC)
    assert intent.payment_methods.transfer_default_open is False
    assert intent.model_extra == {"riskScore": {"level": "low"}}


def test_money_is_never_a_float(sync_client: Callable[..., MerchantClient]) -> None:
    script = Script()
    client = sync_client(script)
    with pytest.raises(TypeError, match="amount must be a Decimal, str or int"):
        client.payment_intents.create(order_id="A", amount=12.5, currency="USDC")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="finite"):
        client.payment_intents.create(order_id="A", amount=Decimal("NaN"), currency="USDC")
    assert script.requests == []


def test_json_numbers_in_answers_are_read_as_decimals(sync_client: Callable[..., MerchantClient]) -> None:
    raw = json.dumps({"paymentIntent": intent_json(amount="@")}).replace('"@"', "0.1").encode()
    client = sync_client(Script(httpx.Response(200, content=raw, headers={"Content-Type": "application/json"})))
    assert client.payment_intents.retrieve("x").amount == Decimal("0.1")


def test_a_post_is_retried_with_the_same_idempotency_key(sync_client: Callable[..., MerchantClient]) -> None:
    script = Script(
        error(503, "unavailable", type="api_error", **{"Retry-After": "0"}),
        httpx.ConnectError("connection refused"),
        ok({"paymentIntent": intent_json()}, 201),
    )
    intent = sync_client(script).payment_intents.create(order_id="A", amount="1", currency="USDC")
    assert intent.status == "requires_payment"
    keys = {request.headers["idempotency-key"] for request in script.requests}
    assert len(script.requests) == 3 and len(keys) == 1
    assert all(request.content == script.requests[0].content for request in script.requests)


def test_an_explicit_idempotency_key_is_sent(sync_client: Callable[..., MerchantClient]) -> None:
    script = Script(ok({"paymentIntent": intent_json(status="canceled")}))
    sync_client(script).payment_intents.cancel("pi-1", idempotency_key="cancel-pi-1")
    assert script.requests[0].headers["idempotency-key"] == "cancel-pi-1"
    assert script.requests[0].url.path == "/v1/payment-intents/pi-1/cancel"


def test_reads_carry_no_idempotency_key(sync_client: Callable[..., MerchantClient]) -> None:
    script = Script(ok({"paymentIntent": intent_json()}))
    sync_client(script).payment_intents.retrieve("abc")
    assert "idempotency-key" not in script.requests[0].headers
    assert script.requests[0].method == "GET"


def test_a_key_still_in_flight_is_retried(sync_client: Callable[..., MerchantClient]) -> None:
    script = Script(
        error(409, "idempotency_key_in_use", type="idempotency_error", **{"Retry-After": "0"}),
        ok({"paymentIntent": intent_json()}, 201),
    )
    sync_client(script).payment_intents.create(order_id="A", amount="1", currency="USDC")
    assert len(script.requests) == 2
    assert script.requests[0].headers["idempotency-key"] == script.requests[1].headers["idempotency-key"]


def test_a_conflict_is_not_retried_and_carries_its_details(sync_client: Callable[..., MerchantClient]) -> None:
    script = Script(error(409, "order_id_conflict", param="orderId"))
    with pytest.raises(ConflictError) as caught:
        sync_client(script).payment_intents.create(order_id="A", amount="1", currency="USDC")
    assert len(script.requests) == 1
    exc = caught.value
    assert (exc.status, exc.type, exc.code, exc.param) == (409, "invalid_request_error", "order_id_conflict", "orderId")
    assert exc.request_id == "req_order_id_conflict"
    assert exc.message == "order_id_conflict happened"
    assert "req_order_id_conflict" in str(exc) and KEY not in str(exc)
    assert isinstance(exc, APIError) and isinstance(exc, PlatformError) and isinstance(exc, X402Error)


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (error(400, "parameter_invalid", param="amount"), InvalidRequestError),
        (error(401, "invalid_api_key", type="authentication_error"), AuthenticationError),
        (error(404, "resource_missing", param="id"), NotFoundError),
        (error(409, "payment_intent_unexpected_state"), ConflictError),
        (error(400, "idempotency_key_reused", type="idempotency_error"), IdempotencyError),
        (error(422, "insufficient_balance"), UnprocessableEntityError),
        (error(413, "body_too_large"), InvalidRequestError),
        (error(429, "rate_limited", type="rate_limit_error"), RateLimitError),
        (error(500, "internal_error", type="api_error"), ServerError),
    ],
    ids=lambda value: value.__name__ if isinstance(value, type) else str(value.status_code),
)
def test_errors_map_to_their_class(
    sync_client: Callable[..., MerchantClient], answer: httpx.Response, expected: type[APIError]
) -> None:
    client = sync_client(Script(answer, answer, answer), max_retries=0)
    with pytest.raises(expected) as caught:
        client.payment_intents.retrieve("x")
    body = answer.json()["error"]
    assert type(caught.value) is expected
    assert caught.value.status == answer.status_code
    assert caught.value.code == body["code"]
    assert caught.value.request_id == body["requestId"]
    assert caught.value.param == body.get("param")


def test_an_answer_without_envelope_still_carries_the_request_id(sync_client: Callable[..., MerchantClient]) -> None:
    bad_gateway = httpx.Response(502, text="<html>bad gateway</html>", headers={"Request-Id": "req_proxy"})
    with pytest.raises(ServerError) as caught:
        sync_client(Script(bad_gateway), max_retries=0).balances.list()
    assert (caught.value.status, caught.value.code, caught.value.request_id) == (502, None, "req_proxy")
    assert "502" in caught.value.message


def test_server_errors_are_retried_up_to_max_retries(sync_client: Callable[..., MerchantClient]) -> None:
    unavailable = error(503, "unavailable", type="api_error", **{"Retry-After": "0"})
    script = Script(*[unavailable] * 5)
    with pytest.raises(ServerError):
        sync_client(script, max_retries=3).events.retrieve("evt")
    assert len(script.requests) == 4

    script = Script(unavailable)
    with pytest.raises(ServerError):
        sync_client(script, max_retries=0).events.retrieve("evt")
    assert len(script.requests) == 1


def test_rate_limits_are_retried(sync_client: Callable[..., MerchantClient]) -> None:
    script = Script(
        error(429, "rate_limited", type="rate_limit_error", **{"Retry-After": "0"}),
        page([], False),
    )
    assert sync_client(script).balances.list().data == []
    assert len(script.requests) == 2


def test_connection_failures_become_api_connection_errors(sync_client: Callable[..., MerchantClient]) -> None:
    refused = httpx.ConnectError("connection refused")
    script = Script(refused, refused)
    with pytest.raises(APIConnectionError) as caught:
        sync_client(script, max_retries=1).payment_intents.retrieve("x")
    assert len(script.requests) == 2
    assert caught.value.status == 0 and caught.value.__cause__ is refused

    script = Script(httpx.UnsupportedProtocol("no"))  # a mistake, not a flaky network: not retried
    with pytest.raises(APIConnectionError):
        sync_client(script).payment_intents.retrieve("x")
    assert len(script.requests) == 1


def test_an_unexpected_answer_is_an_api_error(sync_client: Callable[..., MerchantClient]) -> None:
    script = Script(ok({"paymentIntent": {"id": "x"}}))
    with pytest.raises(APIError) as caught:
        sync_client(script).payment_intents.retrieve("x")
    assert (caught.value.code, caught.value.request_id) == ("invalid_response", "req_ok")


def test_ids_stay_one_path_segment(sync_client: Callable[..., MerchantClient]) -> None:
    script = Script(ok({"paymentIntent": intent_json()}))
    sync_client(script).payment_intents.retrieve("../refunds?x=1")
    assert script.requests[0].url.raw_path == b"/v1/payment-intents/..%2Frefunds%3Fx%3D1"
    with pytest.raises(ValueError, match="non-empty"):
        sync_client(Script()).payment_intents.retrieve("")


def test_auto_paging_follows_the_cursor_and_keeps_filters(sync_client: Callable[..., MerchantClient]) -> None:
    intents = [intent_json(id=f"pi-{n}") for n in range(5)]
    script = Script(page(intents[:2], True), page(intents[2:4], True), page(intents[4:], False))
    client = sync_client(script)
    first = client.payment_intents.list(order_id="A-1001", limit=2)
    assert isinstance(first, Page) and first.has_more and len(script.requests) == 1
    assert [pi.id for pi in first.auto_paging_iter()] == [f"pi-{n}" for n in range(5)]
    params = [dict(request.url.params) for request in script.requests]
    assert params == [
        {"orderId": "A-1001", "limit": "2"},
        {"orderId": "A-1001", "limit": "2", "starting_after": "pi-1"},
        {"orderId": "A-1001", "limit": "2", "starting_after": "pi-3"},
    ]


def test_auto_paging_with_ending_before_goes_towards_newer_objects(
    sync_client: Callable[..., MerchantClient],
) -> None:
    script = Script(
        page([intent_json(id="pi-4"), intent_json(id="pi-3")], True),
        page([intent_json(id="pi-6"), intent_json(id="pi-5")], False),
    )
    first = sync_client(script).payment_intents.list(ending_before="pi-2", limit=2)
    assert [pi.id for pi in first.auto_paging_iter()] == ["pi-3", "pi-4", "pi-5", "pi-6"]
    assert script.requests[1].url.params["ending_before"] == "pi-4"
    assert "starting_after" not in script.requests[1].url.params


def test_a_last_page_has_no_next(sync_client: Callable[..., MerchantClient]) -> None:
    script = Script(page([intent_json()], False))
    listing = sync_client(script).payment_intents.list()
    assert listing.next_page() is None and len(script.requests) == 1


def test_refunds_are_created_listed_and_read(sync_client: Callable[..., MerchantClient]) -> None:
    payment_id = str(uuid.uuid4())
    done = refund_json(paymentId=payment_id, status="completed", txHash="0x" + "1" * 64, completedAt=STAMP)
    script = Script(ok({"refund": refund_json(paymentId=payment_id)}, 201), page([done], False), ok({"refund": done}))
    client = sync_client(script)
    created = client.refunds.create(payment_id, reason="damaged")
    assert script.requests[0].url.path == f"/v1/payment-intents/{payment_id}/refunds"
    assert script.body(0) == {"reason": "damaged"}
    assert created.status == "processing" and created.amount == Decimal("12.5") and created.completed_at is None
    listed = client.refunds.list(payment_id=payment_id)
    assert dict(script.requests[1].url.params) == {"paymentId": payment_id}
    assert [r.tx_hash for r in listed.data] == ["0x" + "1" * 64]
    read = client.refunds.retrieve(done["id"])
    assert read.completed_at == datetime(2026, 1, 31, 12, 0, 0, 123000, tzinfo=UTC)


def test_a_refund_without_reason_sends_an_empty_object(sync_client: Callable[..., MerchantClient]) -> None:
    script = Script(error(422, "insufficient_balance"))
    with pytest.raises(UnprocessableEntityError) as caught:
        sync_client(script).refunds.create("pi")
    assert script.body() == {}
    assert caught.value.code == "insufficient_balance"


def test_balances_are_decimals(sync_client: Callable[..., MerchantClient]) -> None:
    balance = {
        "object": "balance",
        "network": "eip155:1337",
        "chainId": 1337,
        "currency": "USDC",
        "available": "10.5",
        "reserved": "0.000001",
        "livemode": False,
    }
    listing = sync_client(Script(page([balance], False))).balances.list()
    assert [(b.network, b.chain_id, b.available, b.reserved) for b in listing.data] == [
        ("eip155:1337", 1337, Decimal("10.5"), Decimal("0.000001"))
    ]


def test_simulate_payment_answers_the_paid_order(sync_client: Callable[..., MerchantClient]) -> None:
    payer = "0x" + "cd" * 20
    paid = intent_json(status="succeeded", network="eip155:1337", payer=payer, amountReceived="6.25")
    answer = {
        "object": "sandbox_payment",
        "scenario": "underpaid",
        "network": "eip155:1337",
        "currency": "USDC",
        "amount": "6.25",
        "payer": payer,
        "txHash": "0x" + "2" * 64,
        "paymentIntent": paid | {"exceptions": ["underpaid"]},
    }
    script = Script(ok(answer))
    result = sync_client(script).sandbox.simulate_payment(paid["id"], scenario="underpaid")
    assert script.requests[0].url.path == f"/v1/sandbox/payment-intents/{paid['id']}/simulate-payment"
    assert script.body() == {"scenario": "underpaid"}
    assert result.amount == Decimal("6.25") and result.payment_intent.payer == payer
    assert result.payment_intent.network == "eip155:1337"
    assert result.payment_intent.exceptions == ["underpaid"]


def test_update_sends_only_what_is_given(sync_client: Callable[..., MerchantClient]) -> None:
    endpoint = {
        "id": "we-1",
        "object": "webhook_endpoint",
        "url": "https://example.com/hooks",
        "enabledEvents": ["*"],
        "description": None,
        "status": "disabled",
        "livemode": False,
        "createdAt": STAMP,
        "updatedAt": STAMP,
    }
    script = Script(ok({"webhookEndpoint": endpoint}), ok({"webhookEndpoint": endpoint}))
    client = sync_client(script)
    client.webhook_endpoints.update("we-1", status="disabled")
    client.webhook_endpoints.update("we-1", description=None)
    assert script.requests[0].method == "PATCH" and "idempotency-key" not in script.requests[0].headers
    assert [script.body(0), script.body(1)] == [{"status": "disabled"}, {"description": None}]


def test_secrets_and_keys_stay_out_of_reprs(sync_client: Callable[..., MerchantClient]) -> None:
    endpoint = {
        "id": "we-1",
        "url": "https://example.com/hooks",
        "enabledEvents": ["*"],
        "status": "enabled",
        "livemode": False,
        "createdAt": STAMP,
        "updatedAt": STAMP,
        "secret": "whsec_c2VjcmV0",
    }
    client = sync_client(Script(ok({"webhookEndpoint": endpoint}, 201)))
    created = client.webhook_endpoints.create(url="https://example.com/hooks", enabled_events=["*"])
    assert created.secret == "whsec_c2VjcmV0" and "whsec" not in repr(created)
    assert KEY not in repr(client) and "sk_test_" in repr(client)


def test_the_constructor_reports_every_problem() -> None:
    with pytest.raises(ConfigurationError) as caught:
        MerchantClient("", "ftp://example.com", timeout=-1, max_retries=-1)
    assert len(caught.value.problems) == 4


def test_a_client_passed_in_is_not_closed() -> None:
    http = httpx.Client(transport=httpx.MockTransport(Script()))
    with MerchantClient(KEY, http_client=http) as client:
        assert client.base_url == "http://127.0.0.1:4402/v1"
    assert not http.is_closed
    http.close()
    owned = MerchantClient(KEY)
    owned.close()
    assert owned._http_client.is_closed


def _config(max_retries: int = 2) -> ClientConfig:
    return ClientConfig.create(KEY, BASE, 5, max_retries)


def _call() -> Call[Any]:
    return Call("POST", "/payment-intents", lambda answer: answer["paymentIntent"], body={"orderId": "A"})


def test_the_flow_waits_what_retry_after_asks() -> None:
    flow = call_flow(_call(), _config())
    send = next(flow)
    assert isinstance(send, Send) and send.headers["Idempotency-Key"]
    assert flow.send(error(429, "rate_limited", **{"Retry-After": "2"})) == Sleep(2.0)
    assert flow.send(None) is send
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    sleep = flow.send(error(503, "unavailable", **{"Retry-After": later}))
    assert isinstance(sleep, Sleep) and 25 < sleep.seconds <= 30
    assert flow.send(None) is send
    with pytest.raises(StopIteration) as done:
        flow.send(ok({"paymentIntent": {"id": "pi"}}))
    assert done.value.value == {"id": "pi"}


def test_the_flow_backs_off_exponentially_with_jitter() -> None:
    flow = call_flow(_call(), _config(max_retries=3))
    next(flow)
    waits = []
    for _ in range(3):
        sleep = flow.send(httpx.ReadTimeout("slow"))
        assert isinstance(sleep, Sleep)
        waits.append(sleep.seconds)
        next(flow)
    assert 0.25 <= waits[0] <= 0.5 and 0.5 <= waits[1] <= 1.0 and 1.0 <= waits[2] <= 2.0
    with pytest.raises(APIConnectionError):
        flow.send(httpx.ReadTimeout("slow"))


def test_a_retry_after_beyond_the_limit_is_not_waited_for() -> None:
    flow = call_flow(_call(), _config())
    next(flow)
    with pytest.raises(RateLimitError) as caught:
        flow.send(error(429, "rate_limited", type="rate_limit_error", **{"Retry-After": "3600"}))
    assert caught.value.headers["retry-after"] == "3600"


@pytest.mark.anyio
async def test_async_create_retries_with_the_same_key() -> None:
    script = Script(
        error(500, "internal_error", type="api_error", **{"Retry-After": "0"}),
        ok({"paymentIntent": intent_json(orderId="B-7")}, 201),
    )
    async with _async_client(script) as client:
        intent = await client.payment_intents.create(order_id="B-7", amount=7, currency="USDC")
    assert intent.order_id == "B-7" and script.body() == {"orderId": "B-7", "amount": "7", "currency": "USDC"}
    assert script.requests[0].headers["idempotency-key"] == script.requests[1].headers["idempotency-key"]


@pytest.mark.anyio
async def test_async_errors_carry_the_request_id() -> None:
    async with _async_client(Script(error(404, "resource_missing", param="id"))) as client:
        with pytest.raises(NotFoundError) as caught:
            await client.events.retrieve("missing")
    assert caught.value.request_id == "req_resource_missing"


@pytest.mark.anyio
async def test_async_pagination_awaited_or_iterated() -> None:
    intents = [intent_json(id=f"pi-{n}") for n in range(3)]
    script = Script(
        page(intents[:2], True), page(intents[2:], False), page(intents[:2], True), page(intents[2:], False)
    )
    async with _async_client(script) as client:
        first = await client.payment_intents.list(limit=2)
        assert isinstance(first, AsyncPage) and [pi.id for pi in first.data] == ["pi-0", "pi-1"]
        assert [pi.id async for pi in first.auto_paging_iter()] == ["pi-0", "pi-1", "pi-2"]
        iterated = [pi.id async for pi in client.payment_intents.list(limit=2).auto_paging_iter()]
    assert iterated == ["pi-0", "pi-1", "pi-2"]
    assert [request.url.params.get("starting_after") for request in script.requests] == [None, "pi-1", None, "pi-1"]


@pytest.mark.anyio
async def test_an_async_pager_sends_nothing_until_used() -> None:
    script = Script()
    async with _async_client(script) as client:
        client.events.list(type="payment_intent.succeeded")
    assert script.requests == []
