"""A members-only site sold by subscription, whose access follows the platform's webhooks and nothing else.

- ``GET /subscribe/<user>`` opens (or reuses) the user's subscription and sends them to its checkout;
- ``GET /welcome`` is where checkout returns them, when the plan's ``returnUrl`` is this address
  (create the plan with ``"returnUrl": "http://<this host>:8000/welcome"``; the customer page links
  back there too). It grants nothing: a return address can be visited without paying, and a payment
  is only final once the chain has confirmed it;
- ``POST /webhooks`` is the only place access changes, from verified ``subscription.*`` events
  (`x402mw.client.webhooks.event_from_starlette`): granted on ``created`` and ``renewed``, paused on
  ``past_due`` (the user is asked to pay), revoked on ``canceled`` and ``expired``;
- ``GET /members/<user>`` is the content: 200 for a user with access, else 402 with why.

Run it against a platform, with a test key, the plan to sell and a webhook endpoint's secret::

    X402MW_API_KEY=sk_test_... X402MW_PLATFORM_URL=http://127.0.0.1:4402/v1 X402MW_PLAN_ID=... \\
    X402MW_WEBHOOK_SECRET=whsec_... python examples/subscriptions_app.py

(``PORT`` changes its port, 8000)

and register ``http://<this host>:8000/webhooks`` as a webhook endpoint of the platform.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from x402mw.client.merchant import AsyncMerchantClient
from x402mw.client.webhooks import WebhookVerificationError, event_from_starlette


@dataclass
class Access:
    """What a user may do, as the last webhook about their subscription said."""

    state: str  # "granted", "paused" or "revoked"
    subscription_id: str
    until: str | None  # the end of the paid period


@dataclass
class Members:
    """The site's entitlements: updated from webhooks only. A real site keeps them in its database."""

    users: dict[str, Access] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)  # event ids: a delivery may come more than once

    def apply(self, event_id: str, kind: str, subscription: dict[str, Any]) -> None:
        if event_id in self.seen:
            return
        self.seen.add(event_id)
        user = subscription["merchantCustomerId"]  # the id we gave when subscribing, exactly
        state = {"created": "granted", "renewed": "granted", "past_due": "paused"}.get(kind, "revoked")
        self.users[user] = Access(state, subscription["id"], subscription["currentPeriodEnd"])


def create_app(api_key: str, platform_url: str, plan_id: str, webhook_secret: str) -> Starlette:
    members = Members()

    async def subscribe(request: Request) -> Response:
        user = request.path_params["user"]
        async with AsyncMerchantClient(api_key, platform_url) as client:
            opened = await client.subscriptions.create(plan_id=plan_id, merchant_customer_id=user)
        if opened.payment_intent is None or opened.payment_intent.checkout_url is None:
            return HTMLResponse("<p>Nothing to pay right now.</p>")
        return RedirectResponse(opened.payment_intent.checkout_url, status_code=303)

    async def welcome(request: Request) -> Response:
        # Deliberately grants nothing: access starts with the subscription.created webhook.
        return HTMLResponse("<p>Thank you! Your access starts as soon as your payment is confirmed.</p>")

    async def webhooks(request: Request) -> Response:
        try:
            event = await event_from_starlette(request, webhook_secret)
        except WebhookVerificationError:
            return Response(status_code=400)
        if event.type.startswith("subscription."):
            members.apply(event.id, event.type.removeprefix("subscription."), event.data["subscription"])
        return Response(status_code=200)

    async def content(request: Request) -> Response:
        access = members.users.get(request.path_params["user"])
        if access is None or access.state != "granted":
            state = "none" if access is None else access.state
            return JSONResponse({"access": state, "hint": "subscribe, or pay your open invoice"}, status_code=402)
        return JSONResponse({"access": "granted", "until": access.until, "content": "members-only episode 42"})

    app = Starlette(
        routes=[
            Route("/subscribe/{user}", subscribe),
            Route("/welcome", welcome),
            Route("/webhooks", webhooks, methods=["POST"]),
            Route("/members/{user}", content),
        ]
    )
    app.state.members = members
    return app


app = create_app(
    os.environ.get("X402MW_API_KEY", "sk_test_..."),
    os.environ.get("X402MW_PLATFORM_URL") or os.environ.get("X402MW_BASE_URL") or "http://127.0.0.1:4402/v1",
    os.environ.get("X402MW_PLAN_ID", ""),
    os.environ.get("X402MW_WEBHOOK_SECRET", "whsec_" + "A" * 32),
)

if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=int(os.environ.get("PORT", "8000")))
