"""An agent that calls a paid MCP tool, pays it and prints the result with the platform's receipt.

    X402MW_PRIVATE_KEY=0x... python examples/mcp_agent.py http://127.0.0.1:8000/mcp forecast '{"city": "Lisbon"}'

The server may also be started over stdio: give ``--stdio`` and its command line instead of a URL,

    X402MW_PRIVATE_KEY=0x... python examples/mcp_agent.py --stdio \\
        "python examples/mcp_seller.py --stdio --api-key sk_test_... --endpoint <id>" forecast '{"city": "Lisbon"}'

Set X402MW_RECEIPT_SIGNER to the platform's receipt address to have the receipt verified, and
X402MW_MAX_AMOUNT to change the most one call pays (default 0.10, in token units). Needs
``pip install "x402mw[mcp]"``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import sys
from typing import Any

from mcp import Client, StdioServerParameters

from x402mw.client import Wallet, X402Auth
from x402mw.client.mcp import PayingSession, settlement_of
from x402mw.errors import X402Error
from x402mw.protocol import format_amount


async def call(server: str | StdioServerParameters, tool: str, arguments: dict[str, Any]) -> int:
    auth = X402Auth(
        Wallet.from_env(),
        max_amount=os.environ.get("X402MW_MAX_AMOUNT", "0.10"),
        receipt_signer=os.environ.get("X402MW_RECEIPT_SIGNER") or None,
    )
    try:
        async with Client(server) as client:
            result = await PayingSession(client, auth).call_tool(tool, arguments)
    except X402Error as exc:  # a refusal within the caps, or a receipt that does not verify
        print(f"not paid: {exc.message} ({exc.reason})", file=sys.stderr)
        return 1
    for block in result.content:
        print(getattr(block, "text", block))
    if result.is_error:
        settlement = settlement_of(result)
        if settlement is not None:
            print(f"payment: {settlement.error_reason or 'failed'}", file=sys.stderr)
        return 1
    if not auth.payments:
        print("no payment was needed")
        return 0
    payment = auth.payments[-1]
    amount = format_amount(payment.amount, payment.decimals)
    charged = f"{amount} {payment.symbol or payment.asset}"
    if payment.ceiling is not None:  # a tool charged by use: what it charged, of the ceiling signed
        charged += f" (of at most {format_amount(payment.ceiling, payment.decimals)})"
    print(f"paid {charged} on {payment.network}, transaction {payment.transaction}")
    print("receipt:", json.dumps(dict(payment.receipt or {}), indent=2))
    print("receipt verified:", payment.verified if auth.receipt_signer else "not checked (set X402MW_RECEIPT_SIGNER)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("server", help="the server's streamable HTTP URL, or with --stdio its command line")
    parser.add_argument("tool")
    parser.add_argument("arguments", nargs="?", default="{}", help="the tool's arguments, as a JSON object")
    parser.add_argument("--stdio", action="store_true", help="start the server as a subprocess, over stdio")
    args = parser.parse_args(argv)
    try:
        arguments = json.loads(args.arguments)
    except ValueError:
        parser.error("arguments must be a JSON object")
    if not isinstance(arguments, dict):
        parser.error("arguments must be a JSON object")
    server: str | StdioServerParameters = args.server
    if args.stdio:
        command, *rest = shlex.split(args.server)
        server = StdioServerParameters(command=command, args=rest, env=dict(os.environ))
    return asyncio.run(call(server, args.tool, arguments))


if __name__ == "__main__":
    sys.exit(main())
