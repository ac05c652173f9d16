"""Test harness: start real platforms and set merchants up through the real API."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from tests import answers
from tests.cli_runs import run_cli
from tests.waiting import eventually
from x402mw.client import Wallet
from x402mw.evm.keys import address_of, new_private_key
from x402mw.platform.chain.anvil import ANVIL_DEV_KEYS, AnvilProcess, deploy_test_tokens
from x402mw.platform.chain.rpc import HttpJsonRpc
from x402mw.platform.chain.token import balance_of
from x402mw.platform.clock import Clock
from x402mw.platform.server import PlatformServer, free_port
from x402mw.platform.services.merchants import create_api_key, create_merchant
from x402mw.platform.settings import ChainSettings, PlatformSettings

POSTGRES_URL = os.environ.get("X402MW_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
DATABASES = ["sqlite", "postgresql"]

sqlite_only = pytest.mark.parametrize("database", ["sqlite"], indirect=True)
"""For a test that takes a platform fixture but never reaches its database: run it on SQLite only."""

CHAINS = ["dev", "anvil"]


def each_on_one_chain(name: str, values: list[str]) -> pytest.MarkDecorator:
    """Parametrise ``name`` by ``values`` for a test on ``any_chain_platform`` whose ``values`` the
    chain never sees (a seller's web framework): each value runs once, on the chains in turn, so
    every value runs and so does each chain (instead of every value on every chain)."""
    pairs = [(value, CHAINS[i % len(CHAINS)]) for i, value in enumerate(values)]
    return pytest.mark.parametrize(
        (name, "any_chain_platform"),
        [pytest.param(value, chain, id=f"{value}-{chain}") for value, chain in pairs],
        indirect=["any_chain_platform"],
    )


@contextlib.contextmanager
def serve_app(app: Any, log_level: str = "warning", port: int | None = None) -> Iterator[str]:
    """The ASGI ``app`` served by uvicorn on a loopback port (``port``, or a free one) in a thread,
    with its lifespan, as in production: what the app opens it closes at shutdown; yields its base URL."""
    port = port or free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level=log_level))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        eventually(lambda: server.started, what=f"uvicorn to serve on port {port}", interval=0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@contextlib.contextmanager
def postgres_database() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session, dropped afterwards."""
    import psycopg
    from sqlalchemy.engine import make_url

    name = f"x402mw_test_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=10) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as exc:
        shown = make_url(POSTGRES_URL).render_as_string(hide_password=True)
        raise RuntimeError(
            f"PostgreSQL does not answer at {shown} ({str(exc).strip()}). Run the suite through "
            "`make test` or `python -m tests.pg_cluster -- pytest ...`, which start a throwaway cluster "
            "when none answers, or set X402MW_TEST_POSTGRES_URL to a server whose user may CREATE DATABASE."
        ) from exc
    try:
        yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclass
class Deployment:
    """A merchant with a test key and an agent endpoint, and a funded agent wallet."""

    harness: PlatformHarness
    merchant_id: str
    api_key: str
    key_id: str
    endpoint: dict[str, Any]
    agent: Wallet
    agent_key: bytes
    payout: str

    @property
    def endpoint_id(self) -> str:
        return str(self.endpoint["id"])

    def api(self) -> httpx.Client:
        return httpx.Client(base_url=self.harness.url, headers={"Authorization": f"Bearer {self.api_key}"}, timeout=60)


class PlatformHarness:
    def __init__(self, server: PlatformServer, minter: str | None = None) -> None:
        self.server = server
        platform = server.platform
        assert platform is not None
        self.platform = platform
        self.chain = next(iter(platform.chains))
        self.network = self.chain.network.caip2
        self.usdc = self.chain.network.assets["USDC"].address

    @property
    def url(self) -> str:
        return self.server.url

    def merchant(self, name: str = "Test merchant") -> tuple[str, str, str]:
        merchant = self.server.call(lambda p: create_merchant(p.engine, name))
        row, key = self.server.call(lambda p: create_api_key(p.engine, merchant.id))
        return merchant.id, key, row.id

    def fund(self, api_key: str, address: str, amount: str = "100") -> None:
        with httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {api_key}"}, timeout=60) as api:
            reply = api.post(
                "/sandbox/faucet",
                json={"network": self.network, "currency": "USDC", "address": address, "amount": amount},
            )
            assert reply.status_code == 200, reply.text

    def head_time(self) -> int:
        """The timestamp of the chain's latest block."""
        return self.server.call(lambda p: self.chain.head_time())

    def balance(self, address: str, token: str | None = None) -> int:
        return self.server.call(lambda p: balance_of(self.chain.rpc, token or self.usdc, address))

    def deploy(
        self,
        *,
        amount_minor: str | None = "10000",
        pricing: str = "fixed",
        release: str = "included",
        fund: str = "100",
        resource_url: str = "http://testserver/weather",
    ) -> Deployment:
        merchant_id, key, key_id = self.merchant()
        payout = address_of(new_private_key())
        body: dict[str, Any] = {
            "name": "Weather",
            "resourceUrl": resource_url,
            "chainId": self.chain.chain_id,
            "currency": "USDC",
            "payoutAddress": payout,
            "pricingMode": pricing,
            "releasePolicy": release,
        }
        if amount_minor is not None:
            body["amountMinor"] = amount_minor
        with httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as api:
            reply = api.post("/agent/endpoints", json=body)
            assert reply.status_code == 201, reply.text
            endpoint = reply.json()["endpoint"]
        agent_key = new_private_key()
        agent = Wallet(agent_key)
        if fund:
            self.fund(key, agent.address, fund)
        return Deployment(self, merchant_id, key, key_id, endpoint, agent, agent_key, payout)


def platform_server(settings: PlatformSettings, clock: Clock | None = None) -> PlatformServer:
    """A platform server for ``settings`` whose every JSON answer is checked against the OpenAPI
    document (`tests.answers`)."""
    return PlatformServer(settings, middleware=answers.MIDDLEWARE, clock=clock)


@contextlib.contextmanager
def start_dev_platform(
    workdir: Path, database_url: str | None = None, *, run_worker: bool = True, clock: Clock | None = None
) -> Iterator[PlatformHarness]:
    """``clock``: the platform's (a `ManualClock` for a test that moves its time), else the wall clock."""
    settings = PlatformSettings(
        database_url=database_url or f"sqlite:///{workdir / 'platform.sqlite3'}",
        data_dir=workdir,
        run_worker=run_worker,
    )
    with platform_server(settings, clock) as server:
        yield PlatformHarness(server)


@contextlib.contextmanager
def start_anvil_platform(workdir: Path, database_url: str | None = None, **settings: Any) -> Iterator[PlatformHarness]:
    """The platform on a fresh anvil; ``settings``: more of its `PlatformSettings`."""
    import asyncio

    with AnvilProcess() as anvil:
        deployer, relayer = ANVIL_DEV_KEYS[0], ANVIL_DEV_KEYS[1]

        async def deploy() -> dict[str, str]:
            rpc = HttpJsonRpc(anvil.url)
            try:
                return await deploy_test_tokens(rpc, deployer)
            finally:
                await rpc.aclose()

        tokens = asyncio.run(deploy())
        platform_settings = PlatformSettings(
            database_url=database_url or f"sqlite:///{workdir / 'platform.sqlite3'}",
            data_dir=workdir,
            chains=[ChainSettings(rpc_url=anvil.url, tokens=tokens, minter_key=deployer.hex())],
            relayer_key=relayer.hex(),
            **settings,
        )
        with platform_server(platform_settings) as server:
            yield PlatformHarness(server)


class Serve:
    """``x402mw platform serve`` on the defaults in a data dir (and its SQLite database, or the one at
    ``database_url``), as a subprocess; its output goes to ``serve.log`` beside the data dir."""

    def __init__(self, data_dir: Path, database_url: str | None = None, **environment: str) -> None:
        self.data_dir = data_dir
        self.database_url = database_url
        self.environment = environment  # more X402MW_* settings
        self.port = free_port()
        self.log = data_dir.parent / "serve.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "x402mw", "platform", "serve", "--port", str(self.port)]

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("X402MW_DATABASE_URL", "X402MW_RPC_URL")}
        env["X402MW_DATA_DIR"] = str(self.data_dir)
        env.update(self.environment)
        if self.database_url is not None:
            env["X402MW_DATABASE_URL"] = self.database_url
        return env

    def start(self) -> None:
        if (self.database_url or "").startswith("postgresql"):  # serve refuses an unmigrated PostgreSQL
            migrate = [sys.executable, "-m", "x402mw", "platform", "migrate"]
            subprocess.run(migrate, env=self.env(), check=True, capture_output=True, timeout=120)
        with self.log.open("ab") as handle:
            self.process = subprocess.Popen(self.command(), env=self.env(), stdout=handle, stderr=subprocess.STDOUT)
        process, healthz = self.process, f"http://127.0.0.1:{self.port}/healthz"
        eventually(
            lambda: process.poll() is not None or httpx.get(healthz, timeout=1).status_code == 200,
            what=lambda: f"serve to answer {healthz}:\n{self.log.read_text()}",
            timeout=120,
        )
        assert process.poll() is None, self.log.read_text()

    def stop(self, how: signal.Signals = signal.SIGTERM) -> int:
        assert self.process is not None
        self.process.send_signal(how)
        code = self.process.wait(timeout=60)
        self.process = None
        return code

    def refusal(self) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.command(), env=self.env(), capture_output=True, text=True, timeout=120)

    def cli(self, *args: str) -> dict[str, Any]:
        """``x402mw platform ARGS --data-dir ... --json`` on this serve's settings, in this process
        (`tests.cli_runs`): its answer."""
        done = run_cli(["platform", *args, "--data-dir", str(self.data_dir), "--json"], self.env())
        assert done.returncode == 0, done.stderr + done.stdout
        return json.loads(done.stdout)  # type: ignore[no-any-return]


@contextlib.contextmanager
def serving(data_dir: Path, database_url: str | None = None, **environment: str) -> Iterator[Serve]:
    serve = Serve(data_dir, database_url, **environment)
    serve.start()
    try:
        yield serve
    finally:
        if serve.process is not None:
            serve.stop(signal.SIGKILL)
