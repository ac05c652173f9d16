"""The x402 ``batch-settlement`` escrow (``X402BatchSettlement``) and its EIP-3009 and Permit2 deposit
collectors at their canonical addresses, on the dev chain and on anvil: deposits through each
collector, vouchers of many channels claimed in one call, one transfer settling them, what a claim
refuses (more than a voucher signed or the channel holds, a voucher of the wrong key), cooperative
refunds with their nonce used once, and a timed withdrawal raced by a claim."""

from __future__ import annotations

import os

import pytest
from eth_abi.abi import encode as abi_encode

from tests.chain_fixtures import RECEIVE, ChainUnderTest, anvil_node, anyio_backend, chain, new_key, sign_authorization
from tests.channel_helpers import (
    DELAY,
    GAS,
    MAX_UINT,
    Channel,
    address_of_key,
    advance,
    approve_calldata,
    batch_signature,
    collect_calldata,
    deposit_eip3009,
    eip3009_deposit_calldata,
    escrow_events,
    escrow_usdc,
    new_channel,
    permit2_deposit_calldata,
    random_uint,
    receiver_keys,
    refused,
    relayer_key,
)
from tests.contract_helpers import call_error, chain_now, error_selector, funded_key
from x402mw.evm.batch_settlement import (
    BATCH_SETTLEMENT_ADDRESS,
    ERC3009_DEPOSIT_COLLECTOR_ADDRESS,
    PERMIT2_DEPOSIT_COLLECTOR_ADDRESS,
    ZERO_ADDRESS,
    ChannelConfig,
    ChannelDomain,
    VoucherClaim,
    channel_id,
    erc3009_deposit_nonce,
)
from x402mw.evm.eip712 import TokenDomain, sign_digest
from x402mw.evm.keccak import keccak256
from x402mw.evm.permit2 import PERMIT2_ADDRESS, permit2612_digest
from x402mw.platform.chain.admin import transact
from x402mw.platform.chain.channels import (
    ChannelSnapshot,
    claim_calldata,
    claim_with_signature_calldata,
    deposit_calldata,
    eip2612_permit_data,
    erc3009_collector_data,
    finalize_withdraw_calldata,
    initiate_withdraw_calldata,
    multicall_calldata,
    permit2_collector_data,
    read_channel_id,
    read_receiver,
    refund_calldata,
    refund_with_signature_calldata,
    settle_calldata,
)
from x402mw.platform.chain.contracts import (
    CANONICAL_CONTRACTS,
    deploy_contract,
    runtime_code,
    smart_wallet_address,
    wallet_deploy_calldata,
)
from x402mw.platform.chain.token import balance_of, permit_nonce

__all__ = ["anvil_node", "anyio_backend", "chain", "receiver_keys", "relayer_key"]

pytestmark = pytest.mark.anyio


# --- placement -----------------------------------------------------------------------------------


async def test_the_escrow_and_collectors_sit_at_their_canonical_addresses(chain: ChainUnderTest) -> None:
    for address in (BATCH_SETTLEMENT_ADDRESS, ERC3009_DEPOSIT_COLLECTOR_ADDRESS, PERMIT2_DEPOSIT_COLLECTOR_ADDRESS):
        code = await chain.rpc.request("eth_getCode", [address, "latest"])
        assert bytes.fromhex(str(code)[2:]) == runtime_code(CANONICAL_CONTRACTS[address])
    answer = await chain.rpc.request(
        "eth_call",
        [{"to": BATCH_SETTLEMENT_ADDRESS, "data": "0x" + keccak256(b"DOMAIN_SEPARATOR()")[:4].hex()}, "latest"],
    )
    assert bytes.fromhex(str(answer)[2:]) == ChannelDomain(chain.chain_id).separator
    config = ChannelConfig(
        address_of_key(new_key()),
        ZERO_ADDRESS,
        address_of_key(new_key()),
        address_of_key(new_key()),
        chain.usdc,
        900,
        os.urandom(32),
    )
    assert await read_channel_id(chain.rpc, config) == channel_id(ChannelDomain(chain.chain_id), config)


