"""The platform's tables.

Money is ``BigInteger`` minor units (USDC and EURC have 6 decimals); ids are bare UUID strings;
times are timezone-aware UTC ``datetime`` values. Every merchant-owned row carries ``merchant_id``
and ``livemode``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Float,
    Index,
    Integer,
    LargeBinary,
    String,
    UniqueConstraint,
    false,
    true,
)
from sqlmodel import Field, SQLModel

from x402mw.platform.db.types import UtcDateTime


def new_id() -> str:
    return str(uuid4())


def utcnow() -> datetime:
    return datetime.now(UTC)


class Merchant(SQLModel, table=True):
    __tablename__ = "merchants"
    id: str = Field(default_factory=new_id, primary_key=True, max_length=36)
    name: str = Field(max_length=200)
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))


class ApiKey(SQLModel, table=True):
    __tablename__ = "api_keys"
    id: str = Field(default_factory=new_id, primary_key=True, max_length=36)
    merchant_id: str = Field(foreign_key="merchants.id", index=True, max_length=36)
    key_hash: str = Field(max_length=64, unique=True)
    prefix: str = Field(max_length=24)
    livemode: bool = False
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))
    revoked_at: datetime | None = Field(default=None, sa_column=Column(UtcDateTime(), nullable=True))
    # when a request last authenticated with the key, to the minute (KEY_USE_PRECISION)
    last_used_at: datetime | None = Field(default=None, sa_column=Column(UtcDateTime(), nullable=True))


class ApiKeyRevision(SQLModel, table=True):
    """One row (``id`` 1): bumped in the transaction of every revocation, so that a process caching
    key lookups sees the change (`x402mw.platform.services.key_cache`)."""

    __tablename__ = "api_key_revisions"
    id: int = Field(sa_column=Column(Integer, primary_key=True, autoincrement=False))
    revision: int = Field(sa_column=Column(BigInteger, nullable=False))


class AgentEndpoint(SQLModel, table=True):
    __tablename__ = "agent_endpoints"
    id: str = Field(default_factory=new_id, primary_key=True, max_length=36)
    merchant_id: str = Field(foreign_key="merchants.id", max_length=36)
    livemode: bool = False
    name: str = Field(max_length=200)
    resource_url: str = Field(max_length=2048)
    chain_id: int = Field(sa_column=Column(BigInteger, nullable=False))
    currency: str = Field(max_length=8)
    payout_address: str = Field(max_length=42)
    payout_history: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    pricing_mode: str = Field(max_length=16)
    amount_minor: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    release_policy: str = Field(default="included", max_length=16)
    max_timeout_seconds: int = 300
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))
    updated_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))
    # Listed in the public discovery catalogue once settled for (the merchant's choice).
    discoverable: bool = Field(default=False, sa_column=Column(Boolean, nullable=False, server_default=false()))
    # Payment channels (batch-settlement) offered beside the endpoint's scheme, or alone; None: not offered.
    channel_min_deposit: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    channel_withdraw_delay: int | None = Field(default=None, sa_column=Column(Integer, nullable=True))
    channel_only: bool = Field(default=False, sa_column=Column(Boolean, nullable=False, server_default=false()))
    channel_idle_refund_seconds: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    channel_receiver_authorizer: str | None = Field(default=None, max_length=42)  # the merchant's, when offered

    __table_args__ = (Index("ix_agent_endpoints_merchant_created", "merchant_id", "created_at"),)


class AgentChallenge(SQLModel, table=True):
    """A challenge a seller's middleware issued. Registered in background batches, or at settlement."""

    __tablename__ = "agent_challenges"
    id: str = Field(primary_key=True, max_length=64)
    merchant_id: str = Field(foreign_key="merchants.id", max_length=36, index=True)
    endpoint_id: str = Field(foreign_key="agent_endpoints.id", max_length=36, index=True)
    livemode: bool = False
    network: str = Field(max_length=40)
    asset: str = Field(max_length=42)
    pay_to: str = Field(max_length=42)
    amount_minor: int = Field(sa_column=Column(BigInteger, nullable=False))
    resource: str = Field(default="", max_length=2048)
    expires_at: datetime = Field(sa_column=Column(UtcDateTime(), nullable=False))
    payment_id: str | None = Field(default=None, max_length=36)
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))


class AgentPayment(SQLModel, table=True):
    """One EIP-3009 authorization, claimed once: the unique (chain, token, payer, nonce) is the replay guard."""

    __tablename__ = "agent_payments"
    id: str = Field(default_factory=new_id, primary_key=True, max_length=36)
    merchant_id: str | None = Field(default=None, foreign_key="merchants.id", max_length=36)
    endpoint_id: str | None = Field(default=None, max_length=36)
    challenge_id: str | None = Field(default=None, max_length=64, index=True)
    livemode: bool = False
    chain_id: int = Field(sa_column=Column(BigInteger, nullable=False))
    asset: str = Field(max_length=42)
    currency: str = Field(max_length=8)
    payer: str = Field(max_length=42)
    nonce: str = Field(max_length=66)
    pay_to: str = Field(max_length=42)
    amount_minor: int = Field(sa_column=Column(BigInteger, nullable=False))
    payload_hash: str = Field(max_length=64)
    resource: str = Field(default="", max_length=2048)
    release_policy: str = Field(default="included", max_length=16)
    status: str = Field(max_length=16)  # (held, or upto's authorized ->) claimed -> submitted -> settled | failed
    transaction: str | None = Field(default=None, max_length=66)
    block_number: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    error_reason: str | None = Field(default=None, max_length=120)
    receipt: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    chain_micros: int | None = None  # time from handing the transfer to the relayer to its inclusion
    platform_micros: int | None = None  # the rest of the platform's time on this settlement
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))
    settled_at: datetime | None = Field(default=None, sa_column=Column(UtcDateTime(), nullable=True))
    # The signed authorization, kept so that any process can send it again should its transaction
    # vanish (with from = payer, to = pay_to, value = amount_minor and the nonce above).
    # A key's 65 bytes, or a smart account's signature (EIP-1271; ERC-6492 with its factory call).
    signature: str | None = Field(default=None, max_length=8194)
    valid_after: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    valid_before: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    locked_until: datetime | None = Field(  # a process finishing a payment it took over holds it until then
        default=None, sa_column=Column(UtcDateTime(), nullable=True)
    )
    # ``upto`` (Permit2): the nonce above is the Permit2 nonce (uint256, as 32-byte hex), valid_after
    # the witness's and valid_before the permit's deadline; amount_minor is what was settled (0
    # while ``authorized``), ceiling_minor what was signed; permit holds the witness's facilitator
    # and the EIP-2612 permit sent with the first settlement, if any.
    scheme: str = Field(default="exact", sa_column=Column(String(16), nullable=False, server_default="exact"))
    ceiling_minor: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    permit: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))

    __table_args__ = (
        UniqueConstraint("chain_id", "asset", "payer", "nonce", name="uq_agent_payments_authorization"),
        Index("ix_agent_payments_merchant_settled", "merchant_id", "settled_at"),
        Index("ix_agent_payments_status", "status"),
    )


