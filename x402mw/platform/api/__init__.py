"""The merchant REST API (``/v1``, API key): one module per resource (agent resources in `agents`),
its authentication (`auth`), ``Idempotency-Key`` (`idempotency`) and request log (`request_log`).

The plumbing it shares with hosted checkout (errors, bodies, fields, responses, pagination) is
`x402mw.platform.http`; the OpenAPI document that describes it is `x402mw.platform.openapi`.
"""
