"""The hosted checkout page, rendered on the server (jinja2) and kept current by a small script.

``{checkout_url_base}/pi_<uuid>`` is the form the API hands out. Older links stay valid and render
the same page, without a redirect: ``/payment-intents/<uuid>`` and ``/paylink/<slug>`` (a slug of
``pi_<uuid>`` or a bare UUID). ``{checkout_url_base}/<prefix><id>`` is dispatched by prefix
(`PAGES`): ``pl_<uuid>``, a payment link, sends its buyer on to an order of their own
(`x402mw.platform.checkout.links`), as ``/paylink/<slug>`` does for a link's slug. Anything else is a
404 page.

The page works without JavaScript: the coin picker is a form that reloads the page for the chosen
network and coin, and the transfer panel (deposit address, amount, EIP-681 QR code) is in the HTML.
``static/checkout.js`` adds the countdown, copy buttons, polling of ``transfer-status`` that turns the
page to "Paid" once the money has arrived and been confirmed, and, where the order allows wallet
payment and the browser has a wallet (EIP-1193), a button that has the wallet send the transfer and
reports it through ``sync``. (Gasless wallet payment, where the wallet signs the EIP-3009
authorization that ``attempts`` answers, is relayed by ``POST …/authorizations``.)
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import segno
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from x402mw import __version__
from x402mw.platform.api.bodies import iso
from x402mw.platform.api.errors import current_request_id
from x402mw.platform.checkout import links
from x402mw.platform.checkout.attempts import prepare_attempt
from x402mw.platform.checkout.orders import (
    PaymentOption,
    awaiting_payment,
    find_order,
    parse_payment_id,
    payment_options,
    public_order_json,
)
from x402mw.platform.runtime import Platform
from x402mw.platform.services.payment_intents import PaymentIntentError

__all__ = ["routes"]

POLL_SECONDS = 3
_HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "form-action 'self'; base-uri 'none'"
    ),
}
_STATUS_TEXT = {
    "requires_payment": "Awaiting payment",
    "processing": "Payment received, confirming",
    "succeeded": "Paid",
    "refunded": "Refunded",
    "canceled": "Cancelled",
    "expired": "Expired",
}


@functools.cache
def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("x402mw.platform.checkout", "templates"),
        autoescape=select_autoescape(["html"]),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["money"] = display_amount
    return env


def display_amount(amount: str) -> str:
    """A decimal string with at least two decimals: ``"12.5"`` → ``"12.50"``, ``"3"`` → ``"3.00"``."""
    whole, _, fraction = amount.partition(".")
    return f"{whole}.{fraction.ljust(2, '0')}"


def qr_svg(uri: str) -> Markup:
    """The URI as an inline SVG QR code (dark on a white quiet zone, readable in dark mode too)."""
    code = segno.make(uri, error="m")
    svg = code.svg_inline(scale=4, border=4, dark="#111", light="#fff", omitsize=True, svgclass="qr-code")
    return Markup(svg)  # segno's own markup, built from our URI: nothing of the buyer's goes in


def _render(template: str, context: Mapping[str, Any], status: int = 200) -> HTMLResponse:
    html = _environment().get_template(template).render(**context)
    return HTMLResponse(html, status_code=status, headers=_HEADERS)


def _static(request: Request, name: str) -> str:
    return f"{request.url_for('checkout-static', path=name).path}?v={__version__}"


def not_found_page(request: Request) -> HTMLResponse:
    context = {"css": _static(request, "checkout.css"), "request_id": current_request_id()}
    return _render("not_found.html", context, status=404)


def _chosen(options: list[PaymentOption], request: Request) -> PaymentOption | None:
    wanted = request.query_params.get("option")
    return next((o for o in options if o.key == wanted), options[0] if options else None)


async def render_checkout(request: Request, raw_id: str) -> HTMLResponse:
    """The checkout page of the order ``raw_id`` names (``pi_<uuid>`` or a UUID), or the 404 page."""
    platform: Platform = request.app.state.platform
    payment_id = parse_payment_id(raw_id)
    order = None
    if payment_id is not None:
        async with platform.engine.connect() as conn:
            order = await find_order(conn, payment_id)
    if order is None:
        return not_found_page(request)
    now = platform.clock.now()
    public = public_order_json(order, platform.chains)
    methods = public["paymentMethods"]
    payable = awaiting_payment(order, now)
    options = payment_options(platform.chains, order)
    chosen = _chosen(options, request)
    public_id = f"pi_{order['id']}"
    transfer: dict[str, Any] | None = None
    wallet: dict[str, Any] | None = None
    problem: str | None = None
    if payable and chosen is None:
        problem = "This payment cannot be made here right now: none of its coins is available."
    elif payable and chosen is not None:
        if methods["transfer"]:
            try:
                transfer = await prepare_attempt(
                    platform.engine,
                    platform.deposit_keys,
                    platform.chains,
                    order,
                    network=chosen.network,
                    currency=chosen.asset.symbol,
                    method="transfer",
                    now=now,
                )
            except PaymentIntentError as exc:  # it changed since it was read: say why
                problem = exc.message
        if methods["wallet"]:
            wallet = _wallet(request, chosen, public_id, only=not methods["transfer"])
    context = {
        "order": public,
        "panel": _panel(order["status"], payable),
        "status_text": _STATUS_TEXT.get(order["status"], order["status"]),
        "options": [
            {"key": o.key, "label": f"{o.asset.symbol} on {o.chain.network.name}", "selected": o is chosen}
            for o in options
        ],
        "transfer": transfer,
        "wallet": wallet,
        "qr": qr_svg(transfer["paymentUri"]) if transfer else None,
        "problem": problem,
        "css": _static(request, "checkout.css"),
        "js": _static(request, "checkout.js"),
        "status_url": request.url_for("checkout-transfer-status", payment_id=public_id).path,
        "poll_seconds": POLL_SECONDS,
        "server_now": iso(now),
    }
    return _render("checkout.html", context)


def _wallet(request: Request, chosen: PaymentOption, public_id: str, *, only: bool) -> dict[str, Any]:
    """What the page's script needs to have a browser wallet pay (``attempts`` then ``sync``)."""
    return {
        "network": chosen.network,
        "networkName": chosen.chain.network.name,
        "currency": chosen.asset.symbol,
        "attemptsUrl": request.url_for("checkout-attempts", payment_id=public_id).path,
        "syncUrl": request.url_for("checkout-sync", payment_id=public_id).path,
        "only": only,
    }