# --- deposits --------------------------------------------------------------------------------------


async def test_a_deposit_through_the_eip3009_collector(
    chain: ChainUnderTest, relayer_key: bytes, receiver_keys: tuple[bytes, bytes]
) -> None:
    channel = await new_channel(chain, receiver_keys, usdc=5_000_000)
    held = await escrow_usdc(chain)
    receipt = await deposit_eip3009(channel, relayer_key, 3_000_000)
    assert await balance_of(chain.rpc, chain.usdc, channel.payer) == 2_000_000
    assert await escrow_usdc(chain) == held + 3_000_000
    assert await balance_of(chain.rpc, chain.usdc, ERC3009_DEPOSIT_COLLECTOR_ADDRESS) == 0
    assert await channel.state() == ChannelSnapshot(3_000_000, 0, 0, 0, 0)
    events = await escrow_events(chain, receipt)
    assert [name for name, _, _ in events] == ["ChannelCreated", "Deposited"]
    assert events[0][1] == [channel.id]
    created = abi_encode(["(address,address,address,address,address,uint40,bytes32)"], [channel.config.abi_tuple()])
    assert events[0][2] == created
    assert events[1][1] == [channel.id, bytes(12) + bytes.fromhex(address_of_key(relayer_key)[2:])]
    assert events[1][2] == abi_encode(["uint128", "uint128"], [3_000_000, 3_000_000])

    # A top-up adds to the same channel and creates nothing.
    receipt = await deposit_eip3009(channel, relayer_key, 2_000_000)
    assert [name for name, _, _ in await escrow_events(chain, receipt)] == ["Deposited"]
    assert (await channel.state()).balance == 5_000_000


async def test_an_eip3009_deposit_is_bound_to_its_channel_and_the_escrow(
    chain: ChainUnderTest, relayer_key: bytes, receiver_keys: tuple[bytes, bytes]
) -> None:
    channel = await new_channel(chain, receiver_keys)
    other = await new_channel(chain, receiver_keys)
    # An authorization whose nonce names another channel does not verify for this one.
    data = await eip3009_deposit_calldata(channel, relayer_key, 1_000, nonce_channel=other.id)
    error = await call_error(chain.rpc, address_of_key(relayer_key), BATCH_SETTLEMENT_ADDRESS, data)
    assert error.startswith(error_selector("Error(string)")), error  # the token's "invalid signature"
    # The collector serves the escrow only: called directly, even with a good authorization, it refuses.
    salt = random_uint()
    valid_before = await chain_now(chain) + 3600
    signature = sign_authorization(
        channel.payer_key,
        chain.domain(),
        to=ERC3009_DEPOSIT_COLLECTOR_ADDRESS,
        value=1_000,
        valid_after=0,
        valid_before=valid_before,
        nonce=erc3009_deposit_nonce(channel.id, salt),
        primary_type=RECEIVE,
    )
    direct = collect_calldata(
        channel.payer, chain.usdc, 1_000, channel.id, erc3009_collector_data(0, valid_before, salt, signature)
    )
    await refused(chain, relayer_key, direct, "OnlyBatchSettlement()", to=ERC3009_DEPOSIT_COLLECTOR_ADDRESS)
    # The same authorization through the escrow deposits, once.
    good = deposit_calldata(
        channel.config,
        1_000,
        ERC3009_DEPOSIT_COLLECTOR_ADDRESS,
        erc3009_collector_data(0, valid_before, salt, signature),
    )
    await transact(chain.rpc, relayer_key, BATCH_SETTLEMENT_ADDRESS, good, gas=GAS)
    assert (await channel.state()).balance == 1_000
    error = await call_error(chain.rpc, address_of_key(relayer_key), BATCH_SETTLEMENT_ADDRESS, good)
    assert error.startswith(error_selector("Error(string)")), error  # "authorization is used or canceled"
    # Bad channels and amounts are refused before anything moves.
    bad_delay = Channel(chain, channel.payer_key, receiver_keys[0], receiver_keys[1], delay=899)
    await refused(
        chain, relayer_key, await eip3009_deposit_calldata(bad_delay, relayer_key, 1_000), "WithdrawDelayOutOfRange()"
    )
    too_long = Channel(chain, channel.payer_key, receiver_keys[0], receiver_keys[1], delay=2_592_001)
    await refused(
        chain, relayer_key, await eip3009_deposit_calldata(too_long, relayer_key, 1_000), "WithdrawDelayOutOfRange()"
    )
    await refused(chain, relayer_key, await eip3009_deposit_calldata(channel, relayer_key, 0), "ZeroDeposit()")
    no_code = deposit_calldata(channel.config, 1_000, address_of_key(new_key()), b"")
    await refused(chain, relayer_key, no_code, "InvalidCollector()")