class Event(SQLModel, table=True):
    """The transactional outbox: written in the same transaction as the change it reports."""

    __tablename__ = "events"
    id: str = Field(default_factory=new_id, primary_key=True, max_length=36)
    merchant_id: str = Field(foreign_key="merchants.id", max_length=36)
    livemode: bool = False
    type: str = Field(max_length=64)
    data: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))
    # set once the webhook worker has made this event's deliveries (x402mw.platform.webhooks)
    fanned_out_at: datetime | None = Field(default=None, sa_column=Column(UtcDateTime(), nullable=True))

    __table_args__ = (
        Index("ix_events_merchant_created", "merchant_id", "created_at"),
        Index("ix_events_fanned_out", "fanned_out_at"),
    )


class IdempotencyKey(SQLModel, table=True):
    """An ``Idempotency-Key`` a merchant sent with a POST, and the response it got (kept ≥ 24 h)."""

    __tablename__ = "idempotency_keys"
    id: str = Field(default_factory=new_id, primary_key=True, max_length=36)
    merchant_id: str = Field(foreign_key="merchants.id", max_length=36)
    livemode: bool = False
    key: str = Field(max_length=255)
    fingerprint: str = Field(max_length=64)  # SHA-256 of method, path, query and body
    status: str = Field(max_length=16)  # in_flight -> done (a failed first use deletes the row)
    response_status: int | None = None
    response_headers: list[list[str]] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    response_body: bytes | None = Field(default=None, sa_column=Column(LargeBinary, nullable=True))
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))
    # In flight: the claim's lease, renewed while its request runs; once past, a retry may take it over.
    locked_until: datetime | None = Field(default=None, sa_column=Column(UtcDateTime(), nullable=True))

    __table_args__ = (
        UniqueConstraint("merchant_id", "livemode", "key", name="uq_idempotency_keys_scope"),
        Index("ix_idempotency_keys_created", "created_at"),
    )


class PaymentIdentifier(SQLModel, table=True):
    """An x402 ``payment-identifier`` a paying client sent, bound to the payment it came with, and
    the settlement's answer once there is one (the same id and payload gets it again, whatever
    became of the authorization since)."""

    __tablename__ = "payment_identifiers"
    scope: str = Field(primary_key=True, max_length=48)  # the merchant (and mode) the id belongs to
    identifier: str = Field(primary_key=True, max_length=128)
    fingerprint: str = Field(max_length=64)  # SHA-256 of the payment payload, its terms and its route
    status: str = Field(max_length=16)  # in_flight -> answered (an answer that is not final deletes the row)
    answer: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))
    # In flight: until when its first request is believed to be settling it.
    locked_until: datetime | None = Field(default=None, sa_column=Column(UtcDateTime(), nullable=True))

    __table_args__ = (Index("ix_payment_identifiers_created", "created_at"),)


