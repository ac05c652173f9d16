"""X402Auth and Wallet, stepped by hand (as httpx tests DigestAuth) and through real httpx clients
on a MockTransport seller. No network."""

from __future__ import annotations

import base64
import json
import pickle
import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from x402mw.client import PaymentRecord, Wallet, X402Auth
from x402mw.client.pay import pay_command
from x402mw.errors import ConfigurationError, PaymentRefusedError
from x402mw.evm.eip712 import TokenDomain, TransferAuthorization, recover_transfer_signer
from x402mw.evm.keys import address_of, new_private_key
from x402mw.evm.receipts import sign_receipt
from x402mw.protocol import PaymentPayload, PaymentRequirements, decode_payment_payload, encode_header
from x402mw.protocol.payment_identifier import DECLARATION, PAYMENT_IDENTIFIER, identifier_of

KEY_HEX = "4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318"
USDC_BASE = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"
EURC_BASE = "0x60a3E35Cc302bFA44Cb288Bc5a4F316Fdb1adb42"
USDC_BASE_SEPOLIA = "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
USDT_ETHEREUM = "0xdAC17F958D2ee523a2206206994597C13D831ec7"
PAY_TO = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"
TX = "0x" + "cd" * 32
URL = "https://seller.example/weather"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def wallet() -> Wallet:
    return Wallet(KEY_HEX)


def offer(amount: int = 10_000, network: str = "eip155:8453", asset: str = USDC_BASE, **extra: Any) -> dict[str, Any]:
    names = {USDC_BASE: ("USD Coin", "2"), EURC_BASE: ("EURC", "2"), USDC_BASE_SEPOLIA: ("USDC", "2")}
    name, version = names.get(asset, ("Tether USD", "1"))
    return {
        "scheme": "exact",
        "network": network,
        "amount": str(amount),
        "asset": asset,
        "payTo": PAY_TO,
        "maxTimeoutSeconds": 300,
        "extra": {
            "name": name,
            "version": version,
            "challengeId": "ch_1",
            "expiresAt": 1_900_000_000,
            "seal": "s3al",
            **extra,
        },
    }


def required(*offers: dict[str, Any]) -> dict[str, Any]:
    return {"x402Version": 2, "resource": {"url": URL, "description": "Weather"}, "accepts": list(offers)}


def challenge(request: httpx.Request, *offers: dict[str, Any]) -> httpx.Response:
    return httpx.Response(
        402,
        headers={"PAYMENT-REQUIRED": encode_header(required(*offers or (offer(),)))},
        json={"error": "payment required"},
        request=request,
    )


def settlement(
    payer: str,
    amount: int = 10_000,
    receipt: dict[str, str] | None = None,
    network: str = "eip155:8453",
    **overrides: Any,
) -> str:
    data: dict[str, Any] = {
        "success": True,
        "transaction": TX,
        "network": network,
        "payer": payer,
        "amount": str(amount),
        **overrides,
    }
    if receipt is not None:
        data["extensions"] = {"receipt": receipt}
    return encode_header(data)


def paid(request: httpx.Request, header: str) -> httpx.Response:
    return httpx.Response(200, headers={"PAYMENT-RESPONSE": header}, json={"temp": 21}, request=request)


def recovered_signer(payload: PaymentPayload, chain_id: int = 8453) -> str:
    accepted = payload.accepted
    assert accepted is not None
    auth = payload.payload.authorization
    domain = TokenDomain(accepted.extra["name"], accepted.extra["version"], chain_id, accepted.asset)
    transfer = TransferAuthorization(
        auth.from_address,
        auth.to,
        auth.value,
        auth.valid_after,
        auth.valid_before,
        bytes.fromhex(auth.nonce[2:]),
    )
    return recover_transfer_signer(domain, transfer, bytes.fromhex(payload.payload.signature[2:]))


def pay_once(auth: X402Auth, *offers: dict[str, Any], answer: str | None = None) -> httpx.Request:
    """Step one paid request through ``sync_auth_flow``; return the paid retry."""
    flow = auth.sync_auth_flow(httpx.Request("GET", URL))
    request = next(flow)
    retry = flow.send(challenge(request, *offers))
    with pytest.raises(StopIteration):
        flow.send(paid(retry, answer or settlement(auth.wallet.address)))
    return retry


