"""HttpJsonRpc (x402mw.platform.chain.rpc) against a hand-written HTTP node on loopback.

The node answers what each test scripts, so that the client's handling of odd answers (HTTP
errors, non-JSON, error objects, batches answered out of order) and of basic auth in the URL is
checked on real sockets. The client against a real node (anvil) is in tests/integration/test_chain.py.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import httpx
import pytest

from x402mw.platform.chain.rpc import HttpJsonRpc, RpcError

pytestmark = pytest.mark.anyio

Answer = Callable[[dict[str, str], bytes], tuple[int, bytes]]


@asynccontextmanager
async def node(answer: Answer) -> AsyncIterator[tuple[str, list[dict[str, str]]]]:
    """A node on a free port: each request's headers go to the list, ``answer`` gives status and body."""
    seen: list[dict[str, str]] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head[:-4].decode("latin-1").split("\r\n")[1:]
                headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
                seen.append(headers)
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                status, content = answer(headers, body)
                writer.write(
                    b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                    % (status, len(content), content)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/rpc", seen
    finally:
        server.close()


def echo_results(_headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
    """Answer every call with its own method name, a batch in reverse order (ids must match them up)."""
    calls = json.loads(body)
    if isinstance(calls, dict):
        return 200, json.dumps({"jsonrpc": "2.0", "id": calls["id"], "result": calls["method"]}).encode()
    replies = [{"jsonrpc": "2.0", "id": call["id"], "result": call["method"]} for call in calls]
    return 200, json.dumps(replies[::-1]).encode()


async def test_requests_and_batches_are_matched_by_id() -> None:
    async with node(echo_results) as (url, seen):
        rpc = HttpJsonRpc(url)
        try:
            assert await rpc.request("eth_chainId") == "eth_chainId"
            assert await rpc.batch([("eth_call", []), ("eth_gasPrice", []), ("eth_blockNumber", [])]) == [
                "eth_call",
                "eth_gasPrice",
                "eth_blockNumber",
            ]
            assert await rpc.batch([]) == []
        finally:
            await rpc.aclose()
    assert len(seen) == 2  # both over one kept-alive connection, the empty batch not sent at all
    assert seen[0]["content-type"] == "application/json"
    assert "authorization" not in seen[0]


async def test_an_error_object_raises_rpc_error_with_its_code_and_data() -> None:
    def revert(_headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
        call = json.loads(body)
        error = {"code": 3, "message": "execution reverted", "data": "0x08c379a0"}
        return 200, json.dumps({"jsonrpc": "2.0", "id": call["id"], "error": error}).encode()

    async with node(revert) as (url, _):
        rpc = HttpJsonRpc(url)
        try:
            with pytest.raises(RpcError) as raised:
                await rpc.request("eth_call", [{}])
        finally:
            await rpc.aclose()
    assert (raised.value.code, raised.value.message, raised.value.data) == (3, "execution reverted", "0x08c379a0")


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        pytest.param(503, b"", httpx.HTTPStatusError, id="http-error-without-a-body"),
        pytest.param(502, b"<html>bad gateway</html>", httpx.HTTPStatusError, id="http-error-with-html"),
        pytest.param(200, b"not json", RpcError, id="non-json"),
        pytest.param(200, b"[1, 2]", RpcError, id="a-list-for-a-single-call"),
    ],
)
async def test_unusable_answers_raise_clear_errors(status: int, body: bytes, error: type[Exception]) -> None:
    async with node(lambda _h, _b: (status, body)) as (url, _):
        rpc = HttpJsonRpc(url)
        try:
            with pytest.raises(error):
                await rpc.request("eth_chainId")
        finally:
            await rpc.aclose()


async def test_a_batch_reply_missing_a_call_raises() -> None:
    def drop_one(_headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
        calls = json.loads(body)
        return 200, json.dumps([{"jsonrpc": "2.0", "id": calls[0]["id"], "result": "0x1"}]).encode()

    async with node(drop_one) as (url, _):
        rpc = HttpJsonRpc(url)
        try:
            with pytest.raises(RpcError, match="no reply to eth_gasPrice"):
                await rpc.batch([("eth_chainId", []), ("eth_gasPrice", [])])
        finally:
            await rpc.aclose()


async def test_credentials_in_the_url_become_basic_auth() -> None:
    async with node(echo_results) as (url, seen):
        rpc = HttpJsonRpc(url.replace("http://", "http://alice:s%40cret@"))
        try:
            assert await rpc.request("eth_chainId") == "eth_chainId"
        finally:
            await rpc.aclose()
    assert seen[0]["authorization"] == "Basic " + base64.b64encode(b"alice:s@cret").decode()


@pytest.mark.parametrize("url", ["ws://127.0.0.1:8546", "127.0.0.1:8545", "http://"])
def test_a_url_that_is_not_http_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match="not an http"):
        HttpJsonRpc(url)


async def test_a_node_that_is_down_raises_a_transport_error() -> None:
    rpc = HttpJsonRpc("http://127.0.0.1:1/")
    try:
        with pytest.raises(httpx.ConnectError):
            await rpc.request("eth_chainId")
    finally:
        await rpc.aclose()