class PaymentIntent(SQLModel, table=True):
    """A payment order (spec 2.1). ``transfer_hold`` is ``metadata.fixed_transfer_customer_id`` while the
    order is open and NULL afterwards: its unique constraint lets one open order hold a customer's
    fixed deposit address at a time, under any concurrency."""

    __tablename__ = "payment_intents"
    id: str = Field(default_factory=new_id, primary_key=True, max_length=36)
    merchant_id: str = Field(foreign_key="merchants.id", max_length=36)
    livemode: bool = False
    order_id: str = Field(max_length=200)
    status: str = Field(max_length=24)  # see x402mw.platform.services.payment_intents
    amount_minor: int = Field(sa_column=Column(BigInteger, nullable=False))
    amount_received_minor: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    currency: str = Field(max_length=8)
    accepted_currencies: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    payment_methods: dict[str, bool] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    customer_email: str | None = Field(default=None, max_length=320)
    customer_name: str | None = Field(default=None, max_length=200)
    success_url: str | None = Field(default=None, max_length=2048)
    cancel_url: str | None = Field(default=None, max_length=2048)
    order_metadata: dict[str, str] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    transfer_hold: str | None = Field(default=None, max_length=500)
    exceptions: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    tx_hash: str | None = Field(default=None, max_length=66)
    paid_at: datetime | None = Field(default=None, sa_column=Column(UtcDateTime(), nullable=True))
    # where and how it was paid: set by the first transfer that counts (x402mw.platform.services.deposits)
    deposit_address: str | None = Field(default=None, max_length=42, index=True)
    chain_id: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    paid_currency: str | None = Field(default=None, max_length=8)
    payer: str | None = Field(default=None, max_length=42)
    swept_at: datetime | None = Field(default=None, sa_column=Column(UtcDateTime(), nullable=True))
    expires_at: datetime | None = Field(default=None, sa_column=Column(UtcDateTime(), nullable=True))
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))
    updated_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))
    # ``amount`` as the merchant sent it (``"25.00"``), answered as sent; NULL: a JSON number was sent
    amount_text: str | None = Field(default=None, max_length=32)
    payment_link_id: str | None = Field(default=None, max_length=36, index=True)  # the link a buyer opened
    description: str | None = Field(default=None, max_length=1000)  # what is bought, shown at checkout
    # The signed authorization being relayed for this order (its payload hash, x402mw.platform.checkout.relay):
    # one at a time, so that two wallets or agents cannot both pay it.
    relay_hash: str | None = Field(default=None, max_length=64)
    relay_claimed_at: datetime | None = Field(default=None, sa_column=Column(UtcDateTime(), nullable=True))

    __table_args__ = (
        UniqueConstraint("merchant_id", "livemode", "order_id", name="uq_payment_intents_order"),
        UniqueConstraint("merchant_id", "livemode", "transfer_hold", name="uq_payment_intents_transfer_hold"),
        Index("ix_payment_intents_merchant_created", "merchant_id", "created_at"),
        # the dashboard's payments list: newest first per mode, by status, and its searches
        Index("ix_payment_intents_mode_created", "merchant_id", "livemode", "created_at", "id"),
        Index("ix_payment_intents_mode_status_created", "merchant_id", "livemode", "status", "created_at", "id"),
        Index("ix_payment_intents_mode_order", "merchant_id", "livemode", "order_id"),
        Index("ix_payment_intents_mode_payer", "merchant_id", "livemode", "payer"),
        Index("ix_payment_intents_mode_tx", "merchant_id", "livemode", "tx_hash"),
        Index("ix_payment_intents_status_expires", "status", "expires_at"),
    )


class PaymentLink(SQLModel, table=True):
    """A reusable priced link (``{checkout_url_base}/pl_<id>``, and ``/paylink/<slug>.<merchant id>``
    with a slug, unique per merchant): each buyer who opens it gets a payment order of their own
    (``payment_intents.payment_link_id``)."""

    __tablename__ = "payment_links"
    id: str = Field(default_factory=new_id, primary_key=True, max_length=36)
    merchant_id: str = Field(foreign_key="merchants.id", max_length=36)
    livemode: bool = False
    name: str = Field(max_length=200)
    slug: str | None = Field(default=None, max_length=64, index=True)
    amount_minor: int = Field(sa_column=Column(BigInteger, nullable=False))
    amount_text: str | None = Field(default=None, max_length=32)
    currency: str = Field(max_length=8)
    accepted_currencies: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    payment_methods: dict[str, bool] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    success_url: str | None = Field(default=None, max_length=2048)
    cancel_url: str | None = Field(default=None, max_length=2048)
    link_metadata: dict[str, str] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    active: bool = True
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))
    updated_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))

    __table_args__ = (
        UniqueConstraint("merchant_id", "slug", name="uq_payment_links_merchant_slug"),
        Index("ix_payment_links_merchant_created", "merchant_id", "created_at"),
    )


class WebhookEndpoint(SQLModel, table=True):
    """A merchant's URL receiving events. ``secret`` signs deliveries (it must be stored to sign);
    ``previous_secrets`` holds rotated-out ones, ``[{"secret", "expiresAt"}]``, still signing until then."""

    __tablename__ = "webhook_endpoints"
    id: str = Field(default_factory=new_id, primary_key=True, max_length=36)
    merchant_id: str = Field(foreign_key="merchants.id", max_length=36)
    livemode: bool = False
    url: str = Field(max_length=2048)
    enabled_events: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    description: str | None = Field(default=None, max_length=500)
    status: str = Field(default="enabled", max_length=16)  # enabled | disabled
    secret: str = Field(max_length=255)  # sealed (x402mw.platform.sealing)
    previous_secrets: list[dict[str, str]] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))
    updated_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))

    __table_args__ = (Index("ix_webhook_endpoints_merchant_created", "merchant_id", "created_at"),)


class WebhookDelivery(SQLModel, table=True):
    """One event owed to one endpoint: pending until a 2xx (delivered) or until ``expires_at`` (failed).
    ``locked_until`` is the claim a worker holds while it sends; ``attempts`` logs every try."""

    __tablename__ = "webhook_deliveries"
    id: str = Field(default_factory=new_id, primary_key=True, max_length=36)
    event_id: str = Field(foreign_key="events.id", max_length=36)
    endpoint_id: str = Field(foreign_key="webhook_endpoints.id", max_length=36, index=True)
    merchant_id: str = Field(foreign_key="merchants.id", max_length=36)
    livemode: bool = False
    status: str = Field(max_length=16)  # pending -> delivered | failed
    attempt_count: int = 0
    attempts: list[dict[str, Any]] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    last_status_code: int | None = None
    next_attempt_at: datetime | None = Field(default=None, sa_column=Column(UtcDateTime(), nullable=True))
    locked_until: datetime | None = Field(default=None, sa_column=Column(UtcDateTime(), nullable=True))
    expires_at: datetime = Field(sa_column=Column(UtcDateTime(), nullable=False))
    delivered_at: datetime | None = Field(default=None, sa_column=Column(UtcDateTime(), nullable=True))
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))
    updated_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))

    __table_args__ = (
        UniqueConstraint("event_id", "endpoint_id", name="uq_webhook_deliveries_event_endpoint"),
        Index("ix_webhook_deliveries_due", "status", "next_attempt_at"),
    )