def test_a_v2_challenge_is_paid_with_a_signature_of_the_wallet(wallet: Wallet) -> None:
    auth = X402Auth(wallet)
    flow = auth.auth_flow(httpx.Request("GET", URL))
    request = next(flow)
    assert "PAYMENT-SIGNATURE" not in request.headers
    before = int(time.time())
    retry = flow.send(challenge(request))
    assert retry.url == URL
    payload = decode_payment_payload(retry.headers["PAYMENT-SIGNATURE"])
    authorization = payload.payload.authorization
    assert payload.x402_version == 2
    assert payload.accepted is not None and payload.accepted.to_wire() == offer()
    assert payload.resource is not None and payload.resource.url == URL
    assert recovered_signer(payload) == wallet.address == authorization.from_address
    assert authorization.to.lower() == PAY_TO.lower() and authorization.value == 10_000
    assert before - 600 - 1 <= authorization.valid_after <= int(time.time()) - 600
    assert before + 300 <= authorization.valid_before <= int(time.time()) + 300
    with pytest.raises(StopIteration):
        flow.send(paid(retry, settlement(wallet.address)))
    [record] = auth.payments
    assert (record.url, record.amount, record.asset, record.network) == (
        URL,
        10_000,
        USDC_BASE,
        "eip155:8453",
    )
    assert (record.pay_to, record.transaction, record.payer) == (PAY_TO, TX, wallet.address)
    assert record.units == Decimal("0.01") and record.symbol == "USDC"
    assert record.verified is False  # no receipt_signer: nothing was checked
    assert auth.spent == {"USDC": Decimal("0.01")}


def test_answers_other_than_402_pass_through_unpaid(wallet: Wallet) -> None:
    auth = X402Auth(wallet)
    for status in (200, 401, 404, 500):
        flow = auth.sync_auth_flow(httpx.Request("GET", URL))
        request = next(flow)
        with pytest.raises(StopIteration):
            flow.send(httpx.Response(status, request=request))
    plain = X402Auth(wallet).sync_auth_flow(httpx.Request("GET", URL))
    request = next(plain)
    with pytest.raises(StopIteration):  # a 402 that is not x402 at all is returned as is
        plain.send(httpx.Response(402, text="pay me somehow", request=request))
    assert auth.payments == [] and auth.spent == {}


def test_nonces_are_fresh_for_every_payment(wallet: Wallet) -> None:
    auth = X402Auth(wallet)
    nonces = {
        decode_payment_payload(pay_once(auth).headers["PAYMENT-SIGNATURE"]).payload.authorization.nonce
        for _ in range(3)
    }
    assert len(nonces) == 3


def test_validity_is_capped_whatever_the_seller_asks(wallet: Wallet) -> None:
    greedy = {**offer(), "maxTimeoutSeconds": 10**9}
    payload = wallet.sign_payment(PaymentRequirements.model_validate(greedy), now=1_000_000)
    authorization = payload.payload.authorization
    assert (authorization.valid_after, authorization.valid_before) == (1_000_000 - 600, 1_000_000 + 3600)


def test_a_payment_over_the_per_payment_cap_is_refused(wallet: Wallet) -> None:
    auth = X402Auth(wallet, max_amount="0.10")
    flow = auth.sync_auth_flow(httpx.Request("GET", URL))
    request = next(flow)
    with pytest.raises(PaymentRefusedError) as caught:
        flow.send(challenge(request, offer(100_001)))
    assert caught.value.reason == "over_cap"
    assert "0.100001 USDC" in caught.value.message and "per-payment cap of 0.10" in caught.value.message
    assert auth.spent == {} and auth.payments == []
    exactly = pay_once(X402Auth(wallet, max_amount=Decimal("0.1")), offer(100_000))
    assert decode_payment_payload(exactly.headers["PAYMENT-SIGNATURE"]).payload.authorization.value == 100_000


@settings(max_examples=60, deadline=None)
@given(amount=st.integers(0, 10**12), cap=st.decimals(0, 10**6, places=8, allow_nan=False, allow_infinity=False))
def test_the_cap_is_compared_exactly(amount: int, cap: Decimal) -> None:
    flow = X402Auth(Wallet(KEY_HEX), max_amount=cap).auth_flow(httpx.Request("GET", URL))
    request = next(flow)
    if Decimal(amount) <= cap * 10**6:
        assert "PAYMENT-SIGNATURE" in flow.send(challenge(request, offer(amount))).headers
    else:
        with pytest.raises(PaymentRefusedError, match="per-payment cap"):
            flow.send(challenge(request, offer(amount)))


def test_the_first_acceptable_offer_is_paid(wallet: Wallet) -> None:
    auth = X402Auth(wallet, max_amount="0.05")
    retry = pay_once(auth, offer(1_000_000), {**offer(), "scheme": "upto"}, offer(20_000), offer(30_000))
    assert decode_payment_payload(retry.headers["PAYMENT-SIGNATURE"]).payload.authorization.value == 20_000


def test_the_total_cap_spans_payments(wallet: Wallet) -> None:
    auth = X402Auth(wallet, max_total="0.025")
    pay_once(auth)
    pay_once(auth)
    flow = auth.sync_auth_flow(httpx.Request("GET", URL))
    request = next(flow)
    with pytest.raises(PaymentRefusedError) as caught:
        flow.send(challenge(request))
    assert caught.value.reason == "over_cap" and "total cap of 0.025" in caught.value.message
    assert auth.spent == {"USDC": Decimal("0.02")} and len(auth.payments) == 2
    pay_once(auth, offer(5_000))  # what is left still buys a cheaper offer
    assert auth.spent == {"USDC": Decimal("0.025")}


