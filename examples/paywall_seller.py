"""A seller whose 402 is a branded page in a browser: GET /forecast costs what its agent endpoint
says; a browser that opens it gets a page with the seller's name, logo and description and a
**Pay with wallet** button, while agents get the JSON 402 as ever.

X402MW_API_KEY=sk_test_... X402MW_ENDPOINT_ID=... python examples/paywall_seller.py

(``PORT`` changes its port, 8011; ``X402MW_PLATFORM_URL`` the platform, http://127.0.0.1:4402/v1.)
Open http://127.0.0.1:8011/forecast in a browser with a wallet. The logo is served by the app itself
(/static/logo.svg): the page loads nothing from another host. See docs/sellers/paywall.md.
"""

from __future__ import annotations

import os

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from x402mw.adapters.starlette import PaymentMiddleware, paid
from x402mw.seller import Paywall

ENDPOINT_ID = os.environ.get("X402MW_ENDPOINT_ID", "set-X402MW_ENDPOINT_ID")
LOGO = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 64 64">'
    '<path d="M0 44 L22 14 L34 30 L44 18 L64 44 Z" fill="#2b6cb0"/></svg>'
)


@paid(ENDPOINT_ID, description="Tomorrow's forecast by the fjord")
async def forecast(request: Request) -> JSONResponse:
    return JSONResponse({"forecast": "clear skies", "transaction": request.state.x402.transaction})


async def logo(request: Request) -> Response:
    return Response(LOGO, media_type="image/svg+xml")


async def health(request: Request) -> JSONResponse:
    return JSONResponse({"ok": True})


app = Starlette(
    routes=[Route("/forecast", forecast), Route("/static/logo.svg", logo), Route("/health", health)],
    middleware=[
        Middleware(
            PaymentMiddleware,
            api_key=os.environ.get("X402MW_API_KEY", ""),
            platform_url=os.environ.get("X402MW_PLATFORM_URL") or "http://127.0.0.1:4402/v1",
            paywall=Paywall(name="Fjord Weather", logo="/static/logo.svg", description="Forecasts by the fjord"),
        )
    ],
)

if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=int(os.environ.get("PORT", "8011")))