class DepositAddress(SQLModel, table=True):
    """A deposit address: ``id`` is its BIP-32 child index under ``m/44'/60'/0'/0`` of the platform's
    deposit seed. ``customer_key`` (``metadata.fixed_transfer_customer_id``) makes it the customer's
    fixed address, reused by each of their orders."""

    __tablename__ = "deposit_addresses"
    id: int | None = Field(default=None, primary_key=True)
    address: str | None = Field(default=None, max_length=42, unique=True)
    merchant_id: str = Field(foreign_key="merchants.id", max_length=36)
    livemode: bool = False
    customer_key: str | None = Field(default=None, max_length=500)
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))

    __table_args__ = (
        UniqueConstraint("merchant_id", "livemode", "customer_key", name="uq_deposit_addresses_customer"),
    )


class IncomingTransfer(SQLModel, table=True):
    """A token transfer seen arriving at a deposit address. The unique log position (with its block,
    since a reorg may include the same transaction again elsewhere) makes each count once.
    ``status``: counted (toward its order), wrong_asset, unattributed, reverted (gone in a reorg)."""

    __tablename__ = "incoming_transfers"
    id: str = Field(default_factory=new_id, primary_key=True, max_length=36)
    chain_id: int = Field(sa_column=Column(BigInteger, nullable=False))
    tx_hash: str = Field(max_length=66)
    log_index: int
    block_number: int = Field(sa_column=Column(BigInteger, nullable=False))
    block_hash: str = Field(max_length=66)
    token: str = Field(max_length=42)
    currency: str | None = Field(default=None, max_length=8)
    from_address: str = Field(max_length=42)
    to_address: str = Field(max_length=42)
    amount_minor: int = Field(sa_column=Column(BigInteger, nullable=False))
    payment_intent_id: str | None = Field(default=None, max_length=36, index=True)
    status: str = Field(max_length=16)
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))

    __table_args__ = (
        UniqueConstraint("chain_id", "tx_hash", "log_index", "block_hash", name="uq_incoming_transfers_log"),
    )


class ChainCursor(SQLModel, table=True):
    """The last block whose transfers the deposit watcher has read, per chain, and its hash: a different
    hash at that height later means a reorg, and the watcher reads the recent blocks again."""

    __tablename__ = "chain_cursors"
    chain_id: int = Field(sa_column=Column(BigInteger, primary_key=True, autoincrement=False))
    block_number: int = Field(sa_column=Column(BigInteger, nullable=False))
    block_hash: str | None = Field(default=None, max_length=66)
    updated_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))


class Balance(SQLModel, table=True):
    """A merchant's money per (chain, currency), in minor units: ``available`` can be refunded;
    ``reserved`` is held by refunds in flight. The checks make a negative balance impossible."""

    __tablename__ = "balances"
    merchant_id: str = Field(foreign_key="merchants.id", primary_key=True, max_length=36)
    livemode: bool = Field(default=False, primary_key=True)
    chain_id: int = Field(sa_column=Column(BigInteger, primary_key=True, autoincrement=False))
    currency: str = Field(primary_key=True, max_length=8)
    available_minor: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    reserved_minor: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    updated_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))

    __table_args__ = (
        CheckConstraint("available_minor >= 0", name="ck_balances_available"),
        CheckConstraint("reserved_minor >= 0", name="ck_balances_reserved"),
    )


class LedgerEntry(SQLModel, table=True):
    """One movement of a balance: ``available`` and ``reserved`` change by the two deltas. The unique
    (kind, reference) lets each payment be credited, and each refund reserved and settled, once."""

    __tablename__ = "ledger_entries"
    id: str = Field(default_factory=new_id, primary_key=True, max_length=36)
    merchant_id: str = Field(foreign_key="merchants.id", max_length=36)
    livemode: bool = False
    chain_id: int = Field(sa_column=Column(BigInteger, nullable=False))
    currency: str = Field(max_length=8)
    kind: str = Field(max_length=24)  # payment | refund_reserved | refund_released | refund_sent | adjustment
    reference_id: str = Field(max_length=36)
    available_delta: int = Field(sa_column=Column(BigInteger, nullable=False))
    reserved_delta: int = Field(sa_column=Column(BigInteger, nullable=False))
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))

    __table_args__ = (
        UniqueConstraint("kind", "reference_id", name="uq_ledger_entries_reference"),
        Index("ix_ledger_entries_merchant_created", "merchant_id", "created_at"),
    )


class Refund(SQLModel, table=True):
    """A full refund of a paid order to its payer, sent from the treasury. ``hold`` is the order's id
    while the refund is processing or completed and NULL once failed: its unique constraint allows one
    live refund per order, under any concurrency. ``locked_until`` is the claim of whoever sends it."""

    __tablename__ = "refunds"
    id: str = Field(default_factory=new_id, primary_key=True, max_length=36)
    merchant_id: str = Field(foreign_key="merchants.id", max_length=36)
    livemode: bool = False
    payment_intent_id: str = Field(foreign_key="payment_intents.id", max_length=36, index=True)
    hold: str | None = Field(default=None, max_length=36, unique=True)
    chain_id: int = Field(sa_column=Column(BigInteger, nullable=False))
    currency: str = Field(max_length=8)
    token: str = Field(max_length=42)
    amount_minor: int = Field(sa_column=Column(BigInteger, nullable=False))
    amount_text: str | None = Field(default=None, max_length=32)  # at the order's scale; NULL: plain decimal
    destination: str = Field(max_length=42)
    reason: str | None = Field(default=None, max_length=500)
    status: str = Field(max_length=16)  # processing -> completed | failed
    failure_reason: str | None = Field(default=None, max_length=500)
    tx_hash: str | None = Field(default=None, max_length=66)
    attempts: int = 0
    locked_until: datetime | None = Field(default=None, sa_column=Column(UtcDateTime(), nullable=True))
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))
    updated_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))
    completed_at: datetime | None = Field(default=None, sa_column=Column(UtcDateTime(), nullable=True))

    __table_args__ = (
        Index("ix_refunds_merchant_created", "merchant_id", "created_at"),
        Index("ix_refunds_status", "status", "locked_until"),
    )


