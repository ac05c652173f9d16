"""Payment channels (``batch-settlement``) end to end on the platform: an endpoint offers them beside
``exact``; the x402 Foundation SDK's agent deposits once and pays many requests with vouchers; the
worker claims them in one transaction and settles the exact sum to the payout address."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
from typing import Any

import httpx
import pytest

from tests.channel_fixtures import (
    HandPayer,
    channel_app,
    channel_deployment,
    channel_row,
    open_channel,
    sdk_channel_agent,
)
from tests.harness import PlatformHarness
from tests.integration.test_dashboard_agent_payments import _team_of
from tests.sellers import asgi_transport, lifespan
from x402mw.evm.keys import new_private_key
from x402mw.platform.chain.channels import EVENTS
from x402mw.protocol import channels as wire
from x402mw.protocol.codec import encode_header

pytestmark = pytest.mark.anyio


def _decoded(response: httpx.Response, header: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(base64.b64decode(response.headers[header]))
    return found


async def test_an_sdk_agent_pays_many_requests_then_one_claim_and_one_settle(
    any_chain_platform: PlatformHarness,
) -> None:
    harness = any_chain_platform
    deployment = await asyncio.to_thread(channel_deployment, harness, price=1_000)
    app = channel_app(deployment.api_key, harness.url, deployment.endpoint_id)
    plain = httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver")
    agent, _scheme = sdk_channel_agent(harness, deployment.agent_key, asgi_transport(app))
    async with lifespan(app), plain, agent:
        unpaid = await plain.get("/work")
        answers = [await agent.get("/work") for _ in range(12)]

    assert unpaid.status_code == 402
    schemes = [offer["scheme"] for offer in _decoded(unpaid, "PAYMENT-REQUIRED")["accepts"]]
    assert schemes == ["exact", "batch-settlement"]
    for response in answers:
        assert response.status_code == 200, response.text
    first, last = _decoded(answers[0], "PAYMENT-RESPONSE"), _decoded(answers[-1], "PAYMENT-RESPONSE")
    assert first["transaction"]  # the deposit
    assert last["transaction"] == "" and last["extra"]["chargedAmount"] == "1000"
    assert last["extra"]["channelState"]["chargedCumulativeAmount"] == "12000"

    # (the worker claims every merchant's channels, one transaction per receiver authorizer)
    worker = harness.platform.channel_worker
    before = await asyncio.to_thread(harness.balance, deployment.payout)
    harness.server.call(lambda _p: worker.claim(everything=True))
    harness.server.call(lambda _p: worker.settle())
    assert await asyncio.to_thread(harness.balance, deployment.payout) == before + 12_000
    channel = bytes.fromhex(last["extra"]["channelState"]["channelId"][2:])
    row = harness.server.call(lambda p: channel_row(p, channel))
    assert (row.charged, row.claimed, row.settled) == (12_000, 12_000, 12_000)


async def _offer(client: httpx.AsyncClient) -> dict[str, Any]:
    unpaid = await client.get("/work")
    assert unpaid.status_code == 402
    (offer,) = [o for o in _decoded(unpaid, "PAYMENT-REQUIRED")["accepts"] if o["scheme"] == "batch-settlement"]
    return offer


async def _pay(client: httpx.AsyncClient, payload: dict[str, Any], **params: str) -> httpx.Response:
    return await client.get("/work", params=params, headers={"PAYMENT-SIGNATURE": encode_header(payload)})


def _refusal(response: httpx.Response) -> str:
    assert response.status_code == 402, response.text
    return str(_decoded(response, "PAYMENT-REQUIRED")["error"])


async def test_bad_channel_payments_are_refused_with_the_scheme_codes(dev_platform: PlatformHarness) -> None:
    harness = dev_platform
    deployment = await asyncio.to_thread(channel_deployment, harness, price=1_000, min_deposit=5_000)
    app = channel_app(deployment.api_key, harness.url, deployment.endpoint_id)
    client = httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver")
    key = deployment.agent_key
    async with lifespan(app), client:
        offer = await _offer(client)
        payer = HandPayer(key, offer, harness.chain.chain_id)
        domain = {"name": offer["extra"]["name"], "version": "2", "chainId": harness.chain.chain_id}
        domain["verifyingContract"] = harness.usdc
        until = harness.head_time() + 3600

        def deposit(amount: int, ceiling: int, **more: Any) -> dict[str, Any]:
            return payer.payload(
                "deposit", payer.voucher(ceiling), deposit=payer.deposit(amount, domain, until, **more)
            )

        below = await _pay(client, deposit(4_000, 1_000))
        assert _refusal(below) == wire.DEPOSIT_BELOW_MINIMUM
        for field, value, code in (
            ("receiver", deployment.agent.address, wire.RECEIVER_MISMATCH),
            ("receiverAuthorizer", deployment.agent.address, wire.AUTHORIZER_MISMATCH),
            ("token", harness.platform.chains.get(harness.chain.chain_id).asset("EURC").address, wire.TOKEN_MISMATCH),
            ("withdrawDelay", 1_800, wire.WITHDRAW_DELAY_MISMATCH),
            ("salt", "0x" + "11" * 32, wire.CHANNEL_ID_MISMATCH),
        ):
            altered = deposit(10_000, 1_000)
            altered["payload"]["channelConfig"][field] = value
            assert _refusal(await _pay(client, altered)) == code, field
        other_chain = HandPayer(key, offer, harness.chain.chain_id + 1, salt=payer.config.salt)
        foreign = payer.payload("voucher", other_chain.voucher(1_000))
        assert _refusal(await _pay(client, foreign)) == wire.CHANNEL_ID_MISMATCH
        assert _refusal(await _pay(client, payer.payload("voucher", payer.voucher(1_000)))) == wire.CHANNEL_NOT_FOUND

        salt = 7
        opened = await _pay(client, deposit(10_000, 1_000, salt=salt))
        assert opened.status_code == 200, opened.text
        reused = await _pay(client, deposit(10_000, 2_000, salt=salt))
        assert _refusal(reused) == wire.DEPOSIT_REUSED

        replayed = await _pay(client, payer.payload("voucher", payer.voucher(1_000)))
        assert _refusal(replayed) == wire.CUMULATIVE_MISMATCH
        (corrective,) = [
            o for o in _decoded(replayed, "PAYMENT-REQUIRED")["accepts"] if o["scheme"] == "batch-settlement"
        ]
        assert corrective["extra"]["channelState"]["chargedCumulativeAmount"] == "1000"
        assert corrective["extra"]["voucherState"]["signedMaxClaimable"] == "1000"
        for ceiling in (1_500, 3_000):
            assert (
                _refusal(await _pay(client, payer.payload("voucher", payer.voucher(ceiling))))
                == wire.CUMULATIVE_MISMATCH
            )
        stranger = payer.payload("voucher", payer.voucher(2_000, key=new_private_key()))
        assert _refusal(await _pay(client, stranger)) == wire.VOUCHER_SIGNATURE

        # A handler that fails charges nothing: the same voucher then pays.
        failed = await _pay(client, payer.payload("voucher", payer.voucher(2_000)), fail="1")
        assert failed.status_code == 500
        for ceiling in range(2_000, 10_001, 1_000):
            paid = await _pay(client, payer.payload("voucher", payer.voucher(ceiling)))
            assert paid.status_code == 200, (ceiling, paid.text)
        exhausted = await _pay(client, payer.payload("voucher", payer.voucher(11_000)))
        assert _refusal(exhausted) == wire.CUMULATIVE_EXCEEDS_BALANCE

    channel = harness.server.call(lambda p: channel_row(p, payer.channel))
    assert (channel.charged, channel.signed_max, channel.balance) == (10_000, 10_000, 10_000)


async def test_fifty_channels_are_claimed_in_one_transaction_and_listed(dev_platform: PlatformHarness) -> None:
    harness = dev_platform
    deployment = await asyncio.to_thread(channel_deployment, harness, price=1_000)
    app = channel_app(deployment.api_key, harness.url, deployment.endpoint_id)
    client = httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver")
    async with lifespan(app), client:
        offer = await _offer(client)
        payers = [HandPayer(deployment.agent_key, offer, harness.chain.chain_id) for _ in range(50)]
        domain = {"name": offer["extra"]["name"], "version": "2", "chainId": harness.chain.chain_id}
        domain["verifyingContract"] = harness.usdc
        until = harness.head_time() + 3600

        async def open_and_pay(payer: HandPayer) -> list[int]:
            first = payer.payload("deposit", payer.voucher(1_000), deposit=payer.deposit(5_000, domain, until))
            second = payer.payload("voucher", payer.voucher(2_000))
            return [(await _pay(client, first)).status_code, (await _pay(client, second)).status_code]

        for start in range(0, 50, 10):
            answers = await asyncio.gather(*(open_and_pay(p) for p in payers[start : start + 10]))
            assert answers == [[200, 200]] * 10

    worker = harness.platform.channel_worker
    before = await asyncio.to_thread(harness.balance, deployment.payout)
    claims = harness.server.call(lambda _p: worker.claim(everything=True))
    ours = {"0x" + p.channel.hex() for p in payers}
    claimed_by = []  # the channels of ours each claim transaction claimed
    for claim in claims:
        logs = harness.server.call(lambda _p, claim=claim: worker._logs(harness.chain, claim))
        topics = [[str(t).lower() for t in log["topics"]] for log in logs]
        claimed_by.append({t[1] for t in topics if t[0] == "0x" + EVENTS["Claimed"].hex()} & ours)
    assert sorted(len(found) for found in claimed_by if found) == [50]  # all 50 in one claimWithSignature
    harness.server.call(lambda _p: worker.settle())
    assert await asyncio.to_thread(harness.balance, deployment.payout) == before + 50 * 2_000

    with deployment.api() as api:
        listed = api.get("/agent/channels", params={"endpointId": deployment.endpoint_id, "limit": 100}).json()
        one = api.get(f"/agent/channels/{listed['data'][0]['id']}").json()["channel"]
        missing = api.get("/agent/channels/0x" + "00" * 32)
    assert len(listed["data"]) == 50
    assert {(c["chargedMinor"], c["claimedMinor"], c["settledMinor"], c["depositedMinor"]) for c in listed["data"]} == {
        ("2000", "2000", "2000", "5000")
    }
    assert one["unclaimedMinor"] == "0" and one["pendingWithdrawal"] is None
    assert missing.status_code == 404


async def test_a_metered_channel_charges_the_usage_and_the_payer_asks_a_refund(dev_platform: PlatformHarness) -> None:
    harness = dev_platform
    deployment = await asyncio.to_thread(channel_deployment, harness, price=5_000, metered=True, only=True)
    app = channel_app(deployment.api_key, harness.url, deployment.endpoint_id)
    client = httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver")
    async with lifespan(app), client:
        unpaid = await client.get("/work")
        assert [o["scheme"] for o in _decoded(unpaid, "PAYMENT-REQUIRED")["accepts"]] == ["batch-settlement"]
        payer = await open_channel(harness, client, deployment.agent_key, "/work")  # deposit 25,000; charged 0
        used = await _pay(client, payer.payload("voucher", payer.voucher(5_000)), use="1234")
        assert used.status_code == 200, used.text
        state = _decoded(used, "PAYMENT-RESPONSE")["extra"]
        assert state["chargedAmount"] == "1234" and state["channelState"]["chargedCumulativeAmount"] == "1234"
        beyond = await _pay(client, payer.payload("voucher", payer.voucher(6_234)), use="99999")
        assert _decoded(beyond, "PAYMENT-RESPONSE")["extra"]["chargedAmount"] == "5000"  # at most the price
        # the payer asks for what is left: a zero-charge voucher at the charged total; the handler is skipped
        refund = await _pay(client, payer.payload("refund", payer.voucher(6_234)), use="1")
        assert refund.status_code == 200, refund.text
        refunded = _decoded(refund, "PAYMENT-RESPONSE")
        assert refunded["amount"] == str(25_000 - 6_234) and refunded["transaction"]
        assert refunded["extra"]["channelState"]["balance"] == "6234"
        assert refunded["extra"]["channelState"]["totalClaimed"] == "6234"  # claimed in the same transaction
        nothing_left = await _pay(client, payer.payload("refund", payer.voucher(6_234)))
        assert _refusal(nothing_left) == wire.REFUND_NO_BALANCE

    channel = harness.server.call(lambda p: channel_row(p, payer.channel))
    assert (channel.charged, channel.claimed, channel.refunded) == (6_234, 6_234, 25_000 - 6_234)
    harness.server.call(lambda p: p.channel_worker.settle())
    assert await asyncio.to_thread(harness.balance, deployment.payout) == 6_234
    with deployment.api() as api:
        events = api.get("/events", params={"limit": 100}).json()["data"]
    assert "channel.settled" in {e["type"] for e in events}
    team = _team_of(harness, deployment.merchant_id, deployment.api_key)
    with team.sign_in("viewer") as browser:
        page = browser.get(f"/dashboard/agents/{deployment.endpoint_id}")
    assert page.status_code == 200, page.text
    assert "Payment channels" in page.text and payer.config.payer in page.text
    assert "0.006234" in page.text and "0.018766" in page.text  # charged, claimed and settled; refunded


@pytest.mark.both_databases
async def test_requests_on_one_channel_are_served_one_at_a_time(dev_platform: PlatformHarness) -> None:
    """Eight requests sent at once with the same next voucher: one is served and charged, the
    others are refused (the channel busy, or their voucher stale once it is charged); never more
    charged than signed."""
    harness = dev_platform
    deployment = await asyncio.to_thread(channel_deployment, harness, price=1_000)
    app = channel_app(deployment.api_key, harness.url, deployment.endpoint_id)
    async with lifespan(app), httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver") as client:
        payer = await open_channel(harness, client, deployment.agent_key, "/work")
        same = payer.payload("voucher", payer.voucher(2_000))
        answers = await asyncio.gather(*(_pay(client, same, slow="1") for _ in range(8)))
        assert sorted(a.status_code for a in answers) == [200] + [402] * 7
        reasons = {_refusal(a) for a in answers if a.status_code == 402}
        assert reasons <= {wire.CHANNEL_BUSY, wire.CUMULATIVE_MISMATCH}
        following = await _pay(client, payer.payload("voucher", payer.voucher(3_000)))
        assert following.status_code == 200, following.text
    channel = harness.server.call(lambda p: channel_row(p, payer.channel))
    assert (channel.charged, channel.signed_max, channel.hold_id) == (3_000, 3_000, None)


async def test_a_smart_account_pays_through_a_channel(dev_platform: PlatformHarness) -> None:
    """A payer that is an EIP-1271 wallet (no payer authorizer): its owner signs the deposit and the
    vouchers, which the wallet accepts; another key's voucher is refused."""
    from tests.integration.test_smart_accounts import deployed_wallet

    harness = dev_platform
    deployment = await asyncio.to_thread(channel_deployment, harness, price=1_000)
    account = await asyncio.to_thread(deployed_wallet, harness, deployment.api_key, fund="1")
    app = channel_app(deployment.api_key, harness.url, deployment.endpoint_id)
    async with lifespan(app), httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver") as client:
        offer = await _offer(client)
        payer = HandPayer(account.owner_key, offer, harness.chain.chain_id)
        payer.config = dataclasses.replace(payer.config, payer=account.address)
        domain = {"name": offer["extra"]["name"], "version": "2", "chainId": harness.chain.chain_id}
        domain["verifyingContract"] = harness.usdc
        deposit = payer.deposit(10_000, domain, harness.head_time() + 3600)
        opened = await _pay(client, payer.payload("deposit", payer.voucher(1_000), deposit=deposit))
        assert opened.status_code == 200, opened.text
        assert _decoded(opened, "PAYMENT-RESPONSE")["payer"].lower() == account.address.lower()
        paid = await _pay(client, payer.payload("voucher", payer.voucher(2_000)))
        assert paid.status_code == 200, paid.text
        stranger = await _pay(client, payer.payload("voucher", payer.voucher(3_000, key=new_private_key())))
        assert _refusal(stranger) == wire.VOUCHER_SIGNATURE
    claims = harness.server.call(lambda p: p.channel_worker.claim(everything=True))
    assert claims  # the escrow takes the owner's vouchers through the wallet too
    assert harness.server.call(lambda p: channel_row(p, payer.channel)).claimed == 2_000


