"""The x402 ``auth-capture`` escrow (``X402AuthCaptureEscrow`` at the v1.1 address,
``X402AuthCaptureEscrowV1_0`` at the v1.0 one) and its token collectors at their canonical addresses,
on the dev chain and on anvil: authorize through each collector, capture in full, in parts and
several times, refund in parts and in full, void, reclaim once the authorization expired, charge;
and what each refuses (more than authorized or captured, the wrong sender, every deadline, a second
void or collection, fees out of bounds, the wrong collector, an authorization of another payment)."""

from __future__ import annotations

import os

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest
from eth_abi.abi import encode as abi_encode
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.auth_capture_helpers import new_payment, operator_key
from tests.chain_fixtures import ChainUnderTest, anvil_node, anyio_backend, chain, new_key
from tests.channel_helpers import address_of_key
from tests.contract_helpers import call_error, chain_now, error_selector, funded_key
from x402mw.evm.auth_capture import (
    DEPLOYMENT_V1_0,
    DEPLOYMENT_V1_1,
    DEPLOYMENTS,
    MAX_AMOUNT,
    MAX_TIMESTAMP,
    PAYMENT_INFO_TYPEHASH,
    ZERO_ADDRESS,
    PaymentInfo,
    payment_info_hash,
    signature_nonce,
)
from x402mw.evm.keccak import keccak256
from x402mw.evm.keys import to_checksum_address
from x402mw.platform.chain.auth_capture import (
    PAYMENT_INFO,
    PaymentState,
    authorize_calldata,
    capture_calldata,
    charge_calldata,
    read_payment_hash,
    read_token_store,
    reclaim_calldata,
    refund_calldata,
    void_calldata,
)
from x402mw.platform.chain.contracts import (
    CANONICAL_CONTRACTS,
    ERC6492_PREPARER_ADDRESS,
    deploy_contract,
    erc6492_wrap,
    runtime_code,
    smart_wallet_address,
    wallet_deploy_calldata,
)
from x402mw.platform.chain.token import balance_of

__all__ = ["anvil_node", "anyio_backend", "chain", "operator_key"]

pytestmark = pytest.mark.anyio


async def _usdc(chain: ChainUnderTest, address: str) -> int:
    return await balance_of(chain.rpc, chain.usdc, address)


async def _eth_call(chain: ChainUnderTest, to: str, data: bytes) -> bytes:
    answer = await chain.rpc.request("eth_call", [{"to": to, "data": "0x" + data.hex()}, "latest"])
    return bytes.fromhex(str(answer)[2:])


# --- placement -----------------------------------------------------------------------------------


async def test_both_deployments_sit_at_their_canonical_addresses(chain: ChainUnderTest, operator_key: bytes) -> None:
    for deployment in DEPLOYMENTS:
        addresses = (
            deployment.escrow,
            deployment.eip3009_collector,
            deployment.permit2_collector,
            deployment.operator_refund_collector,
        )
        for address in addresses:
            code = await chain.rpc.request("eth_getCode", [address, "latest"])
            assert bytes.fromhex(str(code)[2:]) == runtime_code(CANONICAL_CONTRACTS[address]), address
        # Each collector serves its own deployment's escrow.
        for collector in addresses[1:]:
            answer = await _eth_call(chain, collector, keccak256(b"authCaptureEscrow()")[:4])
            assert answer == abi_encode(["address"], [deployment.escrow])
        typehash = await _eth_call(chain, deployment.escrow, keccak256(b"PAYMENT_INFO_TYPEHASH()")[:4])
        assert typehash == PAYMENT_INFO_TYPEHASH
        payment = await new_payment(chain, operator_key, deployment=deployment)
        assert await read_payment_hash(chain.rpc, payment.info, escrow=deployment.escrow) == payment.hash
        assert await payment.state() == PaymentState(False, 0, 0)
    # The two escrows name the same payment differently, and the chain id is in the hash.
    info = payment.info
    assert payment_info_hash(chain.chain_id, info, DEPLOYMENT_V1_0.escrow) != payment_info_hash(
        chain.chain_id, info, DEPLOYMENT_V1_1.escrow
    )
    assert payment_info_hash(chain.chain_id + 1, info) != payment_info_hash(chain.chain_id, info)


