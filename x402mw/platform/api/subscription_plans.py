"""``/subscription-plans``: reusable prices per interval that subscriptions are opened on (spec 2.3, 4.3)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from x402mw.platform.api.auth import authenticate
from x402mw.platform.api.payment_intents import require_takeable
from x402mw.platform.db import tables
from x402mw.platform.db.models import new_id
from x402mw.platform.http.bodies import parse_body, path_uuid, read_json
from x402mw.platform.http.errors import HttpError
from x402mw.platform.http.pagination import list_answer
from x402mw.platform.http.request_models.payment_intents import sent_text
from x402mw.platform.http.request_models.subscription_plans import (
    PlanCreate,
    PlanUpdate,
)
from x402mw.platform.http.responses import ModelResponse
from x402mw.platform.http.routing import LIST_PARAMS, ApiRoute, Operation, enum, query
from x402mw.platform.http.state import platform_of
from x402mw.platform.objects.subscriptions import SubscriptionPlanEnvelope, SubscriptionPlanList
from x402mw.platform.services.errors import ServiceError
from x402mw.platform.services.subscriptions.objects import plan_of
from x402mw.platform.services.subscriptions.plans import create_plan, find_plan, update_plan


def _answer(plan: Any, checkout_url_base: str, status_code: int = 200) -> ModelResponse:
    return ModelResponse(SubscriptionPlanEnvelope(plan=plan_of(plan, checkout_url_base)), status_code)


def _refused(exc: ServiceError) -> HttpError:
    return HttpError(exc.status, exc.code, exc.message, param=exc.param)


async def create(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    data = await read_json(request)
    body = parse_body(PlanCreate, data)
    platform = platform_of(request)
    require_takeable(platform, caller.livemode, body.currency)
    now = platform.clock.now()
    row = {
        "id": new_id(),
        "merchant_id": caller.merchant_id,
        "livemode": caller.livemode,
        "name": body.name,
        "slug": body.slug,
        "amount_minor": body.amount,
        "amount_text": sent_text(data["amount"]),
        "currency": body.currency,
        "interval": body.interval,
        "active": True,
        "grace_days": body.graceDays,
        "return_url": body.returnUrl,
        "created_at": now,
        "updated_at": now,
    }
    try:
        plan = await create_plan(platform.engine, row)
    except ServiceError as exc:
        raise _refused(exc) from None
    return _answer(plan, platform.settings.checkout_url_base, 201)


def _found(plan: Any, plan_id: str, checkout_url_base: str) -> ModelResponse:
    """The plan's answer, or 404 when the merchant has no plan ``plan_id``."""
    if plan is None:
        raise HttpError.missing("plan", plan_id)
    return _answer(plan, checkout_url_base)


def _plan_id(request: Request) -> str:
    return path_uuid(request, "plan_id", "plan")


async def retrieve(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    plan_id = _plan_id(request)
    platform = platform_of(request)
    plan = await find_plan(platform.engine, caller.merchant_id, caller.livemode, plan_id)
    return _found(plan, plan_id, platform.settings.checkout_url_base)


async def update(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    plan_id = _plan_id(request)
    data = await read_json(request)
    body = parse_body(PlanUpdate, data)
    names = {
        "name": "name",
        "amount": "amount_minor",
        "active": "active",
        "graceDays": "grace_days",
        "returnUrl": "return_url",
    }
    changes = {names[key]: value for key, value in body.changes().items()}
    if "amount_minor" in changes:
        changes["amount_text"] = sent_text(data["amount"])
    platform = platform_of(request)
    plan = await update_plan(
        platform.engine, caller.merchant_id, caller.livemode, plan_id, changes, platform.clock.now()
    )
    return _found(plan, plan_id, platform.settings.checkout_url_base)


async def list_plans(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    platform = platform_of(request)
    table = tables.subscription_plans
    filters = caller.owns(table)
    active = request.query_params.get("active")
    if active is not None:
        if active not in ("true", "false"):
            raise HttpError(400, "parameter_invalid", "active must be true or false", param="active")
        filters.append(table.c.active == (active == "true"))
    base = platform.settings.checkout_url_base
    return await list_answer(
        platform.engine, table, filters, request, lambda row: plan_of(row, base), SubscriptionPlanList
    )


_TAG = "Subscription plans"
routes = [
    ApiRoute(
        "POST",
        "/subscription-plans",
        create,
        Operation(
            id="createSubscriptionPlan",
            tag=_TAG,
            summary="Create a plan",
            description="Send customers to its `checkoutUrl` (the hosted subscribe page), or open subscriptions with "
            "`POST /v1/subscriptions`. 409 `slug_taken` when another of your plans has the slug; 400 "
            "`currency_unavailable` when no chain of the platform carries the coin.",
            answer=SubscriptionPlanEnvelope,
            status=201,
            body=PlanCreate,
            errors=(409,),
        ),
    ),
    ApiRoute(
        "GET",
        "/subscription-plans",
        list_plans,
        Operation(
            id="listSubscriptionPlans",
            tag=_TAG,
            summary="List plans",
            description="Newest first.",
            answer=SubscriptionPlanList,
            parameters=[
                *LIST_PARAMS,
                query("active", "only active (`true`) or inactive (`false`) plans", enum("true", "false")),
            ],
            errors=(400, 404),
        ),
    ),
    ApiRoute(
        "GET",
        "/subscription-plans/{plan_id}",
        retrieve,
        Operation(
            id="retrieveSubscriptionPlan",
            tag=_TAG,
            summary="Retrieve a plan",
            answer=SubscriptionPlanEnvelope,
            errors=(404,),
        ),
    ),
    ApiRoute(
        "PATCH",
        "/subscription-plans/{plan_id}",
        update,
        Operation(
            id="updateSubscriptionPlan",
            tag=_TAG,
            summary="Update a plan",
            description="`name`, `amount`, `active` and `graceDays`. A new amount applies to invoices opened "
            "afterwards; invoices already open keep theirs.",
            answer=SubscriptionPlanEnvelope,
            body=PlanUpdate,
            errors=(404,),
        ),
    ),
]