def test_the_total_cap_holds_under_concurrent_requests(wallet: Wallet) -> None:
    auth = X402Auth(wallet, max_total="0.05")
    handler = Seller(wallet.address)
    with httpx.Client(transport=httpx.MockTransport(handler), auth=auth) as client:

        def fetch(_: int) -> int | str:
            try:
                return client.get(URL).status_code
            except PaymentRefusedError as exc:
                return str(exc.reason)

        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(fetch, range(20)))
    assert results.count(200) == 5 and results.count("over_cap") == 15
    assert auth.spent == {"USDC": Decimal("0.05")} and len(auth.payments) == 5


def test_network_filter(wallet: Wallet) -> None:
    sepolia = offer(network="eip155:84532", asset=USDC_BASE_SEPOLIA)
    retry = pay_once(X402Auth(wallet, networks=["base-sepolia"]), offer(), sepolia)
    assert decode_payment_payload(retry.headers["PAYMENT-SIGNATURE"]).accepted.network == "eip155:84532"  # type: ignore[union-attr]
    flow = X402Auth(wallet, networks=["eip155:1"]).sync_auth_flow(httpx.Request("GET", URL))
    request = next(flow)
    with pytest.raises(PaymentRefusedError) as caught:
        flow.send(challenge(request, offer(), sepolia))
    assert caught.value.reason == "no_acceptable_option"
    assert "offer 1 (0.01 USDC on eip155:8453): network not allowed" in caught.value.message


def test_asset_filter_by_symbol_or_address(wallet: Wallet) -> None:
    both = (offer(), offer(asset=EURC_BASE))
    by_symbol = pay_once(X402Auth(wallet, assets=["eurc"]), *both)
    by_address = pay_once(X402Auth(wallet, assets=[USDC_BASE.lower()]), *reversed(both))
    assert decode_payment_payload(by_symbol.headers["PAYMENT-SIGNATURE"]).accepted.asset == EURC_BASE  # type: ignore[union-attr]
    assert decode_payment_payload(by_address.headers["PAYMENT-SIGNATURE"]).accepted.asset == USDC_BASE  # type: ignore[union-attr]
    flow = X402Auth(wallet, assets=["USDC"]).sync_auth_flow(httpx.Request("GET", URL))
    request = next(flow)
    with pytest.raises(PaymentRefusedError, match="asset not allowed") as caught:
        flow.send(challenge(request, offer(asset=EURC_BASE)))
    assert caught.value.reason == "no_acceptable_option"


def test_offers_that_cannot_be_signed_are_skipped(wallet: Wallet) -> None:
    flow = X402Auth(wallet).sync_auth_flow(httpx.Request("GET", URL))
    request = next(flow)
    unknown = offer(asset="0x" + "77" * 20)
    del unknown["extra"]["name"]
    with pytest.raises(PaymentRefusedError) as caught:
        flow.send(
            challenge(
                request,
                offer(network="eip155:1", asset=USDT_ETHEREUM),
                {**offer(), "network": "solana:mainnet"},
                unknown,
            )
        )
    assert caught.value.reason == "no_acceptable_option"
    assert "USDT cannot be paid by signed authorization" in caught.value.message
    assert "not an EVM network" in caught.value.message and "no EIP-712 domain" in caught.value.message


def test_a_v1_seller_gets_an_x_payment_header(wallet: Wallet) -> None:
    body = {
        "x402Version": 1,
        "error": "X-PAYMENT header is required",
        "accepts": [
            {
                "scheme": "exact",
                "network": "base-sepolia",
                "maxAmountRequired": "2500",
                "resource": URL,
                "description": "Weather",
                "mimeType": "application/json",
                "payTo": PAY_TO,
                "maxTimeoutSeconds": 60,
                "asset": USDC_BASE_SEPOLIA,
                "extra": {"name": "USDC", "version": "2"},
            }
        ],
    }
    auth = X402Auth(wallet, max_amount="0.01")
    flow = auth.sync_auth_flow(httpx.Request("GET", URL))
    request = next(flow)
    retry = flow.send(httpx.Response(402, json=body, request=request))
    assert "PAYMENT-SIGNATURE" not in retry.headers
    raw = json.loads(base64.b64decode(retry.headers["X-PAYMENT"]))
    assert (raw["x402Version"], raw["scheme"], raw["network"]) == (1, "exact", "base-sepolia")
    assert set(raw) == {"x402Version", "scheme", "network", "payload"}
    payload = decode_payment_payload(retry.headers["X-PAYMENT"])
    authorization = payload.payload.authorization
    assert authorization.value == 2500 and authorization.to.lower() == PAY_TO.lower()
    domain = TokenDomain("USDC", "2", 84532, USDC_BASE_SEPOLIA)
    transfer = TransferAuthorization(
        authorization.from_address,
        authorization.to,
        2500,
        authorization.valid_after,
        authorization.valid_before,
        bytes.fromhex(authorization.nonce[2:]),
    )
    assert recover_transfer_signer(domain, transfer, bytes.fromhex(payload.payload.signature[2:])) == wallet.address
    answer = httpx.Response(
        200,
        headers={
            "X-PAYMENT-RESPONSE": encode_header(
                {"success": True, "transaction": TX, "network": "base-sepolia", "payer": wallet.address}
            )
        },
        request=retry,
    )
    with pytest.raises(StopIteration):
        flow.send(answer)
    assert auth.payments[0].transaction == TX and auth.payments[0].network == "eip155:84532"


