"""The HTTP metrics middleware on a real Starlette app: a bounded label set, every answer counted."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client import REGISTRY
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from x402mw.platform.http.errors import RequestIdMiddleware
from x402mw.platform.metrics import MetricsMiddleware

pytestmark = pytest.mark.anyio


async def ok(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


async def boom(request: Request) -> PlainTextResponse:
    raise RuntimeError("a handler bug")


def _app() -> Starlette:
    return Starlette(
        routes=[
            Mount("/v1", routes=[Route("/things/{thing_id}", ok, methods=["GET"]), Route("/health", ok)]),
            Route("/healthz", ok),
            Route("/boom", boom),
        ],
        middleware=[Middleware(MetricsMiddleware), Middleware(RequestIdMiddleware)],
    )


def _count(method: str, route: str, status: int) -> float:
    labels = {"method": method, "route": route, "status": str(status)}
    return REGISTRY.get_sample_value("x402mw_http_requests_total", labels) or 0.0


def _timed(method: str, route: str) -> float:
    labels = {"method": method, "route": route}
    return REGISTRY.get_sample_value("x402mw_http_request_duration_seconds_count", labels) or 0.0


async def test_answers_are_counted_by_route_template_method_and_status() -> None:
    checks = [
        ("GET", "/v1/things/{thing_id}", 200),
        ("POST", "/v1/things/{thing_id}", 405),
        ("GET", "/v1/health", 200),
        ("GET", "/healthz", 200),
        ("GET", "/boom", 500),
        ("GET", "<unmatched>", 404),
        ("other", "/healthz", 405),
    ]
    before = {check: _count(*check) for check in checks}
    timed_before = _timed("GET", "/v1/things/{thing_id}")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=_app()), base_url="http://test") as client:
        for thing in ("a1", "b2", "c3"):  # three ids, one template
            assert (await client.get(f"/v1/things/{thing}")).status_code == 200
        assert (await client.post("/v1/things/a1")).status_code == 405
        assert (await client.get("/v1/health")).status_code == 200  # one endpoint on two paths,
        assert (await client.get("/healthz")).status_code == 200  # told apart by path
        assert (await client.get("/boom")).status_code == 500
        assert (await client.get("/no/such/page")).status_code == 404
        assert (await client.get("/v1/no/such/page")).status_code == 404  # inside a mount, matching nothing
        assert (await client.request("BREW", "/healthz")).status_code == 405  # a made-up method
    after = {check: _count(*check) for check in checks}
    assert {check: after[check] - before[check] for check in checks} == {
        ("GET", "/v1/things/{thing_id}", 200): 3,
        ("POST", "/v1/things/{thing_id}", 405): 1,
        ("GET", "/v1/health", 200): 1,
        ("GET", "/healthz", 200): 1,
        ("GET", "/boom", 500): 1,
        ("GET", "<unmatched>", 404): 2,
        ("other", "/healthz", 405): 1,
    }
    assert _count("BREW", "/healthz", 405) == 0
    assert _count("GET", "/v1/things/a1", 200) == 0  # no label per id
    assert _timed("GET", "/v1/things/{thing_id}") - timed_before == 3


async def test_non_http_scopes_pass_through() -> None:
    seen: list[str] = []

    async def inner(scope: dict[str, object], receive: object, send: object) -> None:
        seen.append(str(scope["type"]))

    middleware = MetricsMiddleware(inner)  # type: ignore[arg-type]

    async def receive() -> dict[str, object]:
        return {"type": "lifespan.startup"}

    async def send(message: object) -> None:
        return None

    await middleware({"type": "lifespan"}, receive, send)  # type: ignore[arg-type]
    assert seen == ["lifespan"]
