"""The discovery catalogue lists what the seller declared, never what a payer sent (issue 32).

A payer writes its payment payload: its ``extensions`` (a ``bazaar`` declaration among them), its
``resource`` and the URL it asks for. None of it reaches the public catalogue, none of it is
compiled or run (a JSON Schema's ``pattern`` would be a regular expression of the payer's, on the
event loop that serves every merchant), and no amount of it is kept beyond the request."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.harness import Deployment, PlatformHarness
from tests.sellers import asgi_transport
from x402mw.adapters.asgi import PaymentMiddleware
from x402mw.protocol.codec import decode_payment_required, encode_header
from x402mw.protocol.models import PaymentRequirements, ResourceInfo
from x402mw.seller import Discovery, PaidRoute

pytestmark = pytest.mark.anyio
ORIGIN = "http://testserver"

BACKTRACKING = {  # `^(a+)+$` against 30 a's and a "!": about 2**30 steps of the regex engine
    "bazaar": {
        "info": {"input": {"type": "http", "method": "GET"}, "output": {"type": "json", "example": "a" * 30 + "!"}},
        "schema": {
            "type": "object",
            "properties": {
                "input": {"type": "object"},
                "output": {"type": "object", "properties": {"example": {"type": "string", "pattern": "^(a+)+$"}}},
            },
        },
    }
}


def evil_tool(name: str) -> dict[str, Any]:
    """A payer's ``bazaar`` declaration that validates against its own schema: an MCP tool of the
    payer's naming, whose output sends readers elsewhere."""
    return {
        "bazaar": {
            "info": {
                "input": {"type": "mcp", "toolName": name, "inputSchema": {"type": "object"}},
                "output": {"type": "text", "example": "claim your free USDC at https://evil.test/claim"},
            },
            "schema": {"type": "object", "properties": {"input": {"type": "object"}}, "required": ["input"]},
        }
    }


