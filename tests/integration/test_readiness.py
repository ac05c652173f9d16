"""``/readyz`` (issue 38): 200 with each check's result while the platform can take payments; 503 in
the error envelope (code ``not_ready``) naming each dependency that fails: the database's schema,
Redis, a chain's JSON-RPC, a relayer without gas. ``/healthz`` answers all along."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from eth_account import Account

from tests.harness import PlatformHarness, platform_server, postgres_database
from tests.redis_process import RedisProcess
from tests.rpc_proxy import RpcProxy
from tests.waiting import eventually
from x402mw.platform.chain.anvil import ANVIL_DEV_KEYS, AnvilProcess, deploy_test_tokens
from x402mw.platform.chain.rpc import HttpJsonRpc
from x402mw.platform.db.schema import known_head, migrate
from x402mw.platform.settings import ChainSettings, PlatformSettings

RELAYER = ANVIL_DEV_KEYS[1]
RELAYER_ADDRESS = Account.from_key(RELAYER).address


class Stack:
    def __init__(self, anvil: AnvilProcess, proxy: RpcProxy, redis: RedisProcess, url: str, platform: Any) -> None:
        self.anvil, self.proxy, self.redis, self.database_url, self.platform = anvil, proxy, redis, url, platform

    @property
    def root(self) -> str:
        return str(self.platform.url).removesuffix("/v1")

    def readyz(self) -> httpx.Response:
        return httpx.get(self.root + "/readyz", timeout=30)

    def anvil_call(self, method: str, params: list[Any]) -> Any:
        answer = httpx.post(self.anvil.url, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        return answer.json()["result"]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    with (
        AnvilProcess() as anvil,
        RpcProxy(anvil.url, max_pending=64) as proxy,
        RedisProcess() as redis,
        postgres_database() as url,
    ):

        async def deploy() -> dict[str, str]:
            rpc = HttpJsonRpc(anvil.url)
            try:
                return await deploy_test_tokens(rpc, ANVIL_DEV_KEYS[0])
            finally:
                await rpc.aclose()

        migrate(url)
        settings = PlatformSettings(
            database_url=url,
            database_pool_size=6,
            data_dir=tmp_path,
            chains=[ChainSettings(rpc_url=proxy.url, tokens=asyncio.run(deploy()), minter_key=ANVIL_DEV_KEYS[0].hex())],
            relayer_key=RELAYER.hex(),
            redis_url=redis.url,
            migrate=False,
        )
        with platform_server(settings) as server:
            yield Stack(anvil, proxy, redis, url, PlatformHarness(server))


def _not_ready(stack: Stack, failing: str) -> dict[str, Any]:
    """Wait for /readyz to fail on ``failing`` alone; its body."""
    answer = eventually(
        stack.readyz,
        until=lambda r: r.status_code == 503 and [n for n, c in r.json()["checks"].items() if not c["ok"]] == [failing],
        what=lambda: f"/readyz to fail on {failing} alone: {stack.readyz().text}",
    )
    assert answer.headers["retry-after"] == "2"
    body: dict[str, Any] = answer.json()
    assert body["status"] == "not_ready"
    assert body["error"]["type"] == "api_error" and body["error"]["code"] == "not_ready"
    assert body["error"]["requestId"] == answer.headers["request-id"]
    assert f"{failing}: {body['checks'][failing]['detail']}" in body["error"]["message"]
    assert httpx.get(stack.root + "/healthz", timeout=30).status_code == 200, "the process lives all along"
    return body


def _ready(stack: Stack) -> dict[str, Any]:
    answer = eventually(stack.readyz, until=lambda r: r.status_code == 200, what=lambda: stack.readyz().text)
    body: dict[str, Any] = answer.json()
    assert "error" not in body and body["status"] == "ready"
    return body


def test_readyz_names_each_dependency_that_fails(stack: Stack) -> None:
    network = f"eip155:{stack.anvil.chain_id}"
    body = _ready(stack)
    assert set(body["checks"]) == {"database", "redis", f"chain {network}", f"relayer {network}"}
    assert all(check["ok"] for check in body["checks"].values())
    assert body["checks"]["database"]["detail"] == f"reachable, schema at revision {known_head()}"
    assert body["checks"][f"chain {network}"]["detail"].startswith("JSON-RPC answers, head block ")
    assert body["database"] == "ok" and body["chains"] == {network: "ok"}

    stack.redis.stop()
    assert _not_ready(stack, "redis")["checks"]["redis"]["detail"].startswith("cannot be reached")
    stack.redis.start()
    _ready(stack)

    stack.proxy.kill()  # the chain's node goes away
    body = eventually(
        stack.readyz,
        until=lambda r: r.status_code == 503 and not r.json()["checks"][f"chain {network}"]["ok"],
        what="/readyz to see the node gone",
    ).json()
    assert body["chains"] == {network: "unavailable"} and f"chain {network}: " in body["error"]["message"]
    stack.proxy.start()
    _ready(stack)

    funded = stack.anvil_call("eth_getBalance", [RELAYER_ADDRESS, "latest"])
    stack.anvil_call("anvil_setBalance", [RELAYER_ADDRESS, "0x1"])
    detail = _not_ready(stack, f"relayer {network}")["checks"][f"relayer {network}"]["detail"]
    assert detail.startswith("gas below the floor of ") and f"{RELAYER_ADDRESS} 1 wei" in detail
    stack.anvil_call("anvil_setBalance", [RELAYER_ADDRESS, funded])
    _ready(stack)

    with psycopg.connect(stack.database_url, autocommit=True) as conn:  # a newer release migrated it
        conn.execute("UPDATE alembic_version SET version_num = '9999'")
        detail = _not_ready(stack, "database")["checks"]["database"]["detail"]
        assert detail == f"schema at revision 9999, this x402mw runs on {known_head()}: run `x402mw platform migrate`"
        conn.execute("UPDATE alembic_version SET version_num = %s", (known_head(),))
    _ready(stack)
