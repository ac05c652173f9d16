"""Payment channels (the x402 ``batch-settlement`` scheme): a payer deposits once into the escrow,
then pays each request with an off-chain cumulative voucher; the worker claims the latest vouchers
of many channels in one transaction and sweeps the claims to the receiver in one transfer.

- `checks`: a payload against the endpoint's channel terms, off-chain (one signature recovery).
- `store`: the per-channel state every process shares (``payment_channels``), and its hold.
- `service`: a request's voucher held before its handler and committed after it; deposits.
- `worker`: claims, settles, cooperative refunds and withdrawals on chain.
- `authorizers`: the merchants' receiver authorizer keys, sealed at rest.
"""