class EmbeddedChain(SQLModel, table=True):
    """The embedded dev chain this database's records belong to, written when the platform first
    starts it: a later start refuses a chain with another genesis (a new chain, or none) rather than
    pair these records with it. Chains reached over JSON-RPC are not recorded."""

    __tablename__ = "embedded_chains"
    chain_id: int = Field(sa_column=Column(BigInteger, primary_key=True, autoincrement=False))
    genesis_hash: str = Field(max_length=66)
    tokens: dict[str, str] = Field(sa_column=Column(JSON, nullable=False))  # symbol -> address
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))


class SubscriptionPlan(SQLModel, table=True):
    """A reusable price: ``amount_minor`` of ``currency`` per ``interval`` (weekly, monthly, quarterly,
    yearly). ``slug`` names it in its checkout link (``su_<slug>.<merchant id>``), unique per merchant;
    ``amount_text`` is the amount as the merchant sent it (NULL: a JSON number, answered as its plain
    decimal), copied to each invoice and its order; ``grace_days`` overrides the platform's grace
    period. An inactive plan opens no subscriptions."""

    __tablename__ = "subscription_plans"
    id: str = Field(default_factory=new_id, primary_key=True, max_length=36)
    merchant_id: str = Field(foreign_key="merchants.id", max_length=36)
    livemode: bool = False
    name: str = Field(max_length=200)
    slug: str | None = Field(default=None, max_length=32, index=True)
    amount_minor: int = Field(sa_column=Column(BigInteger, nullable=False))
    amount_text: str | None = Field(default=None, max_length=32)
    currency: str = Field(max_length=8)
    interval: str = Field(max_length=16)
    active: bool = True
    grace_days: int | None = None
    # where the customer returns to the shop: after paying an invoice, and from the customer page
    return_url: str | None = Field(default=None, max_length=2048)
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))
    updated_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))

    __table_args__ = (
        UniqueConstraint("merchant_id", "slug", name="uq_subscription_plans_merchant_slug"),
        Index("ix_subscription_plans_merchant_created", "merchant_id", "created_at"),
    )


class TestClock(SQLModel, table=True):
    """A test-mode clock: the subscriptions opened on it live at ``frozen_time``, which only moves
    forward, when the merchant advances it."""

    __tablename__ = "test_clocks"
    __test__ = False  # not a pytest test class, whatever its name
    id: str = Field(default_factory=new_id, primary_key=True, max_length=36)
    merchant_id: str = Field(foreign_key="merchants.id", max_length=36)
    livemode: bool = False
    frozen_time: datetime = Field(sa_column=Column(UtcDateTime(), nullable=False))
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))
    updated_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))

    __table_args__ = (Index("ix_test_clocks_merchant_created", "merchant_id", "created_at"),)


class Subscription(SQLModel, table=True):
    """A customer's subscription to a plan (x402mw.platform.services.subscriptions.service).

    ``open_key`` is the merchant's customer id while the subscription is open (incomplete, active,
    past_due) and NULL once it ended: its unique constraint gives one open subscription per (plan,
    customer) under any concurrency. ``customer_vouched`` is False when a visitor of the hosted
    subscribe page chose the customer id (an unsigned ``?customer=``, or their email): the merchant's
    API does not take such a subscription over for its customer (see ``SubscriptionService.open``).
    ``next_action`` is what the worker does at ``due_at`` (both NULL when nothing is due); the index on
    (``test_clock_id``, ``due_at``) lets a pass read only what is due."""

    __tablename__ = "subscriptions"
    id: str = Field(default_factory=new_id, primary_key=True, max_length=36)
    merchant_id: str = Field(foreign_key="merchants.id", max_length=36)
    livemode: bool = False
    plan_id: str = Field(foreign_key="subscription_plans.id", max_length=36)
    merchant_customer_id: str = Field(max_length=500)
    customer_email: str | None = Field(default=None, max_length=320)
    customer_vouched: bool = Field(default=True, sa_column=Column(Boolean, nullable=False, server_default=true()))
    open_key: str | None = Field(default=None, max_length=500)
    status: str = Field(max_length=16)  # incomplete | active | past_due | canceled | expired
    cancel_at_period_end: bool = False
    anchor_at: datetime | None = Field(default=None, sa_column=Column(UtcDateTime(), nullable=True))
    periods_paid: int = 0
    current_period_start: datetime | None = Field(default=None, sa_column=Column(UtcDateTime(), nullable=True))
    current_period_end: datetime | None = Field(default=None, sa_column=Column(UtcDateTime(), nullable=True))
    open_invoice_id: str | None = Field(default=None, max_length=36)
    past_due_at: datetime | None = Field(default=None, sa_column=Column(UtcDateTime(), nullable=True))
    canceled_at: datetime | None = Field(default=None, sa_column=Column(UtcDateTime(), nullable=True))
    ended_at: datetime | None = Field(default=None, sa_column=Column(UtcDateTime(), nullable=True))
    test_clock_id: str | None = Field(default=None, foreign_key="test_clocks.id", max_length=36)
    next_action: str | None = Field(default=None, max_length=24)
    due_at: datetime | None = Field(default=None, sa_column=Column(UtcDateTime(), nullable=True))
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))
    updated_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))

    __table_args__ = (
        UniqueConstraint("plan_id", "open_key", name="uq_subscriptions_open_customer"),
        Index("ix_subscriptions_due", "test_clock_id", "due_at"),
        Index("ix_subscriptions_merchant_created", "merchant_id", "created_at"),
    )


