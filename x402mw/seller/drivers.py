"""Two short loops that run a gate's generators: `run_sync` with an ``httpx.Client`` and
`run_async` with an ``httpx.AsyncClient``, plus the sellers that keep a connection pool to the
platform and run the background work (registering issued challenges, refreshing endpoint terms).

The sellers hand their requests straight to an httpx transport: on the paid path an httpx client's
URL merging, cookie jar, auth and redirect handling cost more CPU than the exchange itself (about
100 µs against 40 µs per call, measured with a transport that answers at once). When no transport is
given and the environment names a proxy (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, with
``NO_PROXY``), they go through an httpx client instead, which honours it.

`SyncSeller` runs its background work in a daemon thread. `AsyncSeller` is written on anyio, so it
runs on asyncio and on trio alike; anyio has no task that floats free of its caller, so its
background work lives in one of three places:

- in a task group that `AsyncSeller.running` opens for as long as its block lasts. The ASGI
  middleware wraps the app's lifespan in it: the lifespan task outlives every request, and the
  work runs every 0.25 s there, on either event loop, until ``lifespan.shutdown``;
- without a lifespan (a server with it off, or ``httpx.ASGITransport``, which sends none), in the
  task of a request, after its response is sent (`AsyncSeller.after_response`, as
  Starlette's background tasks run): one round at a time, at most one per 0.25 s, so that challenges
  still reach the platform in batches and no answer waits for them;
- under Django, whose async views run on asyncio only and which has no lifespan, in an asyncio
  task that the Django middleware starts on `AsyncSeller.run_background`; cancelled as the event
  loop shuts down, it closes the seller.

On asyncio the platform is reached through :class:`~x402mw.transport.KeepAliveTransport`, which is
written on asyncio's streams; on another event loop (trio), through httpx's own transport."""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import math
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from typing import Any, TypeVar

import anyio
import httpx
import sniffio
from anyio.abc import TaskStatus

from x402mw._version import __version__
from x402mw.errors import ConfigurationError, PlatformError
from x402mw.protocol import bounded_json
from x402mw.seller.decisions import ComputeAmount, PlatformCall, PlatformReply
from x402mw.seller.gate import PaymentGate
from x402mw.transport import KeepAliveTransport

logger = logging.getLogger("x402mw.seller")
T = TypeVar("T")
BACKGROUND_INTERVAL = 0.25


def _headers(gate: PaymentGate) -> dict[str, str]:
    return {"Authorization": f"Bearer {gate.api_key}", "User-Agent": f"x402mw-seller/{__version__}"}


def _reply(response: httpx.Response) -> PlatformReply:
    try:
        data = bounded_json.loads(response.content)
    except ValueError:  # not JSON (or nested past any answer of the platform): no data
        data = None
    headers = response.headers
    return PlatformReply(response.status_code, data, headers.get("Request-Id"), headers.get("ETag"))


def _unreachable(exc: Exception) -> PlatformError:
    return PlatformError(f"payment platform unreachable: {type(exc).__name__}", status=0)


def _environment_names_a_proxy() -> bool:
    return any(scheme in ("http", "https", "all") for scheme in urllib.request.getproxies())


class _Requests:
    """Builds a gate's `PlatformCall` into an ``httpx.Request`` for a transport: the platform URL,
    the key and the JSON body, as an ``httpx`` client with the same base URL and headers would."""

    def __init__(self, gate: PaymentGate) -> None:
        self._base = gate.platform_url.rstrip("/")
        self._headers = [(name.encode(), value.encode()) for name, value in _headers(gate).items()]

    def build(self, call: PlatformCall) -> httpx.Request:
        headers = self._headers
        if call.headers:
            headers = [*headers, *((name.encode(), value.encode()) for name, value in call.headers)]
        content = call.encoded
        if content is None and call.json is not None:
            content = json.dumps(call.json, separators=(",", ":")).encode()
        if content is not None:
            headers = [*headers, (b"Content-Type", b"application/json")]
        return httpx.Request(
            call.method,
            self._base + call.path,
            headers=headers,
            content=content,
            extensions={"timeout": httpx.Timeout(call.timeout).as_dict()},
        )


