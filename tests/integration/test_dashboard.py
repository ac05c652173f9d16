"""The dashboard over HTTP, on SQLite: sign-in (throttled), sessions (idle and
absolute expiry, revocation), CSRF on every form, each role's limits, another merchant's objects as
404 on every route, escaping, invitations, two-factor, the API request log, and the audit log of
each refusal."""

from __future__ import annotations

import re
import time
import uuid
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update

from tests.dashboard_fixtures import PASSWORD, Team, csrf_of, make_team, post_sign_in
from tests.harness import PlatformHarness
from tests.waiting import eventually
from x402mw.platform.dashboard.web import PERMISSIONS
from x402mw.platform.db import tables
from x402mw.platform.services import dashboard_users as accounts

pytestmark = pytest.mark.anyio


@pytest.fixture
def team(dev_platform: PlatformHarness) -> Team:
    return make_team(dev_platform)


def _audit(team: Team, action: str) -> list[Any]:
    t = tables.dashboard_audit

    async def read(p: Any) -> list[Any]:
        async with p.engine.connect() as conn:
            query = select(t).where(t.c.merchant_id == team.merchant_id, t.c.action == action)
            return list(await conn.execute(query))

    return team.harness.server.call(read)


def _fixtures(team: Team) -> dict[str, str]:
    """Ids of one object of each kind the routes name, all the merchant's own (test mode)."""
    order = team.order()
    with team.api() as api:
        events = api.get("/events", params={"limit": 1}).json()["data"]
    key_id = team.harness.server.call(lambda p: _first_key(p, team.merchant_id))
    with team.api() as api:
        hook = api.post("/webhook-endpoints", json={"url": "https://hooks.example.com/a", "enabledEvents": ["*"]})
        assert hook.status_code == 201, hook.text
        plan = api.post(
            "/subscription-plans", json={"name": "Club", "amount": "5", "currency": "USDC", "interval": "monthly"}
        )
        assert plan.status_code == 201, plan.text
        plan_id = plan.json()["plan"]["id"]
        sub = api.post("/subscriptions", json={"planId": plan_id, "merchantCustomerId": f"c-{uuid.uuid4()}"})
        assert sub.status_code == 201, sub.text
        link = api.post("/payment-links", json={"name": "Mug", "amount": "7", "currency": "USDC"})
        assert link.status_code == 201, link.text
        agent = api.post(
            "/agent/endpoints",
            json={
                "name": "<b>Weather</b>",
                "resourceUrl": "http://testserver/weather",
                "chainId": team.harness.chain.chain_id,
                "currency": "USDC",
                "payoutAddress": "0x" + "ab" * 20,
                "pricingMode": "fixed",
                "amountMinor": "10000",
            },
        )
        assert agent.status_code == 201, agent.text
        clock = api.post("/test-clocks", json={"frozenTime": "2026-12-01T00:00:00Z"})
        assert clock.status_code == 201, clock.text
    return {
        "test_clock_id": clock.json()["testClock"]["id"],
        "agent_endpoint_id": agent.json()["endpoint"]["id"],
        "plan_id": plan_id,
        "subscription_id": sub.json()["subscription"]["id"],
        "link_id": link.json()["paymentLink"]["id"],
        "endpoint_id": hook.json()["webhookEndpoint"]["id"],
        "payment_id": order["id"],
        "event_id": events[0]["id"],
        "key_id": key_id,
        "user_id": team.users["viewer"].id,
    }


async def _first_key(p: Any, merchant_id: str) -> str:
    t = tables.api_keys
    async with p.engine.connect() as conn:
        return str((await conn.execute(select(t.c.id).where(t.c.merchant_id == merchant_id))).scalar_one())


