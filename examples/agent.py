"""An agent that pays for one URL and prints the platform's receipt.

    X402MW_PRIVATE_KEY=0x... python examples/agent.py https://seller.example/weather

Set X402MW_RECEIPT_SIGNER to the platform's receipt address to have the receipt verified, and
X402MW_MAX_AMOUNT to change the most it pays (default 0.10, in token units).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

import httpx

from x402mw.client import Wallet, X402Auth
from x402mw.errors import X402Error
from x402mw.protocol import format_amount


async def main(url: str) -> int:
    try:
        auth = X402Auth(
            Wallet.from_env(),
            max_amount=os.environ.get("X402MW_MAX_AMOUNT", "0.10"),
            receipt_signer=os.environ.get("X402MW_RECEIPT_SIGNER") or None,
        )
        async with httpx.AsyncClient(auth=auth, timeout=60) as client:
            response = await client.get(url)
    except X402Error as exc:  # a refusal, a bad key, or a receipt that does not verify
        print(f"not paid: {exc.message} ({exc.reason})", file=sys.stderr)
        return 1
    except httpx.HTTPError as exc:
        print(f"GET {url} failed: {exc}", file=sys.stderr)
        return 1
    print(f"HTTP {response.status_code}: {response.text[:500]}")
    if not auth.payments:
        print("no payment was needed")
        return 0 if response.is_success else 1
    payment = auth.payments[-1]
    amount = format_amount(payment.amount, payment.decimals)
    print(f"paid {amount} {payment.symbol or payment.asset} on {payment.network}, transaction {payment.transaction}")
    print("receipt:", json.dumps(dict(payment.receipt or {}), indent=2))
    print(
        "receipt verified:",
        payment.verified if auth.receipt_signer else "not checked (set X402MW_RECEIPT_SIGNER)",
    )
    return 0 if response.is_success else 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} URL")
    sys.exit(asyncio.run(main(sys.argv[1])))
