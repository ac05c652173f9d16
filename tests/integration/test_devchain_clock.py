"""The dev chain's clock keeps to the wall clock: a busy chain's blocks share seconds rather than
running ahead (an authorization signed for the next two minutes stays valid on it), and the first
block after an idle spell is dated when it is made, not when its parent was sealed."""

from __future__ import annotations

import time

import pytest

from x402mw.evm.eip712 import TokenDomain, TransferAuthorization, random_nonce, sign_transfer
from x402mw.evm.keys import address_of, new_private_key
from x402mw.platform.chain.devchain import DevChain, start_dev_chain
from x402mw.platform.chain.relayer import Relayer
from x402mw.platform.chain.token import balance_of, encode_transfer_with_authorization

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _transfer(chain: DevChain, payer: bytes, to: str, value: int, valid_after: int, valid_before: int) -> bytes:
    auth = TransferAuthorization(address_of(payer), to, value, valid_after, valid_before, random_nonce())
    domain = TokenDomain("USD Coin", "2", chain.chain_id, chain.tokens["USDC"])
    return encode_transfer_with_authorization(
        from_=auth.from_address,
        to=to,
        value=value,
        valid_after=valid_after,
        valid_before=valid_before,
        nonce=auth.nonce,
        signature=sign_transfer(payer, domain, auth),
    )


async def _head_timestamp(chain: DevChain) -> int:
    return int((await chain.rpc.request("eth_getBlockByNumber", ["latest", False]))["timestamp"], 16)


async def test_a_busy_chain_keeps_to_the_wall_clock() -> None:
    relayer_key, payer = new_private_key(), new_private_key()
    payee = address_of(new_private_key())
    chain = await start_dev_chain(relayer_address=address_of(relayer_key), fund_addresses=[address_of(payer)])
    relayer = Relayer(chain.rpc, relayer_key, chain_id=chain.chain_id)
    await relayer.start()
    try:
        await chain.rpc.request("evm_mine", [hex(400)])  # far more blocks than seconds pass
        assert await _head_timestamp(chain) <= time.time() + 1
        now = int(time.time())
        receipt = await relayer.wait_for_receipt(
            await relayer.send(chain.tokens["USDC"], _transfer(chain, payer, payee, 7, now - 600, now + 120))
        )
        assert receipt.status == 1
        assert await balance_of(chain.rpc, chain.tokens["USDC"], payee) == 7
    finally:
        await relayer.aclose()
        await chain.aclose()


async def test_the_first_block_after_an_idle_spell_is_dated_when_it_is_made() -> None:
    relayer_key, payer = new_private_key(), new_private_key()
    payee = address_of(new_private_key())
    chain = await start_dev_chain(relayer_address=address_of(relayer_key), fund_addresses=[address_of(payer)])
    relayer = Relayer(chain.rpc, relayer_key, chain_id=chain.chain_id)
    await relayer.start()
    backend = chain.rpc._backend
    try:
        # the block being built was dated fifteen minutes ago, as after a quarter of an hour idle
        backend.chain.header = backend.chain.header.copy(timestamp=backend.chain.header.timestamp - 900)
        now = int(time.time())
        receipt = await relayer.wait_for_receipt(
            await relayer.send(chain.tokens["USDC"], _transfer(chain, payer, payee, 3, now - 600, now + 120))
        )
        assert receipt.status == 1  # valid from ten minutes ago: valid in a block dated now
        assert await _head_timestamp(chain) >= now
    finally:
        await relayer.aclose()
        await chain.aclose()
