"""Waiting in tests for something another thread, task or process makes true: `eventually` asks a
check again and again until its answer will do, and `eventually_async` does the same in async code.

    order = eventually(lambda: api.get(path).json()["paymentIntent"], until=lambda o: o["status"] == "paid",
                       what="the order to be paid")

A wait that times out fails the test with an `AssertionError` that names what was awaited, the last
answer and the last exception the check raised, so that the failure says where things stood. The
timeouts are bounds, never measurements: generous, since the machines that run the suite are slow
and loaded, while the small interval keeps a passing test quick.

An exception the check raises counts as "not yet" (a server still refusing connections). Where
waiting on is hopeless, as for a process that exited, the check answers true for that too and the
test asserts after the wait:

    eventually(lambda: process.poll() is not None or httpx.get(url).status_code == 200, what=...)
    assert process.poll() is None, log.read_text()

A sleep that lets time pass on purpose (a lease to run out, a clock to move on) is no wait for a
condition, and stays a sleep.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar, overload

import anyio

T = TypeVar("T")

TIMEOUT = 60.0
"""Seconds: the default bound on a wait; a check that is true at all is true well within it."""
INTERVAL = 0.05
"""Seconds between two checks."""

_SHOWN = 2000  # characters of the last answer in a failure's message


class _Wait(Generic[T]):
    """One wait's bookkeeping, shared by the sync and the async loop: the deadline, the last answer
    and exception, and the failure's message."""

    def __init__(self, until: Callable[[T], object], timeout: float, what: str | Callable[[], str]) -> None:
        self.until = until
        self.timeout = timeout
        self.what = what
        self.deadline = time.monotonic() + timeout
        self.answered = False
        self.last: T | None = None
        self.error: Exception | None = None

    def done(self, answer: T) -> bool:
        self.answered, self.last = True, answer
        return bool(self.until(answer))

    def pause(self, interval: float) -> float | None:
        """Seconds to sleep before the next check, or None once the time is up."""
        left = self.deadline - time.monotonic()
        return None if left <= 0 else min(interval, left)

    def failure(self) -> AssertionError:
        what = self.what if isinstance(self.what, str) else self.what()
        lines = [f"timed out after {self.timeout:g} s waiting for {what}"]
        if self.answered:
            shown = repr(self.last)
            lines.append(f"last value: {shown if len(shown) <= _SHOWN else shown[:_SHOWN] + ' …'}")
        if self.error is not None:
            lines.append(f"last exception: {self.error!r}")
        return AssertionError("\n".join(lines))


def eventually(
    check: Callable[[], T],
    *,
    what: str | Callable[[], str],
    until: Callable[[T], object] = bool,
    timeout: float = TIMEOUT,
    interval: float = INTERVAL,
) -> T:
    """Call ``check`` until ``until`` holds for its answer (by default: until the answer is truthy)
    and return that answer; an exception the check raises counts as "not yet".

    ``what`` says what is awaited ("the order to be paid"); a callable is asked only on failure, for
    a description that needs the state at that time (a process's log). The check is called at least
    once, and once more when the time is up. On timeout, raises `AssertionError` with ``what``, the
    last answer and the last exception.
    """
    wait = _Wait(until, timeout, what)
    while True:
        try:
            answer = check()
        except Exception as exc:
            wait.error = exc
        else:
            if wait.done(answer):
                return answer
        pause = wait.pause(interval)
        if pause is None:
            raise wait.failure()
        time.sleep(pause)


@overload
async def eventually_async(
    check: Callable[[], Awaitable[T]],
    *,
    what: str | Callable[[], str],
    until: Callable[[T], object] = ...,
    timeout: float = ...,
    interval: float = ...,
) -> T: ...


@overload
async def eventually_async(
    check: Callable[[], T],
    *,
    what: str | Callable[[], str],
    until: Callable[[T], object] = ...,
    timeout: float = ...,
    interval: float = ...,
) -> T: ...


async def eventually_async(
    check: Callable[[], Any],
    *,
    what: str | Callable[[], str],
    until: Callable[[Any], object] = bool,
    timeout: float = TIMEOUT,
    interval: float = INTERVAL,
) -> Any:
    """`eventually` for async code, under asyncio or trio: ``check`` may be a coroutine function (its
    answer is awaited) or a plain function, and the pauses sleep without blocking the event loop.

    A blocking check (a synchronous HTTP call) belongs in a thread: ``lambda: anyio.to_thread.run_sync(f)``.
    """
    wait: _Wait[Any] = _Wait(until, timeout, what)
    while True:
        try:
            answer = check()
            if inspect.isawaitable(answer):
                answer = await answer
        except Exception as exc:
            wait.error = exc
        else:
            if wait.done(answer):
                return answer
        pause = wait.pause(interval)
        if pause is None:
            raise wait.failure()
        await anyio.sleep(pause)
