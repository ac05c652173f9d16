"""Orders paid by a signed EIP-3009 authorization that the platform relays, on a real platform and
the dev chain (SQLite; concurrent sends on PostgreSQL too): a browser wallet's gasless payment through
``POST /checkout/v1/payment-intents/:id/authorizations``, and agents paying an order's ``x402Url``
with our ``X402Auth`` and with the x402 Foundation's Python client. Every payer here holds the coin
and no ETH at all: the relayer pays the gas."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from eth_account import Account
from x402 import x402Client
from x402.http.clients.httpx import x402AsyncTransport
from x402.mechanisms.evm.exact import ExactEvmScheme
from x402.mechanisms.evm.signers import EthAccountSigner

from tests.harness import PlatformHarness
from x402mw.client import Wallet, X402Auth
from x402mw.evm.receipts import verify_receipt
from x402mw.platform.db import tables
from x402mw.protocol import decode_settlement_response
from x402mw.protocol.codec import encode_header
from x402mw.protocol.models import PaymentRequirements


def _origin(harness: PlatformHarness) -> str:
    return harness.url.removesuffix("/v1")


def _public(harness: PlatformHarness) -> httpx.Client:
    return httpx.Client(base_url=_origin(harness) + "/checkout/v1", timeout=60)


def _api(harness: PlatformHarness, key: str) -> httpx.Client:
    return httpx.Client(base_url=harness.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def _order(harness: PlatformHarness, key: str, amount: str = "3.25", **fields: Any) -> dict[str, Any]:
    with _api(harness, key) as api:
        reply = api.post(
            "/payment-intents", json={"orderId": f"o-{uuid.uuid4()}", "amount": amount, "currency": "USDC", **fields}
        )
    assert reply.status_code == 201, reply.text
    order: dict[str, Any] = reply.json()["paymentIntent"]
    return order


def _typed_data(harness: PlatformHarness, payment_id: str) -> dict[str, Any]:
    with _public(harness) as checkout:
        reply = checkout.post(
            f"/payment-intents/{payment_id}/attempts",
            json={"network": harness.network, "currency": "USDC", "method": "wallet"},
        )
    assert reply.status_code == 200, reply.text
    typed: dict[str, Any] = reply.json()["authorization"]
    return typed


def _sign(typed: dict[str, Any], wallet: Any, **changes: Any) -> dict[str, Any]:
    """What the page posts: the typed data's message with ``from``, signed as ``eth_signTypedData_v4`` does."""
    message = {**typed["message"], "from": wallet.address, **changes}
    signature = Account.sign_typed_data(wallet.key, full_message={**typed, "message": message}).signature
    return {"authorization": message, "signature": "0x" + bytes(signature).hex()}


def _relay(harness: PlatformHarness, payment_id: str, signed: dict[str, Any], **body: Any) -> httpx.Response:
    with _public(harness) as checkout:
        return checkout.post(
            f"/payment-intents/{payment_id}/authorizations",
            json={"network": harness.network, "currency": "USDC", **signed, **body},
        )


def _error(reply: httpx.Response, status: int) -> dict[str, Any]:
    assert reply.status_code == status, reply.text
    error: dict[str, Any] = reply.json()["error"]
    assert error["requestId"] == reply.headers["request-id"]
    return error


def _balance(harness: PlatformHarness, key: str) -> str:
    with _api(harness, key) as api:
        found = [b["available"] for b in api.get("/balances").json()["data"] if b["currency"] == "USDC"]
    return found[0] if found else "0"


def _relayed_payments(harness: PlatformHarness, payment_id: str) -> list[dict[str, Any]]:
    """The authorizations relayed for the order (``agent_payments`` rows tagged ``pi_<id>``)."""

    async def read(platform: Any) -> list[dict[str, Any]]:
        table = tables.agent_payments
        async with platform.engine.connect() as conn:
            rows = await conn.execute(table.select().where(table.c.challenge_id == f"pi_{payment_id}"))
            return [dict(row) for row in rows.mappings()]

    found: list[dict[str, Any]] = harness.server.call(read)
    return found


def _buyer(harness: PlatformHarness, key: str, amount: str) -> Any:
    wallet = Account.create()
    harness.fund(key, wallet.address, amount)
    assert harness.server.call(lambda p: harness.chain.rpc.request("eth_getBalance", [wallet.address, "latest"])) in (
        "0x0",
        "0x",
    ), "the buyer holds no ETH"
    return wallet


