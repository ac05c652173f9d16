"""A Starlette seller: GET /weather costs what its agent endpoint says.

X402MW_API_KEY=sk_test_... X402MW_ENDPOINT_ID=... python examples/starlette_seller.py

(``PORT`` changes its port, 8000.)
"""

from __future__ import annotations

import os

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from x402mw.adapters.starlette import PaymentMiddleware, paid

ENDPOINT_ID = os.environ.get("X402MW_ENDPOINT_ID", "set-X402MW_ENDPOINT_ID")


@paid(ENDPOINT_ID, description="Today's weather")
async def weather(request: Request) -> JSONResponse:
    settlement = request.state.x402
    return JSONResponse({"forecast": "sunny", "transaction": settlement.transaction, "payer": settlement.payer})


async def health(request: Request) -> JSONResponse:
    return JSONResponse({"ok": True})


app = Starlette(
    routes=[Route("/weather", weather), Route("/health", health)],
    middleware=[
        Middleware(
            PaymentMiddleware,
            api_key=os.environ.get("X402MW_API_KEY", ""),
            platform_url=os.environ.get("X402MW_PLATFORM_URL")
            or os.environ.get("X402MW_BASE_URL")
            or "http://127.0.0.1:4402/v1",
        )
    ],
)

if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=int(os.environ.get("PORT", "8000")))
