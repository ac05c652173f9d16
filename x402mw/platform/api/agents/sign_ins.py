"""``POST /agent/sign-ins``: the seller middleware asks whether a sign-in-with-x message lets its
signer back into an endpoint (a settled payment by that address within the route's window).

Answers 200 ``{signedIn: true, payment}`` with the payment that lets it in, or 200
``{signedIn: false, reason, message}`` (``invalid_siwx_signature``, ``invalid_siwx_nonce``,
``siwx_payment_not_found``, ``invalid_siwx_expired``); the middleware then answers the 402 with
that reason.

``keepUntil`` is the message's expiry as the middleware computed it (its ``expirationTime``,
bounded by ``issuedAt`` + 5 minutes: `x402mw.seller.sign_in.nonce_kept_until`); the nonce is kept
until then. A message said to stay valid for more than `LONGEST_KEPT` from now is refused rather
than kept for less: purging its nonce early would let it sign in again.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field, StrictInt
from starlette.requests import Request

from x402mw.platform.api.auth import authenticate
from x402mw.platform.http.bodies import parse_body, read_json
from x402mw.platform.http.errors import HttpError
from x402mw.platform.http.fields import Uuid
from x402mw.platform.http.responses import ModelResponse
from x402mw.platform.http.routing import ApiRoute, Operation
from x402mw.platform.http.state import platform_of
from x402mw.platform.objects.agents import SignInResult
from x402mw.platform.services.settlement.outcomes import payment_of

__all__ = ["LONGEST_KEPT", "routes"]

LONGEST_KEPT = timedelta(hours=1)
"""The longest a used nonce is kept: the longest a message may stay valid from now."""


class SignInBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    endpointId: Uuid = Field(description="the agent endpoint being signed into")
    address: str = Field(pattern=r"^0x[0-9a-fA-F]{40}$", description="the address the message names")
    message: str = Field(min_length=1, max_length=8192, description="the EIP-4361 message text that was signed")
    signature: str = Field(
        pattern=r"^0x(?:[0-9a-fA-F]{2}){65,2048}$",
        description="EIP-191 signature of the message (or a smart account's EIP-1271/6492 one), 0x hex",
    )
    nonce: str = Field(pattern=r"^[A-Za-z0-9]{8,128}$", description="the message's nonce: each is accepted once")
    keepUntil: StrictInt = Field(
        description="Unix time (seconds) until which the nonce is kept (at most an hour from now)"
    )
    windowSeconds: StrictInt | None = Field(
        default=None,
        ge=1,
        le=100 * 365 * 86_400,
        description="how recent a payment lets the address in; null: any settled payment",
    )


async def sign_in(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    body = parse_body(SignInBody, await read_json(request))
    platform = platform_of(request)
    endpoint = await platform.endpoints.get(caller.merchant_id, caller.livemode, body.endpointId)
    if endpoint is None:
        raise HttpError.missing("agent endpoint", body.endpointId, param="endpointId")
    now = datetime.fromtimestamp(platform.clock.time(), UTC)
    keep_until = max(datetime.fromtimestamp(body.keepUntil, UTC), now)
    if keep_until > now + LONGEST_KEPT:
        return ModelResponse(
            SignInResult(
                signed_in=False,
                reason="invalid_siwx_expired",
                message="the sign-in message stays valid too long: sign one that expires within the hour",
            )
        )
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


routes = [
    ApiRoute(
        "POST",
        "/agent/sign-ins",
        sign_in,
        Operation(
            id="createSignIn",
            tag="Agent payments",
            summary="Sign a paying wallet back in (sign-in-with-x)",
            description="The seller middleware's check of a `SIGN-IN-WITH-X` message: the signature (EIP-191, or a "
            "smart account's EIP-1271 / ERC-6492), the nonce (accepted once, in every process) and a "
            "settled payment by that address for the endpoint within `windowSeconds`. A refusal is a 200 "
            "with `signedIn: false` and the reason.",
            answer=SignInResult,
            body=SignInBody,
            errors=(404,),
        ),
    )
]
