"""The sans-IO gate, stepped by hand: commands out, replies in, no I/O."""

from __future__ import annotations

import base64
import json
from collections.abc import Generator
from typing import Any

import pytest

from x402mw.errors import ConfigurationError, PlatformError
from x402mw.protocol import decode_payment_required, encode_header
from x402mw.seller import Answer, PaidRoute, PaymentGate, RequestView, Serve
from x402mw.seller.decisions import ComputeAmount, PlatformCall, PlatformReply

ENDPOINT = {
    "id": "ep1",
    "name": "Weather",
    "resourceUrl": "https://x/weather",
    "network": "eip155:31337",
    "chainId": 31337,
    "currency": "USDC",
    "asset": "0x" + "aa" * 20,
    "assetName": "USD Coin",
    "assetVersion": "2",
    "decimals": 6,
    "payoutAddress": "0x" + "bb" * 20,
    "pricingMode": "fixed",
    "amountMinor": "10000",
    "releasePolicy": "included",
    "maxTimeoutSeconds": 300,
}
ROUTE = PaidRoute(endpoint="ep1")
URL = "https://shop.example/weather"


def _finish(gen: Generator[Any, Any, Any], replies: list[Any]) -> tuple[Any, list[Any]]:
    commands = []
    value: Any = None
    try:
        while True:
            command = gen.send(value)
            commands.append(command)
            reply = replies.pop(0)
            if isinstance(reply, BaseException):
                value = None
                command = gen.throw(reply)
                commands.append(command)
                reply = replies.pop(0)
            value = reply
    except StopIteration as stop:
        return stop.value, commands


def _registered(call: PlatformCall) -> list[dict[str, Any]]:
    """The challenges a registration call sends."""
    assert call.path == "/agent/challenges/batch" and call.encoded is not None
    body: dict[str, Any] = json.loads(call.encoded)
    return list(body["challenges"])


def _gate(now: float = 1_000_000.0) -> PaymentGate:
    return PaymentGate(api_key="sk_test_abc", platform_url="https://pay.example/v1", clock=lambda: now)


def _challenge(gate: PaymentGate) -> tuple[Answer, dict[str, Any]]:
    answer, _ = _finish(
        gate.process(ROUTE, RequestView("GET", URL, None)), [PlatformReply(200, {"endpoint": ENDPOINT})]
    )
    assert isinstance(answer, Answer)
    header = dict(answer.headers)["PAYMENT-REQUIRED"]
    return answer, decode_payment_required(header).accepts[0].to_wire()


def _payment(accepted: dict[str, Any]) -> str:
    return encode_header(
        {
            "x402Version": 2,
            "accepted": accepted,
            "payload": {
                "signature": "0x" + "11" * 65,
                "authorization": {
                    "from": "0x" + "cc" * 20,
                    "to": accepted["payTo"],
                    "value": accepted["amount"],
                    "validAfter": "0",
                    "validBefore": "9999999999",
                    "nonce": "0x" + "00" * 32,
                },
            },
        }
    )


def test_first_request_fetches_terms_then_challenges_make_no_call() -> None:
    gate = _gate()
    answer, accepted = _challenge(gate)
    assert answer.status == 402 and accepted["amount"] == "10000" and accepted["extra"]["seal"]
    again, commands = _finish(gate.process(ROUTE, RequestView("GET", URL, None)), [])
    assert commands == [] and isinstance(again, Answer) and again.status == 402
    assert dict(again.headers)["Cache-Control"] == "no-store"
    body = json.loads(again.body)
    assert (
        body["resource"]["url"] == URL
        and body["accepts"][0]["extra"]["challengeId"] != accepted["extra"]["challengeId"]
    )


