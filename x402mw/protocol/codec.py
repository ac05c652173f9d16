"""The header codec: standard base64 (padded) of UTF-8 JSON.

Decoding is strict and bounded: a header over `MAX_HEADER_BYTES`, not base64, not JSON, nesting
arrays and objects deeper than `bounded_json.MAX_DEPTH` or not of the expected shape raises
`InvalidPaymentError` with a reason code; nothing else escapes.
x402 v1 payloads (``X-PAYMENT``, ``maxAmountRequired``, network names) are read too.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any, TypeVar

from pydantic import ValidationError

from x402mw.errors import InvalidPaymentError
from x402mw.protocol import bounded_json
from x402mw.protocol.channels import ChannelPaymentPayload, is_channel_payload
from x402mw.protocol.models import (
    AnyPaymentPayload,
    PaymentPayload,
    PaymentRequired,
    SettlementResponse,
    UptoPaymentPayload,
    WireModel,
)
from x402mw.protocol.networks import get_network

PAYMENT_REQUIRED = "PAYMENT-REQUIRED"
PAYMENT_SIGNATURE = "PAYMENT-SIGNATURE"
PAYMENT_RESPONSE = "PAYMENT-RESPONSE"
V1_PAYMENT = "X-PAYMENT"
V1_PAYMENT_RESPONSE = "X-PAYMENT-RESPONSE"
MAX_HEADER_BYTES = 8192

M = TypeVar("M", bound=WireModel)
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def b64(raw: bytes) -> str:
    """``raw`` in standard base64, as header values carry it."""
    return binascii.b2a_base64(raw, newline=False).decode("ascii")


def whole_groups(raw: bytes, *, before: bool = False) -> bytes:
    """``raw`` (a piece of JSON text) padded with JSON whitespace, after it or ``before`` it, to whole
    base64 groups of 3 bytes: the base64 of such pieces, joined, is the base64 of the pieces joined,
    so that a piece's base64 can be made once and kept."""
    pad = b" " * (-len(raw) % 3)
    return pad + raw if before else raw + pad


def encode_header(model: WireModel | dict[str, Any]) -> str:
    """Encode a model (or a JSON-ready dict) as a header value."""
    data = model.to_wire() if isinstance(model, WireModel) else model
    raw = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()
    return base64.b64encode(raw).decode("ascii")


