"""An endpoint's changed terms (``PATCH /agent/endpoints/:id``: payout address, price) reach the
sellers that are running, through their background work, within the 2 seconds the documentation
states, and never through a platform call on the 402 path (spec 2.5: the payout address is
snapshotted when a challenge is issued, so challenges issued after a change carry the new one).

The background work revalidates each endpoint's terms every second with ``If-None-Match``; the
platform answers ``304`` while they are unchanged. A payment made on a challenge issued before the
change still settles on that challenge's terms (the old payee and price): its seal was valid when
it was issued, and challenges already issued are unaffected."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import anyio
import httpx
import pytest

from tests.harness import Deployment, PlatformHarness
from tests.sellers import asgi_transport, starlette_app
from tests.waiting import eventually_async
from x402mw.evm.keys import address_of, new_private_key
from x402mw.platform.app import create_app
from x402mw.platform.runtime import Platform
from x402mw.platform.services.endpoints import EndpointDirectory
from x402mw.platform.services.merchants import KeyRing
from x402mw.protocol import (
    PaymentRequirements,
    decode_payment_required,
    decode_settlement_response,
    encode_header,
)
from x402mw.seller import PaidRoute
from x402mw.seller.decisions import Answer, Serve
from x402mw.seller.drivers import AsyncSeller, SyncSeller
from x402mw.seller.gate import TERMS_REFRESH_SECONDS, PaymentGate, RequestView

pytestmark = pytest.mark.anyio

# docs/agent-api.md promises 2 seconds; the test waits longer for it on a loaded machine, but far
# less than the minute a seller took before
GENEROUS_DEADLINE = 15.0


def _patch(deployment: Deployment, **changes: Any) -> dict[str, Any]:
    with deployment.api() as api:
        reply = api.patch(f"/agent/endpoints/{deployment.endpoint_id}", json=changes)
    assert reply.status_code == 200, reply.text
    return dict(reply.json()["endpoint"])


def _offer(answer: object) -> PaymentRequirements:
    """The offer of a 402 (a gate's answer, or a seller's response)."""
    if isinstance(answer, Answer):
        status, header = answer.status, dict(answer.headers).get("PAYMENT-REQUIRED")
    else:
        assert isinstance(answer, httpx.Response), answer
        status, header = answer.status_code, answer.headers.get("PAYMENT-REQUIRED")
    assert status == 402 and header, answer
    return decode_payment_required(header).accepts[0]


def test_an_endpoint_answers_its_etag_and_304_while_it_is_unchanged(dev_platform: PlatformHarness) -> None:
    deployment = dev_platform.deploy(fund="")
    with deployment.api() as api:
        path = f"/agent/endpoints/{deployment.endpoint_id}"
        first = api.get(path)
        etag = first.headers["ETag"]
        same = api.get(path, headers={"If-None-Match": etag})
        assert same.status_code == 304 and same.content == b"" and same.headers["ETag"] == etag
        assert api.get(path, headers={"If-None-Match": '"something else"'}).status_code == 200
        assert api.patch(path, json={"amountMinor": "20000"}).status_code == 200
        changed = api.get(path, headers={"If-None-Match": etag})
    assert changed.status_code == 200 and changed.json()["endpoint"]["amountMinor"] == "20000"
    assert changed.headers["ETag"] != etag


class _Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def _view(payment: str | None = None) -> RequestView:
    return RequestView("GET", "http://testserver/weather", payment)


@pytest.mark.parametrize("driver", ["sync", "async"])
async def test_one_background_round_a_refresh_interval_after_a_change_brings_the_new_terms(
    dev_platform: PlatformHarness, driver: str
) -> None:
    deployment = await anyio.to_thread.run_sync(lambda: dev_platform.deploy(fund=""))
    clock = _Clock()
    gate = PaymentGate(api_key=deployment.api_key, platform_url=dev_platform.url, clock=clock)
    route = PaidRoute(deployment.endpoint_id)
    if driver == "sync":
        sync_seller = SyncSeller(gate)

        async def challenge() -> Any:
            return await anyio.to_thread.run_sync(lambda: sync_seller.run(gate.process(route, _view())))

        async def background_round() -> None:
            await anyio.to_thread.run_sync(sync_seller.flush)

        async def close() -> None:
            await anyio.to_thread.run_sync(sync_seller.close)
    else:
        async_seller = AsyncSeller(gate)

        async def challenge() -> Any:
            return await async_seller.run(gate.process(route, _view()))

        background_round, close = async_seller.flush, async_seller.aclose
    try:
        before = _offer(await challenge())
        assert before.pay_to.lower() == deployment.payout.lower() and before.amount == 10000
        new_payout = address_of(new_private_key())
        await anyio.to_thread.run_sync(lambda: _patch(deployment, payoutAddress=new_payout, amountMinor="25000"))
        clock.now += TERMS_REFRESH_SECONDS
        await background_round()
        after = _offer(await challenge())
        assert after.pay_to.lower() == new_payout.lower() and after.amount == 25000
    finally:
        await close()


async def _wait_for_new_terms(client: httpx.AsyncClient, pay_to: str) -> PaymentRequirements:
    """Ask for the resource until its 402 names ``pay_to``."""

    async def offer() -> PaymentRequirements:
        return _offer(await client.get("/weather"))

    return await eventually_async(
        offer,
        until=lambda terms: terms.pay_to.lower() == pay_to.lower(),
        what=f"the seller to issue the new terms (to {pay_to})",
        timeout=GENEROUS_DEADLINE,
    )


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_a_running_seller_issues_the_changed_terms_and_settles_challenges_issued_before(
    dev_platform: PlatformHarness,
) -> None:
    deployment = await anyio.to_thread.run_sync(lambda: dev_platform.deploy(fund="1"))
    app = starlette_app(deployment.api_key, dev_platform.url, deployment.endpoint_id)
    new_payout = address_of(new_private_key())
    async with httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver", timeout=60) as client:
        old = _offer(await client.get("/weather"))
        assert old.pay_to.lower() == deployment.payout.lower() and old.amount == 10000
        await anyio.to_thread.run_sync(lambda: _patch(deployment, payoutAddress=new_payout, amountMinor="25000"))
        new = await _wait_for_new_terms(client, new_payout)
        assert new.amount == 25000
        # The challenge issued before the change settles on its own terms: the old payee and price.
        paid_old = await client.get("/weather", headers=_paying(deployment, old))
        paid_new = await client.get("/weather", headers=_paying(deployment, new))
    for response, offer in ((paid_old, old), (paid_new, new)):
        assert response.status_code == 200, response.text
        receipt = decode_settlement_response(response.headers["PAYMENT-RESPONSE"]).receipt or {}
        assert str(receipt["payTo"]).lower() == offer.pay_to.lower()
        assert int(receipt["amount"]) == offer.amount

    def balances() -> tuple[int, int]:
        return dev_platform.balance(deployment.payout), dev_platform.balance(new_payout)

    assert await anyio.to_thread.run_sync(balances) == (10000, 25000)


def _paying(deployment: Deployment, offer: PaymentRequirements) -> dict[str, str]:
    return {"PAYMENT-SIGNATURE": encode_header(deployment.agent.sign_payment(offer))}


@pytest.mark.parametrize("driver", ["sync", "async"])
async def test_a_payment_on_the_old_terms_is_served_by_a_seller_that_has_the_new_ones(
    dev_platform: PlatformHarness, driver: str
) -> None:
    """The same decision through the sync driver (Flask, Django, WSGI) and the async one."""
    deployment = await anyio.to_thread.run_sync(lambda: dev_platform.deploy(fund="1"))
    clock = _Clock()
    gate = PaymentGate(api_key=deployment.api_key, platform_url=dev_platform.url, clock=clock)
    route = PaidRoute(deployment.endpoint_id)
    sync_seller = SyncSeller(gate) if driver == "sync" else None
    async_seller = AsyncSeller(gate) if driver == "async" else None

    async def run(payment: str | None = None) -> Any:
        if sync_seller is not None:
            return await anyio.to_thread.run_sync(lambda: sync_seller.run(gate.process(route, _view(payment))))
        assert async_seller is not None
        return await async_seller.run(gate.process(route, _view(payment)))

    try:
        old = _offer(await run())
        new_payout = address_of(new_private_key())
        await anyio.to_thread.run_sync(lambda: _patch(deployment, payoutAddress=new_payout, amountMinor="25000"))
        clock.now += TERMS_REFRESH_SECONDS
        if sync_seller is not None:
            await anyio.to_thread.run_sync(sync_seller.flush)
        else:
            assert async_seller is not None
            await async_seller.flush()
        assert _offer(await run()).pay_to.lower() == new_payout.lower()
        decision = await run(_paying(deployment, old)["PAYMENT-SIGNATURE"])
        assert isinstance(decision, Serve), decision
        assert decision.settlement.pay_to.lower() == deployment.payout.lower()
        assert decision.settlement.amount == 10000
    finally:
        if sync_seller is not None:
            await anyio.to_thread.run_sync(sync_seller.close)
        if async_seller is not None:
            await async_seller.aclose()


async def test_a_payout_address_set_through_another_platform_process_is_paid_at_once(
    dev_platform: PlatformHarness,
) -> None:
    """The platform process that settles has read the endpoint a moment before another process
    took its PATCH; a seller that has the new terms (one background round later) is paid on them."""
    deployment = await anyio.to_thread.run_sync(lambda: dev_platform.deploy(fund="1"))
    platform = dev_platform.platform
    # Another platform process: the same database, caches of its own.
    other = dataclasses.replace(platform, keys=KeyRing(platform.engine), endpoints=EndpointDirectory(platform.engine))
    other_app = create_app(platform=other)
    other_app.state.platform = other  # its lifespan would set it; ASGITransport runs none
    new_payout = address_of(new_private_key())

    async def read_then_patch_elsewhere(platform: Platform) -> None:
        await platform.endpoints.get(deployment.merchant_id, False, deployment.endpoint_id)
        headers = {"Authorization": f"Bearer {deployment.api_key}"}
        transport = httpx.ASGITransport(app=other_app)
        async with httpx.AsyncClient(transport=transport, base_url="http://other/v1", headers=headers) as api:
            reply = await api.patch(f"/agent/endpoints/{deployment.endpoint_id}", json={"payoutAddress": new_payout})
        assert reply.status_code == 200, reply.text

    clock = _Clock()
    gate = PaymentGate(api_key=deployment.api_key, platform_url=dev_platform.url, clock=clock)
    seller, route = AsyncSeller(gate), PaidRoute(deployment.endpoint_id)
    try:
        assert _offer(await seller.run(gate.process(route, _view()))).pay_to.lower() == deployment.payout.lower()
        await anyio.to_thread.run_sync(lambda: dev_platform.server.call(read_then_patch_elsewhere))
        clock.now += TERMS_REFRESH_SECONDS
        await seller.flush()
        offer = _offer(await seller.run(gate.process(route, _view())))
        assert offer.pay_to.lower() == new_payout.lower()
        decision = await seller.run(gate.process(route, _view(_paying(deployment, offer)["PAYMENT-SIGNATURE"])))
        assert isinstance(decision, Serve), decision
        assert decision.settlement.pay_to.lower() == new_payout.lower()
    finally:
        await seller.aclose()