# (method, path template, permission it needs)
ROUTES: list[tuple[str, str, str]] = [
    ("GET", "/dashboard/", "read"),
    ("GET", "/dashboard/payments", "read"),
    ("GET", "/dashboard/payments/{payment_id}", "read"),
    ("GET", "/dashboard/payments/{payment_id}/refund", "payments"),
    ("POST", "/dashboard/payments/{payment_id}/refund", "payments"),
    ("GET", "/dashboard/refunds", "read"),
    ("GET", "/dashboard/plans", "read"),
    ("POST", "/dashboard/plans", "catalog"),
    ("POST", "/dashboard/plans/{plan_id}/active", "catalog"),
    ("GET", "/dashboard/subscriptions", "read"),
    ("GET", "/dashboard/subscriptions/{subscription_id}", "read"),
    ("POST", "/dashboard/subscriptions/{subscription_id}/cancel", "payments"),
    ("GET", "/dashboard/links", "read"),
    ("POST", "/dashboard/links", "catalog"),
    ("POST", "/dashboard/links/{link_id}/deactivate", "catalog"),
    ("GET", "/dashboard/agents", "read"),
    ("POST", "/dashboard/agents", "developers"),
    ("GET", "/dashboard/agents/{agent_endpoint_id}", "read"),
    ("POST", "/dashboard/agents/{agent_endpoint_id}", "developers"),
    ("GET", "/dashboard/developers/keys", "read"),
    ("POST", "/dashboard/developers/keys", "developers"),
    ("POST", "/dashboard/developers/keys/{key_id}/revoke", "developers"),
    ("GET", "/dashboard/developers/webhooks", "read"),
    ("POST", "/dashboard/developers/webhooks", "developers"),
    ("POST", "/dashboard/developers/webhooks/{endpoint_id}/rotate-secret", "developers"),
    ("POST", "/dashboard/developers/webhooks/{endpoint_id}/status", "developers"),
    ("GET", "/dashboard/developers/events", "read"),
    ("GET", "/dashboard/developers/events/{event_id}", "read"),
    ("POST", "/dashboard/developers/events/{event_id}/redeliver", "developers"),
    ("GET", "/dashboard/developers/requests", "read"),
    ("GET", "/dashboard/sandbox", "read"),
    ("POST", "/dashboard/sandbox/faucet", "developers"),
    ("POST", "/dashboard/sandbox/simulate-payment", "developers"),
    ("POST", "/dashboard/sandbox/test-clocks", "developers"),
    ("POST", "/dashboard/sandbox/test-clocks/{test_clock_id}/advance", "developers"),
    ("GET", "/dashboard/team", "read"),
    ("POST", "/dashboard/team/invitations", "team"),
    ("POST", "/dashboard/team/{user_id}/remove", "team"),
    ("GET", "/dashboard/audit", "read"),
    ("GET", "/dashboard/reports", "read"),
    ("GET", "/dashboard/reports/export", "read"),
    ("GET", "/dashboard/account", "read"),
    ("POST", "/dashboard/account/two-factor", "read"),
    ("POST", "/dashboard/mode", "read"),
    ("POST", "/dashboard/sign-out", "read"),
]
OWN_OBJECT_ROUTES = [r for r in ROUTES if "{" in r[1]]


def test_every_dashboard_route_is_in_the_table(dev_platform: PlatformHarness) -> None:
    """The table the tests below walk covers every route the app mounts under /dashboard."""
    from starlette.routing import Route

    from x402mw.platform.dashboard import routes

    mounted = set()
    for route in routes:
        if isinstance(route, Route):
            for method in route.methods or ():
                if method != "HEAD":
                    mounted.add((method, "/dashboard" + route.path))
    public = {
        ("GET", "/dashboard/sign-in"),
        ("POST", "/dashboard/sign-in"),
        ("GET", "/dashboard/sign-in/two-factor"),
        ("POST", "/dashboard/sign-in/two-factor"),
        ("GET", "/dashboard/invitations/{token}"),
        ("POST", "/dashboard/invitations/{token}"),
    }
    assert mounted - public == {(m, p) for m, p, _ in ROUTES}


def test_sign_in_and_out(team: Team) -> None:
    with team.browser() as client:
        assert client.get("/dashboard/").headers["location"] == "/dashboard/sign-in"
        page = client.get("/dashboard/sign-in")
        assert page.status_code == 200 and "Content-Security-Policy" in page.headers
        forged = client.post("/dashboard/sign-in", data={"email": team.users["owner"].email, "password": PASSWORD})
        assert forged.status_code == 403 and "x402mw_dashboard=" not in forged.headers.get("set-cookie", "")
        wrong = post_sign_in(client, team.users["owner"].email, "nope" * 4)
        assert wrong.status_code == 403 and "do not match" in wrong.text
        assert "x402mw_dashboard=" not in wrong.headers.get("set-cookie", "")  # no session
        ok = post_sign_in(client, team.users["owner"].email, PASSWORD)
        assert ok.status_code == 303
        cookie = ok.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=lax" in cookie and "path=/dashboard" in cookie
        home = client.get("/dashboard/")
        assert home.status_code == 200 and "Overview" in home.text
        out = client.post("/dashboard/sign-out", data={"csrf": csrf_of(home.text)})
        assert out.status_code == 303
        client.cookies.clear()
    assert _audit(team, "sign_in_failed") and _audit(team, "sign_in") and _audit(team, "sign_out")


def test_a_signed_out_session_stays_revoked(team: Team) -> None:
    with team.sign_in() as client:
        home = client.get("/dashboard/")
        token = client.cookies["x402mw_dashboard"]
        client.post("/dashboard/sign-out", data={"csrf": csrf_of(home.text)})
    with team.browser() as replay:
        replay.cookies.set("x402mw_dashboard", token, path="/dashboard")
        assert replay.get("/dashboard/payments").status_code == 303


