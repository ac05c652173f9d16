"""Helpers for the dashboard's tests: a merchant with dashboard users of each role, sign-in over
HTTP, a paid test order, and the CSRF token a page carries."""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
from sqlalchemy import select

from tests.harness import PlatformHarness
from x402mw.platform.db import tables
from x402mw.platform.services.dashboard_users import User, create_user, totp_code

PASSWORD = "correct horse battery staple"
ROLES = ("owner", "developer", "support", "viewer")
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')
_SECRET = re.compile(r'id="totp-secret">([A-Z2-7]+)<')
_RECOVERY = re.compile(r"<li><code>([0-9a-f]{5}-[0-9a-f]{5})</code></li>")


@dataclass
class Team:
    """A merchant, its test API key, and one dashboard user per role (emails ``<role>-<n>@...``)."""

    harness: PlatformHarness
    merchant_id: str
    api_key: str
    users: dict[str, User]

    @property
    def origin(self) -> str:
        return self.harness.url.removesuffix("/v1")

    def api(self) -> httpx.Client:
        return httpx.Client(base_url=self.harness.url, headers={"Authorization": f"Bearer {self.api_key}"}, timeout=60)

    def browser(self) -> httpx.Client:
        return httpx.Client(base_url=self.origin, timeout=60, follow_redirects=False)

    @contextlib.contextmanager
    def sign_in(self, role: str = "owner") -> Iterator[httpx.Client]:
        with self.browser() as client:
            reply = post_sign_in(client, self.users[role].email, PASSWORD)
            assert reply.status_code == 303, reply.text
            yield client

    def order(self, *, pay: bool = True, **fields: Any) -> dict[str, Any]:
        with self.api() as api:
            body = {"orderId": f"o-{uuid.uuid4()}", "amount": "12.5", "currency": "USDC", **fields}
            reply = api.post("/payment-intents", json=body)
            assert reply.status_code == 201, reply.text
            order: dict[str, Any] = reply.json()["paymentIntent"]
            if pay:
                path = f"/sandbox/payment-intents/{order['id']}/simulate-payment"
                paid = api.post(path, json={"scenario": "exact"})
                assert paid.status_code == 200, paid.text
        return order


def make_team(harness: PlatformHarness, name: str = "Dashboard shop") -> Team:
    merchant_id, key, _ = harness.merchant(name)
    tag = uuid.uuid4().hex[:8]
    users = {
        role: harness.server.call(
            lambda p, role=role: create_user(p.engine, merchant_id, f"{role}-{tag}@shop.test", PASSWORD, role)
        )
        for role in ROLES
    }
    return Team(harness, merchant_id, key, users)


def audited(team: Team, action: str) -> list[Any]:
    """The merchant's audit log rows of ``action``."""
    t = tables.dashboard_audit

    async def read(p: Any) -> list[Any]:
        async with p.engine.connect() as conn:
            query = select(t).where(t.c.merchant_id == team.merchant_id, t.c.action == action)
            return list(await conn.execute(query))

    return team.harness.server.call(read)


def enable_two_factor(client: httpx.Client) -> tuple[str, int, list[str]]:
    """Turn on two-factor sign-in for the signed-in user: its TOTP secret, the time step of the code
    that turned it on (used: the next code to use is of the step after), its recovery codes."""
    home = client.get("/dashboard/account")
    started = client.post("/dashboard/account/two-factor", data={"csrf": csrf_of(home.text), "action": "start"})
    assert started.status_code == 303, started.text
    setup = client.get("/dashboard/account?setup=1").text
    found = _SECRET.search(setup)
    assert found is not None, "the set-up page shows no secret"
    step = int(time.time() // 30)
    data = {"csrf": csrf_of(setup), "action": "confirm", "code": totp_code(found.group(1), step)}
    on = client.post("/dashboard/account/two-factor", data=data)
    assert on.status_code == 200, on.text
    return found.group(1), step, _RECOVERY.findall(on.text)


def csrf_of(html: str) -> str:
    found = _CSRF.search(html)
    assert found is not None, "the page has no CSRF field"
    return found.group(1)


def post_sign_in(client: httpx.Client, email: str, password: str) -> httpx.Response:
    """Open the sign-in page (for its form token, as a browser does) and send the form."""
    page = client.get("/dashboard/sign-in")
    return client.post("/dashboard/sign-in", data={"csrf": csrf_of(page.text), "email": email, "password": password})
