"""The gate's JSON answers other than a challenge: a settlement not final yet (402 pending), a
payment identifier used for another payment (409), an outage or a misconfiguration (503, 500).

Each is ``no-store`` and exposes the payment headers to browsers (`EXPOSE_HEADERS`); a 402
challenge is built in `x402mw.seller.challenges`.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from x402mw.errors import X402Error
from x402mw.protocol import payment_identifier, reasons
from x402mw.protocol.codec import PAYMENT_RESPONSE, encode_header
from x402mw.protocol.models import SettlementResponse
from x402mw.seller.decisions import Answer

logger = logging.getLogger("x402mw.seller")
EXPOSE_HEADERS = ("Access-Control-Expose-Headers", "PAYMENT-REQUIRED, PAYMENT-RESPONSE")
ANSWER_HEADERS = (("Content-Type", "application/json"), ("Cache-Control", "no-store"), EXPOSE_HEADERS)


def json_answer(
    status: int, body: dict[str, Any], headers: list[tuple[str, str]] | None = None, reason: str | None = None
) -> Answer:
    raw = json.dumps(body, separators=(",", ":")).encode()
    return Answer(status, [*ANSWER_HEADERS, *(headers or [])], raw, reason)


def internal_error_answer() -> Answer:
    """The answer to a request whose payment check failed unexpectedly (log the error first)."""
    return error_answer(500, "internal_error", "the payment check failed unexpectedly")


def check_failed(method: str, url: str) -> Answer:
    """In the ``except`` around a request's payment check: log the unexpected error (with its
    traceback), and answer `internal_error_answer`."""
    logger.exception("x402 payment check failed for %s %s", method, url)
    return internal_error_answer()


def error_answer(status: int, code: str, message: str, retry_after: int | None = None) -> Answer:
    extra = [("Retry-After", str(retry_after))] if retry_after is not None else []
    return json_answer(status, {"error": {"type": "api_error", "code": code, "message": message}}, extra, code)


def pending_answer(response: SettlementResponse) -> Answer:
    """402 ``settlement_pending``: the payment went to the platform and its outcome is not known
    yet (sent on-chain and not final, or the platform's answer was lost); the same signature,
    sent again, gets it. Never an answer that invites a second signature."""
    body = {
        "error": {
            "type": "payment_error",
            "code": reasons.SETTLEMENT_PENDING,
            "message": "the payment is not final yet; retry the same PAYMENT-SIGNATURE to receive the resource",
            "transaction": response.transaction,
        }
    }
    headers = [(PAYMENT_RESPONSE, encode_header(response)), ("Retry-After", "1")]
    return json_answer(402, body, headers, reasons.SETTLEMENT_PENDING)


def conflict_answer(network: str, message: str) -> Answer:
    """409 ``payment_identifier_conflict``: the payment's id came with another payment before.
    Nothing was taken; the answer says so in ``PAYMENT-RESPONSE`` too."""
    response = SettlementResponse(
        success=False, error_reason=payment_identifier.CONFLICT, transaction="", network=network
    )
    body = {"error": {"type": "payment_error", "code": payment_identifier.CONFLICT, "message": message}}
    return json_answer(409, body, [(PAYMENT_RESPONSE, encode_header(response))], payment_identifier.CONFLICT)


def platform_failure(exc: X402Error, what: str) -> Answer:
    """The answer when the platform could not take a request that carried no payment to it, or
    refused one outright (nothing was taken: the same payment may be sent again)."""
    status = getattr(exc, "status", 0)
    if status in (401, 403, 404):
        return misconfigured(f"the platform refused the {what} request ({status}): {exc.message}")
    logger.error("payment platform unavailable during %s: %s (request id %s)", what, exc.message, exc.request_id)
    return error_answer(
        503,
        "payment_platform_unavailable",
        "payments cannot be taken right now; nothing was charged: retry shortly, with the same payment",
        retry_after=2,
    )


def misconfigured(message: str) -> Answer:
    logger.error("x402 payment configuration error: %s", message)
    return error_answer(500, "payment_configuration_error", "this paid route is misconfigured")
