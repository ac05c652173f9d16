"""The batch-settlement EIP-712 digests of x402mw.evm.batch_settlement and the escrow's calldata of
x402mw.platform.chain.channels, against the x402 Foundation SDK (``x402`` 2.25.0): its addresses,
EIP-712 types and domain, its collector-data encoders and its escrow ABI; and the compiled escrow's
ABI against both."""

from __future__ import annotations

import os
from typing import Any

import pytest
from eth_account import Account
from eth_account.messages import encode_typed_data
from x402.mechanisms.evm.batch_settlement import abi as sdk_abi
from x402.mechanisms.evm.batch_settlement import constants as sdk
from x402.mechanisms.evm.batch_settlement import encoding as sdk_encoding
from x402.mechanisms.evm.batch_settlement.authorizer_signer import LocalAuthorizerSigner, sign_claim_batch, sign_refund
from x402.mechanisms.evm.batch_settlement.types import ChannelConfig as SdkChannelConfig
from x402.mechanisms.evm.batch_settlement.types import VoucherClaim as SdkVoucherClaim
from x402.mechanisms.evm.batch_settlement.utils import compute_channel_id

from x402mw.evm.batch_settlement import (
    BATCH_SETTLEMENT_ADDRESS,
    CHANNEL_CONFIG_TYPEHASH,
    DEPOSIT_WITNESS_TYPE_STRING,
    ERC3009_DEPOSIT_COLLECTOR_ADDRESS,
    MAX_WITHDRAW_DELAY,
    MIN_WITHDRAW_DELAY,
    PERMIT2_DEPOSIT_COLLECTOR_ADDRESS,
    ZERO_ADDRESS,
    ChannelConfig,
    ChannelDomain,
    VoucherClaim,
    channel_id,
    claim_batch_digest,
    erc3009_deposit_nonce,
    permit2_deposit_digest,
    refund_digest,
    voucher_digest,
)
from x402mw.evm.eip712 import recover_digest_signer, sign_digest
from x402mw.evm.keccak import keccak256
from x402mw.evm.keys import address_of, new_private_key
from x402mw.evm.permit2 import PERMIT2_ADDRESS
from x402mw.platform.chain.channels import (
    EVENTS,
    claim_calldata,
    claim_with_signature_calldata,
    deposit_calldata,
    eip2612_permit_data,
    erc3009_collector_data,
    finalize_withdraw_calldata,
    initiate_withdraw_calldata,
    multicall_calldata,
    permit2_collector_data,
    refund_calldata,
    refund_with_signature_calldata,
    settle_calldata,
)
from x402mw.platform.chain.contracts import load_artifact

CHAIN_ID = 84532


def _config(**changes: Any) -> ChannelConfig:
    fields: dict[str, Any] = {
        "payer": address_of(new_private_key()),
        "payer_authorizer": address_of(new_private_key()),
        "receiver": address_of(new_private_key()),
        "receiver_authorizer": address_of(new_private_key()),
        "token": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
        "withdraw_delay": 3600,
        "salt": os.urandom(32),
    }
    return ChannelConfig(**{**fields, **changes})


def _sdk_config(config: ChannelConfig) -> SdkChannelConfig:
    return SdkChannelConfig(
        payer=config.payer,
        payer_authorizer=config.payer_authorizer,
        receiver=config.receiver,
        receiver_authorizer=config.receiver_authorizer,
        token=config.token,
        withdraw_delay=config.withdraw_delay,
        salt="0x" + config.salt.hex(),
    )


def _sdk_digest(types: dict[str, Any], message: dict[str, Any]) -> bytes:
    domain = {
        "name": sdk.BATCH_SETTLEMENT_DOMAIN_NAME,
        "version": sdk.BATCH_SETTLEMENT_DOMAIN_VERSION,
        "chainId": CHAIN_ID,
        "verifyingContract": sdk.BATCH_SETTLEMENT_ADDRESS,
    }
    signable = encode_typed_data(domain_data=domain, message_types=types, message_data=message)
    return keccak256(b"\x19" + signable.version + signable.header + signable.body)


def test_the_addresses_bounds_and_type_hashes_are_the_sdks() -> None:
    assert BATCH_SETTLEMENT_ADDRESS == sdk.BATCH_SETTLEMENT_ADDRESS
    assert ERC3009_DEPOSIT_COLLECTOR_ADDRESS == sdk.ERC3009_DEPOSIT_COLLECTOR_ADDRESS
    assert PERMIT2_DEPOSIT_COLLECTOR_ADDRESS == sdk.PERMIT2_DEPOSIT_COLLECTOR_ADDRESS
    assert (MIN_WITHDRAW_DELAY, MAX_WITHDRAW_DELAY) == (sdk.MIN_WITHDRAW_DELAY, sdk.MAX_WITHDRAW_DELAY)
    assert CHANNEL_CONFIG_TYPEHASH == sdk.CHANNEL_CONFIG_TYPEHASH


