"""A lean HTTP/1.1 load generator: ``concurrency`` keep-alive connections on raw asyncio streams (uvloop),
each sending one request after another, for a warm-up and then a measured window.

Run in its own process so that it does not share a core's event loop with the server it drives::

    python -m bench.http_load SPEC_JSON      # prints one JSON object: requests, seconds, latencies, errors

``SPEC_JSON`` gives ``host``, ``port``, ``path``, ``headers`` (name -> value), ``body`` (a template with
``{n}`` for a number unique to each request, used for ids and idempotency keys), ``warmup``,
``seconds``, ``concurrency`` and ``expect`` (the status every response must have); optionally
``method`` (default ``POST``; a ``GET`` sends no body) and ``paths`` (request ``n`` goes to
``paths[n % len(paths)]`` instead of ``path``).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import sys
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["LoadResult", "drive", "percentile"]


@dataclass
class LoadResult:
    requests: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str = ""

    @property
    def per_second(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


def percentile(values: list[float], fraction: float) -> float:
    """The nearest-rank percentile of ``values`` (sorted or not)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(max(1, math.ceil(fraction * len(ordered))), len(ordered)) - 1]


def _request(method: str, path: str, host: str, headers: dict[str, str], body: bytes) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", *(f"{k}: {v}" for k, v in headers.items())]
    if method != "GET":
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body if method != "GET" else b"")


async def drive(spec: dict[str, Any]) -> LoadResult:
    host, port = spec["host"], int(spec["port"])
    method = str(spec.get("method", "POST"))
    paths: list[str] = list(spec.get("paths") or [spec["path"]])
    template: str = spec.get("body", "")
    headers: dict[str, str] = spec["headers"]
    expect = int(spec.get("expect", 200))
    counter = itertools.count()
    result = LoadResult()
    loop = asyncio.get_running_loop()
    start = loop.time() + float(spec["warmup"])
    end = start + float(spec["seconds"])
    expected = f"HTTP/1.1 {expect} ".encode()

    async def connection() -> None:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            while True:
                n = next(counter)
                request_headers = {k: v.replace("{n}", str(n)) for k, v in headers.items()}
                body = template.replace("{n}", str(n)).encode()
                request = _request(method, paths[n % len(paths)], host, request_headers, body)
                sent = time.perf_counter()
                began = loop.time()
                if began >= end:
                    return
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                payload = await reader.readexactly(length)
                took = time.perf_counter() - sent
                if not head.startswith(expected):
                    result.errors += 1
                    if not result.first_error:
                        result.first_error = (head + payload).decode("latin-1")[:1000]
                if start <= began and loop.time() <= end:
                    result.requests += 1
                    result.latencies.append(took)
        finally:
            writer.close()

    await asyncio.gather(*(connection() for _ in range(int(spec["concurrency"]))))
    result.seconds = float(spec["seconds"])
    return result


def main(argv: list[str]) -> None:
    spec = json.loads(argv[0])
    try:
        import uvloop
    except ImportError:  # the default loop still works, only slower
        result = asyncio.run(drive(spec))
    else:
        result = uvloop.run(drive(spec))
    json.dump(
        {
            "requests": result.requests,
            "seconds": result.seconds,
            "errors": result.errors,
            "first_error": result.first_error,
            "latencies": result.latencies,
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main(sys.argv[1:])
