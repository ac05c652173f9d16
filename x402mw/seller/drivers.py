"""Two short loops that run a gate's generators: `run_sync` with an ``httpx.Client`` and
`run_async` with an ``httpx.AsyncClient``, plus the background runners that register issued
challenges and refresh endpoint terms (a daemon thread for sync apps, a task for async apps)."""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from collections.abc import Generator
from typing import Any, TypeVar

import httpx

from x402mw import __version__
from x402mw.errors import ConfigurationError, PlatformError
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
        data = response.json()
    except ValueError:
        data = None
    return PlatformReply(response.status_code, data, response.headers.get("Request-Id"))


def _unreachable(exc: Exception) -> PlatformError:
    return PlatformError(f"payment platform unreachable: {type(exc).__name__}", status=0)


def run_sync(gen: Generator[Any, Any, T], client: httpx.Client) -> T:
    """Run a gate generator to its end with a synchronous HTTP client."""
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
                value = _reply(client.request(command.method, command.path, json=command.json, timeout=command.timeout))
            except httpx.HTTPError as exc:
                error = _unreachable(exc)
        elif isinstance(command, ComputeAmount):
            value = command.callback(command.request)
            if inspect.isawaitable(value):
                if hasattr(value, "close"):
                    value.close()
                raise ConfigurationError("an async amount callback cannot be used with a sync framework")


async def run_async(gen: Generator[Any, Any, T], client: httpx.AsyncClient) -> T:
    """Run a gate generator to its end with an asynchronous HTTP client."""
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
                value = _reply(
                    await client.request(command.method, command.path, json=command.json, timeout=command.timeout)
                )
            except httpx.HTTPError as exc:
                error = _unreachable(exc)
        elif isinstance(command, ComputeAmount):
            value = command.callback(command.request)
            if inspect.isawaitable(value):
                value = await value


class SyncSeller:
    """A gate with a kept-alive sync HTTP client and a background thread (Flask, Django, WSGI)."""

    def __init__(self, gate: PaymentGate, *, transport: httpx.BaseTransport | None = None) -> None:
        self.gate = gate
        self.client = httpx.Client(
            base_url=gate.platform_url,
            headers=_headers(gate),
            transport=transport,
            limits=httpx.Limits(max_keepalive_connections=64, max_connections=256),
        )
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._start_lock = threading.Lock()

    def run(self, gen: Generator[Any, Any, T]) -> T:
        self._ensure_background()
        return run_sync(gen, self.client)

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
                run_sync(self.gate.background(), self.client)
            except Exception:
                logger.exception("x402mw background work failed")

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.flush()
        self.client.close()


class AsyncSeller:
    """A gate with a kept-alive async HTTP client and a background task (ASGI, Starlette, Django async).

    The client reaches the platform through :class:`~x402mw.transport.KeepAliveTransport` unless
    ``transport`` says otherwise."""

    def __init__(self, gate: PaymentGate, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.gate = gate
        self.client = httpx.AsyncClient(
            base_url=gate.platform_url, headers=_headers(gate), transport=transport or KeepAliveTransport()
        )
        self._task: asyncio.Task[None] | None = None

    async def run(self, gen: Generator[Any, Any, T]) -> T:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._loop(), name="x402mw-seller")
        return await run_async(gen, self.client)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(BACKGROUND_INTERVAL)
            await self.flush()

    async def flush(self) -> None:
        """Run background work now (register issued challenges, refresh stale terms)."""
        if self.gate.has_background_work:
            try:
                await run_async(self.gate.background(), self.client)
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
        await self.client.aclose()
