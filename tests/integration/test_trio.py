"""The library half on trio as on asyncio: a Starlette seller (the ASGI payment middleware) paid by
``X402Auth`` on an ``httpx.AsyncClient``, both in the test's own event loop, against a real platform
(which runs in its thread, on its own asyncio loop).

Each test runs on both anyio backends. On trio an asyncio call made without an asyncio loop raises,
so a primitive of asyncio left in the seller's request path, its background work or the auth's
retries fails the trio run.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import anyio
import httpx
import pytest

from tests.harness import Deployment, PlatformHarness, sqlite_only
from tests.sellers import asgi_transport, lifespan, starlette_app
from tests.waiting import eventually_async
from x402mw.client import X402Auth
from x402mw.evm.receipts import verify_receipt
from x402mw.protocol import decode_payment_required, decode_settlement_response

pytestmark = [pytest.mark.anyio, sqlite_only]  # the seller's side is under test: one database is enough

Message = dict[str, Any]


@pytest.fixture(params=["trio", "asyncio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _client(app: Any, auth: X402Auth | None = None, *, with_lifespan: bool = True) -> httpx.AsyncClient:
    """A client of ``app`` in-process; with its lifespan running while the client is open, as a server
    runs it, or without (as a server with its lifespan off, or plain ``httpx.ASGITransport``)."""
    transport = asgi_transport(app) if with_lifespan else httpx.ASGITransport(app=app)
    return httpx.AsyncClient(transport=transport, base_url="http://testserver", auth=auth, timeout=60)


async def _shut_down(app: Any) -> None:
    """What a server does last: the lifespan's shutdown, which closes the seller's connections."""
    async with lifespan(app):
        pass


async def _balance(harness: PlatformHarness, address: str) -> int:
    return await anyio.to_thread.run_sync(harness.balance, address)


@pytest.mark.parametrize("with_lifespan", [True, False], ids=["lifespan", "no-lifespan"])
async def test_x402auth_pays_a_starlette_seller(deployment: Deployment, with_lifespan: bool) -> None:
    harness = deployment.harness
    app = starlette_app(deployment.api_key, harness.url, deployment.endpoint_id)
    auth = X402Auth(deployment.agent, max_amount="0.05", receipt_signer=harness.platform.receipt_address)
    before = await _balance(harness, deployment.payout)
    async with _client(app, auth, with_lifespan=with_lifespan) as client:
        responses = [await client.get("/weather"), await client.get("/stream")]
    if not with_lifespan:
        await _shut_down(app)
    for response in responses:
        assert response.status_code == 200, response.text
        settlement = decode_settlement_response(response.headers["PAYMENT-RESPONSE"])
        assert settlement.success and verify_receipt(settlement.receipt or {}, harness.platform.receipt_address)
    assert responses[0].json()["tx"] == decode_settlement_response(responses[0].headers["PAYMENT-RESPONSE"]).transaction
    assert responses[1].text == "chunk0\nchunk1\nchunk2\n"
    assert [p.verified for p in auth.payments] == [True, True]
    assert await _balance(harness, deployment.payout) == before + 20_000


@pytest.mark.parametrize("with_lifespan", [True, False], ids=["lifespan", "no-lifespan"])
async def test_issued_challenges_reach_the_platform(deployment: Deployment, with_lifespan: bool) -> None:
    # With a lifespan, the seller's background loop registers them (in the lifespan's task group);
    # without one, the request that issued them does, once its answer is sent.
    app = starlette_app(deployment.api_key, deployment.harness.url, deployment.endpoint_id)
    headers = {"Authorization": f"Bearer {deployment.api_key}"}
    async with (
        _client(app, with_lifespan=with_lifespan) as client,
        httpx.AsyncClient(base_url=deployment.harness.url, headers=headers) as api,
    ):
        issued = []
        for _ in range(3):
            response = await client.get("/weather")
            assert response.status_code == 402
            issued.append(decode_payment_required(response.headers["PAYMENT-REQUIRED"]).accepts[0].extra["challengeId"])
        found: dict[str, str] = {}

        async def look() -> dict[str, str]:
            for challenge_id in issued:
                if challenge_id not in found:
                    answer = await api.get(f"/agent/challenges/{challenge_id}")
                    if answer.status_code == 200:
                        found[challenge_id] = answer.json()["challenge"]["status"]
            return found

        if with_lifespan:
            await eventually_async(look, until=lambda found: len(found) == len(issued), what="the 3 challenges")
        else:
            await look()  # once: what the requests so far reported
    if not with_lifespan:
        await _shut_down(app)
    if with_lifespan:
        assert found == dict.fromkeys(issued, "open")
    else:
        # The first round runs after the first answer; the next ones wait 0.25 s after it, for the
        # next request (or the shutdown) to find them due.
        assert found.get(issued[0]) == "open"


def _unavailable_once(app: Any, seen: list[bytes]) -> Any:
    """``app``, except that the first paid request is answered 503 with ``Retry-After: 1``, as a
    seller whose platform could not be reached answers (nothing was charged)."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        signature = dict(scope.get("headers", [])).get(b"payment-signature")
        if scope["type"] == "http" and signature is not None:
            seen.append(signature)
            if len(seen) == 1:
                await send(
                    {
                        "type": "http.response.start",
                        "status": 503,
                        "headers": [(b"content-type", b"application/json"), (b"retry-after", b"1")],
                    }
                )
                await send({"type": "http.response.body", "body": b'{"error":{"code":"payment_platform_unavailable"}}'})
                return
        await app(scope, receive, send)

    return wrapped