def test_a_wallets_signed_authorization_pays_the_order_without_gas(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant()
    order = _order(dev_platform, key, amount="3.25")
    wallet = _buyer(dev_platform, key, "3.25")
    signed = _sign(_typed_data(dev_platform, order["id"]), wallet)
    reply = _relay(dev_platform, f"pi_{order['id']}", signed)
    assert reply.status_code == 200, reply.text
    paid = reply.json()
    assert paid["object"] == "checkout_payment_intent"
    assert (paid["status"], paid["amountReceived"], paid["amountDue"]) == ("succeeded", "3.25", "0")
    assert dev_platform.balance(wallet.address) == 0
    assert _balance(dev_platform, key) == "3.25"
    [relayed] = _relayed_payments(dev_platform, order["id"])
    assert relayed["status"] == "settled" and relayed["transaction"] == paid["txHash"]
    assert relayed["merchant_id"] is None  # an order payment, not a metered agent payment
    # the same authorization again, to the same endpoint: the order as it is, nothing credited twice
    again = _relay(dev_platform, order["id"], signed)
    assert again.status_code == 200, again.text
    assert (again.json()["status"], again.json()["txHash"]) == ("succeeded", paid["txHash"])
    assert _balance(dev_platform, key) == "3.25"
    assert len(_relayed_payments(dev_platform, order["id"])) == 1
    with _api(dev_platform, key) as api:
        seen = api.get(f"/payment-intents/{order['id']}").json()["paymentIntent"]
    assert (seen["status"], seen["payer"], seen["amount"]) == ("succeeded", wallet.address, "3.25")


def test_foreign_replayed_and_malformed_authorizations_are_refused_and_nothing_moves(
    dev_platform: PlatformHarness,
) -> None:
    _, key, _ = dev_platform.merchant()
    order = _order(dev_platform, key, amount="2", acceptedCurrencies=["USDC", "EURC"])
    other = _order(dev_platform, key, amount="2")
    wallet = _buyer(dev_platform, key, "4")
    typed = _typed_data(dev_platform, order["id"])
    other_typed = _typed_data(dev_platform, other["id"])
    eurc = dev_platform.chain.network.assets["EURC"].address
    stranger = Account.create()
    cases: list[tuple[dict[str, Any], dict[str, Any], int, str, str]] = [
        # another order's authorization (to its deposit address)
        (_sign(other_typed, wallet), {}, 409, "authorization_wrong_recipient", "authorization.to"),
        # another amount
        (_sign(typed, wallet, value="1000000"), {}, 409, "authorization_wrong_amount", "authorization.value"),
        # signed by someone else than `from`
        (
            {**_sign(typed, stranger), "authorization": {**typed["message"], "from": wallet.address}},
            {},
            409,
            "authorization_signature_invalid",
            "signature",
        ),
        # expired
        (_sign(typed, wallet, validBefore="1"), {}, 409, "authorization_expired", "authorization.validBefore"),
        # signed for EURC, posted as USDC: not the USDC domain's signature
        (
            _sign({**typed, "domain": {**typed["domain"], "verifyingContract": eurc}}, wallet),
            {},
            409,
            "authorization_signature_invalid",
            "signature",
        ),
        # a coin this order does not accept / a network the platform does not serve
        (_sign(typed, wallet), {"currency": "USDT"}, 409, "unsupported_currency", "currency"),
        (_sign(typed, wallet), {"network": "eip155:1"}, 400, "unsupported_chain", "network"),
        # garbage in every field
        ({**_sign(typed, wallet), "signature": "0x1234"}, {}, 400, "parameter_invalid", "signature"),
        (
            {**_sign(typed, wallet), "authorization": {**typed["message"], "from": "nope"}},
            {},
            400,
            "parameter_invalid",
            "authorization.from",
        ),
        (_garbled(typed, wallet, value="-1"), {}, 400, "parameter_invalid", "authorization.value"),
        (_garbled(typed, wallet, value=1.5), {}, 400, "parameter_invalid", "authorization.value"),
        (_garbled(typed, wallet, nonce="0x12"), {}, 400, "parameter_invalid", "authorization.nonce"),
        (_garbled(typed, wallet, validBefore=None), {}, 400, "parameter_invalid", "authorization.validBefore"),
        (_sign(typed, wallet), {"tip": 1}, 400, "parameter_unknown", "tip"),
    ]
    for signed, body, status, code, param in cases:
        error = _error(_relay(dev_platform, order["id"], signed, **body), status)
        assert (error["code"], error["param"]) == (code, param), (code, error)
    missing = _error(_relay(dev_platform, str(uuid.uuid4()), _sign(typed, wallet)), 404)
    assert missing["code"] == "resource_missing"
    assert dev_platform.balance(wallet.address) == 4_000_000, "nothing was sent"
    assert _relayed_payments(dev_platform, order["id"]) == []
    # the right one pays; a second authorization for the paid order is refused before anything moves
    assert _relay(dev_platform, order["id"], _sign(typed, wallet)).json()["status"] == "succeeded"
    second = _sign(_typed_data_of_paid(dev_platform, typed), wallet)
    assert _error(_relay(dev_platform, order["id"], second), 409)["code"] == "payment_intent_unexpected_state"
    assert dev_platform.balance(wallet.address) == 2_000_000
    assert _balance(dev_platform, key) == "2.00"


def _garbled(typed: dict[str, Any], wallet: Any, **changes: Any) -> dict[str, Any]:
    signed = _sign(typed, wallet)
    return {**signed, "authorization": {**signed["authorization"], **changes}}


def _typed_data_of_paid(harness: PlatformHarness, typed: dict[str, Any]) -> dict[str, Any]:
    """The same terms with a fresh nonce (attempts refuses a paid order, so a payer makes it up)."""
    return {**typed, "message": {**typed["message"], "nonce": "0x" + uuid.uuid4().hex * 2}}


def test_a_cancelled_order_takes_no_authorization(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant()
    order = _order(dev_platform, key, amount="1")
    wallet = _buyer(dev_platform, key, "1")
    typed = _typed_data(dev_platform, order["id"])
    with _api(dev_platform, key) as api:
        assert api.post(f"/payment-intents/{order['id']}/cancel").status_code == 200
    error = _error(_relay(dev_platform, order["id"], _sign(typed, wallet)), 409)
    assert error["code"] == "payment_intent_unexpected_state"
    assert dev_platform.balance(wallet.address) == 1_000_000


def _decoded(header: str) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(base64.b64decode(header))
    return decoded


def test_an_agent_pays_the_orders_x402_url_once(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant("Acme Books")
    order = _order(dev_platform, key, amount="0.25")
    assert order["x402Url"] == f"{_origin(dev_platform)}/x402/pay/pi_{order['id']}"
    agent = Account.create()
    dev_platform.fund(key, agent.address, "1")
    with httpx.Client(timeout=60) as anonymous:
        unpaid = anonymous.get(order["x402Url"])
    assert unpaid.status_code == 402, unpaid.text
    required = _decoded(unpaid.headers["PAYMENT-REQUIRED"])
    [offer] = required["accepts"]
    assert (offer["amount"], offer["asset"], offer["network"]) == ("250000", dev_platform.usdc, dev_platform.network)
    assert offer["extra"]["paymentId"] == f"pi_{order['id']}"
    auth = X402Auth(Wallet(agent.key), max_amount="0.25", receipt_signer=dev_platform.platform.receipt_address)
    with httpx.Client(auth=auth, timeout=60) as client:
        paid = client.get(order["x402Url"])
    assert paid.status_code == 200, paid.text
    assert (paid.json()["status"], paid.json()["amountReceived"]) == ("succeeded", "0.25")
    settlement = decode_settlement_response(paid.headers["PAYMENT-RESPONSE"])
    receipt = settlement.receipt or {}
    assert verify_receipt(receipt, dev_platform.platform.receipt_address)
    assert (receipt["challengeId"], receipt["amount"], receipt["payTo"]) == (
        f"pi_{order['id']}",
        "250000",
        offer["payTo"],
    )
    assert [p.verified for p in auth.payments] == [True]
    assert _balance(dev_platform, key) == "0.25"
    # a paid order offers nothing more: 409, no PAYMENT-REQUIRED, nothing signed or moved
    second = X402Auth(Wallet(agent.key), max_amount="0.25")
    with httpx.Client(auth=second, timeout=60) as client:
        again = client.get(order["x402Url"])
    assert again.status_code == 409 and "PAYMENT-REQUIRED" not in again.headers
    assert again.json()["error"]["code"] == "payment_intent_unexpected_state"
    assert second.payments == [] and not second.spent
    # the same signature again answers the first receipt
    signature = paid.request.headers["PAYMENT-SIGNATURE"]
    with httpx.Client(timeout=60) as client:
        replay = client.get(order["x402Url"], headers={"PAYMENT-SIGNATURE": signature})
    assert replay.status_code == 200, replay.text
    assert decode_settlement_response(replay.headers["PAYMENT-RESPONSE"]).receipt == receipt
    assert dev_platform.balance(agent.address) == 750_000
    assert _balance(dev_platform, key) == "0.25"
    with _api(dev_platform, key) as api:
        assert api.get("/agent/usage").json()["usage"]["settlements"] == 0  # not a metered agent sale


def test_the_x402_foundation_client_pays_an_order(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant()
    order = _order(dev_platform, key, amount="0.04")
    agent = Account.create()
    dev_platform.fund(key, agent.address, "0.04")
    client = x402Client()
    client.register("eip155:*", ExactEvmScheme(signer=EthAccountSigner(agent)))
    client.set_spend_controls(
        {
            "allowed_assets": [
                {"network": dev_platform.network, "asset": dev_platform.usdc, "max_amount_per_payment": "40000"}
            ]
        }
    )

    async def pay() -> httpx.Response:
        transport = x402AsyncTransport(client, httpx.AsyncHTTPTransport())
        async with httpx.AsyncClient(transport=transport, timeout=60) as http:
            return await http.get(order["x402Url"])

    paid = asyncio.run(pay())
    assert paid.status_code == 200, paid.text
    assert paid.json()["status"] == "succeeded"
    assert _decoded(paid.headers["PAYMENT-RESPONSE"])["success"] is True
    assert dev_platform.balance(agent.address) == 0
    assert _balance(dev_platform, key) == "0.04"


def test_an_x402_payment_of_the_wrong_amount_gets_a_new_offer_and_moves_nothing(
    dev_platform: PlatformHarness,
) -> None:
    _, key, _ = dev_platform.merchant()
    order = _order(dev_platform, key, amount="0.5")
    agent = Account.create()
    dev_platform.fund(key, agent.address, "1")
    with httpx.Client(timeout=60) as client:
        required = _decoded(client.get(order["x402Url"]).headers["PAYMENT-REQUIRED"])
        [offer] = required["accepts"]
        cheap = {**offer, "amount": "100000"}
        wallet = Wallet(agent.key)
        header = encode_header(wallet.sign_payment(PaymentRequirements.model_validate(cheap)))
        reply = client.get(order["x402Url"], headers={"PAYMENT-SIGNATURE": header})
        assert reply.status_code == 402, reply.text
        assert reply.json()["error"] == "invalid_exact_evm_payload_authorization_value"
        assert _decoded(reply.headers["PAYMENT-REQUIRED"])["accepts"][0]["amount"] == "500000"
        for bad in ["garbage", base64.b64encode(b'{"x402Version": 2}').decode()]:
            refused = client.get(order["x402Url"], headers={"PAYMENT-SIGNATURE": bad})
            assert refused.status_code == 402 and refused.json()["error"] == "invalid_payload", refused.text
        for unknown in [f"pi_{uuid.uuid4()}", "pi_nope"]:
            missing = client.get(f"{_origin(dev_platform)}/x402/pay/{unknown}")
            assert _error(missing, 404)["code"] == "resource_missing"
    assert dev_platform.balance(agent.address) == 1_000_000
    assert _relayed_payments(dev_platform, order["id"]) == []


@pytest.mark.both_databases  # concurrent sends: each database's locking
def test_concurrent_sends_of_one_authorization_and_of_two_pay_the_order_once(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant()
    order = _order(dev_platform, key, amount="1")
    first, second = _buyer(dev_platform, key, "1"), _buyer(dev_platform, key, "1")
    typed = _typed_data(dev_platform, order["id"])
    mine, theirs = _sign(typed, first), _sign(_typed_data_of_paid(dev_platform, typed), second)
    sends = [mine, mine, theirs, mine, theirs]
    with ThreadPoolExecutor(len(sends)) as pool:
        replies = list(pool.map(lambda signed: _relay(dev_platform, order["id"], signed), sends))
    statuses = sorted(reply.status_code for reply in replies)
    assert set(statuses) <= {200, 409}, [r.text for r in replies]
    paid_by = {first.address: 1_000_000 - dev_platform.balance(first.address)}
    paid_by[second.address] = 1_000_000 - dev_platform.balance(second.address)
    assert sorted(paid_by.values()) == [0, 1_000_000], "exactly one wallet paid, once"
    winner = next(address for address, paid in paid_by.items() if paid)
    for signed, reply in zip(sends, replies, strict=True):
        if signed["authorization"]["from"] == winner:
            assert reply.status_code == 200 and reply.json()["status"] == "succeeded", reply.text
        else:
            assert reply.json()["error"]["code"] in ("payment_in_progress", "payment_intent_unexpected_state")
    assert _balance(dev_platform, key) == "1.00"
    assert len([p for p in _relayed_payments(dev_platform, order["id"]) if p["status"] == "settled"]) == 1