_ADDRESSES = st.binary(min_size=20, max_size=20).map(lambda raw: to_checksum_address("0x" + raw.hex()))
_PAYMENT_INFOS = st.builds(
    PaymentInfo,
    operator=_ADDRESSES,
    payer=_ADDRESSES,
    receiver=_ADDRESSES,
    token=_ADDRESSES,
    max_amount=st.integers(0, MAX_AMOUNT),
    pre_approval_expiry=st.integers(0, MAX_TIMESTAMP),
    authorization_expiry=st.integers(0, MAX_TIMESTAMP),
    refund_expiry=st.integers(0, MAX_TIMESTAMP),
    min_fee_bps=st.integers(0, 2**16 - 1),
    max_fee_bps=st.integers(0, 2**16 - 1),
    fee_receiver=_ADDRESSES,
    salt=st.integers(0, 2**256 - 1),
)


async def test_our_hashes_are_the_escrows_for_any_payment(chain: ChainUnderTest) -> None:
    """``payment_info_hash`` and ``signature_nonce`` agree with both escrows' ``getHash`` over the full
    range of every field."""

    async def escrow_hashes(info: PaymentInfo) -> list[bytes]:
        return [
            await read_payment_hash(chain.rpc, payment, escrow=deployment.escrow)
            for deployment in DEPLOYMENTS
            for payment in (info, info.with_payer(ZERO_ADDRESS))
        ]

    @settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(_PAYMENT_INFOS)
    def check(info: PaymentInfo) -> None:
        ours = [
            digest(chain.chain_id, info, deployment.escrow)
            for deployment in DEPLOYMENTS
            for digest in (payment_info_hash, signature_nonce)
        ]
        assert anyio.from_thread.run(escrow_hashes, info) == ours

    await anyio.to_thread.run_sync(check)


# --- authorize, capture, refund ------------------------------------------------------------------


async def test_authorize_then_capture_in_parts_then_refund_in_parts(chain: ChainUnderTest, operator_key: bytes) -> None:
    payment = await new_payment(chain, operator_key, max_amount=1_000_000, min_fee_bps=50, max_fee_bps=100)
    info = payment.info
    store = await read_token_store(chain.rpc, info.operator)
    held = await _usdc(chain, store)
    receipt = await payment.send(payment.authorize_data())
    assert await payment.state() == PaymentState(True, 1_000_000, 0)
    assert await _usdc(chain, info.payer) == 0
    assert await _usdc(chain, store) == held + 1_000_000
    assert await _usdc(chain, payment.deployment.eip3009_collector) == 0
    [authorized] = await payment.events(receipt)
    assert authorized.name == "PaymentAuthorized" and authorized.key == payment.hash
    assert authorized.values == (info.abi_tuple(), 1_000_000, payment.deployment.eip3009_collector)

    # Three captures: 300,000 with a 1% fee, 200,000 with the least fee (0.5%), the rest. The first
    # payout of an operator creates its token store.
    store_existed = await chain.rpc.request("eth_getCode", [store, "latest"]) not in ("0x", "0x0")
    receipt = await payment.send(capture_calldata(info, 300_000, 3_000, info.fee_receiver))
    captured, *created = await payment.events(receipt, stores=True)
    if not store_existed:
        assert [(e.name, e.key[12:], e.values) for e in created] == [
            ("TokenStoreCreated", bytes.fromhex(info.operator[2:]), (store,))
        ]
    assert (captured.name, captured.values[:2]) == ("PaymentCaptured", (300_000, 3_000))
    assert await chain.rpc.request("eth_getCode", [store, "latest"]) not in ("0x", "0x0")
    # The store pays out for its escrow only.
    send_tokens = keccak256(b"sendTokens(address,address,uint256)")[:4]
    data = send_tokens + abi_encode(["address", "address", "uint256"], [chain.usdc, info.operator, 1])
    assert await call_error(chain.rpc, info.operator, store, data) == error_selector("OnlyAuthCaptureEscrow()")
    await payment.send(capture_calldata(info, 200_000, 1_000, info.fee_receiver))
    assert await payment.state() == PaymentState(True, 500_000, 500_000)
    await payment.refused(
        capture_calldata(info, 500_001, 2_501, info.fee_receiver), "InsufficientAuthorization(bytes32,uint256,uint256)"
    )
    await payment.send(capture_calldata(info, 500_000, 5_000, info.fee_receiver))
    assert await payment.state() == PaymentState(True, 0, 1_000_000)
    assert await _usdc(chain, info.receiver) == 297_000 + 199_000 + 495_000
    assert await _usdc(chain, info.fee_receiver) == 3_000 + 1_000 + 5_000
    await payment.refused(
        capture_calldata(info, 1, 0, info.fee_receiver), "InsufficientAuthorization(bytes32,uint256,uint256)"
    )

    # Refunds come from the operator through the operator refund collector, to the payer; not
    # through a payment collector, nor through the other deployment's refund collector.
    collector = payment.deployment.operator_refund_collector
    data = refund_calldata(info, 1, payment.deployment.eip3009_collector)
    await payment.refused(data, "InvalidCollectorForOperation()")
    data = refund_calldata(info, 1, DEPLOYMENT_V1_0.operator_refund_collector)
    await payment.refused(data, "OnlyAuthCaptureEscrow()")
    operator_usdc = await _usdc(chain, info.operator)
    receipt = await payment.send(refund_calldata(info, 400_000, collector))
    [refunded] = await payment.events(receipt)
    assert (refunded.name, refunded.key, refunded.values) == ("PaymentRefunded", payment.hash, (400_000, collector))
    assert await payment.state() == PaymentState(True, 0, 600_000)
    await payment.refused(refund_calldata(info, 600_001, collector), "RefundExceedsCapture(uint256,uint256)")
    await payment.send(refund_calldata(info, 600_000, collector))
    assert await payment.state() == PaymentState(True, 0, 0)
    assert await _usdc(chain, info.payer) == 1_000_000
    assert await _usdc(chain, info.operator) == operator_usdc - 1_000_000
    await payment.refused(refund_calldata(info, 1, collector), "RefundExceedsCapture(uint256,uint256)")
    # Escrowed funds only moved through: the store holds what it held before.
    assert await _usdc(chain, store) == held


