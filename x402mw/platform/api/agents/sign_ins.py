"""``POST /agent/sign-ins``: the seller middleware asks whether a sign-in-with-x message lets its
signer back into an endpoint (a settled payment by that address within the route's window).

Answers 200 ``{signedIn: true, payment}`` with the payment that lets it in, or 200
``{signedIn: false, reason, message}`` (``invalid_siwx_signature``, ``invalid_siwx_nonce``,
``siwx_payment_not_found``); the middleware then answers the 402 with that reason.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field, StrictInt
from starlette.requests import Request
from starlette.routing import Route

from x402mw.platform.api.auth import authenticate
from x402mw.platform.http.bodies import parse_body, read_json
from x402mw.platform.http.errors import HttpError
from x402mw.platform.http.fields import Uuid
from x402mw.platform.http.responses import ModelResponse
from x402mw.platform.http.state import platform_of
from x402mw.platform.objects.agents import SignInResult
from x402mw.platform.services.settlement.outcomes import payment_of

__all__ = ["routes"]

_LONGEST_KEPT = timedelta(hours=1)


class SignInBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    endpointId: Uuid
    address: str = Field(pattern=r"^0x[0-9a-fA-F]{40}$")
    message: str = Field(min_length=1, max_length=8192)
    signature: str = Field(pattern=r"^0x(?:[0-9a-fA-F]{2}){65,2048}$")
    nonce: str = Field(pattern=r"^[A-Za-z0-9]{8,128}$")
    keepUntil: StrictInt
    windowSeconds: StrictInt | None = Field(default=None, ge=1, le=100 * 365 * 86_400)


async def sign_in(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    body = parse_body(SignInBody, await read_json(request))
    platform = platform_of(request)
    endpoint = await platform.endpoints.get(caller.merchant_id, caller.livemode, body.endpointId)
    if endpoint is None:
        raise HttpError.missing("agent endpoint", body.endpointId, param="endpointId")
    now = datetime.fromtimestamp(platform.clock.time(), UTC)
    keep_until = min(max(datetime.fromtimestamp(body.keepUntil, UTC), now), now + _LONGEST_KEPT)
    outcome = await platform.sign_ins.sign_in(
        merchant_id=caller.merchant_id,
        livemode=caller.livemode,
        endpoint_id=endpoint.id,
        chain_id=int(endpoint.chain_id),
        address=body.address,
        message=body.message,
        signature=bytes.fromhex(body.signature[2:]),
        nonce=body.nonce,
        keep_until=keep_until,
        window_seconds=body.windowSeconds,
        now=now,
    )
    if outcome.payment is None:
        return ModelResponse(SignInResult(signed_in=False, reason=outcome.reason, message=outcome.message))
    return ModelResponse(SignInResult(signed_in=True, payment=payment_of(outcome.payment)))


routes = [Route("/agent/sign-ins", sign_in, methods=["POST"])]
