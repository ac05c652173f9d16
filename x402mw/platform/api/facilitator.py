"""The standard x402 facilitator API under ``{base_url}/x402/``, so that any x402 v2 seller can
verify and settle through this platform: ``POST /verify``, ``POST /settle``, ``GET /supported``.
Verify and settle need the merchant's API key; payments settled here are metered like the rest."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from x402mw.platform import metrics
from x402mw.platform.api.auth import authenticate
from x402mw.platform.api.bodies import parse_body, read_json
from x402mw.platform.services.settlement import Refusal, SettleRequest
from x402mw.protocol import reasons
from x402mw.protocol.models import PaymentPayload, PaymentRequirements

__all__ = ["routes"]


class FacilitatorBody(BaseModel):
    model_config = ConfigDict(extra="ignore")
    x402Version: int = 2
    paymentPayload: PaymentPayload
    paymentRequirements: PaymentRequirements


async def _body(request: Request) -> FacilitatorBody:
    return parse_body(FacilitatorBody, await read_json(request))


async def verify(request: Request) -> JSONResponse:
    await authenticate(request)
    body = await _body(request)
    service = request.app.state.platform.settlement
    payer = body.paymentPayload.payload.authorization.from_address
    network = service.network_label(body.paymentRequirements.network)
    try:
        if body.x402Version not in (1, 2):
            raise Refusal(reasons.INVALID_X402_VERSION, "unsupported x402Version")
        verified = service.verify(body.paymentRequirements, body.paymentPayload)
        await service.check_on_chain(verified, body.paymentRequirements.asset)
    except Refusal as refusal:
        metrics.count_verification(network, refusal.reason)
        return JSONResponse({"isValid": False, "invalidReason": refusal.reason, "payer": payer})
    metrics.count_verification(network, None)
    return JSONResponse({"isValid": True, "payer": verified.payer})


async def settle(request: Request) -> JSONResponse:
    caller = await authenticate(request)
    body = await _body(request)
    platform = request.app.state.platform
    outcome = await platform.settlement.settle(
        SettleRequest(
            accepted=body.paymentRequirements,
            payload=body.paymentPayload,
            merchant_id=caller.merchant_id,
            resource=(body.paymentPayload.resource.url if body.paymentPayload.resource else ""),
            livemode=caller.livemode,
            wait_seconds=30.0,
        )
    )
    response: dict[str, Any] = outcome.response.to_wire()
    return JSONResponse(response)


async def supported(request: Request) -> JSONResponse:
    chains = list(request.app.state.platform.chains)
    kinds = [
        {"x402Version": version, "scheme": "exact", "network": chain.network.caip2}
        for chain in chains
        for version in (2,)
    ]
    signers = sorted({chain.relayer.address for chain in chains})
    return JSONResponse({"kinds": kinds, "extensions": [], "signers": {"eip155:*": signers}})


routes = [
    Route("/x402/verify", verify, methods=["POST"]),
    Route("/x402/settle", settle, methods=["POST"]),
    Route("/x402/supported", supported, methods=["GET"]),
]
