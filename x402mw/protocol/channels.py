"""Wire models of the x402 ``batch-settlement`` scheme on EVM (payment channels): the payment payload
of each ``type`` (``deposit``, ``voucher``, ``refund``), the channel's configuration as the wire
carries it, and the scheme's reason codes, spelled as the specification spells them
(``specs/schemes/batch-settlement/scheme_batch_settlement_evm.md``).

Amounts are decimal strings of atomic units on the wire and ``int`` here; addresses and the
32-byte values (salt, channel id, signatures) stay 0x hex strings, checked for shape.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_serializer, field_validator, model_validator

from x402mw.protocol.models import X402_VERSION, PaymentRequirements, ResourceInfo, WireModel, _atomic, _uint256

SCHEME = "batch-settlement"

_PREFIX = "invalid_batch_settlement_evm_"
AUTHORIZER_MISMATCH = _PREFIX + "receiver_authorizer_mismatch"
CHANNEL_BUSY = _PREFIX + "channel_busy"
CHANNEL_ID_MISMATCH = _PREFIX + "channel_id_mismatch"
CHANNEL_NOT_FOUND = _PREFIX + "channel_not_found"
CHANNEL_STATE_READ_FAILED = _PREFIX + "channel_state_read_failed"
CHARGE_EXCEEDS_SIGNED = _PREFIX + "charge_exceeds_signed_cumulative"
CLAIM_PAYLOAD = _PREFIX + "claim_payload"
CUMULATIVE_MISMATCH = _PREFIX + "cumulative_amount_mismatch"
CUMULATIVE_BELOW_CLAIMED = _PREFIX + "cumulative_below_claimed"
CUMULATIVE_EXCEEDS_BALANCE = _PREFIX + "cumulative_exceeds_balance"
DEPOSIT_PAYLOAD = _PREFIX + "deposit_payload"
DEPOSIT_SIMULATION_FAILED = _PREFIX + "deposit_simulation_failed"
DEPOSIT_TRANSACTION_FAILED = _PREFIX + "deposit_transaction_failed"
INSUFFICIENT_BALANCE = _PREFIX + "insufficient_balance"
MISSING_CHANNEL = _PREFIX + "missing_channel"
NETWORK_MISMATCH = _PREFIX + "network_mismatch"
VALID_AFTER = _PREFIX + "payload_authorization_valid_after"
VALID_BEFORE = _PREFIX + "payload_authorization_valid_before"
PAYLOAD_TYPE = _PREFIX + "payload_type"
PERMIT2_DEADLINE_EXPIRED = _PREFIX + "permit2_deadline_expired"
RECEIVE_AUTHORIZATION_SIGNATURE = _PREFIX + "receive_authorization_signature"
RECEIVER_MISMATCH = _PREFIX + "receiver_mismatch"
REFUND_AMOUNT_INVALID = _PREFIX + "refund_amount_invalid"
REFUND_NO_BALANCE = _PREFIX + "refund_no_balance"
REFUND_PAYLOAD = _PREFIX + "refund_payload"
REFUND_TRANSACTION_FAILED = _PREFIX + "refund_transaction_failed"
RPC_READ_FAILED = _PREFIX + "rpc_read_failed"
INVALID_SCHEME = _PREFIX + "scheme"
SETTLE_PAYLOAD = _PREFIX + "settle_payload"
NOTHING_TO_SETTLE = _PREFIX + "nothing_to_settle"
TOKEN_MISMATCH = _PREFIX + "token_mismatch"
TRANSACTION_REVERTED = _PREFIX + "transaction_reverted"
VOUCHER_PAYLOAD = _PREFIX + "voucher_payload"
VOUCHER_SIGNATURE = _PREFIX + "voucher_signature"
WITHDRAW_DELAY_MISMATCH = _PREFIX + "withdraw_delay_mismatch"
WITHDRAW_DELAY_OUT_OF_RANGE = _PREFIX + "withdraw_delay_out_of_range"
DEPOSIT_REUSED = _PREFIX + "deposit_authorization_used"
"""(Ours: the deposit's authorization was submitted before, for this or another payment.)"""
DEPOSIT_BELOW_MINIMUM = _PREFIX + "deposit_below_minimum"
"""(Ours: a first deposit below the endpoint's ``minDeposit``.)"""


def _hex(value: object, size: int | None, what: str) -> str:
    if not isinstance(value, str) or value[:2] not in ("0x", "0X"):
        raise ValueError(f"{what} must be 0x hex")
    body = value[2:]
    if (size is not None and len(body) != size * 2) or len(body) % 2 or len(body) > 4096:
        raise ValueError(f"{what} must be 0x and {size or 'whole'} bytes of hex")
    try:
        bytes.fromhex(body)
    except ValueError:
        raise ValueError(f"{what} must be 0x hex") from None
    return "0x" + body.lower()


class ChannelConfigWire(WireModel):
    """``ChannelConfig`` as the wire carries it."""

    payer: str
    payer_authorizer: str = Field(alias="payerAuthorizer")
    receiver: str
    receiver_authorizer: str = Field(alias="receiverAuthorizer")
    token: str
    withdraw_delay: int = Field(alias="withdrawDelay")
    salt: str

    @field_validator("payer", "payer_authorizer", "receiver", "receiver_authorizer", "token")
    @classmethod
    def _address(cls, value: str) -> str:
        _hex(value, 20, "an address")
        return value

    @field_validator("withdraw_delay", mode="before")
    @classmethod
    def _delay(cls, value: object) -> int:
        result = _atomic(value)
        if result >= 2**40:
            raise ValueError("withdrawDelay is a uint40")
        return result

    @field_validator("salt")
    @classmethod
    def _salt(cls, value: str) -> str:
        return _hex(value, 32, "salt")


class VoucherWire(WireModel):
    channel_id: str = Field(alias="channelId")
    max_claimable_amount: int = Field(alias="maxClaimableAmount")
    signature: str

    _check_amount = field_validator("max_claimable_amount", mode="before")(lambda v: _atomic(v))

    @field_validator("channel_id")
    @classmethod
    def _channel(cls, value: str) -> str:
        return _hex(value, 32, "channelId")

    @field_validator("signature")
    @classmethod
    def _signature(cls, value: str) -> str:
        return _hex(value, None, "signature")

    @field_serializer("max_claimable_amount")
    def _amount_out(self, value: int) -> str:
        return str(value)


class Erc3009DepositAuthorization(WireModel):
    valid_after: int = Field(alias="validAfter")
    valid_before: int = Field(alias="validBefore")
    salt: int
    signature: str

    _check_times = field_validator("valid_after", "valid_before", mode="before")(lambda v: _atomic(v))
    _check_salt = field_validator("salt", mode="before")(lambda v: _uint256(v))

    @field_validator("signature")
    @classmethod
    def _signature(cls, value: str) -> str:
        return _hex(value, None, "signature")

    @field_serializer("valid_after", "valid_before")
    def _ints_out(self, value: int) -> str:
        return str(value)

    @field_serializer("salt")
    def _salt_out(self, value: int) -> str:
        return "0x" + value.to_bytes(32, "big").hex()


class Permit2DepositAuthorization(WireModel):
    nonce: int
    deadline: int
    signature: str

    _check_nonce = field_validator("nonce", mode="before")(lambda v: _uint256(v))
    _check_deadline = field_validator("deadline", mode="before")(lambda v: _atomic(v))

    @field_validator("signature")
    @classmethod
    def _signature(cls, value: str) -> str:
        return _hex(value, None, "signature")

    @field_serializer("nonce", "deadline")
    def _ints_out(self, value: int) -> str:
        return str(value)


class DepositAuthorization(WireModel):
    erc3009_authorization: Erc3009DepositAuthorization | None = Field(default=None, alias="erc3009Authorization")
    permit2_authorization: Permit2DepositAuthorization | None = Field(default=None, alias="permit2Authorization")

    @model_validator(mode="after")
    def _one(self) -> DepositAuthorization:
        if (self.erc3009_authorization is None) == (self.permit2_authorization is None):
            raise ValueError("exactly one of erc3009Authorization and permit2Authorization is required")
        return self


class DepositWire(WireModel):
    amount: int
    authorization: DepositAuthorization

    _check_amount = field_validator("amount", mode="before")(lambda v: _atomic(v))

    @field_serializer("amount")
    def _amount_out(self, value: int) -> str:
        return str(value)


class ChannelPayload(WireModel):
    """The ``payload`` of a batch-settlement payment: a ``deposit`` (with its token authorization and
    the first voucher), a ``voucher``, or a ``refund`` request (a zero-charge voucher and an
    optional ``amount``; none: all that is left)."""

    type: Literal["deposit", "voucher", "refund"]
    channel_config: ChannelConfigWire = Field(alias="channelConfig")
    voucher: VoucherWire
    deposit: DepositWire | None = None
    amount: int | None = None

    _check_amount = field_validator("amount", mode="before")(lambda v: None if v is None else _atomic(v))

    @field_serializer("amount")
    def _amount_out(self, value: int | None) -> str | None:
        return None if value is None else str(value)

    @model_validator(mode="after")
    def _deposit_iff(self) -> ChannelPayload:
        if (self.type == "deposit") != (self.deposit is not None):
            raise ValueError("a deposit payload, and only one, carries 'deposit'")
        return self


class ChannelPaymentPayload(WireModel):
    """The body of ``PAYMENT-SIGNATURE`` for the ``batch-settlement`` scheme; x402 v2 only."""

    x402_version: int = Field(default=X402_VERSION, alias="x402Version")
    resource: ResourceInfo | None = None
    accepted: PaymentRequirements
    payload: ChannelPayload
    extensions: dict[str, Any] | None = None


def is_channel_payload(data: object) -> bool:
    """Whether a decoded ``PAYMENT-SIGNATURE`` object is a batch-settlement payment (its ``payload``
    names a ``channelConfig``)."""
    if not isinstance(data, dict):
        return False
    inner = data.get("payload")
    return isinstance(inner, dict) and "channelConfig" in inner


def channel_state(
    channel_id: str,
    *,
    balance: int,
    total_claimed: int,
    withdraw_requested_at: int,
    refund_nonce: int,
    charged: int | None,
) -> dict[str, Any]:
    """``extra.channelState`` as the specification writes it."""
    state: dict[str, Any] = {
        "channelId": channel_id,
        "balance": str(balance),
        "totalClaimed": str(total_claimed),
        "withdrawRequestedAt": withdraw_requested_at,
        "refundNonce": str(refund_nonce),
    }
    if charged is not None:
        state["chargedCumulativeAmount"] = str(charged)
    return state


class ClaimVoucherWire(WireModel):
    channel: ChannelConfigWire
    max_claimable_amount: int = Field(alias="maxClaimableAmount")

    _check_amount = field_validator("max_claimable_amount", mode="before")(lambda v: _atomic(v))

    @field_serializer("max_claimable_amount")
    def _amount_out(self, value: int) -> str:
        return str(value)


class ClaimRowWire(WireModel):
    """One row of a server-authored claim: a voucher and the cumulative total to claim with it."""

    voucher: ClaimVoucherWire
    signature: str
    total_claimed: int = Field(alias="totalClaimed")

    _check_amount = field_validator("total_claimed", mode="before")(lambda v: _atomic(v))

    @field_validator("signature")
    @classmethod
    def _signature(cls, value: str) -> str:
        return _hex(value, None, "signature")

    @field_serializer("total_claimed")
    def _amount_out(self, value: int) -> str:
        return str(value)


class ClaimPayload(WireModel):
    """``{"type": "claim"}``: claim these vouchers (signed by the receiver authorizer, or by us)."""

    type: Literal["claim"]
    claims: list[ClaimRowWire] = Field(min_length=1, max_length=1000)
    claim_authorizer_signature: str | None = Field(default=None, alias="claimAuthorizerSignature")


class SettlePayload(WireModel):
    """``{"type": "settle"}``: pay the receiver what was claimed in ``token``."""

    type: Literal["settle"]
    receiver: str
    token: str

    @field_validator("receiver", "token")
    @classmethod
    def _address(cls, value: str) -> str:
        _hex(value, 20, "an address")
        return value


class RefundSettlePayload(WireModel):
    """``{"type": "refund"}`` as the server completed it for the facilitator."""

    type: Literal["refund"]
    channel_config: ChannelConfigWire = Field(alias="channelConfig")
    voucher: VoucherWire
    amount: int | None = None
    refund_nonce: int | None = Field(default=None, alias="refundNonce")
    claims: list[ClaimRowWire] = Field(default_factory=list, max_length=1)
    refund_authorizer_signature: str | None = Field(default=None, alias="refundAuthorizerSignature")
    claim_authorizer_signature: str | None = Field(default=None, alias="claimAuthorizerSignature")

    _check_amount = field_validator("amount", "refund_nonce", mode="before")(
        lambda v: None if v is None else _atomic(v)
    )