async def test_an_sdk_agent_that_lost_its_state_resumes_from_the_corrective_402(dev_platform: PlatformHarness) -> None:
    harness = dev_platform
    deployment = await asyncio.to_thread(channel_deployment, harness, price=1_000, min_deposit=20_000)
    app = channel_app(deployment.api_key, harness.url, deployment.endpoint_id)
    salt = "0x" + "5a" * 32
    first, _ = sdk_channel_agent(harness, deployment.agent_key, asgi_transport(app), salt=salt)
    again, _ = sdk_channel_agent(harness, deployment.agent_key, asgi_transport(app), salt=salt, reads=True)
    async with lifespan(app), first, again:
        before = [await first.get("/work") for _ in range(3)]
        # A new client of the same payer and channel, its state lost: it reads the chain (nothing
        # claimed yet), signs for 1,000, gets the corrective 402 with the channel's last voucher,
        # checks its own signature in it and pays on from 3,000.
        after = await again.get("/work")
    assert [r.status_code for r in before] == [200, 200, 200]
    assert after.status_code == 200, after.text
    assert _decoded(after, "PAYMENT-RESPONSE")["extra"]["channelState"]["chargedCumulativeAmount"] == "4000"


async def test_our_agent_pays_our_channel_seller(dev_platform: PlatformHarness) -> None:
    """x402mw's own X402Auth with a ChannelPolicy: one deposit, then vouchers, on the platform's channels."""
    from x402mw.client import ChannelPolicy, X402Auth

    harness = dev_platform
    deployment = await asyncio.to_thread(channel_deployment, harness, price=1_000, only=True)
    app = channel_app(deployment.api_key, harness.url, deployment.endpoint_id)
    auth = X402Auth(deployment.agent, max_amount="0.01", channels=ChannelPolicy(max_deposit="0.01"))
    transport = asgi_transport(app)
    async with lifespan(app), httpx.AsyncClient(transport=transport, base_url="http://testserver", auth=auth) as agent:
        answers = [await agent.get("/work") for _ in range(5)]
    assert [a.status_code for a in answers] == [200] * 5, answers[-1].text
    settled = [_decoded(a, "PAYMENT-RESPONSE") for a in answers]
    assert bool(settled[0]["transaction"]) and not any(s["transaction"] for s in settled[1:])
    assert settled[-1]["extra"]["channelState"]["chargedCumulativeAmount"] == "5000"
