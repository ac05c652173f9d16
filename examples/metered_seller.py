"""A metered seller: ``POST /generate`` charges per generated token, up to what the agent signed.

Create a metered agent endpoint (``pricingMode: "metered"``, ``maxAmountMinor``: the most one
request may cost), then run this file from any folder::

    X402MW_API_KEY=sk_test_... X402MW_ENDPOINT_ID=... python path/to/examples/metered_seller.py --port 8000

(``X402MW_PLATFORM_URL`` defaults to a local ``x402mw platform serve``.) An agent pays with the
``upto`` scheme: it signs the endpoint's ceiling, the platform holds the payment while the handler
runs, and settles what the handler reported with ``request.state.x402.charge(...)`` as the
response starts; the response's ``PAYMENT-RESPONSE`` says what was charged, with the platform's
signed receipt (amount and ceiling). A request that generates nothing is charged nothing and sends
no transaction::

    x402mw pay --max-amount 0.05 -X POST -d '{"prompt": "tell me about x402", "maxTokens": 40}' \\
        http://127.0.0.1:8000/generate
"""

from __future__ import annotations

import argparse
import os
from decimal import Decimal

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from x402mw.adapters.starlette import PaymentMiddleware, paid

ENDPOINT_ID = os.environ.get("X402MW_ENDPOINT_ID", "set-X402MW_ENDPOINT_ID")
PRICE_PER_TOKEN = Decimal("0.0001")  # USDC: 100 atomic units
VOCABULARY = [
    "the",
    "agent",
    "pays",
    "for",
    "what",
    "it",
    "uses",
    "and",
    "not",
    "a",
    "token",
    "more",
    "so",
    "metered",
    "routes",
    "settle",
    "after",
]


def generate_tokens(prompt: str, limit: int) -> list[str]:
    """A stand-in for a language model: ``limit`` words, deterministic in ``prompt``."""
    seed = sum(prompt.encode())
    return [VOCABULARY[(seed + index * 7) % len(VOCABULARY)] for index in range(limit)]


@paid(ENDPOINT_ID, description="Text generation, charged per token")
async def generate(request: Request) -> JSONResponse:
    payment = request.state.x402  # a MeteredPayment: the ceiling the agent signed, and charge()
    body = await request.json()
    wanted = max(0, min(int(body.get("maxTokens", 20)), 1000))
    per_token = int(PRICE_PER_TOKEN * 10**payment.decimals)
    affordable = payment.ceiling // per_token  # never generate more than the agent agreed to pay for
    tokens = generate_tokens(str(body.get("prompt", "")), min(wanted, affordable))
    for _token in tokens:
        payment.charge(per_token)
    return JSONResponse({"text": " ".join(tokens), "tokens": len(tokens), "charged": payment.charged})


async def health(request: Request) -> JSONResponse:
    return JSONResponse({"ok": True})


app = Starlette(
    routes=[Route("/generate", generate, methods=["POST"]), Route("/health", health)],
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
