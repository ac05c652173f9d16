"""The x402 ``payment-identifier`` extension end to end (agent -> seller app -> platform -> dev
chain, SQLite and PostgreSQL): the seller declares it, ``X402Auth`` sends one id per logical request,
a retry after a lost answer gets the stored answer and nothing is charged twice (the on-chain
transfers are counted), another payment under a used id is a 409."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import httpx
import pytest
from x402.extensions.payment_identifier import extract_payment_identifier, is_payment_identifier_extension
from x402.schemas import PaymentPayload as X402PaymentPayload

from tests.harness import Deployment, PlatformHarness
from tests.sellers import asgi_transport, starlette_app
from x402mw.client import X402Auth
from x402mw.evm.keccak import keccak256
from x402mw.platform.clock import Clock
from x402mw.platform.db import tables
from x402mw.platform.services.settlement.payment_identifiers import purge_payment_identifiers
from x402mw.protocol import decode_payment_payload, decode_payment_required, decode_settlement_response, reasons
from x402mw.protocol.codec import encode_header
from x402mw.protocol.models import PaymentPayload, PaymentRequired
from x402mw.protocol.payment_identifier import CONFLICT, PAYMENT_IDENTIFIER, new_identifier, payload_extensions

pytestmark = [
    pytest.mark.both_databases,
    pytest.mark.anyio,
]  # concurrent sends under one id charge once: each database's locking

_TRANSFER = "0x" + keccak256(b"Transfer(address,address,uint256)").hex()


def transfers_to(harness: PlatformHarness, payee: str) -> int:
    """How many token transfers to ``payee`` the chain holds (its Transfer logs)."""

    async def count(_platform: Any) -> int:
        query = {
            "address": harness.usdc,
            "fromBlock": "0x0",
            "toBlock": "latest",
            "topics": [_TRANSFER, None, "0x" + "00" * 12 + payee[2:].lower()],
        }
        return len(await harness.chain.rpc.request("eth_getLogs", [query]) or [])

    found: int = harness.server.call(count)
    return found


def identifier_row(harness: PlatformHarness, identifier: str) -> dict[str, Any] | None:
    async def read(platform: Any) -> dict[str, Any] | None:
        table = tables.payment_identifiers
        async with platform.engine.connect() as conn:
            row = (await conn.execute(table.select().where(table.c.identifier == identifier))).mappings().first()
        return dict(row) if row else None

    found: dict[str, Any] | None = harness.server.call(read)
    return found


async def _offer(app: Any) -> PaymentRequired:
    async with httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver") as client:
        response = await client.get("/weather")
    assert response.status_code == 402
    return decode_payment_required(response.headers["PAYMENT-REQUIRED"])


def _signed(deployment: Deployment, required: PaymentRequired, identifier: str, **sign: Any) -> PaymentPayload:
    payload = deployment.agent.sign_payment(required.accepts[0], resource=required.resource, **sign)
    return payload.model_copy(update={"extensions": payload_extensions(required.extensions, identifier)})


async def _send(app: Any, payload: PaymentPayload) -> httpx.Response:
    async with httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver", timeout=60) as client:
        return await client.get("/weather", headers={"PAYMENT-SIGNATURE": encode_header(payload)})


async def test_the_402_declares_the_extension_as_the_x402_foundation_reads_it(deployment: Deployment) -> None:
    app = starlette_app(deployment.api_key, deployment.harness.url, deployment.endpoint_id)
    required = await _offer(app)
    declared = (required.extensions or {})[PAYMENT_IDENTIFIER]
    assert declared["info"] == {"required": False}
    assert is_payment_identifier_extension(declared)  # the Foundation SDK's check of the declaration
    payload = _signed(deployment, required, "pay_0123456789abcdef")
    theirs = X402PaymentPayload.model_validate(payload.to_wire())  # read by the Foundation's own model
    assert extract_payment_identifier(theirs) == "pay_0123456789abcdef"


class DropFirstPaidAnswer(httpx.AsyncBaseTransport):
    """Passes requests to the app, and loses the answer to the first paid one after the app has
    answered it (the settlement happened; the agent never hears of it)."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.dropped: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        paid = request.headers.get("PAYMENT-SIGNATURE")
        if paid is not None and not self.dropped:
            await response.aread()
            await response.aclose()
            self.dropped.append(paid)
            raise httpx.ReadError("connection lost", request=request)
        return response

    async def __aenter__(self) -> DropFirstPaidAnswer:
        await self.inner.__aenter__()  # the app's lifespan: its client of the platform is closed after
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.inner.__aexit__(*exc)