def test_paid_retry_settles_once_and_serves() -> None:
    gate = _gate()
    _, accepted = _challenge(gate)
    settled = {
        "status": "settled",
        "settlement": {
            "success": True,
            "payer": "0x" + "cc" * 20,
            "transaction": "0x" + "ee" * 32,
            "network": "eip155:31337",
            "amount": "10000",
            "extensions": {"receipt": {"challengeId": accepted["extra"]["challengeId"]}},
        },
    }  # no payTo echoed: the seller's Settlement names the terms it sent
    decision, commands = _finish(
        gate.process(ROUTE, RequestView("GET", URL, _payment(accepted))), [PlatformReply(200, settled)]
    )
    assert [c.path for c in commands] == ["/agent/settlements"]
    assert commands[0].json["challengeId"] == accepted["extra"]["challengeId"]
    assert isinstance(decision, Serve)
    assert decision.settlement.amount == 10_000 and decision.settlement.transaction == "0x" + "ee" * 32
    assert (decision.settlement.pay_to, decision.settlement.asset) == (accepted["payTo"], accepted["asset"])
    assert dict(decision.headers)["PAYMENT-RESPONSE"]


@pytest.mark.parametrize(
    "change", [{"amount": "1"}, {"payTo": "0x" + "dd" * 20}, {"network": "eip155:1"}, {"asset": "0x" + "00" * 20}]
)
def test_tampered_terms_never_reach_the_platform(change: dict[str, Any]) -> None:
    gate = _gate()
    _, accepted = _challenge(gate)
    decision, commands = _finish(gate.process(ROUTE, RequestView("GET", URL, _payment(accepted | change))), [])
    assert commands == [] and isinstance(decision, Answer) and decision.reason == "invalid_payment_requirements"


def test_a_payment_on_an_expired_challenge_gets_its_outcome_and_no_new_one_settles() -> None:
    gate = _gate()
    _, accepted = _challenge(gate)
    later = PaymentGate(api_key="sk_test_abc", platform_url="https://pay.example/v1", clock=lambda: 2_000_000.0)
    _finish(later.process(ROUTE, RequestView("GET", URL, None)), [PlatformReply(200, {"endpoint": ENDPOINT})])
    # The platform knows no payment of this authorization: it settles none on an expired challenge.
    unknown = {
        "status": "failed",
        "settlement": {"success": False, "errorReason": "challenge_expired", "network": "eip155:31337"},
    }
    decision, commands = _finish(
        later.process(ROUTE, RequestView("GET", URL, _payment(accepted))), [PlatformReply(200, unknown)]
    )
    assert commands[0].json["expiresAt"] == accepted["extra"]["expiresAt"] < 2_000_000
    assert isinstance(decision, Answer) and decision.reason == "challenge_expired"
    offer = decode_payment_required(dict(decision.headers)["PAYMENT-REQUIRED"])
    assert offer.error == "challenge_expired" and offer.accepts[0].extra["expiresAt"] > 2_000_000
    # A payment made before it expired: its retry is served with the original receipt.
    settled = {
        "status": "settled",
        "settlement": {"success": True, "transaction": "0x" + "ee" * 32, "network": "eip155:31337", "amount": "10000"},
    }
    decision, _ = _finish(
        later.process(ROUTE, RequestView("GET", URL, _payment(accepted))), [PlatformReply(200, settled)]
    )
    assert isinstance(decision, Serve) and decision.settlement.transaction == "0x" + "ee" * 32


def test_another_merchants_seal_is_refused() -> None:
    _, accepted = _challenge(_gate())
    other = PaymentGate(api_key="sk_test_other", platform_url="https://pay.example/v1", clock=lambda: 1_000_000.0)
    _finish(other.process(ROUTE, RequestView("GET", URL, None)), [PlatformReply(200, {"endpoint": ENDPOINT})])
    decision, commands = _finish(other.process(ROUTE, RequestView("GET", URL, _payment(accepted))), [])
    assert commands == [] and isinstance(decision, Answer) and decision.reason == "invalid_payment_requirements"