async def test_a_deposit_through_the_permit2_collector(
    chain: ChainUnderTest, relayer_key: bytes, receiver_keys: tuple[bytes, bytes]
) -> None:
    channel = await new_channel(chain, receiver_keys, usdc=4_000_000)
    await transact(chain.rpc, channel.payer_key, chain.usdc, approve_calldata(PERMIT2_ADDRESS, MAX_UINT), gas=80_000)
    held = await escrow_usdc(chain)
    # A permit whose witness names another channel is refused by Permit2.
    other = await new_channel(chain, receiver_keys)
    stolen = await permit2_deposit_calldata(channel, 1_000_000, witness_channel=other.id)
    await refused(chain, relayer_key, stolen, "InvalidSigner()")
    receipt = await transact(
        chain.rpc, relayer_key, BATCH_SETTLEMENT_ADDRESS, await permit2_deposit_calldata(channel, 1_500_000), gas=GAS
    )
    assert [name for name, _, _ in await escrow_events(chain, receipt)] == ["ChannelCreated", "Deposited"]
    assert await balance_of(chain.rpc, chain.usdc, channel.payer) == 2_500_000
    assert await escrow_usdc(chain) == held + 1_500_000
    assert (await channel.state()).balance == 1_500_000


async def test_a_gasless_permit2_deposit_with_an_eip2612_permit(
    chain: ChainUnderTest, relayer_key: bytes, receiver_keys: tuple[bytes, bytes]
) -> None:
    channel = await new_channel(chain, receiver_keys, usdc=2_000_000)  # it never sends a transaction
    deadline = await chain_now(chain) + 3600
    token_domain = TokenDomain("USD Coin", "2", chain.chain_id, chain.usdc)
    nonce = await permit_nonce(chain.rpc, chain.usdc, channel.payer)
    signed = sign_digest(
        channel.payer_key, permit2612_digest(token_domain, channel.payer, PERMIT2_ADDRESS, MAX_UINT, nonce, deadline)
    )
    permit = eip2612_permit_data(MAX_UINT, deadline, signed[64], signed[:32], signed[32:64])
    # Without the permit Permit2 has no allowance.
    error = await call_error(
        chain.rpc,
        address_of_key(relayer_key),
        BATCH_SETTLEMENT_ADDRESS,
        await permit2_deposit_calldata(channel, 700_000),
    )
    assert error.startswith(error_selector("Error(string)"))  # TRANSFER_FROM_FAILED
    await transact(
        chain.rpc,
        relayer_key,
        BATCH_SETTLEMENT_ADDRESS,
        await permit2_deposit_calldata(channel, 700_000, eip2612=permit),
        gas=GAS,
    )
    assert (await channel.state()).balance == 700_000
    # The permit is spent; a second deposit with it still works (its failure is ignored, the allowance stays).
    await transact(
        chain.rpc,
        relayer_key,
        BATCH_SETTLEMENT_ADDRESS,
        await permit2_deposit_calldata(channel, 300_000, eip2612=permit),
        gas=GAS,
    )
    assert (await channel.state()).balance == 1_000_000
    direct = collect_calldata(
        channel.payer, chain.usdc, 1, channel.id, permit2_collector_data(1, deadline, b"\x00" * 65)
    )
    await refused(chain, relayer_key, direct, "OnlyBatchSettlement()", to=PERMIT2_DEPOSIT_COLLECTOR_ADDRESS)


