"""An in-process fake of the platform's seller-facing API, for adapter tests.

`FakePlatform` is an ``httpx.MockTransport`` handler serving ``GET /v1/agent/endpoints/{id}``,
``POST /v1/agent/challenges/batch`` and ``POST /v1/agent/settlements``; `FakePlatform.transport`
reaches it from both ``httpx.Client`` and ``httpx.AsyncClient``. It checks the settlement request's
``accepted`` terms against the authorization (payee, value) but not the signature: the real
platform's tests cover signatures. `pay` builds a ``PAYMENT-SIGNATURE`` for a 402 answer.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from x402mw.protocol import decode_payment_required, encode_header

API_KEY = "sk_test_fake_0123456789"
PLATFORM_URL = "http://platform.test/v1"
NETWORK = "eip155:31337"
ASSET = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
PAY_TO = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
PAYER = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"
FIXED = "ep_fixed"
DYNAMIC = "ep_dynamic"


def endpoint(endpoint_id: str, *, pricing_mode: str = "fixed", amount: str | None = "10000") -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": endpoint_id,
        "name": f"Endpoint {endpoint_id}",
        "resourceUrl": "http://testserver/weather",
        "network": NETWORK,
        "chainId": 31337,
        "currency": "USDC",
        "asset": ASSET,
        "assetName": "USD Coin",
        "assetVersion": "2",
        "decimals": 6,
        "payoutAddress": PAY_TO,
        "pricingMode": pricing_mode,
        "releasePolicy": "included",
        "maxTimeoutSeconds": 300,
    }
    if amount is not None:
        data["amountMinor"] = amount
    return data


def _error(status: int, code: str, message: str, kind: str = "invalid_request_error") -> httpx.Response:
    return httpx.Response(status, json={"error": {"type": kind, "code": code, "message": message}})


@dataclass
class FakePlatform:
    """The fake. Set ``outcome`` to ``"settled"``, ``"pending"`` or a failure reason code, and
    ``unreachable`` to make every call fail with ``httpx.ConnectError``."""

    api_key: str = API_KEY
    endpoints: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {
            FIXED: endpoint(FIXED),
            DYNAMIC: endpoint(DYNAMIC, pricing_mode="dynamic", amount=None),
        }
    )
    outcome: str = "settled"
    unreachable: bool = False
    requests: list[tuple[str, str]] = field(default_factory=list)
    challenges: list[dict[str, Any]] = field(default_factory=list)
    settlements: list[dict[str, Any]] = field(default_factory=list)
    _settled: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if self.unreachable:
            raise httpx.ConnectError("connection refused", request=request)
        path = request.url.path
        self.requests.append((request.method, path))
        if request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return _error(401, "api_key_invalid", "invalid API key", "authentication_error")
        if request.method == "GET" and path.startswith("/v1/agent/endpoints/"):
            found = self.endpoints.get(path.rsplit("/", 1)[1])
            if found is None:
                return _error(404, "resource_missing", "no such agent endpoint")
            return httpx.Response(200, json={"endpoint": found})
        if request.method == "POST" and path == "/v1/agent/challenges/batch":
            self.challenges.extend(json.loads(request.content)["challenges"])
            return httpx.Response(200, json={})
        if request.method == "POST" and path == "/v1/agent/settlements":
            return self._settle(json.loads(request.content))
        return _error(404, "resource_missing", f"no route {request.method} {path}")

    def _settle(self, body: dict[str, Any]) -> httpx.Response:
        self.settlements.append(body)
        accepted = body["accepted"]
        authorization = body["paymentPayload"]["payload"]["authorization"]
        network = accepted["network"]
        replay = self._settled.get(authorization["nonce"])
        if replay is not None:
            return httpx.Response(200, json=replay)
        reason = None
        if authorization["to"].lower() != accepted["payTo"].lower():
            reason = "invalid_exact_evm_payload_recipient_mismatch"
        elif int(authorization["value"]) != int(accepted["amount"]):
            reason = "invalid_exact_evm_payload_authorization_value"
        elif self.outcome not in ("settled", "pending"):
            reason = self.outcome
        if reason is not None:
            failed = {"success": False, "errorReason": reason, "network": network, "transaction": ""}
            return httpx.Response(200, json={"status": "failed", "settlement": failed})
        transaction = "0x" + secrets.token_hex(32)
        if self.outcome == "pending":
            pending = {
                "success": False,
                "errorReason": "settlement_pending",
                "network": network,
                "transaction": transaction,
            }
            return httpx.Response(200, json={"status": "pending", "settlement": pending})
        receipt = {
            "challengeId": body["challengeId"],
            "endpointId": body["endpointId"],
            "network": network,
            "asset": accepted["asset"],
            "amount": str(accepted["amount"]),
            "payer": authorization["from"],
            "payTo": accepted["payTo"],
            "transaction": transaction,
            "settledAt": str(int(time.time())),
            "signature": "0x" + "ab" * 65,
        }
        answer = {
            "status": "settled",
            "settlement": {
                "success": True,
                "payer": authorization["from"],
                "transaction": transaction,
                "network": network,
                "amount": str(accepted["amount"]),
                "extensions": {"receipt": receipt},
            },
        }
        self._settled[authorization["nonce"]] = answer
        return httpx.Response(200, json=answer)


def pay(payment_required: str, *, payer: str = PAYER, amount: int | None = None) -> str:
    """A ``PAYMENT-SIGNATURE`` paying the first offer of a ``PAYMENT-REQUIRED`` header.

    ``amount`` tampers with the echoed terms (and the authorization, so that they agree).
    """
    required = decode_payment_required(payment_required)
    accepted = required.accepts[0].to_wire()
    if amount is not None:
        accepted["amount"] = str(amount)
    payload: dict[str, Any] = {
        "x402Version": 2,
        "accepted": accepted,
        "payload": {
            "signature": "0x" + "11" * 65,
            "authorization": {
                "from": payer,
                "to": accepted["payTo"],
                "value": accepted["amount"],
                "validAfter": "0",
                "validBefore": str(int(time.time()) + 300),
                "nonce": "0x" + secrets.token_hex(32),
            },
        },
    }
    if required.resource is not None:
        payload["resource"] = required.resource.to_wire()
    return encode_header(payload)
