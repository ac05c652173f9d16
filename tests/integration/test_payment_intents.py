"""Payment orders through the merchant API of real platforms (on SQLite; concurrent creations on
PostgreSQL too): creation and validation, reads, tenant isolation, cancel, expiry, events."""

from __future__ import annotations

import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from tests.harness import PlatformHarness, sqlite_only
from tests.waiting import eventually
from x402mw.platform.db import tables
from x402mw.platform.runtime import Platform
from x402mw.platform.services.payment_intents import expire_due_payment_intents


def _api(harness: PlatformHarness, key: str) -> httpx.Client:
    return httpx.Client(base_url=harness.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def _merchant_api(harness: PlatformHarness) -> tuple[str, httpx.Client]:
    merchant_id, key, _ = harness.merchant()
    return merchant_id, _api(harness, key)


def _body(**changes: Any) -> dict[str, Any]:
    return {"orderId": f"order-{uuid.uuid4().hex[:12]}", "amount": "10.00", "currency": "USDC"} | changes


def _raw(body: dict[str, Any], amount: str) -> bytes:
    """``body`` as JSON with ``amount`` written as a bare JSON number."""
    return json.dumps(body | {"amount": "@"}).replace('"@"', amount).encode()


def _create(api: httpx.Client, **changes: Any) -> dict[str, Any]:
    reply = api.post("/payment-intents", json=_body(**changes))
    assert reply.status_code == 201, reply.text
    intent: dict[str, Any] = reply.json()["paymentIntent"]
    return intent


def _events(harness: PlatformHarness, merchant_id: str) -> list[tuple[str, dict[str, Any]]]:
    table = tables.events

    async def query(platform: Platform) -> list[tuple[str, dict[str, Any]]]:
        async with platform.engine.connect() as conn:
            rows = await conn.execute(
                select(table.c.type, table.c.data)
                .where(table.c.merchant_id == merchant_id)
                .order_by(table.c.created_at, table.c.type)
            )
            return [(row.type, row.data) for row in rows]

    return harness.server.call(query)


def _error(reply: httpx.Response, status: int, code: str, param: str | None = None) -> dict[str, Any]:
    assert reply.status_code == status, reply.text
    error: dict[str, Any] = reply.json()["error"]
    assert error["code"] == code, error
    assert error["requestId"] == reply.headers["request-id"]
    if param is not None:
        assert error.get("param") == param, error
    return error


def test_create_with_every_field_and_read_it_back(dev_platform: PlatformHarness) -> None:
    merchant_id, api = _merchant_api(dev_platform)
    expires = (datetime.now(UTC) + timedelta(hours=2)).replace(microsecond=123456)
    body = {
        "orderId": "order-1001",
        "amount": "1234.560000",
        "currency": "USDC",
        "description": "Two tickets, row 7",
        "acceptedCurrencies": ["USDC", "EURC"],
        "customer": {"email": "buyer@example.com", "name": "Ada Buyer"},
        "successUrl": "https://shop.example/thanks?o=1001",
        "cancelUrl": "https://shop.example/cart",
        "metadata": {"cart": "42", "fixed_transfer_customer_id": "cust-every-field"},
        "paymentMethods": {"wallet": False, "transfer": True, "transferDefaultOpen": True},
        "expiresAt": expires.astimezone(timezone(timedelta(hours=2))).isoformat(),
    }
    with api:
        reply = api.post("/payment-intents", json=body)
        assert reply.status_code == 201, reply.text
        intent = reply.json()["paymentIntent"]
        assert set(reply.json()) == {"paymentIntent"}
        assert intent["paymentId"] == intent["id"]
        assert str(uuid.UUID(intent["id"])) == intent["id"], "a bare UUID"
        assert intent["checkoutUrl"] == f"{dev_platform.platform.settings.checkout_url_base}/pi_{intent['id']}"
        assert intent["checkoutUrl"].endswith(f"/checkout/pi_{intent['id']}")
        created_at = intent.pop("createdAt")
        assert created_at == intent.pop("updatedAt")
        assert created_at.endswith("Z") and len(created_at) == len("2026-01-01T00:00:00.000Z")
        assert intent == {
            "paymentId": intent["id"],
            "id": intent["id"],
            "object": "payment_intent",
            "status": "requires_payment",
            "orderId": "order-1001",
            "amount": "1234.560000",  # as sent (spec 2.1: echo)
            "amountReceived": "0",
            "currency": "USDC",
            "acceptedCurrencies": ["USDC", "EURC"],
            "paymentMethods": {"wallet": False, "transfer": True, "transferDefaultOpen": True},
            "checkoutUrl": intent["checkoutUrl"],
            "x402Url": dev_platform.url.removesuffix("/v1") + f"/x402/pay/pi_{intent['id']}",
            "paymentLinkId": None,
            "description": "Two tickets, row 7",
            "successUrl": "https://shop.example/thanks?o=1001",
            "cancelUrl": "https://shop.example/cart",
            "customer": {"email": "buyer@example.com", "name": "Ada Buyer"},
            "metadata": {"cart": "42", "fixed_transfer_customer_id": "cust-every-field"},
            "exceptions": [],
            "network": None,
            "paidCurrency": None,
            "payer": None,
            "txHash": None,
            "paidAt": None,
            "expiresAt": expires.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "livemode": False,
        }
        full = {**intent, "createdAt": created_at, "updatedAt": created_at}

        got = api.get(f"/payment-intents/{intent['id']}")
        assert got.status_code == 200, got.text
        assert got.json() == {"paymentIntent": full}

        page = api.get("/payment-intents").json()
        assert page == {"object": "list", "data": [full], "hasMore": False}

        by_order = api.get("/payment-intents", params={"orderId": "order-1001"}).json()
        assert by_order == {"object": "list", "data": [full], "hasMore": False}
        none = api.get("/payment-intents", params={"orderId": "order-9999"}).json()
        assert none == {"object": "list", "data": [], "hasMore": False}

    assert _events(dev_platform, merchant_id) == [("payment_intent.created", {"paymentIntent": full})]


def test_defaults_and_the_legacy_flat_customer_fields(dev_platform: PlatformHarness) -> None:
    _, api = _merchant_api(dev_platform)
    with api:
        plain = _create(api, currency="EURC")
        assert plain["acceptedCurrencies"] == ["EURC"]
        assert plain["paymentMethods"] == {"wallet": True, "transfer": True, "transferDefaultOpen": False}
        assert plain["customer"] == {"email": None, "name": None}
        assert plain["metadata"] == {}
        assert plain["successUrl"] is None and plain["cancelUrl"] is None and plain["expiresAt"] is None

        legacy = _create(api, customerEmail="old@example.com", customerName="Old Style")
        assert legacy["customer"] == {"email": "old@example.com", "name": "Old Style"}
        both = _create(api, customer={"email": "same@example.com"}, customerEmail="same@example.com", customerName="N")
        assert both["customer"] == {"email": "same@example.com", "name": "N"}

        reply = api.post("/payment-intents", json=_body(customer={"name": "A"}, customerName="B"))
        _error(reply, 400, "parameter_invalid", "customerName")


@pytest.mark.parametrize(
    ("number", "amount"),
    [
        ("12.5", "12.5"),
        ("3", "3"),
        ("0.000001", "0.000001"),
        ("1e3", "1000"),
        ("2.50000000", "2.5"),
        ("1E-6", "0.000001"),
        ("7.0", "7"),
    ],
)
def test_json_number_amounts_are_read_exactly(dev_platform: PlatformHarness, number: str, amount: str) -> None:
    _, api = _merchant_api(dev_platform)
    with api:
        reply = api.post(
            "/payment-intents", content=_raw(_body(), number), headers={"content-type": "application/json"}
        )
        assert reply.status_code == 201, reply.text
        assert reply.json()["paymentIntent"]["amount"] == amount
        assert _create(api, amount="999999999.999999")["amount"] == "999999999.999999"
        assert _create(api, amount="1000000000")["amount"] == "1000000000"


def test_expires_at_takes_any_rfc_3339_time_in_the_future(dev_platform: PlatformHarness) -> None:
    _, api = _merchant_api(dev_platform)
    with api:
        assert _create(api, expiresAt="2099-01-01t00:00:00z")["expiresAt"] == "2099-01-01T00:00:00.000Z"
        # past the last instant Python can hold in UTC: the order expires then
        assert _create(api, expiresAt="9999-12-31T23:59:59-05:00")["expiresAt"] == "9999-12-31T23:59:59.999Z"


BAD_INPUTS: list[tuple[str, dict[str, Any], str, str]] = [
    ("missing orderId", {"orderId": None}, "orderId", "parameter_missing"),
    ("empty orderId", {"orderId": ""}, "orderId", "parameter_invalid"),
    ("long orderId", {"orderId": "x" * 201}, "orderId", "parameter_invalid"),
    ("number orderId", {"orderId": 5}, "orderId", "parameter_invalid"),
    ("missing amount", {"amount": None}, "amount", "parameter_missing"),
    ("bool amount", {"amount": True}, "amount", "parameter_invalid"),
    ("text amount", {"amount": "ten"}, "amount", "parameter_invalid"),
    ("object amount", {"amount": {"value": "1"}}, "amount", "parameter_invalid"),
    ("zero amount", {"amount": "0"}, "amount", "parameter_invalid"),
    ("negative amount", {"amount": "-1.50"}, "amount", "parameter_invalid"),
    ("seven decimals", {"amount": "0.0000001"}, "amount", "parameter_invalid"),
    ("too large", {"amount": "1000000000.000001"}, "amount", "parameter_invalid"),
    ("exponent", {"amount": "1e3"}, "amount", "parameter_invalid"),
    ("infinite", {"amount": "Infinity"}, "amount", "parameter_invalid"),
    # one ASCII decimal grammar for amounts: these were all read as numbers before
    ("amount in spaces", {"amount": " 1 "}, "amount", "parameter_invalid"),
    ("full-width digit", {"amount": "１"}, "amount", "parameter_invalid"),
    ("trailing point", {"amount": "1."}, "amount", "parameter_invalid"),
    ("leading point", {"amount": ".5"}, "amount", "parameter_invalid"),
    ("plus sign", {"amount": "+1"}, "amount", "parameter_invalid"),
    ("leading zero", {"amount": "01"}, "amount", "parameter_invalid"),
    ("seven decimals written", {"amount": "1.0000000"}, "amount", "parameter_invalid"),
    ("unknown currency", {"currency": "BTC"}, "currency", "parameter_invalid"),
    ("lower-case currency", {"currency": "usdc"}, "currency", "parameter_invalid"),
    ("accepted without currency", {"acceptedCurrencies": ["EURC"]}, "acceptedCurrencies", "parameter_invalid"),
    ("accepted unknown", {"acceptedCurrencies": ["USDC", "DAI"]}, "acceptedCurrencies.1", "parameter_invalid"),
    ("accepted not a list", {"acceptedCurrencies": "USDC"}, "acceptedCurrencies", "parameter_invalid"),
    ("accepted empty", {"acceptedCurrencies": []}, "acceptedCurrencies", "parameter_invalid"),
    ("51 metadata keys", {"metadata": {f"k{i}": "v" for i in range(51)}}, "metadata", "parameter_invalid"),
    ("long metadata key", {"metadata": {"k" * 41: "v"}}, "metadata", "parameter_invalid"),
    ("long metadata value", {"metadata": {"k": "v" * 501}}, "metadata", "parameter_invalid"),
    ("number metadata value", {"metadata": {"k": 1}}, "metadata", "parameter_invalid"),
    ("nested metadata value", {"metadata": {"k": {"a": "b"}}}, "metadata", "parameter_invalid"),
    ("metadata list", {"metadata": ["k"]}, "metadata", "parameter_invalid"),
    ("ftp successUrl", {"successUrl": "ftp://shop.example/x"}, "successUrl", "parameter_invalid"),
    ("relative successUrl", {"successUrl": "/thanks"}, "successUrl", "parameter_invalid"),
    ("hostless cancelUrl", {"cancelUrl": "https://"}, "cancelUrl", "parameter_invalid"),
    ("long cancelUrl", {"cancelUrl": "https://shop.example/" + "a" * 2030}, "cancelUrl", "parameter_invalid"),
    ("number successUrl", {"successUrl": 7}, "successUrl", "parameter_invalid"),
    ("expiresAt in the past", {"expiresAt": "2020-01-01T00:00:00Z"}, "expiresAt", "parameter_invalid"),
    ("expiresAt without timezone", {"expiresAt": "2099-01-01T00:00:00"}, "expiresAt", "parameter_invalid"),
    ("expiresAt not a date", {"expiresAt": "tomorrow"}, "expiresAt", "parameter_invalid"),
    ("expiresAt a number", {"expiresAt": 4102444800}, "expiresAt", "parameter_invalid"),
    ("bad customer email", {"customer": {"email": "nobody"}}, "customer.email", "parameter_invalid"),
    ("unknown customer field", {"customer": {"phone": "1"}}, "customer.phone", "parameter_unknown"),
    ("customer not an object", {"customer": "Ada"}, "customer", "parameter_invalid"),
    ("bad legacy email", {"customerEmail": "x@y"}, "customerEmail", "parameter_invalid"),
    (
        "no payment method",
        {"paymentMethods": {"wallet": False, "transfer": False}},
        "paymentMethods",
        "parameter_invalid",
    ),
    ("method not a bool", {"paymentMethods": {"wallet": "yes"}}, "paymentMethods.wallet", "parameter_invalid"),
    (
        "open panel without transfer",
        {"paymentMethods": {"transfer": False, "transferDefaultOpen": True}},
        "paymentMethods",
        "parameter_invalid",
    ),
    ("unknown method", {"paymentMethods": {"card": True}}, "paymentMethods.card", "parameter_unknown"),
    ("unknown field", {"amountMinor": "100"}, "amountMinor", "parameter_unknown"),
]


@pytest.mark.parametrize(
    ("changes", "param", "code"), [case[1:] for case in BAD_INPUTS], ids=[case[0] for case in BAD_INPUTS]
)
def test_bad_input_is_a_400_naming_its_param(
    dev_platform: PlatformHarness, changes: dict[str, Any], param: str, code: str
) -> None:
    merchant_id, api = _merchant_api(dev_platform)
    body = {k: v for k, v in (_body() | changes).items() if v is not None}
    with api:
        _error(api.post("/payment-intents", json=body), 400, code, param)
        assert api.get("/payment-intents").json()["data"] == []
    assert _events(dev_platform, merchant_id) == []


@pytest.mark.parametrize("number", ["0.0000001", "0", "-3", "1e-7", "1000000001", "1e10", "0.0"])
def test_bad_json_number_amounts(dev_platform: PlatformHarness, number: str) -> None:
    _, api = _merchant_api(dev_platform)
    with api:
        reply = api.post(
            "/payment-intents", content=_raw(_body(), number), headers={"content-type": "application/json"}
        )
        _error(reply, 400, "parameter_invalid", "amount")


@pytest.mark.parametrize(
    ("content", "code"),
    [(b'{"orderId": "a", "amount": ', "invalid_json"), (b"[1, 2]", "invalid_json"), (b"", "body_missing")],
)
def test_malformed_bodies(dev_platform: PlatformHarness, content: bytes, code: str) -> None:
    _, api = _merchant_api(dev_platform)
    with api:
        reply = api.post("/payment-intents", content=content, headers={"content-type": "application/json"})
        _error(reply, 400, code)


@sqlite_only  # never reaches the database
def test_an_api_key_is_required(dev_platform: PlatformHarness) -> None:
    with httpx.Client(base_url=dev_platform.url, timeout=30) as anonymous:
        _error(anonymous.post("/payment-intents", json=_body()), 401, "api_key_missing")
        _error(anonymous.get("/payment-intents"), 401, "api_key_missing")


def test_order_id_conflict(dev_platform: PlatformHarness) -> None:
    _, api = _merchant_api(dev_platform)
    _, other = _merchant_api(dev_platform)
    with api, other:
        first = _create(api, orderId="dup-1")
        error = _error(api.post("/payment-intents", json=_body(orderId="dup-1")), 409, "order_id_conflict", "orderId")
        assert "dup-1" in error["message"]
        assert _create(other, orderId="dup-1")["id"] != first["id"], "order ids are unique per merchant only"
        assert [i["id"] for i in api.get("/payment-intents", params={"orderId": "dup-1"}).json()["data"]] == [
            first["id"]
        ]


@pytest.mark.both_databases  # concurrent creates: each database's unique constraints and locking
def test_concurrent_creates_with_one_order_id(dev_platform: PlatformHarness) -> None:
    merchant_id, key, _ = dev_platform.merchant()
    body = _body(orderId="race-1")

    def post(_: int) -> httpx.Response:
        with _api(dev_platform, key) as api:
            return api.post("/payment-intents", json=body)

    with ThreadPoolExecutor(10) as pool:
        replies = list(pool.map(post, range(10)))
    statuses = sorted(reply.status_code for reply in replies)
    assert statuses == [201] + [409] * 9, [reply.text for reply in replies]
    assert {reply.json()["error"]["code"] for reply in replies if reply.status_code == 409} == {"order_id_conflict"}
    with _api(dev_platform, key) as api:
        assert len(api.get("/payment-intents").json()["data"]) == 1
    assert [kind for kind, _ in _events(dev_platform, merchant_id)] == ["payment_intent.created"]


def test_tenant_isolation(dev_platform: PlatformHarness) -> None:
    _, mine = _merchant_api(dev_platform)
    _, theirs = _merchant_api(dev_platform)
    with mine, theirs:
        intent = _create(mine, orderId="secret-order")
        _create(theirs)
        for path in [f"/payment-intents/{intent['id']}", f"/payment-intents/{intent['id']}/cancel"]:
            method = theirs.get if not path.endswith("cancel") else theirs.post
            _error(method(path), 404, "resource_missing", "id")
        listed = theirs.get("/payment-intents", params={"limit": 100}).json()["data"]
        assert intent["id"] not in {i["id"] for i in listed} and len(listed) == 1
        assert theirs.get("/payment-intents", params={"orderId": "secret-order"}).json()["data"] == []
        _error(theirs.get("/payment-intents", params={"starting_after": intent["id"]}), 404, "resource_missing")
        assert mine.get(f"/payment-intents/{intent['id']}").json()["paymentIntent"]["status"] == "requires_payment"
        assert mine.get(f"/payment-intents/{intent['id'].upper()}").json()["paymentIntent"]["id"] == intent["id"]
        # the id as its checkoutUrl shows it, pi_<uuid>, names the same order (and only for its merchant)
        assert mine.get(f"/payment-intents/pi_{intent['id']}").json()["paymentIntent"]["id"] == intent["id"]
        _error(theirs.get(f"/payment-intents/pi_{intent['id']}"), 404, "resource_missing", "id")
        for bad in [
            str(uuid.uuid4()),
            "pi_" + str(uuid.uuid4()),
            "pi_pi_" + intent["id"],
            "PI_" + intent["id"],
            "not-a-uuid",
            intent["id"].replace("-", ""),
            "x" * 300,
        ]:
            _error(mine.get(f"/payment-intents/{bad}"), 404, "resource_missing")
            _error(mine.post(f"/payment-intents/{bad}/cancel"), 404, "resource_missing")


def test_pagination(dev_platform: PlatformHarness) -> None:
    _, api = _merchant_api(dev_platform)
    with api:
        ids = [_create(api)["id"] for _ in range(3)]
        first = api.get("/payment-intents", params={"limit": 2}).json()
        assert [i["id"] for i in first["data"]] == ids[::-1][:2] and first["hasMore"] is True
        rest = api.get("/payment-intents", params={"limit": 2, "starting_after": ids[1]}).json()
        assert [i["id"] for i in rest["data"]] == [ids[0]] and rest["hasMore"] is False
        _error(api.get("/payment-intents", params={"orderId": "x" * 201}), 400, "parameter_invalid", "orderId")
        # both cursors: the objects between them, newest first
        more = [_create(api)["id"] for _ in range(2)]  # ids, then more: oldest first
        between = api.get("/payment-intents", params={"starting_after": more[1], "ending_before": ids[1]}).json()
        assert [i["id"] for i in between["data"]] == [more[0], ids[2]] and between["hasMore"] is False
        window = api.get("/payment-intents", params={"starting_after": more[1], "ending_before": ids[0], "limit": 2})
        assert [i["id"] for i in window.json()["data"]] == [more[0], ids[2]] and window.json()["hasMore"] is True
        # cursors are ids, limits ASCII numbers: anything else is a 400 naming it
        for params, param in (
            ({"starting_after": "not-an-id"}, "starting_after"),
            ({"ending_before": ""}, "ending_before"),
            ({"limit": "١"}, "limit"),
            ({"limit": "0"}, "limit"),
        ):
            _error(api.get("/payment-intents", params=params), 400, "parameter_invalid", param)
        # a well-formed id the merchant has no object with is a 404; the case of an id does not matter
        _error(api.get("/payment-intents", params={"starting_after": str(uuid.uuid4())}), 404, "resource_missing")
        upper = api.get("/payment-intents", params={"starting_after": ids[1].upper()}).json()
        assert [i["id"] for i in upper["data"]] == [ids[0]]


def test_cancel_then_cancel_again(dev_platform: PlatformHarness) -> None:
    merchant_id, api = _merchant_api(dev_platform)
    with api:
        intent = _create(api)
        reply = api.post(f"/payment-intents/pi_{intent['id']}/cancel")  # pi_<uuid> as checkoutUrl shows it
        assert reply.status_code == 200, reply.text
        canceled = reply.json()["paymentIntent"]
        assert canceled["status"] == "canceled"
        assert canceled["updatedAt"] >= intent["updatedAt"]
        assert canceled == api.get(f"/payment-intents/{intent['id']}").json()["paymentIntent"]
        error = _error(api.post(f"/payment-intents/{intent['id']}/cancel"), 409, "payment_intent_unexpected_state")
        assert "canceled" in error["message"]
    assert _events(dev_platform, merchant_id) == [
        ("payment_intent.created", {"paymentIntent": intent}),
        ("payment_intent.canceled", {"paymentIntent": canceled}),
    ]


def test_expiry_at_expires_at(dev_platform: PlatformHarness) -> None:
    merchant_id, api = _merchant_api(dev_platform)
    expires = datetime.now(UTC) + timedelta(minutes=10)
    base = dev_platform.platform.settings.checkout_url_base
    with api:
        intent = _create(api, expiresAt=expires.isoformat())
        later = _create(api, expiresAt=(expires + timedelta(hours=1)).isoformat())
        forever = _create(api)

        early = dev_platform.server.call(
            lambda p: expire_due_payment_intents(p.engine, expires - timedelta(seconds=1), base)
        )
        assert early == 0
        assert dev_platform.server.call(lambda p: expire_due_payment_intents(p.engine, expires, base)) >= 1
        assert dev_platform.server.call(lambda p: expire_due_payment_intents(p.engine, expires, base)) == 0

        expired = api.get(f"/payment-intents/{intent['id']}").json()["paymentIntent"]
        assert expired["status"] == "expired"
        assert expired["updatedAt"] == expires.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        assert api.get(f"/payment-intents/{later['id']}").json()["paymentIntent"]["status"] == "requires_payment"
        assert api.get(f"/payment-intents/{forever['id']}").json()["paymentIntent"]["status"] == "requires_payment"
        _error(api.post(f"/payment-intents/{intent['id']}/cancel"), 409, "payment_intent_unexpected_state")
    events = _events(dev_platform, merchant_id)
    assert ("payment_intent.expired", {"paymentIntent": expired}) in events
    assert [kind for kind, _ in events].count("payment_intent.expired") == 1


def test_fixed_transfer_address_is_held_by_one_open_order(dev_platform: PlatformHarness) -> None:
    _, api = _merchant_api(dev_platform)
    _, other = _merchant_api(dev_platform)
    customer = {"fixed_transfer_customer_id": "cust-7"}
    with api, other:
        first = _create(api, metadata=customer)
        reply = api.post("/payment-intents", json=_body(metadata=customer))
        _error(reply, 409, "fixed_transfer_active_payment", "metadata.fixed_transfer_customer_id")
        _create(api, metadata={"fixed_transfer_customer_id": "cust-8"})
        _create(other, metadata=customer)  # another merchant's customer of the same id
        assert api.post(f"/payment-intents/{first['id']}/cancel").status_code == 200
        second = _create(api, metadata=customer)
        assert second["metadata"] == customer
        _error(api.post("/payment-intents", json=_body(metadata=customer)), 409, "fixed_transfer_active_payment")


@pytest.mark.both_databases  # concurrent creates: each database's locking
def test_concurrent_creations_with_one_key_make_one_order(dev_platform: PlatformHarness) -> None:
    merchant_id, api = _merchant_api(dev_platform)
    body, headers = _body(), {"Idempotency-Key": f"create-{uuid.uuid4()}"}
    with api, ThreadPoolExecutor(20) as pool:
        replies = list(pool.map(lambda _: api.post("/payment-intents", json=body, headers=headers), range(20)))
        # The key is written with the order: the duplicates wait for it and replay its answer.
        assert [reply.status_code for reply in replies] == [201] * 20
        assert {reply.content for reply in replies} == {replies[0].content}
        assert sum("idempotent-replayed" in reply.headers for reply in replies) == 19
        again = api.post("/payment-intents", json=body, headers=headers)
        assert (again.status_code, again.content) == (201, replies[0].content)
        assert len(api.get("/payment-intents").json()["data"]) == 1
    assert [kind for kind, _ in _events(dev_platform, merchant_id)] == ["payment_intent.created"]


def test_a_conflicting_order_id_is_replayed_as_the_conflict(dev_platform: PlatformHarness) -> None:
    _, api = _merchant_api(dev_platform)
    body = _body()
    with api:
        assert api.post("/payment-intents", json=body).status_code == 201
        headers = {"Idempotency-Key": f"create-{uuid.uuid4()}"}
        first = api.post("/payment-intents", json=body, headers=headers)
        _error(first, 409, "order_id_conflict", "orderId")
        again = api.post("/payment-intents", json=body, headers=headers)
        assert (again.status_code, again.headers["idempotent-replayed"]) == (409, "true")
        assert again.json()["error"]["code"] == "order_id_conflict"
        assert len(api.get("/payment-intents").json()["data"]) == 1


def test_a_refused_creation_is_replayed_and_a_key_from_another_request_is_refused(
    dev_platform: PlatformHarness,
) -> None:
    merchant_id, api = _merchant_api(dev_platform)
    bad, key = _body(amount="-1"), f"create-{uuid.uuid4()}"
    with api:
        first = api.post("/payment-intents", json=bad, headers={"Idempotency-Key": key})
        _error(first, 400, "parameter_invalid", "amount")
        again = api.post("/payment-intents", json=bad, headers={"Idempotency-Key": key})
        assert (again.status_code, again.headers["idempotent-replayed"]) == (400, "true")
        assert again.json()["error"]["code"] == "parameter_invalid"
        # a key first used on another endpoint is another request's key
        other = f"endpoint-{uuid.uuid4()}"
        endpoint = {
            "name": "Weather",
            "resourceUrl": "http://testserver/weather",
            "chainId": dev_platform.chain.chain_id,
            "currency": "USDC",
            "payoutAddress": "0x" + "11" * 20,
            "amountMinor": "10000",
        }
        assert api.post("/agent/endpoints", json=endpoint, headers={"Idempotency-Key": other}).status_code == 201
        reused = api.post("/payment-intents", json=_body(), headers={"Idempotency-Key": other})
        _error(reused, 400, "idempotency_key_reused")
        assert api.get("/payment-intents").json()["data"] == []
    assert _events(dev_platform, merchant_id) == []


def test_idempotency_key_replays_the_creation(dev_platform: PlatformHarness) -> None:
    merchant_id, api = _merchant_api(dev_platform)
    body = _body()
    headers = {"Idempotency-Key": f"create-{uuid.uuid4()}"}
    with api:
        first = api.post("/payment-intents", json=body, headers=headers)
        again = api.post("/payment-intents", json=body, headers=headers)
        assert first.status_code == again.status_code == 201
        assert again.headers["idempotent-replayed"] == "true"
        assert again.content == first.content  # the answer written with the order, byte for byte
        assert again.headers["content-type"] == first.headers["content-type"]
        assert again.headers["content-length"] == first.headers["content-length"]
        other = api.post("/payment-intents", json=_body(), headers=headers)
        _error(other, 400, "idempotency_key_reused")
        assert len(api.get("/payment-intents").json()["data"]) == 1
    assert [kind for kind, _ in _events(dev_platform, merchant_id)] == ["payment_intent.created"]


def test_the_platform_worker_expires_due_orders(dev_platform: PlatformHarness) -> None:
    merchant_id, api = _merchant_api(dev_platform)
    with api:
        intent = _create(api, expiresAt=(datetime.now(UTC) + timedelta(seconds=1)).isoformat())
        status = eventually(
            lambda: api.get(f"/payment-intents/{intent['id']}").json()["paymentIntent"]["status"],
            until=lambda status: status != "requires_payment",
            what=f"the worker to expire {intent['id']}",
        )
        assert status == "expired"
    assert [kind for kind, _ in _events(dev_platform, merchant_id)] == [
        "payment_intent.created",
        "payment_intent.expired",
    ]


def test_a_coin_no_chain_carries_is_refused_for_orders_links_and_plans(dev_platform: PlatformHarness) -> None:
    """The embedded dev chain carries USDC and EURC, not USDT: an order, a payment link or a plan in
    USDT (as its currency or among acceptedCurrencies) could never be paid, so it is not made."""
    merchant_id, api = _merchant_api(dev_platform)
    link = {"name": "Ticket", "amount": "1", "currency": "USDC"}
    plan = {"name": "Pro", "amount": "1", "currency": "USDC", "interval": "monthly"}
    cases = [
        ("/payment-intents", _body(currency="USDT"), "currency"),
        ("/payment-intents", _body(acceptedCurrencies=["USDC", "USDT"]), "acceptedCurrencies"),
        ("/payment-links", link | {"currency": "USDT"}, "currency"),
        ("/payment-links", link | {"acceptedCurrencies": ["USDT", "USDC"]}, "acceptedCurrencies"),
        ("/subscription-plans", plan | {"currency": "USDT"}, "currency"),
    ]
    with api:
        for path, body, param in cases:
            reply = api.post(path, json=body)
            assert reply.status_code == 400, (path, body, reply.text)
            error = reply.json()["error"]
            assert (error["type"], error["code"], error["param"]) == (
                "invalid_request_error",
                "currency_unavailable",
                param,
            )
            assert error["message"].endswith("Coins it takes: EURC, USDC") and "USDT" in error["message"]
            assert error["requestId"] == reply.headers["request-id"]
        assert api.get("/payment-intents").json()["data"] == []
        assert api.get("/payment-links").json()["data"] == []
        assert api.get("/subscription-plans").json()["data"] == []
        assert api.post("/payment-intents", json=_body(acceptedCurrencies=["USDC", "EURC"])).status_code == 201
    assert [kind for kind, _ in _events(dev_platform, merchant_id)] == ["payment_intent.created"]
