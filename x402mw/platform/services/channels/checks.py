"""A batch-settlement payload checked off-chain against an endpoint's channel terms: the
specification's verification rules 1-6 (the configuration hashes to the channel id; token, receiver,
receiver authorizer and withdraw delay are the terms'; the voucher is signed by the payer's
authorizer), with one signature recovery and no RPC call. A payer without an authorizer whose
signature does not recover to it is left for EIP-1271 (`VerifiedVoucher.needs_wallet_check`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from x402mw.evm.batch_settlement import (
    MAX_WITHDRAW_DELAY,
    MIN_WITHDRAW_DELAY,
    ZERO_ADDRESS,
    ChannelConfig,
    ChannelDomain,
    channel_id,
    voucher_digest,
)
from x402mw.evm.eip712 import InvalidSignatureError, recover_digest_signer
from x402mw.platform.services.chains import ChainHandle
from x402mw.protocol import channels as wire
from x402mw.protocol.models import PaymentRequirements

MAX_CHANNEL_AMOUNT = 10**18 - 1
"""The largest amount a channel of ours holds or a voucher names (what the database stores)."""


class ChannelRefusal(Exception):
    """A channel payment refused: ``reason`` is the scheme's error code; ``state``, for a cumulative
    mismatch, the channel and voucher state the corrective 402 carries."""

    def __init__(self, reason: str, message: str, state: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.state = state


@dataclass(frozen=True, slots=True)
class ChannelTerms:
    """What an endpoint's channels must be: on ``chain``, in ``token``, to one of its payout
    addresses, authorized by the merchant's ``receiver_authorizer``, with its ``withdraw_delay``."""

    chain: ChainHandle
    token: str
    currency: str
    payout_history: frozenset[str]  # lowercase
    receiver_authorizer: str
    withdraw_delay: int
    min_deposit: int
    domain: ChannelDomain


@dataclass(frozen=True, slots=True)
class VerifiedVoucher:
    config: ChannelConfig
    channel: bytes
    ceiling: int
    signature: bytes
    digest: bytes
    needs_wallet_check: bool  # the payer signs itself and the signature is not its key's: EIP-1271

    @property
    def id(self) -> str:
        return "0x" + self.channel.hex()


def _same(a: str, b: str) -> bool:
    return a.lower() == b.lower()


def check_requirements(terms: ChannelTerms, accepted: PaymentRequirements) -> None:
    """The accepted terms are this endpoint's channel offer."""
    if accepted.scheme != wire.SCHEME:
        raise ChannelRefusal(wire.INVALID_SCHEME, f"scheme {accepted.scheme!r} is not {wire.SCHEME}")
    if accepted.network != terms.chain.network.caip2:
        raise ChannelRefusal(wire.NETWORK_MISMATCH, "the payment is for another network than the endpoint's")
    if not _same(accepted.asset, terms.token):
        raise ChannelRefusal(wire.TOKEN_MISMATCH, "the payment is in another token than the endpoint's")
    if accepted.pay_to.lower() not in terms.payout_history:
        raise ChannelRefusal(wire.RECEIVER_MISMATCH, "payTo is not the endpoint's payout address")


def verify_voucher(terms: ChannelTerms, accepted: PaymentRequirements, payload: wire.ChannelPayload) -> VerifiedVoucher:
    """The payload's channel and voucher, checked; `ChannelRefusal` with the scheme's code otherwise."""
    check_requirements(terms, accepted)
    config_wire = payload.channel_config
    if not _same(config_wire.token, accepted.asset):
        raise ChannelRefusal(wire.TOKEN_MISMATCH, "the channel's token is not the payment's asset")
    if not _same(config_wire.receiver, accepted.pay_to):
        raise ChannelRefusal(wire.RECEIVER_MISMATCH, "the channel's receiver is not payTo")
    if not _same(config_wire.receiver_authorizer, terms.receiver_authorizer):
        raise ChannelRefusal(wire.AUTHORIZER_MISMATCH, "the channel's receiverAuthorizer is not the merchant's")
    if not MIN_WITHDRAW_DELAY <= config_wire.withdraw_delay <= MAX_WITHDRAW_DELAY:
        raise ChannelRefusal(wire.WITHDRAW_DELAY_OUT_OF_RANGE, "withdrawDelay is outside 15 minutes to 30 days")
    if config_wire.withdraw_delay != terms.withdraw_delay:
        raise ChannelRefusal(wire.WITHDRAW_DELAY_MISMATCH, "the channel's withdrawDelay is not the endpoint's")
    config = ChannelConfig(
        config_wire.payer,
        config_wire.payer_authorizer,
        config_wire.receiver,
        config_wire.receiver_authorizer,
        config_wire.token,
        config_wire.withdraw_delay,
        bytes.fromhex(config_wire.salt[2:]),
    )
    channel = channel_id(terms.domain, config)
    voucher = payload.voucher
    if "0x" + channel.hex() != voucher.channel_id:
        raise ChannelRefusal(
            wire.CHANNEL_ID_MISMATCH, "the channel configuration does not hash to the voucher's channelId"
        )
    ceiling = voucher.max_claimable_amount
    if ceiling > MAX_CHANNEL_AMOUNT:
        raise ChannelRefusal(wire.CUMULATIVE_EXCEEDS_BALANCE, "the voucher's maxClaimableAmount is out of range")
    signature = bytes.fromhex(voucher.signature[2:])
    digest = voucher_digest(terms.domain, channel, ceiling)
    try:
        signer: str | None = recover_digest_signer(digest, signature)
    except (ValueError, InvalidSignatureError):
        signer = None
    wallet = False
    if not _same(config.payer_authorizer, ZERO_ADDRESS):
        if signer is None or not _same(signer, config.payer_authorizer):
            raise ChannelRefusal(wire.VOUCHER_SIGNATURE, "the voucher is not signed by the channel's payerAuthorizer")
    elif signer is None or not _same(signer, config.payer):
        wallet = True  # perhaps a smart account's (EIP-1271): asked of the chain
    return VerifiedVoucher(config, channel, ceiling, signature, digest, wallet)