# --- claims and settlement -------------------------------------------------------------------


async def test_many_channels_claimed_in_one_call_and_settled_in_one_transfer(
    chain: ChainUnderTest, relayer_key: bytes, receiver_keys: tuple[bytes, bytes]
) -> None:
    receiver_key = new_key()  # a receiver of its own: its totals start at zero
    channels = []
    for i in range(6):
        payer_authorizer = new_key() if i % 2 else None
        channel = Channel(
            chain, await funded_key(chain, usdc=1_000_000), receiver_key, receiver_keys[1], payer_authorizer
        )
        await deposit_eip3009(channel, relayer_key, 1_000_000)
        channels.append(channel)
    receiver = channels[0].receiver
    # Each payer signed a cumulative voucher; the server charged a part of each ceiling.
    claims = [c.claim(100_000 * (i + 1), 90_000 * (i + 1)) for i, c in enumerate(channels)]
    expected = sum(c.total_claimed for c in claims)
    data = claim_with_signature_calldata(claims, batch_signature(channels, claims))
    receipt = await transact(chain.rpc, relayer_key, BATCH_SETTLEMENT_ADDRESS, data, gas=GAS)
    assert [name for name, _, _ in await escrow_events(chain, receipt)] == ["Claimed"] * 6
    for channel, claim in zip(channels, claims, strict=True):
        state = await channel.state()
        assert (state.balance, state.total_claimed) == (1_000_000, claim.total_claimed)
    assert await read_receiver(chain.rpc, receiver, chain.usdc) == (expected, 0)
    assert await balance_of(chain.rpc, chain.usdc, receiver) == 0  # claiming moves no token

    # The same batch again changes nothing (cumulative totals), and costs no signature check.
    await transact(chain.rpc, relayer_key, BATCH_SETTLEMENT_ADDRESS, data, gas=GAS)
    assert await read_receiver(chain.rpc, receiver, chain.usdc) == (expected, 0)

    held = await escrow_usdc(chain)
    receipt = await transact(
        chain.rpc, relayer_key, BATCH_SETTLEMENT_ADDRESS, settle_calldata(receiver, chain.usdc), gas=GAS
    )
    assert await balance_of(chain.rpc, chain.usdc, receiver) == expected
    assert await escrow_usdc(chain) == held - expected
    assert await read_receiver(chain.rpc, receiver, chain.usdc) == (expected, expected)
    settled = await escrow_events(chain, receipt)
    assert [(name, data) for name, _, data in settled] == [("Settled", abi_encode(["uint128"], [expected]))]
    # Settling again is a no-op; so is settling a receiver with nothing claimed.
    receipt = await transact(
        chain.rpc, relayer_key, BATCH_SETTLEMENT_ADDRESS, settle_calldata(receiver, chain.usdc), gas=GAS
    )
    assert await escrow_events(chain, receipt) == []
    assert await balance_of(chain.rpc, chain.usdc, receiver) == expected

    # A later voucher claims the difference only.
    more = [channels[0].claim(500_000, 400_000)]
    await transact(
        chain.rpc,
        relayer_key,
        BATCH_SETTLEMENT_ADDRESS,
        claim_with_signature_calldata(more, batch_signature(channels, more)),
        gas=GAS,
    )
    assert await read_receiver(chain.rpc, receiver, chain.usdc) == (expected + 310_000, expected)
    # claim() directly, by the receiver, with settle in the same multicall.
    direct = [channels[1].claim(600_000, 600_000)]
    calls = multicall_calldata([claim_calldata(direct), settle_calldata(receiver, chain.usdc)])
    await transact(chain.rpc, chain.minter_key, receiver, b"", gas=21_000, value=10**17)  # gas for the receiver
    await transact(chain.rpc, receiver_key, BATCH_SETTLEMENT_ADDRESS, calls, gas=GAS)
    assert await balance_of(chain.rpc, chain.usdc, receiver) == expected + 310_000 + 420_000


