"""Opening a payment link: its page (``{checkout_url_base}/pl_<id>`` and ``/paylink/<slug>``) and the
public ``POST /checkout/v1/payment-links/:linkId/payment-intents``.

The page gives the buyer an order of their own and shows that order's checkout page in place, at the
link's own address (never a redirect: spec 2.1 keeps ``/paylink/<slug>`` working as it is, and the
``pl_`` form behaves the same). So that reloading or reopening the link (or choosing another coin on
its page, a form that reloads the same address) does not mint an order each time, the order's id is
kept in a cookie of the link (``x402mw_pl_<link id>``, path ``/checkout``, HttpOnly, SameSite=Lax) for
the order's lifetime: while that order can still be paid (or its payment is being confirmed) the
link shows it again; once it is paid, cancelled or expired, the link opens a new one (a buyer may buy
again). The order's own ``checkoutUrl`` (``pi_<id>``) shows the same page. A deactivated link shows a
page saying so (410).

The public endpoint mints an order on every call (a panel or a script opening the link) and answers
its public form (201); 409 ``payment_link_inactive`` for a deactivated link. Both are rate-limited per
client address (`x402mw.platform.checkout.rate_limits`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import Response

from x402mw.platform.checkout.orders import awaiting_payment, find_order, parse_payment_id, public_order_of
from x402mw.platform.http.errors import HttpError
from x402mw.platform.http.responses import ModelResponse
from x402mw.platform.http.routing import ApiRoute, Operation
from x402mw.platform.http.state import platform_of
from x402mw.platform.objects.checkout import CheckoutPaymentIntent
from x402mw.platform.services.payment_intents import PaymentIntentError
from x402mw.platform.services.payment_links import (
    LINK_ORDER_LIFETIME,
    find_payment_link,
    find_payment_link_by_slug,
    open_payment_link,
)

if TYPE_CHECKING:
    from x402mw.platform.runtime import Platform

__all__ = ["COOKIE_PREFIX", "buyers_order", "find_link", "parse_link_id", "remember_order", "routes"]

COOKIE_PREFIX = "x402mw_pl_"


def parse_link_id(raw: str) -> str | None:
    """The bare UUID in ``pl_<uuid>`` or ``<uuid>`` (canonical form, any case), or None."""
    text = raw[3:] if raw[:3].lower() == "pl_" else raw
    try:
        canonical = str(uuid.UUID(text))
    except ValueError:
        return None
    return canonical if canonical == text.lower() else None


async def _link(platform: Platform, link_id: str | None) -> Mapping[Any, Any] | None:
    if link_id is None:
        return None
    async with platform.engine.connect() as conn:
        return await find_payment_link(conn, link_id)


async def open_link_api(request: Request) -> ModelResponse:
    platform = platform_of(request)
    raw = request.path_params["link_id"]
    link = await _link(platform, parse_link_id(raw))
    if link is None:
        raise HttpError.missing("payment link", raw)
    try:
        order = await open_payment_link(platform.payment_intents, link, platform.clock.now())
    except PaymentIntentError as exc:
        raise HttpError(exc.status, exc.code, exc.message, param=exc.param) from None
    async with platform.engine.connect() as conn:
        stored = await find_order(conn, order["id"])
    assert stored is not None
    return ModelResponse(public_order_of(stored, platform.chains), status_code=201)


async def _reusable(platform: Platform, link: Mapping[Any, Any], request: Request) -> Mapping[Any, Any] | None:
    """The order this buyer's cookie holds for ``link``, while it can still be paid or is being confirmed."""
    payment_id = parse_payment_id(request.cookies.get(_cookie(link), ""))
    if payment_id is None:
        return None
    async with platform.engine.connect() as conn:
        order = await find_order(conn, payment_id)
    if order is None or order["payment_link_id"] != link["id"]:
        return None
    if awaiting_payment(order, platform.clock.now()) or order["status"] == "processing":
        return order
    return None


async def find_link(
    platform: Platform, raw_id: str | None = None, *, slug: str | None = None
) -> Mapping[Any, Any] | None:
    """The link ``pl_<uuid>`` (or a bare UUID) names, or the link ``/paylink/<slug>`` names (the
    slug and its merchant, or an old bare slug); None when none does."""
    if slug is not None:
        if len(slug) > 64 + 1 + 36:
            return None
        async with platform.engine.connect() as conn:
            return await find_payment_link_by_slug(conn, slug)
    return await _link(platform, parse_link_id(raw_id or ""))


async def buyers_order(request: Request, link: Mapping[Any, Any]) -> Mapping[Any, Any]:
    """The order of this buyer of the active ``link``: the one their cookie holds, or one made now."""
    platform = platform_of(request)
    order = await _reusable(platform, link, request)
    if order is None:
        order = await open_payment_link(platform.payment_intents, link, platform.clock.now())
    return order


def remember_order(response: Response, request: Request, link: Mapping[Any, Any], order: Mapping[Any, Any]) -> None:
    """Keep ``order`` in the buyer's cookie of ``link``, for the order's lifetime."""
    base: str = platform_of(request).payment_intents.checkout_url_base
    parts = urlsplit(base)
    response.set_cookie(
        _cookie(link),
        f"pi_{order['id']}",
        max_age=int(LINK_ORDER_LIFETIME.total_seconds()),
        path=parts.path or "/",
        secure=parts.scheme == "https",
        httponly=True,
        samesite="lax",
    )


def _cookie(link: Mapping[Any, Any]) -> str:
    return COOKIE_PREFIX + str(link["id"]).replace("-", "")


routes = [
    ApiRoute(
        "POST",
        "/payment-links/{link_id}/payment-intents",
        open_link_api,
        Operation(
            id="openCheckoutPaymentLink",
            tag="Checkout",
            summary="Open a payment link",
            description="Makes a payment intent of the link's for one buyer and answers it (the link's page does the "
            "same, keeping the order in a cookie). 409 `payment_link_inactive` when the merchant deactivated it.",
            answer=CheckoutPaymentIntent,
            status=201,
            public=True,
            errors=(404, 409, 429),
        ),
        name="checkout-open-payment-link",
    ),
]
