"""The tables as SQLAlchemy Core ``Table`` objects, for typed queries (``tables.agent_payments.c.status``)."""

from __future__ import annotations

from sqlmodel import SQLModel

import x402mw.platform.db.models  # noqa: F401  (defines the tables)

_tables = SQLModel.metadata.tables
merchants = _tables["merchants"]
api_keys = _tables["api_keys"]
api_key_revisions = _tables["api_key_revisions"]
agent_endpoints = _tables["agent_endpoints"]
agent_challenges = _tables["agent_challenges"]
agent_payments = _tables["agent_payments"]
events = _tables["events"]
idempotency_keys = _tables["idempotency_keys"]
payment_intents = _tables["payment_intents"]
payment_identifiers = _tables["payment_identifiers"]
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
discovery_resources = _tables["discovery_resources"]
sign_in_nonces = _tables["sign_in_nonces"]
dashboard_users = _tables["dashboard_users"]
dashboard_sessions = _tables["dashboard_sessions"]
dashboard_invitations = _tables["dashboard_invitations"]
dashboard_recovery_codes = _tables["dashboard_recovery_codes"]
dashboard_audit = _tables["dashboard_audit"]
api_requests = _tables["api_requests"]
report_rollups = _tables["report_rollups"]
