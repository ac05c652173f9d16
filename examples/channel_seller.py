"""A seller paid through payment channels (the x402 ``batch-settlement`` scheme): the agent deposits
once, then pays each request with an off-chain voucher; the platform's worker claims many channels'
vouchers in one transaction and pays the merchant in one transfer.

Create an agent endpoint that takes channels (its 402 then offers ``batch-settlement`` beside
``exact``; ``"only": true`` offers channels alone)::

    curl -X POST $X402MW_PLATFORM_URL/agent/endpoints -H "Authorization: Bearer $X402MW_API_KEY" \\
        -H "Content-Type: application/json" -d '{"name": "Quotes", "resourceUrl": "http://127.0.0.1:8000/quote",
        "chainId": 31337, "currency": "USDC", "payoutAddress": "0x...", "amountMinor": "1000",
        "channel": {"minDepositMinor": "10000", "withdrawDelaySeconds": 900}}'

then run this file from any folder::

    X402MW_API_KEY=sk_test_... X402MW_ENDPOINT_ID=... python path/to/examples/channel_seller.py --port 8000

(``X402MW_PLATFORM_URL`` defaults to a local ``x402mw platform serve``.) Each paid response's
``PAYMENT-RESPONSE`` carries ``extra.chargedAmount`` and ``extra.channelState`` (the channel's
charged total and balance); its ``transaction`` is the deposit's on the request that made one, and
empty on the others: no transaction is sent per request. ``GET /v1/agent/channels`` shows what each
channel was charged and what the chain claimed and settled. A metered endpoint (``pricingMode:
"metered"``) charges what ``request.state.x402.charge(...)`` reported, up to its ceiling.
"""

from __future__ import annotations

import argparse
import os

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from x402mw.adapters.starlette import PaymentMiddleware, paid

ENDPOINT_ID = os.environ.get("X402MW_ENDPOINT_ID", "set-X402MW_ENDPOINT_ID")
QUOTES = [
    "Pay for what you use.",
    "One deposit, many requests.",
    "A voucher is a promise the chain can keep.",
]


@paid(ENDPOINT_ID, description="A quote, paid per request through a payment channel")
async def quote(request: Request) -> JSONResponse:
    payment = request.state.x402  # the request's charge on the channel (the price, for a fixed endpoint)
    number = sum(request.query_params.get("q", "").encode()) % len(QUOTES)
    return JSONResponse({"quote": QUOTES[number], "payer": payment.payer, "charged": payment.amount})


async def health(request: Request) -> JSONResponse:
    return JSONResponse({"ok": True})


app = Starlette(
    routes=[Route("/quote", quote), Route("/health", health)],
    middleware=[
        Middleware(
            PaymentMiddleware,
            api_key=os.environ.get("X402MW_API_KEY", ""),
            platform_url=os.environ.get("X402MW_PLATFORM_URL", "http://127.0.0.1:4402/v1"),
        )
    ],
)


if __name__ == "__main__":
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    arguments = parser.parse_args()
    uvicorn.run(app, host=arguments.host, port=arguments.port, log_level="warning")
