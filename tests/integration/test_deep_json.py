"""JSON nested far deeper than any request needs is refused in the error envelope, never a crash.

Importing the chain libraries (py-evm, py_ecc) raises the interpreter's recursion limit to 100,000,
so in a ``serve`` process that runs the dev chain, the C JSON parser used to exhaust the C stack on
a 70,000-deep body (a segmentation fault: the process died and took every request with it) before
the interpreter could raise ``RecursionError``. These tests run the real command, send such bodies
and headers, and check that the processes answer 400 (a seller: 402 ``invalid_payload``) and keep
serving.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from tests.waiting import eventually
from x402mw.evm.keys import address_of, new_private_key
from x402mw.platform.db.engine import create_engine_for
from x402mw.platform.server import free_port
from x402mw.platform.services.merchants import create_api_key, create_merchant
from x402mw.protocol import PAYMENT_REQUIRED, PAYMENT_SIGNATURE, V1_PAYMENT, decode_payment_required

ROOT = Path(__file__).resolve().parents[2]
DEPTH = 70_000
DEEP_BODY = b'{"a":' * DEPTH + b"1" + b"}" * DEPTH  # 420 KB: under the 1 MiB body limit
# The deepest JSON a payment header carries under its 8 KiB limit: base64 of 6,000 brackets.
DEEP_HEADER = base64.b64encode(b"[" * 6000).decode()
TOO_DEEP = "nested more than 64 levels deep"
MERCHANT_PATHS = [
    "/v1/payment-intents",
    "/v1/agent/endpoints",
    "/v1/agent/settlements",
    "/v1/agent/challenges/batch",
    "/v1/x402/settle",
    "/v1/x402/verify",
    "/v1/webhook-endpoints",
    "/v1/sandbox/faucet",
]


class Running:
    """A command running in the background, its output in ``log``."""

    def __init__(self, command: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        with log.open("wb") as handle:
            self.process = subprocess.Popen(command, env=env, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT)

    def assert_alive(self) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=0.2)  # a crash drops the connection a moment before the process is reaped
        code = self.process.poll()
        assert code is None, f"the process died (exit {code}):\n{self.log.read_text()[-3000:]}"

    def wait_until_up(self, url: str) -> None:
        eventually(
            lambda: self.process.poll() is not None or httpx.get(url, timeout=1).status_code < 500,
            what=lambda: f"{url} to answer:\n{self.log.read_text()}",
            timeout=120,
        )
        assert self.process.poll() is None, self.log.read_text()

    def send(self, client: httpx.Client, method: str, url: str, **options: Any) -> httpx.Response:
        """``client.request``; a dropped connection fails the test with the process's fate."""
        try:
            reply = client.request(method, url, **options)
        except httpx.HTTPError as exc:
            self.assert_alive()
            raise AssertionError(f"{method} {url}: {exc!r}, yet the process still runs") from exc
        self.assert_alive()
        return reply


@contextlib.contextmanager
def running(command: list[str], env: dict[str, str], log: Path, health_url: str) -> Iterator[Running]:
    started = Running(command, env, log)
    try:
        started.wait_until_up(health_url)
        yield started
    finally:
        started.process.terminate()
        started.process.wait(timeout=30)


def _api_key(database_url: str) -> str:
    async def make() -> str:
        engine = create_engine_for(database_url)
        try:
            merchant = await create_merchant(engine, "Deep JSON")
            return (await create_api_key(engine, merchant.id))[1]
        finally:
            await engine.dispose()

    return asyncio.run(make())


def _assert_too_deep(reply: httpx.Response) -> None:
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["code"] == "json_too_deep"
    assert error["requestId"] == reply.headers["request-id"]
    assert TOO_DEEP in error["message"]


def _endpoint(client: httpx.Client, network: str, resource_url: str) -> str:
    body = {
        "name": "Weather",
        "resourceUrl": resource_url,
        "chainId": int(network.split(":")[1]),
        "currency": "USDC",
        "payoutAddress": address_of(new_private_key()),
        "amountMinor": "1000",
    }
    reply = client.post("/v1/agent/endpoints", json=body)
    assert reply.status_code == 201, reply.text
    return str(reply.json()["endpoint"]["id"])


def test_deep_bodies_and_headers_are_refused_and_the_processes_stay_up(tmp_path: Path) -> None:
    port, seller_port = free_port(), free_port()
    base, seller_url = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{seller_port}"
    env = dict(os.environ, X402MW_DATA_DIR=str(tmp_path / "data"))
    serve = [sys.executable, "-m", "x402mw", "platform", "serve", "--port", str(port), "--log-level", "warning"]
    with running(serve, env, tmp_path / "serve.log", f"{base}/healthz") as server:
        key = _api_key(f"sqlite:///{tmp_path / 'data' / 'platform.sqlite3'}")
        network = httpx.get(f"{base}/healthz", timeout=10).json()["networks"][0]
        with httpx.Client(base_url=base, timeout=60) as client:
            unauthenticated = server.send(client, "POST", "/v1/payment-intents", content=DEEP_BODY)
            assert unauthenticated.status_code == 401, unauthenticated.text
            assert unauthenticated.json()["error"]["code"] == "api_key_missing"

            client.headers["Authorization"] = f"Bearer {key}"
            for path in MERCHANT_PATHS:
                _assert_too_deep(server.send(client, "POST", path, content=DEEP_BODY))
            for path in ("/v1/payment-intents", "/v1/webhook-endpoints"):  # through the idempotency layer
                reply = server.send(client, "POST", path, content=DEEP_BODY, headers={"Idempotency-Key": path})
                _assert_too_deep(reply)

            order = {"orderId": "after-deep", "amount": "2", "currency": "USDC"}
            created = server.send(client, "POST", "/v1/payment-intents", json=order)
            assert created.status_code == 201, created.text
            order_path = f"/checkout/v1/payment-intents/{created.json()['paymentIntent']['id']}"
            endpoint_id = _endpoint(client, network, f"{seller_url}/weather")

        with httpx.Client(base_url=base, timeout=60) as public:  # the checkout endpoints take no key
            for step in ("attempts", "sync", "transfer-status"):
                _assert_too_deep(server.send(public, "POST", f"{order_path}/{step}", content=DEEP_BODY))
            choice = {"network": network, "currency": "USDC", "method": "transfer"}
            attempt = server.send(public, "POST", f"{order_path}/attempts", json=choice)
            assert attempt.status_code == 200, attempt.text

        seller_env = dict(env, X402MW_API_KEY=key, X402MW_ENDPOINT_ID=endpoint_id, X402MW_PLATFORM_URL=f"{base}/v1")
        seller_command = [sys.executable, "-m", "uvicorn", "examples.starlette_seller:app", "--port", str(seller_port)]
        with (
            running(seller_command, seller_env, tmp_path / "seller.log", f"{seller_url}/health") as seller,
            httpx.Client(base_url=seller_url, timeout=60) as agent,
        ):
            for header in (PAYMENT_SIGNATURE, V1_PAYMENT):
                refused = seller.send(agent, "GET", "/weather", headers={header: DEEP_HEADER})
                assert refused.status_code == 402, refused.text
                assert decode_payment_required(refused.headers[PAYMENT_REQUIRED]).error == "invalid_payload"
                assert TOO_DEEP in refused.json()["message"], refused.text
            fresh = seller.send(agent, "GET", "/weather")
            assert fresh.status_code == 402
            assert decode_payment_required(fresh.headers[PAYMENT_REQUIRED]).error is None
        assert httpx.get(f"{base}/healthz", timeout=10).status_code == 200
        server.assert_alive()
