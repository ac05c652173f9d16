"""Plans, subscriptions and their customers, payment links: made and changed through the same
request models and services as the API (``PlanCreate``, ``PaymentLinkCreate``, `create_plan`,
`create_payment_link`, `SubscriptionService.cancel`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol
from urllib.parse import quote

from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.responses import Response
from starlette.routing import Route

from x402mw.platform.dashboard.web import Ctx, PageError, missing, page, problem, see
from x402mw.platform.db.models import new_id
from x402mw.platform.http.fields import is_uuid
from x402mw.platform.http.request_models.payment_intents import PaymentMethodsIn, sent_text
from x402mw.platform.http.request_models.payment_links import PaymentLinkCreate
from x402mw.platform.http.request_models.subscription_plans import PlanCreate
from x402mw.platform.http.values import whole_number
from x402mw.platform.services.errors import ServiceError
from x402mw.platform.services.payment_intents import amount_text
from x402mw.platform.services.payment_links import (
    create_payment_link,
    deactivate_payment_link,
    newest_payment_links,
    payment_link_of,
)
from x402mw.platform.services.subscriptions.listings import newest_subscriptions, subscription_with_invoices
from x402mw.platform.services.subscriptions.objects import plan_of
from x402mw.platform.services.subscriptions.plans import create_plan, newest_plans, update_plan

SUB_STATUSES = ("incomplete", "active", "past_due", "canceled", "expired")


def _id(ctx: Ctx, name: str, kind: str) -> str:
    value = str(ctx.request.path_params[name])
    if not is_uuid(value):
        raise missing(kind)
    return value.lower()


# --- the create forms of plans and links ---------------------------------------------------------------


class _Created(Protocol):
    """What a plan and a payment link's request models share (``PlanCreate``, ``PaymentLinkCreate``)."""

    @property
    def name(self) -> str: ...
    @property
    def slug(self) -> str | None: ...
    @property
    def amount(self) -> int: ...
    @property
    def currency(self) -> str: ...


def _row(ctx: Ctx, body: _Created, **columns: Any) -> dict[str, Any]:
    """The new active row of ``body`` in this mode, with its own ``columns``."""
    now = ctx.platform.clock.now()
    return {
        "id": new_id(),
        "merchant_id": ctx.merchant_id,
        "livemode": ctx.livemode,
        "name": body.name,
        "slug": body.slug,
        "amount_minor": body.amount,
        "currency": body.currency,
        "active": True,
        "created_at": now,
        "updated_at": now,
        **columns,
    }


async def _create(
    ctx: Ctx,
    read: Callable[[], tuple[str, dict[str, Any]]],
    create: Callable[[AsyncEngine, dict[str, Any]], Awaitable[Any]],
    again: Callable[..., Awaitable[Response]],
    event: str,
    listing: str,
    noun: str,
) -> Response:
    """A create form: ``read`` parses it through the API's request model into a name and a row,
    ``create`` is the API's service; a refusal shows the list page ``again`` with the problem (400
    for the form, 409 from the service), a success goes back to the list with a notice."""
    try:
        name, row = read()
        await create(ctx.platform.engine, row)
    except (ValidationError, ServiceError) as exc:
        return await again(ctx, 409 if isinstance(exc, ServiceError) else 400, error=problem(exc))
    await ctx.audit(event, row["id"])
    return see(f"/dashboard/{listing}?notice=" + quote(f"{noun} {name} created."))


# --- plans -------------------------------------------------------------------------------------------


async def _plans_page(ctx: Ctx, status: int = 200, *, error: str = "") -> Response:
    base = ctx.platform.settings.checkout_url_base
    rows = await newest_plans(ctx.platform.engine, ctx.merchant_id, ctx.livemode)
    plans = [plan_of(r._mapping, base) for r in rows]
    return ctx.page("plans.html", status, plans=plans, error=error)


@page()
async def plans(ctx: Ctx) -> Response:
    return await _plans_page(ctx)


@page("catalog")
async def plans_create(ctx: Ctx) -> Response:
    def plan() -> tuple[str, dict[str, Any]]:
        grace = ctx.field("grace_days")
        days = whole_number(grace)
        body = PlanCreate(
            name=ctx.field("name"),
            amount=ctx.field("amount"),
            currency=ctx.field("currency"),  # type: ignore[arg-type]
            interval=ctx.field("interval"),  # type: ignore[arg-type]
            slug=ctx.field("slug") or None,
            # a number only when it is one (ASCII digits); else the text, which the model refuses
            graceDays=(grace or None) if days is None else days,  # type: ignore[arg-type]
        )
        return body.name, _row(ctx, body, interval=body.interval, grace_days=body.graceDays)

    return await _create(ctx, plan, create_plan, _plans_page, "plan_created", "plans", "Plan")