async def test_authorizing_less_than_the_maximum_returns_the_rest_and_the_payment_is_collected_once(
    chain: ChainUnderTest, operator_key: bytes
) -> None:
    payment = await new_payment(chain, operator_key, max_amount=1_000_000)
    data = payment.authorize_data(600_000)
    await payment.send(data)
    assert await _usdc(chain, payment.info.payer) == 400_000
    assert await payment.state() == PaymentState(True, 600_000, 0)
    # The same payment again: collected already (the authorization is spent as well).
    await payment.refused(data, "PaymentAlreadyCollected(bytes32)")
    await payment.refused(payment.authorize_data(1_000_001), "ExceedsMaxAmount(uint256,uint256)")
    await payment.refused(payment.authorize_data(0), "ZeroAmount()")


async def test_authorize_through_the_permit2_collector(chain: ChainUnderTest, operator_key: bytes) -> None:
    payment = await new_payment(chain, operator_key, max_amount=800_000, payer_usdc=1_000_000, permit2=True)
    collector = payment.deployment.permit2_collector
    data = authorize_calldata(payment.info, 500_000, collector, payment.permit2_signature())
    await payment.send(data)
    # Permit2 moves only the amount authorized, straight to the operator's token store.
    assert await _usdc(chain, payment.info.payer) == 500_000
    assert await payment.state() == PaymentState(True, 500_000, 0)
    await payment.send(capture_calldata(payment.info, 500_000, 0, payment.info.fee_receiver))
    assert await _usdc(chain, payment.info.receiver) == 500_000
    # Another payment's permit (its nonce is the other payment's hash) does not verify here.
    other = payment.changed(salt=payment.info.salt + 1)
    data = authorize_calldata(other.info, 500_000, collector, payment.permit2_signature())
    await other.refused(data, "InvalidSigner()")


# --- void and reclaim ----------------------------------------------------------------------------


