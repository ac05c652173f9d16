"""A tool server built with the x402 Foundation's Python SDK (``x402.mcp.create_payment_wrapper`` on
FastMCP, so mcp<2: run it with .venv-mcp1's Python), settling through x402mw's facilitator API.

    python x402_mcp_server.py PORT PLATFORM_URL API_KEY NETWORK ASSET PAY_TO AMOUNT

Serves streamable HTTP at http://127.0.0.1:PORT/mcp: ``forecast`` (paid) and ``broken`` (paid, raises).
"""

from __future__ import annotations

import sys

from mcp.server.fastmcp import FastMCP
from x402 import x402ResourceServer
from x402.http import HTTPFacilitatorClient
from x402.mcp import create_payment_wrapper
from x402.mechanisms.evm.exact import ExactEvmServerScheme
from x402.schemas import PaymentRequirements, ResourceInfo


def main() -> None:
    port, platform_url, api_key, network, asset, pay_to, amount = sys.argv[1:8]
    headers = {"Authorization": f"Bearer {api_key}"}
    facilitator = HTTPFacilitatorClient(
        {
            "url": platform_url.rstrip("/") + "/x402",
            "create_headers": lambda: {"verify": headers, "settle": headers, "supported": headers},
        }
    )
    server = x402ResourceServer(facilitator)
    server.register("eip155:*", ExactEvmServerScheme())
    server.initialize()
    accepts = [
        PaymentRequirements(
            scheme="exact",
            network=network,
            asset=asset,
            amount=amount,
            pay_to=pay_to,
            max_timeout_seconds=120,
            extra={"name": "USD Coin", "version": "2"},
        )
    ]
    mcp = FastMCP("sdk-weather", host="127.0.0.1", port=int(port))

    @mcp.tool(name="forecast", description="Tomorrow's weather (paid)")
    @create_payment_wrapper(server, accepts=accepts, resource=ResourceInfo(url="mcp://tool/forecast"))
    async def forecast(city: str) -> str:
        return f"Sunny in {city} tomorrow"

    @mcp.tool(name="broken", description="Always fails (paid)")
    @create_payment_wrapper(server, accepts=accepts, resource=ResourceInfo(url="mcp://tool/broken"))
    async def broken(city: str) -> str:
        raise RuntimeError(f"no forecast for {city}")

    print("ready", flush=True)
    mcp.run(transport="streamable-http")


if __name__ == "__main__":
    main()
