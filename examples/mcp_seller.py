"""An MCP server with one paid tool, ``forecast``, sold per call through x402mw.

Create an agent endpoint for it first (``resourceUrl`` ``mcp://tool/forecast``, a fixed or dynamic
price), then serve it over streamable HTTP at ``http://127.0.0.1:8007/mcp``:

    python examples/mcp_seller.py --api-key sk_test_... --endpoint <agent endpoint id> \\
        --platform-url http://127.0.0.1:4402/v1 --port 8007

or over stdio (``--stdio``), for a client that starts it as a subprocess. ``--api-key`` and
``--platform-url`` default to ``X402MW_API_KEY`` and ``X402MW_PLATFORM_URL``. The tool is settled
only once it succeeded: asking it for the forecast of ``nowhere`` raises, and is not charged.

With ``--metered-endpoint <id>`` (an agent endpoint with ``pricingMode: "metered"``, a ceiling
``maxAmountMinor``, and ``resourceUrl`` ``mcp://tool/summarize``), a second tool, ``summarize``, is
charged by use: 0.0001 USDC per word of the summary it returns, reported with
``current_payment().charge``, and settled after it ran (at most the ceiling the agent signed).
Needs ``pip install "x402mw[mcp]"`` (the ``mcp`` SDK, version 2).
"""

from __future__ import annotations

import argparse
import os
import sys

import anyio
import uvicorn
from mcp.server.mcpserver import MCPServer

from x402mw.adapters.mcp import PaidTools, current_payment

PER_WORD = "$0.0001"  # what summarize charges for each word it returns


def build(
    api_key: str, endpoint: str, platform_url: str, metered_endpoint: str | None = None
) -> tuple[MCPServer, PaidTools]:
    server = MCPServer("weather")

    @server.tool(description="Tomorrow's weather in a city (paid per call).")
    def forecast(city: str) -> str:
        if city.strip().lower() == "nowhere":
            raise ValueError("there is no forecast for nowhere")  # a failed call is not charged
        payment = current_payment()
        payer = payment.payer if payment else "nobody"
        return f"Sunny in {city} tomorrow (paid by {payer})"

    tools = {"forecast": endpoint}
    if metered_endpoint:

        @server.tool(description="The first words of a text (paid per word returned).")
        def summarize(text: str, words: int = 10) -> str:
            summary = text.split()[: max(words, 0)]
            payment = current_payment()
            if payment is not None:
                for _ in summary:
                    payment.charge(PER_WORD)  # settled once the tool returned: 0 words, no transaction
            return " ".join(summary)

        tools["summarize"] = metered_endpoint
    paid = PaidTools(api_key=api_key, platform_url=platform_url, tools=tools)
    paid.install(server)
    return server, paid


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--api-key", default=os.environ.get("X402MW_API_KEY", ""))
    parser.add_argument("--endpoint", required=True, help="the agent endpoint that sells the forecast tool")
    parser.add_argument("--metered-endpoint", help="a metered agent endpoint to sell summarize by use")
    parser.add_argument("--platform-url", default=os.environ.get("X402MW_PLATFORM_URL", "http://127.0.0.1:4402/v1"))
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8007)
    parser.add_argument("--stdio", action="store_true", help="serve over stdin/stdout instead of HTTP")
    args = parser.parse_args(argv)
    server, paid = build(args.api_key, args.endpoint, args.platform_url, args.metered_endpoint)
    if args.stdio:

        async def serve_stdio() -> None:
            async with paid.running():
                await server.run_stdio_async()

        anyio.run(serve_stdio)
        return 0
    print(f"paid MCP tool 'forecast' at http://{args.host}:{args.port}/mcp", file=sys.stderr, flush=True)
    app = paid.asgi(server.streamable_http_app(host=args.host))
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
