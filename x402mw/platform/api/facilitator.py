"""The standard x402 facilitator API under ``{base_url}/x402/``, so that any x402 v2 seller can
verify and settle through this platform: ``POST /verify``, ``POST /settle``, ``GET /supported``.
Verify and settle need the merchant's API key; payments settled here are metered like the rest.

Requirements that carry an x402mw challenge (``extra.challengeId`` and its seal, as the x402mw
seller middleware issues them) belong to the merchant whose middleware issued it: another merchant's
key gets 404 for them, and nothing is verified or settled. A payment settled here is recorded
under the caller, linked to its challenge when it has one.

An ``exact`` payment settled here enters the discovery catalogue under the caller's discoverable
endpoint for it (`Catalogue.endpoint_for`), as the seller middleware's settlements do, with what the
seller said: the endpoint (its URL and name) and the terms (``paymentRequirements``). Nothing of
the payload is listed: its ``resource`` and ``extensions`` (a ``bazaar`` declaration among them)
are the payer's echo, which the payer may change at will.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select
from starlette.requests import Request

from x402mw.platform.api.agents.settlements import conflict_error, unavailable_error
from x402mw.platform.api.auth import authenticate, presented_key
from x402mw.platform.chain.relayer import ChainUnavailable
from x402mw.platform.db import tables
from x402mw.platform.http.bodies import parse_body, read_json
from x402mw.platform.http.errors import HttpError
from x402mw.platform.http.responses import ModelResponse
from x402mw.platform.http.routing import ApiRoute, Operation
from x402mw.platform.http.state import platform_of
from x402mw.platform.objects.agents import SupportedKind, SupportedKindExtra, SupportedKinds, SupportedToken
from x402mw.platform.services.chains import ChainHandle
from x402mw.platform.services.channels.checks import ChannelRefusal
from x402mw.platform.services.channels.facilitator import ChannelFacilitator
from x402mw.platform.services.merchants import Caller
from x402mw.platform.services.settlement.checks import PaymentRefusal
from x402mw.platform.services.settlement.outcomes import SettleRequest, unavailable
from x402mw.platform.services.settlement.payment_identifiers import IdentifierConflict
from x402mw.platform.services.settlement.upto import EIP2612_EXTENSION
from x402mw.protocol.channels import SCHEME as CHANNEL_SCHEME
from x402mw.protocol.models import (
    PaymentPayload,
    PaymentRequirements,
    SettlementResponse,
    UptoPaymentPayload,
    VerifyResponse,
)
from x402mw.protocol.seals import Sealer, sealed_terms


class FacilitatorBody(BaseModel):
    model_config = ConfigDict(extra="ignore")
    x402Version: int = Field(default=2, description="1 or 2")
    paymentPayload: PaymentPayload = Field(description="the buyer's signed payload")
    paymentRequirements: PaymentRequirements = Field(description="the terms the payload must satisfy")


class ChannelFacilitatorBody(BaseModel):
    """A ``batch-settlement`` payment: a deposit, voucher or refund payload (``/verify``, ``/settle``),
    or a server-authored ``claim``, ``settle`` or completed ``refund`` (``/settle``)."""

    model_config = ConfigDict(extra="ignore")
    x402Version: int = 2
    paymentPayload: dict[str, Any]
    paymentRequirements: PaymentRequirements


class UptoFacilitatorBody(BaseModel):
    """An ``upto`` payment: at ``/settle``, ``paymentRequirements.amount`` is the amount to settle."""

    model_config = ConfigDict(extra="ignore")
    x402Version: int = 2
    paymentPayload: UptoPaymentPayload
    paymentRequirements: PaymentRequirements


async def _body(request: Request) -> FacilitatorBody | UptoFacilitatorBody | ChannelFacilitatorBody:
    data = await read_json(request)
    requirements = data.get("paymentRequirements") if isinstance(data, dict) else None
    if isinstance(requirements, dict) and requirements.get("scheme") == "upto":
        return parse_body(UptoFacilitatorBody, data)
    if isinstance(requirements, dict) and requirements.get("scheme") == CHANNEL_SCHEME:
        return parse_body(ChannelFacilitatorBody, data)
    return parse_body(FacilitatorBody, data)


async def _challenge_of(request: Request, caller: Caller, requirements: PaymentRequirements) -> str | None:
    """The x402mw challenge ``requirements`` carry, if any, once it is known to be the caller's;
    404 when it is another merchant's (or its seal is not one the caller's key made)."""
    challenge_id = requirements.extra.get("challengeId")
    if not isinstance(challenge_id, str):
        return None  # requirements of a seller that does not issue x402mw challenges
    platform = platform_of(request)
    challenges, endpoints = tables.agent_challenges, tables.agent_endpoints
    async with platform.engine.connect() as conn:
        owner = (
            await conn.execute(
                select(challenges.c.merchant_id, challenges.c.livemode).where(challenges.c.id == challenge_id[:64])
            )
        ).first()
        if owner is not None:
            if (owner.merchant_id, owner.livemode) == (caller.merchant_id, caller.livemode):
                return challenge_id
            raise _foreign(challenge_id)
        # Not registered yet (sellers register challenges in the background): its seal must be one
        # the calling key made, for one of the caller's endpoints.
        own_endpoints = list((await conn.execute(select(endpoints.c.id).where(*caller.owns(endpoints)))).scalars())
    sealer = Sealer(presented_key(request.headers))
    seal, expires = requirements.extra.get("seal"), requirements.extra.get("expiresAt")
    if not isinstance(expires, int) or isinstance(expires, bool):
        raise _foreign(challenge_id)
    for endpoint_id in own_endpoints:
        terms = sealed_terms(
            challenge_id,
            endpoint_id,
            requirements.network,
            requirements.asset,
            requirements.pay_to,
            requirements.amount,
            requirements.max_timeout_seconds,
            expires,
        )
        if sealer.check(seal, *terms) or sealer.check(seal, *terms, CHANNEL_SCHEME):
            return challenge_id
    raise _foreign(challenge_id)


def _foreign(challenge_id: str) -> HttpError:
    return HttpError.missing("challenge", challenge_id, param="paymentRequirements.extra.challengeId")


async def verify(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    body = await _body(request)
    await _challenge_of(request, caller, body.paymentRequirements)
    platform = platform_of(request)
    if isinstance(body, ChannelFacilitatorBody):
        facilitator = ChannelFacilitator(platform.channels)
        try:
            payer, state = await facilitator.verify(body.paymentRequirements, body.paymentPayload)
        except ChannelRefusal as refusal:
            return ModelResponse(VerifyResponse(is_valid=False, invalid_reason=refusal.reason))
        except (ChainUnavailable, OSError):
            raise unavailable_error(unavailable(body.paymentRequirements.network)) from None
        return ModelResponse(VerifyResponse.model_validate({"isValid": True, "payer": payer, "extra": state}))
    if isinstance(body, UptoFacilitatorBody):
        payer = body.paymentPayload.payload.permit2_authorization.from_address
    else:
        payer = body.paymentPayload.payload.authorization.from_address
    try:
        if isinstance(body, UptoFacilitatorBody):
            payer = await platform.upto.check(
                body.paymentRequirements, body.paymentPayload, x402_version=body.x402Version
            )
        else:
            payer = await platform.settlement.check(
                body.paymentRequirements, body.paymentPayload, x402_version=body.x402Version
            )
    except ChainUnavailable:
        raise unavailable_error(unavailable(body.paymentRequirements.network)) from None
    except PaymentRefusal as refusal:
        return ModelResponse(VerifyResponse(is_valid=False, invalid_reason=refusal.reason, payer=payer))
    return ModelResponse(VerifyResponse(is_valid=True, payer=payer))


async def settle(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    body = await _body(request)
    challenge_id = await _challenge_of(request, caller, body.paymentRequirements)
    platform = platform_of(request)
    if isinstance(body, ChannelFacilitatorBody):
        facilitator = ChannelFacilitator(platform.channels)
        network = body.paymentRequirements.network
        try:
            answer = await facilitator.settle(
                caller.merchant_id, caller.livemode, body.paymentRequirements, body.paymentPayload
            )
        except ChannelRefusal as refusal:
            answer = SettlementResponse(success=False, error_reason=refusal.reason, network=network)
        except (ChainUnavailable, OSError):
            raise unavailable_error(unavailable(network)) from None
        return ModelResponse(answer)
    settle = SettleRequest(
        accepted=body.paymentRequirements,
        payload=body.paymentPayload,
        merchant_id=caller.merchant_id,
        challenge_id=challenge_id,
        resource=(body.paymentPayload.resource.url if body.paymentPayload.resource else ""),
        livemode=caller.livemode,
        wait_seconds=30.0,
    )
    try:
        if isinstance(body, UptoFacilitatorBody):
            outcome = await platform.upto.settle(settle, body.paymentRequirements.amount)
        else:
            outcome = await platform.settlement.settle(settle)
    except IdentifierConflict as conflict:
        raise conflict_error(conflict) from None
    if outcome.status == "unavailable":
        raise unavailable_error(outcome)
    if outcome.status == "settled" and isinstance(body, FacilitatorBody):
        await _catalogue(request, caller, challenge_id, body)
    return ModelResponse(outcome.response)


async def _catalogue(request: Request, caller: Caller, challenge_id: str | None, body: FacilitatorBody) -> None:
    payload, requirements = body.paymentPayload, body.paymentRequirements
    chain = requirements.network.removeprefix("eip155:")
    if not chain.isdigit():
        return
    platform = platform_of(request)
    endpoint = await platform.catalogue.endpoint_for(
        merchant_id=caller.merchant_id,
        livemode=caller.livemode,
        challenge_id=challenge_id,
        resource=payload.resource.url if payload.resource else "",  # picks one of the caller's endpoints
        pay_to=requirements.pay_to,
        chain_id=int(chain),
    )
    if endpoint is None:
        return
    await platform.catalogue.record(
        endpoint,
        accepted=requirements.to_wire(),
        description=endpoint.name,
        mime_type=None,
        seller_extensions=None,  # the standard facilitator call carries no declaration of the seller's
        settled_at=datetime.fromtimestamp(platform.clock.time(), UTC),
    )


async def supported(request: Request) -> ModelResponse:
    chains = list(platform_of(request).chains)
    kinds = [
        SupportedKind(
            x402_version=2,
            scheme="exact",
            network=chain.network.caip2,
            extra=SupportedKindExtra(tokens=_tokens(chain)),
        )
        for chain in chains
    ]
    # upto: what payers sign names the facilitator account that alone may settle it.
    kinds += [
        SupportedKind(
            x402_version=2,
            scheme="upto",
            network=chain.network.caip2,
            extra=SupportedKindExtra(tokens=_tokens(chain), facilitator_address=chain.facilitator.address),
        )
        for chain in chains
    ]
    # batch-settlement: the receiver authorizer that signs claims and refunds for a seller delegating
    # them, the caller's own (named to a caller presenting its API key).
    authorizer = None
    if request.headers.get("authorization") or request.headers.get("x-api-key"):
        caller = await authenticate(request)
        authorizer = await platform_of(request).channels.authorizers.address(caller.merchant_id, caller.livemode)
    kinds += [
        SupportedKind(
            x402_version=2,
            scheme=CHANNEL_SCHEME,
            network=chain.network.caip2,
            extra=SupportedKindExtra(tokens=_tokens(chain), receiver_authorizer=authorizer),
        )
        for chain in chains
    ]
    signers = sorted({a for chain in chains for a in [*chain.relayer.addresses, chain.facilitator.address]})
    return ModelResponse(SupportedKinds(kinds=kinds, extensions=[EIP2612_EXTENSION], signers={"eip155:*": signers}))


def _tokens(chain: ChainHandle) -> list[SupportedToken]:
    """The chain's tokens a payer can sign for (EIP-3009), by symbol, for sellers whose SDK does not know it."""
    return [
        SupportedToken(
            symbol=asset.symbol,
            address=asset.address,
            decimals=asset.decimals,
            name=asset.eip712_name,
            version=asset.eip712_version,
        )
        for asset in chain.network.assets.values()
        if asset.eip3009
    ]


