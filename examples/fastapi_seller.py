"""A FastAPI seller: GET /weather costs what its agent endpoint says; the price of /report is set per
request, by the number of days asked for, through a second endpoint created with
``pricingMode: dynamic``.

    X402MW_API_KEY=sk_test_... X402MW_ENDPOINT_ID=... X402MW_DYNAMIC_ENDPOINT_ID=... \\
        python examples/fastapi_seller.py

Without ``X402MW_DYNAMIC_ENDPOINT_ID``, /report is sold through ``X402MW_ENDPOINT_ID`` at its fixed
price, whatever the days (a fixed-price endpoint takes no price per request), and the seller says so
as it starts. (``PORT`` changes its port, 8002.)
"""

from __future__ import annotations

import os
from typing import Any

from fastapi import FastAPI, Request

from x402mw.adapters.starlette import PaymentMiddleware, paid

ENDPOINT_ID = os.environ.get("X402MW_ENDPOINT_ID", "set-X402MW_ENDPOINT_ID")
DYNAMIC_ENDPOINT_ID = os.environ.get("X402MW_DYNAMIC_ENDPOINT_ID")

app = FastAPI(title="Weather, paid per request")
app.add_middleware(
    PaymentMiddleware,
    api_key=os.environ.get("X402MW_API_KEY", ""),
    platform_url=os.environ.get("X402MW_PLATFORM_URL")
    or os.environ.get("X402MW_BASE_URL")
    or "http://127.0.0.1:4402/v1",
)


@app.get("/weather")
@paid(ENDPOINT_ID, description="Today's weather")
async def weather(request: Request) -> dict[str, Any]:
    settlement = request.state.x402
    return {"forecast": "sunny", "transaction": settlement.transaction, "payer": settlement.payer}


def report_price(request: Request) -> int:
    """0.01 USDC (10,000 atomic units) per requested day, 1 to 30 days."""
    days = request.query_params.get("days", "1")
    count = int(days) if days.isdigit() and 1 <= int(days) <= 30 else 1
    return count * 10_000


@app.get("/report")
@paid(DYNAMIC_ENDPOINT_ID or ENDPOINT_ID, amount=report_price if DYNAMIC_ENDPOINT_ID else None)
async def report(request: Request, days: int = 1) -> dict[str, Any]:
    return {"days": days, "paid": request.state.x402.amount}


if __name__ == "__main__":
    import sys

    import uvicorn

    if not DYNAMIC_ENDPOINT_ID:
        print(
            "X402MW_DYNAMIC_ENDPOINT_ID is not set: /report is sold at the fixed price of X402MW_ENDPOINT_ID",
            file=sys.stderr,
        )
    uvicorn.run(app, host="127.0.0.1", port=int(os.environ.get("PORT", "8002")))