async def test_a_retry_after_a_dropped_answer_gets_the_stored_answer_and_one_charge(deployment: Deployment) -> None:
    harness = deployment.harness
    app = starlette_app(deployment.api_key, harness.url, deployment.endpoint_id)
    auth = X402Auth(deployment.agent, max_amount="0.05", receipt_signer=harness.platform.receipt_address)
    transport = DropFirstPaidAnswer(asgi_transport(app))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver", auth=auth, timeout=60) as client:
        with pytest.raises(httpx.ReadError):
            await client.get("/weather")
        retried = await client.get("/weather")
    assert retried.status_code == 200, retried.text
    [lost] = transport.dropped
    assert retried.request.headers["PAYMENT-SIGNATURE"] == lost  # the same payment, its id with it
    identifier = (decode_payment_payload(lost).extensions or {})[PAYMENT_IDENTIFIER]["info"]["id"]
    assert identifier.startswith("pay_") and len(identifier) == 36
    row = identifier_row(harness, identifier)
    assert row is not None and row["status"] == "answered"
    settlement = decode_settlement_response(retried.headers["PAYMENT-RESPONSE"])
    assert settlement.success and row["answer"]["settlement"]["transaction"] == settlement.transaction
    assert await asyncio.to_thread(transfers_to, harness, deployment.payout) == 1
    assert await asyncio.to_thread(harness.balance, deployment.payout) == 10_000


async def test_an_id_is_kept_a_day_and_a_retry_after_it_is_purged_still_gets_its_outcome(
    deployment: Deployment,
) -> None:
    harness = deployment.harness
    app = starlette_app(deployment.api_key, harness.url, deployment.endpoint_id)
    required = await _offer(app)
    identifier = new_identifier()
    payload = _signed(deployment, required, identifier)
    first = await _send(app, payload)
    assert first.status_code == 200, first.text
    assert identifier_row(harness, identifier) is not None

    def purge(hours: int) -> int:
        later = harness.platform.clock.now() + timedelta(hours=hours)
        purged: int = harness.server.call(lambda p: purge_payment_identifiers(p.engine, later))
        return purged

    assert await asyncio.to_thread(purge, 23) == 0 and identifier_row(harness, identifier) is not None
    assert await asyncio.to_thread(purge, 25) >= 1 and identifier_row(harness, identifier) is None
    again = await _send(app, payload)  # its authorization answers: the same settlement, no second charge
    assert again.status_code == 200, again.text
    settled = decode_settlement_response(first.headers["PAYMENT-RESPONSE"])
    assert decode_settlement_response(again.headers["PAYMENT-RESPONSE"]).transaction == settled.transaction
    assert await asyncio.to_thread(transfers_to, harness, deployment.payout) == 1