async def test_void_returns_the_hold_once_and_only_the_operator_may(chain: ChainUnderTest, operator_key: bytes) -> None:
    payment = await new_payment(chain, operator_key, max_amount=700_000)
    info = payment.info
    await payment.send(payment.authorize_data())
    await payment.send(capture_calldata(info, 200_000, 0, info.fee_receiver))
    stranger = await funded_key(chain)
    await payment.refused(void_calldata(info), "InvalidSender(address,address)", key=stranger)
    await payment.refused(void_calldata(info), "InvalidSender(address,address)", key=payment.payer_key)
    receipt = await payment.send(void_calldata(info))
    [voided] = await payment.events(receipt)
    assert (voided.name, voided.key, voided.values) == ("PaymentVoided", payment.hash, (500_000,))
    assert await payment.state() == PaymentState(True, 0, 200_000)
    assert await _usdc(chain, info.payer) == 500_000
    await payment.refused(void_calldata(info), "ZeroAuthorization(bytes32)")
    await payment.refused(
        capture_calldata(info, 1, 0, info.fee_receiver), "InsufficientAuthorization(bytes32,uint256,uint256)"
    )
    # What was captured stays refundable after the void.
    await payment.send(refund_calldata(info, 200_000, payment.deployment.operator_refund_collector))
    assert await _usdc(chain, info.payer) == 700_000


async def test_reclaim_only_by_the_payer_and_only_from_the_authorization_expiry(
    chain: ChainUnderTest, operator_key: bytes
) -> None:
    now = await chain_now(chain)
    payment = await new_payment(
        chain, operator_key, pre_approval_expiry=now + 100, authorization_expiry=now + 200, refund_expiry=now + 300
    )
    info = payment.info
    await payment.send(payment.authorize_data())
    await payment.send(capture_calldata(info, 100_000, 0, info.fee_receiver))
    await payment.refused(reclaim_calldata(info), "BeforeAuthorizationExpiry(uint48,uint48)", key=payment.payer_key)
    # At the expiry itself (a block with exactly that timestamp) capture is over and reclaim open.
    await chain.rpc.request("evm_setNextBlockTimestamp", [hex(info.authorization_expiry)])
    await chain.rpc.request("evm_mine", [])
    await payment.refused(capture_calldata(info, 1, 0, info.fee_receiver), "AfterAuthorizationExpiry(uint48,uint48)")
    await payment.refused(reclaim_calldata(info), "InvalidSender(address,address)")
    receipt = await payment.send(reclaim_calldata(info), key=payment.payer_key)
    [reclaimed] = await payment.events(receipt)
    assert (reclaimed.name, reclaimed.values) == ("PaymentReclaimed", (900_000,))
    assert await _usdc(chain, info.payer) == 900_000
    assert await payment.state() == PaymentState(True, 0, 100_000)
    await payment.refused(reclaim_calldata(info), "ZeroAuthorization(bytes32)", key=payment.payer_key)
    # Refunds stay open until the refund expiry, and close there.
    collector = payment.deployment.operator_refund_collector
    await payment.send(refund_calldata(info, 40_000, collector))
    await chain.rpc.request("evm_setNextBlockTimestamp", [hex(info.refund_expiry)])
    await chain.rpc.request("evm_mine", [])
    await payment.refused(refund_calldata(info, 60_000, collector), "AfterRefundExpiry(uint48,uint48)")


# --- charge ----------------------------------------------------------------------------------------


async def test_charge_pays_out_at_once_with_a_fee_in_bounds(chain: ChainUnderTest, operator_key: bytes) -> None:
    payment = await new_payment(chain, operator_key, max_amount=1_000_000, min_fee_bps=100, max_fee_bps=250)
    info, collector = payment.info, payment.deployment.eip3009_collector
    signature = payment.eip3009_signature()
    # v1.1 takes the fee as an amount: 600,000 * 1% … 600,000 * 2.5%.
    for fee in (5_999, 15_001):
        data = charge_calldata(info, 600_000, collector, signature, fee, info.fee_receiver)
        await payment.refused(data, "FeeAmountOutOfRange(uint256,uint256,uint256)")
    data = charge_calldata(info, 600_000, collector, signature, 9_000, address_of_key(new_key()))
    await payment.refused(data, "InvalidFeeReceiver(address,address)")
    receipt = await payment.send(charge_calldata(info, 600_000, collector, signature, 9_000, info.fee_receiver))
    [charged] = await payment.events(receipt)
    assert charged.name == "PaymentCharged"
    assert charged.values == (info.abi_tuple(), 600_000, collector, 9_000, info.fee_receiver)
    assert await payment.state() == PaymentState(True, 0, 600_000)
    assert await _usdc(chain, info.receiver) == 591_000
    assert await _usdc(chain, info.fee_receiver) == 9_000
    assert await _usdc(chain, info.payer) == 400_000
    await payment.refused(void_calldata(info), "ZeroAuthorization(bytes32)")
    await payment.send(refund_calldata(info, 600_000, payment.deployment.operator_refund_collector))
    assert await _usdc(chain, info.payer) == 1_000_000


