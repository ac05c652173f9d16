"""JSON log lines: the request id of the request being served, access fields, exceptions."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from x402mw.platform.http.errors import RequestIdMiddleware
from x402mw.platform.logs import JsonFormatter, log_config

logger = logging.getLogger("x402mw.tests.logs")


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)


async def served(request: Request) -> PlainTextResponse:
    logger.info("serving %s", request.url.path)
    return PlainTextResponse("ok")


async def broken(request: Request) -> PlainTextResponse:
    raise RuntimeError("a handler bug")


def _read(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


@pytest.mark.anyio
async def test_a_line_written_while_serving_carries_the_request_id_of_the_answer(lines: io.StringIO) -> None:
    errors = io.StringIO()
    error_handler = logging.StreamHandler(errors)
    error_handler.setFormatter(JsonFormatter())
    platform_logger = logging.getLogger("x402mw.platform")
    platform_logger.addHandler(error_handler)
    app = Starlette(
        routes=[Route("/served", served), Route("/broken", broken)], middleware=[Middleware(RequestIdMiddleware)]
    )
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
            first = await client.get("/served")
            second = await client.get("/served")
            failed = await client.get("/broken")
    finally:
        platform_logger.removeHandler(error_handler)
    logger.info("outside any request")
    written = _read(lines)
    assert [line["requestId"] for line in written[:2]] == [first.headers["request-id"], second.headers["request-id"]]
    assert written[0]["message"] == "serving /served" and written[0]["level"] == "INFO"
    assert written[0]["logger"] == "x402mw.tests.logs" and str(written[0]["time"]).endswith("Z")
    assert "requestId" not in written[2]
    (error,) = _read(errors)
    assert failed.status_code == 500 and error["requestId"] == failed.headers["request-id"]
    assert error["level"] == "ERROR" and "RuntimeError: a handler bug" in str(error["exception"])


def test_an_access_line_gets_its_fields() -> None:
    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5000", "POST", "/v1/payment-intents?x=1", "1.1", 201), None,
    )  # fmt: skip
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == '127.0.0.1:5000 - "POST /v1/payment-intents?x=1 HTTP/1.1" 201'
    assert (line["client"], line["method"], line["path"], line["status"]) == (
        "127.0.0.1:5000",
        "POST",
        "/v1/payment-intents?x=1",
        201,
    )


def test_the_configuration_refuses_unknown_formats_and_levels() -> None:
    assert log_config("text") is None
    config = log_config("json", "warning")
    assert config is not None and config["loggers"]["x402mw"]["level"] == "WARNING"
    with pytest.raises(ValueError, match="log format"):
        log_config("xml")
    with pytest.raises(ValueError, match="log level"):
        log_config("json", "loud")
