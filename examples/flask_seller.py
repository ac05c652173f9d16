"""A Flask seller: GET /weather costs what its agent endpoint says.

X402MW_API_KEY=sk_test_... X402MW_ENDPOINT_ID=... python examples/flask_seller.py

(``PORT`` changes its port, 8000; ``flask --app examples/flask_seller.py run`` serves it too.)
"""

from __future__ import annotations

import os
from typing import Any

from flask import Flask, g

from x402mw.adapters.flask import X402

ENDPOINT_ID = os.environ.get("X402MW_ENDPOINT_ID", "set-X402MW_ENDPOINT_ID")

app = Flask(__name__)
app.config["X402_API_KEY"] = os.environ.get("X402MW_API_KEY", "")
app.config["X402_PLATFORM_URL"] = (
    os.environ.get("X402MW_PLATFORM_URL") or os.environ.get("X402MW_BASE_URL") or "http://127.0.0.1:4402/v1"
)
x402 = X402(app)


@app.get("/weather")
@x402.require_payment(ENDPOINT_ID, description="Today's weather")
def weather() -> dict[str, Any]:
    settlement = g.x402
    return {"forecast": "sunny", "transaction": settlement.transaction, "payer": settlement.payer}


@app.get("/health")
def health() -> dict[str, Any]:
    return {"ok": True}


if __name__ == "__main__":
    app.run(port=int(os.environ.get("PORT", "8000")))