def test_pending_settlement_is_a_402_with_retry_after_and_the_transaction() -> None:
    gate = _gate()
    _, accepted = _challenge(gate)
    pending = {
        "status": "pending",
        "settlement": {
            "success": False,
            "errorReason": "settlement_pending",
            "transaction": "0x" + "ab" * 32,
            "network": "eip155:31337",
        },
    }
    decision, _ = _finish(
        gate.process(ROUTE, RequestView("GET", URL, _payment(accepted))), [PlatformReply(200, pending)]
    )
    assert isinstance(decision, Answer) and decision.status == 402 and decision.reason == "settlement_pending"
    headers = dict(decision.headers)
    assert headers["Retry-After"] == "1" and json.loads(decision.body)["error"]["transaction"] == "0x" + "ab" * 32
    assert json.loads(base64.b64decode(headers["PAYMENT-RESPONSE"]))["errorReason"] == "settlement_pending"


def test_a_payment_that_may_have_reached_the_platform_is_pending_and_refusal_a_500() -> None:
    gate = _gate()
    _, accepted = _challenge(gate)
    # The connection failed with the payment on its way: it may be settling, so the agent is told to
    # send the same signature again (a 503 would invite a second one).
    for failure in (PlatformError("down", status=0), PlatformReply(502, None), PlatformReply(500, {"error": {}})):
        decision, _ = _finish(gate.process(ROUTE, RequestView("GET", URL, _payment(accepted))), [failure, None])
        assert isinstance(decision, Answer) and (decision.status, decision.reason) == (402, "settlement_pending")
        settlement = json.loads(base64.b64decode(dict(decision.headers)["PAYMENT-RESPONSE"]))
        assert settlement == {
            "success": False,
            "errorReason": "settlement_pending",
            "transaction": "",
            "network": "eip155:31337",
        }
        assert dict(decision.headers)["Retry-After"] == "1"
    # The platform refused it outright (the chain is down): nothing was taken; 503 with Retry-After.
    down = PlatformReply(503, {"error": {"code": "chain_unavailable", "message": "retry"}})
    decision, _ = _finish(gate.process(ROUTE, RequestView("GET", URL, _payment(accepted))), [down])
    assert isinstance(decision, Answer) and decision.status == 503 and dict(decision.headers)["Retry-After"] == "2"
    fresh = _gate()
    refused, _ = _finish(
        fresh.process(ROUTE, RequestView("GET", URL, None)),
        [PlatformReply(401, {"error": {"code": "invalid_api_key", "message": "no"}})],
    )
    assert isinstance(refused, Answer) and refused.status == 500


def test_dynamic_price_is_computed_by_the_callback() -> None:
    gate = _gate()
    route = PaidRoute(endpoint="ep1", amount=lambda request: "0.25")
    terms = ENDPOINT | {"pricingMode": "dynamic", "amountMinor": None}
    answer, commands = _finish(
        gate.process(route, RequestView("GET", URL, None), native="the request"),
        [PlatformReply(200, {"endpoint": terms}), "0.25"],
    )
    assert isinstance(commands[1], ComputeAmount) and commands[1].request == "the request"
    assert isinstance(answer, Answer)
    assert decode_payment_required(dict(answer.headers)["PAYMENT-REQUIRED"]).accepts[0].amount == 250_000


