"""The tables as SQLAlchemy Core ``Table`` objects, for typed queries (``tables.agent_payments.c.status``)."""

from __future__ import annotations

from sqlmodel import SQLModel

import x402mw.platform.db.models  # noqa: F401  (defines the tables)

__all__ = [
    "agent_challenges",
    "agent_endpoints",
    "agent_payments",
    "api_keys",
    "balances",
    "chain_cursors",
    "deposit_addresses",
    "embedded_chains",
    "events",
    "form_token_uses",
    "idempotency_keys",
    "incoming_transfers",
    "ledger_entries",
    "merchants",
    "payment_intents",
    "payment_links",
    "refunds",
    "relayer_accounts",
    "relayer_holders",
    "relayer_pools",
    "subscription_emails",
    "subscription_invoices",
    "subscription_plans",
    "subscriptions",
    "test_clocks",
    "webhook_deliveries",
    "webhook_endpoints",
]

_tables = SQLModel.metadata.tables
merchants = _tables["merchants"]
api_keys = _tables["api_keys"]
agent_endpoints = _tables["agent_endpoints"]
agent_challenges = _tables["agent_challenges"]
agent_payments = _tables["agent_payments"]
events = _tables["events"]
idempotency_keys = _tables["idempotency_keys"]
payment_intents = _tables["payment_intents"]
webhook_endpoints = _tables["webhook_endpoints"]
webhook_deliveries = _tables["webhook_deliveries"]
deposit_addresses = _tables["deposit_addresses"]
incoming_transfers = _tables["incoming_transfers"]
chain_cursors = _tables["chain_cursors"]
balances = _tables["balances"]
ledger_entries = _tables["ledger_entries"]
refunds = _tables["refunds"]
embedded_chains = _tables["embedded_chains"]
payment_links = _tables["payment_links"]
subscription_plans = _tables["subscription_plans"]
subscriptions = _tables["subscriptions"]
subscription_invoices = _tables["subscription_invoices"]
subscription_emails = _tables["subscription_emails"]
test_clocks = _tables["test_clocks"]
form_token_uses = _tables["form_token_uses"]
relayer_pools = _tables["relayer_pools"]
relayer_accounts = _tables["relayer_accounts"]
relayer_holders = _tables["relayer_holders"]