def test_a_v1_offer_nested_too_deep_is_not_read(wallet: Wallet) -> None:
    entry = {
        "scheme": "exact",
        "network": "base-sepolia",
        "maxAmountRequired": "2500",
        "resource": URL,
        "payTo": PAY_TO,
        "maxTimeoutSeconds": 60,
        "asset": USDC_BASE_SEPOLIA,
        "extra": {"name": "USDC", "version": "2"},
    }
    head = json.dumps({"x402Version": 1, "accepts": [entry]}).encode()[:-1]
    for depth in (64, 5000):  # past the limit by one (with the body's own object), and far past it
        body = head + b', "pad": ' + b"[" * depth + b"]" * depth + b"}"
        flow = X402Auth(wallet, max_amount="0.01").sync_auth_flow(httpx.Request("GET", URL))
        request = next(flow)
        with pytest.raises(StopIteration):  # no offer read: nothing signed, the 402 is the answer
            flow.send(httpx.Response(402, content=body, request=request))
    body = head + b', "pad": ' + b"[" * 63 + b"]" * 63 + b"}"
    flow = X402Auth(wallet, max_amount="0.01").sync_auth_flow(httpx.Request("GET", URL))
    request = next(flow)
    assert "X-PAYMENT" in flow.send(httpx.Response(402, content=body, request=request)).headers


def test_a_pending_settlement_is_retried_with_the_same_signature(wallet: Wallet) -> None:
    auth = X402Auth(wallet, pending_retries=3)
    flow = auth.auth_flow(httpx.Request("GET", URL))
    request = next(flow)
    retry = flow.send(challenge(request))
    signature = retry.headers["PAYMENT-SIGNATURE"]
    pending = encode_header(
        {"success": False, "errorReason": "settlementPending", "transaction": TX, "network": "eip155:8453"}
    )
    for _ in range(2):
        again = flow.send(httpx.Response(402, headers={"PAYMENT-RESPONSE": pending, "Retry-After": "1"}, request=retry))
        assert again.headers["PAYMENT-SIGNATURE"] == signature
    with pytest.raises(StopIteration):
        flow.send(paid(again, settlement(wallet.address)))
    assert len(auth.payments) == 1 and auth.spent == {"USDC": Decimal("0.01")}


def test_a_settlement_still_pending_after_the_retries_is_returned(wallet: Wallet) -> None:
    auth = X402Auth(wallet, pending_retries=2)
    flow = auth.sync_auth_flow(httpx.Request("GET", URL))
    request = next(flow)
    retry = flow.send(challenge(request))
    pending = encode_header(
        {"success": False, "errorReason": "settlement_pending", "transaction": TX, "network": "eip155:8453"}
    )
    sent = [retry]
    with pytest.raises(StopIteration):
        for _ in range(5):
            sent.append(
                flow.send(httpx.Response(402, headers={"PAYMENT-RESPONSE": pending, "Retry-After": "0"}, request=retry))
            )
    assert len(sent) == 3  # the paid request and two retries
    assert auth.payments == [] and auth.spent == {"USDC": Decimal("0.01")}


def test_a_seller_that_could_not_take_the_payment_gets_the_same_signature_again(wallet: Wallet) -> None:
    auth = X402Auth(wallet)
    flow = auth.auth_flow(httpx.Request("GET", URL))
    retry = flow.send(challenge(next(flow)))
    signature = retry.headers["PAYMENT-SIGNATURE"]
    for status in (503, 502, 504):  # nothing was charged, or the outcome is unknown: never a new signature
        retry = flow.send(httpx.Response(status, headers={"Retry-After": "0"}, request=retry))
        assert retry.headers["PAYMENT-SIGNATURE"] == signature
    with pytest.raises(StopIteration):
        flow.send(paid(retry, settlement(wallet.address)))
    assert len(auth.payments) == 1 and auth.spent == {"USDC": Decimal("0.01")}


