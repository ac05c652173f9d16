"""Property tests of every request body of the platform API, read as the handlers read them.

Each handler reads its body with ``read_json`` and validates it with ``parse_body(Model, ...)``. For
every such model (found in the source, so a new endpoint is covered or this file fails), arbitrary
bytes and JSON values, and valid bodies with one field dropped, replaced or added at any depth, give
either the model or an `HttpError` of a documented status and code whose ``param`` names the field
at fault. Requests are real Starlette requests fed through their ``receive`` channel, in chunks.
The draws are derandomized (no example database), so a run repeats.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import inspect
import json
import pkgutil
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from starlette.requests import Request

import x402mw.platform.api
import x402mw.platform.checkout
from x402mw.platform.http.bodies import MAX_BODY_BYTES, parse_body, read_json
from x402mw.platform.http.errors import HttpError

FUZZ = settings(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
DOCUMENTED = {
    400: {
        "body_missing",
        "invalid_json",
        "json_too_deep",
        "parameter_missing",
        "parameter_invalid",
        "parameter_unknown",
    },
    413: {"body_too_large"},
}
NAMES_A_PARAM = {"parameter_missing", "parameter_invalid", "parameter_unknown"}
ADDRESS = "0x" + "ab" * 20
OFFER = {
    "scheme": "exact",
    "network": "eip155:84532",
    "amount": "10000",
    "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
    "payTo": ADDRESS,
    "maxTimeoutSeconds": 300,
    "extra": {"name": "USDC", "version": "2", "challengeId": "ch_1", "expiresAt": 1_900_000_000, "seal": "s"},
}
PAYLOAD = {
    "x402Version": 2,
    "resource": {"url": "https://api.example/weather"},
    "accepted": OFFER,
    "payload": {
        "signature": "0x" + "11" * 65,
        "authorization": {
            "from": "0x" + "cd" * 20,
            "to": ADDRESS,
            "value": "10000",
            "validAfter": "0",
            "validBefore": "1900000000",
            "nonce": "0x" + "00" * 32,
        },
    },
}
UPTO_OFFER = {
    **OFFER,
    "scheme": "upto",
    "extra": {**OFFER["extra"], "facilitatorAddress": "0x" + "ef" * 20},  # type: ignore[dict-item]
}
UPTO_PAYLOAD = {
    "x402Version": 2,
    "accepted": UPTO_OFFER,
    "payload": {
        "signature": "0x" + "11" * 65,
        "permit2Authorization": {
            "from": "0x" + "cd" * 20,
            "permitted": {"token": OFFER["asset"], "amount": "10000"},
            "spender": "0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002",
            "nonce": "12345",
            "deadline": "1900000000",
            "witness": {"to": ADDRESS, "facilitator": "0x" + "ef" * 20, "validAfter": "0"},
        },
    },
}
CHANNEL_PAYLOAD = {
    "x402Version": 2,
    "accepted": OFFER | {"scheme": "batch-settlement"},
    "payload": {
        "type": "voucher",
        "channelConfig": {
            "payer": "0x" + "cd" * 20,
            "payerAuthorizer": "0x" + "00" * 20,
            "receiver": ADDRESS,
            "receiverAuthorizer": "0x" + "ef" * 20,
            "token": OFFER["asset"],
            "withdrawDelay": 900,
            "salt": "0x" + "00" * 32,
        },
        "voucher": {"channelId": "0x" + "ab" * 32, "maxClaimableAmount": "10000", "signature": "0x" + "11" * 65},
    },
}
CHALLENGE = {
    "challengeId": "ch_1",
    "endpointId": "6f1c9a52-0d36-4bd4-9a8f-4b1f0f2f6a10",
    "network": "eip155:84532",
    "asset": OFFER["asset"],
    "payTo": ADDRESS,
    "amount": "10000",
    "resource": "https://api.example/weather",
    "expiresAt": 1_900_000_000,
}
VALID: dict[str, dict[str, Any]] = {
    "PaymentIntentCreate": {
        "orderId": "order-1",
        "amount": "12.50",
        "currency": "USDC",
        "acceptedCurrencies": ["USDC", "EURC"],
        "customer": {"email": "ada@example.com", "name": "Ada"},
        "successUrl": "https://shop.example/thanks",
        "cancelUrl": "https://shop.example/cart",
        "metadata": {"cartId": "42"},
        "paymentMethods": {"wallet": True, "transfer": True, "transferDefaultOpen": False},
        "expiresAt": "2030-01-31T12:00:00Z",
    },
    "RefundCreate": {"reason": "requested_by_customer"},
    "FaucetBody": {"network": "eip155:84532", "currency": "USDC", "address": ADDRESS, "amount": "5"},
    "SimulatePaymentBody": {"scenario": "underpaid", "network": "eip155:84532"},
    "FacilitatorBody": {"x402Version": 2, "paymentPayload": PAYLOAD, "paymentRequirements": OFFER},
    "UptoFacilitatorBody": {"x402Version": 2, "paymentPayload": UPTO_PAYLOAD, "paymentRequirements": UPTO_OFFER},
    "ChannelFacilitatorBody": {
        "x402Version": 2,
        "paymentPayload": CHANNEL_PAYLOAD,
        "paymentRequirements": OFFER | {"scheme": "batch-settlement"},
    },
    "WebhookEndpointCreate": {
        "url": "https://hooks.example/x402",
        "enabledEvents": ["payment_intent.succeeded"],
        "description": "orders",
    },
    "WebhookEndpointUpdate": {"url": "https://hooks.example/v2", "enabledEvents": ["*"], "status": "disabled"},
    "SecretRotation": {"expiresInSeconds": 3600},
    "EndpointCreate": {
        "name": "Weather",
        "resourceUrl": "https://api.example/weather",
        "chainId": 84532,
        "currency": "USDC",
        "payoutAddress": ADDRESS,
        "pricingMode": "fixed",
        "amountMinor": "10000",
        "releasePolicy": "included",
        "maxTimeoutSeconds": 300,
    },
    "EndpointUpdate": {"name": "Weather+", "amountMinor": "20000", "releasePolicy": "confirmed", "discoverable": True},
    "ChallengeBatch": {"challenges": [CHALLENGE, CHALLENGE | {"challengeId": "ch_2"}]},
    "SettleBody": {
        "endpointId": CHALLENGE["endpointId"],
        "challengeId": "ch_1",
        "resource": "https://api.example/weather",
        "expiresAt": 1_900_000_000,
        "accepted": OFFER,
        "paymentPayload": PAYLOAD,
        "waitSeconds": 18.5,
        "description": "Weather",
        "mimeType": "application/json",
        "extensions": {"bazaar": {"info": {"input": {"type": "http", "method": "GET"}}, "schema": {}}},
    },
    "SignInBody": {
        "endpointId": CHALLENGE["endpointId"],
        "address": ADDRESS,
        "message": "a.example wants you to sign in with your Ethereum account:",
        "signature": "0x" + "11" * 65,
        "nonce": "abcdef0123456789",
        "keepUntil": 1_900_000_000,
        "windowSeconds": 3600,
    },
    "PaymentRequirements": OFFER,
    "PaymentPayload": PAYLOAD,
    "UptoPaymentPayload": UPTO_PAYLOAD,
    "ChannelPaymentPayload": CHANNEL_PAYLOAD,
    "AttemptBody": {"network": "eip155:84532", "currency": "USDC", "method": "wallet"},
    "TransferStatusBody": {},
    "SyncBody": {"txHash": "0x" + "ab" * 32, "network": "eip155:84532"},
    "PrepareBody": {"network": "eip155:84532", "currency": "USDC"},
    "AuthorizationBody": {
        "network": "eip155:84532",
        "currency": "USDC",
        "authorization": {
            "from": ADDRESS,
            "to": ADDRESS,
            "value": "12500000",
            "validAfter": 0,
            "validBefore": "1900000000",
            "nonce": "0x" + "11" * 32,
        },
        "signature": "0x" + "ab" * 65,
    },
    "PaymentLinkCreate": {
        "name": "Ticket",
        "amount": "25.00",
        "currency": "USDC",
        "acceptedCurrencies": ["USDC", "EURC"],
        "paymentMethods": {"wallet": True, "transfer": False},
        "successUrl": "https://shop.example/thanks",
        "metadata": {"sku": "T-1"},
        "slug": "concert-2026",
    },
    "PaymentLinkUpdate": {"name": "VIP ticket", "active": False},
    "PlanCreate": {
        "name": "Pro",
        "amount": "9.99",
        "currency": "USDC",
        "interval": "monthly",
        "slug": "pro-monthly",
        "graceDays": 10,
    },
    "PlanUpdate": {"name": "Pro+", "amount": "12", "active": False, "graceDays": None},
    "SubscriptionCreate": {
        "planId": CHALLENGE["endpointId"],
        "merchantCustomerId": "cus_42",
        "customerEmail": "ada@example.com",
        "testClock": CHALLENGE["endpointId"],
    },
    "SubscriptionCancel": {"atPeriodEnd": True},
    "CaptureBody": {"amountMinor": "1500", "waitSeconds": 5},
    "ClockCreate": {"frozenTime": "2026-01-31T10:00:00Z"},
    "ClockAdvance": {"frozenTime": "2026-02-28T10:00:00.5+01:00"},
}


def _modules(package: ModuleType) -> Iterator[ModuleType]:
    for info in pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}."):
        yield importlib.import_module(info.name)


def _parse_body_calls() -> dict[str, tuple[type[BaseModel], str]]:
    """Every ``parse_body(Model, ..., prefix=...)`` in the API and checkout modules, by model name
    (and in `MAY_BE_EMPTY`, the models of bodies read with ``read_json(..., allow_empty=True)``)."""
    found: dict[str, tuple[type[BaseModel], str]] = {}
    for module in [*_modules(x402mw.platform.api), *_modules(x402mw.platform.checkout)]:
        for node in ast.walk(ast.parse(inspect.getsource(module))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "parse_body":
                name = node.args[0]
                assert isinstance(name, ast.Name), ast.unparse(node)
                prefix = next((ast.literal_eval(k.value) for k in node.keywords if k.arg == "prefix"), "")
                found[name.id] = (getattr(module, name.id), prefix)
                for call in ast.walk(node.args[1]):
                    if isinstance(call, ast.Call) and any(k.arg == "allow_empty" for k in call.keywords):
                        MAY_BE_EMPTY.add(name.id)
    return found


MAY_BE_EMPTY: set[str] = set()
BODIES = _parse_body_calls()


def test_every_parsed_body_model_is_fuzzed() -> None:
    assert len(BODIES) >= 17
    assert sorted(BODIES) == sorted(VALID)
    for name, (model, prefix) in BODIES.items():
        assert isinstance(parse_body(model, VALID[name], prefix=prefix), model), name
        assert not prefix or prefix in HOLDER, f"{name} is read from inside which body?"


# -- reading a body as a handler does -----------------------------------------------------------


def _request(body: bytes, chunk: int) -> Request:
    chunks = [body[at : at + chunk] for at in range(0, len(body), chunk)] or [b""]

    async def receive() -> dict[str, Any]:
        if chunks:
            part = chunks.pop(0)
            return {"type": "http.request", "body": part, "more_body": bool(chunks)}
        return {"type": "http.disconnect"}

    return Request({"type": "http", "method": "POST", "path": "/", "headers": []}, receive)


# A body parsed with a prefix is a member of another body, validated after it (as the handler does).
HOLDER = {"accepted.": "SettleBody", "paymentPayload.": "SettleBody"}


def _full_body(name: str, body: bytes) -> bytes:
    prefix = BODIES[name][1]
    if not prefix:
        return body
    holder = {key: value for key, value in VALID[HOLDER[prefix]].items() if key != prefix[:-1]}
    return _encode(holder)[:-1] + b', "' + prefix[:-1].encode() + b'": ' + body + b"}"


async def _read(name: str, body: bytes, chunk: int) -> BaseModel | HttpError:
    """What the handler of ``name`` makes of ``body`` (for a member body: of its holder holding it)."""
    model, prefix = BODIES[name]
    try:
        data = await read_json(_request(_full_body(name, body), chunk), allow_empty=name in MAY_BE_EMPTY)
        if not prefix:
            return parse_body(model, data, prefix=prefix)
        parse_body(BODIES[HOLDER[prefix]][0], data)
        return parse_body(model, data[prefix[:-1]], prefix=prefix)
    except HttpError as exc:
        return exc


@pytest.fixture(scope="module")
def runner() -> Iterator[asyncio.Runner]:
    with asyncio.Runner() as started:
        yield started


def _as_param(path: str) -> str:
    """A path as ``param`` spells it: at most 200 characters, a lone surrogate as ``\\ud800``."""
    return path[:200].encode("utf-8", "backslashreplace").decode()


def _named(key: str) -> str:
    return _as_param(key).split(".")[0]


def _check_refusal(error: HttpError, name: str, body: bytes) -> str:
    """The refusal is documented; a ``param`` names a field of the model or a key of the body."""
    assert error.code in DOCUMENTED.get(error.status, set()), (error.status, error.code, error.message)
    assert error.type == "invalid_request_error" and error.message
    if error.code not in NAMES_A_PARAM:
        assert error.param is None, error.param
        return ""
    assert error.param is not None, error.message
    assert len(error.param) <= 200 and len(error.message) <= 1000, (error.param, error.message)
    prefix = BODIES[name][1]
    model = BODIES[HOLDER[prefix]][0] if prefix else BODIES[name][0]
    data = json.loads(_full_body(name, body))
    fields = {field.alias or key for key, field in model.model_fields.items()} | set(model.model_fields)
    top = error.param.split(".")[0]
    assert top in fields or top in {_named(key) for key in data}, error.param
    return error.param


# -- strategies ---------------------------------------------------------------------------------

# Text from outside: any code point, NUL and lone surrogates included (JSON spells them \u0000, \ud800).
texts = st.text(st.characters(exclude_categories=()), max_size=12) | st.sampled_from(
    ["", " ", "\x00", "\ud800", "１", " 1 ", "1e3", "-1", "0", "NaN", "x" * 600, "https://a.example/"]
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.sampled_from([2**63, 2**64, -(2**63) - 1, 10**30])
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)


def _encode(value: Any) -> bytes:
    return json.dumps(value).encode()  # ensure_ascii: lone surrogates travel as \ud800 escapes


def _deep(depth: int, opener: str) -> bytes:
    closer = {"[": "]", '{"a":': "}"}[opener]
    return (opener * depth + "1" + closer * depth).encode()


@st.composite
def arbitrary_bodies(draw: st.DrawFn, name: str) -> bytes:
    model = BODIES[name][0]
    keys = st.sampled_from(sorted(model.model_fields)) | texts if model.model_fields else texts
    shaped = st.dictionaries(keys, json_values, max_size=6).map(_encode)
    kind = draw(st.sampled_from(["shaped", "value", "bytes", "deep", "size", "padded"]))
    if kind == "shaped":  # an object with the model's own field names, holding anything
        return draw(shaped)
    if kind == "value":
        return _encode(draw(json_values))
    if kind == "bytes":
        return draw(st.binary(max_size=64))
    if kind == "deep":
        return _deep(draw(st.integers(60, 70_000)), draw(st.sampled_from(["[", '{"a":'])))
    if kind == "size":  # an object just under or over the size limit
        size = draw(st.integers(MAX_BODY_BYTES - 2, MAX_BODY_BYTES + 2))
        return b'{"a":"' + b"x" * (size - 8) + b'"}'
    return b" \n\t" * draw(st.integers(0, 3)) + draw(shaped) + b" " * draw(st.integers(0, 3))


@st.composite
def near_valid(draw: st.DrawFn, name: str) -> tuple[bytes, str]:
    """A valid body with one change at one path; returns the body and the changed path."""
    data = json.loads(json.dumps(VALID[name]))
    node, path = data, []
    while isinstance(node, dict | list) and node and draw(st.integers(0, 2)):  # descend a few levels
        key = draw(st.sampled_from(sorted(node))) if isinstance(node, dict) else draw(st.integers(0, len(node) - 1))
        if not isinstance(node[key], dict | list):
            break
        node, path = node[key], [*path, str(key)]
    action = draw(st.sampled_from(["drop", "replace", "replace", "add"]))
    if action == "add" or not node:
        key = draw(texts)
        if isinstance(node, dict):
            node[key] = draw(json_values)
            return _encode(data), ".".join([*path, key])
        node.append(draw(json_values))
        return _encode(data), ".".join([*path, str(len(node) - 1)])
    key = draw(st.sampled_from(sorted(node))) if isinstance(node, dict) else draw(st.integers(0, len(node) - 1))
    if action == "drop":
        del node[key]
        return _encode(data), ".".join(path) if isinstance(node, list) else ".".join([*path, str(key)])
    node[key] = draw(json_values)
    return _encode(data), ".".join([*path, str(key)])


# -- properties ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(VALID))
def test_any_body_is_read_or_refused_in_the_envelope(runner: asyncio.Runner, name: str) -> None:
    @settings(FUZZ, max_examples=150)
    @given(body=arbitrary_bodies(name), chunk=st.sampled_from([1, 7, 4096, 65536]))
    def check(body: bytes, chunk: int) -> None:
        if len(body) > 10_000 and chunk < 4096:
            chunk = 4096  # the same path, without a million receive calls
        outcome = runner.run(_read(name, body, chunk))
        if isinstance(outcome, HttpError):
            _check_refusal(outcome, name, body)
            if len(body) > MAX_BODY_BYTES:
                assert outcome.code == "body_too_large"
        else:
            assert isinstance(outcome, BODIES[name][0])

    check()


@pytest.mark.parametrize("name", sorted(VALID))
def test_a_body_with_one_change_is_refused_at_that_change(runner: asyncio.Runner, name: str) -> None:
    @settings(FUZZ, max_examples=300)
    @given(near_valid(name))
    def check(case: tuple[bytes, str]) -> None:
        body, changed = case
        changed = _as_param(BODIES[name][1] + changed)
        outcome = runner.run(_read(name, body, 4096))
        if not isinstance(outcome, HttpError):
            assert isinstance(outcome, BODIES[name][0])
            return
        path = _check_refusal(outcome, name, body)
        assert outcome.code in NAMES_A_PARAM, (outcome.code, outcome.message)
        # The field changed, a member of it, or (a check of a whole object) the object holding it;
        # a path cut at 200 characters is a start of the changed one.
        related = path == changed or path.startswith(changed + ".") or changed.startswith(path + ".")
        assert related or (len(path) == 200 and changed.startswith(path)), (changed, path, outcome.message)

    check()
