"""The channels' worker on the dev chain: a channel idle past its endpoint's refund time is claimed
and refunded; a timed withdrawal the payer begins makes its channel's vouchers claimed at once; a
claim whose process stopped before the settle is settled by the next worker; a worker in a process of its
own (no key cached) signs its claims with the key it reads from the database; nothing is lost."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from eth_account import Account

from tests.channel_fixtures import channel_app, channel_deployment, channel_row, open_channel
from tests.harness import PlatformHarness
from tests.sellers import asgi_transport, lifespan
from tests.waiting import eventually
from x402mw.evm.batch_settlement import BATCH_SETTLEMENT_ADDRESS
from x402mw.platform.chain.admin import transact
from x402mw.platform.chain.channels import finalize_withdraw_calldata, initiate_withdraw_calldata
from x402mw.platform.clock import ManualClock
from x402mw.platform.services.channels.authorizers import Authorizers
from x402mw.platform.services.channels.service import ChannelService
from x402mw.platform.services.channels.worker import ChannelWorker

pytestmark = pytest.mark.anyio


def _worker(platform: Any, ahead: float = 0.0) -> ChannelWorker:
    """A worker of its own (what another process runs), its clock ``ahead`` seconds in the future."""
    clock = ManualClock()
    clock.advance(ahead)
    return ChannelWorker(platform.engine, platform.chains, clock, platform.channels)


async def test_idle_channels_are_refunded_and_withdrawals_claimed_at_once(dev_platform: PlatformHarness) -> None:
    harness = dev_platform
    deployment = await asyncio.to_thread(channel_deployment, harness, price=1_000)
    with deployment.api() as api:
        changed = api.patch(f"/agent/endpoints/{deployment.endpoint_id}", json={"channel": {"idleRefundSeconds": 600}})
        assert changed.status_code == 200, changed.text
        assert changed.json()["endpoint"]["channel"]["idleRefundSeconds"] == 600
    app = channel_app(deployment.api_key, harness.url, deployment.endpoint_id)
    async with lifespan(app), httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver") as client:
        idle = await open_channel(harness, client, deployment.agent_key, "/work")  # 5,000 in, 1,000 charged
        leaving = await open_channel(harness, client, deployment.agent_key, "/work")
    payer_balance = await asyncio.to_thread(harness.balance, deployment.agent.address)

    # the payer of `leaving` begins a timed withdrawal of what is not charged
    rpc, relayer = harness.chain.rpc, harness.chain.relayer

    async def withdraw(_platform: Any) -> None:
        owner = str(Account.from_key(deployment.agent_key).address)
        await relayer.wait_for_receipt(await relayer.send(owner, b"", gas=21_000, value=10**17))
        data = initiate_withdraw_calldata(leaving.config, 4_000)
        await transact(rpc, deployment.agent_key, BATCH_SETTLEMENT_ADDRESS, data, gas=200_000)

    harness.server.call(withdraw)
    now = _worker(harness.platform)
    harness.server.call(lambda _p: now.watch_withdrawals())
    harness.server.call(lambda _p: now.claim())  # not idle long enough, but leaving
    left = harness.server.call(lambda p: channel_row(p, leaving.channel))
    assert (left.claimed, left.withdraw_amount) == (1_000, 4_000) and left.withdraw_requested_at > 0
    assert harness.server.call(lambda p: channel_row(p, idle.channel)).claimed == 0

    # (this process stops here, between the claim and the settle; another worker settles it)
    # (the platform's own worker may finish a transaction of this one's first: a pass more settles it)
    later = _worker(harness.platform, ahead=601)

    def done() -> tuple[int, int, int, int]:
        harness.server.call(lambda _p: later.run_once())
        kept = harness.server.call(lambda p: channel_row(p, idle.channel))
        return (kept.charged, kept.claimed, kept.settled, kept.refunded)

    expected = (1_000, 1_000, 1_000, 4_000)
    await asyncio.to_thread(
        eventually, done, until=lambda got: got == expected, what="the idle channel settled and refunded"
    )
    assert await asyncio.to_thread(harness.balance, deployment.payout) == 2_000
    # both were idle by then: what is left of each went back to the payer (the leaving one's refund
    # covers its withdrawal, which the escrow then cancels)
    assert await asyncio.to_thread(harness.balance, deployment.agent.address) == payer_balance + 8_000
    with deployment.api() as api:
        listed = api.get(f"/agent/channels/0x{leaving.channel.hex()}").json()["channel"]
    assert (listed["settledMinor"], listed["refundedMinor"], listed["pendingWithdrawal"]) == ("1000", "4000", None)


async def test_a_channel_drained_by_a_withdrawal_does_not_hold_up_the_others_claims(
    quiet_dev_platform: PlatformHarness,
) -> None:
    """A payer that withdrew everything before its vouchers were claimed (the worker was not
    watching): the batch that would fail on that row claims the other channels without it."""
    harness = quiet_dev_platform
    deployment = await asyncio.to_thread(channel_deployment, harness, price=1_000)
    app = channel_app(deployment.api_key, harness.url, deployment.endpoint_id)
    async with lifespan(app), httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver") as client:
        drained = await open_channel(harness, client, deployment.agent_key, "/work")
        kept = await open_channel(harness, client, deployment.agent_key, "/work")
    rpc, relayer = harness.chain.rpc, harness.chain.relayer

    async def withdraw_all(_platform: Any) -> None:
        owner = str(Account.from_key(deployment.agent_key).address)
        await relayer.wait_for_receipt(await relayer.send(owner, b"", gas=21_000, value=10**17))
        await transact(
            rpc,
            deployment.agent_key,
            BATCH_SETTLEMENT_ADDRESS,
            initiate_withdraw_calldata(drained.config, 5_000),
            gas=200_000,
        )
        block = await rpc.request("eth_getBlockByNumber", ["latest", False])
        await rpc.request("evm_setNextBlockTimestamp", [hex(int(block["timestamp"], 16) + 901)])
        await rpc.request("evm_mine", [])
        await transact(
            rpc, deployment.agent_key, BATCH_SETTLEMENT_ADDRESS, finalize_withdraw_calldata(drained.config), gas=200_000
        )

    harness.server.call(withdraw_all)
    worker = _worker(harness.platform)
    harness.server.call(lambda _p: worker.claim(everything=True))
    assert harness.server.call(lambda p: channel_row(p, kept.channel)).claimed == 1_000
    assert harness.server.call(lambda p: channel_row(p, drained.channel)).claimed == 0  # forfeited: nothing left


async def test_a_worker_in_another_process_claims_with_the_key_it_reads_from_the_database(
    quiet_dev_platform: PlatformHarness,
) -> None:
    """``x402mw platform worker``, or a platform restarted, has no authorizer key cached: it reads the
    sealed key by the channels' authorizer address, which the worker holds in lower case."""
    harness = quiet_dev_platform
    deployment = await asyncio.to_thread(channel_deployment, harness, price=1_000)
    app = channel_app(deployment.api_key, harness.url, deployment.endpoint_id)
    async with lifespan(app), httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver") as client:
        opened = await open_channel(harness, client, deployment.agent_key, "/work")
    platform = harness.platform
    fresh = ChannelService(
        platform.engine, platform.chains, ManualClock(), Authorizers(platform.engine, platform.secrets)
    )
    worker = ChannelWorker(platform.engine, platform.chains, ManualClock(), fresh)
    sent = harness.server.call(lambda _p: worker.claim(everything=True))
    assert len(sent) == 1
    assert harness.server.call(lambda p: channel_row(p, opened.channel)).claimed == 1_000