async def test_the_v1_0_escrow_takes_the_fee_in_basis_points(chain: ChainUnderTest, operator_key: bytes) -> None:
    payment = await new_payment(chain, operator_key, deployment=DEPLOYMENT_V1_0, min_fee_bps=100, max_fee_bps=200)
    info, v1_0 = payment.info, DEPLOYMENT_V1_0
    await payment.send(payment.authorize_data())
    data = capture_calldata(info, 500_000, 201, info.fee_receiver, deployment=v1_0)
    await payment.refused(data, "FeeBpsOutOfRange(uint16,uint16,uint16)")
    receipt = await payment.send(capture_calldata(info, 500_000, 150, info.fee_receiver, deployment=v1_0))
    [captured] = await payment.events(receipt)
    assert (captured.name, captured.values) == ("PaymentCaptured", (500_000, 150, info.fee_receiver))
    assert await _usdc(chain, info.fee_receiver) == 7_500
    assert await _usdc(chain, info.receiver) == 492_500
    # The v1.1 signature of capture is not the v1.0 escrow's.
    v1_1_capture = capture_calldata(info, 1, 0, info.fee_receiver)
    assert await call_error(chain.rpc, info.operator, v1_0.escrow, v1_1_capture) == "0x"
    # An authorization signed for the v1.1 deployment cannot be collected by the v1.0 escrow.
    other = await new_payment(chain, operator_key, deployment=v1_0)
    v1_1_signature = other.eip3009_signature(
        nonce=payment_info_hash(chain.chain_id, other.info.with_payer(ZERO_ADDRESS), DEPLOYMENT_V1_1.escrow),
        to=DEPLOYMENT_V1_1.eip3009_collector,
    )
    data = authorize_calldata(other.info, other.info.max_amount, v1_0.eip3009_collector, v1_1_signature)
    assert (await call_error(chain.rpc, other.info.operator, v1_0.escrow, data)).startswith(
        error_selector("Error(string)")
    )


# --- what the escrow refuses ------------------------------------------------------------------------


async def test_every_collection_deadline_and_fee_bound_is_enforced(chain: ChainUnderTest, operator_key: bytes) -> None:
    now = await chain_now(chain)
    payment = await new_payment(chain, operator_key)
    # The payer's pre-approval has expired (the block's time is past it).
    expired = payment.changed(pre_approval_expiry=now - 1)
    await expired.refused(expired.authorize_data(), "AfterPreApprovalExpiry(uint48,uint48)")
    # The expiries must be ordered: pre-approval <= authorization <= refund.
    for changes in (
        {"authorization_expiry": payment.info.pre_approval_expiry - 1},
        {"refund_expiry": payment.info.authorization_expiry - 1},
    ):
        bad = payment.changed(**changes)
        await bad.refused(bad.authorize_data(), "InvalidExpiries(uint48,uint48,uint48)")
    bad = payment.changed(max_fee_bps=10_001)
    await bad.refused(bad.authorize_data(), "FeeBpsOverflow(uint16)")
    bad = payment.changed(min_fee_bps=200, max_fee_bps=100)
    await bad.refused(bad.authorize_data(), "InvalidFeeBpsRange(uint16,uint16)")
    # Only the operator collects; only a payment collector collects a payment.
    stranger = await funded_key(chain)
    await payment.refused(payment.authorize_data(), "InvalidSender(address,address)", key=stranger)
    data = authorize_calldata(payment.info, 1_000, payment.deployment.operator_refund_collector, b"")
    await payment.refused(data, "InvalidCollectorForOperation()")
    data = authorize_calldata(payment.info, 1_000, address_of_key(new_key()), b"")
    await payment.refused(data, "InvalidCollectorForOperation()")
    # An authorization signed for other terms (here: a larger maximum) does not collect this payment.
    forged = payment.changed(max_amount=payment.info.max_amount + 1).eip3009_signature()
    data = authorize_calldata(payment.info, 1_000, payment.deployment.eip3009_collector, forged)
    assert (await call_error(chain.rpc, payment.info.operator, payment.escrow, data)).startswith(
        error_selector("Error(string)")
    )

    # Fee receivers: a fee needs one; a payment's fixed fee receiver is the only one.
    open_receiver = await new_payment(chain, operator_key, fee_receiver=ZERO_ADDRESS)
    await open_receiver.send(open_receiver.authorize_data())
    info = open_receiver.info
    await open_receiver.refused(capture_calldata(info, 100_000, 1_000, ZERO_ADDRESS), "ZeroFeeReceiver()")
    anyone = address_of_key(new_key())
    await open_receiver.send(capture_calldata(info, 100_000, 1_000, anyone))
    await open_receiver.send(capture_calldata(info, 100_000, 0, ZERO_ADDRESS))
    assert await _usdc(chain, anyone) == 1_000
    await open_receiver.refused(capture_calldata(info, 0, 0, anyone), "ZeroAmount()")
    await open_receiver.refused(capture_calldata(info, 2**120, 0, anyone), "AmountOverflow(uint256,uint256)")


