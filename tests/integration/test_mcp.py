"""Paid MCP tools end to end: our MCP client (`PayingSession`) -> an ``MCPServer`` with `PaidTools` ->
the platform -> the dev chain. The order is the x402 MCP transport's: verified and held before the
tool runs, settled after it succeeded, never charged when it failed."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent

from tests.harness import Deployment, PlatformHarness, serve_app
from tests.waiting import eventually_async
from x402mw.adapters.mcp import PaidTools, current_payment
from x402mw.client import X402Auth
from x402mw.client.mcp import PayingSession, payment_required, settlement_of
from x402mw.errors import ConfigurationError, PaymentRefusedError
from x402mw.evm.keys import address_of, new_private_key
from x402mw.evm.receipts import verify_receipt
from x402mw.platform.services.deposits import authorization_call
from x402mw.protocol import decode_payment_required
from x402mw.seller import Answer, Held, PaidRoute, PaymentGate, RequestView, Serve, run_async

pytestmark = pytest.mark.anyio


def paid_server(deployment: Deployment, others: dict[str, str] | None = None, **tools: Any) -> MCPServer:
    """An MCP server with a paid ``forecast`` (on ``deployment``'s endpoint, unless ``tools`` says
    otherwise), a paid ``broken`` that raises (on an endpoint of its own) and a free ``ping``."""
    server = MCPServer("weather")
    seen: list[Any] = []

    @server.tool()
    def forecast(city: str) -> str:
        payment = current_payment()
        seen.append(payment)
        return f"sunny in {city}, paid by {payment.payer if payment else 'nobody'}"

    @server.tool()
    def broken(city: str) -> str:
        raise RuntimeError(f"no forecast for {city}")

    @server.tool()
    def ping() -> str:
        return "pong"

    names = {"forecast": deployment.endpoint_id, "broken": endpoint_for(deployment, "broken")} | (others or {}) | tools
    paid = PaidTools(api_key=deployment.api_key, platform_url=deployment.harness.url, tools=names)
    paid.install(server)
    server.seen = seen  # type: ignore[attr-defined]
    server.paid = paid  # type: ignore[attr-defined]
    return server


def endpoint_for(deployment: Deployment, tool: str) -> str:
    """Another agent endpoint of ``deployment``'s merchant, selling ``tool`` at 0.01 USDC."""
    body = {key: deployment.endpoint[key] for key in ("chainId", "currency", "payoutAddress")}
    body |= {"name": tool, "resourceUrl": f"mcp://tool/{tool}", "amountMinor": "10000"}
    with deployment.api() as api:
        reply = api.post("/agent/endpoints", json=body)
        assert reply.status_code == 201, reply.text
        return str(reply.json()["endpoint"]["id"])


@contextlib.contextmanager
def served(server: MCPServer) -> Iterator[str]:
    with serve_app(server.paid.asgi(server.streamable_http_app())) as url:  # type: ignore[attr-defined]
        yield f"{url}/mcp"


@contextlib.asynccontextmanager
async def connected(url: str) -> AsyncIterator[Client]:
    async with Client(url) as client:
        yield client


def payments(deployment: Deployment) -> list[dict[str, Any]]:
    with deployment.api() as api:
        reply = api.get("/agent/payments", params={"limit": 100})
        assert reply.status_code == 200, reply.text
        return list(reply.json()["data"])


