"""The merchant dashboard, served at ``{api_host}/dashboard``: server-rendered pages (Jinja2) over the
same services as the merchant API, beside it: it imports nothing of the API, runs no SQL of its
own (its people, sessions and audit log are `x402mw.platform.services.dashboard_users`), and reads
its forms into the API's request models (`x402mw.platform.http.request_models`). See
docs/dashboard.md. Its routes are HTML pages, not API operations: none is in the OpenAPI document
(``include_in_schema=False``).

- `web`: the request plumbing (session cookie, CSRF, roles, refusals);
- `people`, `overview`, `payments`, `catalog`, `agents`, `developers`, `sandbox`: the pages.
"""

from __future__ import annotations

from starlette.routing import BaseRoute, Mount

from x402mw.platform.dashboard import agents, catalog, developers, overview, payments, people, reports, sandbox
from x402mw.platform.dashboard.assets import DashboardAssets

__all__ = ["routes"]

routes: list[BaseRoute] = [
    *overview.routes,
    *people.routes,
    *payments.routes,
    *catalog.routes,
    *agents.routes,
    *developers.routes,
    *sandbox.routes,
    *reports.routes,
    Mount("/static", app=DashboardAssets(), name="dashboard-static"),
]
