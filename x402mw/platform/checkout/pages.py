"""The hosted checkout page, rendered on the server (jinja2) and kept current by a small script.

``{checkout_url_base}/pi_<uuid>`` is the form the API hands out. Older links stay valid and render
the same page, without a redirect: ``/payment-intents/<uuid>`` and ``/paylink/<slug>`` (a slug of
``pi_<uuid>`` or a bare UUID). Anything else is a 404 page.

The page works without JavaScript: the coin picker is a form that reloads the page for the chosen
network and coin, and the transfer panel (deposit address, amount, EIP-681 QR code) is in the HTML.
``static/checkout.js`` adds the countdown, copy buttons, polling of ``transfer-status`` that turns the
page to "Paid" once the money has arrived and been confirmed, and, where the order allows wallet
payment and the browser has a wallet (EIP-1193), a button that has the wallet send the transfer and
reports it through ``sync``: for EIP-3009 coins (USDC, EURC) the wallet signs the authorization that
``attempts`` answers and the platform relays it (``POST .../authorizations``), so the buyer needs no
gas; for other coins (USDT), or a wallet that cannot sign typed data, it sends a token transfer.

Embedded (`static/x402mw-checkout.js`): ``?embed=popup|panel&origin=<merchant page origin>`` shows the
same page in the checkout button's popup or the checkout panel's iframe; the page then tells that
origin, and only it, its status and its outcome (``postMessage``), and only that origin may frame it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

import segno
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from x402mw.platform.api.bodies import iso
from x402mw.platform.api.errors import current_request_id
from x402mw.platform.checkout.assets import asset_digest
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
EMBED_MODES = ("popup", "panel")
# An origin as browsers serialise it (``location.origin``): scheme, host, optional port; nothing that
# could end the CSP directive it is written into.
_ORIGIN = re.compile(r"^https?://(?:[a-z0-9-]+(?:\.[a-z0-9-]+)*|\[[0-9a-f:.]+\])(?::[0-9]{1,5})?$")
_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors {ancestors}"
)
_PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
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


@functools.lru_cache(maxsize=4096)
def qr_svg(uri: str) -> Markup:
    """The URI as an inline SVG QR code (dark on a white quiet zone, readable in dark mode too).

    Kept for the next view of the same order: an order's URI changes only when part of it is paid."""
    code = segno.make(uri, error="m")
    svg = code.svg_inline(scale=4, border=4, dark="#111", light="#fff", omitsize=True, svgclass="qr-code")
    return Markup(svg)  # segno's own markup, built from our URI: nothing of the buyer's goes in


def _render(template: str, context: Mapping[str, Any], status: int = 200, *, ancestors: str = "'none'") -> HTMLResponse:
    """The page, with headers that keep it out of caches and frames (``ancestors``: who may frame it)."""
    html = _environment().get_template(template).render(**context)
    headers = {**_PAGE_HEADERS, "Content-Security-Policy": _CSP.format(ancestors=ancestors)}
    return HTMLResponse(html, status_code=status, headers=headers)


def embedding(request: Request) -> tuple[str, str] | None:
    """How checkout.js shows this page, ``(mode, origin of the merchant's page)``, from the query
    (``?embed=popup|panel&origin=...``); None for the plain page, or for a mode or origin that is
    not one (the plain page is shown then, and no message leaves it)."""
    mode = request.query_params.get("embed")
    origin = request.query_params.get("origin", "")
    if mode not in EMBED_MODES or len(origin) > 255 or not _ORIGIN.match(origin):
        return None
    return mode, origin


def _static(request: Request, name: str) -> str:
    return f"{request.url_for('checkout-static', path=name).path}?v={asset_digest(name)}"


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
    embed = embedding(request)
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
        "payment_id": order["id"],
        "embed": embed[0] if embed else "",
        "parent_origin": embed[1] if embed else "",
    }
    # Only the panel is framed, and only by the page that asked for it.
    ancestors = embed[1] if embed and embed[0] == "panel" else "'none'"
    return _render("checkout.html", context, ancestors=ancestors)


def _wallet(request: Request, chosen: PaymentOption, public_id: str, *, only: bool) -> dict[str, Any]:
    """What the page's script needs to have a browser wallet pay: ``attempts``, then the signed
    authorization to the relay (``authorizations``, gasless, EIP-3009 coins) or a transfer to ``sync``."""
    order_path = request.url_for("checkout-payment-intent", payment_id=public_id).path
    return {
        "network": chosen.network,
        "networkName": chosen.chain.network.name,
        "chainId": hex(chosen.chain.chain_id),
        "currency": chosen.asset.symbol,
        "gasless": chosen.asset.eip3009,
        "attemptsUrl": order_path + "/attempts",
        "syncUrl": order_path + "/sync",
        "authorizationsUrl": order_path + "/authorizations",
        "only": only,
    }


def _panel(status: str, open_: bool) -> str:
    if open_:
        return "pay"
    if status == "requires_payment":
        return "closed"  # past expiresAt; the worker marks it expired in a moment
    return {"processing": "processing", "succeeded": "paid"}.get(status, "closed")


async def checkout_page(request: Request) -> HTMLResponse:
    slug: str = request.path_params["slug"]
    if not slug.startswith("pi_"):
        return not_found_page(request)
    return await render_checkout(request, slug)


async def legacy_payment_intent_page(request: Request) -> HTMLResponse:
    return await render_checkout(request, request.path_params["payment_id"])


async def legacy_paylink_page(request: Request) -> HTMLResponse:
    return await render_checkout(request, request.path_params["slug"])


async def unknown_page(request: Request) -> HTMLResponse:
    return not_found_page(request)


routes = [
    Route("/payment-intents/{payment_id}", legacy_payment_intent_page, methods=["GET"], include_in_schema=False),
    Route("/paylink/{slug}", legacy_paylink_page, methods=["GET"], include_in_schema=False),
    Route("/{slug}", checkout_page, methods=["GET"], include_in_schema=False),
    Route("/{path:path}", unknown_page, methods=["GET"], include_in_schema=False),
]
