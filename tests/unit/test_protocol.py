from __future__ import annotations

import base64
import json
import re
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from x402mw.errors import InvalidPaymentError, PriceError
from x402mw.protocol import (
    PaymentRequired,
    PaymentRequirements,
    decode_payment_payload,
    decode_payment_required,
    decode_settlement_response,
    encode_header,
    format_amount,
    get_network,
    normalize_reason,
    parse_caip2,
    to_atomic,
)
from x402mw.protocol.prices import AmountFormat, JsonNumber, decimal_pattern, json_number, parse_decimal

OFFER = {
    "scheme": "exact",
    "network": "eip155:84532",
    "amount": "10000",
    "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
    "payTo": "0x" + "ab" * 20,
    "maxTimeoutSeconds": 60,
    "extra": {"name": "USDC", "version": "2"},
}
AUTH = {
    "from": "0x" + "cd" * 20,
    "to": "0x" + "ab" * 20,
    "value": "10000",
    "validAfter": "0",
    "validBefore": "9999999999",
    "nonce": "0x" + "00" * 32,
}


def _b64(data: object) -> str:
    return base64.b64encode(json.dumps(data).encode()).decode()


def test_payment_required_round_trips_in_camel_case_without_nulls() -> None:
    required = PaymentRequired.model_validate(
        {"x402Version": 2, "resource": {"url": "https://x/y"}, "accepts": [OFFER]}
    )
    header = encode_header(required)
    raw = json.loads(base64.b64decode(header))
    assert raw["accepts"][0]["payTo"] == OFFER["payTo"] and raw["accepts"][0]["amount"] == "10000"
    assert "error" not in raw and "mimeType" not in raw["resource"]
    assert decode_payment_required(header) == required


def test_unknown_members_from_other_implementations_are_kept() -> None:
    offer = PaymentRequirements.model_validate(OFFER | {"outputSchema": {"a": 1}})
    assert offer.to_wire()["outputSchema"] == {"a": 1}


def test_payload_decoding_reads_v2_and_v1() -> None:
    v2 = decode_payment_payload(
        _b64({"x402Version": 2, "accepted": OFFER, "payload": {"signature": "0x12", "authorization": AUTH}})
    )
    assert v2.accepted is not None and v2.accepted.amount == 10_000
    v1 = decode_payment_payload(
        _b64(
            {
                "x402Version": 1,
                "scheme": "exact",
                "network": "base-sepolia",
                "payload": {"signature": "0x12", "authorization": AUTH},
            }
        )
    )
    assert v1.accepted is None and v1.network == "eip155:84532" and v1.x402_version == 1


def test_v1_requirements_body_is_read_as_v2() -> None:
    body = {
        "x402Version": 1,
        "error": "pay",
        "accepts": [
            {
                "scheme": "exact",
                "network": "base",
                "maxAmountRequired": "500",
                "resource": "https://x/r",
                "payTo": "0x" + "ab" * 20,
                "asset": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
                "maxTimeoutSeconds": 30,
            }
        ],
    }
    required = decode_payment_required(body)
    assert required.accepts[0].network == "eip155:8453" and required.accepts[0].amount == 500
    assert required.resource is not None and required.resource.url == "https://x/r"


@pytest.mark.parametrize(
    "value",
    [
        "",
        "%%%",
        "A" * 9000,
        base64.b64encode(b"nope").decode(),
        _b64([1]),
        _b64({"x402Version": 2}),
        _b64({"x402Version": 3, "accepted": OFFER, "payload": {"signature": "0x", "authorization": AUTH}}),
        _b64({"x402Version": 2, "payload": {"signature": "0x", "authorization": AUTH}}),
        _b64(
            {
                "x402Version": 2,
                "accepted": OFFER | {"amount": 1.5},
                "payload": {"signature": "0x", "authorization": AUTH},
            }
        ),
        _b64(
            {
                "x402Version": 2,
                "accepted": OFFER,
                "payload": {"signature": "0x", "authorization": AUTH | {"nonce": "0x12"}},
            }
        ),
    ],
)
def test_bad_payment_headers_raise_invalid_payload(value: str) -> None:
    with pytest.raises(InvalidPaymentError) as caught:
        decode_payment_payload(value)
    assert caught.value.reason in ("invalid_payload", "invalid_x402_version")