async def test_a_paid_tool_is_paid_settled_and_answers_with_the_receipt(dev_platform: PlatformHarness) -> None:
    deployment = await asyncio.to_thread(dev_platform.deploy, resource_url="mcp://tool/forecast")
    assert deployment.endpoint["resourceUrl"] == "mcp://tool/forecast"
    server = paid_server(deployment)
    receipts = dev_platform.platform.receipt_address
    before = await asyncio.to_thread(dev_platform.balance, deployment.payout)
    with served(server) as url:
        async with connected(url) as client:
            unpaid = await client.call_tool("forecast", {"city": "Lisbon"})
            assert unpaid.is_error
            offer = payment_required(unpaid)
            assert offer is not None and offer.resource is not None
            assert offer.resource.url == "mcp://tool/forecast"
            assert json.loads(unpaid.content[0].text) == unpaid.structured_content  # type: ignore[union-attr]
            assert (await client.call_tool("ping", {})).content[0].text == "pong"  # type: ignore[union-attr]

            auth = X402Auth(deployment.agent, max_amount="0.05", receipt_signer=receipts)
            paying = PayingSession(client, auth)
            result = await paying.call_tool("forecast", {"city": "Lisbon"})
    assert not result.is_error, result
    assert result.content[0].text.startswith("sunny in Lisbon, paid by 0x")  # type: ignore[union-attr]
    settlement = settlement_of(result)
    assert settlement is not None and settlement.success and settlement.transaction
    assert verify_receipt(settlement.receipt or {}, receipts)
    assert [p.verified for p in auth.payments] == [True]
    assert auth.payments[0].url == "mcp://tool/forecast"
    assert server.seen[0].payer.lower() == deployment.agent.address.lower()  # type: ignore[attr-defined]
    assert await asyncio.to_thread(dev_platform.balance, deployment.payout) == before + 10_000
    [payment] = await asyncio.to_thread(payments, deployment)
    assert payment["status"] == "settled" and payment["transaction"] == settlement.transaction


async def test_a_tool_that_fails_is_never_charged_and_its_authorization_can_be_used_again(
    dev_platform: PlatformHarness,
) -> None:
    deployment = await asyncio.to_thread(dev_platform.deploy, resource_url="mcp://tool/forecast")
    server = paid_server(deployment)
    before = await asyncio.to_thread(dev_platform.balance, deployment.payout)
    with served(server) as url:
        async with connected(url) as client:
            auth = X402Auth(deployment.agent, max_amount="0.05")
            paying = PayingSession(client, auth)
            failed = await paying.call_tool("broken", {"city": "Lisbon"})
            assert failed.is_error and "broken" in failed.content[0].text  # type: ignore[union-attr]
            assert payment_required(failed) is None and settlement_of(failed) is None
            assert auth.payments == []

            # The same signed payload, released, pays for the next call.
            unpaid = await client.call_tool("broken", {"city": "Porto"})
            offer = payment_required(unpaid)
            assert offer is not None
            payload = deployment.agent.sign_payment(offer.accepts[0], resource=offer.resource).to_wire()
            for _ in range(2):
                again = await client.call_tool("broken", {"city": "Porto"}, meta={"x402/payment": payload})
                assert again.is_error and payment_required(again) is None
            for other in (payload, _for(payload, "forecast")):  # a payment for another tool is refused
                done = await client.call_tool("forecast", {"city": "Porto"}, meta={"x402/payment": other})
                assert payment_required(done).error == "invalid_payment_requirements"  # type: ignore[union-attr]
            paid = await paying.call_tool("forecast", {"city": "Porto"})
            assert not paid.is_error
    assert await asyncio.to_thread(dev_platform.balance, deployment.payout) == before + 10_000
    assert [p["status"] for p in await asyncio.to_thread(payments, deployment)] == ["settled"]


def _drain(harness: PlatformHarness, deployment: Deployment) -> None:
    """Send all of the agent's USDC to a fresh address (an EIP-3009 transfer it signs, relayed)."""
    chain = harness.chain
    whole = harness.balance(deployment.agent.address)
    data, _, _ = authorization_call(
        chain, harness.usdc, deployment.agent_key, address_of(new_private_key()), whole, secrets.token_bytes(32)
    )

    async def send(platform: Any) -> None:
        await chain.wait_for(await chain.relayer.send(harness.usdc, data))

    harness.server.call(send)
    assert harness.balance(deployment.agent.address) == 0


def _for(payload: dict[str, Any], tool: str) -> dict[str, Any]:
    return payload | {"resource": {**payload["resource"], "url": f"mcp://tool/{tool}"}}


