"""The one interface through which the platform reaches a chain: async Ethereum JSON-RPC.

:class:`HttpJsonRpc` talks to a node over HTTP (anvil, a hosted endpoint); the in-process dev chain
(:class:`~x402mw.platform.chain.devchain.DevChainRpc`) implements the same protocol, so relaying,
token reads and receipt polling run one code path on every chain. Results are the node's raw JSON
values (quantities as ``0x`` hex strings).
"""

from __future__ import annotations

import base64
import itertools
import json
from typing import Any, Protocol
from urllib.parse import unquote

import httpx

from x402mw.transport import KeepAliveTransport


class RpcError(Exception):
    """A JSON-RPC error object returned by the node (``code``, ``message``, optional ``data``)."""

    def __init__(self, code: int, message: str, data: object | None = None) -> None:
        super().__init__(f"{message} (code {code})")
        self.code = code
        self.message = message
        self.data = data

    @classmethod
    def from_error(cls, error: Any) -> RpcError:
        if isinstance(error, dict):
            return cls(int(error.get("code", -32603)), str(error.get("message", "")), error.get("data"))
        return cls(-32603, str(error))


class JsonRpc(Protocol):
    """An async Ethereum JSON-RPC connection."""

    async def request(self, method: str, params: list[Any] | None = None) -> Any:
        """Call ``method`` and return its ``result``; raise :class:`RpcError` on an error response."""
        ...

    async def batch(self, calls: list[tuple[str, list[Any]]]) -> list[Any]:
        """Call several methods in one round trip; results come back in order of ``calls``, and the
        first error response raises :class:`RpcError`."""
        ...

    async def aclose(self) -> None: ...


_HEADERS = {"content-type": "application/json", "accept": "application/json"}


class HttpJsonRpc:
    """A lean JSON-RPC client over HTTP: requests go straight to a
    :class:`~x402mw.transport.KeepAliveTransport`, without an :class:`httpx.AsyncClient` around it
    (no cookies, auth or redirects to consider: that machinery cost as much CPU as the call itself).

    >>> rpc = HttpJsonRpc("http://127.0.0.1:8545")
    >>> chain_id = int(await rpc.request("eth_chainId"), 16)  # doctest: +SKIP
    """

    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        self.url = url
        self._ids = itertools.count(1)
        self._url = httpx.URL(url)
        if self._url.scheme not in ("http", "https") or not self._url.host:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self._timeout = httpx.Timeout(timeout).as_dict()
        self._headers = dict(_HEADERS)
        if self._url.userinfo:  # https://user:secret@node.example/ -> HTTP basic auth, as httpx would
            user, _, secret = self._url.userinfo.decode().partition(":")
            token = base64.b64encode(f"{unquote(user)}:{unquote(secret)}".encode()).decode()
            self._headers["authorization"] = f"Basic {token}"
            self._url = self._url.copy_with(userinfo=b"")
        self._transport = KeepAliveTransport(max_connections=64)

    def __repr__(self) -> str:
        return f"HttpJsonRpc({self.url!r})"

    async def request(self, method: str, params: list[Any] | None = None) -> Any:
        body = {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params or []}
        reply = await self._post(json.dumps(body, separators=(",", ":")))
        if not isinstance(reply, dict):
            raise RpcError(-32603, f"malformed JSON-RPC reply to {method}: {reply!r:.200}")
        if "error" in reply:
            raise RpcError.from_error(reply["error"])
        return reply.get("result")

    async def batch(self, calls: list[tuple[str, list[Any]]]) -> list[Any]:
        if not calls:
            return []
        ids = [next(self._ids) for _ in calls]
        body = [
            {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}
            for id_, (method, params) in zip(ids, calls, strict=True)
        ]
        replies = await self._post(json.dumps(body, separators=(",", ":")))
        if not isinstance(replies, list):
            if isinstance(replies, dict) and "error" in replies:
                raise RpcError.from_error(replies["error"])
            raise RpcError(-32603, f"malformed JSON-RPC batch reply: {replies!r:.200}")
        by_id = {reply.get("id"): reply for reply in replies if isinstance(reply, dict)}
        results = []
        for id_, (method, _) in zip(ids, calls, strict=True):
            reply = by_id.get(id_)
            if reply is None:
                raise RpcError(-32603, f"no reply to {method} in the batch")
            if "error" in reply:
                raise RpcError.from_error(reply["error"])
            results.append(reply.get("result"))
        return results

    async def aclose(self) -> None:
        await self._transport.aclose()

    async def _post(self, content: str) -> Any:
        request = httpx.Request(
            "POST", self._url, content=content.encode(), headers=self._headers, extensions={"timeout": self._timeout}
        )
        response = await self._transport.handle_async_request(request)
        response.request = request
        await response.aread()
        if response.status_code != 200 and not response.content:
            response.raise_for_status()
        try:
            return json.loads(response.content)
        except ValueError:
            response.raise_for_status()
            raise RpcError(-32700, f"the node answered HTTP {response.status_code} with non-JSON") from None
