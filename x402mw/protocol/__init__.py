"""x402 v2 wire protocol: models, header codec, networks, assets and exact decimal prices."""

from x402mw.protocol.codec import (
    MAX_HEADER_BYTES,
    PAYMENT_REQUIRED,
    PAYMENT_RESPONSE,
    PAYMENT_SIGNATURE,
    V1_PAYMENT,
    decode_payment_payload,
    decode_payment_required,
    decode_settlement_response,
    encode_header,
)
from x402mw.protocol.models import (
    X402_VERSION,
    Authorization,
    ExactEvmPayload,
    PaymentPayload,
    PaymentRequired,
    PaymentRequirements,
    ResourceInfo,
    SettlementResponse,
    VerifyResponse,
)
from x402mw.protocol.networks import (
    Asset,
    Network,
    get_network,
    known_networks,
    parse_caip2,
    register_network,
)
from x402mw.protocol.prices import Price, format_amount, to_atomic
from x402mw.protocol.reasons import normalize_reason

__all__ = [
    "MAX_HEADER_BYTES",
    "PAYMENT_REQUIRED",
    "PAYMENT_RESPONSE",
    "PAYMENT_SIGNATURE",
    "V1_PAYMENT",
    "X402_VERSION",
    "Asset",
    "Authorization",
    "ExactEvmPayload",
    "Network",
    "PaymentPayload",
    "PaymentRequired",
    "PaymentRequirements",
    "Price",
    "ResourceInfo",
    "SettlementResponse",
    "VerifyResponse",
    "decode_payment_payload",
    "decode_payment_required",
    "decode_settlement_response",
    "encode_header",
    "format_amount",
    "get_network",
    "known_networks",
    "normalize_reason",
    "parse_caip2",
    "register_network",
    "to_atomic",
]
