"""A node that behaves like a busy real one: a JSON-RPC proxy in front of anvil that refuses a
sender's transactions beyond a number it may have pending, as a full geth pool or a provider's
per-sender limit does, and passes everything else through.

anvil takes any number of transactions from one sender; geth guarantees a sender only a few
executable slots (16 by default) and, when its pool is full, refuses a busy sender's next one with
``txpool is full``; hosted providers limit what one sender may have in flight alike. The proxy
counts a transaction's place past the sender's mined nonce (``nonce - eth_getTransactionCount
latest``) and refuses it from ``max_pending`` on, with geth's error (code -32000).

It runs as a process of its own (``python -m tests.rpc_proxy --upstream URL --port N``) so that a
test can kill it and start it again on the same port, as a provider that goes away and returns:

>>> with RpcProxy(anvil.url, max_pending=16) as proxy:  # doctest: +SKIP
...     rpc = HttpJsonRpc(proxy.url)
...     proxy.kill(); proxy.start()
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

import httpx
import rlp
from eth_account import Account
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.waiting import eventually
from x402mw.platform.server import free_port
from x402mw.transport import KeepAliveTransport

POOL_FULL = {"code": -32000, "message": "txpool is full"}  # geth's ErrTxPoolOverflow


def sender_and_nonce(raw: str) -> tuple[str, int]:
    """The sender and nonce of a signed transaction (legacy or typed), as ``0x`` hex."""
    data = bytes.fromhex(raw[2:] if raw.startswith("0x") else raw)
    fields = rlp.decode(data[1:]) if data[0] < 0x7F else rlp.decode(data)
    nonce_field = fields[1] if data[0] < 0x7F else fields[0]
    return Account.recover_transaction(data), int.from_bytes(nonce_field, "big")


class PendingLimit:
    """Answers JSON-RPC bodies: a signed transaction past its sender's limit gets `POOL_FULL`, every
    other call goes to ``upstream`` as it came (a batch stays one batch)."""

    def __init__(self, upstream: str, max_pending: int) -> None:
        self.upstream = upstream
        self.max_pending = max_pending
        self.refused = 0
        self._client = httpx.AsyncClient(timeout=30, transport=KeepAliveTransport())

    async def answer(self, body: Any) -> Any:
        calls = body if isinstance(body, list) else [body]
        refusals = await self._refusals(calls)
        passed = [call for call in calls if id(call) not in refusals]
        replies: list[Any] = []
        if passed:
            reply = await self._forward(passed if isinstance(body, list) else passed[0])
            replies = reply if isinstance(reply, list) else [reply]
        refused = [{"jsonrpc": "2.0", "id": call.get("id"), "error": POOL_FULL} for call in refusals.values()]
        if not isinstance(body, list):
            return (refused or replies)[0]
        by_id = {id(call): reply for call, reply in zip(passed, replies, strict=False)}
        ordered = []
        for call in calls:
            ordered.append(refused.pop(0) if id(call) in refusals else by_id.get(id(call)))
        return ordered

    async def _refusals(self, calls: list[Any]) -> dict[int, Any]:
        sends = []
        for call in calls:
            if isinstance(call, dict) and call.get("method") == "eth_sendRawTransaction" and call.get("params"):
                try:
                    sends.append((call, *sender_and_nonce(str(call["params"][0]))))
                except Exception:  # not a transaction: the node says what is wrong with it
                    continue
        if not sends:
            return {}
        senders = sorted({sender for _, sender, _ in sends})
        counts = [
            {"jsonrpc": "2.0", "id": n, "method": "eth_getTransactionCount", "params": [sender, "latest"]}
            for n, sender in enumerate(senders)
        ]
        replies = await self._forward(counts)
        mined = {senders[reply["id"]]: int(reply["result"], 16) for reply in replies if "result" in reply}
        refusals = {}
        for call, sender, nonce in sends:
            if sender in mined and nonce - mined[sender] >= self.max_pending:
                refusals[id(call)] = call
                self.refused += 1
        return refusals

    async def _forward(self, body: Any) -> Any:
        reply = await self._client.post(self.upstream, json=body)
        return reply.json()

    async def forward_raw(self, content: bytes) -> bytes:
        """``content`` to the node as it is, and its answer as it is (nothing to count in it)."""
        reply = await self._client.post(self.upstream, content=content, headers={"content-type": "application/json"})
        return reply.content

    async def aclose(self) -> None:
        await self._client.aclose()


def app(upstream: str, max_pending: int) -> Starlette:
    limit = PendingLimit(upstream, max_pending)

    async def rpc(request: Request) -> Response:
        raw = await request.body()
        if b"eth_sendRawTransaction" not in raw:  # nothing to count: passed through untouched
            try:
                return Response(await limit.forward_raw(raw), media_type="application/json")
            except httpx.TransportError as exc:
                return Response(f"upstream unreachable: {exc}", status_code=502)
        try:
            body = json.loads(raw)
        except ValueError:
            error = {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "parse error"}}
            return Response(json.dumps(error), media_type="application/json")
        try:
            answer = await limit.answer(body)
        except httpx.TransportError as exc:
            return Response(f"upstream unreachable: {exc}", status_code=502)
        return Response(json.dumps(answer), media_type="application/json")

    async def refused(request: Request) -> Response:
        return Response(str(limit.refused))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await limit.aclose()

    return Starlette(routes=[Route("/", rpc, methods=["POST"]), Route("/refused", refused)], lifespan=lifespan)


class RpcProxy:
    """The proxy as a process on 127.0.0.1 (a free port, kept across restarts); a context manager."""

    def __init__(self, upstream: str, *, max_pending: int = 16) -> None:
        self.upstream = upstream
        self.max_pending = max_pending
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [sys.executable, "-m", "tests.rpc_proxy", "--upstream", self.upstream, "--port", str(self.port)]
        command += ["--max-pending", str(self.max_pending)]
        self._process = subprocess.Popen(command, stdin=subprocess.DEVNULL, start_new_session=True)
        process = self._process
        eventually(
            lambda: process.poll() is not None or httpx.get(self.url + "/refused", timeout=1),
            what=f"the RPC proxy to answer at {self.url}",
        )
        assert process.poll() is None, "the RPC proxy exited during start-up"

    @property
    def pid(self) -> int | None:
        """The proxy's process id while it runs."""
        return self._process.pid if self._process is not None else None

    def kill(self) -> None:
        """SIGKILL, as a provider that goes away: connections are refused until `start`."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)

    def refused(self) -> int:
        """Transactions refused since the proxy (last) started."""
        return int(httpx.get(self.url + "/refused", timeout=5).text)

    def __enter__(self) -> RpcProxy:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.kill()


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--max-pending", type=int, default=16)
    args = parser.parse_args()
    uvicorn.run(
        app(args.upstream, args.max_pending),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        loop="uvloop",
        http="httptools",
    )


if __name__ == "__main__":
    main()