_TAG = "Facilitator"
routes = [
    ApiRoute(
        "POST",
        "/x402/verify",
        verify,
        Operation(
            id="facilitatorVerify",
            tag=_TAG,
            summary="Verify a payment (x402 facilitator)",
            description="Checks the signature, terms and the payer's balance without settling. A payment it refuses "
            "is a 200 with `isValid: false` and the reason in `invalidReason`. Requirements carrying another "
            "merchant's x402mw challenge (`extra.challengeId`) are a 404, and nothing is verified.",
            answer=VerifyResponse,
            body=FacilitatorBody,
            errors=(404,),
        ),
    ),
    ApiRoute(
        "POST",
        "/x402/settle",
        settle,
        Operation(
            id="facilitatorSettle",
            tag=_TAG,
            summary="Settle a payment (x402 facilitator)",
            description="A refused payment is a 200 with `success: false` and the reason in `errorReason`. A "
            "settlement still pending after 30 s answers `success: false`, `errorReason: "
            "settlement_pending` with the transaction; the same request later answers the final result. "
            "Requirements carrying another merchant's x402mw challenge (`extra.challengeId`) are a 404, and "
            "nothing is settled. A `payment-identifier` id already used with another payload is a 409 "
            "`payment_identifier_conflict`; with the same payload it answers the stored settlement.",
            answer=SettlementResponse,
            body=FacilitatorBody,
            errors=(404, 409),
        ),
    ),
    ApiRoute(
        "GET",
        "/x402/supported",
        supported,
        Operation(
            id="facilitatorSupported",
            tag=_TAG,
            summary="List supported payment kinds (x402 facilitator)",
            answer=SupportedKinds,
            public=True,
            standalone=True,
        ),
    ),
]
