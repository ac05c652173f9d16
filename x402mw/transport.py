"""A lean HTTP/1.1 keep-alive transport for ``httpx.AsyncClient``, for short API calls under load.

httpx's default pool looks at every pooled connection on every request (expiry, idleness, whether
the socket is readable), so at 32 or 64 requests in flight it spends more CPU choosing a connection
than sending the request. :class:`KeepAliveTransport` keeps a stack of idle connections per origin
instead: a request takes the most recently used one (dropping any the server closed meanwhile),
writes the request, reads the whole response, and puts the connection back. It is what the seller
middleware uses to reach the platform and what the platform uses to reach a chain node.

>>> client = httpx.AsyncClient(base_url="http://127.0.0.1:4402/v1", transport=KeepAliveTransport())  # doctest: +SKIP

What it does not do: HTTP/2, proxies, or streaming a response as it arrives (the body is read
whole before the response is returned). Use httpx's own transport where you need those.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ssl
from collections.abc import AsyncIterator

import httpx

_Origin = tuple[bytes, bytes, int]
_HEAD_LIMIT = 64 * 1024
_NO_BODY = frozenset({204, 304})


class _Connection:
    __slots__ = ("loop", "reader", "writer")

    def __init__(self, loop: asyncio.AbstractEventLoop, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.loop = loop
        self.reader = reader
        self.writer = writer

    def usable(self, loop: asyncio.AbstractEventLoop) -> bool:
        # An idle connection the server closed has seen EOF by now (the loop delivered it); one the
        # server wrote to while idle (a 408 before closing, say) must not have that read as the answer
        # to the next request.
        return (
            self.loop is loop
            and not self.reader.at_eof()
            and not self.writer.is_closing()
            and not _buffered(self.reader)
        )

    def close(self) -> None:
        if self.loop.is_closed():
            _close_orphan(self.writer.transport)
            return
        with contextlib.suppress(Exception):
            self.writer.close()


class _Body(httpx.AsyncByteStream):
    def __init__(self, content: bytes) -> None:
        self._content = content

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self._content


class _Stale(Exception):
    """A reused connection failed before any byte of a response arrived: the server had closed it."""


class _NoAnswer(Exception):
    """The connection ended before the first byte of a response."""


def _close_orphan(transport: asyncio.BaseTransport) -> None:
    """Close the socket of a connection whose event loop has ended (a transport used from another
    loop, which closed with this connection idle). Closing the transport would schedule its last step
    on that loop, which no longer runs; CPython's selector transports keep the socket in ``_sock``,
    and warn of an unclosed transport when collected while it is set."""
    with contextlib.suppress(RuntimeError):  # marks it closing, then cannot schedule on the closed loop
        transport.close()
    sock = getattr(transport, "_sock", None)
    if sock is not None:
        setattr(transport, "_sock", None)  # noqa: B010
        sock.close()


def _buffered(reader: asyncio.StreamReader) -> int:
    # StreamReader has no public way to ask whether bytes are waiting; CPython's keeps them here.
    return len(getattr(reader, "_buffer", b""))


class KeepAliveTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 over kept-alive asyncio connections (``http`` and ``https``).

    ``max_connections`` bounds the connections open at once per transport (a request past it waits
    up to the pool timeout); ``max_idle`` bounds those kept per origin between requests.
    ``verify`` is ``True`` (the system's trust store, or certifi's when installed), ``False``, or an
    :class:`ssl.SSLContext`. The read timeout covers the whole response, not each read. A request on a
    kept-alive connection that the server had closed is sent again on a new one, but only when no
    byte of an answer arrived, so a request is never sent twice to a server that began answering it.
    """

    def __init__(self, *, max_connections: int = 256, max_idle: int = 64, verify: bool | ssl.SSLContext = True) -> None:
        self.max_connections = max_connections
        self.max_idle = max_idle
        self._verify = verify
        self._ssl: ssl.SSLContext | None = None
        self._idle: dict[_Origin, list[_Connection]] = {}
        self._open = 0
        self._closed = False  # after `aclose`, a connection that finishes is closed, not kept
        self._waiters: collections.deque[tuple[_Origin, asyncio.Future[_Connection | None]]] = collections.deque()

    def __repr__(self) -> str:
        idle = sum(len(stack) for stack in self._idle.values())
        return f"KeepAliveTransport(open={self._open}, idle={idle})"

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeouts: dict[str, float | None] = request.extensions.get("timeout", {})
        url = request.url
        origin = (url.raw_scheme, url.raw_host, url.port or (443 if url.raw_scheme == b"https" else 80))
        head, body = _encode(request, await request.aread())
        loop = asyncio.get_running_loop()
        while True:
            conn, reused = await self._checkout(request, origin, loop, timeouts)
            try:
                status, headers, content, keep = await self._exchange(request, conn, head, body, reused, timeouts)
            except _Stale:
                self._discard(conn)
                continue
            except BaseException:
                self._discard(conn)
                raise
            if keep:
                self._checkin(origin, conn)
            else:
                self._discard(conn)
            return httpx.Response(
                status, headers=headers, stream=_Body(content), extensions={"http_version": b"HTTP/1.1"}
            )

    async def aclose(self) -> None:
        """Close the idle connections now, and each one in use as its request finishes: a transport
        closed while a request is in flight keeps no connection."""
        self._closed = True
        stacks, self._idle = self._idle, {}
        for stack in stacks.values():
            for conn in stack:
                conn.close()
                self._release()

    # -- the pool ------------------------------------------------------------------------------

    async def _checkout(
        self,
        request: httpx.Request,
        origin: _Origin,
        loop: asyncio.AbstractEventLoop,
        timeouts: dict[str, float | None],
    ) -> tuple[_Connection, bool]:
        """A connection to ``origin`` and whether it was used before; waits at the connection limit."""
        conn = self._take_idle(origin, loop)
        if conn is not None:
            return conn, True
        if self._open >= self.max_connections:
            self._evict_one()
        if self._open < self.max_connections:
            self._open += 1
        else:
            handed = await self._wait(request, origin, timeouts.get("pool"))
            if handed is not None:
                return handed, True
        try:
            return await self._connect(request, origin, timeouts.get("connect")), False
        except BaseException:
            self._release()
            raise

    def _take_idle(self, origin: _Origin, loop: asyncio.AbstractEventLoop) -> _Connection | None:
        stack = self._idle.get(origin)
        while stack:
            conn = stack.pop()
            if conn.usable(loop):
                return conn
            self._discard(conn)
        return None

    def _evict_one(self) -> None:
        # At the limit with no idle connection to our origin: close the longest-idle connection to
        # another origin, so that idle connections never starve a request.
        for stack in self._idle.values():
            if stack:
                stack.pop(0).close()
                self._open -= 1
                return

    def _checkin(self, origin: _Origin, conn: _Connection) -> None:
        """Put back a connection that finished a request: to a waiter for its origin, else to idle
        (closed instead once the transport is closed)."""
        if self._closed:
            self._discard(conn)
            return
        while self._waiters:
            waiter_origin, waiter = self._waiters.popleft()
            if waiter.done():
                continue
            if waiter_origin == origin:
                waiter.set_result(conn)
            else:  # the waiter needs another origin: it gets this connection's slot
                conn.close()
                waiter.set_result(None)
            return
        stack = self._idle.setdefault(origin, [])
        if len(stack) >= self.max_idle:
            self._discard(conn)
        else:
            stack.append(conn)

    def _discard(self, conn: _Connection) -> None:
        conn.close()
        self._release()

    async def _wait(self, request: httpx.Request, origin: _Origin, timeout: float | None) -> _Connection | None:
        """Wait for a connection to ``origin`` or a free slot (None), whichever a finishing request hands over."""
        future: asyncio.Future[_Connection | None] = asyncio.get_running_loop().create_future()
        self._waiters.append((origin, future))
        try:
            async with asyncio.timeout(timeout):
                return await future  # a handed-over slot keeps _open the same
        except BaseException as exc:
            if future.done() and not future.cancelled():
                handed = future.result()  # handed to us as we gave up: pass it on
                if handed is None:
                    self._release()
                else:
                    self._checkin(origin, handed)
            else:
                future.cancel()
                with contextlib.suppress(ValueError):
                    self._waiters.remove((origin, future))
            if isinstance(exc, TimeoutError):
                raise httpx.PoolTimeout("no connection became free in time", request=request) from None
            raise

    def _release(self) -> None:
        while self._waiters:
            _, waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._open -= 1

    async def _connect(self, request: httpx.Request, origin: _Origin, timeout: float | None) -> _Connection:
        scheme, host, port = origin
        context = self._context() if scheme == b"https" else None
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(
                    host.decode("ascii"), port, ssl=context, limit=_HEAD_LIMIT
                )
        except TimeoutError:
            raise httpx.ConnectTimeout(f"connecting to {request.url.host}:{port} timed out", request=request) from None
        except OSError as exc:
            raise httpx.ConnectError(f"cannot connect to {request.url.host}:{port}: {exc}", request=request) from None
        return _Connection(asyncio.get_running_loop(), reader, writer)

    def _context(self) -> ssl.SSLContext:
        if self._ssl is None:
            if isinstance(self._verify, ssl.SSLContext):
                self._ssl = self._verify
            elif self._verify:
                try:
                    import certifi

                    self._ssl = ssl.create_default_context(cafile=certifi.where())
                except ImportError:
                    self._ssl = ssl.create_default_context()
            else:
                self._ssl = ssl.create_default_context()
                self._ssl.check_hostname = False
                self._ssl.verify_mode = ssl.CERT_NONE
        return self._ssl

    # -- one exchange --------------------------------------------------------------------------

    async def _exchange(
        self,
        request: httpx.Request,
        conn: _Connection,
        head: bytes,
        body: bytes,
        reused: bool,
        timeouts: dict[str, float | None],
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes, bool]:
        try:
            conn.writer.write(head + body if len(body) < 65536 else head)
            if len(body) >= 65536:
                conn.writer.write(body)
            async with asyncio.timeout(timeouts.get("write")):
                await conn.writer.drain()
        except TimeoutError:
            raise httpx.WriteTimeout("sending the request timed out", request=request) from None
        except OSError as exc:
            if reused:
                raise _Stale from None
            raise httpx.WriteError(f"sending the request failed: {exc}", request=request) from None
        try:
            async with asyncio.timeout(timeouts.get("read")):
                return await _read_response(conn.reader, request.method)
        except TimeoutError:
            raise httpx.ReadTimeout("the response did not arrive in time", request=request) from None
        except _NoAnswer:
            if reused:  # only now is sending the request again safe: the server saw none of it answered
                raise _Stale from None
            raise httpx.RemoteProtocolError(
                "the server closed the connection without answering", request=request
            ) from None
        except asyncio.IncompleteReadError:
            raise httpx.RemoteProtocolError(
                "the server closed the connection before its response was complete", request=request
            ) from None
        except asyncio.LimitOverrunError:
            raise httpx.RemoteProtocolError("the response's head is too large", request=request) from None
        except (ValueError, IndexError) as exc:
            raise httpx.RemoteProtocolError(f"malformed HTTP response: {exc}", request=request) from None
        except OSError as exc:
            raise httpx.ReadError(f"reading the response failed: {exc}", request=request) from None


