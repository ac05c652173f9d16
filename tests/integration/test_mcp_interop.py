"""Paid MCP tools across implementations, on the dev chain: the x402 Foundation's MCP client
(``x402.mcp.x402MCPSession``) pays a tool of examples/mcp_seller.py, and our `PayingSession` pays a
tool server built with the Foundation's MCP wrapper that settles through our facilitator API. Their
side needs mcp<2 and runs in .venv-mcp1 (`make test` creates it), as a subprocess."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from tests.harness import PlatformHarness, sqlite_only
from tests.mcp_processes import (
    INTEROP,
    ROOT,
    foundation_client,
    free_port,
    mcp1_environment,
    mcp1_python,
    running,
    seller_command,
)
from x402mw.client import X402Auth
from x402mw.client.mcp import PayingSession, payment_required, settlement_of
from x402mw.evm.keys import address_of, new_private_key
from x402mw.evm.receipts import verify_receipt

pytestmark = sqlite_only


def test_the_foundations_mcp_client_pays_our_example_seller(dev_platform: PlatformHarness, tmp_path: Path) -> None:
    deployment = dev_platform.deploy(resource_url="mcp://tool/forecast")
    before = dev_platform.balance(deployment.payout)
    port = free_port()
    with running(seller_command(deployment, "--port", str(port)), port, tmp_path) as url:
        paid = foundation_client(deployment, url, "forecast", {"city": "Lisbon"}, tmp_path)
        failed = foundation_client(deployment, url, "forecast", {"city": "nowhere"}, tmp_path)
    assert paid["isError"] is False and paid["paymentMade"] is True, paid
    assert paid["text"].startswith("Sunny in Lisbon tomorrow (paid by 0x")
    response = paid["paymentResponse"]
    assert response["success"] is True and response["payer"].lower() == deployment.agent.address.lower()
    assert verify_receipt(response["extensions"]["receipt"], dev_platform.platform.receipt_address)
    assert failed["isError"] is True and failed["paymentMade"] is True and not failed["paymentResponse"], failed
    assert dev_platform.balance(deployment.payout) == before + 10_000  # the tool that raised was not charged
    with deployment.api() as api:
        payments = api.get("/agent/payments").json()["data"]
    assert [(p["status"], p["transaction"]) for p in payments] == [("settled", response["transaction"])]


def test_paid_tools_on_an_mcp1_fastmcp_server(dev_platform: PlatformHarness, tmp_path: Path) -> None:
    # PaidTools installed on mcp 1's FastMCP (in .venv-mcp1): the Foundation's client and ours pay it.
    deployment = dev_platform.deploy(resource_url="mcp://tool/forecast")
    before = dev_platform.balance(deployment.payout)
    port = free_port()
    server = [mcp1_python(), str(INTEROP / "mcp1_seller.py"), str(port), dev_platform.url, deployment.api_key]
    env = mcp1_environment() | {"PYTHONPATH": str(ROOT)}
    auth = X402Auth(deployment.agent, max_amount="0.05", receipt_signer=dev_platform.platform.receipt_address)

    async def ours(url: str) -> tuple[Any, Any]:
        async with Client(url) as client:
            paying = PayingSession(client, auth)
            return await paying.call_tool("forecast", {"city": "Porto"}), await paying.call_tool(
                "forecast", {"city": "nowhere"}
            )

    with running([*server, deployment.endpoint_id], port, tmp_path, env=env) as url:
        theirs = foundation_client(deployment, url, "forecast", {"city": "Lisbon"}, tmp_path)
        paid, failed = anyio.run(ours, url)
    assert theirs["isError"] is False and theirs["text"].startswith("Sunny in Lisbon tomorrow (paid by 0x"), theirs
    assert theirs["paymentResponse"]["success"] is True
    assert not paid.is_error and paid.content[0].text.startswith("Sunny in Porto tomorrow (paid by 0x")
    assert [p.verified for p in auth.payments] == [True]
    assert failed.is_error and settlement_of(failed) is None and payment_required(failed) is None
    assert dev_platform.balance(deployment.payout) == before + 20_000  # the call that raised was not charged


def test_our_mcp_client_pays_a_foundation_tool_server_settling_through_our_facilitator(
    dev_platform: PlatformHarness, tmp_path: Path
) -> None:
    deployment = dev_platform.deploy()
    pay_to = address_of(new_private_key())
    port = free_port()
    command = [
        mcp1_python(),
        str(INTEROP / "x402_mcp_server.py"),
        str(port),
        dev_platform.url,
        deployment.api_key,
        dev_platform.network,
        dev_platform.usdc,
        pay_to,
        "10000",
    ]
    receipts = dev_platform.platform.receipt_address
    auth = X402Auth(deployment.agent, max_amount="0.05", max_total="0.05", receipt_signer=receipts)

    timing: dict[str, float] = {}

    async def calls(url: str) -> tuple[object, object, object]:
        async with Client(url) as client:
            unpaid = await client.call_tool("forecast", {"city": "Lisbon"})
            paying = PayingSession(client, auth)
            timing["signed"] = time.time()
            paid = await paying.call_tool("forecast", {"city": "Lisbon"})
            timing["answered"] = time.time()
            broken = await paying.call_tool("broken", {"city": "Lisbon"})
            return unpaid, paid, broken

    with running(command, port, tmp_path, env=mcp1_environment()) as url:
        unpaid, paid, broken = anyio.run(calls, url)
    offer = payment_required(unpaid)  # type: ignore[arg-type]
    assert offer is not None and offer.resource is not None and offer.resource.url == "mcp://tool/forecast"
    # (a refusal tells when it was signed and answered, and the chain's clock then)
    assert not paid.is_error, (paid, timing, dev_platform.head_time(), time.time())  # type: ignore[attr-defined]
    settlement = settlement_of(paid)  # type: ignore[arg-type]
    assert settlement is not None and settlement.success and settlement.transaction
    assert broken.is_error and settlement_of(broken) is None  # type: ignore[attr-defined, arg-type]
    # Our facilitator's signed receipt reaches our agent through their wrapper.
    assert [p.verified for p in auth.payments] == [True]
    assert verify_receipt(settlement.receipt or {}, receipts)
    assert dev_platform.balance(pay_to) == 10_000  # one charge: the tool that raised was not settled
    with deployment.api() as api:
        usage = api.get("/agent/usage").json()["usage"]
    assert usage["settlements"] == 1
