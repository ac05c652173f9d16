"""The merchant quickstart example, run for real against the platform (on SQLite and on PostgreSQL):
an order created through the typed client, paid in the sandbox, reported by verified webhooks and
refunded, with the balance back where it was."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from tests.harness import PlatformHarness

EXAMPLES = Path(__file__).parents[2] / "examples"


def _example(name: str = "merchant_quickstart") -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_quickstart_story(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant("Quickstart shop")
    said: list[str] = []
    story = _example().run(dev_platform.url, key, say=said.append)
    paid, refund = story["paid"], story["refund"]
    assert paid.status == "succeeded" and paid.tx_hash and paid.paid_at is not None
    assert refund.status == "completed" and refund.tx_hash and refund.destination == paid.payer
    assert story["events"] == {"payment_intent.succeeded", "refund.completed"}
    before, after = story["balances"]
    assert before == after
    assert dev_platform.balance(paid.payer) == 12_500_000  # the refund reached the payer
    assert said[0].startswith("1. order ") and f"/checkout/pi_{paid.id}" in said[0]
    assert said[0].split(" the buyer pays at ")[1] == paid.checkout_url
    assert paid.checkout_url.startswith(dev_platform.platform.settings.checkout_url_base)
    assert dev_platform.url.removesuffix("/v1") in paid.checkout_url


def test_the_same_story_over_plain_http(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant("HTTP shop")
    said: list[str] = []
    story = _example("merchant_http").run(dev_platform.url, key, say=said.append)
    paid, refund = story["paid"], story["refund"]
    assert paid["status"] == "succeeded" and paid["txHash"] and paid["paidAt"]
    assert refund["status"] == "completed" and refund["destination"] == paid["payer"]
    assert story["events"] == {"payment_intent.succeeded", "refund.completed"}  # verified by construct_event
    assert dev_platform.balance(paid["payer"]) == 8_000_000
    assert said[0].split(" the buyer pays at ")[1] == paid["checkoutUrl"]


def test_the_payment_links_example(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant("Links shop")
    said: list[str] = []
    story = _example("payment_links").run(dev_platform.url, key, say=said.append)
    link, orders = story["link"], story["orders"]
    assert link.active is False and len({order.id for order in orders}) == 2
    assert all(order.status == "succeeded" and order.payment_link_id == link.id for order in orders)
    assert "reloading gave the same" in said[1] and "reloading gave the same" in said[2]


def test_the_agent_pays_an_order_example(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant("Agent shop")
    said: list[str] = []
    story = _example("agent_pays_order").run(dev_platform.url, key, say=said.append)
    assert story["order"].status == "succeeded" and story["paid"].status_code == 200
    assert story["again"].status_code == 409 and len(story["payments"]) == 1
    assert story["payments"][0].verified is True