async def test_what_a_claim_refuses(
    chain: ChainUnderTest, relayer_key: bytes, receiver_keys: tuple[bytes, bytes]
) -> None:
    channel = await new_channel(chain, receiver_keys)
    await deposit_eip3009(channel, relayer_key, 1_000_000)
    delegated = await new_channel(chain, receiver_keys, payer_authorizer_key=new_key())
    await deposit_eip3009(delegated, relayer_key, 1_000_000)

    def signed(claims: list[VoucherClaim], key: bytes | None = None) -> bytes:
        return claim_with_signature_calldata(claims, batch_signature([channel], claims, key))

    # Never more than the voucher's ceiling, never more than the channel holds.
    await refused(chain, relayer_key, signed([channel.claim(500_000, 500_001)]), "ClaimExceedsCeiling()")
    await refused(chain, relayer_key, signed([channel.claim(2_000_000, 1_000_001)]), "ClaimExceedsBalance()")
    # A voucher signed by a key other than the payer's, or by the payer when it delegated to an authorizer.
    await refused(chain, relayer_key, signed([channel.claim(500_000, 400_000, key=new_key())]), "InvalidSignature()")
    await refused(
        chain, relayer_key, signed([delegated.claim(500_000, 400_000, key=delegated.payer_key)]), "InvalidSignature()"
    )
    # A voucher for another amount than the one claimed with.
    forged = VoucherClaim(channel.config, 900_000, channel.voucher(100_000), 800_000)
    await refused(chain, relayer_key, signed([forged]), "InvalidSignature()")
    # A batch not signed by the receiver authorizer, rows of different authorizers, an empty batch.
    await refused(chain, relayer_key, signed([channel.claim(500_000, 400_000)], new_key()), "InvalidSignature()")
    stranger = Channel(chain, channel.payer_key, receiver_keys[0], new_key())
    rows = [channel.claim(500_000, 400_000), stranger.claim(1, 1)]
    await refused(chain, relayer_key, signed(rows), "NotReceiverAuthorizer()")
    await refused(chain, relayer_key, claim_with_signature_calldata([], b""), "EmptyBatch()")
    # claim() is for the receiver and its authorizer only; one bad row spoils the batch.
    await refused(chain, relayer_key, claim_calldata([channel.claim(500_000, 400_000)]), "NotAuthorizedToClaim()")
    rows = [channel.claim(500_000, 400_000), channel.claim(500_000, 400_001, key=new_key())]
    await refused(chain, receiver_keys[1], claim_calldata(rows), "InvalidSignature()")
    # The good rows: a delegated channel's voucher signed by its authorizer, claimed by the receiver.
    good = [channel.claim(500_000, 400_000), delegated.claim(300_000, 300_000)]
    await transact(chain.rpc, receiver_keys[0], BATCH_SETTLEMENT_ADDRESS, claim_calldata(good), gas=GAS)
    assert (await channel.state()).total_claimed == 400_000
    assert (await delegated.state()).total_claimed == 300_000


