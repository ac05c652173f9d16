"""Webhooks never lead into the platform's own network (SSRF).

Live webhooks go to public https URLs only. Test mode may reach loopback and private addresses only
where the operator allows it (on for the embedded default, the dev chain; off on anvil here), and
link-local (cloud metadata), unspecified, multicast and broadcast addresses never, in any spelling.
Each URL is checked at registration and again, after resolving its host, before each delivery; a
refused delivery is logged as a failed attempt and never connects."""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from tests.harness import PlatformHarness
from tests.integration.test_webhook_delivery import Receiver
from tests.waiting import eventually
from x402mw.cli_options import _settings
from x402mw.platform.db import tables
from x402mw.platform.server import free_port
from x402mw.platform.services.merchants import create_api_key
from x402mw.platform.services.outbox import record_event
from x402mw.platform.services.webhook_destinations import blocked_reason, resolved_blocked_reason
from x402mw.platform.settings import ChainSettings, PlatformSettings

# Where no webhook may go in any mode: cloud metadata (link-local) however it is written, and the
# unspecified addresses (0.0.0.0 reaches the platform's own host).
NEVER = [
    "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
    "https://169.254.169.254/latest/meta-data",
    "http://[::ffff:169.254.169.254]/",
    "http://[::ffff:a9fe:a9fe]/",
    "http://[64:ff9b::a9fe:a9fe]/",
    "http://2852039166/",
    "http://0xa9fea9fe/",
    "http://169.254.43518/",
    "http://[fe80::1]:8080/",
    "http://[fe80::1%25eth0]/",
    "http://0.0.0.0:4402/v1/sandbox/faucet",
    "http://0/",
    "http://[::]:4402/",
    "http://[::ffff:0.0.0.0]/",
    "http://224.0.0.1/",
    "http://255.255.255.255/",
]
# Loopback and private: test mode only where the operator allows it.
PRIVATE = [
    "http://127.0.0.1:4402/v1/sandbox/faucet",
    "http://127.1/",
    "http://2130706433/",
    "http://localhost:8000/hook",
    "http://10.1.2.3/x",
    "http://192.168.0.10/x",
    "http://172.16.5.4/x",
    "http://100.64.0.1/x",
    "http://[::1]:8000/x",
    "http://[fd00::1]/x",
    "http://[::ffff:10.0.0.1]/x",
    "http://db.internal/x",
    "http://intranet/x",
]


def _client(harness: PlatformHarness, key: str) -> httpx.Client:
    return httpx.Client(base_url=harness.url, headers={"Authorization": f"Bearer {key}"}, timeout=30)


def _live_key(harness: PlatformHarness, merchant_id: str) -> str:
    return harness.server.call(lambda p: create_api_key(p.engine, merchant_id, livemode=True))[1]


def _assert_refused(api: httpx.Client, url: str) -> str:
    """``url`` is refused at registration and as the new URL of an endpoint; the reason."""
    refused = api.post("/webhook-endpoints", json={"url": url, "enabledEvents": ["*"]})
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    # refused as a destination, or (an IPv6 zone id) already as a URL the grammar does not take
    assert error["code"] in ("url_not_allowed", "parameter_invalid") and error["param"] == "url", error
    created = api.post("/webhook-endpoints", json={"url": "https://hooks.example.com/x", "enabledEvents": ["*"]})
    assert created.status_code == 201, created.text
    endpoint_id = created.json()["webhookEndpoint"]["id"]
    moved = api.patch(f"/webhook-endpoints/{endpoint_id}", json={"url": url})
    assert moved.status_code == 400 and moved.json()["error"]["code"] == error["code"], moved.text
    assert api.delete(f"/webhook-endpoints/{endpoint_id}").status_code == 200
    return str(error["message"])


def _assert_accepted(api: httpx.Client, url: str) -> None:
    created = api.post("/webhook-endpoints", json={"url": url, "enabledEvents": ["*"]})
    assert created.status_code == 201, created.text
    assert api.delete(f"/webhook-endpoints/{created.json()['webhookEndpoint']['id']}").status_code == 200


@pytest.mark.parametrize(
    "url",
    [
        "http://hooks.example.com/x",
        "https://127.0.0.1/x",
        "https://10.1.2.3/x",
        "https://192.168.0.10/x",
        "https://169.254.169.254/latest/meta-data",
        "https://[::1]/x",
        "https://localhost:8443/x",
        "https://db.internal/x",
        "https://intranet/x",
        "https://127.1/x",
    ],
)
def test_live_endpoints_refuse_private_destinations(dev_platform: PlatformHarness, url: str) -> None:
    merchant_id, _, _ = dev_platform.merchant()
    with _client(dev_platform, _live_key(dev_platform, merchant_id)) as live:
        _assert_refused(live, url)


