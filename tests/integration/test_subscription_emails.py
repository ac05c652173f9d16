"""Subscriber emails carry exactly one address and clean names (issue 21): every email field of the
API and the hosted subscribe form takes one RFC 5322 addr-spec and nothing else (no list, group or
display name, which would give the SMTP envelope several recipients or none); names with line
breaks reach the Subject as one line; and an email that can never be built (an address stored
before the rule) fails at once, with an ``email.failed`` webhook, instead of three days of retries.
A real platform (dev chain, SQLite), a real SMTP server (aiosmtpd), the worker's
duties run where the test calls them, on a `ManualClock`."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update

from tests.subscription_fixtures import Shop, SubscriptionPlatform, subscription_platform
from x402mw.platform.clock import ManualClock
from x402mw.platform.db import tables

START = "2026-01-31T10:00:00Z"
RENEWAL_OPENS = "2026-02-21T10:00:00Z"
NOT_ONE_ADDRESS = [
    "a@x.test,b@y.test",
    "a@x.test>,<b@y.test",
    "team: a@x.test, b@y.test;",
    "undisclosed-recipients:;",
    "Ada <ada@x.test>",
    "ada@x.test (Ada)",
    "ada@x.test\r\nBcc: eve@y.test",
    "ada@x.test\u2028",
    '"a b"@x.test',
    "ada@x.test.",
    "ada@-x.test",
    "ada..b@x.test",
    "adá@x.test",
    "ada@x",
]
ONE_ADDRESS = "o'neil+renewals/2026=ok@mail-1.example.co.uk"


@pytest.fixture(scope="module")
def clock() -> ManualClock:
    return ManualClock(time.time())


@pytest.fixture(scope="module")
def subs(database: str, clock: ManualClock, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SubscriptionPlatform]:
    workdir = tmp_path_factory.mktemp(f"subscription-emails-{database}")
    with subscription_platform(workdir, database, run_worker=False, clock=clock) as platform:
        yield platform


def _refused(reply: httpx.Response, param: str) -> None:
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == param, reply.text


def test_every_email_field_takes_exactly_one_address(subs: SubscriptionPlatform) -> None:
    shop = subs.shop()
    plan = shop.plan()
    order = {"orderId": "ord_1", "amount": "1", "currency": "USDC"}
    for wrong in NOT_ONE_ADDRESS:
        _refused(
            shop.api.post(
                "/subscriptions", json={"planId": plan["id"], "merchantCustomerId": "cus_x", "customerEmail": wrong}
            ),
            "customerEmail",
        )
        _refused(shop.api.post("/payment-intents", json=order | {"customer": {"email": wrong}}), "customer.email")
        _refused(shop.api.post("/payment-intents", json=order | {"customerEmail": wrong}), "customerEmail")
    assert shop.ok(shop.api.get("/subscriptions"))["data"] == []
    opened = shop.open(plan, "cus_one", customerEmail=ONE_ADDRESS)
    assert opened["subscription"]["customerEmail"] == ONE_ADDRESS
    paid = shop.ok(shop.api.post("/payment-intents", json=order | {"customer": {"email": ONE_ADDRESS}}), 201)
    assert paid["paymentIntent"]["customer"]["email"] == ONE_ADDRESS

    other = shop.plan()
    with httpx.Client(timeout=60) as browser:  # the hosted subscribe form
        for wrong in NOT_ONE_ADDRESS[:6]:
            form = browser.get(other["checkoutUrl"])
            token = re.search(r'name="token" value="([^"]+)"', form.text)
            assert token is not None
            answer = browser.post(other["checkoutUrl"], data={"token": token.group(1), "email": wrong, "customer": ""})
            assert answer.status_code == 400 and "Enter an email address" in answer.text, wrong
    assert [s["planId"] for s in shop.ok(shop.api.get("/subscriptions"))["data"]] == [plan["id"]]


def _renewal_email(subs: SubscriptionPlatform, shop: Shop, plan: dict[str, Any], to: str) -> str:
    """A subscription on a test clock, paid, moved to its renewal: its invoice email is queued; its id."""
    test_clock = shop.clock(START)
    opened = shop.open(plan, f"cus_{time.monotonic_ns()}", testClock=test_clock, customerEmail=to)
    shop.pay(opened["paymentIntent"]["id"])
    shop.advance(test_clock, RENEWAL_OPENS)
    sub_id: str = opened["subscription"]["id"]
    return sub_id


def _emails(shop: Shop, sub_id: str) -> list[dict[str, Any]]:
    async def read(platform: Any) -> list[dict[str, Any]]:
        emails = tables.subscription_emails
        async with platform.engine.connect() as conn:
            rows = await conn.execute(select(emails).where(emails.c.subscription_id == sub_id))
            return [dict(row) for row in rows.mappings()]

    return shop.harness.server.call(read)


def _send(shop: Shop) -> int:
    sent: int = shop.harness.server.call(lambda p: p.emails.send_due())
    return sent


def test_names_with_line_breaks_reach_the_subject_as_one_line_and_the_envelope_has_one_recipient(
    subs: SubscriptionPlatform,
) -> None:
    mailbox = subs.mailbox
    assert mailbox is not None
    shop = subs.shop("Acme\r\nBcc: eve@evil.test\u2029Streaming")
    # the API refuses control characters in a plan's name (CR, LF, NEL, VT); the line and paragraph
    # separators it takes must still reach the subject as spaces
    body = {"name": "Pro\r\nBcc: x", "amount": "3", "currency": "USDC", "interval": "monthly"}
    refused = shop.api.post("/subscription-plans", json=body)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "name"
    plan = shop.plan(name="Pro\u2028Bcc: eve@evil.test\u2028Gold\u2029plus", amount="3")
    to = f"ada-{time.monotonic_ns()}@example.com"
    sub_id = _renewal_email(subs, shop, plan, to)
    assert _send(shop) == 1
    [email] = _emails(shop, sub_id)
    assert (email["status"], email["attempts"], email["last_error"]) == ("sent", 1, None)
    [message] = mailbox.find(to, "renewal")
    assert (
        message["Subject"]
        == "[Test] Acme Bcc: eve@evil.test Streaming: Pro Bcc: eve@evil.test Gold plus renewal: 3 USDC to pay"
    )
    assert message["Bcc"] is None and message.get_all("To") == [to]
    assert mailbox.recipients[mailbox.messages.index(message)] == [to]


@pytest.mark.parametrize("stored", ["a@x.test>,<b@y.test", "team: a@x.test;", "undisclosed-recipients:;"])
def test_an_email_that_cannot_be_built_fails_at_once_and_the_merchant_is_told(
    subs: SubscriptionPlatform, clock: ManualClock, stored: str
) -> None:
    mailbox = subs.mailbox
    assert mailbox is not None
    shop = subs.shop()
    test_clock = shop.clock(START)
    opened = shop.open(shop.plan(), f"cus_{time.monotonic_ns()}", testClock=test_clock, customerEmail="ok@example.com")
    sub_id = opened["subscription"]["id"]
    shop.pay(opened["paymentIntent"]["id"])

    async def store_as_before_the_rule(platform: Any) -> None:
        subscriptions = tables.subscriptions
        async with platform.engine.begin() as conn:
            await conn.execute(update(subscriptions).where(subscriptions.c.id == sub_id).values(customer_email=stored))

    shop.harness.server.call(store_as_before_the_rule)
    shop.advance(test_clock, RENEWAL_OPENS)  # queues the renewal email to the stored address
    received = len(mailbox.messages)
    assert _send(shop) == 0
    [email] = _emails(shop, sub_id)
    assert (email["status"], email["attempts"], email["to_address"]) == ("failed", 0, stored)
    assert "not one email address" in email["last_error"]
    clock.advance(hours=2)  # no retry comes
    assert _send(shop) == 0 and _emails(shop, sub_id)[0]["status"] == "failed"
    assert len(mailbox.messages) == received

    shop.harness.server.call(lambda p: p.webhooks.deliver_due())
    [event] = [e for e in shop.events() if e.type == "email.failed"]
    assert event.data["email"] == {
        "id": email["id"],
        "object": "subscription_email",
        "kind": "invoice_opened",
        "to": stored,
        "subscriptionId": sub_id,
        "invoiceId": shop.invoices(sub_id)[0]["id"],
        "status": "failed",
        "attempts": 0,
        "failureReason": email["last_error"],
        "livemode": False,
        "createdAt": event.data["email"]["createdAt"],
    }
