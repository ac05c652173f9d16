"""The x402mw platform: the merchant API, hosted checkout, the dashboard, agent settlement, the
relayer and chain access, and the background loop that finishes what requests start.

Installed with the ``platform`` extra. Start it with ``x402mw platform serve``, or build the
Starlette app yourself with `x402mw.platform.app.create_app`.

Its packages, in layers (a module imports only from layers below its own; ``make lint`` checks it):

- `server`, `supervisor`: one process, or ``serve --workers N``; `app`: routes, middleware, lifespan;
  `background`: the loop that settles, expires, watches, refunds, renews, mails and delivers;
- `openapi`: the OpenAPI document, built by walking the routes; `dashboard`: the merchant dashboard;
- `api` and `checkout`, siblings: the merchant API (``/v1``) and hosted checkout (public endpoints
  and pages); `http`: the HTTP plumbing both share (errors, bodies, fields, responses, routing);
- `webhooks` and `emails`: delivery to merchants and to subscribers; `runtime`: `Platform`, the
  services wired together;
- `services`: the domain, free of HTTP (`services.settlement` for agent payments,
  `services.subscriptions`, orders, refunds, deposits, ledger, ...);
- `chain` (JSON-RPC, relayer, dev chain, anvil) and `db` (tables, migrations); below them response
  models (`objects`), `settings` and small helpers.
"""
