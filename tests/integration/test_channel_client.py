"""`X402Auth` paying ``batch-settlement`` routes by payment channel, against a seller built with the
x402 Foundation's SDK (server scheme, facilitator and channel manager, in this process) on the dev
chain and anvil, our escrow and collectors at their canonical addresses: a channel opened by an
EIP-3009 deposit, then one voucher per request; the seller's claim and settle moving exactly what was
charged; an agent restarted finding its place from the corrective 402; top-ups of an exhausted
channel; the cooperative refund."""

from __future__ import annotations

import asyncio
import json
from decimal import Decimal

import httpx
import pytest
from click.testing import CliRunner

from tests.chain_fixtures import ChainUnderTest, anvil_node, anyio_backend, chain
from tests.channel_helpers import MAX_UINT, address_of_key, approve_calldata, receiver_keys, relayer_key
from tests.channel_sellers import SdkChannelSeller, SdkToolSession, sdk_channel_seller
from tests.contract_helpers import funded_key
from tests.harness import serve_app
from x402mw.client import Wallet, X402Auth
from x402mw.client.channels import ChannelPolicy
from x402mw.client.mcp import PayingSession
from x402mw.client.pay import pay_command
from x402mw.errors import PaymentRefusedError
from x402mw.evm.permit2 import PERMIT2_ADDRESS
from x402mw.platform.chain.admin import transact
from x402mw.platform.chain.channels import read_channel
from x402mw.platform.chain.token import balance_of

__all__ = ["anvil_node", "anyio_backend", "chain", "receiver_keys", "relayer_key"]

pytestmark = pytest.mark.anyio

PRICE = 1_000


class CountingTransport(httpx.AsyncBaseTransport):
    """The seller's ASGI transport, counting the exchanges (and the paid ones)."""

    def __init__(self, seller: SdkChannelSeller) -> None:
        self.inner = httpx.ASGITransport(app=seller.app)
        self.sent = 0
        self.paid = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent += 1
        self.paid += "payment-signature" in request.headers
        return await self.inner.handle_async_request(request)


async def seller_for(
    chain: ChainUnderTest, relayer_key: bytes, receiver_keys: tuple[bytes, bytes], **kw: object
) -> SdkChannelSeller:
    return sdk_channel_seller(
        chain,
        relayer_key=relayer_key,
        receiver=address_of_key(receiver_keys[0]),
        authorizer_key=receiver_keys[1],
        price=PRICE,
        **kw,  # type: ignore[arg-type]
    )


def agent(key: bytes, max_deposit: str = "1", **kw: object) -> X402Auth:
    return X402Auth(Wallet(key), max_amount="0.01", channels=ChannelPolicy(max_deposit=max_deposit), **kw)  # type: ignore[arg-type]


async def test_one_deposit_then_a_voucher_a_request_and_the_claim_moves_what_was_charged(
    chain: ChainUnderTest, relayer_key: bytes, receiver_keys: tuple[bytes, bytes]
) -> None:
    seller = await seller_for(chain, relayer_key, receiver_keys, min_deposit=200_000)
    payer_key = await funded_key(chain, usdc=1_000_000)
    payer = address_of_key(payer_key)
    auth = agent(payer_key)
    transport = CountingTransport(seller)
    async with httpx.AsyncClient(transport=transport, base_url="http://seller", auth=auth, timeout=60) as client:
        for index in range(120):
            # two routes of one seller: one channel; the second charges less than its price
            response = await client.get("/weather" if index % 2 == 0 else "/weather?charge=700")
            assert response.status_code == 200, response.text
    charged = 60 * PRICE + 60 * 700
    assert [p.scheme for p in auth.payments] == ["batch-settlement"] * 120
    assert sum(p.amount for p in auth.payments) == charged
    first, last = auth.payments[0], auth.payments[-1]
    assert first.channel is not None and last.channel is not None
    assert first.channel.deposit == 200_000 and first.transaction.startswith("0x")
    assert all(p.channel is not None and p.channel.deposit == 0 and p.transaction == "" for p in auth.payments[1:])
    assert (last.channel.balance, last.channel.charged_total) == (200_000, charged)
    # after the first 402 of each route, each request is one exchange carrying its voucher
    assert (transport.sent, transport.paid) == (122, 120)
    assert auth.spent == {"USDC": Decimal(charged).scaleb(-6)} or auth.spent == {
        chain.usdc.lower(): Decimal(charged).scaleb(-6)
    }
    assert await balance_of(chain.rpc, chain.usdc, payer) == 1_000_000 - 200_000

    before = await balance_of(chain.rpc, chain.usdc, seller.receiver)
    result = await seller.claim_and_settle()
    assert result["settle"] is not None
    assert await balance_of(chain.rpc, chain.usdc, seller.receiver) - before == charged
    snapshot = await read_channel(chain.rpc, bytes.fromhex(last.channel.channel_id[2:]))
    assert (snapshot.balance, snapshot.total_claimed) == (200_000, charged)


