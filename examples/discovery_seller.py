"""A seller whose paid routes declare what they take and give (the x402 ``bazaar`` extension), so
that agents can find and call them: GET /weather and POST /translate cost what their agent endpoint
says; their 402s carry the declaration, and GET /.well-known/x402 lists both.

X402MW_API_KEY=sk_test_... X402MW_ENDPOINT_ID=... python examples/discovery_seller.py

(``PORT`` changes its port, 8012; ``X402MW_PLATFORM_URL`` the platform, http://127.0.0.1:4402/v1.)
Make the endpoint ``discoverable`` (PATCH /agent/endpoints/{id}) and, once a payment has settled,
the platform's catalogue (``GET {base_url}/x402/discovery/resources``) lists the route too. See
docs/sellers/discovery.md.
"""

from __future__ import annotations

import os

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from x402mw.adapters.starlette import PaymentMiddleware
from x402mw.seller import Discovery, PaidRoute

ENDPOINT_ID = os.environ.get("X402MW_ENDPOINT_ID", "set-X402MW_ENDPOINT_ID")

ROUTES = {
    "GET /weather": PaidRoute(
        ENDPOINT_ID,
        description="Today's forecast for a city",
        discovery=Discovery(
            query={"city": "Paris"},
            query_schema={"properties": {"city": {"type": "string"}}, "required": ["city"]},
            output={"city": "Paris", "forecast": "sunny"},
        ),
    ),
    "POST /translate": PaidRoute(
        ENDPOINT_ID,
        description="English to French",
        discovery=Discovery(
            body={"text": "hello"}, body_schema={"properties": {"text": {"type": "string"}}}, output={"text": "bonjour"}
        ),
    ),
}


async def weather(request: Request) -> JSONResponse:
    return JSONResponse({"city": request.query_params.get("city", "Paris"), "forecast": "sunny"})


async def translate(request: Request) -> JSONResponse:
    text = (await request.json()).get("text", "")
    return JSONResponse({"text": {"hello": "bonjour"}.get(text, text)})


async def health(request: Request) -> JSONResponse:
    return JSONResponse({"ok": True})


app = Starlette(
    routes=[Route("/weather", weather), Route("/translate", translate, methods=["POST"]), Route("/health", health)],
    middleware=[
        Middleware(
            PaymentMiddleware,
            api_key=os.environ.get("X402MW_API_KEY", ""),
            platform_url=os.environ.get("X402MW_PLATFORM_URL") or "http://127.0.0.1:4402/v1",
            routes=ROUTES,
        )
    ],
)

if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=int(os.environ.get("PORT", "8012")))
