"""Run a local anvil node for tests, benchmarks and local platforms.

>>> with AnvilProcess() as anvil:  # doctest: +SKIP
...     rpc = HttpJsonRpc(anvil.url)
...     tokens = await deploy_test_tokens(rpc, ANVIL_DEV_KEYS[0])

The binary comes from ``$X402MW_ANVIL`` or the npm package the Makefile installs into ``.tools/``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import anyio
import httpx

from x402mw.platform.chain.contracts import place_canonical_contracts
from x402mw.platform.chain.rpc import JsonRpc
from x402mw.platform.chain.token import deploy_token

# The first accounts of anvil's default mnemonic ("test test ... junk"), each funded with 10,000 ETH.
ANVIL_DEV_KEYS: tuple[bytes, ...] = tuple(
    bytes.fromhex(key)
    for key in (
        "ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
        "59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
        "5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
        "7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6",
    )
)

_RELATIVE_BINARY = Path(".tools/node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil")


def find_anvil() -> Path:
    """The anvil binary: ``$X402MW_ANVIL``, else ``.tools/…/anvil`` under the working directory or
    the source checkout. Raise :class:`FileNotFoundError` naming the places looked at."""
    candidates = []
    if env := os.environ.get("X402MW_ANVIL"):
        candidates.append(Path(env))
    candidates.append(Path.cwd() / _RELATIVE_BINARY)
    candidates.append(Path(__file__).resolve().parents[3] / _RELATIVE_BINARY)
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    looked = ", ".join(str(c) for c in candidates)
    raise FileNotFoundError(f"anvil not found (looked at {looked}); run `make test` or set X402MW_ANVIL")


class AnvilProcess:
    """An anvil node on 127.0.0.1 and a free port, killed on exit; a sync and async context manager.

    ``args`` are extra command-line options (``["--block-time", "1"]``).
    """

    def __init__(self, *, args: Sequence[str] = (), startup_timeout: float = 15.0) -> None:
        self._binary = find_anvil()
        self._args = list(args)
        self._startup_timeout = startup_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.url = ""
        self.chain_id = 0

    def __repr__(self) -> str:
        return f"AnvilProcess(url={self.url!r})"

    @property
    def pid(self) -> int | None:
        """The node's process id while it runs."""
        return self._process.pid if self._process is not None else None

    def start(self) -> None:
        self.port = self.port or _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [str(self._binary), "--host", "127.0.0.1", "--port", str(self.port), "--silent", *self._args]
        self._process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        try:
            self.chain_id = self._wait_until_ready()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def restart(self, *, kill: bool = False) -> None:
        """Stop the node and start it again on the same port: what it kept is what its options
        keep (with ``--state FILE`` the mined chain, never the pool of pending transactions).
        ``kill`` stops it with SIGKILL, as a crash would (nothing is written on the way out).

        anvil writes its state file as it stops, and that write does not wait for a block being
        mined: the block can reach the file's state but not its history (a soak once came back with
        a transfer spent in the state and no block, receipt or log of it). So a node that keeps its
        chain is stopped only once no block has come for a moment, and must come back with the
        last block it had; `RuntimeError` if it does not."""
        keeps_chain = not kill and any(arg in ("--state", "--dump-state") for arg in self._args)
        head = self._quiet_head() if keeps_chain else None
        process = self._process
        if kill and process is not None:
            process.kill()
            process.wait()
            self._process = None
        self.stop()
        self.start()
        if head is not None and self._block(head["number"]) != head:
            raise RuntimeError(f"anvil came back without block {int(head['number'], 16)} it had mined")

    def _block(self, number: str) -> dict[str, str] | None:
        """Block ``number`` (``"latest"`` or hex), as its number and hash."""
        body = {"jsonrpc": "2.0", "id": 1, "method": "eth_getBlockByNumber", "params": [number, False]}
        block = httpx.post(self.url, json=body, timeout=10).json()["result"]
        return None if block is None else {"number": block["number"], "hash": block["hash"]}

    def _quiet_head(self, quiet: float = 0.3, timeout: float = 5.0) -> dict[str, str] | None:
        """The head block once no new one has come for ``quiet`` seconds (or ``timeout`` passed)."""
        deadline = time.monotonic() + timeout
        head = self._block("latest")
        while time.monotonic() < deadline:
            time.sleep(quiet)
            now = self._block("latest")
            if now == head:
                break
            head = now
        return head

    def __enter__(self) -> AnvilProcess:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> AnvilProcess:
        await anyio.to_thread.run_sync(self.start)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await anyio.to_thread.run_sync(self.stop)

    def _wait_until_ready(self) -> int:
        assert self._process is not None
        deadline = time.monotonic() + self._startup_timeout
        body = {"jsonrpc": "2.0", "id": 1, "method": "eth_chainId", "params": []}
        with httpx.Client(timeout=1.0) as client:
            while True:
                if self._process.poll() is not None:
                    raise RuntimeError(f"anvil exited with status {self._process.returncode} during start-up")
                with contextlib.suppress(httpx.HTTPError):
                    reply = client.post(self.url, json=body).json()
                    return int(reply["result"], 16)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"anvil did not answer at {self.url} within {self._startup_timeout} s")
                time.sleep(0.02)


async def deploy_test_tokens(rpc: JsonRpc, deployer_key: bytes) -> dict[str, str]:
    """Deploy our EIP-3009 token as USDC ("USD Coin") and EURC ("EURC"), version "2", 6 decimals;
    ``deployer_key`` becomes their minter. Return ``{"USDC": address, "EURC": address}``.

    Also puts our Permit2, the x402 Permit2 proxies and the batch-settlement and auth-capture escrows
    with their collectors at their canonical addresses (``anvil_setCode``,
    :func:`~x402mw.platform.chain.contracts.place_canonical_contracts`)."""
    await place_canonical_contracts(rpc)
    return {
        "USDC": await deploy_token(rpc, deployer_key, name="USD Coin", symbol="USDC"),
        "EURC": await deploy_token(rpc, deployer_key, name="EURC", symbol="EURC"),
    }


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
