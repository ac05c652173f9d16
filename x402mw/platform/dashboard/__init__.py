"""The merchant dashboard, served at ``{api_host}/dashboard``: server-rendered pages (Jinja2) over the
same services as the merchant API. See docs/dashboard.md. Its routes are HTML pages, not API
operations: none is in the OpenAPI document (``include_in_schema=False``).

- `accounts`: users, sessions, invitations, TOTP and the audit log;
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
