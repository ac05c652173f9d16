"""The platform's route tree: every surface (the API under ``/v1``, the checkout, the dashboard, the
agent-facing and health routes) mounted at its prefix, with the API's own middleware (the request
log, idempotency keys). The app mounts it; the OpenAPI builder walks it.
"""

from __future__ import annotations

from starlette.middleware import Middleware
from starlette.routing import BaseRoute, Mount

from x402mw.platform import checkout, dashboard
from x402mw.platform.api import (
    balances,
    clocks,
    discovery,
    events,
    facilitator,
    health,
    payment_intents,
    payment_links,
    refunds,
    reports,
    sandbox,
    subscription_plans,
    subscriptions,
    webhook_endpoints,
)
from x402mw.platform.api.agents import challenges as agent_challenges
from x402mw.platform.api.agents import channels as agent_channels
from x402mw.platform.api.agents import endpoints as agent_endpoints
from x402mw.platform.api.agents import settlements as agent_settlements
from x402mw.platform.api.agents import sign_ins as agent_sign_ins
from x402mw.platform.api.idempotency import IdempotencyMiddleware
from x402mw.platform.api.request_log import RequestLogMiddleware


def platform_routes(*documents: BaseRoute) -> list[BaseRoute]:
    """The platform's routes, a fresh tree per call: what the app mounts (`x402mw.platform.app`) and
    what the OpenAPI document describes (HTML pages, not API operations, are
    ``include_in_schema=False``). ``documents``: the API's own description, added under ``/v1``
    (`x402mw.platform.openapi.document.document_routes`, which this module cannot import: the
    document is built from this tree)."""
    v1 = [
        *agent_endpoints.routes,
        *agent_challenges.routes,
        *agent_settlements.routes,
        *agent_channels.routes,
        *agent_sign_ins.routes,
        *facilitator.routes,
        *discovery.routes,
        *payment_intents.routes,
        *payment_links.routes,
        *refunds.routes,
        *balances.routes,
        *reports.routes,
        *reports.export_routes,
        *sandbox.routes,
        *subscription_plans.routes,
        *subscriptions.routes,
        *clocks.routes,
        *webhook_endpoints.routes,
        *events.routes,
        *health.routes,
        *documents,
    ]
    return [
        Mount(
            "/v1",
            routes=v1,
            middleware=[
                Middleware(RequestLogMiddleware),
                Middleware(IdempotencyMiddleware, takes_over={"/payment-intents"}),
            ],
        ),
        Mount("/merchant/v1", routes=agent_challenges.legacy_routes),
        Mount("/checkout", routes=checkout.routes),
        Mount("/dashboard", routes=dashboard.routes),
        *checkout.agent_routes,
        *health.probe_routes,
    ]