@pytest.mark.parametrize("payer_authorizer", ["key", "zero"])
def test_a_channel_id_is_the_sdks(payer_authorizer: str) -> None:
    config = _config(payer_authorizer=ZERO_ADDRESS) if payer_authorizer == "zero" else _config()
    ours = channel_id(ChannelDomain(CHAIN_ID), config)
    assert "0x" + ours.hex() == compute_channel_id(_sdk_config(config), CHAIN_ID)
    assert "0x" + ours.hex() == compute_channel_id(_sdk_config(config), f"eip155:{CHAIN_ID}")
    # Bound to the chain and to the escrow's address.
    assert channel_id(ChannelDomain(CHAIN_ID + 1), config) != ours
    assert channel_id(ChannelDomain(CHAIN_ID, "0x" + "01" * 20), config) != ours


def test_a_voucher_digest_is_the_sdks_and_its_signature_recovers() -> None:
    domain = ChannelDomain(CHAIN_ID)
    key = new_private_key()
    channel = channel_id(domain, _config(payer_authorizer=address_of(key)))
    digest = voucher_digest(domain, channel, 123_456)
    assert digest == _sdk_digest(sdk.VOUCHER_TYPES, {"channelId": channel, "maxClaimableAmount": 123_456})
    # eth-account signing the SDK's typed data and our sign_digest of our digest name the same key.
    theirs = Account.sign_typed_data(
        key,
        {
            "name": "x402 Batch Settlement",
            "version": "1",
            "chainId": CHAIN_ID,
            "verifyingContract": sdk.BATCH_SETTLEMENT_ADDRESS,
        },
        sdk.VOUCHER_TYPES,
        {"channelId": channel, "maxClaimableAmount": 123_456},
    )
    assert recover_digest_signer(digest, bytes(theirs.signature)) == address_of(key)
    assert recover_digest_signer(digest, sign_digest(key, digest)) == address_of(key)
    assert voucher_digest(domain, channel, 123_457) != digest
    with pytest.raises(ValueError, match="2\\*\\*128"):
        voucher_digest(domain, channel, 2**128)


def test_refund_and_claim_batch_digests_are_what_the_sdks_authorizer_signs() -> None:
    domain = ChannelDomain(CHAIN_ID)
    key = new_private_key()
    signer = LocalAuthorizerSigner(Account.from_key(key))
    channel = channel_id(domain, _config())
    refund = refund_digest(domain, channel, 7, 1_500)
    assert refund == _sdk_digest(sdk.REFUND_TYPES, {"channelId": channel, "nonce": 7, "amount": 1_500})
    sdk_refund = bytes.fromhex(sign_refund(signer, "0x" + channel.hex(), 1_500, 7, f"eip155:{CHAIN_ID}")[2:])
    assert recover_digest_signer(refund, sdk_refund) == address_of(key)

    configs = [_config(), _config(payer_authorizer=ZERO_ADDRESS), _config()]
    claims = [VoucherClaim(c, 5_000 + i, b"\x01" * 65, 4_000 + i) for i, c in enumerate(configs)]
    batch = claim_batch_digest(domain, claims)
    sdk_claims = [
        SdkVoucherClaim(
            channel=_sdk_config(c.config),
            max_claimable_amount=str(c.max_claimable_amount),
            signature="0x" + c.signature.hex(),
            total_claimed=str(c.total_claimed),
        )
        for c in claims
    ]
    signature = bytes.fromhex(sign_claim_batch(signer, sdk_claims, f"eip155:{CHAIN_ID}")[2:])
    assert recover_digest_signer(batch, signature) == address_of(key)
    # The order of the rows is signed.
    assert claim_batch_digest(domain, claims[::-1]) != batch


