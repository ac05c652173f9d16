"""``/test-clocks``: clocks a merchant moves by hand, to see a subscription's months in seconds (test mode).

``POST /test-clocks {frozenTime}`` makes one; ``POST /subscriptions`` with ``testClock`` opens a
subscription on it; ``POST /test-clocks/:id/advance {frozenTime}`` moves it forward and answers once
every renewal, reminder, period end and expiry that fell due on it has run. Live keys get 400
``livemode_not_allowed``.
"""

from __future__ import annotations

from starlette.requests import Request

from x402mw.platform.api.auth import authenticate
from x402mw.platform.http.bodies import parse_body, path_uuid, read_json
from x402mw.platform.http.errors import HttpError
from x402mw.platform.http.request_models.clocks import (
    ClockAdvance,
    ClockCreate,
)
from x402mw.platform.http.responses import ModelResponse
from x402mw.platform.http.routing import ApiRoute, Operation
from x402mw.platform.http.state import platform_of
from x402mw.platform.objects.subscriptions import TestClockEnvelope
from x402mw.platform.services.errors import ServiceError
from x402mw.platform.services.merchants import Caller
from x402mw.platform.services.subscriptions.clocks import advance_clock, create_clock, find_clock
from x402mw.platform.services.subscriptions.objects import clock_of


async def _test_caller(request: Request) -> Caller:
    caller = await authenticate(request)
    if caller.livemode:
        raise HttpError(400, "livemode_not_allowed", "Test clocks are for test keys only")
    return caller


async def create(request: Request) -> ModelResponse:
    caller = await _test_caller(request)
    body = parse_body(ClockCreate, await read_json(request))
    platform = platform_of(request)
    clock = await create_clock(platform.engine, caller.merchant_id, body.frozenTime, platform.clock.now())
    return ModelResponse(TestClockEnvelope(test_clock=clock_of(clock)), status_code=201)


def _clock_id(request: Request) -> str:
    return path_uuid(request, "test_clock_id", "test clock")


async def retrieve(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    clock_id = _clock_id(request)
    clock = None if caller.livemode else await find_clock(platform_of(request).engine, caller.merchant_id, clock_id)
    if clock is None:
        raise HttpError.missing("test clock", clock_id)
    return ModelResponse(TestClockEnvelope(test_clock=clock_of(clock)))


async def advance(request: Request) -> ModelResponse:
    caller = await _test_caller(request)
    clock_id = _clock_id(request)
    body = parse_body(ClockAdvance, await read_json(request))
    platform = platform_of(request)
    try:
        clock = await advance_clock(
            platform.engine, platform.renewals, caller.merchant_id, clock_id, body.frozenTime, platform.clock.now()
        )
    except ServiceError as exc:
        raise HttpError(exc.status, exc.code, exc.message, param=exc.param) from None
    if clock is None:
        raise HttpError.missing("test clock", clock_id)
    return ModelResponse(TestClockEnvelope(test_clock=clock_of(clock)))


_TAG = "Test clocks"
routes = [
    ApiRoute(
        "POST",
        "/test-clocks",
        create,
        Operation(
            id="createTestClock",
            tag=_TAG,
            summary="Create a test clock",
            description="Test keys only (400 `livemode_not_allowed`).",
            answer=TestClockEnvelope,
            status=201,
            body=ClockCreate,
        ),
    ),
    ApiRoute(
        "GET",
        "/test-clocks/{test_clock_id}",
        retrieve,
        Operation(
            id="retrieveTestClock", tag=_TAG, summary="Retrieve a test clock", answer=TestClockEnvelope, errors=(404,)
        ),
    ),
    ApiRoute(
        "POST",
        "/test-clocks/{test_clock_id}/advance",
        advance,
        Operation(
            id="advanceTestClock",
            tag=_TAG,
            summary="Advance a test clock",
            description="Moves the clock forward and answers once every renewal invoice, reminder, period end, "
            "cancellation and expiry that falls due on its subscriptions up to the new time has run, "
            "in order. 409 `test_clock_backwards` for a time before the clock's; test keys only.",
            answer=TestClockEnvelope,
            body=ClockAdvance,
            errors=(404, 409),
        ),
    ),
]