class SubscriptionInvoice(SQLModel, table=True):
    """The bill of one period of a subscription (``period`` 1 is the first), paid through its own
    payment order. ``open`` → ``paid`` (→ ``open`` again should a reorg reverse the payment), or
    ``void`` when the subscription ends first. Unique per (subscription, period)."""

    __tablename__ = "subscription_invoices"
    id: str = Field(default_factory=new_id, primary_key=True, max_length=36)
    subscription_id: str = Field(foreign_key="subscriptions.id", max_length=36)
    merchant_id: str = Field(foreign_key="merchants.id", max_length=36)
    livemode: bool = False
    period: int
    status: str = Field(max_length=16)  # open | paid | void
    amount_minor: int = Field(sa_column=Column(BigInteger, nullable=False))
    amount_text: str | None = Field(default=None, max_length=32)  # the plan's, when the invoice opened
    currency: str = Field(max_length=8)
    payment_intent_id: str = Field(foreign_key="payment_intents.id", max_length=36, unique=True)
    period_start: datetime | None = Field(default=None, sa_column=Column(UtcDateTime(), nullable=True))
    period_end: datetime | None = Field(default=None, sa_column=Column(UtcDateTime(), nullable=True))
    reminded_at: datetime | None = Field(default=None, sa_column=Column(UtcDateTime(), nullable=True))
    paid_at: datetime | None = Field(default=None, sa_column=Column(UtcDateTime(), nullable=True))
    voided_at: datetime | None = Field(default=None, sa_column=Column(UtcDateTime(), nullable=True))
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))
    updated_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))

    __table_args__ = (
        UniqueConstraint("subscription_id", "period", name="uq_subscription_invoices_period"),
        Index("ix_subscription_invoices_subscription_created", "subscription_id", "created_at"),
    )


class DiscoveryResource(SQLModel, table=True):
    """A resource the platform settled for, as the discovery catalogue lists it (Bazaar). Listed only
    while its endpoint is ``discoverable``; ``tool_name`` is "" for HTTP resources (an MCP tool is
    identified by its server's URL and its name)."""

    __tablename__ = "discovery_resources"
    id: str = Field(default_factory=new_id, primary_key=True, max_length=36)
    merchant_id: str = Field(foreign_key="merchants.id", max_length=36)
    endpoint_id: str = Field(foreign_key="agent_endpoints.id", max_length=36)
    livemode: bool = False
    resource: str = Field(max_length=2048)
    tool_name: str = Field(default="", max_length=200)
    type: str = Field(max_length=8)  # http | mcp
    description: str = Field(default="", max_length=1000)
    mime_type: str = Field(default="", max_length=200)
    accepts: list[Any] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    extensions: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    updated_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))
    # How much it is settled for lately, as a search ranks it: see x402mw.platform.services.catalogue.popularity
    popularity: float = Field(default=0.0, sa_column=Column(Float, nullable=False, server_default="0"))

    __table_args__ = (
        UniqueConstraint("endpoint_id", "resource", "tool_name", name="uq_discovery_resources_resource"),
        Index("ix_discovery_resources_updated", "updated_at"),
    )


class SignInNonce(SQLModel, table=True):
    """A sign-in-with-x nonce that was used: a message signs in once, in every process. Kept until
    ``expires_at``, its message's expiry (after which the message is refused anyway)."""

    __tablename__ = "sign_in_nonces"
    nonce: str = Field(primary_key=True, max_length=128)
    expires_at: datetime = Field(sa_column=Column(UtcDateTime(), nullable=False, index=True))


class FormTokenUse(SQLModel, table=True):
    """A hosted form's token that was used (its SHA-256): a form token is good for one post, in every
    process. Rows older than the tokens' lifetime are deleted as new ones come."""

    __tablename__ = "form_token_uses"
    token_hash: str = Field(primary_key=True, max_length=64)
    used_at: datetime = Field(sa_column=Column(UtcDateTime(), nullable=False, index=True))


class SubscriptionEmail(SQLModel, table=True):
    """An email owed to a subscriber (the email outbox): written in the transaction of the change it
    reports, rendered and sent by the worker at least once. ``kind``: subscribed, access,
    invoice_opened, reminder, past_due. ``locked_until`` is the claim of the worker sending it."""

    __tablename__ = "subscription_emails"
    id: str = Field(default_factory=new_id, primary_key=True, max_length=36)
    merchant_id: str = Field(foreign_key="merchants.id", max_length=36)
    livemode: bool = False
    subscription_id: str = Field(foreign_key="subscriptions.id", max_length=36, index=True)
    invoice_id: str | None = Field(default=None, max_length=36)
    kind: str = Field(max_length=24)
    to_address: str = Field(max_length=320)
    status: str = Field(max_length=16)  # pending -> sent | failed
    attempts: int = 0
    last_error: str | None = Field(default=None, max_length=500)
    next_attempt_at: datetime = Field(sa_column=Column(UtcDateTime(), nullable=False))
    locked_until: datetime | None = Field(default=None, sa_column=Column(UtcDateTime(), nullable=True))
    sent_at: datetime | None = Field(default=None, sa_column=Column(UtcDateTime(), nullable=True))
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))

    __table_args__ = (Index("ix_subscription_emails_due", "status", "next_attempt_at"),)


