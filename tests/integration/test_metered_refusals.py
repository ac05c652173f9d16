"""Bad input on metered routes (the ``upto`` scheme): each a clear refusal in the protocol's shape,
nothing charged twice, nothing above the ceiling. Hand-made payments against the real platform on
the dev chain, through a Starlette seller."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.harness import Deployment, PlatformHarness, start_dev_platform
from tests.metered_fixtures import approve_permit2, metered_app, metered_deployment
from tests.sellers import asgi_transport, lifespan
from x402mw.client import Wallet
from x402mw.evm.keys import address_of, new_private_key
from x402mw.platform.chain.contracts import upto_settle_calldata
from x402mw.platform.chain.transactions import RevertError
from x402mw.platform.clock import ManualClock
from x402mw.platform.services.settlement.checks import revert_refusal
from x402mw.protocol import reasons
from x402mw.protocol.codec import encode_header
from x402mw.protocol.models import PaymentRequirements, UptoPaymentPayload
from x402mw.protocol.networks import UPTO_PERMIT2_PROXY_ADDRESS

pytestmark = pytest.mark.anyio


@pytest.fixture
async def seller(dev_platform: PlatformHarness) -> AsyncIterator[tuple[Deployment, httpx.AsyncClient]]:
    deployment = await asyncio.to_thread(metered_deployment, dev_platform, ceiling=50_000)
    await asyncio.to_thread(approve_permit2, dev_platform, deployment.agent_key)
    app = metered_app(deployment.api_key, dev_platform.url, deployment.endpoint_id)
    async with lifespan(app), httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver") as client:
        yield deployment, client


async def _offer(client: httpx.AsyncClient) -> PaymentRequirements:
    unpaid = await client.get("/generate")
    assert unpaid.status_code == 402
    return PaymentRequirements.model_validate(
        json.loads(base64.b64decode(unpaid.headers["PAYMENT-REQUIRED"]))["accepts"][0]
    )


def _error(response: httpx.Response) -> str | None:
    required = response.headers.get("PAYMENT-REQUIRED")
    if required is not None:
        found: str | None = json.loads(base64.b64decode(required)).get("error")
        return found
    body: dict[str, Any] = response.json()
    return str(body["error"]["code"])


def _settled(response: httpx.Response) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(base64.b64decode(response.headers["PAYMENT-RESPONSE"]))
    return decoded


async def _pay(client: httpx.AsyncClient, payload: UptoPaymentPayload, use: int = 100) -> httpx.Response:
    return await client.get(
        "/generate", params={"use": str(use)}, headers={"PAYMENT-SIGNATURE": encode_header(payload)}
    )


async def test_a_retry_of_a_settled_authorization_gets_its_outcome_and_is_not_charged_again(
    seller: tuple[Deployment, httpx.AsyncClient], dev_platform: PlatformHarness
) -> None:
    deployment, client = seller
    payload = deployment.agent.sign_upto(await _offer(client))
    first = await _pay(client, payload, use=2_000)
    again = await _pay(client, payload, use=9_000)
    assert first.status_code == 200 and _settled(first)["amount"] == "2000"
    # the authorization paid for one request: the retry is answered with its outcome, not served
    assert again.status_code == 402 and _error(again) == reasons.PERMIT2_NONCE_USED
    assert _settled(again) == _settled(first)
    assert await asyncio.to_thread(dev_platform.balance, deployment.payout) == 2_000


@pytest.mark.both_databases  # two requests at once: each database's locking
async def test_two_requests_with_one_authorization_at_once_serve_one(
    seller: tuple[Deployment, httpx.AsyncClient], dev_platform: PlatformHarness
) -> None:
    deployment, client = seller
    payload = deployment.agent.sign_upto(await _offer(client))
    answers: list[httpx.Response] = []

    async def pay() -> None:
        answers.append(await _pay(client, payload, use=3_000))

    async with anyio.create_task_group() as group:
        for _ in range(3):
            group.start_soon(pay)
    served = [a for a in answers if a.status_code == 200]
    assert len(served) >= 1
    for other in answers:
        if other.status_code != 200:  # held by the request being served, or settled by it
            assert other.status_code == 402 and _error(other) in (
                reasons.SETTLEMENT_PENDING,
                reasons.PERMIT2_NONCE_USED,
            )
    assert await asyncio.to_thread(dev_platform.balance, deployment.payout) == 3_000 * len(
        {_settled(a)["transaction"] for a in served}
    )
    assert len({_settled(a)["transaction"] for a in served}) == 1


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ("expired", reasons.PERMIT2_DEADLINE_EXPIRED),
        ("not_yet_valid", reasons.PERMIT2_NOT_YET_VALID),
        ("other_facilitator", reasons.UPTO_FACILITATOR_MISMATCH),
        ("other_payee", reasons.PERMIT2_RECIPIENT_MISMATCH),
        ("bigger_ceiling", reasons.PERMIT2_AMOUNT_MISMATCH),
    ],
)
async def test_a_bad_permit_is_refused_before_the_handler(
    seller: tuple[Deployment, httpx.AsyncClient], dev_platform: PlatformHarness, change: str, reason: str
) -> None:
    deployment, client = seller
    offer = await _offer(client)
    signed = offer
    now = None
    if change == "expired":
        now = int(dev_platform.platform.clock.time()) - 4000
    elif change == "other_facilitator":
        signed = offer.model_copy(
            update={"extra": {**offer.extra, "facilitatorAddress": address_of(new_private_key())}}
        )
    elif change == "other_payee":
        signed = offer.model_copy(update={"pay_to": address_of(new_private_key())})
    elif change == "bigger_ceiling":
        signed = offer.model_copy(update={"amount": offer.amount + 1})
    payload = deployment.agent.sign_upto(signed, now=now)
    if change == "not_yet_valid":
        payload = _resigned(deployment.agent, signed, valid_after=int(dev_platform.platform.clock.time()) + 3600)
    payload = payload.model_copy(update={"accepted": offer})  # echo the offer as it was sealed
    refused = await _pay(client, payload)
    assert refused.status_code == 402, refused.text
    assert _error(refused) == reason
    assert await asyncio.to_thread(dev_platform.balance, deployment.payout) == 0


def _resigned(wallet: Wallet, offer: PaymentRequirements, *, valid_after: int) -> UptoPaymentPayload:
    """A payload whose witness starts at ``valid_after`` (the wallet signs from the past)."""
    from x402mw.evm.eip712 import sign_digest
    from x402mw.evm.permit2 import UptoPermit, upto_permit_digest

    payload = wallet.sign_upto(offer)
    auth = payload.payload.permit2_authorization
    permit = UptoPermit(
        owner=auth.from_address,
        token=auth.permitted.token,
        ceiling=auth.permitted.amount,
        spender=auth.spender,
        nonce=auth.nonce,
        deadline=auth.deadline + 3600,
        to=auth.witness.to,
        facilitator=auth.witness.facilitator,
        valid_after=valid_after,
    )
    signature = sign_digest(wallet._key, upto_permit_digest(int(offer.network.split(":")[1]), permit))
    wire = payload.to_wire()
    wire["payload"]["signature"] = "0x" + signature.hex()
    wire["payload"]["permit2Authorization"]["deadline"] = str(permit.deadline)
    wire["payload"]["permit2Authorization"]["witness"]["validAfter"] = str(valid_after)
    return UptoPaymentPayload.model_validate(wire)


async def test_a_payer_without_an_allowance_is_answered_412(dev_platform: PlatformHarness) -> None:
    deployment = await asyncio.to_thread(metered_deployment, dev_platform)
    app = metered_app(deployment.api_key, dev_platform.url, deployment.endpoint_id)
    async with lifespan(app), httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver") as client:
        refused = await _pay(client, deployment.agent.sign_upto(await _offer(client)))
    assert refused.status_code == 412
    assert _error(refused) == reasons.PERMIT2_ALLOWANCE_REQUIRED
    offer = json.loads(base64.b64decode(refused.headers["PAYMENT-REQUIRED"]))
    assert offer["extensions"]["eip2612GasSponsoring"]["info"]["nonce"] == "0"


@pytest.mark.both_databases  # two holds at once: each database's locking
async def test_a_balance_that_fell_below_the_usage_fails_the_settlement_not_the_ceiling(
    dev_platform: PlatformHarness,
) -> None:
    # Two requests authorized at once, each for a ceiling the balance covers, together more than it.
    deployment = await asyncio.to_thread(metered_deployment, dev_platform, ceiling=50_000, fund="0.07")
    await asyncio.to_thread(approve_permit2, dev_platform, deployment.agent_key)
    arrived = anyio.Event()
    waiting = [0]

    async def both_authorized(request: Any) -> None:
        waiting[0] += 1
        if waiting[0] == 2:
            arrived.set()
        await arrived.wait()

    app = metered_app(deployment.api_key, dev_platform.url, deployment.endpoint_id, before=both_authorized)
    answers: list[httpx.Response] = []
    async with lifespan(app), httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver") as client:
        offer = await _offer(client)

        async def pay() -> None:
            answers.append(await _pay(client, deployment.agent.sign_upto(offer), use=40_000))

        async with anyio.create_task_group() as group:
            group.start_soon(pay)
            group.start_soon(pay)
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [200, 402], [a.text for a in answers]
    failed = next(a for a in answers if a.status_code == 402)
    assert _settled(failed)["success"] is False
    # refused by the simulation, or (when both were simulated before either was mined) reverted
    assert _error(failed) in (reasons.PERMIT2_INSUFFICIENT_BALANCE, reasons.TRANSACTION_REVERTED)
    assert await asyncio.to_thread(dev_platform.balance, deployment.payout) == 40_000


async def test_only_the_facilitator_may_settle_a_permit(
    seller: tuple[Deployment, httpx.AsyncClient], dev_platform: PlatformHarness
) -> None:
    """The front-running of x402-foundation/x402 #2501: anyone who sees a payment signature calls
    the proxy first with a smaller amount, spending the nonce. Our proxy lets only the witness's
    facilitator call; the call of another sender reverts, and its revert maps to a reason code."""
    deployment, client = seller
    payload = deployment.agent.sign_upto(await _offer(client))
    auth = payload.payload.permit2_authorization
    calldata = upto_settle_calldata(
        token=auth.permitted.token,
        ceiling=auth.permitted.amount,
        nonce=auth.nonce,
        deadline=auth.deadline,
        amount=1,
        owner=auth.from_address,
        to=auth.witness.to,
        facilitator=auth.witness.facilitator,
        valid_after=auth.witness.valid_after,
        signature=bytes.fromhex(payload.payload.signature[2:]),
    )
    intruder = address_of(new_private_key())
    relayer = dev_platform.chain.relayer

    async def fund_intruder(_platform: Any) -> None:
        await relayer.wait_for_receipt(await relayer.send(intruder, b"", gas=21_000, value=10**17))

    dev_platform.server.call(fund_intruder)
    call = {"from": intruder, "to": UPTO_PERMIT2_PROXY_ADDRESS, "data": "0x" + calldata.hex()}
    with pytest.raises(Exception) as refused:
        dev_platform.server.call(lambda _p: dev_platform.chain.rpc.request("eth_call", [call, "latest"]))
    revert = RevertError(f"{refused.value} {getattr(refused.value, 'data', '')}")
    assert revert_refusal(revert, "upto").reason == reasons.UPTO_UNAUTHORIZED_FACILITATOR, refused.value
    # the payment itself still goes through, once, for what the handler reports
    paid = await _pay(client, payload, use=1_234)
    assert paid.status_code == 200 and _settled(paid)["amount"] == "1234"


@pytest.fixture
def clocked_platform(tmp_path: Path) -> Iterator[tuple[PlatformHarness, ManualClock]]:
    """A platform of its own on a `ManualClock` the test moves, without the background worker (the
    test runs the worker's recovery itself)."""
    clock = ManualClock()
    with start_dev_platform(tmp_path, run_worker=False, clock=clock) as harness:
        yield harness, clock


async def test_a_hold_never_settled_is_closed_once_its_permit_expired(
    clocked_platform: tuple[PlatformHarness, ManualClock],
) -> None:
    """A request whose process stopped between holding the payment and settling it: nothing was
    charged; once the permit's deadline passed, the worker's recovery records it failed, with the
    permit's reason (a capture then answers that, as it does before the sweep: see
    test_capture_expiry.py)."""
    from x402mw.platform.services.settlement.outcomes import SettleRequest

    platform, clock = clocked_platform
    deployment = await asyncio.to_thread(metered_deployment, platform)
    await asyncio.to_thread(approve_permit2, platform, deployment.agent_key)
    offer = PaymentRequirements.model_validate(
        {
            "scheme": "upto",
            "network": platform.network,
            "amount": "50000",
            "asset": platform.usdc,
            "payTo": deployment.payout,
            "maxTimeoutSeconds": 30,
            "extra": {"name": "USD Coin", "version": "2", "facilitatorAddress": platform.chain.relayer.address},
        }
    )
    # valid for 30 s, until a few seconds from now on both the platform's clock and the chain's
    head = platform.server.call(lambda _p: platform.chain.head_time())
    deadline = max(int(clock.time()), head) + 8
    payload = deployment.agent.sign_upto(offer, now=deadline - 30)
    request = SettleRequest(accepted=offer, payload=payload, merchant_id=deployment.merchant_id)
    held = platform.server.call(lambda p: p.upto.authorize(request))
    assert held.status == "authorized", held
    platform.server.call(lambda p: p.settlement.recovery.finish_left())
    row = platform.server.call(lambda p: p.settlement.load(held.payment_id or ""))
    assert row is not None and row.status == "authorized"  # still valid: held for its request
    clock.advance(seconds=deadline - clock.time() + 1)  # the permit's deadline passed
    platform.server.call(lambda p: p.settlement.recovery.finish_left())
    lapsed = platform.server.call(lambda p: p.settlement.load(held.payment_id or ""))
    assert lapsed is not None
    assert (lapsed.status, lapsed.error_reason) == ("failed", reasons.PERMIT2_DEADLINE_EXPIRED)
    # the authorization cannot be held again: its permit has expired
    again = platform.server.call(lambda p: p.upto.authorize(request))
    assert (again.status, again.response.error_reason) == ("failed", reasons.PERMIT2_DEADLINE_EXPIRED)


async def test_a_handler_that_raises_is_not_charged(
    seller: tuple[Deployment, httpx.AsyncClient], dev_platform: PlatformHarness
) -> None:
    deployment, client = seller
    payload = deployment.agent.sign_upto(await _offer(client))
    with pytest.raises(RuntimeError, match="the handler failed"):  # the app's error, after its 500
        await client.get(
            "/generate", params={"use": "5000", "fail": "1"}, headers={"PAYMENT-SIGNATURE": encode_header(payload)}
        )
    again = await _pay(client, payload, use=5_000)  # the authorization was closed, for 0
    assert again.status_code == 402 and _settled(again)["amount"] == "0"
    assert await asyncio.to_thread(dev_platform.balance, deployment.payout) == 0
