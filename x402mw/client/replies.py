"""A seller's answers as the paying auth reads them: the offer of a 402 (its ``PAYMENT-REQUIRED``
header, or an x402 v1 body), the new challenge of a payment refused on stale terms or for want of a
Permit2 allowance, the settlement (``PAYMENT-RESPONSE``), and whether and when a paid request is sent
again with the same signature (`retry_pause`)."""

from __future__ import annotations

from typing import Any

import httpx

from x402mw.client.wallet import EIP2612_EXTENSION
from x402mw.errors import InvalidPaymentError, PaymentRefusedError
from x402mw.protocol import bounded_json, reasons
from x402mw.protocol.codec import (
    PAYMENT_REQUIRED,
    PAYMENT_RESPONSE,
    V1_PAYMENT_RESPONSE,
    decode_payment_required,
    decode_settlement_response,
)
from x402mw.protocol.models import PaymentRequired, SettlementResponse

INVALID_PAYMENT_REQUIRED = "invalid_payment_required"
_MAX_PAUSE_SECONDS = 10.0
_UNAVAILABLE = frozenset({502, 503, 504})
_MAX_V1_BODY_BYTES = 64 * 1024


def offer_in_body(response: httpx.Response) -> bool:
    if response.status_code != 402 or PAYMENT_REQUIRED in response.headers:
        return False
    length = response.headers.get("content-length", "")
    return not (length.isdigit() and int(length) > _MAX_V1_BODY_BYTES)


def payment_required(response: httpx.Response) -> PaymentRequired | None:
    """The offer of a 402 answer: the v2 header, else a v1 (or v2) JSON body; None if it has neither."""
    if response.status_code != 402:
        return None
    header = response.headers.get(PAYMENT_REQUIRED)
    try:
        if header is not None:
            return decode_payment_required(header)
        try:
            data: Any = bounded_json.loads(response.content, max_bytes=_MAX_V1_BODY_BYTES)
        except (httpx.ResponseNotRead, ValueError):  # not read (too large), not JSON, or over a limit
            return None
        if not isinstance(data, dict) or data.get("x402Version") not in (1, 2) or "accepts" not in data:
            return None
        return decode_payment_required(data)
    except InvalidPaymentError as exc:
        raise PaymentRefusedError(
            f"the seller's 402 offer is malformed: {exc.message}", reason=INVALID_PAYMENT_REQUIRED
        ) from None


_RENEWED = frozenset({reasons.CHALLENGE_EXPIRED, reasons.INVALID_REQUIREMENTS})


def renewed_offer(response: httpx.Response) -> PaymentRequired | None:
    """The new challenge of a paid request refused because the terms it paid are stale (the
    challenge expired, or the seller priced the request again higher); None for any other answer."""
    header = response.headers.get(PAYMENT_REQUIRED)
    if response.status_code != 402 or header is None:
        return None
    try:
        offer = decode_payment_required(header)
    except InvalidPaymentError:
        return None
    if offer.x402_version != 2 or offer.error is None or reasons.normalize_reason(offer.error) not in _RENEWED:
        return None
    return offer


def permit_wanted(response: httpx.Response) -> tuple[int | None, PaymentRequired | None]:
    """For a 412 ``permit2_allowance_required`` answer whose new challenge carries the payer's
    EIP-2612 nonce (``extensions.eip2612GasSponsoring.info.nonce``): that nonce and the challenge."""
    header = response.headers.get(PAYMENT_REQUIRED)
    if response.status_code != 412 or header is None:
        return None, None
    try:
        offer = decode_payment_required(header)
    except InvalidPaymentError:
        return None, None
    nonce = permit_nonce_wanted(offer)
    return (None, None) if nonce is None else (nonce, offer)


def permit_nonce_wanted(offer: PaymentRequired) -> int | None:
    """The payer's EIP-2612 nonce a ``permit2_allowance_required`` refusal carries, for an upto
    payment to be signed again with a permit for Permit2; None for any other offer."""
    if offer.error is None or reasons.normalize_reason(offer.error) != reasons.PERMIT2_ALLOWANCE_REQUIRED:
        return None
    info = ((offer.extensions or {}).get(EIP2612_EXTENSION) or {}).get("info")
    nonce = info.get("nonce") if isinstance(info, dict) else None
    if not isinstance(nonce, str) or not nonce.isdigit():
        return None
    return int(nonce)


def settlement_of(response: httpx.Response) -> SettlementResponse | None:
    header = response.headers.get(PAYMENT_RESPONSE) or response.headers.get(V1_PAYMENT_RESPONSE)
    if header is None:
        return None
    try:
        return decode_settlement_response(header)
    except InvalidPaymentError:
        return None


def retry_pause(response: httpx.Response, attempt: int) -> float | None:
    """Seconds to wait before sending a paid request again with the same signature, or None when the
    answer is final: the settlement is pending (402 ``settlement_pending``), or the seller could not
    take the payment for now (503, 502, 504 without a settled ``PAYMENT-RESPONSE``)."""
    settlement = settlement_of(response)
    if response.status_code == 402:
        if settlement is None or settlement.success or settlement.error_reason is None:
            return None
        if reasons.normalize_reason(settlement.error_reason) != reasons.SETTLEMENT_PENDING:
            return None
        default = 1.0
    elif response.status_code in _UNAVAILABLE and not (settlement is not None and settlement.success):
        default = min(2.0**attempt, _MAX_PAUSE_SECONDS)
    else:
        return None
    retry_after = response.headers.get("retry-after", "").strip()
    seconds = float(retry_after) if retry_after.isdigit() else default  # an HTTP date: wait a little
    return min(seconds, _MAX_PAUSE_SECONDS)
