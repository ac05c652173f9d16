"""examples/subscriptions_app.py against a real platform: the site's access follows the subscription's
webhooks through created, renewed, past_due, canceled and expired, and never the checkout's return."""

from __future__ import annotations

from typing import Any

import httpx

from examples.subscriptions_app import create_app
from tests.harness import PlatformHarness, serve_app
from tests.waiting import eventually
from x402mw.platform.server import free_port

START = "2026-01-31T10:00:00Z"


def _ok(reply: httpx.Response, status: int = 200) -> dict[str, Any]:
    assert reply.status_code == status, reply.text
    answer: dict[str, Any] = reply.json()
    return answer


def test_access_follows_the_webhooks_only(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant("Members Only Radio")
    with httpx.Client(base_url=dev_platform.url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as api:
        plan = _ok(
            api.post(
                "/subscription-plans",
                json={"name": "Members", "amount": "3", "currency": "USDC", "interval": "monthly"},
            ),
            201,
        )["plan"]
        port = free_port()
        hook = _ok(
            api.post("/webhook-endpoints", json={"url": f"http://127.0.0.1:{port}/webhooks", "enabledEvents": ["*"]}),
            201,
        )
        app = create_app(key, dev_platform.url, plan["id"], hook["webhookEndpoint"]["secret"])
        clock = _ok(api.post("/test-clocks", json={"frozenTime": START}), 201)["testClock"]["id"]

        def advance(at: str) -> None:
            _ok(api.post(f"/test-clocks/{clock}/advance", json={"frozenTime": at}))

        with serve_app(app, port=port) as site_url, httpx.Client(base_url=site_url, timeout=60) as site:

            def access(user: str, state: str, until: str | None = None) -> dict[str, Any]:
                answer: dict[str, Any] = eventually(
                    lambda: site.get(f"/members/{user}").json(),
                    until=lambda answer: answer["access"] == state and answer.get("until", until) == until,
                    what=f"{user}'s access to be {state} until {until}",
                )
                return answer

            # the user's subscription lives on a test clock; the site's subscribe link reuses it
            opened = _ok(
                api.post(
                    "/subscriptions", json={"planId": plan["id"], "merchantCustomerId": "ada", "testClock": clock}
                ),
                201,
            )
            sent = site.get("/subscribe/ada")
            assert sent.status_code == 303 and sent.headers["location"] == opened["paymentIntent"]["checkoutUrl"]
            assert site.get("/welcome").status_code == 200  # the return page grants nothing
            assert site.get("/members/ada").status_code == 402
            _ok(api.post(f"/sandbox/payment-intents/{opened['paymentIntent']['id']}/simulate-payment", json={}))
            assert (
                access("ada", "granted", "2026-02-28T10:00:00.000Z")["content"] == "members-only episode 42"
            )  # created

            advance("2026-02-21T10:00:00Z")
            renewal = _ok(api.get(f"/subscriptions/{opened['subscription']['id']}/invoices"))["data"][0]
            _ok(api.post(f"/sandbox/payment-intents/{renewal['paymentId']}/simulate-payment", json={}))
            access("ada", "granted", "2026-03-31T10:00:00.000Z")  # renewed

            advance("2026-03-31T10:00:00Z")
            access("ada", "paused")  # past_due: the renewal is unpaid
            assert site.get("/members/ada").status_code == 402
            invoice = _ok(api.get(f"/subscriptions/{opened['subscription']['id']}/invoices"))["data"][0]
            _ok(api.post(f"/sandbox/payment-intents/{invoice['paymentId']}/simulate-payment", json={}))
            access("ada", "granted", "2026-04-30T10:00:00.000Z")  # renewed within grace
            _ok(api.post(f"/subscriptions/{opened['subscription']['id']}/cancel"))
            access("ada", "revoked")  # canceled

            other = _ok(
                api.post(
                    "/subscriptions", json={"planId": plan["id"], "merchantCustomerId": "bob", "testClock": clock}
                ),
                201,
            )
            _ok(api.post(f"/sandbox/payment-intents/{other['paymentIntent']['id']}/simulate-payment", json={}))
            access("bob", "granted", "2026-04-30T10:00:00.000Z")  # anchored on the clock's 31 March
            advance("2026-04-30T10:00:00Z")
            access("bob", "paused")
            advance("2026-05-08T10:00:00Z")  # the 7-day grace has passed
            access("bob", "revoked")  # expired
            members = app.state.members
            assert members.users["bob"].state == "revoked" and members.users["ada"].state == "revoked"
            types = [
                e["type"]
                for e in _ok(api.get("/events", params={"limit": 100}))["data"]
                if e["type"].startswith("subscription.")
            ]
            assert sorted(set(types)) == [
                "subscription.canceled",
                "subscription.created",
                "subscription.expired",
                "subscription.past_due",
                "subscription.renewed",
            ]