def test_the_embedded_default_lets_test_mode_reach_private_addresses_and_never_link_local(
    dev_platform: PlatformHarness,
) -> None:
    assert dev_platform.platform.settings.private_webhooks_allowed
    _, key, _ = dev_platform.merchant()
    with _client(dev_platform, key) as api:
        for url in [*PRIVATE, "http://hooks.example.com/x", "https://8.8.8.8/x"]:
            _assert_accepted(api, url)
        for url in NEVER:
            message = _assert_refused(api, url)
            assert "where no webhook may go" in message or "must be an absolute http(s) URL" in message, message
        assert "169.254.169.254" in _assert_refused(api, "http://2852039166/")


def test_test_mode_off_the_embedded_default_reaches_public_addresses_only(anvil_platform: PlatformHarness) -> None:
    assert not anvil_platform.platform.settings.private_webhooks_allowed
    _, key, _ = anvil_platform.merchant()
    with _client(anvil_platform, key) as api:
        for url in ["http://hooks.example.com/x", "https://hooks.example.com/x", "http://8.8.8.8:8080/x"]:
            _assert_accepted(api, url)
        for url in PRIVATE + NEVER:
            _assert_refused(api, url)


def test_the_setting() -> None:
    assert PlatformSettings().private_webhooks_allowed  # the embedded default
    anvil = [ChainSettings(rpc_url="http://127.0.0.1:8545")]
    assert not PlatformSettings(chains=anvil).private_webhooks_allowed
    assert not PlatformSettings(chains=[ChainSettings(), *anvil]).private_webhooks_allowed
    assert PlatformSettings(chains=anvil, webhooks_allow_private=True).private_webhooks_allowed
    assert not PlatformSettings(webhooks_allow_private=False).private_webhooks_allowed
    assert not _settings({"webhooks_allow_private": False}).private_webhooks_allowed
    assert _settings({"rpc_url": ("http://127.0.0.1:8545",), "webhooks_allow_private": True}).private_webhooks_allowed


@pytest.mark.parametrize(("value", "allowed"), [("true", True), ("1", True), ("off", False), ("FALSE", False)])
def test_the_setting_from_the_environment(monkeypatch: pytest.MonkeyPatch, value: str, allowed: bool) -> None:
    monkeypatch.setenv("X402MW_WEBHOOKS_ALLOW_PRIVATE", value)
    assert PlatformSettings.from_env().private_webhooks_allowed is allowed
    monkeypatch.setenv("X402MW_WEBHOOKS_ALLOW_PRIVATE", "maybe")
    with pytest.raises(ValueError, match="X402MW_WEBHOOKS_ALLOW_PRIVATE must be true or false"):
        PlatformSettings.from_env()


def test_the_rules_from_the_text_of_a_url() -> None:
    assert blocked_reason("https://hooks.example.com/x", livemode=True) is None
    assert blocked_reason("https://8.8.8.8/x", livemode=True) is None
    assert blocked_reason("http://127.0.0.1:9/x", livemode=False, allow_private=True) is None
    assert blocked_reason("http://127.0.0.1:9/x", livemode=False) is not None  # allow_private defaults off
    assert blocked_reason("https://127.0.0.1:9/x", livemode=True, allow_private=True) is not None  # live: never
    assert (
        blocked_reason("http://hooks.example.com:99999/x", livemode=False) == "the port is not a number from 0 to 65535"
    )


