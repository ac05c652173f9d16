"""Payment links against a real platform (SQLite, the dev chain): the merchant API,
the link's page giving each buyer an order of their own (kept by a cookie while it can be paid),
slugs, deactivation, and the orders paid, reported and refunded like any other."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

import httpx

from tests.harness import PlatformHarness
from x402mw.client import MerchantClient


def _origin(harness: PlatformHarness) -> str:
    return harness.url.removesuffix("/v1")


def _api(harness: PlatformHarness, key: str) -> httpx.Client:
    return httpx.Client(base_url=harness.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def _link(harness: PlatformHarness, key: str, **fields: Any) -> dict[str, Any]:
    body = {"name": "Concert ticket", "amount": "25.00", "currency": "USDC", **fields}
    with _api(harness, key) as api:
        reply = api.post("/payment-links", json=body)
    assert reply.status_code == 201, reply.text
    link: dict[str, Any] = reply.json()["paymentLink"]
    return link


def _error(reply: httpx.Response, status: int) -> dict[str, Any]:
    assert reply.status_code == status, reply.text
    error: dict[str, Any] = reply.json()["error"]
    assert error["requestId"] == reply.headers["request-id"]
    return error


def _open(browser: httpx.Client, url: str) -> str:
    """A buyer's browser opens ``url``; the id of the order whose page it shows there (no redirect)."""
    reply = browser.get(url)
    assert reply.status_code == 200, reply.text
    assert "location" not in reply.headers and reply.headers["content-type"].startswith("text/html")
    return _shown_order(reply.text)


def _shown_order(html: str) -> str:
    return html.split('data-payment-id="', 1)[1].split('"', 1)[0]


def test_create_read_list_and_update_a_link(dev_platform: PlatformHarness) -> None:
    merchant_id, key, _ = dev_platform.merchant()
    slug = f"ticket-{uuid.uuid4().hex[:8]}"
    link = _link(
        dev_platform,
        key,
        acceptedCurrencies=["USDC", "EURC"],
        paymentMethods={"wallet": True, "transfer": True, "transferDefaultOpen": True},
        successUrl="https://shop.example/thanks",
        cancelUrl="https://shop.example/",
        metadata={"sku": "T-1"},
        slug=slug,
    )
    base = dev_platform.platform.settings.checkout_url_base
    assert link["object"] == "payment_link" and link["active"] is True
    assert link["amount"] == "25.00", "amounts echo as sent"
    assert link["checkoutUrl"] == f"{base}/pl_{link['id']}"
    assert link["slugUrl"] == f"{base}/paylink/{slug}.{merchant_id}"
    assert (link["acceptedCurrencies"], link["metadata"]) == (["USDC", "EURC"], {"sku": "T-1"})
    with _api(dev_platform, key) as api:
        assert api.get(f"/payment-links/{link['id']}").json() == {"paymentLink": link}
        second = api.post("/payment-links", json={"name": "Mug", "amount": 7, "currency": "EURC"}).json()["paymentLink"]
        assert second["amount"] == "7" and second["slug"] is None and second["slugUrl"] is None
        page = api.get("/payment-links", params={"limit": 1}).json()
        assert (page["object"], [x["id"] for x in page["data"]], page["hasMore"]) == ("list", [second["id"]], True)
        rest = api.get("/payment-links", params={"starting_after": second["id"]}).json()
        assert [x["id"] for x in rest["data"]] == [link["id"]]
        patched = api.patch(f"/payment-links/{link['id']}", json={"name": "VIP ticket", "active": False})
        assert patched.status_code == 200, patched.text
        assert (patched.json()["paymentLink"]["name"], patched.json()["paymentLink"]["active"]) == ("VIP ticket", False)
        # another merchant sees none of it
        _, other_key, _ = dev_platform.merchant()
    with _api(dev_platform, other_key) as other:
        assert _error(other.get(f"/payment-links/{link['id']}"), 404)["code"] == "resource_missing"
        assert other.get("/payment-links").json()["data"] == []
        assert _error(other.patch(f"/payment-links/{link['id']}", json={"active": True}), 404)["code"] == (
            "resource_missing"
        )


