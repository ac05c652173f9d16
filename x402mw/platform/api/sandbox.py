"""``/sandbox``: test-mode helpers, refused for live keys.

- ``POST /sandbox/faucet`` mints test coins on the dev chain or on a local node whose token minter the
  platform holds (anvil);
- ``POST /sandbox/payment-intents/:paymentId/simulate-payment`` makes a real transfer to the order's
  deposit address from a fresh wallet, in one of the scenarios ``exact``, ``underpaid``, ``overpaid``,
  ``late`` (the order is expired first) or ``wrong_asset``, and answers once the platform has seen it.
"""

from __future__ import annotations

from starlette.requests import Request

from x402mw.platform.api.auth import authenticate
from x402mw.platform.http.bodies import PAYMENT_PREFIX, parse_body, path_uuid, read_json
from x402mw.platform.http.errors import HttpError
from x402mw.platform.http.request_models.sandbox import FaucetBody, SimulatePaymentBody
from x402mw.platform.http.responses import ModelResponse
from x402mw.platform.http.routing import ApiRoute, Operation
from x402mw.platform.http.state import platform_of
from x402mw.platform.objects.payments import FaucetTransfer, SandboxPayment
from x402mw.platform.services.sandbox import fund


async def faucet(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    if caller.livemode:
        raise HttpError(400, "livemode_not_allowed", "The sandbox is for test keys only")
    body = parse_body(FaucetBody, await read_json(request))
    platform = platform_of(request)
    return ModelResponse(await fund(platform.chains, body.network, body.currency, body.address, body.amount))


async def simulate_payment(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    if caller.livemode:
        raise HttpError(400, "livemode_not_allowed", "The sandbox is for test keys only")
    payment_id = path_uuid(request, "payment_id", "payment intent", prefix=PAYMENT_PREFIX)
    body = parse_body(SimulatePaymentBody, await read_json(request, allow_empty=True) or {})
    platform = platform_of(request)
    paid = await platform.simulate_payment(caller, payment_id, body.scenario, body.network)
    return ModelResponse(paid)


_TAG = "Sandbox"
routes = [
    ApiRoute(
        "POST",
        "/sandbox/faucet",
        faucet,
        Operation(
            id="sandboxFaucet",
            tag=_TAG,
            summary="Mint test coins",
            description="Test keys only. Mints test USDC or EURC on the dev chain or on a local node whose token "
            "minter the platform holds.",
            answer=FaucetTransfer,
            body=FaucetBody,
        ),
    ),
    ApiRoute(
        "POST",
        "/sandbox/payment-intents/{payment_id}/simulate-payment",
        simulate_payment,
        Operation(
            id="sandboxSimulatePayment",
            tag=_TAG,
            summary="Simulate a payment",
            description="Test keys only. Sends a real transfer from a fresh wallet to the order's deposit address on "
            "a test chain and answers once the platform has seen it. 409 `payment_intent_unexpected_state` "
            "unless the order awaits payment.",
            answer=SandboxPayment,
            body=SimulatePaymentBody,
            errors=(404, 409),
        ),
    ),
]