@page("catalog")
async def plans_active(ctx: Ctx) -> Response:
    plan_id = _id(ctx, "plan_id", "plan")
    active = ctx.field("active") == "true"
    now = ctx.platform.clock.now()
    found = await update_plan(ctx.platform.engine, ctx.merchant_id, ctx.livemode, plan_id, {"active": active}, now)
    if found is None:
        raise missing("plan")
    await ctx.audit("plan_activated" if active else "plan_deactivated", plan_id)
    return see("/dashboard/plans?notice=" + quote("Plan updated."))


# --- subscriptions and customers ---------------------------------------------------------------------


@page()
async def subscriptions(ctx: Ctx) -> Response:
    status = ctx.request.query_params.get("status", "")
    customer = ctx.request.query_params.get("customer", "").strip()[:500]
    rows = await newest_subscriptions(
        ctx.platform.engine,
        ctx.merchant_id,
        ctx.livemode,
        status=status if status in SUB_STATUSES else None,
        customer=customer or None,
    )
    return ctx.page("subscriptions.html", rows=rows, statuses=SUB_STATUSES, chosen=status, customer=customer)


async def _subscription(ctx: Ctx) -> tuple[Any, list[Any]]:
    sub_id = _id(ctx, "subscription_id", "subscription")
    found = await subscription_with_invoices(ctx.platform.engine, ctx.merchant_id, ctx.livemode, sub_id)
    if found is None:
        raise missing("subscription")
    return found


@page()
async def subscription(ctx: Ctx) -> Response:
    row, invoices = await _subscription(ctx)
    return ctx.page("subscription.html", s=row, invoices=invoices, amount=amount_text)


@page("payments")
async def subscription_cancel(ctx: Ctx) -> Response:
    row, _ = await _subscription(ctx)
    at_period_end = ctx.field("when") == "period_end"
    try:
        done = await ctx.platform.subscriptions.cancel(
            ctx.merchant_id, ctx.livemode, row.id, at_period_end=at_period_end
        )
    except ServiceError as exc:
        await ctx.audit("subscription_cancel", row.id, outcome="refused", detail=exc.message)
        raise PageError(exc.status, exc.message, action="subscription_cancel_refused") from None
    if done is None:
        raise missing("subscription")
    await ctx.audit("subscription_cancel", row.id, detail="period_end" if at_period_end else "now")
    note = "It ends with its paid period." if at_period_end else "Canceled."
    return see(f"/dashboard/subscriptions/{row.id}?notice=" + quote(note))


# --- payment links -----------------------------------------------------------------------------------


async def _links_page(ctx: Ctx, status: int = 200, *, error: str = "") -> Response:
    base = ctx.platform.payment_intents.checkout_url_base
    rows = await newest_payment_links(ctx.platform.engine, ctx.merchant_id, ctx.livemode)
    links = [payment_link_of(r._mapping, base) for r in rows]
    return ctx.page("links.html", status, links=links, error=error)


@page()
async def links(ctx: Ctx) -> Response:
    return await _links_page(ctx)


@page("catalog")
async def links_create(ctx: Ctx) -> Response:
    def link() -> tuple[str, dict[str, Any]]:
        amount = ctx.field("amount")
        body = PaymentLinkCreate(
            name=ctx.field("name"),
            amount=amount,  # type: ignore[arg-type]
            currency=ctx.field("currency"),  # type: ignore[arg-type]
            slug=ctx.field("slug") or None,
            successUrl=ctx.field("success_url") or None,
        )
        row = _row(
            ctx,
            body,
            amount_text=sent_text(amount),
            accepted_currencies=[body.currency],
            payment_methods=PaymentMethodsIn().model_dump(),
            success_url=body.successUrl,
            cancel_url=None,
            link_metadata={},
        )
        return body.name, row

    return await _create(ctx, link, create_payment_link, _links_page, "payment_link_created", "links", "Link")


@page("catalog")
async def links_deactivate(ctx: Ctx) -> Response:
    link_id = _id(ctx, "link_id", "payment link")
    now = ctx.platform.clock.now()
    if not await deactivate_payment_link(ctx.platform.engine, ctx.merchant_id, ctx.livemode, link_id, now):
        raise missing("payment link")
    await ctx.audit("payment_link_deactivated", link_id)
    return see("/dashboard/links?notice=" + quote("Link deactivated."))


routes = [
    Route("/plans", plans, methods=["GET"], include_in_schema=False),
    Route("/plans", plans_create, methods=["POST"], include_in_schema=False),
    Route("/plans/{plan_id}/active", plans_active, methods=["POST"], include_in_schema=False),
    Route("/subscriptions", subscriptions, methods=["GET"], include_in_schema=False),
    Route("/subscriptions/{subscription_id}", subscription, methods=["GET"], include_in_schema=False),
    Route("/subscriptions/{subscription_id}/cancel", subscription_cancel, methods=["POST"], include_in_schema=False),
    Route("/links", links, methods=["GET"], include_in_schema=False),
    Route("/links", links_create, methods=["POST"], include_in_schema=False),
    Route("/links/{link_id}/deactivate", links_deactivate, methods=["POST"], include_in_schema=False),
]
