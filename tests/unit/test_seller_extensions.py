"""The seller core's declarations, without a platform: the bazaar extension (HTTP and MCP) as the
x402 Foundation's validator reads it, /.well-known/x402, and the 402's content negotiation."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from x402.extensions.bazaar.facilitator import validate_discovery_extension
from x402.extensions.bazaar.types import parse_discovery_extension

from x402mw.adapters.asgi import PaymentMiddleware as ASGIPaymentMiddleware
from x402mw.adapters.starlette import PaymentMiddleware, paid
from x402mw.errors import ConfigurationError
from x402mw.seller import Discovery, PaidRoute, Paywall, SignIn

pytestmark = pytest.mark.anyio
ENDPOINT = {
    "id": "ep1",
    "name": "Weather",
    "resourceUrl": "http://testserver/weather",
    "network": "eip155:84532",
    "chainId": 84532,
    "currency": "USDC",
    "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
    "assetName": "USDC",
    "assetVersion": "2",
    "decimals": 6,
    "payoutAddress": "0x" + "bb" * 20,
    "pricingMode": "fixed",
    "amountMinor": "1500",
    "releasePolicy": "included",
    "maxTimeoutSeconds": 300,
}


def _platform(request: httpx.Request) -> httpx.Response:
    if request.url.path.endswith("/agent/endpoints/ep1"):
        return httpx.Response(200, json={"endpoint": ENDPOINT})
    return httpx.Response(404, json={"error": {"type": "invalid_request_error", "code": "resource_missing"}})


@pytest.mark.parametrize(
    ("declared", "method"),
    [
        (Discovery(query={"city": "Paris"}, output={"forecast": "sunny"}), "GET"),
        (Discovery(body={"text": "hi"}, body_schema={"properties": {"text": {"type": "string"}}}), "POST"),
        (Discovery.tool("forecast", {"type": "object", "properties": {"city": {"type": "string"}}}), "POST"),
    ],
)
def test_declarations_validate_with_the_foundation_sdk(declared: Discovery, method: str) -> None:
    parsed = parse_discovery_extension(declared.extension(method))
    assert validate_discovery_extension(parsed).valid
    assert parsed.info.input.type == declared.kind


def test_bad_declarations_are_refused_at_once() -> None:
    with pytest.raises(ConfigurationError) as raised:
        Discovery(query=["city"], output={1, 2})  # type: ignore[arg-type]
    assert len(raised.value.problems) == 2
    with pytest.raises(ConfigurationError):
        SignIn(origin="https://api.example.com/path")
    with pytest.raises(ConfigurationError):
        SignIn(origin="https://api.example.com", duration=0)
    with pytest.raises(ConfigurationError):
        Paywall(logo="https://cdn.example/logo.png")  # nothing from another host


def _app(**options: Any) -> Starlette:
    @paid("ep1", discovery=Discovery(query={"city": "Paris"}), sign_in=SignIn(origin="https://api.example"))
    async def weather(request: Request) -> JSONResponse:
        return JSONResponse({"forecast": "sunny"})

    async def plain(request: Request) -> JSONResponse:
        return JSONResponse({"plain": True})

    transport = httpx.MockTransport(_platform)
    middleware = Middleware(
        PaymentMiddleware, api_key="sk_test_x", transport=transport, routes={"/cheap": PaidRoute("ep1")}, **options
    )
    return Starlette(
        routes=[Route("/weather", weather), Route("/cheap", plain), Route("/.well-known/x402", plain)],
        middleware=[middleware],
    )


async def test_the_well_known_manifest_lists_the_paid_routes() -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(_app()), base_url="http://testserver") as client:
        answer = await client.get("/.well-known/x402")
        assert answer.status_code == 200
        manifest = answer.json()
        assert manifest["x402Version"] == 2
        items = {item["resource"]["url"]: item for item in manifest["items"]}
        assert set(items) == {"http://testserver/cheap", "http://testserver/weather"}
        weather = items["http://testserver/weather"]
        assert weather["input"] == {"method": "GET", "queryParams": {"city": "Paris"}, "routeTemplate": "/weather"}
        assert weather["requires"] == ["sign-in-with-x"]
        assert weather["accepts"][0]["amount"] == "1500" and "seal" not in weather["accepts"][0]["extra"]
        assert (await client.get("/.well-known/x402.json")).json()["items"] == manifest["items"]
    off = httpx.ASGITransport(_app(well_known=False))
    async with httpx.AsyncClient(transport=off, base_url="http://testserver") as client:
        assert (await client.get("/.well-known/x402")).json() == {"plain": True}  # the app's own route


async def test_the_402_is_the_same_json_for_agents_and_a_page_for_browsers() -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(_app()), base_url="http://testserver") as client:
        for path in ("/weather", "/cheap"):
            agent = await client.get(path, headers={"Accept": "application/json"})
            assert agent.status_code == 402 and agent.headers["content-type"] == "application/json"
            required = json.loads(base64.b64decode(agent.headers["PAYMENT-REQUIRED"]))
            assert agent.json() == required
            browser = await client.get(path, headers={"Accept": "text/html,application/xhtml+xml"})
            assert browser.status_code == 402 and browser.headers["content-type"].startswith("text/html")
            assert "0.0015" in browser.text and "PAYMENT-REQUIRED" in browser.headers
        required = json.loads(base64.b64decode(agent.headers["PAYMENT-REQUIRED"]))
        assert set(required["extensions"]) == {"payment-identifier"}  # what every 402 declares, no more
        weather = json.loads(base64.b64decode((await client.get("/weather")).headers["PAYMENT-REQUIRED"]))
        offered = weather["extensions"]["sign-in-with-x"]
        assert offered["info"]["domain"] == "api.example" and offered["info"]["uri"] == "https://api.example/weather"
        assert offered["supportedChains"] == [{"chainId": "eip155:84532", "type": "eip191"}]
        assert weather["extensions"]["bazaar"]["info"]["input"]["method"] == "GET"
    off = httpx.ASGITransport(_app(paywall=Paywall(enabled=False)))
    async with httpx.AsyncClient(transport=off, base_url="http://testserver") as client:
        browser = await client.get("/weather", headers={"Accept": "text/html"})
        assert browser.headers["content-type"] == "application/json"


@pytest.mark.parametrize("plain_asgi", [False, True])
async def test_published_urls_are_under_the_configured_origin_whatever_the_host(plain_asgi: bool) -> None:
    async def inner(scope: Any, receive: Any, send: Any) -> None:
        await JSONResponse({"plain": True})(scope, receive, send)

    def app(**options: Any) -> Any:
        if not plain_asgi:
            return _app(**options)
        transport = httpx.MockTransport(_platform)
        return ASGIPaymentMiddleware(
            inner, api_key="sk_test_x", transport=transport, routes={"/cheap": "ep1"}, **options
        )

    evil = {"Host": "evil.test"}
    transport = httpx.ASGITransport(app(origin="https://shop.example:8443"))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        listed = await client.get("/.well-known/x402", headers=evil)
        challenge = await client.get("/cheap?x=1", headers=evil)
    urls = {item["resource"]["url"] for item in listed.json()["items"]}
    assert "https://shop.example:8443/cheap" in urls and all(u.startswith("https://shop.example:8443/") for u in urls)
    assert listed.headers["Cache-Control"] == "public, max-age=60" and "Vary" not in listed.headers
    assert challenge.status_code == 402 and challenge.json()["resource"]["url"] == "https://shop.example:8443/cheap?x=1"

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app()), base_url="http://testserver") as client:
        listed = await client.get("/.well-known/x402", headers=evil)
    assert {item["resource"]["url"] for item in listed.json()["items"]} >= {"http://evil.test/cheap"}
    assert listed.headers["Cache-Control"] == "private, max-age=60" and listed.headers["Vary"] == "Host"


def test_the_paywall_names_the_network() -> None:
    from x402mw.seller.paywall import network_text

    assert network_text("eip155:8453") == "on Base (eip155:8453)"
    assert network_text("eip155:84532") == "on Base Sepolia (eip155:84532)"
    assert network_text("eip155:987654321987") == "on network eip155:987654321987"
