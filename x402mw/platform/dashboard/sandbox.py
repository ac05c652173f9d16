"""The sandbox, in test mode only: the faucet, simulating a payment of a test order, test clocks.
Each goes through the same request model and service as its API operation
(`x402mw.platform.services.sandbox`, `x402mw.platform.services.subscriptions.clocks`)."""

from __future__ import annotations

from urllib.parse import quote

from pydantic import ValidationError
from starlette.responses import Response
from starlette.routing import Route

from x402mw.platform.dashboard.web import Ctx, PageError, missing, page, problem, see
from x402mw.platform.http.fields import is_uuid
from x402mw.platform.http.request_models.clocks import ClockAdvance, ClockCreate
from x402mw.platform.http.request_models.sandbox import FaucetBody, SimulatePaymentBody
from x402mw.platform.services.errors import ServiceError
from x402mw.platform.services.merchants import Caller
from x402mw.platform.services.sandbox import fund
from x402mw.platform.services.subscriptions.clocks import advance_clock, create_clock, find_clock, newest_clocks

SCENARIOS = ("exact", "underpaid", "overpaid", "late", "wrong_asset")


def _test_only(ctx: Ctx) -> Caller:
    if ctx.livemode:
        raise PageError(404, "The sandbox is in test mode only.", action="not_found")
    return ctx.caller


async def _page(ctx: Ctx, status: int = 200, *, error: str = "", done: str = "") -> Response:
    clocks = await newest_clocks(ctx.platform.engine, ctx.merchant_id)
    networks = [c.network.caip2 for c in ctx.platform.chains if not c.livemode]
    return ctx.page(
        "sandbox.html", status, clocks=clocks, networks=networks, scenarios=SCENARIOS, error=error, done=done
    )


@page()
async def sandbox(ctx: Ctx) -> Response:
    _test_only(ctx)
    return await _page(ctx)


@page("developers")
async def faucet(ctx: Ctx) -> Response:
    _test_only(ctx)
    try:
        body = FaucetBody(
            network=ctx.field("network"),
            currency=ctx.field("currency"),  # type: ignore[arg-type]
            address=ctx.field("address"),
            amount=ctx.field("amount"),
        )
        sent = await fund(ctx.platform.chains, body.network, body.currency, body.address, body.amount)
    except (ValidationError, ServiceError) as exc:
        return await _page(ctx, 400, error=problem(exc))
    await ctx.audit("sandbox_faucet", body.address, detail=f"{sent.amount} {sent.currency}")
    return await _page(ctx, done=f"Sent {sent.amount} {sent.currency} to {sent.address} ({sent.transaction}).")


@page("developers")
async def simulate_payment(ctx: Ctx) -> Response:
    caller = _test_only(ctx)
    payment_id = ctx.field("payment_id").lower()
    if not is_uuid(payment_id):
        raise missing("payment")
    platform = ctx.platform
    try:
        body = SimulatePaymentBody(scenario=ctx.field("scenario") or "exact")  # type: ignore[arg-type]
        paid = await platform.simulate_payment(caller, payment_id, body.scenario, body.network)
    except ValidationError as exc:
        return await _page(ctx, 400, error=problem(exc))
    except ServiceError as exc:
        if exc.status == 404:
            raise missing("payment") from None
        return await _page(ctx, exc.status if exc.status in (400, 409) else 400, error=problem(exc))
    await ctx.audit("sandbox_payment", payment_id, detail=body.scenario)
    note = f"Paid {paid.amount} {paid.currency} ({body.scenario}): the order is {paid.payment_intent.status}."
    return see(f"/dashboard/payments/{payment_id}?notice=" + quote(note))


@page("developers")
async def clock_create(ctx: Ctx) -> Response:
    _test_only(ctx)
    try:
        body = ClockCreate(frozenTime=ctx.field("frozen_time"))
        clock = await create_clock(ctx.platform.engine, ctx.merchant_id, body.frozenTime, ctx.platform.clock.now())
    except (ValidationError, ServiceError) as exc:
        return await _page(ctx, 400, error=problem(exc))
    await ctx.audit("test_clock_created", clock["id"])
    return see("/dashboard/sandbox?notice=" + quote("Test clock created."))


@page("developers")
async def clock_advance(ctx: Ctx) -> Response:
    _test_only(ctx)
    clock_id = str(ctx.request.path_params["test_clock_id"])
    if not is_uuid(clock_id) or await find_clock(ctx.platform.engine, ctx.merchant_id, clock_id.lower()) is None:
        raise missing("test clock")
    try:
        body = ClockAdvance(frozenTime=ctx.field("frozen_time"))
        clock = await advance_clock(
            ctx.platform.engine,
            ctx.platform.renewals,
            ctx.merchant_id,
            clock_id.lower(),
            body.frozenTime,
            ctx.platform.clock.now(),
        )
    except (ValidationError, ServiceError) as exc:
        return await _page(ctx, 400 if isinstance(exc, ValidationError) else exc.status, error=problem(exc))
    if clock is None:
        raise missing("test clock")
    await ctx.audit("test_clock_advanced", clock_id)
    return see("/dashboard/sandbox?notice=" + quote("Test clock advanced."))


routes = [
    Route("/sandbox", sandbox, methods=["GET"], include_in_schema=False),
    Route("/sandbox/faucet", faucet, methods=["POST"], include_in_schema=False),
    Route("/sandbox/simulate-payment", simulate_payment, methods=["POST"], include_in_schema=False),
    Route("/sandbox/test-clocks", clock_create, methods=["POST"], include_in_schema=False),
    Route("/sandbox/test-clocks/{test_clock_id}/advance", clock_advance, methods=["POST"], include_in_schema=False),
]