def test_a_paid_request_is_priced_again_and_an_underpaying_challenge_is_refused() -> None:
    gate = _gate()
    route = PaidRoute(endpoint="ep1", amount=lambda request: request)
    terms = ENDPOINT | {"pricingMode": "dynamic", "amountMinor": None}
    cheap, _ = _finish(
        gate.process(route, RequestView("GET", URL + "?q=s", None), native="0.01"),
        [PlatformReply(200, {"endpoint": terms}), "0.01"],
    )
    assert isinstance(cheap, Answer)
    accepted = decode_payment_required(dict(cheap.headers)["PAYMENT-REQUIRED"]).accepts[0].to_wire()
    # the same challenge, sent with a request that costs more: no settlement, a new challenge at its price
    refused, commands = _finish(
        gate.process(route, RequestView("GET", URL + "?q=l", _payment(accepted)), native="0.25"), ["0.25"]
    )
    assert [type(c) for c in commands] == [ComputeAmount]
    assert isinstance(refused, Answer) and refused.status == 402
    required = decode_payment_required(dict(refused.headers)["PAYMENT-REQUIRED"])
    assert required.error == "invalid_payment_requirements" and required.accepts[0].amount == 250_000
    # sent with a request that costs what it says, it goes on to settle
    _, commands = _finish(
        gate.process(route, RequestView("GET", URL + "?q=s", _payment(accepted)), native="0.01"),
        ["0.01", PlatformReply(200, {"status": "failed", "settlement": {"success": False, "errorReason": "x"}})],
    )
    assert isinstance(commands[0], ComputeAmount) and commands[1].path == "/agent/settlements"


def test_issued_challenges_are_registered_in_background_batches() -> None:
    gate = _gate()
    for _ in range(3):
        _challenge(gate)
    assert gate.has_background_work
    _, commands = _finish(gate.background(), [PlatformReply(200, {})])
    assert isinstance(commands[0], PlatformCall) and len(_registered(commands[0])) == 3
    assert not gate.has_background_work
    # each as the registration's schema has it, whatever its resource URL holds
    answer, _ = _finish(
        gate.process(ROUTE, RequestView("GET", URL + '?q="é\\', None)), [PlatformReply(200, {"endpoint": ENDPOINT})]
    )
    offer = decode_payment_required(dict(answer.headers)["PAYMENT-REQUIRED"]).accepts[0]
    _, commands = _finish(gate.background(), [PlatformReply(200, {})])
    assert _registered(commands[0]) == [
        {
            "challengeId": offer.extra["challengeId"],
            "endpointId": "ep1",
            "network": offer.network,
            "asset": offer.asset,
            "payTo": offer.pay_to,
            "amount": str(offer.amount),
            "resource": URL + '?q="é\\',
            "expiresAt": offer.extra["expiresAt"],
        }
    ]


def test_a_round_registers_every_waiting_challenge_a_batch_a_call_and_a_failed_batch_waits() -> None:
    gate = _gate()
    issued = [_challenge(gate)[1]["extra"]["challengeId"] for _ in range(1_200)]
    _, commands = _finish(gate.background(), [PlatformReply(200, {})] * 3)
    assert [len(_registered(c)) for c in commands] == [500, 500, 200]
    assert [c["challengeId"] for command in commands for c in _registered(command)] == issued
    assert not gate.has_background_work
    # a batch the platform did not take goes back to the front of the queue, in its order, and
    # the round ends there
    more = [_challenge(gate)[1]["extra"]["challengeId"] for _ in range(600)]
    _, commands = _finish(gate.background(), [PlatformReply(503, {})])
    assert len(commands) == 1 and gate.has_background_work
    _, commands = _finish(gate.background(), [PlatformReply(200, {})] * 2)
    assert [c["challengeId"] for command in commands for c in _registered(command)] == more


def test_a_paid_challenge_is_registered_by_its_settlement_only() -> None:
    # The settlement call carries the challenge, and the platform records it with the payment: the
    # background registration leaves it out. Another challenge, unpaid, is still registered.
    gate = _gate()
    _, paid = _challenge(gate)
    _, unpaid = _challenge(gate)
    settlement = {"success": False, "errorReason": "insufficient_funds", "transaction": "", "network": "eip155:31337"}
    refused = PlatformReply(200, {"status": "failed", "settlement": settlement})
    answer, commands = _finish(gate.process(ROUTE, RequestView("GET", URL, _payment(paid))), [refused])
    assert commands[0].path == "/agent/settlements"
    assert commands[0].json["challengeId"] == paid["extra"]["challengeId"]
    assert isinstance(answer, Answer) and answer.status == 402  # refused: a fresh challenge to pay
    fresh = decode_payment_required(dict(answer.headers)["PAYMENT-REQUIRED"]).accepts[0].extra["challengeId"]
    _, commands = _finish(gate.background(), [PlatformReply(200, {})])
    registered = [c["challengeId"] for c in _registered(commands[0])]
    assert registered == [unpaid["extra"]["challengeId"], fresh]