def _body(call: PlatformCall) -> dict[str, Any]:
    """An httpx client's arguments for ``call``'s body and headers."""
    if call.encoded is not None:
        return {"content": call.encoded, "headers": [*call.headers, ("Content-Type", "application/json")]}
    return {"json": call.json, "headers": call.headers}


class _Run:
    """A gate generator driven step by step: `command` hands it the last outcome (``value``, or
    ``error`` thrown in) and answers its next command; at its end ``done`` and ``result`` are set."""

    __slots__ = ("_gen", "done", "error", "result", "value")

    def __init__(self, gen: Generator[Any, Any, Any]) -> None:
        self._gen = gen
        self.value: Any = None
        self.error: BaseException | None = None
        self.done = False
        self.result: Any = None

    def command(self) -> Any:
        value, error = self.value, self.error
        self.value, self.error = None, None
        try:
            return self._gen.throw(error) if error is not None else self._gen.send(value)
        except StopIteration as stop:
            self.done, self.result = True, stop.value
            return None


def _drive_sync(gen: Generator[Any, Any, T], send: Callable[[PlatformCall], PlatformReply]) -> T:
    run = _Run(gen)
    while not run.done:
        command = run.command()
        if isinstance(command, PlatformCall):
            try:
                run.value = send(command)
            except httpx.HTTPError as exc:
                run.error = _unreachable(exc)
        elif isinstance(command, ComputeAmount):
            value = command.callback(command.request)
            if inspect.isawaitable(value):
                if hasattr(value, "close"):
                    value.close()
                raise ConfigurationError("an async amount callback cannot be used with a sync framework")
            run.value = value
    return run.result  # type: ignore[no-any-return]


async def _drive_async(gen: Generator[Any, Any, T], send: Callable[[PlatformCall], Awaitable[PlatformReply]]) -> T:
    run = _Run(gen)
    while not run.done:
        command = run.command()
        if isinstance(command, PlatformCall):
            try:
                run.value = await send(command)
            except httpx.HTTPError as exc:
                run.error = _unreachable(exc)
        elif isinstance(command, ComputeAmount):
            value = command.callback(command.request)
            run.value = await value if inspect.isawaitable(value) else value
    return run.result  # type: ignore[no-any-return]


def run_sync(gen: Generator[Any, Any, T], client: httpx.Client) -> T:
    """Run a gate generator to its end with a synchronous HTTP client (its ``base_url`` the platform's)."""

    def send(call: PlatformCall) -> PlatformReply:
        return _reply(client.request(call.method, call.path, timeout=call.timeout, **_body(call)))

    return _drive_sync(gen, send)


async def run_async(gen: Generator[Any, Any, T], client: httpx.AsyncClient) -> T:
    """Run a gate generator to its end with an asynchronous HTTP client (its ``base_url`` the platform's)."""

    async def send(call: PlatformCall) -> PlatformReply:
        return _reply(await client.request(call.method, call.path, timeout=call.timeout, **_body(call)))

    return await _drive_async(gen, send)


class SyncSeller:
    """A gate with a kept-alive sync connection pool and a background thread (Flask, Django, WSGI)."""

    def __init__(self, gate: PaymentGate, *, transport: httpx.BaseTransport | None = None) -> None:
        self.gate = gate
        self._requests = _Requests(gate)
        limits = httpx.Limits(max_keepalive_connections=64, max_connections=256)
        self._client: httpx.Client | None = None
        self._transport: httpx.BaseTransport | None = None
        if transport is None and _environment_names_a_proxy():
            self._client = httpx.Client(base_url=gate.platform_url, headers=_headers(gate), limits=limits)
        else:
            self._transport = transport or httpx.HTTPTransport(limits=limits)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._start_lock = threading.Lock()

    def _send(self, call: PlatformCall) -> PlatformReply:
        if self._transport is None:
            assert self._client is not None
            return _reply(self._client.request(call.method, call.path, timeout=call.timeout, **_body(call)))
        response = self._transport.handle_request(self._requests.build(call))
        try:
            response.read()
        finally:
            response.close()
        return _reply(response)

    def run(self, gen: Generator[Any, Any, T]) -> T:
        self._ensure_background()
        return _drive_sync(gen, self._send)

    def _ensure_background(self) -> None:
        if self._thread is not None:
            return
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="x402mw-seller", daemon=True)
                self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(BACKGROUND_INTERVAL):
            self.flush()

    def flush(self) -> None:
        """Run background work now (register issued challenges, refresh stale terms)."""
        if self.gate.has_background_work:
            try:
                _drive_sync(self.gate.background(), self._send)
            except Exception:
                logger.exception("x402mw background work failed")

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.flush()
        if self._client is not None:
            self._client.close()
        if self._transport is not None:
            self._transport.close()


