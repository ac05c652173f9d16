"""The sellers' calls to the platform: handed straight to the transport, they send what an httpx
client with the same base URL and headers sends (checked against a real server), report an
unreachable platform as such, and go through an httpx client when the environment names a proxy."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Generator, Iterator
from typing import Any

import httpx
import pytest
import uvicorn

from tests.waiting import eventually
from x402mw import __version__
from x402mw.errors import PlatformError
from x402mw.seller import AsyncSeller, PaymentGate, SyncSeller, run_async, run_sync
from x402mw.seller.decisions import PlatformCall, PlatformReply

KEY = "sk_test_drivers"


async def _echo(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers each request with what it received: method, path, the headers that matter, the body."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    headers = {name.decode().lower(): value.decode() for name, value in scope["headers"]}
    seen = {
        "method": scope["method"],
        "path": scope["path"],
        "host": headers.get("host"),
        "authorization": headers.get("authorization"),
        "user-agent": headers.get("user-agent"),
        "content-type": headers.get("content-type"),
        "body": json.loads(body) if body else None,
    }
    status = 404 if scope["path"].endswith("/missing") else 200
    answer = [(b"content-type", b"application/json"), (b"request-id", b"req_echo")]
    await send({"type": "http.response.start", "status": status, "headers": answer})
    await send({"type": "http.response.body", "body": json.dumps(seen).encode()})


@pytest.fixture(scope="module")
def echo_url() -> Iterator[str]:
    server = uvicorn.Server(uvicorn.Config(_echo, host="127.0.0.1", port=0, lifespan="off", log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    eventually(lambda: server.started, what="the echo server to start", interval=0.01)
    yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    server.should_exit = True
    thread.join(timeout=30)


def _calls() -> Generator[Any, Any, list[Any]]:
    """Three calls as a gate makes them; returns what came back (replies, or the error thrown in)."""
    results: list[Any] = []
    for call in (
        PlatformCall("POST", "/agent/settlements", {"amount": "1000", "nested": {"a": [1, 2]}}, timeout=5),
        PlatformCall("GET", "/agent/endpoints/ep_1"),
        PlatformCall("GET", "/agent/missing"),
    ):
        try:
            results.append((yield call))
        except PlatformError as exc:
            results.append(exc)
    return results


def _headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {KEY}", "User-Agent": f"x402mw-seller/{__version__}"}


def _comparable(results: list[Any]) -> list[tuple[int, Any, str | None]]:
    return [(reply.status, reply.data, reply.request_id) for reply in results]


def test_the_sync_seller_sends_what_an_httpx_client_sends(echo_url: str) -> None:
    gate = PaymentGate(api_key=KEY, platform_url=echo_url + "/v1/")
    seller = SyncSeller(gate)
    try:
        direct = seller.run(_calls())
    finally:
        seller.close()
    with httpx.Client(base_url=gate.platform_url, headers=_headers()) as client:
        expected = run_sync(_calls(), client)
    assert _comparable(direct) == _comparable(expected)
    settle, terms, missing = direct
    assert isinstance(settle, PlatformReply) and settle.status == 200 and settle.request_id == "req_echo"
    assert settle.data["path"] == "/v1/agent/settlements" and settle.data["method"] == "POST"
    assert settle.data["body"] == {"amount": "1000", "nested": {"a": [1, 2]}}
    assert settle.data["authorization"] == f"Bearer {KEY}" and settle.data["content-type"] == "application/json"
    assert terms.data["path"] == "/v1/agent/endpoints/ep_1" and terms.data["body"] is None
    assert missing.status == 404


@pytest.mark.anyio
async def test_the_async_seller_sends_what_an_httpx_client_sends(echo_url: str) -> None:
    gate = PaymentGate(api_key=KEY, platform_url=echo_url + "/v1")
    seller = AsyncSeller(gate)
    try:
        direct = await seller.run(_calls())
    finally:
        await seller.aclose()
    async with httpx.AsyncClient(base_url=gate.platform_url, headers=_headers()) as client:
        expected = await run_async(_calls(), client)
    assert _comparable(direct) == _comparable(expected)
    assert direct[0].data["user-agent"] == f"x402mw-seller/{__version__}"


async def _through_an_async_seller(gate: PaymentGate) -> list[Any]:
    seller = AsyncSeller(gate)
    try:
        return await seller.run(_calls())
    finally:
        await seller.aclose()


def _unused_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_an_unreachable_platform_is_a_platform_error_with_status_0() -> None:
    gate = PaymentGate(api_key=KEY, platform_url=f"http://127.0.0.1:{_unused_port()}/v1")
    seller = SyncSeller(gate)
    try:
        results = seller.run(_calls())
    finally:
        seller.close()
    assert [type(result) for result in results] == [PlatformError] * 3
    assert all(result.status == 0 and "unreachable" in str(result) for result in results)

    assert [type(result) for result in asyncio.run(_through_an_async_seller(gate))] == [PlatformError] * 3


def test_a_proxy_named_by_the_environment_is_honoured(echo_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The echo server stands in for the proxy: the platform's own host does not resolve, so the
    calls succeed only through it."""
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", echo_url)
    gate = PaymentGate(api_key=KEY, platform_url="http://platform.invalid/v1")
    seller = SyncSeller(gate)
    try:
        settle, _terms, _missing = seller.run(_calls())
    finally:
        seller.close()
    assert settle.status == 200 and settle.data["host"] == "platform.invalid"
    assert settle.data["path"].endswith("/v1/agent/settlements")

    settle, _terms, _missing = asyncio.run(_through_an_async_seller(gate))
    assert settle.status == 200 and settle.data["host"] == "platform.invalid"
