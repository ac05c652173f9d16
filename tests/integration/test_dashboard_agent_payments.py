"""Agent payments in the dashboard: an endpoint's page once it has settled payments, the payments list
and the overview counting them with orders, and an agent payment's own page (issue 36)."""

from __future__ import annotations

import asyncio
import re
import uuid
from typing import Any

import httpx
import pytest

from tests.dashboard_fixtures import PASSWORD, ROLES, Team
from tests.harness import Deployment, PlatformHarness
from tests.sellers import asgi_transport, starlette_app
from x402mw.client import X402Auth
from x402mw.platform.services.dashboard_users import create_user
from x402mw.protocol import decode_settlement_response

pytestmark = pytest.mark.anyio


def _team_of(harness: PlatformHarness, merchant_id: str, api_key: str) -> Team:
    """Dashboard users of each role for the merchant."""
    tag = uuid.uuid4().hex[:8]
    users = {
        role: harness.server.call(
            lambda p, role=role: create_user(p.engine, merchant_id, f"{role}-{tag}@shop.test", PASSWORD, role)
        )
        for role in ROLES
    }
    return Team(harness, merchant_id, api_key, users)


async def _settle(deployment: Deployment, times: int) -> list[str]:
    """``times`` paid requests of an agent through a seller app; their transaction hashes."""
    app = starlette_app(deployment.api_key, deployment.harness.url, deployment.endpoint_id)
    auth = X402Auth(deployment.agent, max_amount="0.05")
    hashes = []
    async with httpx.AsyncClient(
        transport=asgi_transport(app), base_url="http://testserver", auth=auth, timeout=60
    ) as client:
        for _ in range(times):
            response = await client.get("/weather")
            assert response.status_code == 200, response.text
            hashes.append(decode_settlement_response(response.headers["PAYMENT-RESPONSE"]).transaction)
    return hashes


@pytest.fixture
async def paid(dev_platform: PlatformHarness) -> tuple[Deployment, Team, list[str]]:
    """A merchant whose endpoint has three settled agent payments (0.01 USDC each), and its team."""
    deployment = await asyncio.to_thread(dev_platform.deploy)
    hashes = await _settle(deployment, 3)
    return deployment, _team_of(dev_platform, deployment.merchant_id, deployment.api_key), hashes


async def test_the_endpoint_page_renders_with_settled_payments(paid: tuple[Deployment, Team, list[str]]) -> None:
    """It answered 500 (a naive settled_at from SQLite against the clock's aware month start)."""
    deployment, team, hashes = paid
    with team.sign_in("viewer") as client:
        page = client.get(f"/dashboard/agents/{deployment.endpoint_id}")
        listed = client.get("/dashboard/agents")
    assert page.status_code == 200, page.text
    assert page.headers["content-type"].startswith("text/html")
    assert "3 settled, 0.03 USDC" in page.text
    assert all(h in page.text for h in hashes)
    assert listed.status_code == 200 and "0.03" in listed.text


async def test_the_overview_counts_agent_payments(paid: tuple[Deployment, Team, list[str]]) -> None:
    _, team, _ = paid
    with team.sign_in("viewer") as client:
        page = client.get("/dashboard/").text
    assert "No money yet" not in page
    assert "3 payments in all" in page and "3 agent payments" in page
    assert ": 3 payments, 0.03 USDC</title>" in page  # today's bar
    assert "Agent payments settled to your payout addresses" in page
    assert re.search(r'<td>USDC</td><td class="num">0\.03</td>', page)


async def test_the_payments_list_has_agent_payments_filterable_by_kind(
    paid: tuple[Deployment, Team, list[str]],
) -> None:
    deployment, team, _ = paid
    order = await asyncio.to_thread(team.order)
    with team.sign_in("viewer") as client:
        every = client.get("/dashboard/payments").text
        agents = client.get("/dashboard/payments", params={"kind": "agent"}).text
        orders = client.get("/dashboard/payments", params={"kind": "order"}).text
        subscriptions = client.get("/dashboard/payments", params={"kind": "subscription"}).text
        settled = client.get("/dashboard/payments", params={"status": "settled"}).text
        by_payer = client.get("/dashboard/payments", params={"q": deployment.agent.address}).text
    links = re.compile(r'<a href="/dashboard/payments/([0-9a-f-]{36})">')
    assert len(links.findall(every)) == 4 and order["id"] in every
    assert len(links.findall(agents)) == 3 and order["id"] not in agents and "Weather" in agents
    assert links.findall(orders) == [order["id"]]
    assert links.findall(subscriptions) == [] and "No payments match." in subscriptions
    assert len(links.findall(settled)) == 3 and order["id"] not in settled
    assert links.findall(by_payer) == links.findall(agents)


async def test_the_payments_list_pages_across_kinds(paid: tuple[Deployment, Team, list[str]]) -> None:
    """Three agent payments and three orders, two a page: six distinct entries in three pages."""
    _, team, _ = paid
    for _ in range(3):
        await asyncio.to_thread(team.order, pay=False)
    from x402mw.platform.services.payments import PaymentFilters, list_payments

    async def walk(p: Any) -> list[tuple[str, str]]:
        seen: list[tuple[str, str]] = []
        after = None
        while True:
            page, more = await list_payments(p.engine, team.merchant_id, False, PaymentFilters(), after=after, limit=2)
            seen += [(e.kind, e.id) for e in page]
            if not more:
                return seen
            after = (page[-1].created_at, page[-1].id)

    seen = team.harness.server.call(walk)
    assert len(seen) == 6 == len({i for _, i in seen})
    assert sorted(k for k, _ in seen) == ["agent"] * 3 + ["order"] * 3


async def test_an_agent_payments_page(paid: tuple[Deployment, Team, list[str]]) -> None:
    deployment, team, hashes = paid
    with deployment.api() as api:
        payments = api.get("/agent/payments").json()["data"]
    payment = next(p for p in payments if p["transaction"] == hashes[0])
    with team.sign_in("viewer") as client:
        page = client.get(f"/dashboard/payments/{payment['id']}")
    with team.sign_in("support") as client:
        refund = client.get(f"/dashboard/payments/{payment['id']}/refund")
    assert page.status_code == 200, page.text
    text = page.text
    assert "0.01 USDC" in text and "settled" in text
    assert deployment.agent.address in text or deployment.agent.address.lower() in text
    assert hashes[0] in text
    assert f'href="/dashboard/agents/{deployment.endpoint_id}">Weather</a>' in text
    assert deployment.harness.network in text  # the network
    assert "Settled (UTC)" in text and "not settled" not in text
    assert "&#34;challengeId&#34;" in text  # the signed receipt (its JSON, escaped)
    assert refund.status_code == 404  # agent payments are not refunded from here
    # another merchant's agent payment is not found
    other_id, other_key, _ = deployment.harness.merchant("Other shop")
    with _team_of(deployment.harness, other_id, other_key).sign_in("viewer") as client:
        assert client.get(f"/dashboard/payments/{payment['id']}").status_code == 404