@pytest.mark.parametrize("which", ["idle", "absolute"])
def test_an_expired_session_is_refused_on_every_route(team: Team, which: str) -> None:
    ids = _fixtures(team)
    with team.sign_in() as client:
        csrf = csrf_of(client.get("/dashboard/").text)
        sessions = tables.dashboard_sessions

        async def age(p: Any) -> None:
            now = p.clock.now()
            values = (
                {"last_seen_at": now - accounts.IDLE - timedelta(seconds=1)}
                if which == "idle"
                else {"created_at": now - accounts.ABSOLUTE, "expires_at": now - timedelta(seconds=1)}
            )
            async with p.engine.begin() as conn:
                await conn.execute(update(sessions).where(sessions.c.merchant_id == team.merchant_id).values(**values))

        team.harness.server.call(age)
        for method, template, _ in ROUTES:
            path = template.format(**ids)
            reply = client.request(method, path, data={"csrf": csrf} if method == "POST" else None)
            if method == "GET":
                assert reply.status_code == 303 and reply.headers["location"] == "/dashboard/sign-in", path
            else:
                assert reply.status_code == 403 and "session has ended" in reply.text, path
    assert _fixtures_unchanged(team, ids)


def _fixtures_unchanged(team: Team, ids: dict[str, str]) -> bool:
    """Nothing the refused POSTs name was changed: no refund, the key active, the viewer still there."""

    async def read(p: Any) -> bool:
        async with p.engine.connect() as conn:
            refunds = (
                await conn.execute(
                    select(tables.refunds.c.id).where(tables.refunds.c.payment_intent_id == ids["payment_id"])
                )
            ).first()
            key = (
                await conn.execute(select(tables.api_keys.c.revoked_at).where(tables.api_keys.c.id == ids["key_id"]))
            ).scalar_one()
            user = (
                await conn.execute(
                    select(tables.dashboard_users.c.disabled_at).where(tables.dashboard_users.c.id == ids["user_id"])
                )
            ).scalar_one()
            hooks = tables.webhook_endpoints
            hook = (
                await conn.execute(
                    select(hooks.c.status, hooks.c.created_at, hooks.c.updated_at).where(
                        hooks.c.id == ids["endpoint_id"]
                    )
                )
            ).one()
            plans, subs, links = tables.subscription_plans, tables.subscriptions, tables.payment_links
            plan = (await conn.execute(select(plans.c.active).where(plans.c.id == ids["plan_id"]))).scalar_one()
            sub = (await conn.execute(select(subs.c.status).where(subs.c.id == ids["subscription_id"]))).scalar_one()
            link = (await conn.execute(select(links.c.active).where(links.c.id == ids["link_id"]))).scalar_one()
            made = (
                await conn.execute(
                    select(plans.c.id).where(plans.c.merchant_id == team.merchant_id, plans.c.name == "Made here")
                )
            ).first()
            agents = tables.agent_endpoints
            agent = (
                await conn.execute(select(agents.c.name).where(agents.c.id == ids["agent_endpoint_id"]))
            ).scalar_one()
            agent_made = (
                await conn.execute(
                    select(agents.c.id).where(agents.c.merchant_id == team.merchant_id, agents.c.name == "Made here")
                )
            ).first()
        untouched_hook = hook.status == "enabled" and hook.created_at == hook.updated_at
        untouched_hook = untouched_hook and agent == "<b>Weather</b>" and agent_made is None
        untouched = plan and sub == "incomplete" and link and made is None
        return refunds is None and key is None and user is None and untouched_hook and bool(untouched)

    return team.harness.server.call(read)


@pytest.mark.parametrize("csrf", ["missing", "forged"])
def test_csrf_is_refused_on_every_form(team: Team, csrf: str) -> None:
    ids = _fixtures(team)
    with team.sign_in() as client:
        for method, template, _ in ROUTES:
            if method != "POST":
                continue
            path = template.format(**ids)
            data = {} if csrf == "missing" else {"csrf": "x" * 43}
            data |= {"confirm": "yes", "email": "new@shop.test", "role": "viewer", "mode": "test", "action": "start"}
            data |= {"name": "Made here", "amount": "3", "currency": "USDC", "interval": "monthly", "active": "false"}
            reply = client.post(path, data=data)
            assert reply.status_code == 403, path
            assert "form has expired" in reply.text, path
        assert client.get("/dashboard/").status_code == 200  # still signed in: sign-out was refused too
    assert _fixtures_unchanged(team, ids)
    assert len(_audit(team, "csrf_refused")) == sum(1 for r in ROUTES if r[0] == "POST")


@pytest.mark.parametrize("role", ["developer", "support", "viewer"])
def test_each_role_is_held_to_its_rights(team: Team, role: str) -> None:
    ids = _fixtures(team)
    allowed = PERMISSIONS[role]
    refused = 0
    with team.sign_in(role) as client:
        csrf = csrf_of(client.get("/dashboard/").text)
        for method, template, permission in ROUTES:
            if permission in allowed or template.endswith("sign-out"):
                continue
            path = template.format(**ids)
            data = {"csrf": csrf, "confirm": "yes", "name": "Made here", "amount": "3", "currency": "USDC"}
            reply = client.request(method, path, data=data | {"interval": "monthly"} if method == "POST" else None)
            assert reply.status_code == 403, (role, path)
            assert f"({role}) does not allow" in reply.text
            refused += 1
    assert refused and len(_audit(team, "role_refused")) == refused
    assert _fixtures_unchanged(team, ids)


