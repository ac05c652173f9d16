"""The stack `bench_e2e`, `bench_metered` and `bench_channels` drive: anvil (a block every 50 ms by default), the
platform (``x402mw platform serve``) on SQLite or a fresh PostgreSQL database, Starlette sellers
from ``examples/`` under uvicorn, and agents (``httpx.AsyncClient`` with `X402Auth`) paying for a
time. ``with Stack(database) as stack:`` starts the chain and the database, `Stack.start_platform`,
`Stack.add_endpoint` and `Stack.start_seller` the rest; every process is stopped on the way out.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import httpx

from x402mw.client import ChannelPolicy, Wallet, X402Auth
from x402mw.evm.keys import address_of, new_private_key
from x402mw.platform.chain.anvil import ANVIL_DEV_KEYS, AnvilProcess
from x402mw.platform.chain.rpc import HttpJsonRpc
from x402mw.platform.server import free_port

__all__ = ["ANVIL_ARGS", "ROOT", "Stack", "agent_clients", "cpu_seconds", "paying"]

ROOT = Path(__file__).resolve().parent.parent
# anvil's automine slows down as its blocks grow in number: see bench_e2e's docstring
ANVIL_ARGS = os.environ.get("X402MW_BENCH_ANVIL_ARGS", "--block-time 0.05").split()
T = TypeVar("T")


def cpu_seconds(pid: int | None) -> float:
    """User plus system CPU seconds a process has used so far (Linux ``/proc``); 0 when unknown."""
    if pid is None:
        return 0.0
    if pid == os.getpid():
        times = os.times()
        return times.user + times.system
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def paying(
    clients: list[httpx.AsyncClient], method: str, url: str, body: bytes | None, seconds: float
) -> list[float]:
    """Every client pays for ``url`` one request after another for ``seconds``: the latencies."""
    latencies: list[float] = []
    stop = time.monotonic() + seconds

    async def agent(client: httpx.AsyncClient) -> None:
        while time.monotonic() < stop:
            started = time.perf_counter()
            response = await client.request(method, url, content=body)
            if response.status_code != 200:
                raise RuntimeError(f"paid request failed: {response.status_code} {response.text[:200]}")
            latencies.append(time.perf_counter() - started)

    await asyncio.gather(*[agent(client) for client in clients])
    return latencies


@contextlib.asynccontextmanager
async def agent_clients(
    wallets: list[Wallet], max_amount: str, channels: ChannelPolicy | None = None
) -> AsyncIterator[list[httpx.AsyncClient]]:
    """One paying client per wallet, made once (an ``AsyncClient`` loads the CA bundle: ~30 ms of
    CPU) and kept through the warm-up and the measured windows; paying by channel under ``channels``."""
    async with contextlib.AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(
                httpx.AsyncClient(auth=X402Auth(wallet, max_amount=max_amount, channels=channels), timeout=60)
            )
            for wallet in wallets
        ]


class Stack:
    """One run's chain, database and processes (see the module docstring). ``database`` is
    ``sqlite`` (a file in a temporary directory) or ``postgresql`` (a fresh database on
    ``X402MW_TEST_POSTGRES_URL``, default the local server)."""

    def __init__(self, database: str, prefix: str = "x402mw-bench-") -> None:
        self.database = database
        self.workdir = Path(tempfile.mkdtemp(prefix=prefix))
        self.deployer = ANVIL_DEV_KEYS[0]
        self.payout = address_of(new_private_key())
        self.procs: list[subprocess.Popen[bytes]] = []
        self.env: dict[str, str] = {}
        self.api_key = ""
        self.platform_url = ""
        self._exit = contextlib.ExitStack()

    def __enter__(self) -> Stack:
        with self._exit as stack:
            self.anvil = stack.enter_context(AnvilProcess(args=ANVIL_ARGS))
            self.database_url = stack.enter_context(_database(self.database, self.workdir))
            self._exit = stack.pop_all()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        try:
            for proc in self.procs:
                proc.terminate()
                proc.wait(timeout=10)
        finally:
            self._exit.close()

    def on_chain(self, work: Callable[[HttpJsonRpc], Awaitable[T]]) -> T:
        """Run ``work`` with a JSON-RPC client of the chain (deploying, funding)."""

        async def run() -> T:
            rpc = HttpJsonRpc(self.anvil.url)
            try:
                return await work(rpc)
            finally:
                await rpc.aclose()

        return asyncio.run(run())

    def start_platform(self, usdc: str) -> int | None:
        """A merchant, its API key and ``x402mw platform serve`` with the test USDC; its pid."""
        self.env = dict(
            os.environ,
            X402MW_DATA_DIR=str(self.workdir),
            X402MW_DATABASE_URL=self.database_url,
            X402MW_RELAYER_KEY=ANVIL_DEV_KEYS[1].hex(),
            ETH_HASH_BACKEND="pysha3",
        )
        merchant_id = self._cli("platform", "merchants", "create", "--name", "bench", "--json")["id"]
        self.api_key = self._cli("platform", "keys", "create", "--merchant", merchant_id, "--json")["key"]
        port = free_port()
        serve = ["platform", "serve", "--port", str(port), "--rpc-url", self.anvil.url, "--token", f"USDC={usdc}"]
        log = self.workdir / "platform.log"
        proc = self._spawn([sys.executable, "-m", "x402mw", *serve, "--log-level", "warning"], self.env, log)
        self.platform_url = f"http://127.0.0.1:{port}/v1"
        _wait_http(f"http://127.0.0.1:{port}/healthz", log)
        return proc.pid

    def add_endpoint(self, name: str, path: str, pricing: dict[str, Any]) -> str:
        """An agent endpoint of the merchant for ``path``, paid in USDC on the dev chain (``pricing``: more
        of its fields, a ``channel`` object among them): its id."""
        reply = httpx.post(
            f"{self.platform_url}/agent/endpoints",
            headers={"Authorization": f"Bearer {self.api_key}"},
            json={
                "name": name,
                "resourceUrl": f"http://127.0.0.1{path}",
                "chainId": 31337,
                "currency": "USDC",
                "payoutAddress": self.payout,
                **pricing,
            },
        )
        reply.raise_for_status()
        return str(reply.json()["endpoint"]["id"])

    def start_seller(self, module: str, endpoint_id: str, log_name: str) -> tuple[str, int | None]:
        """``examples/<module>.py``'s ``app`` under uvicorn, selling ``endpoint_id``: its origin and pid."""
        port = free_port()
        env = dict(
            self.env, X402MW_API_KEY=self.api_key, X402MW_PLATFORM_URL=self.platform_url, X402MW_ENDPOINT_ID=endpoint_id
        )
        log = self.workdir / log_name
        uvicorn = ["--app-dir", str(ROOT / "examples"), f"{module}:app", "--port", str(port)]
        args = [sys.executable, "-m", "uvicorn", *uvicorn, "--log-level", "warning", "--no-access-log"]
        proc = self._spawn(args, env, log)
        _wait_http(f"http://127.0.0.1:{port}/health", log)
        return f"http://127.0.0.1:{port}", proc.pid

    def _spawn(self, args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
        handle = log.open("wb")
        proc = subprocess.Popen(args, env=env, stdout=handle, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def _cli(self, *args: str) -> Any:
        return json.loads(
            subprocess.run(
                [sys.executable, "-m", "x402mw", *args], env=self.env, check=True, capture_output=True, text=True
            ).stdout
        )


def _wait_http(url: str, log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up; its log ends:\n{log.read_text()[-3000:]}")


@contextlib.contextmanager
def _database(kind: str, workdir: Path) -> Iterator[str]:
    if kind == "sqlite":
        yield f"sqlite:///{workdir / 'platform.sqlite3'}"
        return
    import psycopg
    from sqlalchemy.engine import make_url

    server = os.environ.get("X402MW_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    name = f"x402mw_bench_{os.getpid()}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(server).set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
