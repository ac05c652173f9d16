"""The payment-channel objects of the API (the x402 ``batch-settlement`` scheme)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from x402mw.platform.objects.base import Envelope, EvmAddress, ListPage, Minor, ResponseModel, Timestamp


class ChannelWithdrawal(ResponseModel):
    """A timed withdrawal the payer began: the worker claims the channel's vouchers before it can finish."""

    amount_minor: Minor
    requested_at: int = Field(description="Unix time (seconds) the payer began it")
    finishes_at: int = Field(description="Unix time (seconds) from which the payer may finish it")


class AgentChannel(ResponseModel):
    """A payment channel paying one of the merchant's endpoints. Two truths kept apart: what the
    requests were charged off-chain (`chargedMinor`, the payer's vouchers) and what the chain moved
    (`claimedMinor` into the receiver's claims, `settledMinor` paid out to it, `refundedMinor` back
    to the payer). Every unit charged is settled in the end, or was never claimable."""

    id: str = Field(description="the channel id (0x, 32 bytes)")
    object: Literal["agent_channel"] = "agent_channel"
    endpoint_id: str
    network: str
    currency: Literal["USDC", "EURC"]
    asset: EvmAddress
    payer: EvmAddress
    payer_authorizer: EvmAddress
    receiver: EvmAddress
    receiver_authorizer: EvmAddress
    withdraw_delay_seconds: int
    deposited_minor: Minor = Field(description="deposits this platform submitted into the channel")
    balance_minor: Minor = Field(
        description="what the escrow holds for the channel (deposits less refunds and withdrawals), as last read"
    )
    charged_minor: Minor = Field(description="off-chain: what the requests were charged (the cumulative voucher total)")
    signed_max_minor: Minor = Field(description="the latest voucher's ceiling")
    claimed_minor: Minor = Field(description="on-chain: what claims moved into the receiver's claimed total")
    settled_minor: Minor = Field(description="on-chain: what settles paid out to the receiver")
    refunded_minor: Minor = Field(description="on-chain: what cooperative refunds returned to the payer")
    unclaimed_minor: Minor = Field(description="charged and not claimed yet (the worker claims it)")
    pending_withdrawal: ChannelWithdrawal | None = Field(description="a timed withdrawal under way, or null")
    last_request_at: Timestamp
    livemode: bool
    created_at: Timestamp
    updated_at: Timestamp


class AgentChannelEnvelope(Envelope):
    """A payment channel, as its operations answer it."""

    channel: AgentChannel


class AgentChannelList(ListPage[AgentChannel]):
    """A page of AgentChannel objects, newest first."""
