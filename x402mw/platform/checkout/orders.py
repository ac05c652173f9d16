"""The public side of a payment order: finding it by the id in a checkout link, what a buyer may see
of it, and the networks and coins the platform can take it on.

Checkout is reached without an API key: the order's id (an unguessable UUID, as carried by its
``checkoutUrl``) is what lets a buyer see it. So the public form leaves out everything the merchant
keeps to itself: ``orderId``, ``metadata``, the customer, the payer.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.ext.asyncio import AsyncConnection

from x402mw.platform.db import tables
from x402mw.platform.http.fields import UUID_PATTERN
from x402mw.platform.http.routing import path
from x402mw.platform.objects.base import money
from x402mw.platform.objects.checkout import (
    CheckoutCurrency,
    CheckoutNetwork,
    CheckoutPaymentIntent,
    CheckoutSubscription,
    Merchant,
)
from x402mw.platform.objects.payments import PaymentMethods
from x402mw.platform.services.chains import ChainHandle, Chains
from x402mw.platform.services.payment_intents import DECIMALS, amount_text
from x402mw.protocol.networks import Asset

__all__ = [
    "METHODS",
    "PaymentOption",
    "amount_due",
    "awaiting_payment",
    "enabled_methods",
    "expires_at",
    "find_order",
    "parse_payment_id",
    "payment_options",
    "public_order_of",
    "subscription_of",
]

METHODS = ("transfer", "wallet")


def parse_payment_id(raw: str) -> str | None:
    """The bare UUID in ``pi_<uuid>`` or ``<uuid>`` (canonical hyphenated form, any case), or None."""
    text = raw[3:] if raw[:3].lower() == "pi_" else raw
    if len(text) != 36:
        return None
    try:
        canonical = str(uuid.UUID(text))
    except ValueError:
        return None
    return canonical if canonical == text.lower() else None


PAYMENT_ID = path(
    "payment_id",
    "the payment intent's id: a bare UUID or `pi_<uuid>`; any other value answers 404 `resource_missing`, as an "
    "unknown id does",
    {"type": "string", "pattern": "^(?:[Pp][Ii]_)?" + UUID_PATTERN.removeprefix("^")},
)
"""The path parameter of the checkout API and of an order's ``x402Url``, as `parse_payment_id` reads it."""


_INVOICES, _SUBSCRIPTIONS, _PLANS = tables.subscription_invoices, tables.subscriptions, tables.subscription_plans
_ORDER_BY_ID = (
    select(
        tables.payment_intents,
        tables.merchants.c.name.label("merchant_name"),
        _PLANS.c.name.label("plan_name"),
        _PLANS.c.interval.label("plan_interval"),
        _INVOICES.c.period_start.label("invoice_period_start"),
        _INVOICES.c.period_end.label("invoice_period_end"),
    )
    .join(tables.merchants, tables.merchants.c.id == tables.payment_intents.c.merchant_id)
    .outerjoin(_INVOICES, _INVOICES.c.payment_intent_id == tables.payment_intents.c.id)
    .outerjoin(_SUBSCRIPTIONS, _SUBSCRIPTIONS.c.id == _INVOICES.c.subscription_id)
    .outerjoin(_PLANS, _PLANS.c.id == _SUBSCRIPTIONS.c.plan_id)
    .where(tables.payment_intents.c.id == bindparam("payment_id"))
)  # built once: every checkout page view and API call reads an order this way


async def find_order(conn: AsyncConnection, payment_id: str) -> Mapping[Any, Any] | None:
    """The order with this bare UUID, whoever's it is, with its merchant's name as ``merchant_name``
    and, for a subscription's invoice, its plan (``plan_name``, ``plan_interval``) and period
    (``invoice_period_start``, ``invoice_period_end``: None until the first payment sets them)."""
    return (await conn.execute(_ORDER_BY_ID, {"payment_id": payment_id})).mappings().first()


def _aware(value: datetime | None) -> datetime | None:
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


def subscription_of(order: Mapping[Any, Any]) -> CheckoutSubscription | None:
    """The subscription an invoice's order pays for (plan, interval, period), or None for other orders."""
    if order.get("plan_name") is None:
        return None
    return CheckoutSubscription(
        plan=order["plan_name"],
        interval=order["plan_interval"],
        period_start=_aware(order["invoice_period_start"]),
        period_end=_aware(order["invoice_period_end"]),
    )


def expires_at(order: Mapping[Any, Any]) -> datetime | None:
    """The order's ``expiresAt`` as an aware UTC datetime (SQLite gives naive ones back)."""
    value: datetime | None = order["expires_at"]
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