def test_a_payment_whose_answer_was_lost_is_sent_again_on_the_next_request_not_signed_anew(wallet: Wallet) -> None:
    auth = X402Auth(wallet)
    flow = auth.auth_flow(httpx.Request("GET", URL))
    signature = flow.send(challenge(next(flow))).headers["PAYMENT-SIGNATURE"]
    flow.close()  # the connection failed with the paid request on its way: its outcome is unknown
    again = auth.auth_flow(httpx.Request("GET", URL))
    retry = again.send(challenge(next(again)))
    assert retry.headers["PAYMENT-SIGNATURE"] == signature
    with pytest.raises(StopIteration):
        again.send(paid(retry, settlement(wallet.address)))
    assert len(auth.payments) == 1 and auth.spent == {"USDC": Decimal("0.01")}  # paid once
    # Settled now: the next request is a new purchase, paid with a new signature.
    third = auth.auth_flow(httpx.Request("GET", URL))
    assert third.send(challenge(next(third))).headers["PAYMENT-SIGNATURE"] != signature


def test_a_lost_payment_refused_on_its_retry_is_replaced_by_one_on_the_new_challenge(wallet: Wallet) -> None:
    auth = X402Auth(wallet, max_total="1")
    flow = auth.auth_flow(httpx.Request("GET", URL))
    signature = flow.send(challenge(next(flow))).headers["PAYMENT-SIGNATURE"]
    flow.close()
    again = auth.auth_flow(httpx.Request("GET", URL))
    retry = again.send(challenge(next(again)))
    assert retry.headers["PAYMENT-SIGNATURE"] == signature
    # The platform never saw it, and its challenge expired: it can never settle; pay the new one.
    renewed = again.send(refused_with(retry, "challenge_expired", offer(extra_id="2")))
    assert renewed.headers["PAYMENT-SIGNATURE"] != signature
    with pytest.raises(StopIteration):
        again.send(paid(renewed, settlement(wallet.address)))
    assert len(auth.payments) == 1 and auth.spent == {"USDC": Decimal("0.02")}


def test_a_failed_settlement_is_not_paid_again(wallet: Wallet) -> None:
    auth = X402Auth(wallet)
    flow = auth.sync_auth_flow(httpx.Request("GET", URL))
    request = next(flow)
    retry = flow.send(challenge(request))
    refused = encode_header({"success": False, "errorReason": "insufficient_funds", "network": "eip155:8453"})
    with pytest.raises(StopIteration):
        flow.send(
            httpx.Response(
                402,
                headers={"PAYMENT-RESPONSE": refused, "PAYMENT-REQUIRED": encode_header(required(offer()))},
                request=retry,
            )
        )
    assert auth.payments == []


def refused_with(request: httpx.Request, reason: str, *offers: dict[str, Any]) -> httpx.Response:
    """A paid request refused with ``reason`` and a new challenge, as the x402mw seller gate answers."""
    offered = required(*offers or (offer(),)) | {"error": reason}
    return httpx.Response(402, headers={"PAYMENT-REQUIRED": encode_header(offered)}, request=request)


@pytest.mark.parametrize("reason", ["challenge_expired", "invalid_payment_requirements", "invalidPaymentRequirements"])
def test_stale_terms_are_paid_once_more_on_the_new_challenge(wallet: Wallet, reason: str) -> None:
    auth = X402Auth(wallet, max_total="1")
    flow = auth.sync_auth_flow(httpx.Request("GET", URL))
    request = next(flow)
    first = flow.send(challenge(request))
    dearer = offer(20_000, challengeId="ch_2")
    second = flow.send(refused_with(first, reason, dearer))
    paid_terms = decode_payment_payload(second.headers["PAYMENT-SIGNATURE"])
    assert paid_terms.accepted is not None and paid_terms.accepted.extra["challengeId"] == "ch_2"
    assert paid_terms.payload.authorization.value == 20_000
    assert recovered_signer(paid_terms) == wallet.address
    with pytest.raises(StopIteration):
        flow.send(paid(second, settlement(wallet.address, amount=20_000)))
    assert [p.amount for p in auth.payments] == [20_000]
    assert auth.spent == {"USDC": Decimal("0.03")}  # both authorizations were signed


def test_stale_terms_are_paid_again_only_once(wallet: Wallet) -> None:
    auth = X402Auth(wallet)
    flow = auth.sync_auth_flow(httpx.Request("GET", URL))
    request = next(flow)
    first = flow.send(challenge(request))
    second = flow.send(refused_with(first, "challenge_expired", offer(challengeId="ch_2")))
    with pytest.raises(StopIteration):
        flow.send(refused_with(second, "challenge_expired", offer(challengeId="ch_3")))
    assert auth.payments == [] and auth.spent == {"USDC": Decimal("0.02")}


