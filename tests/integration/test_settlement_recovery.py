"""A settlement left `submitted` by a process that stopped is released by recovery, once."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import delete, func, insert, select

from tests.harness import PlatformHarness
from x402mw.evm.eip712 import TransferAuthorization, random_nonce, sign_transfer
from x402mw.evm.keys import address_of, new_private_key
from x402mw.evm.receipts import verify_receipt
from x402mw.platform.chain.token import encode_transfer_with_authorization
from x402mw.platform.db import tables
from x402mw.platform.db.models import AgentPayment, new_id
from x402mw.platform.runtime import Platform
from x402mw.platform.services.settlement.recovery import TAKEOVER_AFTER as RECOVER_AFTER

pytestmark = [
    pytest.mark.both_databases,
    pytest.mark.anyio,
]  # recovery takes stopped processes' settlements over once: each database's locking


def _payment_row(harness: PlatformHarness, merchant_id: str, payer: str, pay_to: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": new_id(),
        "merchant_id": merchant_id,
        "endpoint_id": None,
        "challenge_id": None,
        "livemode": False,
        "chain_id": harness.chain.chain_id,
        "asset": harness.usdc,
        "currency": "USDC",
        "payer": payer,
        "nonce": "0x" + random_nonce().hex(),
        "pay_to": pay_to,
        "amount_minor": 1000,
        "payload_hash": random_nonce().hex(),
        "resource": "https://seller.example/weather",
        "release_policy": "included",
        "status": "submitted",
        "created_at": harness.platform.clock.now(),
    } | fields


async def _send_transfer(platform: Platform, harness: PlatformHarness, key: bytes, pay_to: str, nonce: bytes) -> str:
    """What the stopped process did before it stopped: relay the agent's authorization."""
    domain = harness.chain.domain(harness.usdc)
    assert domain is not None
    now = int(time.time())
    auth = TransferAuthorization(address_of(key), pay_to, 1000, now - 60, now + 600, nonce)
    signature = sign_transfer(key, domain, auth)
    calldata = encode_transfer_with_authorization(
        from_=auth.from_address,
        to=pay_to,
        value=1000,
        valid_after=auth.valid_after,
        valid_before=auth.valid_before,
        nonce=nonce,
        signature=signature,
    )
    return await harness.chain.relayer.send(harness.usdc, calldata)


@dataclass
class _Orphan:
    """A payment a stopped process claimed and relayed, old enough for recovery to take it over."""

    merchant_id: str
    agent: bytes
    pay_to: str
    nonce: bytes
    row: dict[str, Any]


def _orphan(harness: PlatformHarness, merchant_name: str) -> _Orphan:
    merchant_id, api_key, _ = harness.merchant(merchant_name)
    agent, pay_to = new_private_key(), address_of(new_private_key())
    harness.fund(api_key, address_of(agent), "1")
    nonce = random_nonce()
    row = _payment_row(
        harness,
        merchant_id,
        address_of(agent),
        pay_to,
        nonce="0x" + nonce.hex(),
        created_at=harness.platform.clock.now() - RECOVER_AFTER - timedelta(seconds=5),
    )
    return _Orphan(merchant_id, agent, pay_to, nonce, row)


async def _leave(platform: Platform, harness: PlatformHarness, orphan: _Orphan) -> None:
    """Do what the stopped process did: relay the transfer and record the payment `submitted`."""
    orphan.row["transaction"] = await _send_transfer(platform, harness, orphan.agent, orphan.pay_to, orphan.nonce)
    async with platform.engine.begin() as conn:
        await conn.execute(insert(tables.agent_payments), [orphan.row])


async def _settled_events(platform: Platform, merchant_id: str) -> int:
    """How many ``agent_payment.settled`` events the merchant has."""
    events = tables.events
    async with platform.engine.connect() as conn:
        query = (
            select(func.count())
            .select_from(events)
            .where(events.c.type == "agent_payment.settled", events.c.merchant_id == merchant_id)
        )
        return int((await conn.execute(query)).scalar_one())