async def test_x402auth_waits_and_sends_the_same_payment_again_after_a_503(deployment: Deployment) -> None:
    harness = deployment.harness
    seen: list[bytes] = []
    app = _unavailable_once(starlette_app(deployment.api_key, harness.url, deployment.endpoint_id), seen)
    auth = X402Auth(deployment.agent, max_amount="0.05", retry_seconds=30)
    before = await _balance(harness, deployment.payout)
    async with _client(app, auth) as client:
        response = await client.get("/weather")
    assert response.status_code == 200, response.text
    assert len(seen) == 2 and seen[0] == seen[1], "the retry sends the same signature, never a new one"
    assert [p.transaction for p in auth.payments] == [response.json()["tx"]]
    assert list(auth.spent.values()) == [Decimal("0.01")]
    assert await _balance(harness, deployment.payout) == before + 10_000


async def test_x402auth_retries_a_pending_settlement_until_it_is_final(anvil_platform: PlatformHarness) -> None:
    # Anvil stops mining: the seller answers 402 settlement_pending after its settle_timeout; once
    # that answer is out, mining resumes, and the auth's retry of the same signature is served.
    deployment = await anyio.to_thread.run_sync(anvil_platform.deploy)
    seller = starlette_app(deployment.api_key, anvil_platform.url, deployment.endpoint_id, settle_timeout=3.0)
    rpc = anvil_platform.chain.rpc
    pending = anyio.Event()
    answers: list[int] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                answers.append(message["status"])
                if message["status"] == 402 and any(name == b"payment-response" for name, _ in message["headers"]):
                    pending.set()
            await send(message)

        await seller(scope, receive, watch)

    def automine(on: bool) -> None:
        anvil_platform.server.call(lambda p: rpc.request("evm_setAutomine", [on]))
        if on:
            anvil_platform.server.call(lambda p: rpc.request("evm_mine", []))

    async def resume_mining_once_pending() -> None:
        await pending.wait()
        await anyio.to_thread.run_sync(automine, True)

    auth = X402Auth(deployment.agent, max_amount="0.05", retry_seconds=60)
    await anyio.to_thread.run_sync(automine, False)
    try:
        async with _client(app, auth) as client, anyio.create_task_group() as group:
            group.start_soon(resume_mining_once_pending)
            response = await client.get("/weather")
    finally:
        await anyio.to_thread.run_sync(automine, True)
    assert response.status_code == 200, response.text
    assert answers[:2] == [402, 402] and answers[-1] == 200  # the challenge, pending, (pending,) served
    assert [p.transaction for p in auth.payments] == [response.json()["tx"]]
    assert list(auth.spent.values()) == [Decimal("0.01")]
    assert await _balance(anvil_platform, deployment.payout) == 10_000