def _panel(status: str, open_: bool) -> str:
    if open_:
        return "pay"
    if status == "requires_payment":
        return "closed"  # past expiresAt; the worker marks it expired in a moment
    return {"processing": "processing", "succeeded": "paid"}.get(status, "closed")


async def payment_link_page(request: Request, raw_id: str) -> Response:
    """``pl_<uuid>``: a payment link sends its buyer on to an order of their own (`links.send_to_order`)."""
    return await _open_link(request, await links.find_link(request.app.state.platform, raw_id))


async def _open_link(request: Request, link: Mapping[Any, Any] | None) -> Response:
    if link is None:
        return not_found_page(request)
    if not link["active"]:
        context = {"css": _static(request, "checkout.css"), "request_id": current_request_id(), "name": link["name"]}
        return _render("link_inactive.html", context, status=410)
    return await links.send_to_order(request, link)


PAGES: dict[str, Callable[[Request, str], Awaitable[Response]]] = {
    "pi_": render_checkout,
    "pl_": payment_link_page,
}
"""The pages of ``{checkout_url_base}/<prefix><id>``, by prefix: ``pi_`` a payment intent, ``pl_`` a
payment link. Each takes the request and the whole path segment."""


async def checkout_page(request: Request) -> Response:
    slug: str = request.path_params["slug"]
    page = PAGES.get(slug[:3])
    if page is None:
        return not_found_page(request)
    return await page(request, slug)


async def legacy_payment_intent_page(request: Request) -> HTMLResponse:
    return await render_checkout(request, request.path_params["payment_id"])


async def legacy_paylink_page(request: Request) -> Response:
    """``/paylink/<slug>``: a payment intent's id (``pi_<uuid>`` or the bare UUID), else a link's slug."""
    slug: str = request.path_params["slug"]
    if slug[:3].lower() == "pl_":
        return await payment_link_page(request, slug)
    if parse_payment_id(slug) is not None:
        return await render_checkout(request, slug)
    return await _open_link(request, await links.find_link(request.app.state.platform, slug=slug))


async def unknown_page(request: Request) -> HTMLResponse:
    return not_found_page(request)


routes = [
    Route("/payment-intents/{payment_id}", legacy_payment_intent_page, methods=["GET"], include_in_schema=False),
    Route("/paylink/{slug}", legacy_paylink_page, methods=["GET"], include_in_schema=False),
    Route("/{slug}", checkout_page, methods=["GET"], include_in_schema=False),
    Route("/{path:path}", unknown_page, methods=["GET"], include_in_schema=False),
]
