"""What the x402 Foundation's Python SDK (``x402`` 2.25.0) signs for the ``batch-settlement`` scheme is
accepted unchanged by our escrow and collectors, on the dev chain and anvil: its EIP-3009 and Permit2
deposit payloads with their vouchers, its receiver authorizer's claim batch and refund."""

from __future__ import annotations

import os

import pytest
from eth_account import Account

from tests.chain_fixtures import ChainUnderTest, anvil_node, anyio_backend, chain
from tests.channel_helpers import (
    DELAY,
    GAS,
    MAX_UINT,
    address_of_key,
    approve_calldata,
    receiver_keys,
    relayer_key,
)
from tests.contract_helpers import funded_key
from x402mw.evm.batch_settlement import (
    BATCH_SETTLEMENT_ADDRESS,
    ERC3009_DEPOSIT_COLLECTOR_ADDRESS,
    PERMIT2_DEPOSIT_COLLECTOR_ADDRESS,
    ZERO_ADDRESS,
    ChannelConfig,
    ChannelDomain,
    VoucherClaim,
    channel_id,
)
from x402mw.evm.permit2 import PERMIT2_ADDRESS
from x402mw.platform.chain.admin import transact
from x402mw.platform.chain.channels import (
    ChannelSnapshot,
    claim_with_signature_calldata,
    deposit_calldata,
    read_channel,
    refund_with_signature_calldata,
)

__all__ = ["anvil_node", "anyio_backend", "chain", "receiver_keys", "relayer_key"]

pytestmark = pytest.mark.anyio


async def test_what_the_foundation_sdk_signs_is_accepted(
    chain: ChainUnderTest, relayer_key: bytes, receiver_keys: tuple[bytes, bytes]
) -> None:
    """The x402 Foundation's Python SDK (``x402`` 2.25.0) builds a deposit payload of each kind with
    its voucher, and signs a claim batch and a refund as a receiver authorizer; all go through here."""
    from x402.mechanisms.evm.batch_settlement.authorizer_signer import (
        LocalAuthorizerSigner,
        sign_claim_batch,
        sign_refund,
    )
    from x402.mechanisms.evm.batch_settlement.client.eip3009 import create_batch_settlement_eip3009_deposit_payload
    from x402.mechanisms.evm.batch_settlement.client.permit2 import create_batch_settlement_permit2_deposit_payload
    from x402.mechanisms.evm.batch_settlement.encoding import build_erc3009_collector_data, build_permit2_collector_data
    from x402.mechanisms.evm.batch_settlement.types import ChannelConfig as SdkConfig
    from x402.mechanisms.evm.batch_settlement.types import VoucherClaim as SdkClaim
    from x402.mechanisms.evm.signers import EthAccountSigner
    from x402.schemas import PaymentRequirements

    network = f"eip155:{chain.chain_id}"
    receiver, authorizer = (address_of_key(k) for k in receiver_keys)
    requirements = PaymentRequirements(
        scheme="batch-settlement",
        network=network,
        asset=chain.usdc,
        amount="1000",
        pay_to=receiver,
        max_timeout_seconds=3600,
        extra={"receiverAuthorizer": authorizer, "withdrawDelay": DELAY, "name": "USD Coin", "version": "2"},
    )
    configs = []
    for kind in ("eip3009", "permit2"):
        payer_key = await funded_key(chain, usdc=1_000_000)
        payer = address_of_key(payer_key)
        if kind == "permit2":
            await transact(chain.rpc, payer_key, chain.usdc, approve_calldata(PERMIT2_ADDRESS, MAX_UINT), gas=80_000)
        sdk_config = SdkConfig(
            payer, ZERO_ADDRESS, receiver, authorizer, chain.usdc, DELAY, "0x" + os.urandom(32).hex()
        )
        signer = EthAccountSigner(Account.from_key(payer_key))
        if kind == "eip3009":
            payload = create_batch_settlement_eip3009_deposit_payload(signer, requirements, sdk_config, 500_000, 1_000)
            auth3009 = payload.deposit.authorization.erc3009_authorization
            collector = ERC3009_DEPOSIT_COLLECTOR_ADDRESS
            data = build_erc3009_collector_data(
                auth3009.valid_after, auth3009.valid_before, auth3009.salt, auth3009.signature
            )
        else:
            payload = create_batch_settlement_permit2_deposit_payload(signer, requirements, sdk_config, 500_000, 1_000)
            auth2 = payload.deposit.authorization.permit2_authorization
            collector = PERMIT2_DEPOSIT_COLLECTOR_ADDRESS
            data = build_permit2_collector_data(auth2.nonce, auth2.deadline, auth2.signature)
        config = ChannelConfig(
            payer, ZERO_ADDRESS, receiver, authorizer, chain.usdc, DELAY, bytes.fromhex(sdk_config.salt[2:])
        )
        assert "0x" + channel_id(ChannelDomain(chain.chain_id), config).hex() == payload.voucher.channel_id
        await transact(
            chain.rpc,
            relayer_key,
            BATCH_SETTLEMENT_ADDRESS,
            deposit_calldata(config, 500_000, collector, data),
            gas=GAS,
        )
        assert (await read_channel(chain.rpc, bytes.fromhex(payload.voucher.channel_id[2:]))).balance == 500_000
        configs.append((config, sdk_config, payload.voucher))

    # The SDK's vouchers, claimed in one batch the SDK's authorizer signer signed.
    rows = [VoucherClaim(c, int(v.max_claimable_amount), bytes.fromhex(v.signature[2:]), 800) for c, _, v in configs]
    sdk_rows = [
        SdkClaim(channel=s, max_claimable_amount=v.max_claimable_amount, signature=v.signature, total_claimed="800")
        for _, s, v in configs
    ]
    batch = sign_claim_batch(LocalAuthorizerSigner(Account.from_key(receiver_keys[1])), sdk_rows, network)
    await transact(
        chain.rpc,
        relayer_key,
        BATCH_SETTLEMENT_ADDRESS,
        claim_with_signature_calldata(rows, bytes.fromhex(batch[2:])),
        gas=GAS,
    )
    for _config, _, voucher in configs:
        assert (await read_channel(chain.rpc, bytes.fromhex(voucher.channel_id[2:]))).total_claimed == 800
    # The SDK authorizer's refund at the channel's nonce.
    config, _, voucher = configs[0]
    refund = sign_refund(
        LocalAuthorizerSigner(Account.from_key(receiver_keys[1])), voucher.channel_id, 100_000, 0, network
    )
    data = refund_with_signature_calldata(config, 100_000, 0, bytes.fromhex(refund[2:]))
    await transact(chain.rpc, relayer_key, BATCH_SETTLEMENT_ADDRESS, data, gas=GAS)
    assert await read_channel(chain.rpc, bytes.fromhex(voucher.channel_id[2:])) == ChannelSnapshot(
        400_000, 800, 0, 0, 1
    )