async def test_recovery_releases_an_orphaned_settlement_once(dev_platform: PlatformHarness) -> None:
    harness = dev_platform
    left = _orphan(harness, "Recovery merchant")
    orphan = left.row
    # A settlement claimed a moment ago may belong to a live process: recovery leaves it alone.
    young_nonce = random_nonce()
    young = _payment_row(harness, left.merchant_id, address_of(left.agent), left.pay_to, nonce="0x" + young_nonce.hex())

    async def stop_after_sending(platform: Platform) -> None:
        young["transaction"] = await _send_transfer(platform, harness, left.agent, left.pay_to, young_nonce)
        async with platform.engine.begin() as conn:
            await conn.execute(insert(tables.agent_payments), [young])
        await _leave(platform, harness, left)

    harness.server.call(stop_after_sending)

    async def recover_twice(platform: Platform) -> tuple[dict[str, Any], dict[str, Any], int]:
        await platform.settlement.recovery.finish_left()
        await platform.settlement.recovery.finish_left()
        settled_events = await _settled_events(platform, left.merchant_id)
        payments = tables.agent_payments
        async with platform.engine.connect() as conn:
            rows = {
                r["id"]: dict(r)
                for r in (await conn.execute(select(payments).where(payments.c.id.in_([orphan["id"], young["id"]]))))
                .mappings()
                .all()
            }
            await conn.execute(delete(payments).where(payments.c.id == young["id"]))
            await conn.commit()
        return rows[orphan["id"]], rows[young["id"]], settled_events

    released, untouched, settled_events = harness.server.call(recover_twice)
    assert released["status"] == "settled"
    assert released["transaction"] == orphan["transaction"]
    assert released["block_number"] is not None
    receipt = released["receipt"]
    assert receipt["transaction"] == orphan["transaction"]
    assert receipt["payer"] == address_of(left.agent)
    assert verify_receipt(receipt, harness.platform.receipt_address)
    assert settled_events == 1  # released once, however often recovery runs
    assert untouched["status"] == "submitted"
    assert harness.balance(left.pay_to) == 2000  # both transfers went out; only the orphan's is released


def test_recovery_settles_a_claim_whose_transfer_went_out_and_releases_one_that_did_not(
    quiet_dev_platform: PlatformHarness,
) -> None:
    # A process that stopped between claiming and recording its transfer leaves the payment
    # `claimed`: whether the transfer went out is read from the chain. (On the platform without a
    # background worker, whose own recovery round would otherwise take some of them first.)
    harness = quiet_dev_platform
    merchant_id, api_key, _ = harness.merchant("Claimed recovery merchant")
    agent, pay_to = new_private_key(), address_of(new_private_key())
    harness.fund(api_key, address_of(agent), "1")
    old = harness.platform.clock.now() - RECOVER_AFTER - timedelta(seconds=5)
    sent_nonce, unsent_nonce, young_nonce = random_nonce(), random_nonce(), random_nonce()
    rows = {
        name: _payment_row(
            harness, merchant_id, address_of(agent), pay_to, nonce="0x" + nonce.hex(), status="claimed", created_at=at
        )
        for name, nonce, at in (
            ("sent", sent_nonce, old),
            ("unsent", unsent_nonce, old),
            ("young", young_nonce, harness.platform.clock.now()),
        )
    }
    transaction: dict[str, str] = {}

    async def stop_after_sending(platform: Platform) -> None:
        async with platform.engine.begin() as conn:
            await conn.execute(insert(tables.agent_payments), list(rows.values()))
        tx_hash = await _send_transfer(platform, harness, agent, pay_to, sent_nonce)  # never recorded
        transaction["sent"] = tx_hash
        await harness.chain.relayer.wait_for_receipt(tx_hash, timeout=30)

    harness.server.call(stop_after_sending)

    async def recover_twice(platform: Platform) -> tuple[int, int, dict[str, dict[str, Any]]]:
        first = await platform.settlement.recovery.finish_left()
        second = await platform.settlement.recovery.finish_left()
        payments = tables.agent_payments
        ids = [row["id"] for row in rows.values()]
        async with platform.engine.connect() as conn:
            found = (await conn.execute(select(payments).where(payments.c.id.in_(ids)))).mappings().all()
        return first, second, {row["id"]: dict(row) for row in found}

    first, second, after = harness.server.call(recover_twice)
    assert (first, second) == (2, 0)  # the two old ones, once
    sent, unsent, young = (after[rows[name]["id"]] for name in ("sent", "unsent", "young"))
    assert (sent["status"], sent["transaction"]) == ("settled", transaction["sent"])
    assert verify_receipt(sent["receipt"], harness.platform.receipt_address)
    assert sent["receipt"]["transaction"] == transaction["sent"]
    assert (unsent["status"], unsent["transaction"], unsent["error_reason"]) == (
        "failed",
        None,
        "unexpected_settle_error",
    )
    assert young["status"] == "claimed"
    assert harness.balance(pay_to) == 1000