async def test_eip1271_wallets_as_payer_and_as_receiver_authorizer(
    chain: ChainUnderTest, relayer_key: bytes, receiver_keys: tuple[bytes, bytes]
) -> None:
    # A payer whose channel names no payer authorizer may be a contract wallet: its vouchers (and its
    # EIP-3009 deposit) are checked with EIP-1271. A receiver authorizer may be one too.
    factory = await deploy_contract(chain.rpc, relayer_key, "X402SmartWalletFactory")
    wallets = []
    for _ in range(2):
        owner_key, salt = new_key(), os.urandom(32)
        calldata = wallet_deploy_calldata(address_of_key(owner_key), salt)
        await transact(chain.rpc, relayer_key, factory, calldata, gas=GAS)
        wallets.append((owner_key, smart_wallet_address(factory, address_of_key(owner_key), salt)))
    (payer_owner, payer_wallet), (authorizer_owner, authorizer_wallet) = wallets
    await chain.mint(payer_wallet, 1_000_000)
    channel = Channel(
        chain,
        payer_owner,
        receiver_keys[0],
        authorizer_owner,
        payer_wallet=payer_wallet,
        authorizer_wallet=authorizer_wallet,
    )
    await deposit_eip3009(channel, relayer_key, 1_000_000)
    assert (await channel.state()).balance == 1_000_000
    assert await balance_of(chain.rpc, chain.usdc, payer_wallet) == 0

    stranger = [channel.claim(400_000, 400_000, key=new_key())]
    await refused(
        chain,
        relayer_key,
        claim_with_signature_calldata(stranger, batch_signature([channel], stranger)),
        "InvalidSignature()",
    )
    claims = [channel.claim(400_000, 400_000)]
    not_the_owner = batch_signature([channel], claims, new_key())
    await refused(chain, relayer_key, claim_with_signature_calldata(claims, not_the_owner), "InvalidSignature()")
    await transact(
        chain.rpc,
        relayer_key,
        BATCH_SETTLEMENT_ADDRESS,
        claim_with_signature_calldata(claims, batch_signature([channel], claims)),
        gas=GAS,
    )
    assert (await channel.state()).total_claimed == 400_000
    data = refund_with_signature_calldata(channel.config, 600_000, 0, channel.refund_signature(0, 600_000))
    await transact(chain.rpc, relayer_key, BATCH_SETTLEMENT_ADDRESS, data, gas=GAS)
    assert await balance_of(chain.rpc, chain.usdc, payer_wallet) == 600_000


# --- refunds ---------------------------------------------------------------------------------


async def test_a_cooperative_refund_uses_its_nonce_once(
    chain: ChainUnderTest, relayer_key: bytes, receiver_keys: tuple[bytes, bytes]
) -> None:
    channel = await new_channel(chain, receiver_keys, usdc=1_000_000)
    await deposit_eip3009(channel, relayer_key, 1_000_000)
    claims = [channel.claim(300_000, 300_000)]
    await transact(
        chain.rpc,
        relayer_key,
        BATCH_SETTLEMENT_ADDRESS,
        claim_with_signature_calldata(claims, batch_signature([channel], claims)),
        gas=GAS,
    )

    signature = channel.refund_signature(0, 200_000)
    data = refund_with_signature_calldata(channel.config, 200_000, 0, signature)
    receipt = await transact(chain.rpc, relayer_key, BATCH_SETTLEMENT_ADDRESS, data, gas=GAS)
    assert [name for name, _, _ in await escrow_events(chain, receipt)] == ["Refunded"]
    assert await balance_of(chain.rpc, chain.usdc, channel.payer) == 200_000
    assert await channel.state() == ChannelSnapshot(800_000, 300_000, 0, 0, 1)
    # The same signature again: its nonce is used.
    await refused(chain, relayer_key, data, "InvalidRefundNonce()")
    # Signed by another key, or for another amount than sent.
    await refused(
        chain,
        relayer_key,
        refund_with_signature_calldata(channel.config, 1, 1, channel.refund_signature(1, 1, key=new_key())),
        "InvalidSignature()",
    )
    await refused(
        chain,
        relayer_key,
        refund_with_signature_calldata(channel.config, 2, 1, channel.refund_signature(1, 1)),
        "InvalidSignature()",
    )
    # A direct refund by the receiver side advances the nonce too, invalidating what was signed for it.
    presigned = refund_with_signature_calldata(channel.config, 100_000, 1, channel.refund_signature(1, 100_000))
    await refused(chain, relayer_key, refund_calldata(channel.config, 100_000), "NotAuthorizedToRefund()")
    await refused(chain, receiver_keys[0], refund_calldata(channel.config, 0), "ZeroRefund()")
    await transact(
        chain.rpc, receiver_keys[0], BATCH_SETTLEMENT_ADDRESS, refund_calldata(channel.config, 100_000), gas=GAS
    )
    await refused(chain, relayer_key, presigned, "InvalidRefundNonce()")
    # A refund of more than is unclaimed returns the unclaimed part only: claimed funds stay.
    await transact(
        chain.rpc, receiver_keys[1], BATCH_SETTLEMENT_ADDRESS, refund_calldata(channel.config, 10**9), gas=GAS
    )
    assert await channel.state() == ChannelSnapshot(300_000, 300_000, 0, 0, 3)
    assert await balance_of(chain.rpc, chain.usdc, channel.payer) == 700_000
    # With nothing left unclaimed, a refund moves nothing and emits nothing, and still uses its nonce.
    data = refund_with_signature_calldata(channel.config, 5, 3, channel.refund_signature(3, 5))
    receipt = await transact(chain.rpc, relayer_key, BATCH_SETTLEMENT_ADDRESS, data, gas=GAS)
    assert await escrow_events(chain, receipt) == []
    assert await channel.state() == ChannelSnapshot(300_000, 300_000, 0, 0, 4)
    # The claimed 300,000 are still the receiver's to settle.
    await transact(
        chain.rpc, relayer_key, BATCH_SETTLEMENT_ADDRESS, settle_calldata(channel.receiver, chain.usdc), gas=GAS
    )
    assert await balance_of(chain.rpc, chain.usdc, channel.receiver) >= 300_000