def test_bad_link_requests_are_answered_clearly(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant()
    taken = f"taken-{uuid.uuid4().hex[:8]}"
    _link(dev_platform, key, slug=taken)
    cases: list[tuple[dict[str, Any], int, str, str | None]] = [
        ({"amount": "0"}, 400, "parameter_invalid", "amount"),
        ({"amount": "1e3"}, 400, "parameter_invalid", "amount"),
        ({"amount": True}, 400, "parameter_invalid", "amount"),
        ({"amount": "1.1234567"}, 400, "parameter_invalid", "amount"),
        ({"currency": "DOGE"}, 400, "parameter_invalid", "currency"),
        ({"acceptedCurrencies": ["EURC"]}, 400, "parameter_invalid", "acceptedCurrencies"),
        ({"slug": "Has Spaces"}, 400, "parameter_invalid", "slug"),
        ({"slug": str(uuid.uuid4())}, 400, "parameter_invalid", "slug"),
        ({"slug": taken}, 409, "slug_taken", "slug"),
        ({"metadata": {"fixed_transfer_customer_id": "c1"}}, 400, "parameter_invalid", "metadata"),
        ({"successUrl": "javascript:alert(1)"}, 400, "parameter_invalid", "successUrl"),
        ({"name": ""}, 400, "parameter_invalid", "name"),
        ({"color": "red"}, 400, "parameter_unknown", "color"),
    ]
    with _api(dev_platform, key) as api:
        for change, status, code, param in cases:
            body = {"name": "Ticket", "amount": "1", "currency": "USDC", **change}
            error = _error(api.post("/payment-links", json=body), status)
            assert (error["code"], error.get("param")) == (code, param), change
        link_id = _link(dev_platform, key)["id"]
        for patch, param in [({"active": "yes"}, "active"), ({"name": None}, "name"), ({"amount": "2"}, "amount")]:
            assert _error(api.patch(f"/payment-links/{link_id}", json=patch), 400)["param"] == param
        for unknown in [str(uuid.uuid4()), "pl_nope"]:
            assert _error(api.get(f"/payment-links/{unknown}"), 404)["code"] == "resource_missing"


def test_each_buyer_gets_an_order_and_a_reload_keeps_it(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant("Acme Tickets")
    link = _link(dev_platform, key, metadata={"sku": "T-1"}, successUrl="https://shop.example/thanks")
    with httpx.Client(timeout=60) as alice, httpx.Client(timeout=60) as bob:
        first = _open(alice, link["checkoutUrl"])
        assert _open(alice, link["checkoutUrl"]) == first, "a reload does not mint another order"
        other = _open(bob, link["checkoutUrl"])
        assert other != first
        page = alice.get(f"{_origin(dev_platform)}/checkout/pi_{first}")
        assert page.status_code == 200 and "25.00" in page.text
    with _api(dev_platform, key) as api:
        orders = {o["id"]: o for o in api.get("/payment-intents").json()["data"]}
    assert set(orders) == {first, other}
    order = orders[first]
    assert (order["paymentLinkId"], order["amount"], order["metadata"]) == (link["id"], "25.00", {"sku": "T-1"})
    assert order["successUrl"] == "https://shop.example/thanks" and order["expiresAt"] is not None
    assert order["orderId"] == order["id"]


def test_a_paid_order_lets_the_buyer_buy_again_and_is_refunded_like_any(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant()
    link = _link(dev_platform, key, amount="1.5")
    with httpx.Client(timeout=60) as buyer, MerchantClient(key, dev_platform.url) as client:
        first = _open(buyer, link["checkoutUrl"])
        client.sandbox.simulate_payment(first)
        paid = client.payment_intents.retrieve(first)
        assert paid.status == "succeeded" and paid.amount == Decimal("1.5")
        again = _open(buyer, link["checkoutUrl"])
        assert again != first, "a paid order is done: the link opens a new one"
        refund = client.refunds.create(first, reason="requested_by_customer")
        assert refund.amount == Decimal("1.5")
        types = [e.type for e in client.events.list(limit=100).auto_paging_iter() if _about(e.data, first)]
    assert "payment_intent.created" in types and "payment_intent.succeeded" in types


def _about(data: Any, payment_id: str) -> bool:
    found = data.get("paymentIntent") if isinstance(data, dict) else None
    return isinstance(found, dict) and found.get("id") == payment_id


def test_slugs_and_legacy_paylinks_both_resolve(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant()
    slug = f"summer-{uuid.uuid4().hex[:8]}"
    link = _link(dev_platform, key, slug=slug)
    base = dev_platform.platform.settings.checkout_url_base
    with httpx.Client(timeout=60) as buyer:
        by_slug = _open(buyer, f"{base}/paylink/{slug}")
        assert _open(buyer, link["checkoutUrl"]) == by_slug, "one link, one cookie, one order"
        assert _open(buyer, f"{base}/paylink/pl_{link['id']}") == by_slug
        # /paylink/<payment intent> and /payment-intents/<uuid> still render that order's page
        for legacy in [
            f"{base}/paylink/pi_{by_slug}",
            f"{base}/paylink/{by_slug}",
            f"{base}/payment-intents/{by_slug}",
        ]:
            assert _open(buyer, legacy) == by_slug, legacy
        for unknown in [f"{base}/paylink/no-such-{uuid.uuid4().hex[:6]}", f"{base}/pl_{uuid.uuid4()}", f"{base}/pl_x"]:
            assert buyer.get(unknown).status_code == 404, unknown


def test_every_legacy_link_form_answers_its_page_without_a_redirect(dev_platform: PlatformHarness) -> None:
    """Spec 2.1: old link forms "remain valid indefinitely; they do not break or redirect". A link's
    slug address shows the buyer's own order in place, and its coin picker (a form reloading the same
    address) keeps showing that order."""
    _, key, _ = dev_platform.merchant()
    slug = f"legacy-{uuid.uuid4().hex[:8]}"
    link = _link(dev_platform, key, slug=slug, acceptedCurrencies=["USDC", "EURC"])
    base = dev_platform.platform.settings.checkout_url_base
    with httpx.Client(timeout=60) as buyer:
        first = buyer.get(f"{base}/paylink/{slug}")
        assert (first.status_code, first.headers.get("location")) == (200, None), first.headers
        order = _shown_order(first.text)
        assert "25.00 USDC" in first.text
        picked = buyer.get(f"{base}/paylink/{slug}", params={"option": f"eip155:{dev_platform.chain.chain_id}/EURC"})
        assert (picked.status_code, _shown_order(picked.text)) == (200, order)
        forms = [f"{base}/payment-intents/{order}", f"{base}/paylink/pi_{order}", f"{base}/paylink/pl_{link['id']}"]
        for url in forms:
            reply = buyer.get(url)
            assert (reply.status_code, reply.headers.get("location"), _shown_order(reply.text)) == (200, None, order)
    with _api(dev_platform, key) as api:
        assert [o["id"] for o in api.get("/payment-intents").json()["data"]] == [order]


def test_slugs_are_per_merchant_and_an_old_bare_address_keeps_its_link(dev_platform: PlatformHarness) -> None:
    """Two merchants may each have a link ``sale-…``: neither learns the other uses it. Each
    ``slugUrl`` carries its merchant and opens its own link; the bare ``/paylink/<slug>`` of the time
    slugs were one namespace still opens the link that held it (the oldest)."""
    first_id, first_key, _ = dev_platform.merchant("First shop")
    second_id, second_key, _ = dev_platform.merchant("Second shop")
    slug = f"sale-{uuid.uuid4().hex[:8]}"
    mine = _link(dev_platform, first_key, slug=slug)
    theirs = _link(dev_platform, second_key, slug=slug)
    base = dev_platform.platform.settings.checkout_url_base
    assert (mine["slugUrl"], theirs["slugUrl"]) == (
        f"{base}/paylink/{slug}.{first_id}",
        f"{base}/paylink/{slug}.{second_id}",
    )
    with _api(dev_platform, first_key) as api:
        error = _error(
            api.post("/payment-links", json={"name": "Again", "amount": "1", "currency": "USDC", "slug": slug}), 409
        )
    assert (error["code"], error["param"]) == ("slug_taken", "slug")
    assert error["message"].startswith("You already have a payment link with the slug")
    with httpx.Client(timeout=60) as buyer:
        bought = {first_key: _open(buyer, mine["slugUrl"]), second_key: _open(buyer, theirs["slugUrl"])}
        assert _open(buyer, f"{base}/paylink/{slug}") == bought[first_key], "the bare slug: the oldest link"
        assert buyer.get(f"{base}/paylink/{slug}.{uuid.uuid4()}").status_code == 404
    for key, link in [(first_key, mine), (second_key, theirs)]:
        with _api(dev_platform, key) as api:
            orders = api.get("/payment-intents").json()["data"]
        assert [(o["id"], o["paymentLinkId"]) for o in orders] == [(bought[key], link["id"])]


def test_an_inactive_link_opens_nothing(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant()
    link = _link(dev_platform, key)
    with _api(dev_platform, key) as api:
        assert api.patch(f"/payment-links/{link['id']}", json={"active": False}).status_code == 200
    with httpx.Client(timeout=60) as buyer:
        page = buyer.get(link["checkoutUrl"])
        assert page.status_code == 410 and "no longer active" in page.text and "Concert ticket" in page.text
        public = buyer.post(f"{_origin(dev_platform)}/checkout/v1/payment-links/{link['id']}/payment-intents")
    error = _error(public, 409)
    assert (error["code"], error["param"]) == ("payment_link_inactive", "id")
    with _api(dev_platform, key) as api:
        assert api.get("/payment-intents").json()["data"] == []
        assert api.patch(f"/payment-links/{link['id']}", json={"active": True}).status_code == 200
    with httpx.Client(timeout=60) as buyer:
        opened = buyer.post(f"{_origin(dev_platform)}/checkout/v1/payment-links/pl_{link['id']}/payment-intents")
    assert opened.status_code == 201, opened.text
    assert (opened.json()["object"], opened.json()["amount"]) == ("checkout_payment_intent", "25.00")


def test_the_merchant_client_manages_links(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant()
    with MerchantClient(key, dev_platform.url) as client:
        link = client.payment_links.create(name="Poster", amount="12.50", currency="USDC", slug=None)
        assert link.amount == Decimal("12.50") and link.checkout_url.endswith(f"/pl_{link.id}")
        assert client.payment_links.retrieve(link.id).name == "Poster"
        assert client.payment_links.update(link.id, active=False).active is False
        assert [x.id for x in client.payment_links.list().auto_paging_iter()] == [link.id]
