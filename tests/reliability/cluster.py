"""A platform deployment made of real processes, for fault tests and the soak: anvil (its chain kept
in a state file across graceful restarts), a fresh PostgreSQL database, ``x402mw platform serve``
and ``x402mw platform worker`` subprocesses sharing one data dir, and the helpers a test needs to
set merchants up, pay, and look at the chain and the database.

Every process can be killed (SIGKILL, as a crash) and started again on the same port.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
from eth_account import Account

from tests.harness import postgres_database
from tests.rpc_proxy import RpcProxy
from tests.waiting import eventually
from x402mw.client import Wallet
from x402mw.evm.keys import address_of, new_private_key
from x402mw.platform.chain.admin import transact
from x402mw.platform.chain.anvil import ANVIL_DEV_KEYS, AnvilProcess, deploy_test_tokens
from x402mw.platform.chain.rpc import HttpJsonRpc
from x402mw.platform.chain.token import balance_of, mint
from x402mw.platform.server import free_port

MINTER = ANVIL_DEV_KEYS[0]
RELAYER_KEY = ANVIL_DEV_KEYS[1]  # funded by anvil's genesis
GAS_GIVER = ANVIL_DEV_KEYS[2]


@dataclass
class PlatformProcess:
    """One ``x402mw platform serve`` or ``worker`` process, restartable on the same port."""

    name: str
    command: list[str]
    env: dict[str, str]
    log: Path
    port: int | None = None
    popen: subprocess.Popen[bytes] | None = None
    metrics_port: int | None = None

    def metric(self, name: str, *, without: str | None = None) -> float:
        """The sum of metric ``name``'s samples (every label set, but those whose line holds
        ``without``) the process serves now."""
        assert self.metrics_port is not None, f"{self.name} serves no metrics"
        text = httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10).text
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(name) and line[len(name) : len(name) + 1] in ("{", " ")
            if without is None or without not in line
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *, wait: bool = True) -> None:
        with self.log.open("ab") as handle:
            handle.write(f"\n--- start {time.strftime('%H:%M:%S')} ---\n".encode())
            handle.flush()
            self.popen = subprocess.Popen(
                self.command, env=self.env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
            )
        if wait and self.port is not None:
            self.wait_until_up()

    def wait_until_up(self, timeout: float = 120.0) -> None:
        popen = self.popen
        assert popen is not None
        eventually(
            lambda: popen.poll() is not None or httpx.get(self.url + "/healthz", timeout=1).status_code == 200,
            what=lambda: f"{self.name} to answer:\n{self._stacks_and_tail()}",
            timeout=timeout,
        )
        assert popen.poll() is None, f"{self.name} exited:\n{self.tail()}"

    def _stacks_and_tail(self) -> str:
        """The log's tail after the process, still alive but silent, printed where each of its threads
        stands (SIGABRT to the faulthandler its environment turns on): what a hung start-up waits for."""
        if self.popen is not None and self.popen.poll() is None:
            os.kill(self.popen.pid, signal.SIGABRT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=10)
        return self.tail(200)

    def kill(self) -> None:
        """SIGKILL, as a crash: nothing is finished or written on the way out."""
        if self.popen is not None and self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=30)

    def stop(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class Merchant:
    cluster: Cluster
    merchant_id: str
    api_key: str

    def api(self, process: int = 0) -> httpx.Client:
        return httpx.Client(
            base_url=self.cluster.serves[process].url + "/v1",
            headers={"Authorization": f"Bearer {self.api_key}"},
            timeout=60,
        )

    def endpoint(self, payout: str, *, amount_minor: str = "10000", release: str = "included") -> str:
        body = {
            "name": "Weather",
            "resourceUrl": "http://seller.test/weather",
            "chainId": self.cluster.anvil.chain_id,
            "currency": "USDC",
            "payoutAddress": payout,
            "pricingMode": "fixed",
            "amountMinor": amount_minor,
            "releasePolicy": release,
        }
        with self.api() as api:
            reply = api.post("/agent/endpoints", json=body)
        assert reply.status_code == 201, reply.text
        return str(reply.json()["endpoint"]["id"])


@dataclass
class Cluster:
    workdir: Path
    serve_count: int = 1
    worker_count: int = 0
    takeover_seconds: float = 3.0
    anvil_args: list[str] = field(default_factory=list)
    rpc_max_pending: int | None = None  # the serves reach anvil through the busy-node proxy (tests.rpc_proxy)
    env: dict[str, str] = field(default_factory=dict)  # further settings of the platform processes
    metrics: bool = False  # each serve serves its metrics (PlatformProcess.metric)
    anvil: AnvilProcess = field(init=False)
    proxy: RpcProxy | None = field(init=False, default=None)
    database_url: str = field(init=False)
    tokens: dict[str, str] = field(init=False)
    serves: list[PlatformProcess] = field(init=False, default_factory=list)
    workers: list[PlatformProcess] = field(init=False, default_factory=list)
    _stack: contextlib.ExitStack = field(init=False, default_factory=contextlib.ExitStack)

    def __enter__(self) -> Cluster:
        try:
            self._start()
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _start(self) -> None:
        self.anvil = AnvilProcess(args=[*self.anvil_args, "--state", str(self.workdir / "anvil-state.json")])
        self.anvil.start()
        self._stack.callback(self.anvil.stop)
        node_url = self.anvil.url
        if self.rpc_max_pending is not None:
            self.proxy = self._stack.enter_context(RpcProxy(self.anvil.url, max_pending=self.rpc_max_pending))
            node_url = self.proxy.url
        self.database_url = self._stack.enter_context(postgres_database())
        self.tokens = self.run(lambda rpc: deploy_test_tokens(rpc, MINTER))
        env = dict(
            os.environ,
            X402MW_DATA_DIR=str(self.workdir),
            X402MW_DATABASE_URL=self.database_url,
            X402MW_TAKEOVER_SECONDS=str(self.takeover_seconds),
            X402MW_RELAYER_KEY=RELAYER_KEY.hex(),
            # Several processes share the server with the rest of the suite: a few connections each.
            X402MW_DATABASE_POOL_SIZE="5",
            X402MW_WEBHOOKS_ALLOW_PRIVATE="true",  # the tests' webhook receivers listen on loopback
            PYTHONFAULTHANDLER="1",  # a process that hangs can be asked where (PlatformProcess._stacks_and_tail)
            **self.env,
        )
        chain = [
            "--rpc-url",
            node_url,
            "--token",
            f"USDC={self.tokens['USDC']}",
            "--token",
            f"EURC={self.tokens['EURC']}",
        ]
        migrate = [sys.executable, "-m", "x402mw", "platform", "migrate"]  # a step of its own on PostgreSQL
        # the chain as the environment names it: settings such as a relayer pool are checked against it
        tokens = f"USDC={self.tokens['USDC']} EURC={self.tokens['EURC']}"
        on_chain = {**env, "X402MW_RPC_URL": node_url, "X402MW_TOKENS": tokens}
        done = subprocess.run(migrate, env=on_chain, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"x402mw platform migrate failed: {done.stderr.strip()}"
        for index in range(self.serve_count):
            port = free_port()
            command = [sys.executable, "-m", "x402mw", "platform", "serve", "--port", str(port), *chain]
            command += ["--log-level", "warning"]
            metrics_port = free_port() if self.metrics else None
            if metrics_port is not None:
                command += ["--metrics-port", str(metrics_port)]
            process = PlatformProcess(
                f"serve-{index}", command, env, self.workdir / f"serve-{index}.log", port, metrics_port=metrics_port
            )
            self.serves.append(process)
            self._stack.callback(process.stop)  # before it starts: one that never answers is stopped too
            process.start()  # the first makes the keys and the schema; the others find them
        for index in range(self.worker_count):
            command = [sys.executable, "-m", "x402mw", "platform", "worker", *chain]
            process = PlatformProcess(f"worker-{index}", command, env, self.workdir / f"worker-{index}.log")
            self.workers.append(process)
            self._stack.callback(process.stop)
            process.start()

    # -- the chain --------------------------------------------------------------------------------

    def run(self, action: Any) -> Any:
        """Run ``action(rpc)`` (a coroutine function) against the node."""

        async def call() -> Any:
            rpc = HttpJsonRpc(self.anvil.url)
            try:
                return await action(rpc)
            finally:
                await rpc.aclose()

        return asyncio.run(call())

    def rpc(self, method: str, *params: Any) -> Any:
        return self.run(lambda rpc: rpc.request(method, list(params)))

    @property
    def usdc(self) -> str:
        return self.tokens["USDC"]

    def balance(self, address: str) -> int:
        return int(self.run(lambda rpc: balance_of(rpc, self.usdc, address)))

    def mint(self, address: str, amount: int) -> None:
        self.run(lambda rpc: mint(rpc, MINTER, self.usdc, address, amount))

    def give_gas(self, address: str) -> None:
        self.run(lambda rpc: transact(rpc, GAS_GIVER, address, b"", gas=21_000, value=10**18))

    def pause_mining(self) -> None:
        """Transactions stay in the node's pool until `resume_mining`."""
        self.rpc("evm_setAutomine", False)
        self.rpc("evm_setIntervalMining", 0)

    def resume_mining(self) -> None:
        self.rpc("evm_setAutomine", True)

    def pool_size(self) -> int:
        status = self.rpc("txpool_status")
        return int(status["pending"], 16) + int(status["queued"], 16)

    def wait_for_pool(self, size: int, timeout: float = 60.0) -> None:
        eventually(
            self.pool_size, until=lambda held: held >= size, what=f"{size} transactions in the pool", timeout=timeout
        )

    def restart_node(self) -> None:
        """Stop the node and start it again: its mined chain is kept (the state file, checked by
        `AnvilProcess.restart`), its pool of pending transactions is lost."""
        self.anvil.restart()

    @property
    def relayer(self) -> str:
        return address_of(RELAYER_KEY)

    def relayer_nonces(self) -> tuple[int, int]:
        mined = int(self.rpc("eth_getTransactionCount", self.relayer, "latest"), 16)
        pending = int(self.rpc("eth_getTransactionCount", self.relayer, "pending"), 16)
        return mined, pending

    def transfers(self, **topics: str) -> list[dict[str, Any]]:
        """The token's ``Transfer`` logs, from the chain itself."""
        transfer = "0x" + "ddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"
        logs = self.rpc(
            "eth_getLogs", {"address": self.usdc, "fromBlock": "0x0", "toBlock": "latest", "topics": [transfer]}
        )
        return [
            {
                "from": "0x" + log["topics"][1][-40:],
                "to": "0x" + log["topics"][2][-40:],
                "value": int(log["data"], 16),
                "tx": log["transactionHash"],
            }
            for log in logs
            if not log.get("removed")
        ]

    # -- the platform -----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return self.serves[0].url

    def merchant(self, name: str = "Fault merchant") -> Merchant:
        from x402mw.platform.services.merchants import create_api_key, create_merchant

        async def make() -> tuple[str, str]:
            from x402mw.platform.db.engine import create_engine_for

            engine = create_engine_for(self.database_url)
            try:
                merchant = await create_merchant(engine, name)
                return merchant.id, (await create_api_key(engine, merchant.id))[1]
            finally:
                await engine.dispose()

        merchant_id, key = asyncio.run(make())
        return Merchant(self, merchant_id, key)

    def agent(self, usdc: int = 1_000_000) -> Wallet:
        key = new_private_key()
        if usdc:
            self.mint(address_of(key), usdc)
        return Wallet(key)

    def sql(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.database_url.replace("postgresql://", "postgresql://", 1), autocommit=True) as conn:
            cursor = conn.execute(query, params)
            return list(cursor.fetchall()) if cursor.description else []

    def drop_connections(self) -> int:
        """Terminate every server connection of the platform's database (as a failover or a
        restarted server would); how many."""
        name = self.database_url.rsplit("/", 1)[1].split("?")[0]
        rows = self.sql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            name,
        )
        return len(rows)

    def unfinished_payments(self) -> list[tuple[Any, ...]]:
        return self.sql("SELECT id, status, transaction FROM agent_payments WHERE status IN ('claimed', 'submitted')")


def new_address() -> str:
    return str(Account.create().address)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@contextlib.contextmanager
def threads_joined(threads: list[Any], timeout: float = 240.0) -> Iterator[None]:
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
