"""The hosted checkout page, rendered on the server (jinja2) and kept current by a small script.

``{checkout_url_base}/pi_<uuid>`` is the form the API hands out. Older links stay valid and render
the same page, without a redirect: ``/payment-intents/<uuid>`` and ``/paylink/<slug>`` (a slug of
``pi_<uuid>`` or a bare UUID). ``{checkout_url_base}/<prefix><id>`` is dispatched by prefix
(`PAGES`): ``pl_<uuid>``, a payment link, shows its buyer's own order in place
(`x402mw.platform.checkout.links`), as ``/paylink/<slug>`` does for a link's slug. Anything else is a
404 page. No page of these answers a redirect.

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
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import segno
from jinja2 import Environment
from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from x402mw.platform.checkout import links
from x402mw.platform.checkout.assets import asset_digest
from x402mw.platform.checkout.attempts import prepare_attempt
from x402mw.platform.checkout.orders import (
    PaymentOption,
    awaiting_payment,
    find_order,
    parse_payment_id,
    payment_options,
    public_order_of,
)
from x402mw.platform.http.state import platform_of
from x402mw.platform.request_ids import current_request_id
from x402mw.platform.services.payment_intents import PaymentIntentError
from x402mw.platform.templates import template_environment
from x402mw.platform.timestamps import iso

if TYPE_CHECKING:
    from x402mw.platform.runtime import Platform

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


class _PageCache:
    """The last ``size`` pages rendered, by everything they are made of (least recently used out)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._pages: OrderedDict[Hashable, str] = OrderedDict()

    def get(self, key: Hashable) -> str | None:
        html = self._pages.get(key)
        if html is not None:
            self._pages.move_to_end(key)
        return html

    def put(self, key: Hashable, html: str) -> None:
        self._pages[key] = html
        self._pages.move_to_end(key)
        while len(self._pages) > self._size:
            self._pages.popitem(last=False)


_PAGES = _PageCache(1024)  # about 10 kB each
_SERVER_NOW = "@@server-now@@"  # written into a kept page at each view


@functools.cache
def _environment() -> Environment:
    env = template_environment("x402mw.platform.checkout")
    env.filters["money"] = display_amount
    env.filters["day"] = display_day
    return env


def display_amount(amount: str) -> str:
    """How a page shows an amount, whatever scale it was sent or computed at: two decimals, more only
    where the amount has them: ``"12.5"`` → ``"12.50"``, ``"3"`` → ``"3.00"``, ``"9.900"`` →
    ``"9.90"``, ``"0.125"`` → ``"0.125"``. One format, so that a page's header, its transfer amount
    and what its Copy button copies read alike."""
    whole, _, fraction = amount.partition(".")
    return f"{whole}.{fraction.rstrip('0').ljust(2, '0')}"


def display_day(timestamp: str) -> str:
    """An ISO 8601 instant (as the public order carries it) as its UTC day: ``"1 December 2026"``."""
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).strftime("%-d %B %Y")


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


@dataclass(frozen=True, slots=True)
class _Paths:
    """Where the checkout's static files and API are, as the page links them (from the routes)."""

    static: str  # ".../static/"
    orders: str  # ".../v1/payment-intents/"


_PATHS: dict[tuple[str, str], _Paths] = {}


def _paths(request: Request) -> _Paths:
    """The checkout's paths, worked out once per mount point: ``url_for`` walks every route."""
    key = (request.scope.get("root_path", ""), request.scope.get("app_root_path", ""))
    found = _PATHS.get(key)
    if found is None:
        static = request.url_for("checkout-static", path="-").path[:-1]
        orders = request.url_for("checkout-payment-intent", payment_id="-").path[:-1]
        found = _PATHS[key] = _Paths(static, orders)
    return found


def _static(request: Request, name: str) -> str:
    return f"{_paths(request).static}{name}?v={asset_digest(name)}"


def not_found_page(request: Request) -> HTMLResponse:
    context = {"css": _static(request, "checkout.css"), "request_id": current_request_id()}
    return _render("not_found.html", context, status=404)


def _chosen(options: list[PaymentOption], request: Request) -> PaymentOption | None:
    wanted = request.query_params.get("option")
    return next((o for o in options if o.key == wanted), options[0] if options else None)


