"""What the paying auth signs with its wallet: the payment header of the offer it chose (``exact``
or ``upto``, x402 v2 or v1), and the sign-in-with-x answer to a 402 that offers it."""

from __future__ import annotations

import dataclasses
import secrets
import time
from typing import Any

import httpx

from x402mw.client.spending import Choice
from x402mw.client.wallet import Wallet
from x402mw.protocol import payment_identifier
from x402mw.protocol.codec import PAYMENT_SIGNATURE, V1_PAYMENT, encode_header
from x402mw.protocol.models import PaymentPayload, PaymentRequired, PaymentRequirements
from x402mw.protocol.networks import get_network
from x402mw.protocol.sign_in import SIGN_IN_WITH_X, SignInMessage, encode_sign_in


def sign_payment(
    wallet: Wallet, choice: Choice, required: PaymentRequired, permit_nonce: int | None, identifier: str
) -> tuple[tuple[str, str], int]:
    """The payment header for ``choice``, and until when it can settle. An ``exact`` payment to a
    seller that declares the payment-identifier extension carries ``identifier``."""
    if choice.requirements.scheme == "upto":
        upto = wallet.sign_upto(choice.requirements, resource=required.resource, permit_nonce=permit_nonce)
        return (PAYMENT_SIGNATURE, encode_header(upto)), upto.payload.permit2_authorization.deadline
    payload = wallet.sign_payment(choice.requirements, resource=required.resource)
    if required.x402_version == 2 and payment_identifier.declared(required):
        extensions = payment_identifier.payload_extensions(required.extensions, identifier)
        payload = payload.model_copy(update={"extensions": extensions})
    if required.x402_version == 1:
        header = (V1_PAYMENT, encode_header(_v1_payload(payload, choice.requirements)))
    else:
        header = (PAYMENT_SIGNATURE, encode_header(payload))
    return header, payload.payload.authorization.valid_before


def _v1_payload(payload: PaymentPayload, accepted: PaymentRequirements) -> dict[str, Any]:
    network = get_network(accepted.network)
    return {
        "x402Version": 1,
        "scheme": accepted.scheme,
        "network": network.v1_name if network and network.v1_name else accepted.network,
        "payload": payload.payload.to_wire(),
    }


def sign_in_header(wallet: Wallet, required: PaymentRequired, url: str, now: float) -> str | None:
    """A ``SIGN-IN-WITH-X`` header answering the 402's sign-in-with-x offer, or None when there is
    none this wallet can use: only an offer bound to the request's own origin is signed (another
    site's domain in a message would let that site sign in as this wallet)."""
    offered = (required.extensions or {}).get(SIGN_IN_WITH_X)
    if not isinstance(offered, dict) or not isinstance(offered.get("info"), dict):
        return None
    info: dict[str, Any] = offered["info"]
    chains = [c for c in offered.get("supportedChains") or [] if isinstance(c, dict)]
    chain = next((c.get("chainId") for c in chains if str(c.get("chainId", "")).startswith("eip155:")), None)
    target = httpx.URL(url)
    origin = f"{target.scheme}://{target.netloc.decode('ascii')}"
    uri = str(info.get("uri", ""))
    if not isinstance(chain, str) or info.get("domain") != target.netloc.decode("ascii"):
        return None
    if not (uri == origin or uri.startswith(origin + "/")):
        return None
    issued = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z"
    try:
        resources = info.get("resources")
        message = SignInMessage(
            domain=str(info["domain"]),
            address=wallet.address,
            uri=uri,
            version=str(info.get("version", "1")),
            chain_id=chain,
            nonce=str(info.get("nonce") or secrets.token_hex(16)),
            issued_at=str(info.get("issuedAt") or issued),
            signature="",
            statement=info.get("statement") if isinstance(info.get("statement"), str) else None,
            expiration_time=info.get("expirationTime") if isinstance(info.get("expirationTime"), str) else None,
            not_before=info.get("notBefore") if isinstance(info.get("notBefore"), str) else None,
            request_id=info.get("requestId") if isinstance(info.get("requestId"), str) else None,
            resources=tuple(str(r) for r in resources) if isinstance(resources, list) else None,
        )
    except (KeyError, TypeError, ValueError):
        return None
    signed = dataclasses.replace(message, signature=wallet.sign_message(message.text()))
    return encode_sign_in(signed)