def test_deposit_authorizations_are_the_sdks() -> None:
    channel = channel_id(ChannelDomain(CHAIN_ID), _config())
    salt = int.from_bytes(os.urandom(32), "big")
    assert "0x" + erc3009_deposit_nonce(channel, salt).hex() == sdk_encoding.build_erc3009_deposit_nonce(
        "0x" + channel.hex(), hex(salt)
    )
    token = "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
    digest = permit2_deposit_digest(CHAIN_ID, token=token, amount=10**6, nonce=42, deadline=2**33, channel=channel)
    signable = encode_typed_data(
        domain_data={"name": "Permit2", "chainId": CHAIN_ID, "verifyingContract": PERMIT2_ADDRESS},
        message_types=sdk.BATCH_PERMIT2_WITNESS_TYPES,
        message_data={
            "permitted": {"token": token, "amount": 10**6},
            "spender": sdk.PERMIT2_DEPOSIT_COLLECTOR_ADDRESS,
            "nonce": 42,
            "deadline": 2**33,
            "witness": {"channelId": channel},
        },
    )
    assert digest == keccak256(b"\x19" + signable.version + signable.header + signable.body)
    # The type string the collector hands Permit2 is the SDK's types, in EIP-712's order.
    assert DEPOSIT_WITNESS_TYPE_STRING == (
        "DepositWitness witness)DepositWitness(bytes32 channelId)TokenPermissions(address token,uint256 amount)"
    )

    signature = os.urandom(65)
    assert erc3009_collector_data(0, 2**32, salt, signature) == sdk_encoding.build_erc3009_collector_data(
        "0", str(2**32), hex(salt), "0x" + signature.hex()
    )
    permit = eip2612_permit_data(10**6, 2**32, 27, b"\x02" * 32, b"\x03" * 32)
    assert permit == sdk_encoding.build_eip2612_permit_data(
        str(10**6), str(2**32), 27, "0x" + "02" * 32, "0x" + "03" * 32
    )
    assert permit2_collector_data(42, 2**33, signature, permit) == sdk_encoding.build_permit2_collector_data(
        "42", str(2**33), "0x" + signature.hex(), permit
    )
    assert permit2_collector_data(42, 2**33, signature) == sdk_encoding.build_permit2_collector_data(
        "42", str(2**33), "0x" + signature.hex()
    )


def _canonical_type(entry: dict[str, Any]) -> str:
    if entry["type"].startswith("tuple"):
        return "(" + ",".join(_canonical_type(c) for c in entry["components"]) + ")" + entry["type"][5:]
    return str(entry["type"])


def _signatures(abi: list[dict[str, Any]], kind: str) -> dict[str, str]:
    return {
        item["name"]: f"{item['name']}({','.join(_canonical_type(i) for i in item['inputs'])})"
        for item in abi
        if item.get("type") == kind
    }


def test_the_escrow_speaks_the_sdks_abi() -> None:
    ours = load_artifact("X402BatchSettlement")["abi"]
    our_functions = _signatures(ours, "function")
    for name, signature in _signatures(sdk_abi.BATCH_SETTLEMENT_ABI, "function").items():
        assert our_functions.get(name) == signature, name
    outputs = {item["name"]: [o["type"] for o in item["outputs"]] for item in ours if item["type"] == "function"}
    for item in sdk_abi.BATCH_SETTLEMENT_ABI:
        if item["type"] == "function":
            assert outputs[item["name"]] == [o["type"] for o in item["outputs"]], item["name"]
    assert _signatures(ours, "event")["Settled"] == _signatures(sdk_abi.BATCH_SETTLEMENT_ABI, "event")["Settled"]


def test_the_calldata_encoders_match_the_compiled_abi() -> None:
    functions = _signatures(load_artifact("X402BatchSettlement")["abi"], "function")
    config = _config()
    claims = [VoucherClaim(config, 10, b"\x01" * 65, 5)]
    encoded = {
        "deposit": deposit_calldata(config, 5, ERC3009_DEPOSIT_COLLECTOR_ADDRESS, b"data"),
        "claim": claim_calldata(claims),
        "claimWithSignature": claim_with_signature_calldata(claims, b"\x02" * 65),
        "settle": settle_calldata(config.receiver, config.token),
        "refund": refund_calldata(config, 5),
        "refundWithSignature": refund_with_signature_calldata(config, 5, 0, b"\x02" * 65),
        "initiateWithdraw": initiate_withdraw_calldata(config, 5),
        "finalizeWithdraw": finalize_withdraw_calldata(config),
        "multicall": multicall_calldata([settle_calldata(config.receiver, config.token)]),
    }
    for name, data in encoded.items():
        assert data[:4] == keccak256(functions[name].encode())[:4], name
    events = _signatures(load_artifact("X402BatchSettlement")["abi"], "event")
    assert set(events) == set(EVENTS)
    for name, topic in EVENTS.items():
        assert keccak256(events[name].encode()) == topic, name