async def test_a_tool_error_result_is_not_charged_and_a_failed_settlement_gives_only_the_payment_error(
    dev_platform: PlatformHarness,
) -> None:
    deployment = await asyncio.to_thread(dev_platform.deploy, resource_url="mcp://tool/draining")
    server = MCPServer("weather")
    ran: list[str] = []

    @server.tool()
    def refusing(city: str) -> CallToolResult:
        ran.append("refusing")
        return CallToolResult(content=[TextContent(type="text", text=f"no data for {city}")], is_error=True)

    @server.tool()
    async def draining(city: str) -> str:
        ran.append("draining")
        # While the tool runs, the agent's wallet is emptied elsewhere: its held payment can no
        # longer be settled (whatever the clocks say), and the tool's result must not be given.
        await asyncio.to_thread(_drain, dev_platform, deployment)
        return f"the secret forecast for {city}"

    tools = {"draining": deployment.endpoint_id, "refusing": endpoint_for(deployment, "refusing")}
    server.paid = paid = PaidTools(api_key=deployment.api_key, platform_url=dev_platform.url, tools=tools)  # type: ignore[attr-defined]
    paid.install(server)
    before = await asyncio.to_thread(dev_platform.balance, deployment.payout)
    with served(server) as url:
        async with connected(url) as client:
            paying = PayingSession(client, X402Auth(deployment.agent, max_amount="0.05"))
            refused = await paying.call_tool("refusing", {"city": "Oslo"})
            assert refused.is_error and refused.content[0].text == "no data for Oslo"  # type: ignore[union-attr]
            assert settlement_of(refused) is None

            late = await paying.call_tool("draining", {"city": "Oslo"})
    assert ran == ["refusing", "draining"], late
    assert late.is_error and "secret" not in json.dumps(late.model_dump(mode="json")), late
    refusal = payment_required(late)
    assert refusal is not None and refusal.error is not None, late
    assert await asyncio.to_thread(dev_platform.balance, deployment.payout) == before
    # The refusing tool's hold was released (no record); the drained one is recorded failed: nothing taken.
    assert [p["status"] for p in await asyncio.to_thread(payments, deployment)] == ["failed"]


async def test_a_call_cancelled_while_its_tool_runs_releases_its_hold(dev_platform: PlatformHarness) -> None:
    deployment = await asyncio.to_thread(dev_platform.deploy, resource_url="mcp://tool/endless")
    server = MCPServer("weather")

    @server.tool()
    async def endless(city: str) -> str:
        await anyio.sleep(3600)
        return city

    tools = {"endless": deployment.endpoint_id}
    server.paid = paid = PaidTools(api_key=deployment.api_key, platform_url=dev_platform.url, tools=tools)  # type: ignore[attr-defined]
    paid.install(server)
    with served(server) as url:
        async with connected(url) as client:
            offer = payment_required(await client.call_tool("endless", {"city": "Oslo"}))
            assert offer is not None
            payload = deployment.agent.sign_payment(offer.accepts[0], resource=offer.resource).to_wire()
            with anyio.move_on_after(30):
                async with anyio.create_task_group() as group:
                    group.start_soon(
                        lambda: client.call_tool("endless", {"city": "Oslo"}, meta={"x402/payment": payload})
                    )
                    await eventually_async(
                        lambda: asyncio.to_thread(_statuses, deployment),
                        until=lambda statuses: statuses == ["held"],
                        what="the call's hold",
                        timeout=20,  # fails the test before move_on_after gives up on the call
                    )
                    group.cancel_scope.cancel()  # the agent gives up: notifications/cancelled
            await eventually_async(  # released, nothing taken
                lambda: asyncio.to_thread(_statuses, deployment),
                until=lambda statuses: statuses == [],
                what="the hold released",
            )
    assert await asyncio.to_thread(dev_platform.balance, deployment.payout) == 0


def _statuses(deployment: Deployment) -> list[str]:
    return [payment["status"] for payment in payments(deployment)]


async def test_dynamic_price_and_caps(dev_platform: PlatformHarness) -> None:
    deployment = await asyncio.to_thread(
        dev_platform.deploy, amount_minor=None, pricing="dynamic", resource_url="mcp://tool/forecast"
    )

    def price(call: Any) -> str:
        return "0.03" if call.arguments.get("city") == "Paris" else "0.01"

    server = paid_server(deployment, forecast=PaidRoute(deployment.endpoint_id, amount=price))  # type: ignore[arg-type]
    before = await asyncio.to_thread(dev_platform.balance, deployment.payout)
    with served(server) as url:
        async with connected(url) as client:
            auth = X402Auth(deployment.agent, max_amount="0.02", max_total="0.015")
            paying = PayingSession(client, auth)
            assert not (await paying.call_tool("forecast", {"city": "Lisbon"})).is_error
            with pytest.raises(PaymentRefusedError) as over:
                await paying.call_tool("forecast", {"city": "Paris"})
            assert over.value.reason == "over_cap"
            with pytest.raises(PaymentRefusedError) as total:
                await paying.call_tool("forecast", {"city": "Lisbon"})
            assert total.value.reason == "over_cap"
    assert await asyncio.to_thread(dev_platform.balance, deployment.payout) == before + 10_000