async def test_a_full_refund_closes_an_unclaimed_channel_and_it_opens_again(
    chain: ChainUnderTest, relayer_key: bytes, receiver_keys: tuple[bytes, bytes]
) -> None:
    channel = await new_channel(chain, receiver_keys, usdc=1_000_000)
    await deposit_eip3009(channel, relayer_key, 600_000)
    data = refund_with_signature_calldata(channel.config, 600_000, 0, channel.refund_signature(0, 600_000))
    receipt = await transact(chain.rpc, relayer_key, BATCH_SETTLEMENT_ADDRESS, data, gas=GAS)
    assert [name for name, _, _ in await escrow_events(chain, receipt)] == ["Refunded", "ChannelClosed"]
    assert await channel.state() == ChannelSnapshot(0, 0, 0, 0, 1)
    receipt = await deposit_eip3009(channel, relayer_key, 400_000)
    assert [name for name, _, _ in await escrow_events(chain, receipt)] == ["ChannelCreated", "Deposited"]
    assert await balance_of(chain.rpc, chain.usdc, channel.payer) == 600_000


# --- timed withdrawal ------------------------------------------------------------------------


async def test_a_timed_withdrawal_raced_by_a_claim(
    chain: ChainUnderTest, relayer_key: bytes, receiver_keys: tuple[bytes, bytes]
) -> None:
    channel = await new_channel(chain, receiver_keys, usdc=1_000_000)
    await deposit_eip3009(channel, relayer_key, 1_000_000)
    voucher = channel.claim(600_000, 600_000)  # signed by the payer, not claimed yet
    # Only the payer side may withdraw, and no more than is unclaimed.
    await refused(chain, relayer_key, initiate_withdraw_calldata(channel.config, 1), "NotAuthorizedToWithdraw()")
    await refused(
        chain,
        channel.payer_key,
        initiate_withdraw_calldata(channel.config, 1_000_001),
        "WithdrawAmountExceedsAvailable()",
    )
    await refused(chain, channel.payer_key, initiate_withdraw_calldata(channel.config, 0), "NothingToWithdraw()")
    await refused(chain, channel.payer_key, finalize_withdraw_calldata(channel.config), "WithdrawalNotPending()")
    receipt = await transact(
        chain.rpc,
        channel.payer_key,
        BATCH_SETTLEMENT_ADDRESS,
        initiate_withdraw_calldata(channel.config, 1_000_000),
        gas=GAS,
    )
    started = await chain_now(chain)
    events = await escrow_events(chain, receipt)
    assert events == [
        ("WithdrawInitiated", [channel.id], abi_encode(["uint128", "uint40"], [1_000_000, started + DELAY]))
    ]
    state = await channel.state()
    assert (state.withdraw_amount, state.withdraw_requested_at) == (1_000_000, started)
    await refused(chain, channel.payer_key, initiate_withdraw_calldata(channel.config, 1), "WithdrawalAlreadyPending()")
    await refused(chain, channel.payer_key, finalize_withdraw_calldata(channel.config), "WithdrawDelayNotElapsed()")
    await refused(chain, relayer_key, finalize_withdraw_calldata(channel.config), "NotAuthorizedToFinalizeWithdraw()")

    # The server sees the withdrawal and claims its voucher within the delay.
    await advance(chain, DELAY - 60)
    claims = [voucher]
    await transact(
        chain.rpc,
        relayer_key,
        BATCH_SETTLEMENT_ADDRESS,
        claim_with_signature_calldata(claims, batch_signature([channel], claims)),
        gas=GAS,
    )
    await refused(chain, channel.payer_key, finalize_withdraw_calldata(channel.config), "WithdrawDelayNotElapsed()")
    await advance(chain, 61)
    receipt = await transact(
        chain.rpc, channel.payer_key, BATCH_SETTLEMENT_ADDRESS, finalize_withdraw_calldata(channel.config), gas=GAS
    )
    # The withdrawal took what was unclaimed only; the claim stands and settles.
    assert await balance_of(chain.rpc, chain.usdc, channel.payer) == 400_000
    assert await channel.state() == ChannelSnapshot(600_000, 600_000, 0, 0, 0)
    finalized = await escrow_events(chain, receipt)
    assert [(name, data) for name, _, data in finalized] == [("WithdrawFinalized", abi_encode(["uint128"], [400_000]))]
    # After the withdrawal, the voucher's unclaimed ceiling finds nothing left.
    late = [channel.claim(700_000, 700_000)]
    await refused(
        chain,
        relayer_key,
        claim_with_signature_calldata(late, batch_signature([channel], late)),
        "ClaimExceedsBalance()",
    )
    before = await balance_of(chain.rpc, chain.usdc, channel.receiver)
    await transact(
        chain.rpc, relayer_key, BATCH_SETTLEMENT_ADDRESS, settle_calldata(channel.receiver, chain.usdc), gas=GAS
    )
    assert await balance_of(chain.rpc, chain.usdc, channel.receiver) >= before + 600_000


