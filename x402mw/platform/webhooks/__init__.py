"""Outgoing webhooks: the event types merchants subscribe to, and the outbox worker that delivers them
(`x402mw.platform.webhooks.delivery`)."""

from __future__ import annotations

__all__ = ["EVENT_TYPES"]

EVENT_TYPES: tuple[str, ...] = (
    "agent_payment.settled",
    "payment_intent.created",
    "payment_intent.canceled",
    "payment_intent.expired",
    "payment_intent.processing",
    "payment_intent.succeeded",
    "payment_intent.refunded",
    "payment_intent.reverted",
    "refund.processing",
    "refund.completed",
    "refund.failed",
    "subscription.created",
    "subscription.renewed",
    "subscription.past_due",
    "subscription.canceled",
    "subscription.expired",
)