def awaiting_payment(order: Mapping[Any, Any], now: datetime) -> bool:
    """Whether the order can still be paid: ``requires_payment`` and not past ``expiresAt`` (the worker
    marks it ``expired`` a moment later)."""
    expires = expires_at(order)
    return order["status"] == "requires_payment" and (expires is None or expires > now)


def amount_due(order: Mapping[Any, Any]) -> int:
    """What is still to pay, in minor units."""
    return max(0, int(order["amount_minor"]) - int(order["amount_received_minor"]))


@dataclass(frozen=True, slots=True)
class PaymentOption:
    """One coin on one chain that can pay an order, and the methods it can be paid with there."""

    chain: ChainHandle
    asset: Asset
    methods: tuple[str, ...]

    @property
    def network(self) -> str:
        return self.chain.network.caip2

    @property
    def key(self) -> str:
        """``<network>/<currency>``: how the page's picker names the option."""
        return f"{self.network}/{self.asset.symbol}"


def enabled_methods(order: Mapping[Any, Any]) -> tuple[str, ...]:
    """The methods the merchant lets checkout offer for ``order`` (``paymentMethods``)."""
    chosen = order["payment_methods"] or {}
    return tuple(m for m in METHODS if chosen.get(m, True))


def payment_options(chains: Chains, order: Mapping[Any, Any]) -> list[PaymentOption]:
    """The (chain, coin) pairs the platform can take ``order`` on, its primary currency first:
    chains of the order's mode (test orders on test chains), coins it accepts that the chain has.
    Once part of it is paid, only that chain and coin remain (anything else would not count).
    Wallet payment needs an EIP-3009 coin (USDT has none) for the gasless authorization; a wallet
    can still send an ordinary transfer of any coin, so ``wallet`` is offered for every coin."""
    enabled = enabled_methods(order)
    options = []
    currencies = sorted(order["accepted_currencies"], key=lambda c: c != order["currency"])
    for currency in currencies:
        if order["paid_currency"] not in (None, currency):
            continue
        for chain in chains:
            if chain.livemode != bool(order["livemode"]) or order["chain_id"] not in (None, chain.chain_id):
                continue
            asset = chain.asset(currency)
            if asset is not None and asset.decimals == DECIMALS:
                options.append(PaymentOption(chain, asset, enabled))
    return options


def _networks(options: list[PaymentOption]) -> list[CheckoutNetwork]:
    networks: dict[str, CheckoutNetwork] = {}
    for option in options:
        network = option.chain.network
        entry = networks.setdefault(
            option.network,
            CheckoutNetwork(
                network=option.network,
                chain_id=network.chain_id,
                name=network.name,
                testnet=network.testnet or network.local,
                currencies=[],
            ),
        )
        entry.currencies.append(
            CheckoutCurrency(
                currency=option.asset.symbol,
                token_address=option.asset.address,
                decimals=option.asset.decimals,
                methods=list(option.methods),
                gasless=option.asset.eip3009,
            )
        )
    return list(networks.values())


def public_order_of(order: Mapping[Any, Any], chains: Chains) -> CheckoutPaymentIntent:
    """What checkout shows of an order (``GET /checkout/v1/payment-intents/:paymentId``)."""
    methods = order["payment_methods"] or {}
    return CheckoutPaymentIntent(
        id=order["id"],
        payment_id=order["id"],
        status=order["status"],
        amount=Decimal(amount_text(order)),
        amount_received=money(int(order["amount_received_minor"]), DECIMALS),
        amount_due=money(amount_due(order), DECIMALS),
        currency=order["currency"],
        accepted_currencies=order["accepted_currencies"],
        payment_methods=PaymentMethods(
            wallet=bool(methods.get("wallet", True)),
            transfer=bool(methods.get("transfer", True)),
            transfer_default_open=bool(methods.get("transferDefaultOpen", False)),
        ),
        merchant=Merchant(name=order["merchant_name"]),
        description=order.get("description"),
        subscription=subscription_of(order),
        success_url=order["success_url"],
        cancel_url=order["cancel_url"],
        exceptions=order["exceptions"],
        network=None if order["chain_id"] is None else f"eip155:{order['chain_id']}",
        paid_currency=order["paid_currency"],
        tx_hash=order["tx_hash"],
        paid_at=order["paid_at"],
        expires_at=order["expires_at"],
        livemode=bool(order["livemode"]),
        networks=_networks(payment_options(chains, order)),
    )