async def test_a_refund_shrinks_or_cancels_a_pending_withdrawal(
    chain: ChainUnderTest, relayer_key: bytes, receiver_keys: tuple[bytes, bytes]
) -> None:
    authorizer = new_key()
    channel = await new_channel(chain, receiver_keys, usdc=1_000_000, payer_authorizer_key=authorizer)
    await deposit_eip3009(channel, relayer_key, 1_000_000)
    await transact(chain.rpc, chain.minter_key, address_of_key(authorizer), b"", gas=21_000, value=10**17)
    # The payer's authorizer may withdraw for it (the money goes to the payer).
    await transact(
        chain.rpc, authorizer, BATCH_SETTLEMENT_ADDRESS, initiate_withdraw_calldata(channel.config, 500_000), gas=GAS
    )
    await transact(
        chain.rpc, receiver_keys[0], BATCH_SETTLEMENT_ADDRESS, refund_calldata(channel.config, 200_000), gas=GAS
    )
    state = await channel.state()
    assert (state.balance, state.withdraw_amount) == (800_000, 300_000)
    await transact(
        chain.rpc, receiver_keys[0], BATCH_SETTLEMENT_ADDRESS, refund_calldata(channel.config, 300_000), gas=GAS
    )
    state = await channel.state()
    assert (state.balance, state.withdraw_amount, state.withdraw_requested_at) == (500_000, 0, 0)
    await refused(chain, authorizer, finalize_withdraw_calldata(channel.config), "WithdrawalNotPending()")
    assert await balance_of(chain.rpc, chain.usdc, channel.payer) == 500_000