def test_another_merchants_objects_are_404_on_every_route(team: Team, dev_platform: PlatformHarness) -> None:
    theirs = make_team(dev_platform, "Other shop")
    ids = _fixtures(theirs)
    with team.sign_in() as client:
        csrf = csrf_of(client.get("/dashboard/").text)
        for method, template, _ in OWN_OBJECT_ROUTES:
            path = template.format(**ids)
            reply = client.request(method, path, data={"csrf": csrf, "confirm": "yes"} if method == "POST" else None)
            assert reply.status_code == 404, (path, reply.text)
        for bad in ("not-an-id", str(uuid.uuid4())):
            assert client.get(f"/dashboard/payments/{bad}").status_code == 404
        # ids in a form, not the URL
        theirs_open = theirs.order(pay=False)
        form = {"csrf": csrf, "payment_id": theirs_open["id"], "scenario": "exact"}
        assert client.post("/dashboard/sandbox/simulate-payment", data=form).status_code == 404
    assert _fixtures_unchanged(theirs, ids)
    with theirs.api() as api:
        assert api.get(f"/payment-intents/{theirs_open['id']}").json()["paymentIntent"]["status"] == "requires_payment"
    assert len(_audit(team, "not_found")) >= len(OWN_OBJECT_ROUTES)


def test_refund_from_the_payment_page(team: Team) -> None:
    order = team.order()
    with team.sign_in("support") as client:
        page = client.get(f"/dashboard/payments/{order['id']}")
        assert page.status_code == 200 and "Refund this payment" in page.text
        form = client.get(f"/dashboard/payments/{order['id']}/refund")
        unconfirmed = client.post(f"/dashboard/payments/{order['id']}/refund", data={"csrf": csrf_of(form.text)})
        assert unconfirmed.status_code == 400
        done = client.post(
            f"/dashboard/payments/{order['id']}/refund",
            data={"csrf": csrf_of(form.text), "confirm": "yes", "reason": "<b>customer asked</b>"},
        )
        assert done.status_code == 303, done.text
        again = client.post(
            f"/dashboard/payments/{order['id']}/refund", data={"csrf": csrf_of(form.text), "confirm": "yes"}
        )
        assert again.status_code == 409
        timeline = client.get(f"/dashboard/payments/{order['id']}").text
        assert "payment_intent.succeeded" in timeline and "refund.processing" in timeline
        refunds = client.get("/dashboard/refunds")
        assert "&lt;b&gt;customer asked&lt;/b&gt;" in refunds.text and "<b>customer" not in refunds.text
    with team.api() as api:
        listed = api.get("/refunds", params={"paymentId": order["id"]}).json()["data"]
    assert len(listed) == 1  # through the same service as the API: its one refund


def test_payments_list_filters_search_and_pages(team: Team) -> None:
    paid = [team.order(metadata={"note": "<script>alert(1)</script>"}) for _ in range(3)]
    open_order = team.order(pay=False, customerEmail="buyer@example.com")
    with team.sign_in("viewer") as client:
        everything = client.get("/dashboard/payments").text
        assert all(o["orderId"] in everything for o in [*paid, open_order])
        succeeded = client.get("/dashboard/payments", params={"status": "succeeded"}).text
        assert open_order["orderId"] not in succeeded and paid[0]["orderId"] in succeeded
        found = client.get("/dashboard/payments", params={"q": paid[1]["orderId"]}).text
        assert paid[1]["orderId"] in found and paid[0]["orderId"] not in found
        by_customer = client.get("/dashboard/payments", params={"customer": "buyer@example.com"}).text
        assert open_order["orderId"] in by_customer and paid[0]["orderId"] not in by_customer
        detail = client.get(f"/dashboard/payments/{paid[0]['id']}").text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in detail and "<script>alert" not in detail
        assert "payment_intent.succeeded" in detail
    for extra in range(24):
        team.order(pay=False, orderId=f"page-{extra}")
    with team.sign_in("viewer") as client:
        first = client.get("/dashboard/payments").text
        found = re.search(r'href="(/dashboard/payments\?[^"]+)" rel="next"', first)
        assert found is not None
        second = client.get(found.group(1).replace("&amp;", "&")).text
        firsts = set(re.findall(r'href="/dashboard/payments/([0-9a-f-]{36})"', first))
        seconds = set(re.findall(r'href="/dashboard/payments/([0-9a-f-]{36})"', second))
        assert len(firsts) == 25 and seconds and not firsts & seconds


def test_test_and_live_objects_never_mix(team: Team) -> None:
    order = team.order()
    with team.sign_in("support") as client:
        home = client.get("/dashboard/")
        assert order["orderId"] in client.get("/dashboard/payments").text
        switched = client.post("/dashboard/mode", data={"csrf": csrf_of(home.text), "mode": "live"})
        assert switched.status_code == 303
        live = client.get("/dashboard/payments").text
        assert "Live mode" in live and order["orderId"] not in live
        assert client.get(f"/dashboard/payments/{order['id']}").status_code == 404