def test_recovery_waits_for_a_transfer_still_waiting_in_the_pool(anvil_platform: PlatformHarness) -> None:
    # A process stopped after sending a transfer that the node has not mined yet: its authorization
    # is still unused on the chain, yet the payment must not be failed (the same signature could
    # then be relayed again). Recovery waits until every transaction the relayer had sent is mined.
    harness = anvil_platform
    merchant_id, api_key, _ = harness.merchant("Pending recovery merchant")
    agent, pay_to = new_private_key(), address_of(new_private_key())
    harness.fund(api_key, address_of(agent), "1")
    old = harness.platform.clock.now() - RECOVER_AFTER - timedelta(seconds=5)
    waiting_nonce, unsent_nonce = random_nonce(), random_nonce()
    rows = {
        name: _payment_row(
            harness, merchant_id, address_of(agent), pay_to, nonce="0x" + nonce.hex(), status="claimed", created_at=old
        )
        for name, nonce in (("waiting", waiting_nonce), ("unsent", unsent_nonce))
    }
    rpc = harness.chain.rpc
    transaction: dict[str, str] = {}

    async def stop_with_a_transfer_in_the_pool(platform: Platform) -> int:
        async with platform.engine.begin() as conn:
            await conn.execute(insert(tables.agent_payments), list(rows.values()))
        await rpc.request("evm_setAutomine", [False])
        try:
            transaction["waiting"] = await _send_transfer(platform, harness, agent, pay_to, waiting_nonce)
            return await platform.settlement.recovery.finish_left()  # while the transfer waits in the pool
        finally:
            await rpc.request("evm_setAutomine", [True])

    async def recover_after_mining(platform: Platform) -> tuple[int, dict[str, dict[str, Any]]]:
        await rpc.request("evm_mine", [])
        finished = await platform.settlement.recovery.finish_left()
        payments = tables.agent_payments
        ids = [row["id"] for row in rows.values()]
        async with platform.engine.connect() as conn:
            found = (await conn.execute(select(payments).where(payments.c.id.in_(ids)))).mappings().all()
        return finished, {row["id"]: dict(row) for row in found}

    assert harness.server.call(stop_with_a_transfer_in_the_pool) == 0
    assert _statuses(harness, rows) == {"waiting": "claimed", "unsent": "claimed"}  # neither failed
    finished, after = harness.server.call(recover_after_mining)
    assert finished <= 2  # (the platform's background worker may have finished some first)
    waiting, unsent = after[rows["waiting"]["id"]], after[rows["unsent"]["id"]]
    assert (waiting["status"], waiting["transaction"]) == ("settled", transaction["waiting"])
    assert verify_receipt(waiting["receipt"], harness.platform.receipt_address)
    assert (unsent["status"], unsent["transaction"]) == ("failed", None)
    assert harness.balance(pay_to) == 1000


def _statuses(harness: PlatformHarness, rows: dict[str, dict[str, Any]]) -> dict[str, str]:
    async def read(platform: Platform) -> dict[str, str]:
        payments = tables.agent_payments
        async with platform.engine.connect() as conn:
            found = dict(
                (
                    await conn.execute(
                        select(payments.c.id, payments.c.status).where(
                            payments.c.id.in_([row["id"] for row in rows.values()])
                        )
                    )
                ).all()
            )
        return {name: found[row["id"]] for name, row in rows.items()}

    return harness.server.call(read)