def _encode(request: httpx.Request, body: bytes) -> tuple[bytes, bytes]:
    target = request.url.raw_path
    lines = [request.method.encode("ascii") + b" " + target + b" HTTP/1.1"]
    chunked = False
    for name, value in request.headers.raw:
        if name.lower() == b"transfer-encoding":
            chunked = b"chunked" in value.lower()
        lines.append(name + b": " + value)
    if chunked:
        body = (b"%x\r\n" % len(body) + body + b"\r\n" if body else b"") + b"0\r\n\r\n"
    return b"\r\n".join(lines) + b"\r\n\r\n", body


async def _read_response(
    reader: asyncio.StreamReader, method: str
) -> tuple[int, list[tuple[bytes, bytes]], bytes, bool]:
    first = True
    while True:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            if first and not exc.partial:
                raise _NoAnswer from None
            raise
        except OSError:
            if first and not _buffered(reader):
                raise _NoAnswer from None
            raise
        first = False
        lines = head[:-4].split(b"\r\n")
        version, _, rest = lines[0].partition(b" ")
        status = int(rest[:3])
        if not version.startswith(b"HTTP/1.") or not 100 <= status <= 999:
            raise ValueError(f"bad status line {lines[0][:80]!r}")
        if status >= 200 or status == 101:
            break  # 1xx informational answers precede the real one
    headers: list[tuple[bytes, bytes]] = []
    length: int | None = None
    chunked = False
    keep = version == b"HTTP/1.1"
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            raise ValueError(f"bad header line {line[:80]!r}")
        value = value.strip()
        headers.append((name, value))
        lowered = name.lower()
        if lowered == b"content-length":
            length = int(value)
        elif lowered == b"transfer-encoding":
            chunked = b"chunked" in value.lower()
        elif lowered == b"connection":
            tokens = value.lower()
            keep = b"close" not in tokens and (keep or b"keep-alive" in tokens)
    if status == 101:
        return status, headers, b"", False  # the connection now speaks another protocol: never reuse it
    if method == "HEAD" or status in _NO_BODY:
        return status, headers, b"", keep
    if chunked:
        parts = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
            if size == 0:
                while await reader.readuntil(b"\r\n") != b"\r\n":
                    pass  # trailers
                break
            parts.append((await reader.readexactly(size + 2))[:-2])
        return status, headers, b"".join(parts), keep
    if length is not None:
        if length < 0:
            raise ValueError("negative Content-Length")
        return status, headers, await reader.readexactly(length), keep
    return status, headers, await reader.read(), False  # the body runs to the end of the connection
