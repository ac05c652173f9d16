"""The hosted subscription pages, rendered on the server (jinja2), in the checkout's look.

- ``{checkout_url_base}/su_<plan id or slug>`` (a plan's ``checkoutUrl``): the subscribe page. It shows
  the plan and asks for an email; the form opens a subscription and continues to its first invoice's
  hosted checkout, and the customer is emailed their subscription page link. The merchant's id of the
  customer is the ``?customer=`` appended to the link, else the email. The page never hands a visitor
  an existing subscription: when the (plan, customer) pair has an open one, it is reached only through
  a ``?customer=`` the merchant signed (`x402mw.protocol.customer_signatures`: then the visitor is led
  to its page), or else by email: the page sends its link to the address on file.
- ``{checkout_url_base}/subscriptions/<token>`` (`CustomerLinks`): one subscription's page for its
  customer: status, the paid period, the open invoice with its pay button, past invoices with their
  transactions, and a form to cancel at the end of the period.

Both work without JavaScript (they have none). Forms are protected from cross-site posting by a
token bound to the form's purpose and time (`CustomerLinks.form_token`) and by what the browser says
of the post's origin (``Sec-Fetch-Site``, or ``Origin``), which must be the checkout's own. A
subscribe form's token is good for one post (`spend_form_token`), and its posts count against the
public rate limits (`x402mw.platform.checkout.rate_limits`).
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlencode, urlsplit

from jinja2 import Environment
from sqlalchemy import select
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from x402mw._version import __version__
from x402mw.platform.checkout.pages import display_amount, not_found_page
from x402mw.platform.db import tables
from x402mw.platform.http.fields import EMAIL_PATTERN, MAX_EMAIL
from x402mw.platform.http.state import platform_of
from x402mw.platform.request_ids import current_request_id
from x402mw.platform.services.errors import ServiceError
from x402mw.platform.services.payment_intents import DECIMALS
from x402mw.platform.services.subscriptions.customer_links import merchant_signed, spend_form_token
from x402mw.platform.services.subscriptions.plans import find_plan_by_ref
from x402mw.platform.services.subscriptions.steps import aware
from x402mw.platform.templates import template_environment
from x402mw.platform.timestamps import iso
from x402mw.protocol.prices import format_amount

if TYPE_CHECKING:
    from x402mw.platform.runtime import Platform

__all__ = ["routes"]

MAX_FORM_BYTES = 16 * 1024
MAX_CUSTOMER_ID = 500
_EMAIL = re.compile(EMAIL_PATTERN)
_HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",  # the customer page's URL is its key: never sent elsewhere
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; base-uri 'none'; "
        "frame-ancestors 'none'"
    ),
}
_PER = {"weekly": "week", "monthly": "month", "quarterly": "quarter", "yearly": "year"}
_STATUS_TEXT = {
    "incomplete": "Awaiting the first payment",
    "active": "Active",
    "past_due": "Past due: the renewal is unpaid",
    "canceled": "Cancelled",
    "expired": "Expired",
}


@functools.cache
def _environment() -> Environment:
    env = template_environment("x402mw.platform.checkout")
    env.filters["money"] = display_amount
    env.filters["day"] = lambda value: value.strftime("%-d %B %Y") if value else ""
    env.filters["short_day"] = lambda value: value.strftime("%-d %b %Y") if value else ""
    env.filters["short_hash"] = lambda value: f"{value[:6]}…{value[-4:]}" if len(value) > 12 else value
    return env


def _render(request: Request, template: str, context: Mapping[str, Any], status: int = 200) -> HTMLResponse:
    def static(name: str) -> str:
        return f"{request.url_for('checkout-static', path=name).path}?v={__version__}"

    full = {"css": static("checkout.css"), "page_css": static("subscriptions.css"), **context}
    return HTMLResponse(_environment().get_template(template).render(**full), status_code=status, headers=_HEADERS)


async def _form(request: Request) -> dict[str, str] | None:
    """The posted urlencoded form (first value of each field), or None for anything else."""
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
        return None
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            return None
    try:
        fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
    except (UnicodeDecodeError, ValueError):
        return None
    return {name: values[0] for name, values in fields.items()}


def _same_origin(request: Request, platform: Platform) -> bool:
    """False when the browser says the form was posted from another site: by ``Sec-Fetch-Site``, or
    else by ``Origin`` (which is ``null`` under the pages' ``no-referrer`` policy, saying nothing)."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site in ("same-origin", "none")
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return True
    checkout = urlsplit(platform.settings.checkout_url_base)
    return origin in (f"{checkout.scheme}://{checkout.netloc}", f"{request.url.scheme}://{request.url.netloc}")


def _refused_page(request: Request, title: str, message: str, status: int) -> HTMLResponse:
    context = {"title": title, "message": message, "request_id": current_request_id()}
    return _render(request, "subscription_problem.html", context, status)


def _plan_view(plan: Mapping[str, Any], merchant: str) -> dict[str, Any]:
    return {
        "name": plan["name"],
        "merchant": merchant,
        "amount": format_amount(plan["amount_minor"], DECIMALS),
        "currency": plan["currency"],
        "per": _PER[plan["interval"]],
        "livemode": bool(plan["livemode"]),
    }


async def _merchant_name(platform: Platform, merchant_id: str) -> str:
    merchants = tables.merchants
    async with platform.engine.connect() as conn:
        name = await conn.scalar(select(merchants.c.name).where(merchants.c.id == merchant_id))
    return str(name or "")


def _signed(request: Request) -> tuple[str, str] | None:
    """The link's ``expires`` and ``signature`` (the merchant's signature of its ``customer``), if any."""
    expires, signature = request.query_params.get("expires"), request.query_params.get("signature")
    if expires is None and signature is None:
        return None
    return expires or "", signature or ""


async def _vouched(platform: Platform, plan: Mapping[str, Any], customer: str, signed: tuple[str, str]) -> bool:
    merchant, livemode, now = plan["merchant_id"], plan["livemode"], platform.clock.now()
    return await merchant_signed(platform.engine, merchant, livemode, customer, *signed, now)


def _expired_link(request: Request) -> HTMLResponse:
    return _refused_page(
        request, "This link has expired", "Please go back to the shop and follow its subscribe link again.", 400
    )


async def subscribe_page(request: Request) -> Response:
    platform = platform_of(request)
    plan = await find_plan_by_ref(platform.engine, request.path_params["ref"])
    if plan is None:
        return not_found_page(request)
    view = _plan_view(plan, await _merchant_name(platform, plan["merchant_id"]))
    customer = request.query_params.get("customer", "")
    signed = _signed(request)
    if signed is not None and not await _vouched(platform, plan, customer, signed):
        return _expired_link(request)
    email, problem = "", None
    if request.method == "POST":
        form = await _form(request)
        purpose = f"subscribe:{plan['id']}"
        now = platform.clock.now()
        if form is None or not _same_origin(request, platform):
            return _refused_page(request, "Form not accepted", "Please reload the page and try again.", 400)
        token = form.get("token", "")
        if not platform.subscriptions.links.check_form_token(purpose, token, now):
            return _refused_page(request, "This form has expired", "Please reload the page and try again.", 400)
        email, customer = form.get("email", "").strip(), form.get("customer", "")
        if len(email) > MAX_EMAIL or not _EMAIL.fullmatch(email):
            problem = "Enter an email address, such as name@example.com."
        elif len(customer) > MAX_CUSTOMER_ID or "\x00" in customer:
            return _refused_page(request, "Form not accepted", "This subscription link is not valid.", 400)
        elif signed is not None and not await _vouched(platform, plan, customer, signed):
            return _expired_link(request)
        elif not await spend_form_token(platform.engine, token, now):
            return _refused_page(request, "This form was sent already", "Please reload the page and try again.", 400)
        else:
            return await _subscribe(request, platform, plan, view, email, customer or email, vouched=signed is not None)
    if not plan["active"] and problem is None:
        return _refused_page(request, "Not available", "This plan is no longer offered. Please ask the shop.", 409)
    query = {"customer": customer} if customer else {}
    if signed is not None:
        query |= {"expires": signed[0], "signature": signed[1]}
    context = {
        "plan": view,
        "email": email,
        "customer": customer,
        "problem": problem,
        "token": platform.subscriptions.links.form_token(f"subscribe:{plan['id']}", platform.clock.now()),
        "action": request.url.path + ("?" + urlencode(query) if query else ""),
    }
    return _render(request, "subscribe.html", context, 400 if problem else 200)


async def _subscribe(
    request: Request,
    platform: Platform,
    plan: Mapping[str, Any],
    view: Mapping[str, Any],
    email: str,
    customer: str,
    *,
    vouched: bool,
) -> Response:
    """Open a subscription for a new (plan, customer) pair and continue to its first invoice's checkout.
    An open one is reached only with the merchant's signature (``vouched``); otherwise its page link
    goes by email to the address on file, and the visitor is told so, whoever they are."""
    service = platform.subscriptions
    try:
        opened = await service.open(
            plan["merchant_id"], plan["livemode"], plan["id"], customer, email, vouched=vouched, confirm=True
        )
    except ServiceError as exc:
        if exc.code == "plan_inactive":
            return _refused_page(request, "Not available", "This plan is no longer offered. Please ask the shop.", 409)
        if exc.code == "customer_unverified":
            message = f"Please ask {view['merchant']} for help with your subscription."
            return _refused_page(request, "This subscription cannot be opened here", message, 409)
        raise
    sub = opened.subscription
    if opened.created or vouched:  # the visitor's own new subscription, or the merchant says it is theirs
        first = opened.order if opened.created else None
        target = service.links.page_url(str(sub["id"])) if first is None else f"{service.base}/pi_{first['id']}"
        return RedirectResponse(target, 303)
    if sub["customer_email"]:
        await service.email_access(sub)
        message = (
            "There is a subscription to this plan for you already. We have sent the link to it (to see, pay "
            "or cancel it) to the email address it was opened with."
        )
    else:
        message = f"There is a subscription to this plan for you already. Please ask {view['merchant']} for its link."
    return _render(request, "subscription_sent.html", {"plan": view, "message": message})


async def _subscription_for(request: Request) -> tuple[Platform, dict[str, Any] | None]:
    platform = platform_of(request)
    sub_id = platform.subscriptions.links.subscription_of(request.path_params["token"])
    if sub_id is None:
        return platform, None
    subs, plans, merchants = tables.subscriptions, tables.subscription_plans, tables.merchants
    async with platform.engine.connect() as conn:
        found = (
            (
                await conn.execute(
                    select(
                        subs,
                        plans.c.name.label("plan_name"),
                        plans.c.amount_minor.label("plan_amount"),
                        plans.c.currency.label("plan_currency"),
                        plans.c.interval,
                        plans.c.livemode.label("plan_livemode"),
                        plans.c.return_url.label("plan_return_url"),
                        merchants.c.name.label("merchant_name"),
                    )
                    .join(plans, plans.c.id == subs.c.plan_id)
                    .join(merchants, merchants.c.id == subs.c.merchant_id)
                    .where(subs.c.id == sub_id)
                )
            )
            .mappings()
            .first()
        )
    return platform, None if found is None else aware(found)


async def customer_page(request: Request) -> Response:
    platform, sub = await _subscription_for(request)
    if sub is None:
        return not_found_page(request)
    base = platform.settings.checkout_url_base
    invoices, intents, transfers = tables.subscription_invoices, tables.payment_intents, tables.incoming_transfers
    async with platform.engine.connect() as conn:
        rows = [
            aware(row)
            for row in (
                await conn.execute(
                    select(invoices, intents.c.status.label("order_status"), intents.c.tx_hash)
                    .join(intents, intents.c.id == invoices.c.payment_intent_id)
                    .where(invoices.c.subscription_id == sub["id"])
                    .order_by(invoices.c.period.desc())
                    .limit(36)
                )
            ).mappings()
        ]
        paid_with: dict[str, list[str]] = {}
        order_ids = [row["payment_intent_id"] for row in rows]
        if order_ids:
            found = await conn.execute(
                select(transfers.c.payment_intent_id, transfers.c.tx_hash)
                .where(transfers.c.payment_intent_id.in_(order_ids), transfers.c.status == "counted")
                .order_by(transfers.c.block_number)
            )
            for order_id, tx in found:
                paid_with.setdefault(order_id, []).append(tx)
    open_invoice = next((row for row in rows if row["id"] == sub["open_invoice_id"] and row["status"] == "open"), None)
    past = [
        {
            "period": row["period"],
            "amount": format_amount(row["amount_minor"], DECIMALS),
            "currency": row["currency"],
            "status": {"paid": "Paid", "void": "Void", "open": "Unpaid"}[row["status"]],
            "start": row["period_start"],
            "end": row["period_end"],
            "paid_at": row["paid_at"],
            "transactions": paid_with.get(row["payment_intent_id"]) or ([row["tx_hash"]] if row["tx_hash"] else []),
        }
        for row in rows
        if row is not open_invoice
    ]
    can_cancel = sub["status"] == "active" and not sub["cancel_at_period_end"]
    context = {
        "sub": sub,
        "status_text": _STATUS_TEXT[sub["status"]],
        "plan": {
            "name": sub["plan_name"],
            "merchant": sub["merchant_name"],
            "amount": format_amount(sub["plan_amount"], DECIMALS),
            "currency": sub["plan_currency"],
            "per": _PER[sub["interval"]],
            "livemode": bool(sub["livemode"]),
            "return_url": sub["plan_return_url"],
        },
        "open_invoice": None
        if open_invoice is None
        else {
            "amount": format_amount(open_invoice["amount_minor"], DECIMALS),
            "currency": open_invoice["currency"],
            "period": open_invoice["period"],
            "end": open_invoice["period_end"],
            "pay_url": f"{base}/pi_{open_invoice['payment_intent_id']}",
            "processing": open_invoice["order_status"] == "processing",
        },
        "invoices": past,
        "can_cancel": can_cancel,
        "cancel_url": request.url_for("subscription-cancel", token=request.path_params["token"]).path,
        "token": platform.subscriptions.links.form_token(f"cancel:{sub['id']}", platform.clock.now())
        if can_cancel
        else "",
        "notice": "Your subscription will end when the paid period ends."
        if request.query_params.get("canceled") == "1" and sub["cancel_at_period_end"]
        else None,
        "updated": iso(sub["updated_at"]),
    }
    return _render(request, "subscription.html", context)


async def cancel_at_period_end(request: Request) -> Response:
    platform, sub = await _subscription_for(request)
    if sub is None:
        return not_found_page(request)
    form = await _form(request)
    if form is None or not _same_origin(request, platform):
        return _refused_page(request, "Form not accepted", "Please reload the page and try again.", 400)
    links = platform.subscriptions.links
    if not links.check_form_token(f"cancel:{sub['id']}", form.get("token", ""), platform.clock.now()):
        return _refused_page(request, "This form has expired", "Please reload the page and try again.", 400)
    with contextlib.suppress(ServiceError):  # ended, or not active, meanwhile: the page shows how it is now
        await platform.subscriptions.cancel(sub["merchant_id"], sub["livemode"], sub["id"], at_period_end=True)
    page = request.url_for("subscription-page", token=request.path_params["token"]).path
    return RedirectResponse(page + "?canceled=1", 303)


routes = [
    Route("/su_{ref}", subscribe_page, methods=["GET", "POST"], include_in_schema=False),
    Route("/subscriptions/{token}", customer_page, methods=["GET"], name="subscription-page", include_in_schema=False),
    Route(
        "/subscriptions/{token}/cancel",
        cancel_at_period_end,
        methods=["POST"],
        name="subscription-cancel",
        include_in_schema=False,
    ),
]
