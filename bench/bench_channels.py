"""Paid requests per second by payment channel (x402 ``batch-settlement``) beside exact ones, and the
gas each spends per 1,000 paid requests, in the same run: agents -> seller -> platform -> anvil.

The stack is `bench_e2e`'s (anvil mining a block every 50 ms, ``x402mw platform serve``, sellers
under uvicorn, ``agents`` concurrent agents in this process), with two sellers:
``examples/starlette_seller.py`` (a fixed price, the ``exact`` scheme: a transfer per request) and
``examples/channel_seller.py`` (the same price on an endpoint whose ``channel`` object offers
channels alone). The same agents, in this order:

1. pay the exact route: `bench_e2e`'s warm-up and measured window (``warm_up_then_measure``);
2. pay the channel route with ``X402Auth(..., channels=ChannelPolicy(max_deposit=...))``: each
   agent's first request of the warm-up deposits (the endpoint's ``minDepositMinor``, more than a
   run charges, so that no top-up falls in the window; the run checks one deposit per agent), and
   only the voucher-paid window after the warm-up is timed. Measured second, the channels pay for
   the chain's growth through the run (anvil's work per block grows with the blocks);
3. the platform's claim and settle of every channel, triggered at once as the channel worker's
   tests do (``ChannelWorker.claim(everything=True)``, then ``settle()``), from a platform started
   in this process on the same database and data dir with a relayer account of its own;
4. the chain alone: `bench_e2e`'s ``chain_baseline`` (the same transfers through our relayer
   straight to anvil, no HTTP, no database).

Gas, read from the receipts: exact is the ``gasUsed`` of the distinct settlement transactions of
every exact payment of the run (warm-up and window) per 1,000 of them; channels is the deposits,
claims and settles per 1,000 requests charged on the channels (warm-up and window). Targets (issue
35): channels / exact requests/s >= 5, channels / chain alone >= 2, channel gas / exact gas <= 0.02.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
from collections.abc import Iterable
from typing import Any

from sqlalchemy import create_engine, func, select

from bench._e2e import Stack
from bench.bench_e2e import chain_baseline, warm_up_then_measure
from x402mw.client import ChannelPolicy, Wallet
from x402mw.evm.keys import address_of, new_private_key
from x402mw.platform.chain.anvil import ANVIL_DEV_KEYS, deploy_test_tokens
from x402mw.platform.chain.rpc import HttpJsonRpc
from x402mw.platform.chain.token import mint
from x402mw.platform.db import tables
from x402mw.platform.db.engine import sync_url
from x402mw.platform.runtime import Platform
from x402mw.platform.settings import ChainSettings, PlatformSettings

PRICE = 1_000  # atomic units of USDC (0.001) a request, on both routes
DEPOSIT = 10 * 10**6  # 10 USDC a channel: 10,000 requests, more than a run charges
# each ratio: its target, and whether it is a floor (else a ceiling); how it is named and shown
TARGETS = {"requests": (5.0, True), "chain": (2.0, True), "gas": (0.02, False)}
RATIOS = {
    "requests": ("channels / exact requests/s", "{:.1f}x"),
    "chain": ("channels / chain alone (requests/s over transfers/s)", "{:.2f}x"),
    "gas": ("channel gas / exact gas (per 1,000 paid requests)", "{:.4f}"),
}


async def _claim_and_settle(stack: Stack, usdc: str) -> tuple[list[str], list[str]]:
    """Every channel's latest voucher claimed and what was claimed paid out, at once, by a platform
    in this process (the one serving keeps its own relayer account's nonces: this one uses another)."""
    settings = PlatformSettings(
        database_url=stack.database_url,
        data_dir=stack.workdir,
        chains=[ChainSettings(rpc_url=stack.anvil.url, tokens={"USDC": usdc})],
        relayer_key=ANVIL_DEV_KEYS[3].hex(),
        run_worker=False,
    )
    platform = await Platform.start(settings)
    try:
        claims = await platform.channel_worker.claim(everything=True)
        settles = await platform.channel_worker.settle()
    finally:
        await platform.aclose()
    return claims, settles


async def _gas_used(url: str, transactions: Iterable[str]) -> int:
    """The ``gasUsed`` of ``transactions`` (each counted once), from their receipts."""
    rpc = HttpJsonRpc(url)
    limit = asyncio.Semaphore(16)

    async def gas(transaction: str) -> int:
        async with limit:
            receipt = await rpc.request("eth_getTransactionReceipt", [transaction])
        if not receipt:
            raise RuntimeError(f"no receipt for {transaction}")
        return int(receipt["gasUsed"], 16)

    try:
        return sum(await asyncio.gather(*[gas(transaction) for transaction in set(transactions)]))
    finally:
        await rpc.aclose()


def _records(database_url: str) -> tuple[dict[str, list[str]], int]:
    """The run's transactions by what they did (``exact``: one entry per settled payment, a batch's
    transaction repeated; ``deposit``, ``claim``, ``settle``), and the total charged on the channels."""
    found: dict[str, list[str]] = {"exact": [], "deposit": [], "claim": [], "settle": []}
    payments, deposits, sent = tables.agent_payments, tables.channel_deposits, tables.channel_transactions
    engine = create_engine(sync_url(database_url))
    with engine.connect() as conn:
        exact = select(payments.c.transaction).where(payments.c.scheme == "exact", payments.c.status == "settled")
        found["exact"] = [str(row[0]) for row in conn.execute(exact)]
        confirmed = select(deposits.c.transaction).where(deposits.c.status == "confirmed")
        found["deposit"] = [str(row[0]) for row in conn.execute(confirmed)]
        for kind, transaction in conn.execute(
            select(sent.c.kind, sent.c.transaction).where(sent.c.status == "confirmed")
        ):
            found.setdefault(str(kind), []).append(str(transaction))
        charged = conn.execute(select(func.coalesce(func.sum(tables.payment_channels.c.charged), 0))).scalar_one()
    engine.dispose()
    return found, int(charged)


def run(seconds: float = 15.0, database: str = "sqlite", agents: int = 32) -> dict[str, float]:
    """``database`` is ``sqlite`` (a file in a temporary directory) or ``postgresql`` (a fresh database
    on ``X402MW_TEST_POSTGRES_URL``, default the local server)."""
    with Stack(database, prefix="x402mw-bench-channels-") as stack:
        return _run(stack, seconds, agents)


def _run(stack: Stack, seconds: float, agents: int) -> dict[str, float]:
    usdc = stack.on_chain(lambda rpc: deploy_test_tokens(rpc, stack.deployer))["USDC"]
    platform_pid = stack.start_platform(usdc)
    price: dict[str, Any] = {"pricingMode": "fixed", "amountMinor": str(PRICE)}
    exact_endpoint = stack.add_endpoint("exact", "/weather", price)
    channel = {"minDepositMinor": str(DEPOSIT), "withdrawDelaySeconds": 900, "only": True}
    channel_endpoint = stack.add_endpoint("channels", "/quote", {**price, "channel": channel})
    exact_seller, exact_pid = stack.start_seller("starlette_seller", exact_endpoint, "exact-seller.log")
    channel_seller, channel_pid = stack.start_seller("channel_seller", channel_endpoint, "channel-seller.log")
    keys = [new_private_key() for _ in range(agents)]

    async def fund(rpc: HttpJsonRpc) -> None:
        for key in keys:
            await mint(rpc, stack.deployer, usdc, address_of(key), 1_000 * 10**6)

    stack.on_chain(fund)
    wallets = [Wallet(k) for k in keys]
    shared = {"anvil": stack.anvil.pid, "platform": platform_pid, "agents": os.getpid()}
    policy = ChannelPolicy(max_deposit=str(DEPOSIT // 10**6))
    exact = asyncio.run(
        warm_up_then_measure(wallets, f"{exact_seller}/weather", seconds, {**shared, "seller": exact_pid})
    )
    by_channel = asyncio.run(
        warm_up_then_measure(wallets, f"{channel_seller}/quote", seconds, {**shared, "seller": channel_pid}, policy)
    )
    deposits_before_claims = len(_records(stack.database_url)[0]["deposit"])
    claims, settles = asyncio.run(_claim_and_settle(stack, usdc))
    exact_rate, channel_rate = exact[0] / exact[2], by_channel[0] / by_channel[2]
    baseline = asyncio.run(chain_baseline(stack.anvil.url, usdc, keys, max(200, exact[0] // 4), agents))

    records, charged = _records(stack.database_url)
    gas = {
        kind: asyncio.run(_gas_used(stack.anvil.url, records[kind])) for kind in ("exact", "deposit", "claim", "settle")
    }
    exact_paid = len(records["exact"])
    voucher_paid = charged // PRICE
    exact_gas = gas["exact"] * 1000 / max(exact_paid, 1)
    channel_gas = (gas["deposit"] + gas["claim"] + gas["settle"]) * 1000 / max(voucher_paid, 1)
    ratios = {"requests": channel_rate / exact_rate, "chain": channel_rate / baseline, "gas": channel_gas / exact_gas}

    print(
        f"channels vs exact ({agents} agents, {seconds:.0f}s each, {stack.database}): exact {exact_rate:.0f} paid "
        f"requests/s (p50 {statistics.median(exact[1]) * 1000:.0f} ms); by channel {channel_rate:.0f} voucher-paid "
        f"requests/s (p50 {statistics.median(by_channel[1]) * 1000:.0f} ms; {deposits_before_claims} deposits, one "
        f"per agent before the window); chain alone (relayer -> anvil, no HTTP/DB) {baseline:.0f} transfers/s"
    )
    for name, (paid, _latencies, _took, cpu, _began) in (("exact", exact), ("by channel", by_channel)):
        shares = ", ".join(f"{process} {spent * 1000 / max(paid, 1):.2f} ms" for process, spent in cpu.items())
        print(f"  {name} CPU per paid request: {shares}; total {sum(cpu.values()) * 1000 / max(paid, 1):.2f} ms")
    print(
        f"gas per 1,000 paid requests: exact {exact_gas:,.0f} ({exact_paid:,} settled payments in "
        f"{len(set(records['exact'])):,} transactions); by channel {channel_gas:,.0f} ({voucher_paid:,} requests "
        f"charged: {len(records['deposit'])} deposits {gas['deposit']:,} gas, {len(records['claim'])} claim(s) "
        f"{gas['claim']:,}, {len(records['settle'])} settle(s) {gas['settle']:,}; this run's worker sent "
        f"{len(claims)} claim(s) and {len(settles)} settle(s))"
    )
    channels = max(len(records["deposit"]), 1)
    per_channel = (gas["deposit"] + gas["claim"] + gas["settle"]) / channels
    per_transfer = gas["exact"] / max(len(set(records["exact"])), 1)
    print(
        f"  a channel's deposit, claim and settle: {per_channel:,.0f} gas, {per_channel / per_transfer:.1f} exact "
        f"settlements' worth; the channels' gas per request falls as 1 / requests per channel "
        f"({voucher_paid / channels:,.0f} here)"
    )
    for name, (label, shown) in RATIOS.items():
        target, at_least = TARGETS[name]
        met = ratios[name] >= target if at_least else ratios[name] <= target
        verdict = f"target {'>=' if at_least else '<='} {target:g}: {'yes' if met else 'NO'}"
        print(f"{label}: {shown.format(ratios[name])} ({verdict})")
    if deposits_before_claims != agents:
        print(f"  (expected one deposit per agent: {deposits_before_claims} for {agents} agents)")
    return {
        "channel_per_second": channel_rate,
        "exact_per_second": exact_rate,
        "chain_per_second": baseline,
        "ratio_vs_exact": ratios["requests"],
        "ratio_vs_chain": ratios["chain"],
        "exact_gas_per_1000": exact_gas,
        "channel_gas_per_1000": channel_gas,
        "gas_ratio": ratios["gas"],
    }


if __name__ == "__main__":
    arguments = sys.argv[1:]
    run(
        float(arguments[0]) if arguments else 15.0,
        arguments[1] if len(arguments) > 1 else "sqlite",
        int(arguments[2]) if len(arguments) > 2 else 32,
    )