async def test_a_restarted_agent_finds_its_place_from_the_corrective_402(
    chain: ChainUnderTest, relayer_key: bytes, receiver_keys: tuple[bytes, bytes]
) -> None:
    seller = await seller_for(chain, relayer_key, receiver_keys, min_deposit=50_000)
    payer_key = await funded_key(chain, usdc=1_000_000)
    payer = address_of_key(payer_key)
    transport = CountingTransport(seller)
    async with httpx.AsyncClient(transport=transport, base_url="http://seller", timeout=60) as client:
        before = agent(payer_key)
        for _ in range(5):
            assert (await client.get("/weather", auth=before)).status_code == 200
        after = agent(payer_key)  # the same wallet, nothing remembered
        for _ in range(3):
            assert (await client.get("/weather", auth=after)).status_code == 200
    assert await balance_of(chain.rpc, chain.usdc, payer) == 1_000_000 - 50_000  # no second deposit
    last = after.payments[-1].channel
    assert last is not None and last.channel_id == before.payments[-1].channel.channel_id  # type: ignore[union-attr]
    assert (last.charged_total, last.balance) == (8 * PRICE, 50_000)
    record = await seller.channel(last.channel_id)
    assert int(record.charged_cumulative_amount) == 8 * PRICE


async def test_an_exhausted_channel_is_topped_up_within_the_deposit_cap(
    chain: ChainUnderTest, relayer_key: bytes, receiver_keys: tuple[bytes, bytes]
) -> None:
    seller = await seller_for(chain, relayer_key, receiver_keys, min_deposit=3 * PRICE)
    payer_key = await funded_key(chain, usdc=1_000_000)
    auth = agent(payer_key)
    async with httpx.AsyncClient(transport=CountingTransport(seller), base_url="http://seller", auth=auth) as client:
        for _ in range(7):
            assert (await client.get("/weather")).status_code == 200
    deposits = [p.channel.deposit for p in auth.payments if p.channel is not None and p.channel.deposit]
    assert deposits == [3 * PRICE, 3 * PRICE, 3 * PRICE]
    assert await balance_of(chain.rpc, chain.usdc, address_of_key(payer_key)) == 1_000_000 - 9 * PRICE
    # a cap below one request's price: the channel offer is refused, nothing signed
    capped = agent(payer_key, max_deposit="0.0005")
    async with httpx.AsyncClient(transport=CountingTransport(seller), base_url="http://seller", auth=capped) as client:
        with pytest.raises(PaymentRefusedError, match="deposit cap"):
            await client.get("/weather")


async def test_the_cooperative_refund_returns_what_was_not_charged(
    chain: ChainUnderTest, relayer_key: bytes, receiver_keys: tuple[bytes, bytes]
) -> None:
    seller = await seller_for(chain, relayer_key, receiver_keys, min_deposit=20_000)
    payer_key = await funded_key(chain, usdc=1_000_000)
    payer = address_of_key(payer_key)
    auth = agent(payer_key)
    async with httpx.AsyncClient(transport=CountingTransport(seller), base_url="http://seller", auth=auth) as client:
        for _ in range(4):
            assert (await client.get("/weather")).status_code == 200
        refund = await auth.arefund_channel(client, "/weather")
    assert refund.amount == 20_000 - 4 * PRICE and refund.transaction.startswith("0x")
    assert refund.balance == 4 * PRICE
    assert await balance_of(chain.rpc, chain.usdc, payer) == 1_000_000 - 4 * PRICE
    snapshot = await read_channel(chain.rpc, bytes.fromhex(refund.channel_id[2:]))
    assert (snapshot.balance, snapshot.total_claimed) == (4 * PRICE, 4 * PRICE)


