"""``platform serve --workers N``: N server processes on one port, each with a listening socket of
its own (``SO_REUSEPORT``), so that the kernel spreads new connections evenly among them.

uvicorn's own ``--workers`` shares one listening socket, and the process that wakes first accepts
every connection waiting. Keep-alive connections stay where they landed, so under a client that
holds many of them (a load balancer's pool, a busy agent) one process serves most of the traffic
while another idles: 46 and 18 of 64 connections in ``bench_orders``. Where ``SO_REUSEPORT`` does
not balance connections (it does on Linux), uvicorn's workers are used instead.

The supervisor restarts a worker that dies, unless it dies within ``_MIN_LIFETIME`` seconds of
starting (a worker that cannot start would only fail again): then it stops the others and exits
with an error. SIGINT and SIGTERM drain every worker (`x402mw.platform.drain`): each stops taking
requests and finishes those it has, and the supervisor exits once they all have, within the bound
it logs; a second signal, or the bound passing, kills the workers and exits at once. Should the
supervisor itself be killed, the kernel stops the workers.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from multiprocessing.process import BaseProcess
from typing import Any

import uvicorn
from uvicorn.config import LOGGING_CONFIG

from x402mw.platform.drain import Drain, draining_config, serve_draining

logger = logging.getLogger("x402mw.platform")

_MIN_LIFETIME = 10.0  # seconds
_PR_SET_PDEATHSIG = 1
_BACKLOG = 2048
_STOP_MARGIN = 2.0  # seconds beyond the drain bound the supervisor waits for a worker's own exit


def serve_workers(
    app: str,
    *,
    host: str,
    port: int,
    workers: int,
    log_level: str,
    log_config: dict[str, Any] | None = None,
    drain_seconds: float = 25.0,
) -> None:
    """Serve the uvicorn app factory ``app`` ("module:function") from ``workers`` processes, logging
    with ``log_config`` (a ``dictConfig``; None for uvicorn's own), draining within ``drain_seconds``
    on SIGTERM or SIGINT."""
    logs = LOGGING_CONFIG if log_config is None else log_config
    if not sys.platform.startswith("linux") or not hasattr(socket, "SO_REUSEPORT"):
        uvicorn.run(app, factory=True, host=host, port=port, log_level=log_level, workers=workers, log_config=logs)
        return
    # Bound but never listening, this socket holds the port for the workers (the kernel gives new
    # connections only to listening sockets) and turns port 0 into the port they all bind.
    holder = _reuseport_socket(host, port)
    port = holder.getsockname()[1]
    context = multiprocessing.get_context("spawn")
    stop = threading.Event()

    running: list[tuple[BaseProcess, float]] = []

    def kill_workers() -> None:  # in a signal handler or the drain's timer: nothing but signals
        for process, _ in running:
            if process.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGKILL)

    drain = Drain(drain_seconds, begin=stop.set, what="serve", before_exit=kill_workers)
    previous = {sig: signal.signal(sig, drain.handle) for sig in (signal.SIGINT, signal.SIGTERM)}

    def start() -> tuple[BaseProcess, float]:
        args = (app, host, port, log_level, logs, os.getpid(), drain_seconds)
        process = context.Process(target=_worker, args=args, daemon=False)
        process.start()
        return process, time.monotonic()

    running.extend(start() for _ in range(workers))
    failed = False
    try:
        while not stop.wait(0.5):
            for index, (process, started) in enumerate(running):
                if process.is_alive():
                    continue
                if time.monotonic() - started < _MIN_LIFETIME:
                    logger.error("worker %s exited (code %s) as it started; stopping", process.pid, process.exitcode)
                    failed = True
                    stop.set()
                    break
                logger.warning("worker %s exited (code %s); starting another", process.pid, process.exitcode)
                running[index] = start()
    finally:
        for process, _ in running:
            if process.is_alive():
                process.terminate()  # SIGTERM: the worker drains (finishes the requests it has), then exits
        deadline = time.monotonic() + drain_seconds + _STOP_MARGIN
        for process, _ in running:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join()
        drain.cancel()
        holder.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if failed:
        raise SystemExit(1)


def _exit_with(supervisor: int) -> None:
    """Have the kernel send this process SIGTERM when the supervisor dies, even by SIGKILL, so that
    no worker goes on serving the port unsupervised (Linux's ``PR_SET_PDEATHSIG``)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM) != 0:
        logger.warning("worker %s: cannot ask to exit with the supervisor (errno %s)", os.getpid(), ctypes.get_errno())
    if os.getppid() != supervisor:  # the supervisor died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)


def _reuseport_socket(host: str, port: int) -> socket.socket:
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = found[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(address)
    return sock


def _worker(
    app: str, host: str, port: int, log_level: str, log_config: dict[str, Any], supervisor: int, drain_seconds: float
) -> None:
    """One worker process: its own listening socket, then uvicorn until SIGTERM or SIGINT, draining."""
    _exit_with(supervisor)
    sock = _reuseport_socket(host, port)
    sock.listen(_BACKLOG)
    config = uvicorn.Config(app, factory=True, host=host, port=port, log_level=log_level, log_config=log_config)
    serve_draining(draining_config(config, drain_seconds), drain_seconds, sockets=[sock], supervised=True)
