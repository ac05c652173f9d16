"""x402mw's `PaidTools` on an mcp 1 ``FastMCP`` server: run it with .venv-mcp1's Python, this
checkout on ``PYTHONPATH``.

    python mcp1_seller.py PORT PLATFORM_URL API_KEY ENDPOINT_ID

Serves streamable HTTP at http://127.0.0.1:PORT/mcp: ``forecast`` (paid; raises for ``nowhere``).
"""

from __future__ import annotations

import sys

import uvicorn
from mcp.server.fastmcp import FastMCP

from x402mw.adapters.mcp import PaidTools, current_payment


def main() -> None:
    port, platform_url, api_key, endpoint = sys.argv[1:5]
    server = FastMCP("v1-weather", host="127.0.0.1", port=int(port))

    @server.tool()
    def forecast(city: str) -> str:
        if city == "nowhere":
            raise ValueError("no forecast for nowhere")
        payment = current_payment()
        return f"Sunny in {city} tomorrow (paid by {payment.payer if payment else 'nobody'})"

    paid = PaidTools(api_key=api_key, platform_url=platform_url, tools={"forecast": endpoint})
    paid.install(server)
    uvicorn.run(paid.asgi(server.streamable_http_app()), host="127.0.0.1", port=int(port), log_level="warning")


if __name__ == "__main__":
    main()
