"""The reorg row of spec 3.3 on anvil, through its own chain rewind (``evm_snapshot`` / ``evm_revert``):
a confirmed payment that a reorg takes away makes the subscription ``past_due`` (the invoice open
again, the merchant's credit taken back, ``subscription.past_due`` sent and the customer emailed),
and a new payment within grace renews it. The platform runs without its background worker, so the
watcher's rounds run exactly where the test says, with nothing racing the rewind."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from eth_abi.abi import encode as abi_encode

from tests.subscription_fixtures import Shop, SubscriptionPlatform, subscription_platform
from tests.waiting import eventually
from x402mw.evm.keccak import keccak256
from x402mw.evm.keys import address_of
from x402mw.platform.chain.admin import transact
from x402mw.platform.chain.anvil import ANVIL_DEV_KEYS

START = "2026-01-31T10:00:00Z"
CUSTOMER = "cus_reorg_✓"
BUYER = ANVIL_DEV_KEYS[3]  # has ETH for gas: it pays with an ordinary ERC-20 transfer of its own


@pytest.fixture(scope="module")
def subs(database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SubscriptionPlatform]:
    workdir = tmp_path_factory.mktemp(f"subscription-reorg-{database}")
    with subscription_platform(workdir, database, chain="anvil", run_worker=False) as platform:
        yield platform


def _watch(shop: Shop) -> None:
    """One round of the deposit watcher (read new blocks, confirm), then the webhook and email outboxes."""
    chain = shop.harness.chain

    async def round_(platform: Any) -> None:
        await platform.watcher.scan(chain)
        await platform.watcher.confirm()
        await platform.webhooks.deliver_due()
        await platform.emails.send_due()

    shop.harness.server.call(round_)


def _pay(shop: Shop, to: str, amount: int) -> str:
    harness = shop.harness
    harness.fund(shop.key, address_of(BUYER), str(amount / 10**6))
    data = keccak256(b"transfer(address,uint256)")[:4] + abi_encode(["address", "uint256"], [to, amount])

    async def send(_platform: Any) -> str:
        receipt = await transact(harness.chain.rpc, BUYER, harness.usdc, data, gas=100_000)
        return receipt.transaction_hash

    return harness.server.call(send)


def _rpc(shop: Shop, method: str, params: list[Any]) -> Any:
    rpc = shop.harness.chain.rpc
    return shop.harness.server.call(lambda _p: rpc.request(method, params))


def _event(shop: Shop, kind: str, sub_id: str) -> Any:
    def delivered() -> Any:
        shop.harness.server.call(lambda p: p.webhooks.deliver_due())
        return _taken(shop, kind, sub_id)

    return eventually(delivered, what=f"subscription.{kind} of {sub_id}")


def _taken(shop: Shop, kind: str, sub_id: str) -> Any:
    for event in shop.events():
        if (
            event.type == f"subscription.{kind}"
            and event.data["subscription"]["id"] == sub_id
            and event.id not in shop.seen
        ):
            shop.seen.add(event.id)
            return event
    return None


@pytest.mark.anvil
def test_a_reorg_reversing_a_confirmed_payment_makes_the_subscription_past_due(subs: SubscriptionPlatform) -> None:
    shop = subs.shop("Reorg Radio")
    to = "reorg@example.com"
    clock = shop.clock(START)
    opened = shop.open(shop.plan(amount="3"), CUSTOMER, testClock=clock, customerEmail=to)
    sub_id, order_id = opened["subscription"]["id"], opened["paymentIntent"]["id"]
    origin = shop.harness.url.removesuffix("/v1")
    attempt = shop.api.post(
        f"{origin}/checkout/v1/payment-intents/{order_id}/attempts",
        json={"network": shop.harness.network, "currency": "USDC", "method": "transfer"},
    )
    address = shop.ok(attempt)["depositAddress"]
    _watch(shop)  # the watcher has read the chain up to here

    snapshot = _rpc(shop, "evm_snapshot", [])
    first = _pay(shop, address, 3_000_000)
    _watch(shop)
    created = _event(shop, "created", sub_id)
    assert created.data["paymentIntent"]["txHash"] == first
    assert created.data["subscription"]["status"] == "active"
    balances = shop.ok(shop.api.get("/balances"))["data"]
    assert [(b["currency"], b["available"]) for b in balances] == [("USDC", "3.00")]

    assert _rpc(shop, "evm_revert", [snapshot]) is True  # the blocks holding the payment are gone
    _watch(shop)
    past_due = _event(shop, "past_due", sub_id)
    sub, invoice, order = past_due.data["subscription"], past_due.data["invoice"], past_due.data["paymentIntent"]
    assert (sub["status"], sub["periodsPaid"], sub["merchantCustomerId"]) == ("past_due", 0, CUSTOMER)
    assert sub["pastDueAt"] == "2026-01-31T10:00:00.000Z"  # on the subscription's clock
    assert (invoice["status"], invoice["period"], invoice["paidAt"]) == ("open", 1, None)
    assert (order["id"], order["status"], order["txHash"], order["amountReceived"]) == (
        order_id,
        "requires_payment",
        None,
        "0",
    )
    types = [e["type"] for e in shop.ok(shop.api.get("/events", params={"limit": 5}))["data"]]
    assert "payment_intent.reverted" in types
    balances = shop.ok(shop.api.get("/balances"))["data"]
    assert [(b["currency"], b["available"]) for b in balances] == [("USDC", "0.00")]  # the credit is taken back
    assert subs.mailbox is not None
    mailbox = subs.mailbox
    notice = eventually(lambda: mailbox.find(to, "is past due"), what="the past-due email")[0]
    text = notice.get_body(("plain",))
    assert text is not None and invoice["checkoutUrl"] in text.get_content()

    second = _pay(shop, address, 3_000_000)  # paid again, within grace
    _watch(shop)
    renewed = _event(shop, "renewed", sub_id)
    sub = renewed.data["subscription"]
    assert (sub["status"], sub["periodsPaid"], sub["pastDueAt"]) == ("active", 1, None)
    assert (sub["currentPeriodStart"], sub["currentPeriodEnd"]) == (
        "2026-01-31T10:00:00.000Z",
        "2026-02-28T10:00:00.000Z",
    )
    assert renewed.data["paymentIntent"]["txHash"] == second
    assert shop.kinds(sub_id) == ["subscription.created", "subscription.past_due", "subscription.renewed"]
