"""Paid MCP tools on metered endpoints: our MCP client (`PayingSession`) signs the ceiling (through
Permit2, its first use with an EIP-2612 permit, no gas), the tool reports what the call used with
``current_payment().charge``, as a metered route's handler does, and the platform settles that
after the tool ran, on the dev chain; a tool that fails is charged nothing."""

from __future__ import annotations

import asyncio

import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer

from tests.harness import PlatformHarness, serve_app
from tests.metered_fixtures import metered_deployment
from x402mw.adapters.mcp import PaidTools, current_payment
from x402mw.client import X402Auth
from x402mw.client.mcp import PayingSession, payment_required, settlement_of
from x402mw.evm.receipts import verify_receipt
from x402mw.seller import UsageError

pytestmark = pytest.mark.anyio

CEILING = 40_000


async def test_a_metered_tool_is_charged_what_it_reports_after_it_ran(dev_platform: PlatformHarness) -> None:
    harness = dev_platform
    deployment = await asyncio.to_thread(
        metered_deployment, harness, ceiling=CEILING, resource_url="mcp://tool/generate"
    )
    server = MCPServer("llm")
    reported: list[int] = []

    @server.tool()
    def generate(tokens: int, fail: bool = False) -> str:
        payment = current_payment()
        assert payment is not None and payment.amount == CEILING
        total = payment.charge(tokens * 100)  # 100 atomic units per generated token
        reported.append(total)
        if fail:
            raise RuntimeError("the model went away")
        return f"{tokens} tokens, charged {payment.charged}"

    paid = PaidTools(api_key=deployment.api_key, platform_url=harness.url, tools={"generate": deployment.endpoint_id})
    paid.install(server)
    receipts = harness.platform.receipt_address
    auth = X402Auth(deployment.agent, max_amount="0.05", receipt_signer=receipts)
    with serve_app(paid.asgi(server.streamable_http_app())) as url:
        async with Client(f"{url}/mcp") as client:
            unpaid = await client.call_tool("generate", {"tokens": 1})
            offer = payment_required(unpaid)
            assert offer is not None and [a.scheme for a in offer.accepts] == ["upto"]
            assert offer.accepts[0].amount == CEILING

            paying = PayingSession(client, auth)
            # the agent has no allowance and no gas: refused once, then paid with a permit
            part = await paying.call_tool("generate", {"tokens": 15})
            nothing = await paying.call_tool("generate", {"tokens": 0})
            beyond = await paying.call_tool("generate", {"tokens": 1000})
            failed = await paying.call_tool("generate", {"tokens": 7, "fail": True})

    for result, charged in ((part, 1500), (nothing, 0), (beyond, CEILING)):
        assert not result.is_error, result
        settlement = settlement_of(result)
        assert settlement is not None and settlement.success and settlement.amount == charged, result
        receipt = settlement.receipt or {}
        assert verify_receipt(receipt, receipts)
        assert (receipt["amount"], receipt["maxAmount"], receipt["scheme"]) == (str(charged), str(CEILING), "upto")
    assert part.content[0].text == "15 tokens, charged 1500"  # type: ignore[union-attr]
    assert settlement_of(nothing).transaction == ""  # type: ignore[union-attr]  # a usage of 0 sends nothing
    assert settlement_of(part).transaction and settlement_of(beyond).transaction  # type: ignore[union-attr]

    # the tool that raised is charged nothing: its error, no settlement, no payment offer
    assert failed.is_error and failed.content[0].text == "Error executing tool generate"  # type: ignore[union-attr]
    assert settlement_of(failed) is None and payment_required(failed) is None
    assert reported == [1500, 0, 100_000, 700]

    assert [(p.scheme, p.amount, p.ceiling, p.verified) for p in auth.payments] == [
        ("upto", 1500, CEILING, True),
        ("upto", 0, CEILING, True),
        ("upto", CEILING, CEILING, True),
    ]
    assert await asyncio.to_thread(harness.balance, deployment.payout) == 1500 + CEILING
    with deployment.api() as api:
        rows = api.get("/agent/payments", params={"limit": 100}).json()["data"]
    assert sorted((row["status"], row["amountMinor"]) for row in rows) == sorted(
        [("settled", "1500"), ("settled", "0"), ("settled", str(CEILING)), ("settled", "0")]
    )


async def test_a_tool_sold_at_a_fixed_price_has_no_usage_to_report(dev_platform: PlatformHarness) -> None:
    deployment = await asyncio.to_thread(dev_platform.deploy, resource_url="mcp://tool/forecast")
    server = MCPServer("weather")
    refused: list[str] = []

    @server.tool()
    def forecast(city: str) -> str:
        payment = current_payment()
        assert payment is not None
        with pytest.raises(UsageError) as raised:
            payment.charge(5)
        refused.append(raised.value.message)
        return f"sunny in {city}"

    paid = PaidTools(
        api_key=deployment.api_key, platform_url=dev_platform.url, tools={"forecast": deployment.endpoint_id}
    )
    paid.install(server)
    with serve_app(paid.asgi(server.streamable_http_app())) as url:
        async with Client(f"{url}/mcp") as client:
            result = await PayingSession(client, X402Auth(deployment.agent, max_amount="0.05")).call_tool(
                "forecast", {"city": "Lisbon"}
            )
    assert not result.is_error and settlement_of(result).amount == 10_000  # type: ignore[union-attr]
    assert refused == ["tool forecast is sold at a fixed price: it has no usage to report"]