class RelayerPool(SQLModel, table=True):
    """How many relayer accounts a chain's pool has: written by `x402mw platform relayer-pool` (or at
    start-up by ``X402MW_RELAYER_POOL_SIZE``) and read by every process at each lease round, so that
    it changes without a restart."""

    __tablename__ = "relayer_pools"
    chain_id: int = Field(sa_column=Column(BigInteger, primary_key=True, autoincrement=False))
    size: int
    updated_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))


class RelayerAccount(SQLModel, table=True):
    """A relayer account of a chain's pool (``slot`` numbers it) and its lease: the process
    ``holder`` sends from it until ``locked_until`` and renews that while it lives; no other process
    sends from it meanwhile, so no two share its nonces."""

    __tablename__ = "relayer_accounts"
    chain_id: int = Field(sa_column=Column(BigInteger, primary_key=True, autoincrement=False))
    slot: int = Field(primary_key=True, ge=0)
    address: str = Field(max_length=42)
    holder: str | None = Field(default=None, max_length=100)
    locked_until: datetime | None = Field(default=None, sa_column=Column(UtcDateTime(), nullable=True))


class RelayerHolder(SQLModel, table=True):
    """A process taking part in a chain's relayer pool, seen until ``seen_until``: the live ones
    share the pool's accounts evenly."""

    __tablename__ = "relayer_holders"
    chain_id: int = Field(sa_column=Column(BigInteger, primary_key=True, autoincrement=False))
    holder: str = Field(primary_key=True, max_length=100)
    seen_until: datetime = Field(sa_column=Column(UtcDateTime(), nullable=False))


class DashboardUser(SQLModel, table=True):
    """A person who signs in to a merchant's dashboard (x402mw.platform.services.dashboard_users): an argon2
    password hash, a role, and an optional TOTP secret (sealed, x402mw.platform.sealing)."""

    __tablename__ = "dashboard_users"
    id: str = Field(default_factory=new_id, primary_key=True, max_length=36)
    merchant_id: str = Field(foreign_key="merchants.id", max_length=36, index=True)
    email: str = Field(max_length=320, unique=True)
    password_hash: str = Field(max_length=255)
    role: str = Field(max_length=16)  # owner | developer | support | viewer
    totp_secret: str | None = Field(default=None, max_length=255)
    totp_enabled: bool = False
    totp_last_step: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))
    disabled_at: datetime | None = Field(default=None, sa_column=Column(UtcDateTime(), nullable=True))


class DashboardSession(SQLModel, table=True):
    """A signed-in browser: the cookie holds a random token, this row its SHA-256 (``id``)."""

    __tablename__ = "dashboard_sessions"
    id: str = Field(primary_key=True, max_length=64)
    user_id: str = Field(foreign_key="dashboard_users.id", max_length=36, index=True)
    merchant_id: str = Field(foreign_key="merchants.id", max_length=36)
    csrf_token: str = Field(max_length=64)
    livemode: bool = False
    two_factor_passed: bool = False
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))
    last_seen_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))
    expires_at: datetime = Field(sa_column=Column(UtcDateTime(), nullable=False))
    revoked_at: datetime | None = Field(default=None, sa_column=Column(UtcDateTime(), nullable=True))


class DashboardRecoveryCode(SQLModel, table=True):
    """A recovery code of a user's two-factor sign-in, each used once in place of a TOTP code: the
    user sees the codes once, when two-factor sign-in is turned on; this row keeps the SHA-256 (``id``)."""

    __tablename__ = "dashboard_recovery_codes"
    id: str = Field(primary_key=True, max_length=64)
    user_id: str = Field(foreign_key="dashboard_users.id", max_length=36, index=True)
    used_at: datetime | None = Field(default=None, sa_column=Column(UtcDateTime(), nullable=True))
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))


class DashboardInvitation(SQLModel, table=True):
    """An invitation to join a merchant's dashboard: the link carries a random token, this row its
    SHA-256 (``id``); it expires and is used once."""

    __tablename__ = "dashboard_invitations"
    id: str = Field(primary_key=True, max_length=64)
    merchant_id: str = Field(foreign_key="merchants.id", max_length=36, index=True)
    email: str = Field(max_length=320)
    role: str = Field(max_length=16)
    invited_by: str = Field(max_length=36)
    expires_at: datetime = Field(sa_column=Column(UtcDateTime(), nullable=False))
    used_at: datetime | None = Field(default=None, sa_column=Column(UtcDateTime(), nullable=True))
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))


class DashboardAudit(SQLModel, table=True):
    """Who did what in the dashboard, and each refused attempt (``outcome`` refused)."""

    __tablename__ = "dashboard_audit"
    id: str = Field(default_factory=new_id, primary_key=True, max_length=36)
    merchant_id: str | None = Field(default=None, max_length=36)
    user_id: str | None = Field(default=None, max_length=36)
    email: str | None = Field(default=None, max_length=320)
    action: str = Field(max_length=64)
    target: str | None = Field(default=None, max_length=200)
    outcome: str = Field(max_length=16)  # ok | refused
    address: str | None = Field(default=None, max_length=64)
    detail: str | None = Field(default=None, max_length=500)
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))

    __table_args__ = (Index("ix_dashboard_audit_merchant_created", "merchant_id", "created_at"),)


class ApiRequest(SQLModel, table=True):
    """One request to the merchant API, written by its middleware (x402mw.platform.api.request_log):
    kept ``api_log_days`` and at most ``api_log_rows`` per merchant, purged by the worker."""

    __tablename__ = "api_requests"
    id: str = Field(default_factory=new_id, primary_key=True, max_length=36)
    merchant_id: str = Field(foreign_key="merchants.id", max_length=36)
    livemode: bool = False
    method: str = Field(max_length=10)
    path: str = Field(max_length=500)
    status: int
    request_id: str = Field(max_length=64)
    duration_ms: int = 0
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))

    __table_args__ = (
        Index("ix_api_requests_merchant_created", "merchant_id", "livemode", "created_at"),
        Index("ix_api_requests_request_id", "request_id"),
        Index("ix_api_requests_created", "created_at"),
    )


