"""The gateway app in-process, without a platform or an upstream: what it answers before either is
asked."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from x402mw.gateway.app import GatewayApp
from x402mw.gateway.config import parse_config


def _app() -> GatewayApp:
    config = parse_config(
        {
            "max_request_body": 10,
            "routes": [{"method": "POST", "path": "/paid", "price": "0.01", "coin": "USDC", "network": "eip155:84532"}],
        }
    )
    return GatewayApp(
        config,
        upstream_url="http://127.0.0.1:9",
        api_key="sk_test_unit",
        platform_url="http://127.0.0.1:9/v1",
        endpoints={"POST /paid": "ep1"},
    )


def test_a_websocket_is_refused_at_the_handshake() -> None:
    with pytest.raises(WebSocketDisconnect) as refused, TestClient(_app()).websocket_connect("/anything"):
        pass
    assert refused.value.code == 1008


def test_an_oversized_body_is_refused_before_any_payment_is_asked_for() -> None:
    answer = TestClient(_app()).post("/paid", content=b"x" * 11)
    assert answer.status_code == 413
    assert answer.json()["error"]["code"] == "request_too_large"
    assert "PAYMENT-REQUIRED" not in answer.headers