def test_new_terms_over_the_cap_are_refused(wallet: Wallet) -> None:
    auth = X402Auth(wallet, max_amount="0.01")
    flow = auth.sync_auth_flow(httpx.Request("GET", URL))
    request = next(flow)
    first = flow.send(challenge(request))
    with pytest.raises(PaymentRefusedError) as refused:
        flow.send(refused_with(first, "invalid_payment_requirements", offer(20_000, challengeId="ch_2")))
    assert refused.value.reason == "over_cap"
    assert auth.spent == {"USDC": Decimal("0.01")}


@pytest.mark.parametrize(
    "reason", ["insufficient_funds", "invalid_exact_evm_payload_signature", "unexpected_settle_error"]
)
def test_other_refusals_are_not_paid_again(wallet: Wallet, reason: str) -> None:
    auth = X402Auth(wallet)
    flow = auth.sync_auth_flow(httpx.Request("GET", URL))
    request = next(flow)
    first = flow.send(challenge(request))
    with pytest.raises(StopIteration):
        flow.send(refused_with(first, reason))
    assert auth.payments == [] and auth.spent == {"USDC": Decimal("0.01")}


def receipt_fields(payer: str, **changes: str) -> dict[str, str]:
    return {
        "challengeId": "ch_1",
        "endpointId": "ep_1",
        "network": "eip155:8453",
        "asset": USDC_BASE,
        "amount": "10000",
        "payer": payer,
        "payTo": PAY_TO,
        "transaction": TX,
        "settledAt": "1700000000",
        **changes,
    }


def test_a_receipt_signed_by_the_platform_verifies(wallet: Wallet) -> None:
    platform_key = new_private_key()
    seen: list[PaymentRecord] = []
    auth = X402Auth(wallet, receipt_signer=address_of(platform_key).lower(), on_payment=seen.append)
    receipt = sign_receipt(receipt_fields(wallet.address), platform_key)
    pay_once(auth, answer=settlement(wallet.address, receipt=receipt))
    assert seen == auth.payments and seen[0].verified is True and seen[0].receipt == receipt


@pytest.mark.parametrize("problem", ["tampered", "other signer", "other payment", "missing"])
def test_a_receipt_that_does_not_verify_is_refused_after_the_fact(wallet: Wallet, problem: str) -> None:
    platform_key = new_private_key()
    auth = X402Auth(wallet, receipt_signer=address_of(platform_key))
    receipt: dict[str, str] | None = sign_receipt(receipt_fields(wallet.address), platform_key)
    if problem == "tampered":
        receipt = {**receipt, "amount": "1"}  # type: ignore[dict-item]
    elif problem == "other signer":
        receipt = sign_receipt(receipt_fields(wallet.address), new_private_key())
    elif problem == "other payment":
        receipt = sign_receipt(receipt_fields(wallet.address, challengeId="ch_2"), platform_key)
    else:
        receipt = None
    flow = auth.sync_auth_flow(httpx.Request("GET", URL))
    retry = flow.send(challenge(next(flow)))
    with pytest.raises(PaymentRefusedError) as caught:
        flow.send(paid(retry, settlement(wallet.address, receipt=receipt)))
    assert caught.value.reason == "invalid_receipt" and caught.value.transaction == TX
    assert "was made" in caught.value.message
    [record] = auth.payments
    assert record.verified is False and record.transaction == TX


@pytest.mark.parametrize("name", ["max_amount", "max_total"])
def test_float_caps_are_refused(wallet: Wallet, name: str) -> None:
    with pytest.raises(ConfigurationError, match="not a float"):
        X402Auth(wallet, **{name: 0.1})  # type: ignore[arg-type]


def test_every_configuration_problem_is_reported_at_once(wallet: Wallet) -> None:
    with pytest.raises(ConfigurationError) as caught:
        X402Auth(
            wallet,
            max_amount="-1",
            max_total="lots",
            networks=["solana"],
            assets="USDC",
            receipt_signer="platform",
            pending_retries=-1,
        )
    assert len(caught.value.problems) == 6


def test_the_wallet_keeps_its_key_to_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wallet = Wallet(KEY_HEX)
    assert KEY_HEX not in repr(wallet) and KEY_HEX not in repr(X402Auth(wallet))
    assert repr(wallet) == f"Wallet(address={wallet.address!r})"
    assert wallet.address == address_of(bytes.fromhex(KEY_HEX))
    assert Wallet("0x" + KEY_HEX.upper()).address == Wallet(bytes.fromhex(KEY_HEX)).address == wallet.address
    (tmp_path / "key").write_text(f"0x{KEY_HEX}\n")
    assert Wallet.from_file(tmp_path / "key").address == wallet.address
    monkeypatch.setenv("AGENT_KEY", KEY_HEX)
    assert Wallet.from_env("AGENT_KEY").address == wallet.address
    with pytest.raises(TypeError):
        pickle.dumps(wallet)
    for bad in (KEY_HEX[:-2], "zz" * 32, "00" * 32, b"\x01" * 31):
        with pytest.raises(ConfigurationError) as caught:
            Wallet(bad)
        assert "zz" * 8 not in caught.value.message and KEY_HEX[:-2] not in caught.value.message
    monkeypatch.delenv("X402MW_PRIVATE_KEY", raising=False)
    with pytest.raises(ConfigurationError, match="X402MW_PRIVATE_KEY"):
        Wallet.from_env()
    with pytest.raises(ConfigurationError, match="cannot read"):
        Wallet.from_file(tmp_path / "missing")


