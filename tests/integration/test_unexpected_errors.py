"""An error nobody anticipated is answered by `RequestIdMiddleware`: logged, a 500 in the envelope
with the request id in the body and the header, and the connection kept for the next request."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from tests.harness import serve_app
from x402mw.platform.http.errors import RequestIdMiddleware, exception_handlers


async def broken(_request: Request) -> JSONResponse:
    raise ZeroDivisionError("a bug in a handler")


async def fine(_request: Request) -> JSONResponse:
    return JSONResponse({"ok": True})


async def broken_midway(_request: Request) -> StreamingResponse:
    async def chunks() -> AsyncIterator[bytes]:
        yield b"partial"
        raise ZeroDivisionError("a bug after the answer began")

    return StreamingResponse(chunks())


@contextlib.contextmanager
def _served() -> Iterator[str]:
    app = Starlette(
        routes=[Route("/broken", broken), Route("/fine", fine), Route("/midway", broken_midway)],
        middleware=[Middleware(RequestIdMiddleware)],
        exception_handlers=exception_handlers,
    )
    with serve_app(app, log_level="critical") as url:
        yield url


def test_an_unexpected_error_is_a_logged_500_with_the_request_id(caplog: pytest.LogCaptureFixture) -> None:
    with _served() as url, httpx.Client(base_url=url, timeout=30) as client:
        reply = client.get("/broken")
        assert reply.status_code == 500
        error = reply.json()["error"]
        assert error["type"] == "api_error" and error["code"] == "internal_error"
        assert error["requestId"].startswith("req_")
        assert error["requestId"] == reply.headers["request-id"]
        assert "ZeroDivisionError" not in reply.text  # no trace for the client
        logged = [r for r in caplog.records if r.name == "x402mw.platform" and error["requestId"] in r.getMessage()]
        assert logged and logged[0].exc_info is not None  # the trace is in the log, under that id
        again = client.get("/fine")
        assert again.status_code == 200 and again.headers["request-id"] != reply.headers["request-id"]


def test_the_connection_outlives_a_500() -> None:
    with _served() as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            stream = sock.makefile("rb")
            for path, status in (("/broken", b"500"), ("/fine", b"200")):  # both on this one connection
                sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                assert stream.readline().split()[1] == status
                length = 0
                while (line := stream.readline()) not in (b"\r\n", b""):
                    name, _, value = line.partition(b":")
                    if name.lower() == b"content-length":
                        length = int(value)
                    assert name.lower() != b"connection" or value.strip().lower() != b"close"
                stream.read(length)


def test_an_error_after_the_answer_began_closes_the_connection() -> None:
    with _served() as url, httpx.Client(base_url=url, timeout=30) as client:
        with pytest.raises(httpx.RemoteProtocolError):
            client.get("/midway")  # a truncated answer must not look complete
        assert client.get("/fine").status_code == 200
