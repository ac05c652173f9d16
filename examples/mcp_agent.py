"""An agent that calls a paid MCP tool, pays it and prints the result with the platform's receipt.

    X402MW_PRIVATE_KEY=0x... python examples/mcp_agent.py http://127.0.0.1:8007/mcp forecast '{"city": "Lisbon"}'

The server may also be started over stdio: give ``--stdio`` and its command line instead of a URL,

    X402MW_PRIVATE_KEY=0x... python examples/mcp_agent.py --stdio \\
        "python examples/mcp_seller.py --stdio --api-key sk_test_... --endpoint <id>" forecast '{"city": "Lisbon"}'

(a path in that command line, such as ``examples/mcp_seller.py``, that is not found from the current
folder is looked for from the repository of this file, so the command works from any folder). A
server that cannot be reached or started is reported in one line, and the exit status is 1.

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
import tempfile
from pathlib import Path
from typing import Any, TextIO

from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from x402mw.client import Wallet, X402Auth
from x402mw.client.mcp import PayingSession, settlement_of
from x402mw.errors import X402Error
from x402mw.protocol import format_amount

REPOSITORY = Path(__file__).resolve().parents[1]


def _leaf(exc: BaseException) -> BaseException:
    """The first exception at the bottom of an exception group (anyio's task groups nest them)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _found(argument: str) -> str:
    """``argument`` itself, or the path it names from the repository of this file when that is a file
    and nothing of that name is in the current folder."""
    if argument.startswith("-") or Path(argument).is_absolute() or Path(argument).exists():
        return argument
    there = REPOSITORY / argument
    return str(there) if there.is_file() else argument


async def call(
    server: str | StdioServerParameters, tool: str, arguments: dict[str, Any], errlog: TextIO | None = None
) -> int:
    auth = X402Auth(
        Wallet.from_env(),
        max_amount=os.environ.get("X402MW_MAX_AMOUNT", "0.10"),
        receipt_signer=os.environ.get("X402MW_RECEIPT_SIGNER") or None,
    )
    try:
        transport = stdio_client(server, errlog=errlog) if isinstance(server, StdioServerParameters) else server
        async with Client(transport) as client:
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
    if not args.stdio:
        try:
            return asyncio.run(call(server, args.tool, arguments))
        except Exception as exc:  # the server down, or not an MCP server: one line
            print(f"cannot reach the MCP server at {args.server}: {_leaf(exc)!r}", file=sys.stderr)
            return 1
    command, *rest = shlex.split(args.server)
    server = StdioServerParameters(command=command, args=[_found(a) for a in rest], env=dict(os.environ))
    with tempfile.TemporaryFile("w+") as errlog:  # the server's own messages: its last line tells why it stopped
        try:
            return asyncio.run(call(server, args.tool, arguments, errlog))
        except Exception as exc:  # the server did not start, or stopped: one line
            errlog.seek(0)
            said = [line.strip() for line in errlog.read().splitlines() if line.strip()]
            why = said[-1] if said else repr(_leaf(exc))
            print(f"the MCP server {args.server!r} did not answer over stdio: {why}", file=sys.stderr)
            return 1


if __name__ == "__main__":
    sys.exit(main())