def decode_json_header(value: str | bytes) -> Any:
    """Decode a header value to JSON data, strictly and within `MAX_HEADER_BYTES`."""
    if isinstance(value, str):
        value = value.encode("latin-1", errors="replace")
    if len(value) > MAX_HEADER_BYTES:
        raise InvalidPaymentError(f"payment header is larger than {MAX_HEADER_BYTES} bytes", reason="invalid_payload")
    text = value.strip()
    if not text:
        raise InvalidPaymentError("payment header is empty", reason="invalid_payload")
    try:
        # Accept unpadded and URL-safe base64 too: some clients send them.
        text = text.replace(b"-", b"+").replace(b"_", b"/")
        raw = base64.b64decode(text + b"=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidPaymentError("payment header is not base64", reason="invalid_payload") from None
    try:
        data = bounded_json.loads(raw.decode("utf-8"))
    except bounded_json.JsonLimitError as exc:
        raise InvalidPaymentError(f"payment header {exc}", reason="invalid_payload") from None
    except ValueError:  # not UTF-8, not JSON
        raise InvalidPaymentError("payment header is not UTF-8 JSON", reason="invalid_payload") from None
    if _SURROGATE_ESCAPE.search(raw) and not _is_text(data):
        # JSON can spell half a UTF-16 pair ("\ud800"): no Unicode text holds it, and writing it out
        # again (a seller forwarding the payload) would fail.
        raise InvalidPaymentError("payment header holds an unpaired surrogate escape", reason="invalid_payload")
    return data


def _is_text(data: Any) -> bool:
    try:
        json.dumps(data, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return False
    return True


def _validate(model: type[M], data: Any, what: str) -> M:
    if not isinstance(data, dict):
        raise InvalidPaymentError(f"{what} must be a JSON object", reason="invalid_payload")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise InvalidPaymentError(
            f"{what} is malformed at {where or 'top level'}: {first['msg']}", reason="invalid_payload"
        ) from None


def _v1_payload_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    network = data.get("network")
    if isinstance(network, str) and not network.startswith("eip155:"):
        found = get_network(network)
        if found is not None:
            network = found.caip2
    return {
        "x402Version": 1,
        "scheme": data.get("scheme"),
        "network": network,
        "payload": data.get("payload"),
    }


def decode_payment_payload(value: str | bytes | dict[str, Any]) -> PaymentPayload:
    """Decode ``PAYMENT-SIGNATURE`` (v2) or ``X-PAYMENT`` (v1), or a payload given as JSON (the MCP
    transport's ``_meta["x402/payment"]``)."""
    if isinstance(value, dict) and not _is_text(value):
        raise InvalidPaymentError("the payment payload holds an unpaired surrogate", reason="invalid_payload")
    data = value if isinstance(value, dict) else decode_json_header(value)
    if isinstance(data, dict) and data.get("x402Version") == 1:
        data = _v1_payload_to_v2(data)
    payload = _validate(PaymentPayload, data, "payment payload")
    if payload.x402_version not in (1, 2):
        raise InvalidPaymentError(f"unsupported x402Version {payload.x402_version}", reason="invalid_x402_version")
    if payload.x402_version == 2 and payload.accepted is None:
        raise InvalidPaymentError("payment payload has no 'accepted' block", reason="invalid_payload")
    return payload


def decode_any_payment_payload(value: str | bytes | dict[str, Any]) -> AnyPaymentPayload:
    """Decode a payment payload of either scheme (a header, or JSON as `decode_payment_payload`
    takes it): an `UptoPaymentPayload` when it carries a Permit2 authorization
    (``payload.permit2Authorization``), else as `decode_payment_payload`."""
    if isinstance(value, dict) and not _is_text(value):
        raise InvalidPaymentError("the payment payload holds an unpaired surrogate", reason="invalid_payload")
    data = value if isinstance(value, dict) else decode_json_header(value)
    if not isinstance(data, dict):
        return decode_payment_payload(value)  # refused there, as any payload that is not an object
    inner = data.get("payload")
    if isinstance(inner, dict) and "permit2Authorization" in inner and "authorization" not in inner:
        upto = _validate(UptoPaymentPayload, data, "payment payload")
        if upto.x402_version != 2:
            raise InvalidPaymentError("the upto scheme is x402 v2 only", reason="invalid_x402_version")
        return upto
    return decode_payment_payload(data)


def decode_channel_payment_payload(value: str | bytes | dict[str, Any]) -> ChannelPaymentPayload | None:
    """The payload as a ``batch-settlement`` payment (`ChannelPaymentPayload`) when it is one (its
    ``payload`` names a ``channelConfig``), else None; `InvalidPaymentError` for one that is malformed
    (reason ``invalid_batch_settlement_evm_<type>_payload``) or undecodable."""
    if isinstance(value, dict) and not _is_text(value):
        raise InvalidPaymentError("the payment payload holds an unpaired surrogate", reason="invalid_payload")
    data = value if isinstance(value, dict) else decode_json_header(value)
    if not is_channel_payload(data):
        return None
    kind = data["payload"].get("type")
    reason = (
        f"invalid_batch_settlement_evm_{kind}_payload"
        if kind in ("deposit", "voucher", "refund")
        else ("invalid_batch_settlement_evm_payload_type")
    )
    try:
        found = _validate(ChannelPaymentPayload, data, "payment payload")
    except InvalidPaymentError as exc:
        raise InvalidPaymentError(exc.message, reason=reason) from None
    if found.x402_version != 2:
        raise InvalidPaymentError("the batch-settlement scheme is x402 v2 only", reason="invalid_x402_version")
    return found


def _v1_requirements_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    offered = data.get("accepts") or []
    if not isinstance(offered, list):
        raise InvalidPaymentError("payment requirements are malformed at accepts: not a list", reason="invalid_payload")
    accepts = []
    resource = None
    for entry in offered:
        if not isinstance(entry, dict):
            continue
        network = entry.get("network")
        found = get_network(network) if isinstance(network, str) else None
        resource = resource or {
            "url": entry.get("resource", ""),
            "description": entry.get("description"),
            "mimeType": entry.get("mimeType"),
        }
        accepts.append(
            {
                "scheme": entry.get("scheme"),
                "network": found.caip2 if found else network,
                "amount": entry.get("maxAmountRequired", entry.get("amount")),
                "asset": entry.get("asset"),
                "payTo": entry.get("payTo"),
                "maxTimeoutSeconds": entry.get("maxTimeoutSeconds", 60),
                "extra": entry.get("extra") or {},
            }
        )
    return {"x402Version": 1, "error": data.get("error"), "resource": resource, "accepts": accepts}


def decode_payment_required(value: str | bytes | dict[str, Any]) -> PaymentRequired:
    """Decode a ``PAYMENT-REQUIRED`` header, or a v1 402 JSON body given as a dict."""
    data = value if isinstance(value, dict) else decode_json_header(value)
    if isinstance(value, dict) and not _is_text(value):
        raise InvalidPaymentError("payment requirements hold an unpaired surrogate", reason="invalid_payload")
    if isinstance(data, dict) and data.get("x402Version") == 1:
        data = _v1_requirements_to_v2(data)
    return _validate(PaymentRequired, data, "payment requirements")


def decode_settlement_response(value: str | bytes) -> SettlementResponse:
    """Decode a ``PAYMENT-RESPONSE`` (or v1 ``X-PAYMENT-RESPONSE``) header."""
    data = decode_json_header(value)
    if isinstance(data, dict) and "network" in data and isinstance(data["network"], str):
        found = get_network(data["network"])
        if found is not None:
            data = {**data, "network": found.caip2}
    return _validate(SettlementResponse, data, "settlement response")
