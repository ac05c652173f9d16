"""Two short loops that run a gate's generators: `run_sync` with an ``httpx.Client`` and
`run_async` with an ``httpx.AsyncClient``, plus the sellers that keep a connection pool to the
platform and the background runners that register issued challenges and refresh endpoint terms (a
daemon thread for sync apps, a task for async apps).

The sellers hand their requests straight to an httpx transport: on the paid path an httpx client's
URL merging, cookie jar, auth and redirect handling cost more CPU than the exchange itself (about
100 µs against 40 µs per call, measured with a transport that answers at once). When no transport is
given and the environment names a proxy (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, with
``NO_PROXY``), they go through an httpx client instead, which honours it."""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import threading
import urllib.request
from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

import httpx

from x402mw._version import __version__
from x402mw.errors import ConfigurationError, PlatformError
from x402mw.protocol import bounded_json
from x402mw.seller.decisions import ComputeAmount, PlatformCall, PlatformReply
from x402mw.seller.gate import PaymentGate
from x402mw.transport import KeepAliveTransport

__all__ = ["AsyncSeller", "SyncSeller", "run_async", "run_sync"]

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
    return PlatformReply(response.status_code, data, response.headers.get("Request-Id"))


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
        content = None
        if call.json is not None:
            content = json.dumps(call.json, separators=(",", ":")).encode()
            headers = [*headers, (b"Content-Type", b"application/json")]
        return httpx.Request(
            call.method,
            self._base + call.path,
            headers=headers,
            content=content,
            extensions={"timeout": httpx.Timeout(call.timeout).as_dict()},
        )


def _drive_sync(gen: Generator[Any, Any, T], send: Callable[[PlatformCall], PlatformReply]) -> T:
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            command = gen.throw(error) if error is not None else gen.send(value)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        value, error = None, None
        if isinstance(command, PlatformCall):
            try:
                value = send(command)
            except httpx.HTTPError as exc:
                error = _unreachable(exc)
        elif isinstance(command, ComputeAmount):
            value = command.callback(command.request)
            if inspect.isawaitable(value):
                if hasattr(value, "close"):
                    value.close()
                raise ConfigurationError("an async amount callback cannot be used with a sync framework")


async def _drive_async(gen: Generator[Any, Any, T], send: Callable[[PlatformCall], Awaitable[PlatformReply]]) -> T:
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            command = gen.throw(error) if error is not None else gen.send(value)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        value, error = None, None
        if isinstance(command, PlatformCall):
            try:
                value = await send(command)
            except httpx.HTTPError as exc:
                error = _unreachable(exc)
        elif isinstance(command, ComputeAmount):
            value = command.callback(command.request)
            if inspect.isawaitable(value):
                value = await value


def run_sync(gen: Generator[Any, Any, T], client: httpx.Client) -> T:
    """Run a gate generator to its end with a synchronous HTTP client (its ``base_url`` the platform's)."""

    def send(call: PlatformCall) -> PlatformReply:
        return _reply(client.request(call.method, call.path, json=call.json, timeout=call.timeout))

    return _drive_sync(gen, send)


async def run_async(gen: Generator[Any, Any, T], client: httpx.AsyncClient) -> T:
    """Run a gate generator to its end with an asynchronous HTTP client (its ``base_url`` the platform's)."""

    async def send(call: PlatformCall) -> PlatformReply:
        return _reply(await client.request(call.method, call.path, json=call.json, timeout=call.timeout))

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
            return _reply(self._client.request(call.method, call.path, json=call.json, timeout=call.timeout))
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
    """A gate with a kept-alive async connection pool and a background task (ASGI, Starlette,
    Django async).

    The platform is reached through :class:`~x402mw.transport.KeepAliveTransport` unless
    ``transport`` says otherwise (or, without one, the environment names a proxy)."""

    def __init__(self, gate: PaymentGate, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.gate = gate
        self._requests = _Requests(gate)
        self._client: httpx.AsyncClient | None = None
        self._transport: httpx.AsyncBaseTransport | None = None
        if transport is None and _environment_names_a_proxy():
            self._client = httpx.AsyncClient(base_url=gate.platform_url, headers=_headers(gate))
        else:
            self._transport = transport or KeepAliveTransport()
        self._task: asyncio.Task[None] | None = None

    async def _send(self, call: PlatformCall) -> PlatformReply:
        if self._transport is None:
            assert self._client is not None
            return _reply(await self._client.request(call.method, call.path, json=call.json, timeout=call.timeout))
        response = await self._transport.handle_async_request(self._requests.build(call))
        try:
            await response.aread()
        finally:
            await response.aclose()
        return _reply(response)

    async def run(self, gen: Generator[Any, Any, T]) -> T:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._loop(), name="x402mw-seller")
        return await _drive_async(gen, self._send)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(BACKGROUND_INTERVAL)
            await self.flush()

    async def flush(self) -> None:
        """Run background work now (register issued challenges, refresh stale terms)."""
        if self.gate.has_background_work:
            try:
                await _drive_async(self.gate.background(), self._send)
            except Exception:
                logger.exception("x402mw background work failed")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, RuntimeError):
                logger.debug("background task stopped")
            self._task = None
        await self.flush()
        if self._client is not None:
            await self._client.aclose()
        if self._transport is not None:
            await self._transport.aclose()