@pytest.mark.both_databases  # one authorization sent twice at once: each database's locking
async def test_bad_payments_are_refused_in_the_protocols_shape(dev_platform: PlatformHarness) -> None:
    deployment = await asyncio.to_thread(dev_platform.deploy, resource_url="mcp://tool/forecast")
    other = await asyncio.to_thread(dev_platform.deploy, resource_url="mcp://tool/other")
    server = paid_server(deployment)
    before = await asyncio.to_thread(dev_platform.balance, deployment.payout)
    with served(server) as url:
        async with connected(url) as client:
            for garbage in ("not a payment", 42, {"x402Version": 2}, {"x402Version": 2, "accepted": {"scheme": 1}}):
                refused = await client.call_tool("forecast", {"city": "Oslo"}, meta={"x402/payment": garbage})
                offer = payment_required(refused)
                assert offer is not None and offer.error == "invalid_payload", refused
            assert server.seen == []  # type: ignore[attr-defined]

            # A payment of another seller's challenge (another endpoint: its seal does not match).
            async with _other_offer(other) as foreign:
                payload = deployment.agent.sign_payment(foreign.accepts[0], resource=foreign.resource).to_wire()
            refused = await client.call_tool(
                "forecast", {"city": "Oslo"}, meta={"x402/payment": _for(payload, "forecast")}
            )
            assert payment_required(refused).error == "invalid_payment_requirements"  # type: ignore[union-attr]

            # Replayed: served once, then refused; charged once.
            offer = payment_required(await client.call_tool("forecast", {"city": "Oslo"}))
            assert offer is not None
            payload = deployment.agent.sign_payment(offer.accepts[0], resource=offer.resource).to_wire()
            first = await client.call_tool("forecast", {"city": "Oslo"}, meta={"x402/payment": payload})
            assert not first.is_error
            replay = await client.call_tool("forecast", {"city": "Oslo"}, meta={"x402/payment": payload})
            again = payment_required(replay)
            assert again is not None and again.error == "invalid_exact_evm_payload_authorization_nonce_used"
            # Sent twice at once: one is served, the other refused as in use or used.
            offer = payment_required(await client.call_tool("forecast", {"city": "Oslo"}))
            assert offer is not None
            payload = deployment.agent.sign_payment(offer.accepts[0], resource=offer.resource).to_wire()
            both = await asyncio.gather(
                *(client.call_tool("forecast", {"city": "Oslo"}, meta={"x402/payment": payload}) for _ in range(2))
            )
            assert sorted(r.is_error for r in both) == [False, True]
            loser = payment_required(next(r for r in both if r.is_error))
            assert loser is not None and loser.error in (
                "payment_in_use",
                "invalid_exact_evm_payload_authorization_nonce_used",
            )
    assert len(server.seen) == 2  # type: ignore[attr-defined]
    assert await asyncio.to_thread(dev_platform.balance, deployment.payout) == before + 20_000
    assert [p["status"] for p in await asyncio.to_thread(payments, deployment)] == ["settled", "settled"]


@contextlib.asynccontextmanager
async def _other_offer(other: Deployment) -> AsyncIterator[Any]:
    server = paid_server(other)
    with served(server) as url:
        async with connected(url) as client:
            result: CallToolResult = await client.call_tool("forecast", {"city": "Oslo"})
            yield payment_required(result)


def test_each_paid_tool_needs_its_own_endpoint() -> None:
    with pytest.raises(ConfigurationError, match="tools a, b share an agent endpoint"):
        PaidTools(api_key="sk_test_x", tools={"a": "ep", "b": PaidRoute("ep"), "c": "other"})
    for tools in (["a"], {"": "ep"}, {1: "ep"}):
        with pytest.raises(ConfigurationError, match="tools must be a mapping"):
            PaidTools(api_key="sk_test_x", tools=tools)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="api_key must be a merchant API key"):
        PaidTools(api_key="nope", tools={"a": "ep"})