class ReportRollup(SQLModel, table=True):
    """One figure of the reports (x402mw.platform.services.reports), summed per (merchant, mode,
    ``metric``, UTC ``hour``, coin, ``dimension``): ``amount_minor`` and ``count`` are updated in the
    transaction of the write that changes them, so that a report reads these rows and never the
    payments. ``dimension`` is what the metric is broken down by: an endpoint's or a plan's id, a
    payer, a failure's reason, a latency bucket ("" for none). Keyed by the hour, not the day, so
    that a report can be cut at any whole-hour time zone's midnight."""

    __tablename__ = "report_rollups"
    merchant_id: str = Field(foreign_key="merchants.id", primary_key=True, max_length=36)
    livemode: bool = Field(default=False, primary_key=True)
    metric: str = Field(primary_key=True, max_length=24)
    hour: datetime = Field(sa_column=Column(UtcDateTime(), primary_key=True))
    currency: str = Field(primary_key=True, max_length=8)
    dimension: str = Field(primary_key=True, max_length=64)
    amount_minor: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    count: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))


class ChannelAuthorizer(SQLModel, table=True):
    """A merchant's receiver authorizer (per mode): the key that signs its channels' claims and
    refunds, kept sealed (`x402mw.platform.sealing`)."""

    __tablename__ = "channel_authorizers"
    merchant_id: str = Field(foreign_key="merchants.id", primary_key=True, max_length=36)
    livemode: bool = Field(default=False, primary_key=True)
    address: str = Field(max_length=42)
    sealed_key: str = Field(max_length=400)
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))


class PaymentChannel(SQLModel, table=True):
    """One batch-settlement channel whose receiver is a merchant's: the specification's per-channel
    state, shared by every process. ``charged`` is what vouchers the handlers earned add up to
    (``chargedCumulativeAmount``), ``signed_max`` and ``signature`` the latest voucher; ``balance``,
    ``total_claimed``, ``withdraw_*`` and ``refund_nonce`` mirror the chain as read at
    ``synced_at``. ``claimed`` is what our claims moved into the receiver's claimed total and
    ``settled`` what a settle paid out of it. A request in progress holds the channel (``hold_*``)
    until its handler's charge is committed or given up."""

    __tablename__ = "payment_channels"
    id: str = Field(primary_key=True, max_length=66)
    merchant_id: str = Field(foreign_key="merchants.id", max_length=36)
    livemode: bool = False
    endpoint_id: str = Field(max_length=36)
    chain_id: int = Field(sa_column=Column(BigInteger, nullable=False))
    token: str = Field(max_length=42)
    currency: str = Field(max_length=8)
    payer: str = Field(max_length=42)
    payer_authorizer: str = Field(max_length=42)
    receiver: str = Field(max_length=42)
    receiver_authorizer: str = Field(max_length=42)
    withdraw_delay: int
    salt: str = Field(max_length=66)
    status: str = Field(default="open", max_length=16)
    charged: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    signed_max: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    signature: str = Field(default="", max_length=4200)
    deposited: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    claimed: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    settled: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    refunded: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    balance: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    total_claimed: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    withdraw_amount: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    withdraw_requested_at: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    refund_nonce: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    synced_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))
    hold_id: str | None = Field(default=None, max_length=36, index=True)
    hold_until: datetime | None = Field(default=None, sa_column=Column(UtcDateTime(), nullable=True))
    hold_max: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    hold_price: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    hold_signature: str | None = Field(default=None, max_length=4200)
    hold_deposit: str | None = Field(default=None, max_length=66)  # the deposit's transaction, if it made one
    last_hold_id: str | None = Field(default=None, max_length=36, index=True)
    last_charge: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    refund_asked: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))  # 0: all
    last_request_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))
    updated_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))

    __table_args__ = (
        Index("ix_payment_channels_merchant_created", "merchant_id", "created_at"),
        Index("ix_payment_channels_claims", "chain_id", "receiver_authorizer"),
    )


class ChannelDeposit(SQLModel, table=True):
    """A deposit submitted into a channel: its token authorization is used once
    (``authorization_key``, unique), its transaction waited for."""

    __tablename__ = "channel_deposits"
    id: str = Field(default_factory=new_id, primary_key=True, max_length=36)
    channel_id: str = Field(max_length=66, index=True)
    authorization_key: str = Field(max_length=66, unique=True)
    amount: int = Field(sa_column=Column(BigInteger, nullable=False))
    transaction: str = Field(default="", max_length=66)
    status: str = Field(default="sending", max_length=16)  # sending, confirmed, failed
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))


class ChannelTransaction(SQLModel, table=True):
    """A claim, settle or refund the worker sent for channels: ``rows`` names each channel with what
    the transaction brings its ``claimed`` (a claim), ``settled`` (a settle) or ``refunded`` to."""

    __tablename__ = "channel_transactions"
    id: str = Field(default_factory=new_id, primary_key=True, max_length=36)
    kind: str = Field(max_length=16)
    chain_id: int = Field(sa_column=Column(BigInteger, nullable=False))
    receiver: str = Field(max_length=42)
    token: str = Field(max_length=42)
    transaction: str = Field(default="", max_length=66)
    status: str = Field(default="sent", max_length=16, index=True)  # sent, confirmed, failed
    amount: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    rows: list[list[Any]] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))
    updated_at: datetime = Field(default_factory=utcnow, sa_column=Column(UtcDateTime(), nullable=False))