async def test_the_pay_command_shows_the_channel_and_finds_it_again_in_the_next_run(
    chain: ChainUnderTest,
    relayer_key: bytes,
    receiver_keys: tuple[bytes, bytes],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seller = await seller_for(chain, relayer_key, receiver_keys, min_deposit=30_000)
    payer_key = await funded_key(chain, usdc=1_000_000)
    monkeypatch.setenv("X402MW_PRIVATE_KEY", payer_key.hex())
    with serve_app(seller.app) as base:
        first = CliRunner().invoke(pay_command, [f"{base}/weather", "--max-deposit", "0.05"])
        second = CliRunner().invoke(pay_command, [f"{base}/weather", "--max-deposit", "0.05", "--json"])
        without = CliRunner().invoke(pay_command, [f"{base}/weather", "--json"])
    assert first.exit_code == 0, first.output
    assert second.exit_code == 0, second.output
    # the token's name as the command gives it: its address, or "USDC" once a platform in this
    # process has registered the chain's tokens by symbol
    asset = json.loads(second.output)["payment"]["asset"]
    assert asset in (chain.usdc, "USDC")
    assert f"channel balance: 0.03 {asset}, charged 0.001 so far, 0.029 left" in first.output
    assert f"deposit: 0.03 {asset} (transaction 0x" in first.output
    channel = json.loads(second.output)["payment"]["channel"]
    assert (channel["deposit"], channel["balance"], channel["charged"], channel["remaining"]) == (
        "0",
        "0.03",
        "0.002",
        "0.028",
    )
    assert json.loads(second.output)["payment"]["transaction"] is None
    assert without.exit_code == 1 and json.loads(without.output)["error"]["reason"] == "no_acceptable_option"
    assert await balance_of(chain.rpc, chain.usdc, address_of_key(payer_key)) == 1_000_000 - 30_000


async def test_mcp_tools_are_paid_from_the_same_channel(
    chain: ChainUnderTest, relayer_key: bytes, receiver_keys: tuple[bytes, bytes]
) -> None:
    seller = await seller_for(chain, relayer_key, receiver_keys, min_deposit=50_000)
    payer_key = await funded_key(chain, usdc=1_000_000)
    auth = agent(payer_key)
    async with httpx.AsyncClient(transport=CountingTransport(seller), base_url="http://seller", auth=auth) as client:
        assert (await client.get("/weather")).status_code == 200  # the deposit, over HTTP
    session = SdkToolSession(seller)
    tools = PayingSession(session, auth)  # type: ignore[arg-type]
    for _ in range(5):
        result = await tools.call_tool("forecast", {"city": "Lisbon"})
        assert not result.is_error, result
    assert session.calls == 6  # the first call's offer, then one paid call each
    assert [p.scheme for p in auth.payments] == ["batch-settlement"] * 6
    last = auth.payments[-1].channel
    assert last is not None and last.channel_id == auth.payments[0].channel.channel_id  # type: ignore[union-attr]
    assert (last.deposit, last.balance, last.charged_total) == (0, 50_000, 6 * PRICE)
    assert await balance_of(chain.rpc, chain.usdc, address_of_key(payer_key)) == 1_000_000 - 50_000


async def test_a_permit2_deposit_when_the_offer_asks_for_it(
    chain: ChainUnderTest, relayer_key: bytes, receiver_keys: tuple[bytes, bytes]
) -> None:
    seller = await seller_for(chain, relayer_key, receiver_keys, min_deposit=20_000, asset_transfer_method="permit2")
    payer_key = await funded_key(chain, usdc=1_000_000)
    await transact(chain.rpc, payer_key, chain.usdc, approve_calldata(PERMIT2_ADDRESS, MAX_UINT), gas=80_000)
    auth = agent(payer_key)
    async with httpx.AsyncClient(transport=CountingTransport(seller), base_url="http://seller", auth=auth) as client:
        for _ in range(3):
            assert (await client.get("/weather")).status_code == 200
    first = auth.payments[0].channel
    assert first is not None and first.deposit == 20_000
    assert await balance_of(chain.rpc, chain.usdc, address_of_key(payer_key)) == 1_000_000 - 20_000
    snapshot = await read_channel(chain.rpc, bytes.fromhex(first.channel_id[2:]))
    assert snapshot.balance == 20_000


async def test_concurrent_requests_on_one_channel_sign_one_after_another(
    chain: ChainUnderTest, relayer_key: bytes, receiver_keys: tuple[bytes, bytes]
) -> None:
    seller = await seller_for(chain, relayer_key, receiver_keys, min_deposit=100_000)
    payer_key = await funded_key(chain, usdc=1_000_000)
    auth = agent(payer_key)
    async with httpx.AsyncClient(transport=CountingTransport(seller), base_url="http://seller", auth=auth) as client:
        assert (await client.get("/weather")).status_code == 200
        answers = await asyncio.gather(*(client.get("/weather") for _ in range(12)))
    assert [a.status_code for a in answers] == [200] * 12
    ceilings = sorted(p.channel.charged_total for p in auth.payments if p.channel is not None)
    assert ceilings == [PRICE * n for n in range(1, 14)]
    record = await seller.channel(auth.payments[0].channel.channel_id)  # type: ignore[union-attr]
    assert int(record.charged_cumulative_amount) == 13 * PRICE


async def test_a_channel_refunded_in_full_is_paid_into_again(
    chain: ChainUnderTest, relayer_key: bytes, receiver_keys: tuple[bytes, bytes]
) -> None:
    seller = await seller_for(chain, relayer_key, receiver_keys, min_deposit=10_000)
    payer_key = await funded_key(chain, usdc=1_000_000)
    payer = address_of_key(payer_key)
    auth = agent(payer_key)
    with serve_app(seller.app) as base, httpx.Client(base_url=base, auth=auth, timeout=60) as client:
        assert client.get("/weather").status_code == 200
        refund = auth.refund_channel(client, f"{base}/weather", amount=4_000)  # the sync twin, in part
        assert (refund.amount, refund.balance) == (4_000, 6_000)
        assert auth.refund_channel(client, f"{base}/weather").amount == 5_000  # the rest
        for _ in range(2):
            assert client.get("/weather").status_code == 200
    deposits = [p.channel.deposit for p in auth.payments if p.channel is not None]
    assert deposits == [10_000, 10_000, 0]
    assert await balance_of(chain.rpc, chain.usdc, payer) == 1_000_000 - 10_000 - PRICE
    last = auth.payments[-1].channel
    assert last is not None and (last.balance, last.charged_total) == (11_000, 3 * PRICE)


class LosingTransport(CountingTransport):
    """Loses the answer to the ``lose``-th paid request (the seller served and charged it)."""

    def __init__(self, seller: SdkChannelSeller, lose: int) -> None:
        super().__init__(seller)
        self.lose = lose

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        if self.paid == self.lose and "payment-signature" in request.headers:
            raise httpx.ReadError("the connection dropped", request=request)
        return response


async def test_a_lost_answer_is_recovered_through_the_corrective_402(
    chain: ChainUnderTest, relayer_key: bytes, receiver_keys: tuple[bytes, bytes]
) -> None:
    seller = await seller_for(chain, relayer_key, receiver_keys, min_deposit=50_000)
    payer_key = await funded_key(chain, usdc=1_000_000)
    auth = agent(payer_key)
    transport = LosingTransport(seller, lose=3)
    async with httpx.AsyncClient(transport=transport, base_url="http://seller", auth=auth) as client:
        for index in range(5):
            if index == 2:
                with pytest.raises(httpx.ReadError):
                    await client.get("/weather")
            else:
                assert (await client.get("/weather")).status_code == 200
    last = auth.payments[-1].channel
    assert last is not None and last.charged_total == 5 * PRICE  # the lost one was charged, and is known now
    record = await seller.channel(last.channel_id)
    assert int(record.charged_cumulative_amount) == 5 * PRICE
    assert len(auth.payments) == 4  # the lost answer's charge is in the count, not in a record
