"""Outgoing webhooks: the event types merchants subscribe to (defined with the outbox that records
them, `x402mw.platform.services.outbox`), and the worker that delivers them
(`x402mw.platform.webhooks.delivery`)."""

from __future__ import annotations

from x402mw.platform.services.outbox import EVENT_TYPES

__all__ = ["EVENT_TYPES"]
