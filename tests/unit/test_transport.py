"""KeepAliveTransport (x402mw.transport) against real servers on loopback.

Most tests talk to a small hand-written HTTP/1.1 server (``asyncio.start_server``), so that each test
chooses the exact bytes, delays and connection closes it answers with; one talks to uvicorn. Covered:
connection reuse, servers closing kept-alive connections (and the retry on a fresh connection),
response framing (Content-Length, chunked, until EOF, statuses without a body, HEAD, 1xx), content
decoding, request encoding, the mapping of failures to httpx exceptions, the connection limit and
pool timeout, cancellation, ``aclose``, connections left over from another event loop, and TLS.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import gzip
import ipaddress
import json
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import uvicorn
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.waiting import eventually_async
from x402mw.transport import KeepAliveTransport

pytestmark = pytest.mark.anyio

# -- a scriptable HTTP/1.1 server ----------------------------------------------------------------


@dataclass
class Received:
    """A request as the server read it off the wire."""

    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes
    peer: int  # the index of the connection it arrived on (0 for the first one the server accepted)

    def header(self, name: str) -> str | None:
        return next((value for key, value in self.headers if key.lower() == name.lower()), None)


class Peer:
    """One connection the server accepted."""

    def __init__(self, server: Server, index: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.server = server
        self.index = index
        self.reader = reader
        self.writer = writer
        self.requests = 0
        self.closed = asyncio.Event()  # set once the server has closed its end

    async def receive(self) -> Received | None:
        """The next request on this connection, de-chunked; None once the client closed it."""
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        request_line, *lines = head[:-4].decode("latin-1").split("\r\n")
        method, target, version = request_line.split(" ")
        assert version == "HTTP/1.1"
        headers = [(name, value.strip()) for name, _, value in (line.partition(":") for line in lines)]
        fields = {name.lower(): value for name, value in headers}
        if fields.get("transfer-encoding") == "chunked":
            body = b""
            while size := int(await self.reader.readuntil(b"\r\n"), 16):
                chunk = await self.reader.readexactly(size + 2)
                assert chunk.endswith(b"\r\n")
                body += chunk[:-2]
            assert await self.reader.readuntil(b"\r\n") == b"\r\n"
        else:
            body = await self.reader.readexactly(int(fields.get("content-length", "0")))
        self.requests += 1
        received = Received(method, target, headers, body, self.index)
        self.server.received.append(received)
        return received

    async def send(self, data: bytes) -> None:
        with contextlib.suppress(ConnectionError):  # the client may have given up on this connection
            self.writer.write(data)
            await self.writer.drain()


Handler = Callable[[Peer], Awaitable[None]]


class Server:
    """``asyncio.start_server`` on 127.0.0.1 running ``handler`` once per accepted connection.

    It records the connections (``peers``), every request read (``received``) and the most
    connections open at once (``max_open``); leaving it re-raises the first error of a handler."""

    def __init__(self, handler: Handler, *, tls: ssl.SSLContext | None = None) -> None:
        self._handler = handler
        self._tls = tls
        self.peers: list[Peer] = []
        self.received: list[Received] = []
        self.open = 0
        self.max_open = 0
        self.port = 0
        self._errors: list[Exception] = []
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def url(self) -> str:
        return f"{'https' if self._tls else 'http'}://127.0.0.1:{self.port}"

    async def __aenter__(self) -> Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self._tls)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()
        if self._errors:
            raise self._errors[0]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        peer = Peer(self, len(self.peers), reader, writer)
        self.peers.append(peer)
        self.open += 1
        self.max_open = max(self.max_open, self.open)
        try:
            await self._handler(peer)
        except asyncio.CancelledError:
            pass  # the server shuts down (ending quietly: asyncio's streams log a cancelled handler task)
        except Exception as exc:
            self._errors.append(exc)
        finally:
            self.open -= 1
            writer.close()
            peer.closed.set()


def response(status: int = 200, body: bytes = b"", *headers: str, reason: str = "OK") -> bytes:
    """An HTTP/1.1 response with a Content-Length."""
    head = "\r\n".join([f"HTTP/1.1 {status} {reason}", f"Content-Length: {len(body)}", *headers])
    return head.encode("latin-1") + b"\r\n\r\n" + body


def echo(request: Received) -> bytes:
    """A JSON answer naming the connection the request came on and what was asked for."""
    document = {"peer": request.peer, "method": request.method, "target": request.target}
    return response(200, json.dumps(document).encode(), "Content-Type: application/json")


def routes(answers: dict[str, bytes], *, then_close: Collection[str] = ()) -> Handler:
    """Answers a request for a target in ``answers`` with exactly those bytes (closing the connection
    after those in ``then_close``) and any other request with :func:`echo`."""

    async def handler(peer: Peer) -> None:
        while (request := await peer.receive()) is not None:
            await peer.send(answers.get(request.target, echo(request)))
            if request.target in then_close:
                return

    return handler


def client(server: Server, transport: KeepAliveTransport, timeout: httpx.Timeout | float = 5) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=server.url, transport=transport, timeout=timeout)


def idle(transport: KeepAliveTransport) -> int:
    return sum(len(stack) for stack in transport._idle.values())


# -- keep-alive ----------------------------------------------------------------------------------


async def test_sequential_requests_share_one_connection() -> None:
    transport = KeepAliveTransport()
    async with Server(routes({})) as server, client(server, transport) as http:
        for i in range(5):
            answer = await http.get(f"/n/{i}")
            assert answer.json() == {"peer": 0, "method": "GET", "target": f"/n/{i}"}
        assert len(server.peers) == 1
        assert (transport._open, idle(transport)) == (1, 1)


async def test_concurrent_requests_open_several_connections_then_reuse_them() -> None:
    together = asyncio.Barrier(4)  # nobody is answered before all four requests have arrived

    async def handler(peer: Peer) -> None:
        while (request := await peer.receive()) is not None:
            await together.wait()
            await peer.send(echo(request))

    transport = KeepAliveTransport()
    async with Server(handler) as server, client(server, transport) as http:
        first = await asyncio.gather(*(http.get("/first") for _ in range(4)))
        assert sorted(answer.json()["peer"] for answer in first) == [0, 1, 2, 3]
        assert (transport._open, idle(transport)) == (4, 4)

        second = await asyncio.gather(*(http.get("/second") for _ in range(4)))
        assert sorted(answer.json()["peer"] for answer in second) == [0, 1, 2, 3]
        assert len(server.peers) == 4
        assert [peer.requests for peer in server.peers] == [2, 2, 2, 2]


async def test_idle_connections_past_max_idle_are_closed() -> None:
    together = asyncio.Barrier(3)

    async def handler(peer: Peer) -> None:
        while (request := await peer.receive()) is not None:
            await together.wait()
            await peer.send(echo(request))

    transport = KeepAliveTransport(max_idle=1)
    async with Server(handler) as server, client(server, transport) as http:
        await asyncio.gather(*(http.get("/") for _ in range(3)))
        assert (transport._open, idle(transport)) == (1, 1)
        await eventually_async(
            lambda: sum(peer.closed.is_set() for peer in server.peers),
            until=lambda n: n == 2,
            what="both connections closed",
        )


# -- servers that close kept-alive connections --------------------------------------------------


async def test_an_idle_connection_the_server_closed_is_dropped() -> None:
    transport = KeepAliveTransport()
    async with Server(routes({}, then_close={"/first"})) as server, client(server, transport) as http:
        assert (await http.get("/first")).json()["peer"] == 0
        await server.peers[0].closed.wait()
        # Let the client's end see the EOF, so that the request below takes the "dropped while idle" path.
        await eventually_async(
            lambda: all(conn.reader.at_eof() for conn in transport._idle[b"http", b"127.0.0.1", server.port]),
            what="the idle connections to see EOF",
        )

        assert (await http.get("/second")).json() == {"peer": 1, "method": "GET", "target": "/second"}
        assert [(request.target, request.peer) for request in server.received] == [("/first", 0), ("/second", 1)]
        assert (transport._open, idle(transport)) == (1, 1)


async def test_a_reused_connection_closed_before_the_answer_is_retried_on_a_fresh_one() -> None:
    async def handler(peer: Peer) -> None:
        while (request := await peer.receive()) is not None:
            if peer.index == 0 and peer.requests == 2:
                return  # read the second request, then close without answering
            await peer.send(echo(request))

    transport = KeepAliveTransport()
    async with Server(handler) as server, client(server, transport) as http:
        assert (await http.get("/first")).json()["peer"] == 0
        answer = await http.post("/second", json={"n": 2})
        assert answer.json() == {"peer": 1, "method": "POST", "target": "/second"}
        assert [(request.target, request.peer) for request in server.received] == [
            ("/first", 0),
            ("/second", 0),
            ("/second", 1),
        ]
        assert [request.body for request in server.received[1:]] == [b'{"n":2}'] * 2
        assert (transport._open, idle(transport)) == (1, 1)


async def test_a_fresh_connection_closed_before_the_answer_raises() -> None:
    async def handler(peer: Peer) -> None:
        await peer.receive()  # and close without answering

    transport = KeepAliveTransport()
    async with Server(handler) as server, client(server, transport) as http:
        with pytest.raises(httpx.RemoteProtocolError):
            await http.get("/")
        assert len(server.peers) == 1  # not retried
        assert (transport._open, idle(transport)) == (0, 0)


@pytest.mark.parametrize(
    "cut",
    [
        pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabcd", id="part-of-the-body"),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n",
            id="head-only",
        ),
        pytest.param(
            b"HTTP/1.1 100 Continue\r\n\r\n",
            id="interim-response-only",
        ),
    ],
)
async def test_a_reused_connection_closed_within_a_response_is_not_retried(cut: bytes) -> None:
    async def handler(peer: Peer) -> None:
        while (request := await peer.receive()) is not None:
            if peer.index == 0 and peer.requests == 2:
                await peer.send(cut)
                return
            await peer.send(echo(request))

    transport = KeepAliveTransport()
    async with Server(handler) as server, client(server, transport) as http:
        await http.get("/first")
        with pytest.raises(httpx.RemoteProtocolError):
            await http.post("/pay", json={"amount": 1})
        assert [request.target for request in server.received] == ["/first", "/pay"]  # sent once, not twice
        assert (transport._open, idle(transport)) == (0, 0)


async def test_bytes_a_server_sent_on_an_idle_connection_are_not_taken_for_the_next_answer() -> None:
    timed_out = response(408, b"", "Connection: close", reason="Request Timeout")
    transport = KeepAliveTransport()

    async def handler(peer: Peer) -> None:
        request = await peer.receive()
        assert request is not None
        await peer.send(echo(request))
        if peer.index == 0:
            await peer.send(timed_out)  # an idle timeout, the way some servers announce it
            return
        while (request := await peer.receive()) is not None:
            await peer.send(echo(request))

    async with Server(handler) as server, client(server, transport) as http:
        await http.get("/first")
        await server.peers[0].closed.wait()
        await asyncio.sleep(0.05)  # the 408 and the EOF reach the client's end of the idle connection
        answer = await http.get("/second")
        assert answer.status_code == 200
        assert answer.json()["peer"] == 1


# -- response framing ----------------------------------------------------------------------------


async def test_content_length_bodies() -> None:
    answers = {"/hello": response(200, b"hello"), "/empty": response(200)}
    async with Server(routes(answers)) as server, client(server, KeepAliveTransport()) as http:
        assert (await http.get("/hello")).content == b"hello"
        assert (await http.get("/empty")).content == b""
        assert (await http.get("/after")).json()["peer"] == 0
        assert len(server.peers) == 1


async def test_large_bodies_both_ways() -> None:
    payload = bytes(range(256)) * 1200  # 300 KiB: past the transport's 64 KiB write split and read limit

    async def handler(peer: Peer) -> None:
        while (request := await peer.receive()) is not None:
            await peer.send(response(200, request.body[::-1]))

    async with Server(handler) as server, client(server, KeepAliveTransport()) as http:
        answer = await http.put("/blob", content=payload)
        assert answer.content == payload[::-1]
        assert server.received[0].body == payload
        assert server.received[0].header("content-length") == str(len(payload))


async def test_a_chunked_body_with_extensions_and_trailers() -> None:
    async def handler(peer: Peer) -> None:
        while (request := await peer.receive()) is not None:
            if request.target != "/chunked":
                await peer.send(echo(request))
                continue
            await peer.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\n\r\n")
            for part in (b"5;name=value\r\nhello\r\n", b"1A\r\n" + b"x" * 26 + b"\r\n", b"1\r\n!\r\n"):
                await peer.send(part)
                await asyncio.sleep(0.01)  # separate reads on the client's side
            await peer.send(b"0\r\nX-Checksum: abc\r\nX-Other: 1\r\n\r\n")

    transport = KeepAliveTransport()
    async with Server(handler) as server, client(server, transport) as http:
        answer = await http.get("/chunked")
        assert answer.text == "hello" + "x" * 26 + "!"
        assert answer.headers["content-type"] == "text/plain"
        # The trailers were consumed: the connection carries the next exchange.
        assert (await http.get("/after")).json() == {"peer": 0, "method": "GET", "target": "/after"}
        assert len(server.peers) == 1


async def test_a_body_running_to_the_end_of_the_connection() -> None:
    answers = {"/eof": b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nall of it, until the end"}
    transport = KeepAliveTransport()
    async with Server(routes(answers, then_close={"/eof"})) as server, client(server, transport) as http:
        assert (await http.get("/eof")).text == "all of it, until the end"
        assert (transport._open, idle(transport)) == (0, 0)
        assert (await http.get("/next")).json()["peer"] == 1


@pytest.mark.parametrize(
    ("method", "answer", "status"),
    [
        pytest.param("GET", b"HTTP/1.1 204 No Content\r\n\r\n", 204, id="204"),
        pytest.param("GET", b'HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\nETag: "v1"\r\n\r\n', 304, id="304"),
        pytest.param("HEAD", b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n", 200, id="head"),
        pytest.param("HEAD", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", 200, id="head-chunked"),
    ],
)
async def test_answers_without_a_body(method: str, answer: bytes, status: int) -> None:
    async with Server(routes({"/": answer})) as server, client(server, KeepAliveTransport(), timeout=2) as http:
        first = await http.request(method, "/")
        assert (first.status_code, first.content) == (status, b"")
        # Nothing was read past the head: the next answer on the connection arrives intact.
        assert (await http.get("/next")).json() == {"peer": 0, "method": "GET", "target": "/next"}
        assert server.received[0].method == method


async def test_informational_answers_before_the_real_one_are_skipped() -> None:
    interim = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
    answers = {"/": interim + response(201, b"made", "X-Final: yes", reason="Created")}
    async with Server(routes(answers)) as server, client(server, KeepAliveTransport()) as http:
        answer = await http.post("/", json={})
        assert (answer.status_code, answer.content, answer.headers["x-final"]) == (201, b"made", "yes")
        assert "link" not in answer.headers
        assert (await http.get("/next")).json()["peer"] == 0


@pytest.mark.parametrize(
    ("answer", "reused"),
    [
        pytest.param(response(200, b"ok"), True, id="http/1.1"),
        pytest.param(response(200, b"ok", "Connection: close"), False, id="http/1.1-close"),
        pytest.param(response(200, b"ok", "Connection: Close"), False, id="http/1.1-Close"),
        pytest.param(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", False, id="http/1.0"),
        pytest.param(
            b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok", True, id="http/1.0-keep-alive"
        ),
    ],
)
async def test_reuse_follows_the_answer(answer: bytes, reused: bool) -> None:
    # The server keeps every connection open: whether the next request comes on the same one is the client's call.
    async with Server(routes({"/": answer})) as server, client(server, KeepAliveTransport()) as http:
        assert (await http.get("/")).content == b"ok"
        assert (await http.get("/next")).json()["peer"] == (0 if reused else 1)
        if not reused:
            await eventually_async(server.peers[0].closed.is_set, what="the client to close the connection it gave up")


# -- content decoding and headers ----------------------------------------------------------------


async def test_a_gzip_encoded_body_is_decoded() -> None:
    document = {"amountMinor": "10000", "items": list(range(100))}
    gzipped = gzip.compress(json.dumps(document).encode())
    answers = {"/": response(200, gzipped, "Content-Encoding: gzip", "Content-Type: application/json")}
    async with Server(routes(answers)) as server, client(server, KeepAliveTransport()) as http:
        answer = await http.get("/")
        assert answer.json() == document
        assert "gzip" in (server.received[0].header("accept-encoding") or "")


async def test_repeated_headers_all_survive() -> None:
    answer = response(200, b"", "Set-Cookie: a=1; Path=/", "Set-Cookie: b=2; Path=/", "X-Many: 1", "x-many: 2")
    async with Server(routes({"/": answer})) as server, client(server, KeepAliveTransport()) as http:
        got = await http.get("/")
        assert got.headers.get_list("set-cookie") == ["a=1; Path=/", "b=2; Path=/"]
        assert got.headers.get_list("x-many") == ["1", "2"]
        assert dict(got.cookies) == {"a": "1", "b": "2"}


# -- request encoding ----------------------------------------------------------------------------


async def test_method_target_headers_and_json_body_arrive_as_sent() -> None:
    document = {"amount": "10000", "memo": "café ☕"}
    async with Server(routes({})) as server, client(server, KeepAliveTransport()) as http:
        await http.post("/v1/items", params={"a": "1", "q": "two words"}, headers={"X-Trace": "t-1"}, json=document)
    [received] = server.received
    assert (received.method, received.target) == ("POST", "/v1/items?a=1&q=two+words")
    assert received.header("host") == f"127.0.0.1:{server.port}"
    assert received.header("x-trace") == "t-1"
    assert received.header("content-type") == "application/json"
    assert received.header("content-length") == str(len(received.body))
    assert json.loads(received.body) == document


@pytest.mark.parametrize("method", ["GET", "PUT", "PATCH", "DELETE", "OPTIONS"])
async def test_the_method_arrives(method: str) -> None:
    async with Server(routes({})) as server, client(server, KeepAliveTransport()) as http:
        assert (await http.request(method, "/m")).json()["method"] == method
    assert [(request.method, request.body) for request in server.received] == [(method, b"")]


async def test_a_streamed_body_is_sent_chunked() -> None:
    async def parts() -> AsyncIterator[bytes]:
        for part in (b"first,", b"second,", b"x" * 70_000):
            yield part
            await asyncio.sleep(0)

    async with Server(routes({})) as server, client(server, KeepAliveTransport()) as http:
        assert (await http.post("/upload", content=parts())).status_code == 200
        assert (await http.get("/after")).json()["peer"] == 0  # the chunked body ended where it should
    received = server.received[0]
    assert received.header("transfer-encoding") == "chunked"
    assert received.header("content-length") is None
    assert received.body == b"first,second," + b"x" * 70_000


# -- failures ------------------------------------------------------------------------------------


async def test_a_closed_port_is_a_connect_error() -> None:
    transport = KeepAliveTransport()
    with socket.socket() as bound:  # bound but not listening: connections to it are refused
        bound.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{bound.getsockname()[1]}/"
        async with httpx.AsyncClient(transport=transport) as http:
            with pytest.raises(httpx.ConnectError):
                await http.get(url)
    assert transport._open == 0


async def test_a_server_that_never_answers_is_a_read_timeout() -> None:
    async def handler(peer: Peer) -> None:
        await peer.receive()
        await asyncio.Event().wait()  # until the server shuts down

    transport = KeepAliveTransport()
    async with Server(handler) as server, client(server, transport, httpx.Timeout(5, read=0.2)) as http:
        with pytest.raises(httpx.ReadTimeout):
            await http.get("/")
        assert (transport._open, idle(transport)) == (0, 0)


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(b"HTTP/1.1 abc OK\r\nContent-Length: 0\r\n\r\n", id="status-not-a-number"),
        pytest.param(b"HTTP/1.1 99 Low\r\nContent-Length: 0\r\n\r\n", id="status-out-of-range"),
        pytest.param(b"ICY 200 OK\r\nContent-Length: 0\r\n\r\n", id="not-http"),
        pytest.param(b"garbage\r\n\r\n", id="no-status"),
        pytest.param(b"HTTP/1.1 200 OK\r\nno colon here\r\nContent-Length: 0\r\n\r\n", id="header-without-colon"),
        pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n", id="length-not-a-number"),
        pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", id="negative-length"),
        pytest.param(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", id="chunk-size-not-hex"),
        pytest.param(b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n", id="head-too-large"),
    ],
)
async def test_a_malformed_answer_is_a_protocol_error(answer: bytes) -> None:
    transport = KeepAliveTransport()  # the server keeps the connection open: a hang would be a ReadTimeout
    async with Server(routes({"/": answer})) as server, client(server, transport, timeout=2) as http:
        with pytest.raises(httpx.RemoteProtocolError):
            await http.get("/")
        assert (transport._open, idle(transport)) == (0, 0)


@pytest.mark.parametrize(
    "cut",
    [
        pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabcd", id="content-length"),
        pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", id="content-length-head-only"),
        pytest.param(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", id="inside-a-chunk"),
        pytest.param(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", id="between-chunks"),
        pytest.param(b"HTTP/1.1 200 OK\r\nContent-Len", id="inside-the-head"),
    ],
)
async def test_a_server_closing_within_the_answer_is_a_protocol_error(cut: bytes) -> None:
    transport = KeepAliveTransport()
    async with Server(routes({"/": cut}, then_close={"/"})) as server, client(server, transport) as http:
        with pytest.raises(httpx.RemoteProtocolError):
            await http.get("/")
        assert len(server.peers) == 1
        assert (transport._open, idle(transport)) == (0, 0)


# -- the connection limit ------------------------------------------------------------------------


async def test_requests_past_the_limit_wait_for_a_kept_alive_connection() -> None:
    async def slow(peer: Peer) -> None:
        while (request := await peer.receive()) is not None:
            await asyncio.sleep(0.05)
            await peer.send(echo(request))

    transport = KeepAliveTransport(max_connections=2)
    async with Server(slow) as server, client(server, transport, httpx.Timeout(5, pool=1)) as http:
        answers = await asyncio.gather(*(http.get(f"/{i}") for i in range(6)))
        assert [answer.json()["target"] for answer in answers] == [f"/{i}" for i in range(6)]
        assert server.max_open == 2
        assert (transport._open, idle(transport), len(transport._waiters)) == (2, 2, 0)


async def test_requests_past_the_limit_wait_for_a_closed_connection_slot() -> None:
    async def slow_and_closing(peer: Peer) -> None:
        request = await peer.receive()
        assert request is not None
        await asyncio.sleep(0.05)
        await peer.send(response(200, request.target.encode(), "Connection: close"))

    transport = KeepAliveTransport(max_connections=2)
    async with Server(slow_and_closing) as server, client(server, transport, httpx.Timeout(5, pool=2)) as http:
        answers = await asyncio.gather(*(http.get(f"/{i}") for i in range(6)))
        assert [answer.text for answer in answers] == [f"/{i}" for i in range(6)]
        assert len(server.peers) == 6
        assert server.max_open <= 2
        assert (transport._open, idle(transport), len(transport._waiters)) == (0, 0, 0)


async def test_a_request_past_the_limit_times_out_waiting_for_a_slot() -> None:
    release = asyncio.Event()

    async def held(peer: Peer) -> None:
        while (request := await peer.receive()) is not None:
            await release.wait()
            await peer.send(echo(request))

    transport = KeepAliveTransport(max_connections=2)
    async with Server(held) as server, client(server, transport, httpx.Timeout(5, pool=0.05)) as http:
        holding = [asyncio.create_task(http.get("/held")) for _ in range(2)]
        await eventually_async(lambda: len(server.received), until=lambda n: n == 2, what="two requests received")
        with pytest.raises(httpx.PoolTimeout):
            await http.get("/extra")
        assert (transport._open, len(transport._waiters)) == (2, 0)

        release.set()
        assert [answer.status_code for answer in await asyncio.gather(*holding)] == [200, 200]
        assert [request.target for request in server.received] == ["/held", "/held"]
        assert (transport._open, idle(transport)) == (2, 2)
    assert (transport._open, idle(transport)) == (0, 0)  # leaving the client closed the transport


async def test_idle_connections_to_another_origin_do_not_starve_a_request() -> None:
    transport = KeepAliveTransport(max_connections=1)
    http = httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(5, pool=0.5))
    async with Server(routes({})) as one, Server(routes({})) as two, http:
        assert (await http.get(f"{one.url}/")).status_code == 200
        assert (await http.get(f"{two.url}/")).status_code == 200


# -- cancellation --------------------------------------------------------------------------------


async def test_cancelling_a_request_discards_its_connection_and_frees_its_slot() -> None:
    late = asyncio.Event()

    async def handler(peer: Peer) -> None:
        while (request := await peer.receive()) is not None:
            if request.target == "/slow":
                await late.wait()  # answers only after the client gave up
            await peer.send(echo(request))

    transport = KeepAliveTransport(max_connections=1)
    async with Server(handler) as server, client(server, transport, httpx.Timeout(5, pool=0.5)) as http:
        slow = asyncio.create_task(http.get("/slow"))
        await eventually_async(lambda: len(server.received), until=lambda n: n == 1, what="the request received")
        slow.cancel()
        with pytest.raises(asyncio.CancelledError):
            await slow
        assert (transport._open, idle(transport)) == (0, 0)

        late.set()  # the late answer goes out on the abandoned connection
        await eventually_async(server.peers[0].closed.is_set, what="the connection closed")
        answer = await http.get("/next")
        assert answer.json() == {"peer": 1, "method": "GET", "target": "/next"}
        assert (transport._open, idle(transport)) == (1, 1)


async def test_cancelling_a_request_waiting_for_a_slot_leaves_the_pool_consistent() -> None:
    release = asyncio.Event()

    async def handler(peer: Peer) -> None:
        while (request := await peer.receive()) is not None:
            if request.target == "/held":
                await release.wait()
            await peer.send(echo(request))

    transport = KeepAliveTransport(max_connections=1)
    async with Server(handler) as server, client(server, transport) as http:
        held = asyncio.create_task(http.get("/held"))
        await eventually_async(lambda: len(server.received), until=lambda n: n == 1, what="the request received")
        async with anyio.create_task_group() as group:  # cancelled the way anyio code cancels
            group.start_soon(http.get, "/waiting")
            await eventually_async(
                lambda: len(transport._waiters), until=lambda n: n == 1, what="a request waiting for a connection"
            )
            group.cancel_scope.cancel()
        assert (transport._open, len(transport._waiters)) == (1, 0)

        release.set()
        assert (await held).status_code == 200
        assert (await http.get("/after")).json()["peer"] == 0
        assert [request.target for request in server.received] == ["/held", "/after"]
        assert (transport._open, idle(transport)) == (1, 1)


# -- closing -------------------------------------------------------------------------------------


async def test_aclose_closes_the_idle_connections() -> None:
    together = asyncio.Barrier(3)

    async def handler(peer: Peer) -> None:
        while (request := await peer.receive()) is not None:
            await together.wait()
            await peer.send(echo(request))

    transport = KeepAliveTransport()
    async with Server(handler) as server, client(server, transport) as http:
        await asyncio.gather(*(http.get("/") for _ in range(3)))
        assert (transport._open, idle(transport)) == (3, 3)
        assert not any(peer.closed.is_set() for peer in server.peers)

        connections = [conn for stack in transport._idle.values() for conn in stack]  # kept from the GC
        await transport.aclose()
        assert (transport._open, transport._idle) == (0, {})
        assert all(conn.writer.is_closing() for conn in connections)
        await eventually_async(
            lambda: all(peer.closed.is_set() for peer in server.peers), what="every connection closed"
        )


async def test_a_request_in_flight_at_aclose_closes_its_connection_when_it_finishes() -> None:
    # A seller closing at shutdown while its background round is still talking to the platform: the
    # round's connection must not go back to an idle stack nobody will close (it would leak).
    answer = asyncio.Event()

    async def handler(peer: Peer) -> None:
        while (request := await peer.receive()) is not None:
            await answer.wait()
            await peer.send(echo(request))

    transport = KeepAliveTransport()
    async with Server(handler) as server, client(server, transport) as http:
        in_flight = asyncio.ensure_future(http.get("/"))
        await eventually_async(lambda: len(server.received), until=lambda n: n == 1, what="the request received")
        await transport.aclose()
        answer.set()
        assert (await in_flight).status_code == 200
        assert (transport._open, idle(transport)) == (0, 0)
        await eventually_async(
            lambda: all(peer.closed.is_set() for peer in server.peers), what="every connection closed"
        )


async def test_a_connection_left_from_another_event_loop_is_not_used() -> None:
    transport = KeepAliveTransport()

    async def request_elsewhere(url: str) -> Any:
        # No client around the transport here: closing one would close the transport's idle connections.
        answer = await transport.handle_async_request(httpx.Request("GET", url))
        return json.loads(await answer.aread())

    async with Server(routes({})) as server:
        elsewhere = await asyncio.to_thread(asyncio.run, request_elsewhere(f"{server.url}/there"))
        assert elsewhere["peer"] == 0
        assert idle(transport) == 1  # a connection of the thread's event loop, closed since
        async with client(server, transport) as http:
            assert (await http.get("/here")).json() == {"peer": 1, "method": "GET", "target": "/here"}
            assert (transport._open, idle(transport)) == (1, 1)


# -- a real server -------------------------------------------------------------------------------


async def _asgi_echo(scope: dict[str, Any], receive: Callable[[], Awaitable[Any]], send: Callable[[Any], Any]) -> None:
    assert scope["type"] == "http"
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    document = {
        "client": scope["client"][1],
        "method": scope["method"],
        "path": scope["path"],
        "query": scope["query_string"].decode(),
        "body": body.decode(),
    }
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": json.dumps(document).encode()})


async def test_against_uvicorn() -> None:
    server = uvicorn.Server(uvicorn.Config(_asgi_echo, host="127.0.0.1", port=0, lifespan="off", log_level="error"))
    serving = asyncio.create_task(server.serve())
    try:
        await eventually_async(lambda: server.started, what="the server to start")
        port = server.servers[0].sockets[0].getsockname()[1]
        transport = KeepAliveTransport()
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", transport=transport) as http:
            sequential = [await http.get("/seq", params={"i": i}) for i in range(10)]
            assert [answer.json()["query"] for answer in sequential] == [f"i={i}" for i in range(10)]
            assert len({answer.json()["client"] for answer in sequential}) == 1  # one connection

            async def numbers() -> AsyncIterator[bytes]:
                for i in range(3):
                    yield str(i).encode()

            concurrent = await asyncio.gather(
                *(http.post("/json", json={"n": i}) for i in range(8)), http.post("/stream", content=numbers())
            )
            assert [json.loads(answer.json()["body"]) for answer in concurrent[:8]] == [{"n": i} for i in range(8)]
            assert concurrent[8].json()["body"] == "012"
            assert transport._open == idle(transport) <= 9
    finally:
        server.should_exit = True
        await serving


# -- TLS -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and localhost: (certificate file, key file)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "x402mw test")])
    now = datetime.datetime.now(datetime.UTC)
    alt_names = x509.SubjectAlternativeName(
        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(alt_names, critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    folder = tmp_path_factory.mktemp("tls")
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return folder / "cert.pem", folder / "key.pem"


def _tls_server(certificate: tuple[Path, Path]) -> Server:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*certificate)
    return Server(routes({}), tls=context)


async def test_https_with_a_trusted_certificate(certificate: tuple[Path, Path]) -> None:
    transport = KeepAliveTransport(verify=ssl.create_default_context(cafile=certificate[0]))
    async with _tls_server(certificate) as server, client(server, transport) as http:
        assert server.url.startswith("https://")
        for target in ("/one", "/two"):
            assert (await http.get(target)).json() == {"peer": 0, "method": "GET", "target": target}
        assert len(server.peers) == 1


async def test_https_with_an_untrusted_certificate_is_a_connect_error(certificate: tuple[Path, Path]) -> None:
    transport = KeepAliveTransport()
    async with _tls_server(certificate) as server, client(server, transport) as http:
        with pytest.raises(httpx.ConnectError, match="certificate verify failed"):
            await http.get("/")
        assert server.received == []
        assert transport._open == 0


async def test_https_without_verification(certificate: tuple[Path, Path]) -> None:
    async with _tls_server(certificate) as server, client(server, KeepAliveTransport(verify=False)) as http:
        assert (await http.get("/")).json()["peer"] == 0