@pytest.mark.parametrize("failure", [PlatformError("connection reset", status=502), PlatformReply(503, {})])
def test_a_challenge_whose_settlement_went_unanswered_is_registered_in_the_background(failure: Any) -> None:
    gate = _gate()
    _, paid = _challenge(gate)
    _finish(gate.process(ROUTE, RequestView("GET", URL, _payment(paid))), [failure])
    _, commands = _finish(gate.background(), [PlatformReply(200, {})])
    assert [c["challengeId"] for c in _registered(commands[0])] == [paid["extra"]["challengeId"]]


def test_configuration_problems_are_reported_together() -> None:
    with pytest.raises(ConfigurationError) as caught:
        PaymentGate(api_key="nope", platform_url="ftp://x", settle_timeout=0)
    assert len(caught.value.problems) == 3
    assert "nope" not in str(caught.value)


# -- paid MCP tools: hold before the tool, capture or release after ---------------------------------

MCP_URL = "mcp://tool/forecast"


def _held(gate: PaymentGate) -> Any:
    _, accepted = _challenge(gate)
    payment = json.loads(base64.b64decode(_payment(accepted)))
    held, commands = _finish(
        gate.hold(ROUTE, RequestView("TOOL", MCP_URL, payment)),
        [PlatformReply(200, {"status": "held", "paymentId": "pay1", "settlement": {"payer": "0x" + "cc" * 20}})],
    )
    assert commands[-1].json["hold"] is True and commands[-1].json["resource"] == MCP_URL
    return held


def test_a_held_payment_is_captured_by_its_id() -> None:
    gate = _gate()
    held = _held(gate)
    assert held.payment_id == "pay1" and held.amount == 10000 and not gate.has_background_work
    settled = {
        "status": "settled",
        "settlement": {"success": True, "transaction": "0x" + "ab" * 32, "network": "eip155:31337", "amount": "10000"},
    }
    decision, commands = _finish(gate.capture(held), [PlatformReply(200, settled)])
    assert isinstance(decision, Serve) and decision.settlement.transaction == "0x" + "ab" * 32
    assert commands[0].path == "/agent/settlements/pay1/capture" and "amountMinor" not in commands[0].json


def test_a_capture_the_platform_never_answers_is_pending_never_served() -> None:
    gate = _gate()
    held = _held(gate)
    decision, _ = _finish(gate.capture(held), [PlatformError("connection reset", status=0), None])
    assert isinstance(decision, Answer) and decision.status == 402 and decision.reason == "settlement_pending"


def test_a_released_payment_is_released_by_its_id() -> None:
    gate = _gate()
    held = _held(gate)
    released, commands = _finish(gate.release(held), [PlatformReply(200, {"status": "released"})])
    assert released is True and commands[0].path == "/agent/settlements/pay1/release"
    assert not gate.has_background_work  # its challenge was recorded with the hold
    refused, _ = _finish(gate.release(held), [PlatformReply(409, {"error": {"message": "settled"}})])
    assert refused is False


def test_a_payment_for_another_tool_is_refused_before_the_platform() -> None:
    gate = _gate()
    _, accepted = _challenge(gate)
    payment = json.loads(base64.b64decode(_payment(accepted))) | {"resource": {"url": "mcp://tool/other"}}
    answer, commands = _finish(gate.hold(ROUTE, RequestView("TOOL", MCP_URL, payment)), [])
    assert commands == [] and isinstance(answer, Answer) and answer.reason == "invalid_payment_requirements"