class ConnectionCounter:
    """A TCP listener on loopback that counts the connections it accepts (and answers none)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.accepted = 0
        self._socket = socket.create_server(("127.0.0.1", self.port))
        self._socket.settimeout(0.1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self._socket.accept()
            except TimeoutError:
                continue
            self.accepted += 1
            connection.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._socket.close()


@pytest.fixture
def counter() -> Iterator[ConnectionCounter]:
    listener = ConnectionCounter()
    yield listener
    listener.close()


def _deliver_once_to(harness: PlatformHarness, url: str, livemode: bool) -> dict[str, Any]:
    """Register an endpoint at a public URL, point it at ``url`` behind the API's back (as if stored
    before the rule, or as a name that later resolved elsewhere), record an event, run a delivery
    round; the event's delivery as ``GET /events/:id`` shows it."""
    merchant_id, test_key, _ = harness.merchant()
    key = _live_key(harness, merchant_id) if livemode else test_key
    with _client(harness, key) as api:
        created = api.post("/webhook-endpoints", json={"url": "https://hooks.example.com/x", "enabledEvents": ["*"]})
        assert created.status_code == 201, created.text
        endpoint_id = created.json()["webhookEndpoint"]["id"]

    async def repoint_and_emit(platform: Any) -> str:
        async with platform.engine.begin() as conn:
            endpoints = tables.webhook_endpoints
            await conn.execute(update(endpoints).where(endpoints.c.id == endpoint_id).values(url=url))
            return await record_event(
                conn,
                merchant_id=merchant_id,
                livemode=livemode,
                type="payment_intent.created",
                data={"paymentIntent": {"id": str(uuid.uuid4())}},
                at=datetime.now(UTC),
            )

    event_id = harness.server.call(repoint_and_emit)
    later = datetime.now(UTC) + timedelta(seconds=1)
    with _client(harness, key) as api:

        def deliveries() -> list[dict[str, Any]]:
            harness.server.call(lambda p: p.webhooks.deliver_due(now=later))
            found: list[dict[str, Any]] = api.get(f"/events/{event_id}").json()["event"]["deliveries"]
            return found

        attempted = eventually(  # the platform's own worker may be the one making the attempt
            deliveries, until=lambda found: bool(found and found[0]["attempts"]), what="the first delivery attempt"
        )
        assert api.delete(f"/webhook-endpoints/{endpoint_id}").status_code == 200
    return attempted[0]


def _assert_blocked(delivery: dict[str, Any], counter: ConnectionCounter, *why: str) -> None:
    assert counter.accepted == 0
    assert delivery["status"] == "pending" and delivery["attempts"], delivery  # retried later, as any failure
    error = delivery["attempts"][-1]["error"]
    assert error.startswith("BlockedDestination: ") and all(part in error for part in why), error
    assert delivery["attempts"][-1]["statusCode"] is None


def test_live_delivery_checks_the_destination_again(dev_platform: PlatformHarness, counter: ConnectionCounter) -> None:
    delivery = _deliver_once_to(dev_platform, f"https://127.0.0.1:{counter.port}/inside", livemode=True)
    _assert_blocked(delivery, counter, "not public", "127.0.0.1")


def test_test_mode_delivery_checks_the_resolved_address(
    anvil_platform: PlatformHarness, counter: ConnectionCounter
) -> None:
    """Off the embedded default, a test-mode URL whose name resolves to loopback gets nothing. The
    name is spelled in full-width digits, which the resolver reads as 127.0.0.1: only resolving
    it shows where it leads."""
    for url in (f"http://１２７.０.０.１:{counter.port}/in", f"http://127.0.0.1:{counter.port}/in"):
        delivery = _deliver_once_to(anvil_platform, url, livemode=False)
        _assert_blocked(delivery, counter, "not public", "127.0.0.1")
    assert (
        "resolves to"
        in _deliver_once_to(anvil_platform, f"http://１２７.０.０.１:{counter.port}/", False)["attempts"][-1]["error"]
    )


def test_test_mode_delivery_never_reaches_link_local_addresses(
    dev_platform: PlatformHarness, counter: ConnectionCounter
) -> None:
    """On the embedded default, loopback receivers get their webhooks; cloud metadata never does,
    written as an address or as a name that resolves to it."""
    receiver = Receiver().start()
    try:
        delivered = _deliver_once_to(dev_platform, receiver.url("inside"), livemode=False)
        assert delivered["status"] == "delivered" and len(receiver.at("inside")) == 1
    finally:
        receiver.stop()
    for url in ("http://169.254.169.254/latest/meta-data/", "http://１６９.２５４.１６９.２５４/latest/meta-data/"):
        delivery = _deliver_once_to(dev_platform, url, livemode=False)
        _assert_blocked(delivery, counter, "link-local", "169.254.169.254")
    delivery = _deliver_once_to(dev_platform, f"http://0.0.0.0:{counter.port}/", livemode=False)
    _assert_blocked(delivery, counter, "unspecified")


@pytest.mark.anyio
async def test_every_resolved_address_is_checked() -> None:
    assert await resolved_blocked_reason("http://localhost:9/", livemode=False, allow_private=True) is None
    reason = await resolved_blocked_reason("http://１２７.０.０.１:9/", livemode=False)
    assert reason == "１２７.０.０.１ resolves to an address that is not public (127.0.0.1)"
    reason = await resolved_blocked_reason("http://１６９.２５４.１６９.２５４/", livemode=False, allow_private=True)
    assert reason is not None and "resolves to a link-local address (169.254.169.254)" in reason
