"""A seller that lets payers back in (sign-in-with-x): GET /report costs what its agent endpoint
says, and a wallet that paid for it gets in again for a day by signing a message, without paying.

X402MW_API_KEY=sk_test_... X402MW_ENDPOINT_ID=... python examples/signin_seller.py

(``PORT`` changes its port, 8010; ``X402MW_PLATFORM_URL`` the platform, http://127.0.0.1:4402/v1;
``X402MW_ORIGIN`` the public origin the sign-in messages name, http://127.0.0.1:<port>.) Pay it twice
with the same wallet: ``x402mw pay http://127.0.0.1:8010/report``, then again, and the second
request is served by a signature (``X402Auth`` signs in by itself). See docs/sellers/sign-in.md.
"""

from __future__ import annotations

import os

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from x402mw.adapters.starlette import PaymentMiddleware, paid
from x402mw.seller import SignIn

PORT = int(os.environ.get("PORT", "8010"))
ORIGIN = os.environ.get("X402MW_ORIGIN") or f"http://127.0.0.1:{PORT}"
ENDPOINT_ID = os.environ.get("X402MW_ENDPOINT_ID", "set-X402MW_ENDPOINT_ID")


@paid(ENDPOINT_ID, description="The monthly report", sign_in=SignIn(origin=ORIGIN, duration=86_400))
async def report(request: Request) -> JSONResponse:
    payment = request.state.x402
    # signed_in: served by a sign-in, on the strength of the payer's earlier payment
    return JSONResponse({"report": "sales are up", "payer": payment.payer, "signedIn": payment.signed_in})


async def health(request: Request) -> JSONResponse:
    return JSONResponse({"ok": True})


app = Starlette(
    routes=[Route("/report", report), Route("/health", health)],
    middleware=[
        Middleware(
            PaymentMiddleware,
            api_key=os.environ.get("X402MW_API_KEY", ""),
            platform_url=os.environ.get("X402MW_PLATFORM_URL") or "http://127.0.0.1:4402/v1",
        )
    ],
)

if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=PORT)
