"""Draining on SIGTERM: the first signal asks a process to stop taking work and finish what it has,
within a bound it logs; a second signal, or the bound passing, ends it at once.

Ending at once loses nothing: a payment is recorded before its transfer is sent, and what a stopped
process left in flight (a settlement submitted, a refund, a webhook delivery) is taken over by the
next process to look (after ``takeover_seconds``).

>>> drain = Drain(25.0, begin=server_should_exit)  # doctest: +SKIP
>>> signal.signal(signal.SIGTERM, drain.handle)  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

logger = logging.getLogger("x402mw.platform")

FORCED_EXIT_STATUS = 1


class Drain:
    """A signal handler: the first call logs the bound and calls ``begin`` (which must only set a flag
    or schedule work: it runs in a signal handler); the next, or ``bound`` seconds later, exits the
    process with `FORCED_EXIT_STATUS` without running anything more."""

    def __init__(
        self,
        bound: float,
        *,
        begin: Callable[[], object],
        what: str = "process",
        before_exit: Callable[[], object] | None = None,
    ) -> None:
        self.bound = bound
        self._begin = begin
        self._what = what
        self._before_exit = before_exit  # what must end with the process (a supervisor's workers)
        self._timer: threading.Timer | None = None

    @property
    def draining(self) -> bool:
        return self._timer is not None

    def handle(self, signum: int, frame: FrameType | None = None) -> None:
        name = signal.Signals(signum).name
        if self._timer is not None:
            logger.warning("%s: %s again, exiting now; payments in flight stay recoverable", self._what, name)
            self._exit_now()
        logger.warning(
            "%s: %s, draining: no new work, finishing what is in flight; exits within %g s (%s again exits at once)",
            self._what,
            name,
            self.bound,
            name,
        )
        self._timer = threading.Timer(self.bound, self._overdue)
        self._timer.daemon = True
        self._timer.start()
        self._begin()

    def _overdue(self) -> None:
        logger.warning(
            "%s: still draining after %g s, exiting now; what is in flight stays recoverable", self._what, self.bound
        )
        self._exit_now()

    def cancel(self) -> None:
        """The process stopped in time: the bound no longer applies."""
        if self._timer is not None:
            self._timer.cancel()

    def _exit_now(self) -> None:
        if self._before_exit is not None:
            self._before_exit()
        _exit_now()


def _exit_now() -> None:
    for handler in logging.getLogger().handlers + logging.getLogger("x402mw.platform").handlers:
        handler.flush()
    os._exit(FORCED_EXIT_STATUS)


def draining_config(config: Any, bound: float) -> Any:
    """``config`` (a ``uvicorn.Config``) with its graceful shutdown inside ``bound``: the requests in
    hand get all but two seconds of it, the rest is for the app's shutdown."""
    config.timeout_graceful_shutdown = max(1, int(bound) - 2)
    return config


def serve_draining(config: Any, bound: float, *, sockets: list[Any] | None = None, supervised: bool = False) -> None:
    """Run uvicorn with ``config`` until SIGTERM or SIGINT, draining as `Drain` does: uvicorn stops
    listening and waits for the requests it has (``config.timeout_graceful_shutdown``, at most
    ``bound``), then the app's shutdown closes the platform. ``supervised`` (a worker of
    ``serve --workers``): SIGINT is left to the supervisor, which sends SIGTERM (a Ctrl-C reaches the
    whole process group: counted twice, it would end the worker at once)."""
    import uvicorn

    class DrainingServer(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            if supervised and sig == signal.SIGINT:
                return
            drain.handle(sig, frame)

    server = DrainingServer(config)
    drain = Drain(bound, begin=lambda: setattr(server, "should_exit", True), what="serve")
    try:
        server.run(sockets=sockets)
    finally:
        drain.cancel()