class Seller:
    """A tiny x402 seller: 402 with an offer, then 200 for a payment whose signature recovers."""

    def __init__(self, payer: str, amount: int = 10_000) -> None:
        self.payer = payer
        self.amount = amount
        self.bodies: list[bytes] = []
        self.lock = threading.Lock()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        with self.lock:
            self.bodies.append(request.content)
        header = request.headers.get("PAYMENT-SIGNATURE")
        if header is None:
            return challenge(request, offer(self.amount))
        payload = decode_payment_payload(header)
        assert payload.accepted is not None and payload.accepted.to_wire() == offer(self.amount)
        if recovered_signer(payload) != self.payer:
            return httpx.Response(402, json={"error": "bad signature"})
        return httpx.Response(
            200,
            headers={"PAYMENT-RESPONSE": settlement(self.payer, self.amount)},
            json={"temp": 21, "paid": True},
        )


def test_a_real_client_pays_through_the_transport(wallet: Wallet) -> None:
    seller = Seller(wallet.address)
    auth = X402Auth(wallet, max_amount="0.01")
    with httpx.Client(transport=httpx.MockTransport(seller), auth=auth) as client:
        response = client.post(URL, content=b"question")
    assert response.status_code == 200 and response.json() == {"temp": 21, "paid": True}
    assert [r.status_code for r in response.history] == [402]
    assert seller.bodies == [b"question", b"question"]  # the body is sent again with the payment
    assert auth.payments[0].transaction == TX


@pytest.mark.anyio
async def test_an_async_client_pays_through_the_transport(wallet: Wallet) -> None:
    seller = Seller(wallet.address)
    auth = X402Auth(wallet, max_amount="0.01")

    async def stream() -> AsyncIterator[bytes]:
        yield b"quest"
        yield b"ion"

    async def chunks(body: bytes) -> AsyncIterator[bytes]:
        yield body

    def streaming_seller(request: httpx.Request) -> httpx.Response:
        answer = seller(request)
        if answer.status_code != 200:
            return answer
        return httpx.Response(
            200,
            headers={"PAYMENT-RESPONSE": answer.headers["PAYMENT-RESPONSE"]},
            content=chunks(answer.content),
        )

    async with httpx.AsyncClient(transport=httpx.MockTransport(streaming_seller), auth=auth) as client:
        response = await client.post(URL, content=stream())
        async with client.stream("GET", URL) as streamed:
            assert streamed.status_code == 200 and not streamed.is_stream_consumed
            assert await streamed.aread() == b'{"temp":21,"paid":true}'
    assert response.status_code == 200 and response.json()["paid"] is True
    assert seller.bodies[:2] == [b"question", b"question"]
    assert len(auth.payments) == 2 and auth.spent == {"USDC": Decimal("0.02")}


@pytest.mark.anyio
async def test_an_async_client_reads_a_v1_offer_from_the_body(wallet: Wallet) -> None:
    offer_v1 = {
        "x402Version": 1,
        "accepts": [
            {
                "scheme": "exact",
                "network": "base",
                "maxAmountRequired": "10000",
                "resource": URL,
                "payTo": PAY_TO,
                "maxTimeoutSeconds": 60,
                "asset": USDC_BASE,
                "extra": {"name": "USD Coin", "version": "2"},
            }
        ],
    }

    async def unread_body() -> AsyncIterator[bytes]:  # the auth has to read it itself
        yield json.dumps(offer_v1).encode()

    def seller(request: httpx.Request) -> httpx.Response:
        if "X-PAYMENT" not in request.headers:
            return httpx.Response(402, headers={"Content-Type": "application/json"}, content=unread_body())
        payload = decode_payment_payload(request.headers["X-PAYMENT"])
        return httpx.Response(200, json={"from": payload.payload.authorization.from_address})

    auth = X402Auth(wallet)
    async with httpx.AsyncClient(transport=httpx.MockTransport(seller), auth=auth) as client:
        response = await client.get(URL)
    assert response.json() == {"from": wallet.address}
    assert auth.payments[0].transaction == ""


