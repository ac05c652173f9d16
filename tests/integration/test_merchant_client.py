"""The merchant client against a real platform (uvicorn on loopback, dev chain, SQLite): every
resource it covers that the platform serves, pagination across pages, replays by idempotency key, and
the typed errors with the platform's request ids. Sync and async."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from tests.harness import PlatformHarness
from x402mw.client.merchant import (
    AsyncMerchantClient,
    AuthenticationError,
    ConflictError,
    InvalidRequestError,
    MerchantClient,
    NotFoundError,
    PaymentMethods,
)
from x402mw.evm.keys import address_of, new_private_key


@pytest.fixture
def client(dev_platform: PlatformHarness) -> Iterator[MerchantClient]:
    _, key, _ = dev_platform.merchant()
    with MerchantClient(key, dev_platform.url, timeout=60) as merchant_client:
        yield merchant_client


def _order() -> str:
    return f"order-{uuid.uuid4().hex[:12]}"


def test_payment_intents_are_created_read_listed_and_canceled(client: MerchantClient) -> None:
    order_id = _order()
    expires = datetime.now(UTC) + timedelta(hours=1)
    created = client.payment_intents.create(
        order_id=order_id,
        amount=Decimal("12.50"),
        currency="USDC",
        accepted_currencies=["USDC", "EURC"],
        customer_email="buyer@example.com",
        customer_name="Ada",
        success_url="https://shop.example.com/thanks",
        metadata={"cart": "42"},
        payment_methods=PaymentMethods(wallet=True, transfer=True, transfer_default_open=True),
        expires_at=expires,
    )
    assert created.status == "requires_payment" and created.order_id == order_id
    assert created.amount == Decimal("12.5") and created.amount_received == 0
    assert created.accepted_currencies == ["USDC", "EURC"]
    assert (created.customer.email, created.customer.name) == ("buyer@example.com", "Ada")
    assert created.payment_methods.transfer_default_open is True
    assert created.metadata == {"cart": "42"} and created.livemode is False
    assert created.expires_at is not None and abs(created.expires_at - expires) < timedelta(milliseconds=1)
    assert created.checkout_url and created.checkout_url.endswith(created.id)
    assert (created.network, created.payer, created.tx_hash, created.paid_at) == (None, None, None, None)

    assert client.payment_intents.retrieve(created.id) == created
    assert [pi.id for pi in client.payment_intents.list(order_id=order_id).data] == [created.id]
    assert client.payment_intents.list(order_id=_order()).data == []

    canceled = client.payment_intents.cancel(created.id)
    assert canceled.status == "canceled" and canceled.updated_at >= created.updated_at
    with pytest.raises(ConflictError) as caught:
        client.payment_intents.cancel(created.id)
    assert caught.value.code == "payment_intent_unexpected_state"


def test_auto_paging_reads_every_page(client: MerchantClient) -> None:
    created = [client.payment_intents.create(order_id=_order(), amount="1", currency="USDC").id for _ in range(5)]
    first = client.payment_intents.list(limit=2)
    assert len(first.data) == 2 and first.has_more
    assert [pi.id for pi in first.auto_paging_iter()] == created[::-1]
    after = client.payment_intents.list(limit=2, starting_after=created[3])
    assert [pi.id for pi in after.auto_paging_iter()] == created[2::-1]
    before = client.payment_intents.list(limit=2, ending_before=created[0])
    assert [pi.id for pi in before.auto_paging_iter()] == created[1:]


def test_a_given_idempotency_key_replays_the_first_answer(client: MerchantClient) -> None:
    key = str(uuid.uuid4())
    first = client.payment_intents.create(order_id=_order(), amount="3", currency="USDC", idempotency_key=key)
    again = client.payment_intents.create(order_id=first.order_id, amount="3", currency="USDC", idempotency_key=key)
    assert again == first


def test_webhook_endpoints_crud_and_secret_rotation(client: MerchantClient) -> None:
    created = client.webhook_endpoints.create(
        url="https://shop.example.com/hooks", enabled_events=["payment_intent.succeeded"], description="shop"
    )
    assert created.secret is not None and created.secret.startswith("whsec_")
    assert created.status == "enabled" and created.enabled_events == ["payment_intent.succeeded"]

    read = client.webhook_endpoints.retrieve(created.id)
    assert read.secret is None and read.url == created.url

    updated = client.webhook_endpoints.update(created.id, status="disabled", enabled_events=["*"], description=None)
    assert (updated.status, updated.enabled_events, updated.description) == ("disabled", ["*"], None)
    kept = client.webhook_endpoints.update(created.id, url="https://shop.example.com/hooks/v2")
    assert (kept.url, kept.status) == ("https://shop.example.com/hooks/v2", "disabled")

    rotated = client.webhook_endpoints.rotate_secret(created.id, expires_in_seconds=0)
    assert rotated.secret is not None and rotated.secret.startswith("whsec_") and rotated.secret != created.secret

    assert [e.id for e in client.webhook_endpoints.list().data] == [created.id]
    deleted = client.webhook_endpoints.delete(created.id)
    assert (deleted.id, deleted.deleted) == (created.id, True)
    with pytest.raises(NotFoundError):
        client.webhook_endpoints.retrieve(created.id)


def test_events_are_listed_read_and_redelivered(client: MerchantClient) -> None:
    intent = client.payment_intents.create(order_id=_order(), amount="2", currency="USDC")
    client.payment_intents.cancel(intent.id)
    created = client.events.list(type="payment_intent.created")
    assert [e.data["paymentIntent"]["id"] for e in created.data] == [intent.id]
    types = [e.type for e in client.events.list().auto_paging_iter()]
    assert types == ["payment_intent.canceled", "payment_intent.created"]

    event = client.events.retrieve(created.data[0].id)
    assert event.type == "payment_intent.created" and event.deliveries == []
    assert event.data["paymentIntent"]["amount"] == "2"
    redelivery = client.events.redeliver(event.id)
    assert (redelivery.id, redelivery.redelivered) == (event.id, 0)


def test_agent_endpoints_are_created_read_updated_and_listed(
    client: MerchantClient, dev_platform: PlatformHarness
) -> None:
    payout = address_of(new_private_key())
    created = client.agent_endpoints.create(
        name="Weather",
        resource_url="https://api.example.com/weather",
        chain_id=dev_platform.chain.chain_id,
        currency="USDC",
        payout_address=payout,
        amount_minor=10_000,
    )
    assert created.amount_minor == 10_000 and created.pricing_mode == "fixed"
    assert created.network == dev_platform.network and created.asset == dev_platform.usdc
    assert created.payout_address.lower() == payout.lower()
    assert client.agent_endpoints.retrieve(created.id) == created

    dynamic = client.agent_endpoints.update(created.id, pricing_mode="dynamic", amount_minor=None, name="Weather+")
    assert (dynamic.pricing_mode, dynamic.amount_minor, dynamic.name) == ("dynamic", None, "Weather+")
    assert [e.id for e in client.agent_endpoints.list().data] == [created.id]


def test_the_faucet_mints_test_coins(client: MerchantClient, dev_platform: PlatformHarness) -> None:
    address = address_of(new_private_key())
    transfer = client.sandbox.faucet(network=dev_platform.network, currency="USDC", address=address, amount="5.25")
    assert transfer.amount == Decimal("5.25") and transfer.transaction.startswith("0x")
    assert transfer.address.lower() == address.lower()
    assert dev_platform.balance(address) == 5_250_000


def test_errors_are_typed_and_carry_the_request_id(client: MerchantClient, dev_platform: PlatformHarness) -> None:
    missing = str(uuid.uuid4())
    with pytest.raises(NotFoundError) as not_found:
        client.payment_intents.retrieve(missing)
    assert not_found.value.code == "resource_missing" and not_found.value.status == 404
    assert not_found.value.request_id and not_found.value.request_id.startswith("req_")
    assert not_found.value.request_id == not_found.value.headers["request-id"]

    with pytest.raises(InvalidRequestError) as invalid:
        client.payment_intents.create(order_id=_order(), amount="1.0000001", currency="USDC")
    assert (invalid.value.status, invalid.value.code, invalid.value.param) == (400, "parameter_invalid", "amount")

    with pytest.raises(InvalidRequestError) as bad_limit:
        client.events.list(limit=500)
    assert bad_limit.value.param == "limit"

    order_id = _order()
    client.payment_intents.create(order_id=order_id, amount="1", currency="USDC")
    with pytest.raises(ConflictError) as conflict:
        client.payment_intents.create(order_id=order_id, amount="1", currency="USDC")
    assert (conflict.value.code, conflict.value.param) == ("order_id_conflict", "orderId")
    assert conflict.value.request_id and conflict.value.request_id != not_found.value.request_id

    with MerchantClient("sk_test_not_a_key", dev_platform.url) as stranger, pytest.raises(AuthenticationError) as auth:
        stranger.balances.list()
    assert (auth.value.status, auth.value.type, auth.value.code) == (401, "authentication_error", "invalid_api_key")
    assert auth.value.request_id and auth.value.request_id.startswith("req_")


@pytest.mark.anyio
async def test_the_async_client_on_the_same_platform(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant()
    async with AsyncMerchantClient(key, dev_platform.url, timeout=60) as client:
        created = [
            (await client.payment_intents.create(order_id=_order(), amount="4.5", currency="EURC")).id for _ in range(3)
        ]
        first = await client.payment_intents.list(limit=2)
        assert [pi.id for pi in first.data] == created[:0:-1] and first.has_more
        assert [pi.id async for pi in client.payment_intents.list(limit=2).auto_paging_iter()] == created[::-1]
        read = await client.payment_intents.retrieve(created[0])
        assert (read.amount, read.currency) == (Decimal("4.5"), "EURC")
        with pytest.raises(NotFoundError) as caught:
            await client.events.retrieve(str(uuid.uuid4()))
        assert caught.value.request_id and caught.value.request_id.startswith("req_")