async def test_the_gates_hold_capture_and_release_against_the_platform(dev_platform: PlatformHarness) -> None:
    deployment = await asyncio.to_thread(dev_platform.deploy, resource_url="mcp://tool/forecast")
    gate = PaymentGate(api_key=deployment.api_key, platform_url=dev_platform.url)
    route, url = PaidRoute(deployment.endpoint_id), "mcp://tool/forecast"
    headers = {"Authorization": f"Bearer {deployment.api_key}"}
    async with httpx.AsyncClient(base_url=dev_platform.url, headers=headers, timeout=60) as http:

        async def hold(payment: dict[str, Any] | None) -> Any:
            return await run_async(gate.hold(route, RequestView("TOOL", url, payment)), http)

        async def signed() -> dict[str, Any]:
            answer = await hold(None)
            offer = decode_payment_required(dict(answer.headers)["PAYMENT-REQUIRED"])
            return deployment.agent.sign_payment(offer.accepts[0], resource=offer.resource).to_wire()

        async def status(payment_id: str) -> int | str:
            reply = await http.get(f"/agent/payments/{payment_id}")
            return reply.json()["agentPayment"]["status"] if reply.status_code == 200 else reply.status_code

        # Held, then given up: the same authorization is held again, then settled; a release then is 409.
        payload = await signed()
        held = await hold(payload)
        assert isinstance(held, Held) and await status(held.payment_id) == "held"
        in_use = await hold(payload)
        assert isinstance(in_use, Answer) and in_use.reason == "payment_in_use"
        assert await run_async(gate.release(held), http) is True
        assert await status(held.payment_id) == 404
        gone = await http.post(f"/agent/settlements/{held.payment_id}/capture", json={})
        assert gone.status_code == 404, gone.text  # released: nothing to capture
        again = await hold(payload)
        assert isinstance(again, Held)
        wrong = await http.post(f"/agent/settlements/{again.payment_id}/capture", json={"amountMinor": "1"})
        assert wrong.status_code == 400 and wrong.json()["error"]["code"] == "invalid_payload", wrong.text
        settled = await run_async(gate.capture(again), http)
        assert isinstance(settled, Serve) and settled.settlement.response.success
        assert await status(again.payment_id) == "settled"
        late = await http.post(f"/agent/settlements/{again.payment_id}/release")
        assert late.status_code == 409 and late.json()["error"]["code"] == "payment_not_held", late.text
        assert await run_async(gate.release(again), http) is False
        for unknown in ("00000000-0000-4000-8000-000000000000", "nope"):
            missing = await http.post(f"/agent/settlements/{unknown}/release")
            assert missing.status_code == 404, missing.text

        # A hold nobody settles nor releases (the seller stopped) fails once its authorization expired.
        payload = await signed()
        stuck = await hold(payload)
        assert isinstance(stuck, Held)
        valid_before = int(payload["payload"]["authorization"]["validBefore"])
        writes = dev_platform.platform.settlement.writes
        assert await asyncio.to_thread(dev_platform.server.call, lambda p: writes.expire_holds(valid_before)) == 0
        assert await status(stuck.payment_id) == "held"
        expired = await asyncio.to_thread(dev_platform.server.call, lambda p: writes.expire_holds(valid_before + 1))
        assert expired == 1 and await status(stuck.payment_id) == "failed"


async def test_agent_endpoints_accept_mcp_tool_urls_and_refuse_others(dev_platform: PlatformHarness) -> None:
    deployment = await asyncio.to_thread(dev_platform.deploy, resource_url="mcp://tool/a.b-c_1")
    assert deployment.endpoint["resourceUrl"] == "mcp://tool/a.b-c_1"
    with deployment.api() as api:
        for url in ("mcp://tool/", "mcp://tool/a b", "mcp://other/x", "ftp://x/y", "mcp://tool/" + "x" * 129):
            reply = api.patch(f"/agent/endpoints/{deployment.endpoint_id}", json={"resourceUrl": url})
            assert reply.status_code == 400, (url, reply.text)
            assert "mcp://tool/<name>" in reply.json()["error"]["message"]