def _nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize("decode", [decode_payment_payload, decode_payment_required, decode_settlement_response])
def test_headers_nested_too_deep_are_refused_before_parsing(decode: object) -> None:
    payload = {"x402Version": 2, "accepted": OFFER, "payload": {"signature": "0x", "authorization": AUTH}}
    assert decode_payment_payload(_b64(payload | {"extensions": _nested(62)})).extensions is not None
    for deep in (_nested(64), "[" * 6000):  # 65 levels with the payload's own object; the most 8 KiB holds
        value = _b64(payload | {"extensions": deep}) if isinstance(deep, dict) else base64.b64encode(deep.encode())
        with pytest.raises(InvalidPaymentError) as caught:
            decode(value)  # type: ignore[operator]
        assert caught.value.reason == "invalid_payload"
        assert caught.value.message == "payment header JSON is nested more than 64 levels deep"


def test_a_v1_body_whose_accepts_is_not_a_list_is_malformed() -> None:
    for accepts in (True, 5, {"a": 1}):
        with pytest.raises(InvalidPaymentError) as caught:
            decode_payment_required({"x402Version": 1, "accepts": accepts})
        assert caught.value.reason == "invalid_payload"


def test_unpaired_surrogate_escapes_are_refused_and_pairs_are_read() -> None:
    """JSON may spell half a UTF-16 pair; no text holds it, and echoing it would fail (found by
    tests/unit/test_fuzz_codec.py: a seller forwarding such a payload raised UnicodeEncodeError)."""
    payload = {"x402Version": 2, "accepted": OFFER, "payload": {"signature": "0x", "authorization": AUTH}}
    for extensions in ({"\ud800": 1}, {"a": "x\udfff"}):
        raw = json.dumps(payload | {"extensions": extensions})  # ensure_ascii spells it "\ud800"
        with pytest.raises(InvalidPaymentError) as caught:
            decode_payment_payload(base64.b64encode(raw.encode()).decode())
        assert caught.value.message == "payment header holds an unpaired surrogate escape"
    emoji = json.dumps(payload | {"extensions": {"note": "\U0001f600"}})  # ensure_ascii: "\ud83d\ude00"
    assert "\\ud83d" in emoji
    decoded = decode_payment_payload(base64.b64encode(emoji.encode()).decode())
    assert decoded.extensions == {"note": "\U0001f600"}
    assert decode_payment_payload(encode_header(decoded)).extensions == {"note": "\U0001f600"}
    with pytest.raises(InvalidPaymentError):
        decode_payment_required({"x402Version": 1, "accepts": [{"extra": {"\ud800": 1}}]})


def test_settlement_response_carries_the_receipt() -> None:
    header = _b64(
        {
            "success": True,
            "transaction": "0xab",
            "network": "base-sepolia",
            "amount": "5",
            "extensions": {"receipt": {"signature": "0x1"}},
        }
    )
    response = decode_settlement_response(header)
    assert response.network == "eip155:84532" and response.receipt == {"signature": "0x1"}


@pytest.mark.parametrize(
    ("price", "atomic"),
    [
        ("$0.01", 10_000),
        ("0.01 USDC", 10_000),
        ("1", 1_000_000),
        (Decimal("0.000001"), 1),
        (2500, 2500),
        ("1000000", 1_000_000_000_000),
    ],
)
def test_prices_are_exact(price: object, atomic: int) -> None:
    assert to_atomic(price) == atomic  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "price",
    [
        *(0.01, "0.0000001", "$-1", "0", "1e3", "NaN", "0.01 EURC", True, "abc", -5),
        # one grammar for amounts as text: no white space, other digits, bare points, signs or leading zeros
        *(" 1 ", "1 ", "１", "٣", "1.", ".5", "+1", "01", "$ 1", "1_000", "0.01  USDC", "0x10"),
    ],
)
def test_bad_prices_are_refused(price: object) -> None:
    with pytest.raises(PriceError):
        to_atomic(price)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "valid"),
    [("25.00", True), ("0", True), ("0.5", True), ("10", True), ("1.000000000", True)]
    + [(bad, False) for bad in (" 1 ", "１", "1.", ".5", "+1", "-1", "01", "00.5", "1e3", "1,5", "", "1\n")],
)
def test_the_decimal_grammar(text: str, valid: bool) -> None:
    assert (re.fullmatch(decimal_pattern(), text) is not None) is valid
    if valid:
        assert parse_decimal(text) == Decimal(text)
    else:
        with pytest.raises(PriceError):
            parse_decimal(text)


