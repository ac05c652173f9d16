"""Run the platform in a background thread (uvicorn on loopback): for the demo, tests and benchmarks.

::

    with PlatformServer(settings) as server:
        server.url                         # http://127.0.0.1:<port>/v1
        server.call(lambda platform: ...)  # run a coroutine on the platform's own event loop
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Future
from types import TracebackType
from typing import TypeVar

import uvicorn
from starlette.middleware import Middleware

from x402mw.platform.app import create_app
from x402mw.platform.background import start_platform
from x402mw.platform.clock import Clock
from x402mw.platform.runtime import Platform
from x402mw.platform.settings import PlatformSettings

__all__ = ["PlatformServer", "free_port"]

T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PlatformServer:
    def __init__(
        self,
        settings: PlatformSettings,
        *,
        port: int | None = None,
        clock: Clock | None = None,
        middleware: Sequence[Middleware] = (),
    ) -> None:
        """``middleware``: more ASGI middleware around the app (`create_app`'s)."""
        self.settings = settings
        self.port = port or free_port()
        self.clock = clock
        self.middleware = middleware
        self.platform: Platform | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready: Future[None] = Future()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> PlatformServer:
        self.settings.serve_at(self.url)
        self._thread = threading.Thread(target=self._run, name="x402mw-platform", daemon=True)
        self._thread.start()
        self._ready.result(timeout=120)
        return self

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:
            if not self._ready.done():
                self._ready.set_exception(exc)
        finally:
            loop.close()

    async def _serve(self) -> None:
        self.platform = await start_platform(self.settings, clock=self.clock)
        try:
            config = uvicorn.Config(
                create_app(platform=self.platform, middleware=self.middleware),
                host="127.0.0.1",
                port=self.port,
                log_level="warning",
                lifespan="off",
                access_log=False,
            )
            self._server = uvicorn.Server(config)
            serving = asyncio.get_running_loop().create_task(self._server.serve())
            while not self._server.started:
                if serving.done():
                    await serving
                    raise RuntimeError("the platform server stopped during start-up")
                await asyncio.sleep(0.01)
            self._ready.set_result(None)
            await serving
        finally:
            await self.platform.aclose()

    def call(self, action: Callable[[Platform], Awaitable[T]], timeout: float = 60) -> T:
        """Run ``action(platform)`` on the platform's event loop and return its result."""
        assert self._loop is not None and self.platform is not None, "the server is not running"
        platform = self.platform

        async def run() -> T:
            return await action(platform)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout)

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=30)

    def __enter__(self) -> PlatformServer:
        return self.start()

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"PlatformServer(url={self.url!r})"
