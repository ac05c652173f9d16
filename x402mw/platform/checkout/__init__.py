"""Hosted checkout: the public checkout API and the page a buyer pays on.

Mounted at ``/checkout`` (``{checkout_url_base}``): the JSON API under ``/checkout/v1``
(`x402mw.platform.checkout.api`), static files under ``/checkout/static`` (among them
``x402mw-checkout.js``, the checkout button and panel for merchants' pages), the pages
(`x402mw.platform.checkout.pages`) at ``/checkout/pi_<uuid>`` and the older link forms, and the
subscription pages (`x402mw.platform.checkout.subscription_pages`) at ``/checkout/su_<plan>`` and
``/checkout/subscriptions/<token>``.
"""

from __future__ import annotations

from starlette.routing import BaseRoute, Mount

from x402mw.platform.checkout import agent_pay, api, links, pages, subscription_pages
from x402mw.platform.checkout.assets import CheckoutAssets

__all__ = ["agent_routes", "routes"]

routes: list[BaseRoute] = [
    Mount("/v1", routes=[*api.routes, *links.routes]),
    Mount("/static", app=CheckoutAssets(), name="checkout-static"),
    *subscription_pages.routes,  # before the pages' catch-all
    *pages.routes,
]
agent_routes: list[BaseRoute] = list(agent_pay.routes)
"""``{api_host}/x402/pay/pi_<uuid>``: orders that agents pay over x402 (`x402mw.platform.checkout.agent_pay`)."""
