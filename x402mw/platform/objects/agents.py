"""The agent-payment objects of the API: endpoints, challenges, payments, usage, and the answers of
settlement and of the x402 facilitator."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, PlainSerializer, RootModel

from x402mw.platform.objects.base import (
    Envelope,
    EvmAddress,
    ListPage,
    Minor,
    Money,
    ResponseModel,
    Timestamp,
    omitted_if_none,
)
from x402mw.protocol.models import SettlementResponse


class AgentEndpointChannel(ResponseModel):
    """The payment channels (`batch-settlement`) an endpoint offers."""

    receiver_authorizer: EvmAddress = Field(description="the merchant's key that signs claims and refunds")
    min_deposit_minor: Minor | None = Field(description="the least a first deposit may be")
    withdraw_delay_seconds: int = Field(description="the channels' timed withdrawal delay")
    only: bool = Field(description="channels are offered alone")
    idle_refund_seconds: int | None = Field(description="what is left in a channel idle this long is refunded")


class AgentEndpoint(ResponseModel):
    """A resource the merchant sells to agents per request."""

    id: str
    object: Literal["agent_endpoint"] = "agent_endpoint"
    name: str
    resource_url: str
    chain_id: int
    network: str = Field(description="`eip155:<chainId>`")
    currency: Literal["USDC", "EURC"]
    asset: EvmAddress | None
    asset_name: str | None = Field(description="the token's EIP-712 domain name")
    asset_version: str | None = Field(description="the token's EIP-712 domain version")
    decimals: int
    payout_address: EvmAddress
    pricing_mode: Literal["fixed", "dynamic", "metered"]
    amount_minor: Minor | None
    max_amount_minor: Minor | None = Field(
        default=None, description="metered endpoints: the most one request may be charged (the `upto` ceiling)"
    )
    facilitator_address: EvmAddress | None = Field(
        default=None, description="metered endpoints: the address that settles, named in what agents sign"
    )
    release_policy: Literal["included", "confirmed"]
    max_timeout_seconds: int
    discoverable: bool = Field(
        description="listed in the public discovery catalogue (`GET /x402/discovery/resources`) once settled for"
    )
    channel: AgentEndpointChannel | None = Field(
        default=None, description="the payment channels (`batch-settlement`) offered; null: none"
    )
    livemode: bool
    created_at: Timestamp
    updated_at: Timestamp


class AgentEndpointEnvelope(Envelope):
    """An agent endpoint, as its operations answer it."""

    endpoint: AgentEndpoint


class AgentEndpointList(ListPage[AgentEndpoint]):
    """A page of AgentEndpoint objects, newest first."""


class Receipt(RootModel[dict[str, str]]):
    """Settlement receipt signed with EIP-191 by the receipt key (`signer`, `signature`, and the
    signed fields); verify it with `x402mw.evm.receipts.verify_receipt`."""


class AgentPayment(ResponseModel):
    """One EIP-3009 authorization settled (or refused) by the platform."""

    id: str
    object: Literal["agent_payment"] = "agent_payment"
    status: Literal["held", "authorized", "claimed", "submitted", "settled", "failed"]
    scheme: Literal["exact", "upto"] = "exact"
    max_amount_minor: Minor | None = Field(default=None, description="upto: the ceiling the payer signed")
    challenge_id: str | None
    endpoint_id: str | None
    network: str
    asset: EvmAddress
    currency: str
    amount_minor: Minor
    payer: EvmAddress
    pay_to: EvmAddress
    transaction: str | None
    block_number: int | None
    error_reason: str | None = Field(description="x402 reason code of a failed payment")
    receipt: Receipt | None
    livemode: bool
    created_at: Timestamp
    settled_at: Timestamp | None


class AgentPaymentEnvelope(Envelope):
    """An agent payment: the answer of its operation, and the data of ``agent_payment.settled``."""

    agent_payment: AgentPayment


class AgentPaymentList(ListPage[AgentPayment]):
    """A page of AgentPayment objects, newest first."""


class AgentChallenge(ResponseModel):
    """A challenge issued by the seller middleware, with the payment that answered it."""

    challenge_id: str
    object: Literal["agent_challenge"] = "agent_challenge"
    status: Literal["open", "expired", "processing", "settled", "failed"]
    endpoint_id: str
    network: str
    asset: EvmAddress
    pay_to: EvmAddress
    amount_minor: Minor
    resource: str
    expires_at: Timestamp
    created_at: Timestamp
    livemode: bool
    payment: AgentPayment | None


class AgentChallengeEnvelope(Envelope):
    """A challenge, as its operations answer it."""

    challenge: AgentChallenge


class AgentUsage(ResponseModel):
    """Settlements of one month and the planned fee (first 1,000 free)."""

    object: Literal["agent_usage"] = "agent_usage"
    month: str = Field(pattern="^[0-9]{4}-[0-9]{2}$")
    livemode: bool
    settlements: int
    free_settlements: int
    volume: dict[str, Money] = Field(description="settled amount per coin")
    planned_fee: dict[str, Money] = Field(description="fee per coin")
    billed: bool = Field(description="always false during the beta")


class AgentUsageEnvelope(Envelope):
    """Monthly usage, as its operation answers it."""

    usage: AgentUsage


# x402's own wire form, nulls left out (no return type on the serializer: the document describes
# the model itself)
WireSettlement = Annotated[SettlementResponse, PlainSerializer(lambda response: response.to_wire())]


class SettlementResult(ResponseModel):
    """The outcome of one paid request; `settlement` goes into `PAYMENT-RESPONSE`.

    The terms the seller sent (`accepted`) are not echoed back: the seller knows them. (Earlier
    answers carried `accepted.payTo`. Dropping it keeps old sellers working: every seller version
    reads a settlement's payee from its receipt's `payTo` first, which a settled answer always
    carries, and used the echo only in its absence.)"""

    status: Literal["settled", "pending", "failed", "held", "authorized"] = Field(
        description="`held`: a paid tool's payment verified and claimed before the tool runs, captured or "
        "released after it; `authorized`: an `upto` payment verified and held for the request, to be settled "
        "for its usage; either is settled with `POST /agent/settlements/{paymentId}/capture`"
    )
    settlement: WireSettlement
    message: str | None = omitted_if_none()
    payment_id: str | None = omitted_if_none()


class SettlementRelease(ResponseModel):
    """A held payment given up (its tool failed): nothing was taken, and its authorization may be
    used again."""

    object: Literal["settlement_release"] = "settlement_release"
    payment_id: str
    status: Literal["released"] = "released"


class ChallengeBatchResult(ResponseModel):
    """How many issued challenges a batch carried."""

    object: Literal["challenge_batch"] = "challenge_batch"
    received: int


class SupportedToken(ResponseModel):
    """A token the facilitator settles on a network: what a seller puts in its ``accepts`` entry
    (``asset``, and ``extra.name`` and ``extra.version``, the token's EIP-712 domain)."""

    symbol: str
    address: EvmAddress
    decimals: int
    name: str
    version: str


class SupportedKindExtra(ResponseModel):
    tokens: list[SupportedToken]
    facilitator_address: EvmAddress | None = omitted_if_none(
        description="upto: the address that alone may settle what payers sign (the witness's facilitator)"
    )
    receiver_authorizer: EvmAddress | None = omitted_if_none(
        description="batch-settlement: the caller's receiver authorizer, which signs claims and refunds for "
        "channels that name it (given to a caller presenting its API key)"
    )


class SupportedKind(ResponseModel):
    """A payment kind the facilitator settles; ``extra.tokens`` names the network's tokens, for
    sellers on a network their SDK does not know (the dev chain, a local node)."""

    x402_version: int
    scheme: str
    network: str
    extra: SupportedKindExtra


class SupportedKinds(ResponseModel):
    """What the facilitator settles, and the addresses that send its transactions."""

    kinds: list[SupportedKind]
    extensions: list[str]
    signers: dict[str, list[EvmAddress]]


class DiscoveredResource(ResponseModel):
    """A resource in the discovery catalogue, in the Bazaar extension's shape."""

    resource: str = Field(description="URL of the paid resource")
    type: Literal["http", "mcp"]
    x402_version: int
    accepts: list[dict[str, Any]] = Field(description="the payment terms offered (advisory: the live 402 decides)")
    last_updated: str = Field(description="when it was last settled for (RFC 3339)")
    description: str | None = omitted_if_none()
    mime_type: str | None = omitted_if_none()
    extensions: dict[str, Any] | None = omitted_if_none(description="`bazaar`: what the resource takes and gives")


class DiscoveryPagination(ResponseModel):
    limit: int
    offset: int
    total: int


class DiscoveryList(ResponseModel):
    """A page of the discovery catalogue, newest first."""

    x402_version: int
    items: list[DiscoveredResource]
    pagination: DiscoveryPagination


class SearchPagination(ResponseModel):
    limit: int
    cursor: str | None = Field(description="pass as `cursor` for the next page; null on the last")


class DiscoverySearch(ResponseModel):
    """Resources of the discovery catalogue matching every word of a query, best first: words found
    in the URL or name before words found only in the description, then the most settled for lately
    (a count that halves every week), then the newest."""

    x402_version: int
    resources: list[DiscoveredResource]
    partial_results: bool = Field(description="more matches follow (see `pagination.cursor`)")
    pagination: SearchPagination


class SignInResult(ResponseModel):
    """Whether a sign-in-with-x message lets its signer back in: ``payment`` when it does,
    ``reason`` and ``message`` when it does not."""

    signed_in: bool
    payment: AgentPayment | None = omitted_if_none()
    reason: str | None = omitted_if_none(
        description="`invalid_siwx_signature`, `invalid_siwx_nonce`, `siwx_payment_not_found` or "
        "`invalid_siwx_expired` (valid for more than an hour from now)"
    )
    message: str | None = omitted_if_none()
