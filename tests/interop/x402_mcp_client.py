"""The x402 Foundation's MCP client (``x402.mcp.x402MCPSession`` over an mcp<2 ``ClientSession``,
streamable HTTP) calls a tool and pays it: run it with .venv-mcp1's Python.

    python x402_mcp_client.py URL PRIVATE_KEY TOOL ARGUMENTS_JSON NETWORK ASSET

It pays at most 0.05 (50000 atomic units) of ASSET on NETWORK per call.

Prints one JSON line: ``isError``, ``text``, ``paymentMade`` and ``paymentResponse``.
"""

from __future__ import annotations

import asyncio
import json
import sys

from eth_account import Account
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client
from x402 import x402Client
from x402.mcp import x402MCPSession
from x402.mechanisms.evm.exact import ExactEvmScheme
from x402.mechanisms.evm.signers import EthAccountSigner


async def main(url: str, private_key: str, tool: str, arguments: dict, network: str, asset: str) -> dict:
    client = x402Client()
    client.register("eip155:*", ExactEvmScheme(signer=EthAccountSigner(Account.from_key(private_key))))
    client.set_spend_controls(
        {"allowed_assets": [{"network": network, "asset": asset, "max_amount_per_payment": "50000"}]}
    )
    async with streamablehttp_client(url) as (read, write, _), ClientSession(read, write) as session:
        await session.initialize()
        paying = x402MCPSession(session, client)
        result = await paying.call_tool(tool, arguments)
    response = result.payment_response
    if response is not None and not isinstance(response, dict):
        response = response.model_dump(by_alias=True, exclude_none=True)
    text = "".join(getattr(block, "text", "") for block in result.content)
    return {"isError": result.is_error, "text": text, "paymentMade": result.payment_made, "paymentResponse": response}


if __name__ == "__main__":
    url, key, tool, arguments, network, asset = sys.argv[1:7]
    print(json.dumps(asyncio.run(main(url, key, tool, json.loads(arguments), network, asset))))