async def test_the_collectors_serve_their_escrow_only(chain: ChainUnderTest, operator_key: bytes) -> None:
    payment = await new_payment(chain, operator_key)
    selector = keccak256(f"collectTokens({PAYMENT_INFO},address,uint256,bytes)".encode())[:4]
    data = selector + abi_encode(
        [PAYMENT_INFO, "address", "uint256", "bytes"],
        [payment.info.abi_tuple(), payment.info.operator, 1_000, payment.eip3009_signature()],
    )
    for deployment in DEPLOYMENTS:
        for collector in (
            deployment.eip3009_collector,
            deployment.permit2_collector,
            deployment.operator_refund_collector,
        ):
            answer = await call_error(chain.rpc, payment.info.operator, collector, data)
            assert answer == error_selector("OnlyAuthCaptureEscrow()")


async def test_timestamps_are_bounded_like_the_escrows_types(chain: ChainUnderTest, operator_key: bytes) -> None:
    payment = await new_payment(chain, operator_key)
    with pytest.raises(ValueError, match="refund_expiry"):
        _ = payment.changed(refund_expiry=2**48).hash


# --- smart-wallet payers ---------------------------------------------------------------------------


async def test_a_wallet_not_deployed_yet_pays_with_an_erc6492_signature(
    chain: ChainUnderTest, operator_key: bytes
) -> None:
    """The EIP-3009 collector unwraps an ERC-6492 signature: the preparer (not the collector) runs the
    factory call that deploys the payer's wallet, then the token checks the inner signature with
    EIP-1271. A wrapper whose factory call fails leaves the wallet undeployed and the signature invalid."""
    factory = await deploy_contract(chain.rpc, operator_key, "X402SmartWalletFactory")
    owner_key, salt = new_key(), os.urandom(32)
    owner = address_of_key(owner_key)
    wallet = smart_wallet_address(factory, owner, salt)
    template = await new_payment(chain, operator_key, payer_usdc=0)
    payment = template.changed(payer=wallet)
    payment.payer_key = owner_key  # X402SmartWallet accepts its owner's signature of the digest itself
    await chain.mint(wallet, payment.info.max_amount)
    inner = payment.eip3009_signature()
    collector = payment.deployment.eip3009_collector

    failing = erc6492_wrap(factory, keccak256(b"nothing()")[:4], inner)
    data = authorize_calldata(payment.info, 500_000, collector, failing)
    assert (await call_error(chain.rpc, payment.info.operator, payment.escrow, data)).startswith(
        error_selector("Error(string)")
    )
    assert await chain.rpc.request("eth_getCode", [wallet, "latest"]) in ("0x", "0x0")

    wrapped = erc6492_wrap(factory, wallet_deploy_calldata(owner, salt), inner)
    await payment.send(authorize_calldata(payment.info, 500_000, collector, wrapped))
    assert await chain.rpc.request("eth_getCode", [wallet, "latest"]) not in ("0x", "0x0")
    assert await payment.state() == PaymentState(True, 500_000, 0)
    assert await _usdc(chain, wallet) == 500_000
    code = await chain.rpc.request("eth_getCode", [ERC6492_PREPARER_ADDRESS, "latest"])
    assert bytes.fromhex(str(code)[2:]) == runtime_code("X402ERC6492Preparer")