async def test_a_retry_and_reads_right_after_the_answer_find_its_record(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The record (the payment settled, its event, the id's answer) is committed before the answer
    # goes out, even when its write is slow: the same payment sent again right after the answer
    # gets the same outcome, and the agent API and the events list show it, without waiting.
    harness = deployment.harness
    writes = harness.platform.settlement.writes
    record = writes.settled

    async def slow_record(*args: Any, **kwargs: Any) -> None:
        await asyncio.sleep(0.3)
        await record(*args, **kwargs)

    monkeypatch.setattr(writes, "settled", slow_record)
    app = starlette_app(deployment.api_key, harness.url, deployment.endpoint_id)
    required = await _offer(app)
    identifier = new_identifier()
    payload = _signed(deployment, required, identifier)
    first = await _send(app, payload)
    assert first.status_code == 200, first.text
    row = identifier_row(harness, identifier)
    assert row is not None and row["status"] == "answered"
    again = await _send(app, payload)
    assert again.status_code == 200, again.text
    assert again.headers["PAYMENT-RESPONSE"] == first.headers["PAYMENT-RESPONSE"]
    settlement = decode_settlement_response(first.headers["PAYMENT-RESPONSE"])
    payment_id = row["answer"]["paymentId"]
    with deployment.api() as api:
        payment = api.get(f"/agent/payments/{payment_id}")
        events = api.get("/events", params={"type": "agent_payment.settled"}).json()["data"]
    assert payment.status_code == 200, payment.text
    found = payment.json()["agentPayment"]
    assert (found["status"], found["transaction"]) == ("settled", settlement.transaction)
    assert [e["data"]["agentPayment"]["id"] for e in events].count(payment_id) == 1
    assert await asyncio.to_thread(transfers_to, harness, deployment.payout) == 1


class HourLater(Clock):
    """The platform's clock an hour on: every authorization signed now has expired by it."""

    def time(self) -> float:
        return time.time() + 3600


async def test_the_stored_answer_is_found_before_verification(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A payment whose authorization can no longer be verified (it has expired since) still gets its
    # stored answer when sent again under its id; without the id it is refused.
    harness = deployment.harness
    app = starlette_app(deployment.api_key, harness.url, deployment.endpoint_id)
    required = await _offer(app)
    payload = _signed(deployment, required, new_identifier())
    bare = _signed(deployment, required, new_identifier()).model_copy(update={"extensions": None})
    first = await _send(app, payload)
    assert first.status_code == 200, first.text
    assert (await _send(app, bare)).status_code == 200
    monkeypatch.setattr(harness.platform.settlement, "clock", HourLater())
    again = await _send(app, payload)
    assert again.status_code == 200, again.text
    assert again.headers["PAYMENT-RESPONSE"] == first.headers["PAYMENT-RESPONSE"]
    without_id = await _send(app, bare)
    assert without_id.status_code == 402
    assert decode_payment_required(without_id.headers["PAYMENT-REQUIRED"]).error == reasons.INVALID_VALID_BEFORE
    assert await asyncio.to_thread(transfers_to, harness, deployment.payout) == 2


async def test_an_id_reused_with_another_payment_is_a_409_and_charges_nothing(deployment: Deployment) -> None:
    harness = deployment.harness
    app = starlette_app(deployment.api_key, harness.url, deployment.endpoint_id)
    required = await _offer(app)
    identifier = new_identifier()
    first = await _send(app, _signed(deployment, required, identifier))
    assert first.status_code == 200, first.text
    other = await _send(app, _signed(deployment, required, identifier))  # a new authorization, the same id
    assert other.status_code == 409, other.text
    assert other.json()["error"]["code"] == CONFLICT
    refused = decode_settlement_response(other.headers["PAYMENT-RESPONSE"])
    assert (refused.success, refused.error_reason) == (False, CONFLICT)
    assert await asyncio.to_thread(transfers_to, harness, deployment.payout) == 1
    # the facilitator API keeps the same ids: the same payment there answers its stored settlement,
    # another one is a 409
    payload = _signed(deployment, required, new_identifier())
    body = {"x402Version": 2, "paymentPayload": payload.to_wire(), "paymentRequirements": required.accepts[0].to_wire()}
    another = _signed(deployment, required, (payload.extensions or {})[PAYMENT_IDENTIFIER]["info"]["id"])
    with deployment.api() as api:
        settled = api.post("/x402/settle", json=body)
        again = api.post("/x402/settle", json=body)
        conflict = api.post("/x402/settle", json=body | {"paymentPayload": another.to_wire()})
    assert settled.status_code == again.status_code == 200, settled.text
    assert settled.json() == again.json() and settled.json()["success"] is True
    assert conflict.status_code == 409 and conflict.json()["error"]["code"] == CONFLICT
    assert await asyncio.to_thread(transfers_to, harness, deployment.payout) == 2


async def test_concurrent_sends_under_one_id_wait_for_the_first_and_charge_once(deployment: Deployment) -> None:
    harness = deployment.harness
    app = starlette_app(deployment.api_key, harness.url, deployment.endpoint_id)
    required = await _offer(app)
    payload = _signed(deployment, required, new_identifier())
    answers = await asyncio.gather(*(_send(app, payload) for _ in range(5)))
    assert [a.status_code for a in answers] == [200] * 5
    assert len({a.headers["PAYMENT-RESPONSE"] for a in answers}) == 1
    assert await asyncio.to_thread(transfers_to, harness, deployment.payout) == 1


async def test_a_malformed_id_is_refused_and_a_refused_payment_frees_its_id(deployment: Deployment) -> None:
    harness = deployment.harness
    app = starlette_app(deployment.api_key, harness.url, deployment.endpoint_id)
    required = await _offer(app)
    bad = await _send(app, _signed(deployment, required, "short"))
    assert bad.status_code == 402
    assert decode_payment_required(bad.headers["PAYMENT-REQUIRED"]).error == reasons.INVALID_PAYLOAD
    # refused for want of money, then paid with a new authorization under the same id
    poor = await asyncio.to_thread(harness.deploy, fund="")
    identifier = new_identifier()
    refused = await _send(app, _signed(poor, required, identifier))
    assert refused.status_code == 402
    assert identifier_row(harness, identifier) is None
    paid = await _send(app, _signed(deployment, required, identifier))
    assert paid.status_code == 200, paid.text
    assert await asyncio.to_thread(transfers_to, harness, deployment.payout) == 1