class AsyncSeller:
    """A gate with a kept-alive async connection pool and background work (ASGI, Starlette, Django
    async), on asyncio or trio.

    The platform is reached through :class:`~x402mw.transport.KeepAliveTransport` on asyncio and
    httpx's own transport on trio, unless ``transport`` says otherwise (or, without one, the
    environment names a proxy). The background work runs in `running`, `run_background` or
    `after_response` (see the module docstring)."""

    def __init__(self, gate: PaymentGate, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.gate = gate
        self._requests = _Requests(gate)
        self._given = transport
        self._transport: httpx.AsyncBaseTransport | None = transport
        self._proxied = transport is None and _environment_names_a_proxy()
        self._client: httpx.AsyncClient | None = None
        self._loops: set[anyio.CancelScope] = set()
        self._flushing = False
        self._last_round = -math.inf

    async def _send(self, call: PlatformCall) -> PlatformReply:
        # The pool is made on first use, for the event loop that uses it, and made again after `aclose`.
        if self._proxied:
            client = self._client
            if client is None:
                self._client = client = httpx.AsyncClient(base_url=self.gate.platform_url, headers=_headers(self.gate))
            return _reply(await client.request(call.method, call.path, timeout=call.timeout, **_body(call)))
        transport = self._transport
        if transport is None:
            self._transport = transport = _default_transport()
        response = await transport.handle_async_request(self._requests.build(call))
        try:
            await response.aread()
        finally:
            await response.aclose()
        return _reply(response)

    async def run(self, gen: Generator[Any, Any, T]) -> T:
        return await _drive_async(gen, self._send)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Run the background work every 0.25 s, in a task group of the caller's, while the block lasts.

        >>> async with seller.running():  # doctest: +SKIP
        ...     await serve_until_shutdown()

        An exception from the block leaves it as it was raised, not wrapped in an exception group."""
        error: Exception | None = None
        async with anyio.create_task_group() as group:
            loop = await group.start(self.run_background)
            try:
                yield
            except Exception as exc:
                error = exc
            finally:
                loop.cancel()
        if error is not None:
            raise error

    async def run_background(self, *, task_status: TaskStatus[anyio.CancelScope] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run the background work every 0.25 s until cancelled or `aclose`. Started with
        ``await task_group.start(seller.run_background)``, it hands back the scope that stops it."""
        with anyio.CancelScope() as scope:
            self._loops.add(scope)
            try:
                task_status.started(scope)
                while True:
                    await anyio.sleep(BACKGROUND_INTERVAL)
                    await self.flush()
            finally:
                self._loops.discard(scope)

    async def after_response(self) -> None:
        """Run a round of due background work in the caller's task, unless a background loop runs
        (`running`, `run_background`), a round is under way, or one ran less than 0.25 s ago. An
        adapter calls it once a response has been sent."""
        if self._loops or self._flushing:
            return
        now = time.monotonic()  # not anyio.current_time(): this is every paid request's path
        if now - self._last_round < BACKGROUND_INTERVAL or not self.gate.has_background_work:
            return
        self._flushing = True
        self._last_round = now
        try:
            await self.flush()
        finally:
            self._flushing = False

    async def flush(self) -> None:
        """Run background work now (register issued challenges, refresh stale terms)."""
        if self.gate.has_background_work:
            try:
                await _drive_async(self.gate.background(), self._send)
            except Exception:
                logger.exception("x402mw background work failed")

    async def aclose(self) -> None:
        for scope in list(self._loops):
            scope.cancel()
        await self.flush()
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()
        transport, self._transport = self._transport, self._given
        if transport is not None:
            await transport.aclose()


def _default_transport() -> httpx.AsyncBaseTransport:
    if sniffio.current_async_library() == "asyncio":
        return KeepAliveTransport()
    return httpx.AsyncHTTPTransport(limits=httpx.Limits(max_keepalive_connections=64, max_connections=256))