async def render_checkout(request: Request, raw_id: str) -> HTMLResponse:
    """The checkout page of the order ``raw_id`` names (``pi_<uuid>`` or a UUID), or the 404 page.

    The order is read on every view (the page must say what is true now), in one statement without a
    transaction around it; the page made of it is kept (`_PAGES`) for the next view of the same order
    in the same state, shown the same way, with only the server's clock written in afresh."""
    platform = platform_of(request)
    payment_id = parse_payment_id(raw_id)
    order = None
    if payment_id is not None:
        async with platform.engine.connect() as conn:
            reading = await conn.execution_options(isolation_level="AUTOCOMMIT")  # no BEGIN/ROLLBACK trips
            order = await find_order(reading, payment_id)
    if order is None:
        return not_found_page(request)
    now = platform.clock.now()
    embed = embedding(request)
    paths = _paths(request)
    key = (repr(tuple(order.values())), awaiting_payment(order, now), request.query_params.get("option"), embed, paths)
    html = _PAGES.get(key)
    if html is None:
        html, keep = await _checkout_html(request, platform, order, now, embed)
        if keep:
            _PAGES.put(key, html)
    # Only the panel is framed, and only by the page that asked for it.
    ancestors = embed[1] if embed and embed[0] == "panel" else "'none'"
    headers = {**_PAGE_HEADERS, "Content-Security-Policy": _CSP.format(ancestors=ancestors)}
    return HTMLResponse(html.replace(_SERVER_NOW, iso(now)), headers=headers)


async def _checkout_html(
    request: Request, platform: Platform, order: Mapping[Any, Any], now: datetime, embed: tuple[str, str] | None
) -> tuple[str, bool]:
    """The page of ``order``, and whether it may be kept (not when it had to say something went wrong)."""
    public = public_order_of(order, platform.chains).model_dump(mode="json")  # as the checkout API answers it
    methods = public["paymentMethods"]
    payable = awaiting_payment(order, now)
    options = payment_options(platform.chains, order)
    chosen = _chosen(options, request)
    orders_path = f"{_paths(request).orders}pi_{order['id']}"
    transfer: dict[str, Any] | None = None
    wallet: dict[str, Any] | None = None
    problem: str | None = None
    if payable and chosen is None:
        problem = "This payment cannot be made here right now: none of its coins is available."
    elif payable and chosen is not None:
        if methods["transfer"]:
            try:
                attempt = await prepare_attempt(
                    platform.engine,
                    platform.deposit_keys,
                    platform.chains,
                    order,
                    network=chosen.network,
                    currency=chosen.asset.symbol,
                    method="transfer",
                    now=now,
                )
                transfer = attempt.model_dump(mode="json")
            except PaymentIntentError as exc:  # it changed since it was read: say why
                problem = exc.message
        if methods["wallet"]:
            wallet = _wallet(orders_path, chosen, only=not methods["transfer"])
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
        "wallet_js": _static(request, "wallet.js"),
        "js": _static(request, "checkout.js"),
        "status_url": orders_path + "/transfer-status",
        "poll_seconds": POLL_SECONDS,
        "server_now": _SERVER_NOW,
        "payment_id": order["id"],
        "embed": embed[0] if embed else "",
        "parent_origin": embed[1] if embed else "",
    }
    return _environment().get_template("checkout.html").render(**context), problem is None


def _wallet(order_path: str, chosen: PaymentOption, *, only: bool) -> dict[str, Any]:
    """What the page's script needs to have a browser wallet pay: ``attempts``, then the signed
    authorization to the relay (``authorizations``, gasless, EIP-3009 coins) or a transfer to ``sync``."""
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


async def payment_link_page(request: Request, raw_id: str) -> Response:
    """``pl_<uuid>``: a payment link shows its buyer's own order in place (`links.buyers_order`)."""
    return await _open_link(request, await links.find_link(platform_of(request), raw_id))


async def _open_link(request: Request, link: Mapping[Any, Any] | None) -> Response:
    if link is None:
        return not_found_page(request)
    if not link["active"]:
        context = {"css": _static(request, "checkout.css"), "request_id": current_request_id(), "name": link["name"]}
        return _render("link_inactive.html", context, status=410)
    order = await links.buyers_order(request, link)
    response = await render_checkout(request, f"pi_{order['id']}")
    links.remember_order(response, request, link, order)
    return response


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
    return await _open_link(request, await links.find_link(platform_of(request), slug=slug))


async def unknown_page(request: Request) -> HTMLResponse:
    return not_found_page(request)


routes = [
    Route("/payment-intents/{payment_id}", legacy_payment_intent_page, methods=["GET"], include_in_schema=False),
    Route("/paylink/{slug}", legacy_paylink_page, methods=["GET"], include_in_schema=False),
    Route("/{slug}", checkout_page, methods=["GET"], include_in_schema=False),
    Route("/{path:path}", unknown_page, methods=["GET"], include_in_schema=False),
]
