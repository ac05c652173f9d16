"""`x402mw.tracing`: when the ``OTEL_*`` variables turn it on, that spans take only the attributes
allowed, and, with a tracer provider of the test's, one trace from `X402Auth` through a seller
(Flask over WSGI, Starlette over ASGI) to its settlement call, whose ``traceparent`` the platform
receives. The three processes of a real deployment are in tests/integration/test_tracing.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import flask
import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.fake_platform import API_KEY, FIXED, PLATFORM_URL, FakePlatform
from x402mw import tracing
from x402mw.adapters import asgi, django, wsgi
from x402mw.adapters import flask as flask_adapter
from x402mw.adapters.starlette import PaymentMiddleware, paid
from x402mw.client import Wallet, X402Auth
from x402mw.evm.keys import new_private_key

PARENT = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"


@pytest.mark.parametrize(
    ("environ", "wanted"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "x"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, False),
    ],
)
def test_the_otel_variables_turn_it_on(environ: dict[str, str], wanted: bool) -> None:
    assert tracing.wanted(environ) is wanted


def test_it_is_off_here_and_costs_a_request_nothing_it_could_notice() -> None:
    assert tracing.enabled is False  # the suite runs without OTEL_* variables
    scope = {"type": "http", "method": "GET", "path": "/", "headers": [(b"traceparent", PARENT.encode())]}
    assert asgi.request_view(scope | {"headers": [*scope["headers"], (b"payment-signature", b"x")]}).traceparent is None


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.enable(provider)
    try:
        yield exporter
    finally:
        tracing.disable()
        provider.shutdown()


def test_a_span_takes_only_the_attributes_allowed(spans: InMemorySpanExporter) -> None:
    span = tracing.start("x", payment_id="p1", transaction=None)
    with pytest.raises(KeyError):
        span.set(signature="0x" + "11" * 65)
    with pytest.raises(KeyError):
        span.set(api_key="sk_test_123")
    span.end()
    (finished,) = spans.get_finished_spans()
    assert dict(finished.attributes or {}) == {"x402.payment.id": "p1"}
    assert set(tracing.ATTRIBUTES.values()).isdisjoint({"signature", "key", "email", "api_key"})


def test_each_adapter_reads_the_traceparent_of_a_paid_request(spans: InMemorySpanExporter) -> None:
    scope = {"type": "http", "method": "GET", "path": "/w", "headers": [(b"traceparent", PARENT.encode())]}
    assert asgi.request_view(scope).traceparent is None  # unpaid: not read
    paid_scope = scope | {"headers": [*scope["headers"], (b"payment-signature", b"x")]}
    assert asgi.request_view(paid_scope).traceparent == PARENT
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/w", "HTTP_TRACEPARENT": PARENT, "HTTP_PAYMENT_SIGNATURE": "x"}
    assert wsgi.request_view(environ).traceparent == PARENT

    class DjangoRequest:  # what django.request_view reads of an HttpRequest
        META = environ | {"HTTP_HOST": "testserver"}
        scheme, path, method = "http", "/w", "GET"

    assert django.request_view(DjangoRequest()).traceparent == PARENT  # type: ignore[arg-type]


def _recording(platform: FakePlatform, seen: list[str | None]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/agent/settlements"):
            seen.append(request.headers.get("traceparent"))
        return platform(request)

    return httpx.MockTransport(handle)


def _flask(transport: httpx.BaseTransport) -> flask.Flask:
    app = flask.Flask(__name__)
    app.config.update(X402_API_KEY=API_KEY, X402_PLATFORM_URL=PLATFORM_URL)
    x402 = flask_adapter.X402(app, transport=transport)

    @app.get("/weather")
    @x402.require_payment(FIXED)
    def weather() -> flask.Response:
        return flask.jsonify({"tx": flask.g.x402.transaction})

    return app


def _starlette(transport: httpx.AsyncBaseTransport) -> Starlette:
    @paid(FIXED)
    async def weather(request: Request) -> JSONResponse:
        return JSONResponse({"tx": request.state.x402.transaction})

    middleware = Middleware(PaymentMiddleware, api_key=API_KEY, platform_url=PLATFORM_URL, transport=transport)
    return Starlette(routes=[Route("/weather", weather)], middleware=[middleware])


def _one_trace(spans: InMemorySpanExporter, seen: list[str | None]) -> dict[str, Any]:
    finished = {span.name: span for span in spans.get_finished_spans()}
    pay, settle = finished["x402 pay"], finished["x402 settle"]
    assert pay.context is not None and settle.context is not None and settle.parent is not None
    assert settle.parent.span_id == pay.context.span_id  # the seller's span is the agent's child
    assert settle.context.trace_id == pay.context.trace_id == int("ab" * 16, 16)  # under the caller's trace
    assert seen == [f"00-{settle.context.trace_id:032x}-{settle.context.span_id:016x}-01"]  # to the platform
    assert dict(settle.attributes or {})["x402.scheme"] == "exact"
    assert dict(pay.attributes or {})["x402.transaction.hash"].startswith("0x")
    return dict(settle.attributes or {})


def test_one_trace_from_the_agent_through_a_wsgi_seller(spans: InMemorySpanExporter) -> None:
    seen: list[str | None] = []
    app = _flask(_recording(FakePlatform(), seen))
    auth = X402Auth(Wallet("0x" + new_private_key().hex()))
    with httpx.Client(transport=httpx.WSGITransport(app=app), base_url="http://testserver", auth=auth) as client:
        reply = client.get("/weather", headers={"traceparent": PARENT})
    assert reply.status_code == 200, reply.text
    _one_trace(spans, seen)


@pytest.mark.anyio
async def test_one_trace_from_the_agent_through_an_asgi_seller(spans: InMemorySpanExporter) -> None:
    seen: list[str | None] = []
    app = _starlette(_recording(FakePlatform(), seen))
    auth = X402Auth(Wallet("0x" + new_private_key().hex()))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver", auth=auth) as client:
        reply = await client.get("/weather", headers={"traceparent": PARENT})
    assert reply.status_code == 200, reply.text
    _one_trace(spans, seen)