ORDER = AmountFormat(decimals=6, max_exponent=9)


@pytest.mark.parametrize(
    ("value", "atomic"),
    [
        ("25.00", 25_000_000),
        ("0.000001", 1),
        ("1000000000", 10**15),
        ("1000000000.000000", 10**15),
        (12, 12_000_000),
        # a JSON number is read by its value, exponents included
        (JsonNumber("12.5"), 12_500_000),
        (JsonNumber("1e3"), 10**9),
        (JsonNumber("1.50000000"), 1_500_000),
    ],
)
def test_amounts_an_api_takes(value: object, atomic: int) -> None:
    assert ORDER.parse(value) == atomic


@pytest.mark.parametrize(
    ("value", "message"),
    [
        *((text, "decimal") for text in (" 1 ", "１", "1.", ".5", "+1", "1e3", "01")),
        *((value, "greater than zero") for value in ("0", "0.000000", JsonNumber("-1.5"))),
        *((value, "at most") for value in ("1000000000.000001", JsonNumber("1e10"))),
        *((value, "6 decimals") for value in ("1.0000000", JsonNumber("1e-7"))),
        *((value, "decimal") for value in (1.5, True, None, [])),
    ],
)
def test_amounts_an_api_refuses(value: object, message: str) -> None:
    with pytest.raises(PriceError, match=message):
        ORDER.parse(value)


_AMOUNT_TEXT = st.text(alphabet="0123456789.", max_size=14) | st.from_regex(ORDER.pattern(), fullmatch=True)


@given(_AMOUNT_TEXT, st.sampled_from([ORDER, AmountFormat(decimals=6, max_exponent=6), AmountFormat(2, 1)]))
def test_an_amount_pattern_matches_exactly_what_its_parser_takes(text: str, amounts: AmountFormat) -> None:
    try:
        amounts.parse(text)
        parsed = True
    except PriceError:
        parsed = False
    assert (re.fullmatch(amounts.pattern(), text) is not None) is parsed


def test_json_numbers_are_ints_when_whole_and_their_text_otherwise() -> None:
    data = json.loads('{"a": 2775.0, "b": 1e3, "c": 12.50, "d": 1e-7, "e": 1e400, "f": 7}', parse_float=json_number)
    assert data == {"a": 2775, "b": 1000, "c": "12.50", "d": "1e-7", "e": "1e400", "f": 7}
    assert [type(data[k]) for k in "abcdef"] == [int, int, JsonNumber, JsonNumber, JsonNumber, int]


def test_dollar_prices_are_usdc_only() -> None:
    with pytest.raises(PriceError):
        to_atomic("$1", symbol="EURC")
    assert to_atomic("0.5 EURC", symbol="EURC") == 500_000


@given(st.integers(min_value=1, max_value=10**30))
def test_format_amount_round_trips(atomic: int) -> None:
    assert to_atomic(format_amount(atomic)) == atomic


def test_networks_and_reasons() -> None:
    base = get_network("eip155:8453")
    assert base is not None and base.asset("usdc") is not None and base.asset("USDT") is None
    assert get_network("base") is base and get_network(8453) is base and get_network("solana:x") is None


@pytest.mark.parametrize(
    "network", ["eip155:08453", "eip155:٨٤٥٣", "eip155:", "eip155:-1", "eip155:8453 ", "EIP155:8453"]
)
def test_a_network_has_one_spelling(network: str) -> None:
    with pytest.raises(ValueError, match="CAIP-2"):
        parse_caip2(network)
    assert get_network(network) is None
    assert parse_caip2("eip155:8453") == 8453 and parse_caip2("eip155:0") == 0
    assert normalize_reason("invalidExactEvmPayloadSignature") == "invalid_exact_evm_payload_signature"