def huge(size: int) -> dict[str, Any]:
    """A payer's ``bazaar`` declaration of about ``size`` characters, of the right shape otherwise."""
    info = {"input": {"type": "http", "method": "GET"}, "output": {"type": "json", "example": "evil " * (size // 5)}}
    return {"bazaar": {"info": info, "schema": {"type": "object", "properties": {"input": {"type": "object"}}}}}


ITEMS = Discovery(query={"q": "socks"}, query_schema={"properties": {"q": {"type": "string"}}}, output={"n": 1})


def seller(deployment: Deployment, items_endpoint: str) -> Any:
    """``GET /weather`` declares nothing; ``GET /items/{item}`` declares its `Discovery` (`ITEMS`)."""

    async def answer(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    app = Starlette(routes=[Route("/weather", answer), Route("/items/{item}", answer)])
    routes = {
        "GET /weather": PaidRoute(deployment.endpoint_id),
        "GET /items/{item}": PaidRoute(items_endpoint, discovery=ITEMS),
    }
    return PaymentMiddleware(app, api_key=deployment.api_key, platform_url=deployment.harness.url, routes=routes)


def items_endpoint(deployment: Deployment) -> str:
    """A second discoverable endpoint of the merchant, on ``{ORIGIN}/items``."""
    with deployment.api() as api:
        body = {
            "name": "Items",
            "resourceUrl": f"{ORIGIN}/items",
            "chainId": deployment.harness.chain.chain_id,
            "currency": "USDC",
            "payoutAddress": deployment.payout,
            "amountMinor": "10000",
            "discoverable": True,
        }
        reply = api.post("/agent/endpoints", json=body)
        assert reply.status_code == 201, reply.text
        return str(reply.json()["endpoint"]["id"])


def make_discoverable(deployment: Deployment) -> None:
    with deployment.api() as api:
        reply = api.patch(f"/agent/endpoints/{deployment.endpoint_id}", json={"discoverable": True})
        assert reply.status_code == 200, reply.text


async def signed(
    client: httpx.AsyncClient,
    deployment: Deployment,
    path: str,
    extensions: dict[str, Any] | None,
    description: str | None = None,
) -> dict[str, str]:
    """The headers of a payment for ``path`` whose payload carries the payer's ``extensions`` (and
    its own description of the resource)."""
    challenge = await client.get(path)
    assert challenge.status_code == 402, challenge.text
    required = decode_payment_required(challenge.headers["PAYMENT-REQUIRED"])
    assert required.resource is not None
    resource = ResourceInfo(url=required.resource.url, description=description)
    payload = deployment.agent.sign_payment(required.accepts[0], resource=resource)
    payload = payload.model_copy(update={"extensions": extensions})
    return {"PAYMENT-SIGNATURE": encode_header(payload)}


async def pay(
    client: httpx.AsyncClient,
    deployment: Deployment,
    path: str,
    extensions: dict[str, Any] | None,
    description: str | None = None,
) -> None:
    paid = await client.get(path, headers=await signed(client, deployment, path, extensions, description))
    assert paid.status_code == 200, paid.text


def facilitator_settlement(deployment: Deployment, extensions: dict[str, Any], description: str | None = None) -> bytes:
    """What a seller on the x402 Foundation's SDK sends to ``/x402/settle``: its terms, and the
    payer's payload as it came."""
    harness = deployment.harness
    requirements = PaymentRequirements.model_validate(
        {
            "scheme": "exact",
            "network": harness.network,
            "asset": harness.usdc,
            "amount": "10000",
            "payTo": deployment.payout,
            "maxTimeoutSeconds": 300,
            "extra": {"name": "USD Coin", "version": "2"},
        }
    )
    resource = ResourceInfo(url=f"{ORIGIN}/weather?city=evil", description=description, mimeType="text/evil")
    payload = deployment.agent.sign_payment(requirements, resource=resource)
    body = {
        "x402Version": 2,
        "paymentPayload": payload.model_copy(update={"extensions": extensions}).to_wire(),
        "paymentRequirements": requirements.to_wire(),
    }
    return json.dumps(body).encode()


async def settle_through_the_facilitator(deployment: Deployment, body: bytes) -> None:
    headers = {"Authorization": f"Bearer {deployment.api_key}", "Content-Type": "application/json"}
    async with httpx.AsyncClient(base_url=deployment.harness.url, headers=headers, timeout=120) as api:
        reply = await api.post("/x402/settle", content=body)
    assert reply.status_code == 200, reply.text
    assert reply.json()["success"] is True, reply.text


def catalogue(harness: PlatformHarness, pay_to: str) -> list[dict[str, Any]]:
    with httpx.Client(base_url=harness.url, timeout=60) as client:
        reply = client.get("/x402/discovery/resources", params={"payTo": pay_to, "limit": 100})
    assert reply.status_code == 200, reply.text
    items: list[dict[str, Any]] = reply.json()["items"]
    return sorted(items, key=lambda item: str(item["resource"]))


class Poller:
    """Requests another merchant's monitoring sends to the platform (``/healthz``, answered by the
    event loop that serves every merchant), from a thread of its own, one every 20 ms whatever became
    of the earlier ones (so that each request sent while the platform stalls shows it), until stopped
    and at least ``at_least`` were sent; their latencies in seconds."""

    def __init__(self, url: str, at_least: int = 200) -> None:
        self.url, self.at_least = url, at_least
        self.latencies: list[float] = []
        self.statuses: list[int] = []
        self._ready, self._stop = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    def __enter__(self) -> Poller:
        self._thread.start()
        assert self._ready.wait(60), "the poller did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(300)
        assert not self._thread.is_alive()

    async def _run(self) -> None:
        async with httpx.AsyncClient(base_url=self.url, timeout=120) as client:
            await client.get("/healthz")  # connected before the measure starts
            self._ready.set()
            sent: list[asyncio.Task[None]] = []
            while not self._stop.is_set() or len(sent) < self.at_least:
                sent.append(asyncio.create_task(self._one(client)))
                await asyncio.sleep(0.02)
            await asyncio.gather(*sent)

    async def _one(self, client: httpx.AsyncClient) -> None:
        start = time.perf_counter()
        reply = await client.get("/healthz")
        self.latencies.append(time.perf_counter() - start)
        self.statuses.append(reply.status_code)

    def p99(self) -> float:
        ranked = sorted(self.latencies)
        return ranked[int(len(ranked) * 0.99) - 1]


async def test_a_payers_extension_neither_stalls_other_merchants_nor_enters_the_catalogue(
    dev_platform: PlatformHarness,
) -> None:
    victim = dev_platform.deploy()
    make_discoverable(victim)
    app = seller(victim, items_endpoint(victim))
    async with httpx.AsyncClient(transport=asgi_transport(app), base_url=ORIGIN, timeout=120) as client:
        # signed beforehand, so that what is measured is what the platform does with them
        weather = await signed(client, victim, "/weather", BACKTRACKING)  # the route declares nothing of its own
        items = await signed(client, victim, "/items/1", BACKTRACKING)  # this one does
        huge_body = facilitator_settlement(victim, huge(900_000))  # a body just under the platform's 1 MiB
        small_body = facilitator_settlement(victim, BACKTRACKING)
        with Poller(dev_platform.url.removesuffix("/v1")) as poller:
            for path, headers in (("/weather", weather), ("/items/1", items)):
                paid = await client.get(path, headers=headers)
                assert paid.status_code == 200, paid.text
            await settle_through_the_facilitator(victim, huge_body)
            await settle_through_the_facilitator(victim, small_body)
    assert set(poller.statuses) == {200}
    assert len(poller.latencies) >= 200
    # A payer's regular expression stalled these for 25 s and more. Unloaded, their p99 is some 50 ms
    # here; a shared machine under heavy load makes the platform's ordinary work alone take 100-400 ms.
    measured = f"p99 {poller.p99():.3f} s, slowest {max(poller.latencies):.3f} s of {len(poller.latencies)}"
    print(f"/healthz while the hostile payments settled: {measured}")  # shown with -s
    assert poller.p99() < 1.0, measured

    listed = catalogue(dev_platform, victim.payout)
    assert [item["resource"] for item in listed] == [f"{ORIGIN}/items", f"{ORIGIN}/weather"]
    items_listed, weather_listed = listed
    assert items_listed["extensions"] == {"bazaar": ITEMS.extension("GET")}  # the seller's declaration
    assert "extensions" not in weather_listed  # the route declared nothing, so nothing is listed
    assert [item["type"] for item in listed] == ["http", "http"]
    assert "(a+)" not in json.dumps(listed) and "evil" not in json.dumps(listed)


async def test_a_payers_bazaar_info_tool_name_and_path_never_enter_the_catalogue(
    dev_platform: PlatformHarness,
) -> None:
    victim = dev_platform.deploy()
    make_discoverable(victim)
    app = seller(victim, items_endpoint(victim))
    async with httpx.AsyncClient(transport=asgi_transport(app), base_url=ORIGIN, timeout=120) as client:
        for tool in ("FREE-USDC-CLAIM-at-evil.test", "FREE-USDC-CLAIM-2-at-evil.test"):
            await pay(client, victim, "/weather?evil=1", evil_tool(tool), description="FREE USDC at evil.test")
        for path in ("/items/evil-path-1", "/items/evil-path-2?evil=2"):
            await pay(client, victim, path, evil_tool("FREE-USDC-CLAIM-3-at-evil.test"))
    evil = facilitator_settlement(victim, evil_tool("FREE-USDC-CLAIM-4-at-evil.test"), "FREE USDC at evil.test")
    await settle_through_the_facilitator(victim, evil)

    listed = catalogue(dev_platform, victim.payout)
    # one row per endpoint, under its own URL: no row per tool a payer named, nor per path it asked for
    assert [(item["resource"], item["type"]) for item in listed] == [
        (f"{ORIGIN}/items", "http"),
        (f"{ORIGIN}/weather", "http"),
    ]
    assert [item["description"] for item in listed] == ["Items", "Weather"]  # the seller's names
    assert listed[0]["extensions"] == {"bazaar": ITEMS.extension("GET")}
    assert "extensions" not in listed[1] and "mimeType" not in listed[1]
    assert "evil" not in json.dumps(listed).lower()
    with httpx.Client(base_url=dev_platform.url) as public:
        for words in ("evil", "FREE-USDC-CLAIM", "claim"):
            found = public.get("/x402/discovery/search", params={"query": words, "payTo": victim.payout})
            assert found.status_code == 200 and found.json()["resources"] == [], found.text
        only_mcp = public.get("/x402/discovery/resources", params={"type": "mcp", "payTo": victim.payout})
        assert only_mcp.json()["items"] == []
