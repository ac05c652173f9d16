"""Payment identifiers: a paid request sent again after its answer was lost gets the first answer,
and is not charged twice; another payment under the same id is refused.

    X402MW_PRIVATE_KEY=0x... python examples/payment_identifier_replay.py http://127.0.0.1:8000/weather

The URL is any x402mw seller's paid route (``examples/starlette_seller.py``, say). The script pays it
once with an id of its own (the ``payment-identifier`` extension), sends the very same payment again,
as an agent whose connection dropped would, and then a new payment under the same id. It prints the
three answers and exits 0 when the seller answered as docs/payment-identifiers.md says: the same
transaction twice, then ``409 payment_identifier_conflict``. ``X402MW_MAX_AMOUNT`` is the most it
pays (default 0.10, in units of a 6-decimal token such as USDC).
"""

from __future__ import annotations

import os
import sys
from decimal import Decimal

import httpx

from x402mw.client import Wallet
from x402mw.errors import X402Error
from x402mw.protocol import decode_payment_required, decode_settlement_response, encode_header, to_atomic
from x402mw.protocol.payment_identifier import declared, new_identifier, payload_extensions


def main(url: str, max_amount: str = "0.10") -> int:
    wallet = Wallet.from_env()
    with httpx.Client(timeout=60) as http:
        unpaid = http.get(url)
        if unpaid.status_code != 402 or "PAYMENT-REQUIRED" not in unpaid.headers:
            print(f"{url} answered {unpaid.status_code}, not an x402 challenge", file=sys.stderr)
            return 1
        required = decode_payment_required(unpaid.headers["PAYMENT-REQUIRED"])
        if not declared(required):
            print(f"{url} does not declare the payment-identifier extension", file=sys.stderr)
            return 1
        offer = required.accepts[0]
        if int(offer.amount) > to_atomic(Decimal(max_amount)):  # USDC and EURC have 6 decimals
            print(f"{url} asks {offer.amount} atomic units, over {max_amount}", file=sys.stderr)
            return 1
        identifier = new_identifier()

        def pay() -> str:
            """A new signed payment for the offer, under ``identifier``: the PAYMENT-SIGNATURE header."""
            payload = wallet.sign_payment(offer, resource=required.resource)
            payload = payload.model_copy(update={"extensions": payload_extensions(required.extensions, identifier)})
            return encode_header(payload)

        payment = pay()
        first = http.get(url, headers={"PAYMENT-SIGNATURE": payment})
        again = http.get(url, headers={"PAYMENT-SIGNATURE": payment})  # the answer was "lost": the same again
        other = http.get(url, headers={"PAYMENT-SIGNATURE": pay()})  # another payment, the same id
    settled = [decode_settlement_response(r.headers["PAYMENT-RESPONSE"]) for r in (first, again)]
    print(f"payment id {identifier}")
    print(f"1. paid:          HTTP {first.status_code}, transaction {settled[0].transaction}")
    print(f"2. sent again:    HTTP {again.status_code}, transaction {settled[1].transaction} (the first answer)")
    code = (other.json().get("error") or {}).get("code") if other.status_code == 409 else other.status_code
    print(f"3. another payment under the same id: HTTP {other.status_code}, {code}")
    as_documented = (
        first.status_code == again.status_code == 200
        and settled[0].transaction == settled[1].transaction
        and other.status_code == 409
        and code == "payment_identifier_conflict"
    )
    if not as_documented:
        print("not as docs/payment-identifiers.md says", file=sys.stderr)
        return 1
    print("charged once: yes")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} URL")
    try:
        sys.exit(main(sys.argv[1], os.environ.get("X402MW_MAX_AMOUNT", "0.10")))
    except (X402Error, httpx.HTTPError) as exc:
        sys.exit(f"{sys.argv[1]}: {exc}")
