"""Property tests of the header codec and of the bounded JSON loader under it.

Every wire model round-trips through its header; whatever bytes or text arrive as a header, the
decoders raise `InvalidPaymentError` and nothing else; the loader measures nesting exactly and
parses what `json.loads` parses. The draws are derandomized (no example database), so a run repeats.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from x402mw.errors import InvalidPaymentError
from x402mw.protocol import (
    MAX_HEADER_BYTES,
    Authorization,
    ExactEvmPayload,
    PaymentPayload,
    PaymentRequired,
    PaymentRequirements,
    ResourceInfo,
    SettlementResponse,
    VerifyResponse,
    decode_payment_payload,
    decode_payment_required,
    decode_settlement_response,
    encode_header,
)
from x402mw.protocol.bounded_json import JsonLimitError, loads, nesting_depth
from x402mw.protocol.codec import decode_json_header
from x402mw.protocol.models import WireModel

FUZZ = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# -- strategies ---------------------------------------------------------------------------------

texts = st.text(max_size=12)
scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False)


def json_values_of(strings: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    return st.recursive(
        scalars | strings,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(strings, inner, max_size=3),
        max_leaves=8,
    )


json_values = json_values_of(texts)
json_objects = st.dictionaries(texts, json_values, max_size=5)
# From outside, lone surrogates too: JSON spells half a UTF-16 pair as "\ud800".
hostile_texts = st.text(st.characters(exclude_categories=()), max_size=12) | st.tuples(
    texts, st.sampled_from(["\ud800", "\udfff", "\ud83d"]), texts
).map("".join)
hostile_values = json_values_of(hostile_texts)
addresses = st.binary(min_size=20, max_size=20).map(lambda raw: "0x" + raw.hex())
atomic = st.integers(0, 2**256 - 1)
networks = st.integers(0, 10**20 - 1).map(lambda chain_id: f"eip155:{chain_id}")
# Members other implementations add: kept and echoed (a null one is left out, as every null is).
unknown_members = st.dictionaries(texts.map(lambda name: "x-" + name), json_values, max_size=2)


def models(model: type[WireModel], **fields: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    members = st.tuples(unknown_members, st.fixed_dictionaries(fields))
    return members.map(lambda drawn: model.model_validate(drawn[0] | drawn[1]))


resources = models(
    ResourceInfo, url=texts, description=st.none() | texts, mimeType=st.none() | st.sampled_from(["application/json"])
)
requirements = models(
    PaymentRequirements,
    scheme=st.sampled_from(["exact", "upto"]) | texts,
    network=networks,
    amount=atomic.map(str),
    asset=addresses,
    payTo=addresses,
    maxTimeoutSeconds=st.integers(0, 10**6),
    extra=json_objects,
)
authorizations = models(
    Authorization,
    **{
        "from": addresses,
        "to": addresses,
        "value": atomic.map(str),
        "validAfter": atomic.map(str),
        "validBefore": atomic.map(str),
        "nonce": st.binary(min_size=32, max_size=32).map(lambda raw: "0x" + raw.hex()),
    },
)
evm_payloads = models(
    ExactEvmPayload, signature=st.binary(max_size=65).map(lambda raw: "0x" + raw.hex()), authorization=authorizations
)
payment_payloads = models(
    PaymentPayload,
    x402Version=st.just(2),
    resource=st.none() | resources,
    accepted=requirements,
    payload=evm_payloads,
    extensions=st.none() | json_objects,
)
payment_requireds = models(
    PaymentRequired,
    x402Version=st.just(2),
    error=st.none() | texts,
    resource=st.none() | resources,
    accepts=st.lists(requirements, max_size=3),
    extensions=st.none() | json_objects,
)
settlements = models(
    SettlementResponse,
    success=st.booleans(),
    errorReason=st.none() | texts,
    payer=st.none() | addresses,
    transaction=st.text(max_size=66),
    network=networks,
    amount=st.none() | atomic.map(str),
    extensions=st.none() | json_objects,
)
verifications = models(
    VerifyResponse, isValid=st.booleans(), invalidReason=st.none() | texts, payer=st.none() | addresses
)


def header(data: Any) -> str:
    return base64.b64encode(json.dumps(data).encode()).decode()


# Near-valid headers: a valid wire dict with one member dropped, replaced by any JSON value, or an
# unknown member added, at any depth.
@st.composite
def mutated(draw: st.DrawFn, value: Any) -> Any:
    if isinstance(value, dict) and value and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(value)))
        action = draw(st.sampled_from(["drop", "replace", "recurse", "add"]))
        if action == "drop":
            return {k: v for k, v in value.items() if k != key}
        if action == "replace":
            return value | {key: draw(hostile_values)}
        if action == "add":
            return value | {draw(hostile_texts): draw(hostile_values)}
        return value | {key: draw(mutated(value[key]))}
    if isinstance(value, list) and value and draw(st.booleans()):
        index = draw(st.integers(0, len(value) - 1))
        return [*value[:index], draw(mutated(value[index])), *value[index + 1 :]]
    return draw(hostile_values) if draw(st.booleans()) else value


DECODERS = (decode_payment_payload, decode_payment_required, decode_settlement_response)
OFFER = {
    "scheme": "exact",
    "network": "eip155:84532",
    "amount": "10000",
    "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
    "payTo": "0x" + "ab" * 20,
    "maxTimeoutSeconds": 60,
    "extra": {"name": "USDC", "version": "2", "challengeId": "ch_1", "expiresAt": 1_900_000_000, "seal": "s"},
}
AUTHORIZATION = {
    "from": "0x" + "cd" * 20,
    "to": "0x" + "ab" * 20,
    "value": "10000",
    "validAfter": "0",
    "validBefore": "9999999999",
    "nonce": "0x" + "00" * 32,
}
VALID_WIRE = [
    {
        "x402Version": 2,
        "resource": {"url": "https://seller.example/weather"},
        "accepted": OFFER,
        "payload": {"signature": "0x" + "11" * 65, "authorization": AUTHORIZATION},
    },
    {"x402Version": 2, "error": "payment_required", "resource": {"url": "/weather"}, "accepts": [OFFER, OFFER]},
    {"success": True, "transaction": "0x" + "22" * 32, "network": "eip155:84532", "payer": "0x" + "cd" * 20},
    {
        "x402Version": 1,
        "scheme": "exact",
        "network": "base-sepolia",
        "payload": {"signature": "0x", "authorization": AUTHORIZATION},
    },
    {
        "x402Version": 1,
        "accepts": [OFFER | {"network": "base", "maxAmountRequired": "1", "resource": "/weather", "amount": None}],
    },
]
wire_dicts = st.sampled_from(VALID_WIRE).flatmap(mutated)
hostile_headers = st.one_of(
    st.binary(max_size=64),
    st.integers(MAX_HEADER_BYTES - 4, MAX_HEADER_BYTES + 4).map(lambda size: base64.b64encode(b"1" * size)[:size]),
    st.text(max_size=300),
    hostile_values.map(header),
    st.binary(max_size=600).map(lambda raw: base64.b64encode(raw).decode()),
    wire_dicts.map(header),
    st.integers(1, 7000).map(lambda depth: base64.b64encode(b"[" * depth).decode()),
)

# -- properties ---------------------------------------------------------------------------------


@FUZZ
@given(payment_payloads)
def test_payment_payloads_round_trip(payload: PaymentPayload) -> None:
    decoded = decode_payment_payload(encode_header(payload))
    assert decoded.to_wire() == payload.to_wire()
    signed, read = payload.payload.authorization, decoded.payload.authorization
    assert (read.value, read.valid_after, read.valid_before, read.nonce) == (
        signed.value,
        signed.valid_after,
        signed.valid_before,
        signed.nonce,
    )


@FUZZ
@given(payment_requireds)
def test_payment_requirements_round_trip(required: PaymentRequired) -> None:
    decoded = decode_payment_required(encode_header(required))
    assert decoded.to_wire() == required.to_wire()
    assert [entry.amount for entry in decoded.accepts] == [entry.amount for entry in required.accepts]


@FUZZ
@given(settlements)
def test_settlement_responses_round_trip(response: SettlementResponse) -> None:
    decoded = decode_settlement_response(encode_header(response))
    assert decoded.to_wire() == response.to_wire()
    assert (decoded.success, decoded.amount, decoded.receipt) == (response.success, response.amount, response.receipt)


@settings(FUZZ, max_examples=400)
@given(st.one_of(resources, requirements, authorizations, evm_payloads, verifications))
def test_every_other_wire_model_round_trips_through_a_header(model: WireModel) -> None:
    decoded = type(model).model_validate(decode_json_header(encode_header(model)))
    assert decoded.to_wire() == model.to_wire()


@settings(FUZZ, max_examples=2000)
@given(hostile_headers, st.sampled_from(DECODERS))
def test_any_header_decodes_or_raises_invalid_payment_error(value: str | bytes, decode: Any) -> None:
    try:
        model = decode(value)
    except InvalidPaymentError as exc:
        assert exc.reason in ("invalid_payload", "invalid_x402_version")
        assert exc.message
        return
    encode_header(model)  # what was read can be written again (a seller echoes it)


@settings(FUZZ, max_examples=800)
@given(st.one_of(hostile_values, wire_dicts))
def test_any_v1_body_offer_decodes_or_raises_invalid_payment_error(body: Any) -> None:
    offer = body | {"x402Version": 1} if isinstance(body, dict) else {"x402Version": 1, "accepts": body}
    try:
        required = decode_payment_required(offer)
    except InvalidPaymentError as exc:
        assert exc.reason == "invalid_payload"
        return
    encode_header(required)


def _depth(value: Any) -> int:
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
    return 0 if children is None else 1 + max(map(_depth, children), default=0)


brackety_texts = st.text(alphabet='[]{}"\\ax:,', max_size=12)
brackety_values = st.recursive(
    st.none() | st.integers() | brackety_texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(brackety_texts, inner, max_size=3),
    max_leaves=30,
)


@settings(FUZZ, max_examples=1000)
@given(st.one_of(json_values, brackety_values), st.booleans(), st.sampled_from([None, 0, 2]))
def test_nesting_depth_is_exact_for_json(value: Any, ascii_only: bool, indent: int | None) -> None:
    document = json.dumps(value, ensure_ascii=ascii_only, indent=indent).encode("utf-8", "surrogatepass")
    assert nesting_depth(document) == _depth(value)
    limit = _depth(value)
    assert loads(document, max_depth=limit) == json.loads(document)
    if limit:
        try:
            loads(document, max_depth=limit - 1)
        except JsonLimitError as exc:
            assert exc.code == "json_too_deep"
        else:
            raise AssertionError("a document one level over the limit was parsed")


@settings(FUZZ, max_examples=1000)
@given(
    st.one_of(
        st.binary(max_size=200), brackety_texts.map(str.encode), json_values.map(lambda v: json.dumps(v)[:-1].encode())
    )
)
def test_the_loader_parses_what_json_loads_parses_within_the_limits(document: bytes) -> None:
    try:
        expected: Any = json.loads(document, parse_constant=lambda name: None)
    except (ValueError, RecursionError):
        expected = ValueError
    try:
        found: Any = loads(document, max_depth=10**6)
    except ValueError:
        found = ValueError
    if b"NaN" in document or b"Infinity" in document:
        return  # refused by the loader, read by json.loads
    assert found == expected or (found, expected) == (ValueError, ValueError)
