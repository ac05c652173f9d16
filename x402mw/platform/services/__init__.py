"""Business logic, independent of HTTP: what the platform does, over its database and its chains.

Families, each a package:

- `settlement`: agent payments (x402), from the payment header to the signed receipt;
- `subscriptions`: plans, subscriptions, invoices, renewals and test clocks.

Payments by people:

- `payment_intents`: payment orders (money, creation, cancel, expiry); `payment_links`: reusable priced links;
- `deposits`: deposit addresses and sweeping; `watcher`: transfers seen arriving at them;
- `refunds`: whole refunds to the payer; `ledger`: merchant balances, moved only by entries.

Merchants and their records:

- `merchants`: merchants and API keys; `endpoints`: agent endpoints as settlement reads them (`cache`);
- `challenges`, `catalogue`: challenges sellers issued and the discovery catalogue built from them;
- `metering`: settlements and volume per month; `api_requests`: the API's request log;
- `sign_ins`: sign-in-with-x checks; `slugs`: readable names in public addresses;
- `idempotency`: the store behind ``Idempotency-Key``; `outbox`: events written with their change;
- `errors`: `ServiceError`, what a service raises when a request breaks its rules.

Chains: `chains` (each chain's RPC, relayer and tokens), `relayer_leases` (which pool accounts this
process sends from), `embedded_chain` (the dev chain kept in the data dir), `status` (what
``x402mw platform status`` reports).

Services import `chain`, `db` and the layers below, never HTTP (`api`, `checkout`, `http`).
"""