def test_the_pay_command_refuses_without_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("X402MW_PRIVATE_KEY", raising=False)
    result = CliRunner().invoke(pay_command, [URL, "--json"])
    assert result.exit_code == 1
    assert json.loads(result.output)["error"]["reason"] == "configuration_error"
    monkeypatch.setenv("X402MW_PRIVATE_KEY", KEY_HEX)
    result = CliRunner().invoke(pay_command, [URL, "--max-amount", "ten"])
    assert result.exit_code == 1 and "Error: max_amount is not a plain decimal" in result.output
    assert "Traceback" not in result.output and KEY_HEX not in result.output


@pytest.fixture
def http_seller(wallet: Wallet) -> Iterator[tuple[str, str]]:
    """A seller on a loopback socket for the ``pay`` command; yields its URL and receipt signer."""
    platform_key = new_private_key()
    seller = Seller(wallet.address)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = f"http://{self.headers['Host']}{self.path}"
            request = httpx.Request("GET", url, headers=dict(self.headers.items()))
            answer = seller(request)
            if answer.status_code == 200:
                receipt = sign_receipt(receipt_fields(wallet.address), platform_key)
                answer.headers["PAYMENT-RESPONSE"] = settlement(wallet.address, receipt=receipt)
            self.send_response(answer.status_code)
            for name, value in answer.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(answer.content)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/weather", address_of(platform_key)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_the_pay_command_pays_and_checks_the_receipt(
    http_seller: tuple[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url, signer = http_seller
    monkeypatch.delenv("X402MW_PRIVATE_KEY", raising=False)
    (tmp_path / "key").write_text(KEY_HEX)
    key_file = ["--private-key-file", str(tmp_path / "key")]
    result = CliRunner().invoke(pay_command, [url, *key_file, "--receipt-signer", signer, "--json"])
    assert result.exit_code == 0, result.output
    output = json.loads(result.output)
    assert output["status"] == 200 and json.loads(output["body"]) == {"temp": 21, "paid": True}
    payment = output["payment"]
    assert (payment["amount"], payment["asset"], payment["transaction"]) == ("0.01", "USDC", TX)
    assert payment["receiptVerified"] is True
    text = CliRunner().invoke(pay_command, [url, *key_file])
    assert text.exit_code == 0 and "receipt verified: not checked" in text.output and TX in text.output
    refused = CliRunner().invoke(pay_command, [url, *key_file, "--max-amount", "0.001"])
    assert refused.exit_code == 1 and "Error: refused to pay" in refused.output and "over the" in refused.output
    assert "Traceback" not in refused.output


def _declaring(request: httpx.Request, reason: str | None = None, **extra: Any) -> httpx.Response:
    """A 402 that declares the payment-identifier extension (as every x402mw seller's does)."""
    offered = required(offer(**extra)) | {"extensions": {PAYMENT_IDENTIFIER: DECLARATION}}
    if reason:
        offered["error"] = reason
    return httpx.Response(402, headers={"PAYMENT-REQUIRED": encode_header(offered)}, request=request)


def _identifier(request: httpx.Request) -> str | None:
    return identifier_of(decode_payment_payload(request.headers["PAYMENT-SIGNATURE"]))


def test_one_payment_identifier_per_logical_request_kept_across_its_retries(wallet: Wallet) -> None:
    auth = X402Auth(wallet, max_total="1")
    flow = auth.auth_flow(httpx.Request("GET", URL))
    first = flow.send(_declaring(next(flow)))
    sent = first.headers["PAYMENT-SIGNATURE"]  # (the flow sends one request object again and again)
    identifier = _identifier(first)
    assert identifier is not None and identifier.startswith("pay_") and len(identifier) == 36
    payload = decode_payment_payload(first.headers["PAYMENT-SIGNATURE"])
    assert (payload.extensions or {})[PAYMENT_IDENTIFIER]["schema"] == DECLARATION["schema"]  # echoed
    pending_header = encode_header(
        {"success": False, "errorReason": "settlement_pending", "transaction": TX, "network": "eip155:8453"}
    )
    pending = httpx.Response(402, headers={"PAYMENT-RESPONSE": pending_header, "Retry-After": "1"}, request=first)
    again = flow.send(pending)  # the same signature again, its id with it
    assert again.headers["PAYMENT-SIGNATURE"] == sent
    renewed = flow.send(_declaring(again, "challenge_expired", challengeId="ch_2"))  # a new signature, the same id
    assert renewed.headers["PAYMENT-SIGNATURE"] != sent
    assert _identifier(renewed) == identifier
    with pytest.raises(StopIteration):
        flow.send(paid(renewed, settlement(wallet.address)))
    # the next logical request gets its own id; a seller that does not declare the extension gets none
    other = X402Auth(wallet).auth_flow(httpx.Request("GET", URL))
    assert _identifier(other.send(_declaring(next(other)))) not in (None, identifier)
    plain = X402Auth(wallet).auth_flow(httpx.Request("GET", URL))
    assert _identifier(plain.send(challenge(next(plain)))) is None