async def test_recovery_of_a_stale_read_answers_the_receipt_recorded_first(dev_platform: PlatformHarness) -> None:
    # A retry that read its payment before the settlement was recorded reaches recovery with that
    # read: recovery finds the authorization used, and must answer with the receipt recorded
    # first. It must never sign a second one, nor let this process answer with it meanwhile
    # (50 concurrent copies of one signature once got two different receipts that way).
    harness = dev_platform
    orphan = _orphan(harness, "Stale read merchant")
    row = orphan.row

    async def send_and_release(platform: Platform) -> dict[str, Any]:
        await _leave(platform, harness, orphan)
        await platform.settlement.recovery.finish_left()
        found = await platform.settlement.load(row["id"])
        assert found is not None and found.status == "settled" and found.receipt is not None
        return found.receipt

    first = harness.server.call(send_and_release)

    async def finish_the_stale_read(platform: Platform) -> tuple[dict[str, Any] | None, bool, int]:
        service = platform.settlement
        stale = AgentPayment.model_validate(row)  # as read before the release was recorded
        finishing = asyncio.ensure_future(service.recovery.finish(stale, wait=5.0))
        answered_for = False  # whether this process answered for it from memory meanwhile
        while not finishing.done():
            answered_for = answered_for or service.finishing(stale)
            await asyncio.sleep(0)
        outcome = finishing.result()
        events = await _settled_events(platform, orphan.merchant_id)
        return (outcome.response.extensions or {}).get("receipt"), answered_for, events

    receipt, answered_for, events = harness.server.call(finish_the_stale_read)
    assert receipt == first
    assert not answered_for
    assert events == 1


async def test_two_recoveries_at_once_release_a_payment_once(dev_platform: PlatformHarness) -> None:
    # The worker and a retry (or two workers' passes) finding one orphan at the same moment: one
    # release, one receipt, one event; and two releases written in one batch record the first only.
    harness = dev_platform
    orphan = _orphan(harness, "Concurrent recovery merchant")

    async def recover_twice_at_once(platform: Platform) -> tuple[list[Any], int]:
        await _leave(platform, harness, orphan)
        stale = AgentPayment.model_validate(orphan.row)
        recovery = platform.settlement.recovery
        outcomes = await asyncio.gather(recovery.finish(stale, wait=5.0), recovery.finish(stale, wait=5.0))
        events = await _settled_events(platform, orphan.merchant_id)
        return [(o.response.extensions or {}).get("receipt") for o in outcomes], events

    receipts, events = harness.server.call(recover_twice_at_once)
    assert receipts[0] is not None and receipts[0] == receipts[1]
    assert events == 1


async def test_two_releases_in_one_batch_record_the_first(dev_platform: PlatformHarness) -> None:
    harness = dev_platform
    merchant_id, _, _ = harness.merchant("Batched releases merchant")
    agent, pay_to = new_private_key(), address_of(new_private_key())
    row = _payment_row(harness, merchant_id, address_of(agent), pay_to, transaction="0x" + "ab" * 32)

    async def release_twice(platform: Platform) -> tuple[dict[str, Any] | None, int]:
        async with platform.engine.begin() as conn:
            await conn.execute(insert(tables.agent_payments), [row])
        writes = platform.settlement.writes

        def settled(receipt: str) -> Any:
            event = {
                "id": new_id(),
                "merchant_id": merchant_id,
                "livemode": False,
                "type": "agent_payment.settled",
                "data": {"receipt": receipt},
                "created_at": platform.clock.now(),
            }
            return writes.settled(
                row["id"],
                transaction=row["transaction"],
                receipt={"which": receipt},
                settled_at=platform.clock.now(),
                block=1,
                chain_micros=1,
                platform_micros=1,
                challenge_id=None,
                challenge=None,
                event=event,
            )

        await asyncio.gather(settled("first"), settled("second"))  # queued in one turn: one batch
        found = await writes.load(row["id"])
        return (found.receipt if found else None), await _settled_events(platform, merchant_id)

    receipt, events = harness.server.call(release_twice)
    assert receipt == {"which": "first"}
    assert events == 1