def test_owners_need_two_factor_for_live_mode_and_sign_in_with_it(team: Team) -> None:
    with team.sign_in("owner") as client:
        home = client.get("/dashboard/")
        refused = client.post("/dashboard/mode", data={"csrf": csrf_of(home.text), "mode": "live"})
        assert refused.status_code == 403
        client.post("/dashboard/account/two-factor", data={"csrf": csrf_of(home.text), "action": "start"})
        setup = client.get("/dashboard/account?setup=1").text
        secret = re.search(r'id="totp-secret">([A-Z2-7]+)<', setup)
        assert secret is not None
        step = int(time.time() // 30)
        wrong = client.post(
            "/dashboard/account/two-factor",
            data={"csrf": csrf_of(setup), "action": "confirm", "code": accounts.totp_code(secret.group(1), step + 5)},
        )
        assert wrong.status_code == 400
        on = client.post(
            "/dashboard/account/two-factor",
            data={"csrf": csrf_of(setup), "action": "confirm", "code": accounts.totp_code(secret.group(1), step)},
        )
        assert on.status_code == 200 and 'id="recovery-codes"' in on.text  # shown once, as it turns on
        live = client.post("/dashboard/mode", data={"csrf": csrf_of(home.text), "mode": "live"})
        assert live.status_code == 303
    with team.browser() as client:
        reply = post_sign_in(client, team.users["owner"].email, PASSWORD)
        assert reply.headers["location"] == "/dashboard/sign-in/two-factor"
        assert client.get("/dashboard/payments").headers["location"] == "/dashboard/sign-in/two-factor"
        form = client.get("/dashboard/sign-in/two-factor").text
        used = client.post(
            "/dashboard/sign-in/two-factor",
            data={"csrf": csrf_of(form), "code": accounts.totp_code(secret.group(1), step)},
        )
        assert used.status_code == 403  # the code that turned it on cannot be used again
        fresh = accounts.totp_code(secret.group(1), step + 1)
        ok = client.post("/dashboard/sign-in/two-factor", data={"csrf": csrf_of(form), "code": fresh})
        assert ok.status_code == 303 and ok.headers["location"] == "/dashboard/"
        assert client.get("/dashboard/payments").status_code == 200


def test_totp_matches_rfc_6238() -> None:
    secret = "GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ"  # "12345678901234567890", RFC 6238 appendix B (SHA-1)
    assert accounts.totp_code(secret, 59 // 30)[-6:] == "287082"
    assert accounts.totp_code(secret, 1111111109 // 30) == "081804"
    assert accounts.verify_totp(secret, "081804", 1111111109) == 1111111109 // 30
    assert accounts.verify_totp(secret, "081804", 1111111109, last_step=1111111109 // 30) is None


def test_invitations_are_single_use(team: Team) -> None:
    with team.sign_in("owner") as client:
        page = client.get("/dashboard/team")
        made = client.post(
            "/dashboard/team/invitations",
            data={"csrf": csrf_of(page.text), "email": "New@Shop.test", "role": "support"},
        )
        link = re.search(r'id="invitation-link">([^<]+)<', made.text)
        assert link is not None
    path = "/dashboard/" + link.group(1).split("/dashboard/", 1)[1]
    with team.browser() as client:
        form = client.get(path)
        assert form.status_code == 200
        forged = client.post(path, data={"password": PASSWORD})
        assert forged.status_code == 403  # no form token
        token = csrf_of(form.text)
        short = client.post(path, data={"csrf": token, "password": "short"})
        assert short.status_code == 400
        joined = client.post(path, data={"csrf": token, "password": PASSWORD})
        assert joined.status_code == 303
        replay = client.post(path, data={"csrf": token, "password": PASSWORD})
        assert replay.status_code == 404
        assert client.get(path).status_code == 404
        signed = post_sign_in(client, "new@shop.test", PASSWORD)
        assert signed.status_code == 303
    assert _audit(team, "invitation_accepted")
    with team.browser() as client:
        assert client.get("/dashboard/invitations/forged-token").status_code == 404


def test_sign_in_is_throttled_per_account(team: Team) -> None:
    email = team.users["viewer"].email
    with team.browser() as client:
        codes = [post_sign_in(client, email, "wrong" * 3).status_code for _ in range(11)]
        assert codes[:10] == [403] * 10 and codes[10] == 429
        right = post_sign_in(client, email, PASSWORD)
        assert right.status_code == 429  # the right password too, until the window passes
    assert _audit(team, "sign_in_throttled")


def test_the_api_request_log_and_redelivery(team: Team) -> None:
    with team.api() as api:
        reply = api.get("/payment-intents", params={"limit": 1})
        request_id = reply.headers["request-id"]
        api.post("/webhook-endpoints", json={"url": "https://hooks.example.com/x402", "enabledEvents": ["*"]})
    order = team.order()
    with team.sign_in("developer") as client:
        found = client.get("/dashboard/developers/requests", params={"request_id": request_id}).text
        assert request_id in found and "/v1/payment-intents" in found
        events = client.get("/dashboard/developers/events").text
        event_id = re.search(r'href="/dashboard/developers/events/([0-9a-f-]{36})"', events)
        assert event_id is not None
        page = client.get(f"/dashboard/developers/events/{event_id.group(1)}")
        assert page.status_code == 200
        again = client.post(
            f"/dashboard/developers/events/{event_id.group(1)}/redeliver", data={"csrf": csrf_of(page.text)}
        )
        assert again.status_code == 303 and "Queued" in client.get(again.headers["location"]).text
        keys = client.get("/dashboard/developers/keys")
        made = client.post("/dashboard/developers/keys", data={"csrf": csrf_of(keys.text)})
        key = re.search(r'id="new-key">(sk_test_[A-Za-z0-9]+)<', made.text)
        assert key is not None
    with httpx.Client(base_url=team.harness.url, headers={"Authorization": f"Bearer {key.group(1)}"}) as api:
        assert api.get("/balances").status_code == 200
    assert order


def test_webhook_endpoints_create_rotate_disable(team: Team) -> None:
    with team.sign_in("developer") as client:
        page = client.get("/dashboard/developers/webhooks")
        csrf = csrf_of(page.text)
        refused = client.post("/dashboard/developers/webhooks", data={"csrf": csrf, "url": "ftp://files.example.com/x"})
        assert refused.status_code == 400 and "url" in refused.text
        not_a_uri = client.post(  # RFC 3986 has no place for '<' unencoded
            "/dashboard/developers/webhooks", data={"csrf": csrf, "url": "https://hooks.example.com/<i>"}
        )
        assert not_a_uri.status_code == 400 and "url" in not_a_uri.text
        made = client.post(
            "/dashboard/developers/webhooks",
            data={
                "csrf": csrf,
                "url": "https://hooks.example.com/%3Ci%3E",
                "events": ["refund.completed"],
                "description": "<b>d</b>",
            },
        )
        assert made.status_code == 200 and 'id="signing-secret">whsec_' in made.text
        assert "&lt;b&gt;d&lt;/b&gt;" in made.text
        endpoint_id = re.search(r"/dashboard/developers/webhooks/([0-9a-f-]{36})/rotate-secret", made.text)
        assert endpoint_id is not None
        first = re.search(r'id="signing-secret">([^<]+)<', made.text)
        rotated = client.post(
            f"/dashboard/developers/webhooks/{endpoint_id.group(1)}/rotate-secret", data={"csrf": csrf}
        )
        second = re.search(r'id="signing-secret">([^<]+)<', rotated.text)
        assert first and second and first.group(1) != second.group(1)
        off = client.post(
            f"/dashboard/developers/webhooks/{endpoint_id.group(1)}/status", data={"csrf": csrf, "status": "disabled"}
        )
        assert off.status_code == 303
    with team.api() as api:
        endpoint = api.get(f"/webhook-endpoints/{endpoint_id.group(1)}").json()["webhookEndpoint"]
    assert endpoint["status"] == "disabled" and endpoint["enabledEvents"] == ["refund.completed"]
    assert _audit(team, "webhook_secret_rotated")


def test_plans_links_and_subscriptions(team: Team) -> None:
    slug = f"club-{uuid.uuid4().hex[:8]}"
    with team.sign_in("owner") as client:
        page = client.get("/dashboard/plans")
        csrf = csrf_of(page.text)
        bad = client.post(
            "/dashboard/plans",
            data={"csrf": csrf, "name": "X", "amount": "-1", "currency": "USDC", "interval": "monthly"},
        )
        assert bad.status_code == 400
        made = client.post(
            "/dashboard/plans",
            data={
                "csrf": csrf,
                "name": "<i>Club</i>",
                "amount": "9.99",
                "currency": "USDC",
                "interval": "monthly",
                "slug": slug,
            },
        )
        assert made.status_code == 303, made.text
        plans = client.get("/dashboard/plans").text
        assert f"/su_{slug}" in plans and "&lt;i&gt;Club&lt;/i&gt;" in plans
        taken = client.post(
            "/dashboard/plans",
            data={
                "csrf": csrf,
                "name": "Again",
                "amount": "1",
                "currency": "USDC",
                "interval": "monthly",
                "slug": slug,
            },
        )
        assert taken.status_code == 409
        link = client.post(
            "/dashboard/links", data={"csrf": csrf, "name": "Mug", "amount": "12.50", "currency": "USDC"}
        )
        assert link.status_code == 303
        links = client.get("/dashboard/links").text
        link_id = re.search(r"/dashboard/links/([0-9a-f-]{36})/deactivate", links)
        assert link_id is not None and "12.50 USDC" in links
        off = client.post(f"/dashboard/links/{link_id.group(1)}/deactivate", data={"csrf": csrf})
        assert off.status_code == 303
    with team.api() as api:
        plan = next(p for p in api.get("/subscription-plans").json()["data"] if p["slug"] == slug)
        assert plan["amount"] == "9.99" and plan["name"] == "<i>Club</i>"
        assert api.get(f"/payment-links/{link_id.group(1)}").json()["paymentLink"]["active"] is False
        sub = api.post("/subscriptions", json={"planId": plan["id"], "merchantCustomerId": "cust-1"}).json()[
            "subscription"
        ]
    with team.sign_in("support") as client:
        listed = client.get("/dashboard/subscriptions", params={"customer": "cust-1"}).text
        assert sub["id"] in listed
        page = client.get(f"/dashboard/subscriptions/{sub['id']}")
        assert "Invoices" in page.text
        done = client.post(
            f"/dashboard/subscriptions/{sub['id']}/cancel", data={"csrf": csrf_of(page.text), "when": "now"}
        )
        assert done.status_code == 303
        again = client.post(
            f"/dashboard/subscriptions/{sub['id']}/cancel", data={"csrf": csrf_of(page.text), "when": "now"}
        )
        assert again.status_code == 409
    with team.api() as api:
        assert api.get(f"/subscriptions/{sub['id']}").json()["subscription"]["status"] == "canceled"


def test_agent_endpoints_page(team: Team) -> None:
    ids = _fixtures(team)
    with team.sign_in("viewer") as client:
        listed = client.get("/dashboard/agents").text
        assert "&lt;b&gt;Weather&lt;/b&gt;" in listed and "<b>Weather" not in listed
        detail = client.get(f"/dashboard/agents/{ids['agent_endpoint_id']}").text
        assert "0 settled" in detail and "No agent payments yet." in detail
    with team.sign_in("developer") as client:
        page = client.get("/dashboard/agents")
        fields = {
            "csrf": csrf_of(page.text),
            "name": "Forecast",
            "resource_url": "https://api.shop.test/forecast",
            "chain_id": str(team.harness.chain.chain_id),
            "currency": "USDC",
            "payout_address": "0x" + "ef" * 20,
            "pricing_mode": "fixed",
        }
        missing_amount = client.post("/dashboard/agents", data=fields)
        assert missing_amount.status_code == 400 and "amountMinor" in missing_amount.text
        # prices typed as decimals of the coin, as the API's amounts in minor units
        for typed, said in [("0.0000001", "decimals"), ("ten", "not a plain decimal"), ("1 EURC", "EURC")]:
            refused = client.post("/dashboard/agents", data=fields | {"price": typed})
            assert refused.status_code == 400 and said in refused.text, (typed, refused.text[-500:])
        made = client.post("/dashboard/agents", data=fields | {"price": "0.0025"})
        assert made.status_code == 303
        endpoint_id = made.headers["location"].rsplit("/", 1)[1]
        shown = client.get(f"/dashboard/agents/{endpoint_id}").text
        assert 'name="price" inputmode="decimal" value="0.0025"' in shown
        edited = client.post(
            f"/dashboard/agents/{endpoint_id}",
            data={"csrf": fields["csrf"], "name": "Forecast 2", "price": "0.005 USDC"},
        )
        assert edited.status_code == 303
        bad = client.post(f"/dashboard/agents/{endpoint_id}", data={"csrf": fields["csrf"], "price": "-1"})
        assert bad.status_code == 303 and "Price" in client.get(bad.headers["location"]).text
        metered = client.post(
            "/dashboard/agents",
            data=fields | {"name": "Ask", "pricing_mode": "metered", "max_price": "0.05"},
        )
        assert metered.status_code == 303
        metered_id = metered.headers["location"].rsplit("/", 1)[1]
    with team.api() as api:
        endpoint = api.get(f"/agent/endpoints/{endpoint_id}").json()["endpoint"]
        ceiling = api.get(f"/agent/endpoints/{metered_id}").json()["endpoint"]
    assert endpoint["name"] == "Forecast 2" and str(endpoint["amountMinor"]) == "5000"
    assert ceiling["pricingMode"] == "metered" and str(ceiling["maxAmountMinor"]) == "50000"


def test_sandbox(team: Team) -> None:
    order = team.order(pay=False)
    with team.sign_in("developer") as client:
        page = client.get("/dashboard/sandbox")
        csrf = csrf_of(page.text)
        sent = client.post(
            "/dashboard/sandbox/faucet",
            data={
                "csrf": csrf,
                "network": team.harness.network,
                "currency": "USDC",
                "address": "0x" + "cd" * 20,
                "amount": "5",
            },
        )
        assert sent.status_code == 200 and "Sent 5 USDC" in sent.text
        paid = client.post("/dashboard/sandbox/simulate-payment", data={"csrf": csrf, "payment_id": order["id"]})
        assert paid.status_code == 303 and "succeeded" in client.get(paid.headers["location"]).text
        again = client.post("/dashboard/sandbox/simulate-payment", data={"csrf": csrf, "payment_id": order["id"]})
        assert again.status_code == 409
        made = client.post("/dashboard/sandbox/test-clocks", data={"csrf": csrf, "frozen_time": "2026-12-01T00:00:00Z"})
        assert made.status_code == 303
        home = client.get("/dashboard/")
        refused = client.post("/dashboard/mode", data={"csrf": csrf_of(home.text), "mode": "live"})
        assert refused.status_code == 403  # developers turn on two-factor sign-in first
    with team.sign_in("support") as client:
        home = client.get("/dashboard/")
        client.post("/dashboard/mode", data={"csrf": csrf_of(home.text), "mode": "live"})
        assert client.get("/dashboard/sandbox").status_code == 404
    assert team.harness.balance("0x" + "cd" * 20) == 5_000_000


def test_the_api_request_log_is_bounded(team: Team) -> None:
    from x402mw.platform.services.api_requests import purge_api_requests

    async def fill_and_purge(p: Any) -> tuple[int, int]:
        now = p.clock.now()
        for age_days in (40, 3, 2, 1, 0):
            await p.api_requests.record(
                {
                    "id": str(uuid.uuid4()),
                    "merchant_id": team.merchant_id,
                    "livemode": True,
                    "method": "GET",
                    "path": "/v1/balances",
                    "status": 200,
                    "request_id": f"req_{age_days}",
                    "duration_ms": 1,
                    "created_at": now - timedelta(days=age_days),
                },
            )
        purged = await purge_api_requests(p.engine, now, days=30, cap=2)
        t = tables.api_requests
        async with p.engine.connect() as conn:
            query = select(t.c.request_id).where(t.c.merchant_id == team.merchant_id, t.c.livemode.is_(True))
            kept = sorted(r.request_id for r in await conn.execute(query))
        return purged, len(kept) if kept == ["req_0", "req_1"] else -1

    purged, kept = team.harness.server.call(fill_and_purge)
    assert purged >= 3 and kept == 2  # (every merchant's rows beyond the cap go: the suite's others too)


def test_a_removed_user_is_signed_out_everywhere(team: Team) -> None:
    with team.sign_in("viewer") as viewer, team.sign_in("owner") as owner:
        assert viewer.get("/dashboard/payments").status_code == 200
        page = owner.get("/dashboard/team")
        removed = owner.post(f"/dashboard/team/{team.users['viewer'].id}/remove", data={"csrf": csrf_of(page.text)})
        assert removed.status_code == 303
        assert viewer.get("/dashboard/payments").headers["location"] == "/dashboard/sign-in"
        assert post_sign_in(viewer, team.users["viewer"].email, PASSWORD).status_code == 403
    assert _audit(team, "remove_user")


def test_ended_sessions_are_purged(team: Team) -> None:
    from x402mw.platform.services.api_requests import purge_dashboard_sessions

    with team.sign_in("viewer") as client:
        assert client.get("/dashboard/").status_code == 200
    sessions = tables.dashboard_sessions
    mine = sessions.c.user_id == team.users["viewer"].id

    async def age_and_purge(p: Any) -> tuple[int, int]:
        now = p.clock.now()
        async with p.engine.begin() as conn:
            await conn.execute(update(sessions).where(mine).values(expires_at=now - timedelta(days=2)))
        await purge_dashboard_sessions(p.engine, now)
        async with p.engine.connect() as conn:
            left = len(list(await conn.execute(select(sessions.c.id).where(mine))))
            others = len(list(await conn.execute(select(sessions.c.id).where(sessions.c.expires_at > now))))
        return left, others

    left, _ = team.harness.server.call(age_and_purge)
    assert left == 0


def test_each_delivery_attempt_shows_its_answer(team: Team) -> None:
    """A receiver answering 500 with HTML: the event's page shows the attempt's status code,
    duration and the start of the answer, escaped."""
    from starlette.applications import Starlette
    from starlette.responses import HTMLResponse
    from starlette.routing import Route

    from tests.harness import serve_app

    async def hook(_request: Any) -> HTMLResponse:
        return HTMLResponse("<b>receiver down</b>" + "x" * 1000, status_code=500)

    with serve_app(Starlette(routes=[Route("/hook", hook, methods=["POST"])])) as url:
        with team.api() as api:
            made = api.post(
                "/webhook-endpoints", json={"url": url + "/hook", "enabledEvents": ["payment_intent.created"]}
            )
            assert made.status_code == 201, made.text
        order = team.order(pay=False)
        with team.api() as api:
            events = api.get("/events", params={"type": "payment_intent.created", "limit": 1}).json()["data"]
        event_id = events[0]["id"]
        assert events[0]["data"]["paymentIntent"]["id"] == order["id"]
        with team.sign_in("viewer") as client:
            page = eventually(  # the worker delivers within a few seconds
                lambda: client.get(f"/dashboard/developers/events/{event_id}").text,
                until=lambda page: "<td>500</td>" in page,
                what="the failed attempt on the event's page",
                interval=0.5,
            )
    assert "<td>500</td>" in page and " ms</td>" in page
    assert "&lt;b&gt;receiver down&lt;/b&gt;" in page and "<b>receiver down" not in page
    assert "x" * 300 not in page  # an excerpt, not the whole answer


def test_the_overview(team: Team) -> None:
    team.order()
    team.order()
    with team.sign_in("viewer") as client:
        page = client.get("/dashboard/").text
    assert '<title id="chart-USDC">USDC paid per day</title>' in page
    assert ": 2 payments, 25 USDC</title>" in page  # today's bar: both orders, 12.5 each
    assert '<td>USDC</td><td class="num">25</td>' in page  # the balance available
    assert "0 settlements, 0 of them free" in page
