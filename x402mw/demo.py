"""``x402mw demo``: the whole agent-payment story on the embedded defaults, narrated.

A platform on SQLite with the in-process dev chain, a merchant with an API key and an agent
endpoint, a Starlette seller protecting ``/weather``, and an agent holding only test USDC (no gas)
paying for several requests. Everything runs on loopback in this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import time
from decimal import Decimal
from pathlib import Path

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from x402mw.adapters.starlette import PaymentMiddleware, paid
from x402mw.client import AsyncMerchantClient, Wallet, X402Auth
from x402mw.evm.keys import address_of, new_private_key
from x402mw.evm.receipts import verify_receipt
from x402mw.platform.chain.token import balance_of
from x402mw.platform.runtime import Platform
from x402mw.platform.server import PlatformServer, free_port
from x402mw.platform.services.merchants import create_api_key, create_merchant
from x402mw.platform.settings import PlatformSettings
from x402mw.protocol import decode_payment_required, decode_settlement_response, format_amount

__all__ = ["run_demo"]

PRICE_MINOR = 10_000  # 0.01 USDC


def _say(text: str = "") -> None:
    print(text, flush=True)


def _seller(api_key: str, platform_url: str, endpoint_id: str) -> Starlette:
    @paid(endpoint_id, description="Today's weather")
    async def weather(request: Request) -> JSONResponse:
        settlement = request.state.x402
        return JSONResponse({"forecast": "sunny, 21°C", "paidWith": settlement.transaction})

    return Starlette(
        routes=[Route("/weather", weather)],
        middleware=[Middleware(PaymentMiddleware, api_key=api_key, platform_url=platform_url)],
    )


async def _balances(server: PlatformServer, token: str, names: dict[str, str]) -> dict[str, tuple[int, int]]:
    async def read(platform: Platform) -> dict[str, tuple[int, int]]:
        chain = next(iter(platform.chains))
        found = {}
        for label, address in names.items():
            coins = await balance_of(chain.rpc, token, address)
            wei = int(await chain.rpc.request("eth_getBalance", [address, "latest"]), 16)
            found[label] = (coins, wei)
        return found

    return await asyncio.to_thread(server.call, read)


NEXT_STEP = (
    "Next: run your own platform and see these payments in its dashboard (x402mw platform serve, then "
    "http://127.0.0.1:4402/dashboard): docs/quickstart.md"
)


async def run_demo(requests: int = 3) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="x402mw-demo-"))
    try:
        agent = Wallet(new_private_key())
        payout = address_of(new_private_key())
        _say("x402mw demo — an agent pays per request in USDC; the platform's relayer pays the gas.")
        _say(f"  workdir: {workdir} (removed at the end)")
        settings = PlatformSettings(database_url=f"sqlite:///{workdir / 'platform.sqlite3'}", data_dir=workdir)
        started = time.perf_counter()
        server = await asyncio.to_thread(PlatformServer(settings).start)
        try:
            return await _story(server, agent, payout, requests, started)
        finally:
            await asyncio.to_thread(server.stop)
    finally:
        # the demo's platform, keys and dev chain were made for this run only
        await asyncio.to_thread(shutil.rmtree, workdir, True)


async def _story(server: PlatformServer, agent: Wallet, payout: str, requests: int, started: float) -> int:
    platform = server.platform
    assert platform is not None
    chain = next(iter(platform.chains))
    usdc = chain.network.assets["USDC"].address
    _say(
        f"\n1. Platform up at {server.url} in {time.perf_counter() - started:.1f}s "
        f"(SQLite, in-process dev chain {chain.network.caip2}, USDC at {usdc})."
    )
    merchant = await asyncio.to_thread(server.call, lambda p: create_merchant(p.engine, "Demo Weather Co"))
    _, api_key = await asyncio.to_thread(server.call, lambda p: create_api_key(p.engine, merchant.id))
    _say(f"2. Merchant {merchant.id} created with a test API key {api_key[:12]}…")
    async with httpx.AsyncClient(base_url=server.url, headers={"Authorization": f"Bearer {api_key}"}) as api:
        reply = await api.post(
            "/agent/endpoints",
            json={
                "name": "Weather",
                "resourceUrl": "http://127.0.0.1/weather",
                "chainId": chain.chain_id,
                "currency": "USDC",
                "payoutAddress": payout,
                "pricingMode": "fixed",
                "amountMinor": str(PRICE_MINOR),
            },
        )
        reply.raise_for_status()
        endpoint = reply.json()["endpoint"]
        faucet = await api.post(
            "/sandbox/faucet",
            json={"network": chain.network.caip2, "currency": "USDC", "address": agent.address, "amount": "5"},
        )
        faucet.raise_for_status()
    _say(f"3. Agent endpoint {endpoint['id']}: {format_amount(PRICE_MINOR)} USDC per request, paid to {payout}.")
    _say(f"   Sandbox faucet gave the agent {agent.address} 5 test USDC (tx {faucet.json()['transaction'][:18]}…).")

    port = free_port()
    seller = uvicorn.Server(
        uvicorn.Config(
            _seller(api_key, server.url, endpoint["id"]),
            host="127.0.0.1",
            port=port,
            log_level="warning",
            access_log=False,
        )
    )
    serving = asyncio.get_running_loop().create_task(seller.serve())
    while not seller.started:
        await asyncio.sleep(0.01)
    url = f"http://127.0.0.1:{port}/weather"
    _say(f"4. Seller (Starlette + x402mw PaymentMiddleware) serving {url}")
    names = {"agent": agent.address, "payout": payout, "relayer": chain.relayer.address}
    before = await _balances(server, usdc, names)
    try:
        async with httpx.AsyncClient() as plain:
            unpaid = await plain.get(url)
        offer = decode_payment_required(unpaid.headers["PAYMENT-REQUIRED"]).accepts[0]
        _say(
            f"\n5. Without payment: HTTP {unpaid.status_code}; PAYMENT-REQUIRED offers {offer.amount} atomic "
            f"USDC ({format_amount(offer.amount)}) on {offer.network} to {offer.pay_to}."
        )
        _say(f"   The agent holds {format_amount(before['agent'][0])} USDC and {before['agent'][1]} wei of gas money.")
        auth = X402Auth(agent, max_amount="0.05", receipt_signer=platform.receipt_address)
        verified = 0
        async with httpx.AsyncClient(auth=auth, timeout=60) as client:
            for number in range(1, requests + 1):
                t0 = time.perf_counter()
                response = await client.get(url)
                took = (time.perf_counter() - t0) * 1000
                settlement = decode_settlement_response(response.headers["PAYMENT-RESPONSE"])
                receipt = settlement.receipt or {}
                ok = verify_receipt(receipt, platform.receipt_address)
                verified += ok
                _say(f"6.{number} Paid request: HTTP {response.status_code} in {took:.0f} ms, body {response.json()}")
                _say(
                    f"     tx {settlement.transaction}; receipt signed by {receipt.get('signer')}: "
                    f"{'verified' if ok else 'NOT VERIFIED'}"
                )
        after = await _balances(server, usdc, names)
    finally:
        seller.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await serving
    paid_total = requests * PRICE_MINOR
    _say("\n7. Balances moved:")
    for label in names:
        coins = after[label][0] - before[label][0]
        gas = after[label][1] - before[label][1]
        _say(
            f"   {label:8} USDC {format_amount(before[label][0]):>12} -> {format_amount(after[label][0]):>12}"
            f" ({'+' if coins >= 0 else ''}{format_amount(coins)}); gas wei change {gas}"
        )
    ordered = await _payment_order(server, api_key)
    good = (
        verified == requests
        and after["payout"][0] - before["payout"][0] == paid_total
        and after["agent"][1] == 0
        and ordered
    )
    _say(
        f"\n{'OK' if good else 'FAILED'}: {verified}/{requests} receipts verified; the payout address received "
        f"{format_amount(after['payout'][0] - before['payout'][0])} USDC; the agent spent no gas; "
        f"the payment order was {'paid and refunded' if ordered else 'NOT paid and refunded'}."
    )
    _say(NEXT_STEP)
    return 0 if good else 1


async def _payment_order(server: PlatformServer, api_key: str) -> bool:
    """A person's payment: an order, paid in the sandbox with a real transfer, then refunded."""
    async with AsyncMerchantClient(api_key, server.url, timeout=60) as client:
        order = await client.payment_intents.create(order_id="demo-order-1", amount="12.50", currency="USDC")
        _say(f"\n8. Payment order {order.order_id}: {order.amount} USDC, checkout at {order.checkout_url}")
        paid = (await client.sandbox.simulate_payment(order.id)).payment_intent
        _say(f"   The sandbox paid it from {paid.payer}: {paid.status}, tx {paid.tx_hash}")
        balance = sum((b.available for b in (await client.balances.list()).data), Decimal(0))
        refund = await client.refunds.create(order.id, reason="demo")
        after = sum((b.available for b in (await client.balances.list()).data), Decimal(0))
        _say(f"   Refunded to the payer: {refund.status}, tx {refund.tx_hash}; balance {balance} -> {after} USDC")
    return paid.status == "succeeded" and refund.status == "completed" and after == balance - order.amount
