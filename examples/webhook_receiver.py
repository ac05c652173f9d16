"""A Starlette webhook receiver that verifies each delivery and ignores duplicates.

X402MW_WEBHOOK_SECRET=whsec_... python examples/webhook_receiver.py

It takes deliveries at ``POST /webhooks/x402mw``: register http://127.0.0.1:8001/webhooks/x402mw
(your public host in production) as a webhook endpoint of the platform, with that endpoint's secret
in ``X402MW_WEBHOOK_SECRET``. (``PORT`` changes its port, 8001.)
"""

from __future__ import annotations

import os

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from x402mw.client.webhooks import WebhookVerificationError, event_from_starlette

SECRET = os.environ.get("X402MW_WEBHOOK_SECRET", "whsec_c2V0LVg0MDJNV19XRUJIT09LX1NFQ1JFVA==")
seen_ids: set[str] = set()  # use your database in production: delivery is at least once


async def webhook(request: Request) -> JSONResponse:
    try:
        event = await event_from_starlette(request, SECRET)
    except WebhookVerificationError as exc:
        return JSONResponse({"error": exc.message}, status_code=400)
    if event.id in seen_ids:
        return JSONResponse({"duplicate": True})
    seen_ids.add(event.id)
    if event.type == "agent_payment.settled":
        payment = event.data["agentPayment"]
        print(f"settled: {payment['amountMinor']} minor units from {payment['payer']} in {payment['transaction']}")
    return JSONResponse({"received": True})


app = Starlette(routes=[Route("/webhooks/x402mw", webhook, methods=["POST"])])

if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=int(os.environ.get("PORT", "8001")))
