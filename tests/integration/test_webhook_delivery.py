"""Webhooks end to end: endpoints through the API, events from real payments and orders, delivered by
the outbox worker to a real receiver (uvicorn on loopback) and verified with the public
``standardwebhooks`` package and with `construct_event`."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import uvicorn
from prometheus_client import REGISTRY
from sqlalchemy import func, select
from standardwebhooks import Webhook
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.harness import Deployment, PlatformHarness, platform_server, postgres_database
from tests.sellers import asgi_transport, starlette_app
from tests.waiting import eventually
from x402mw.client import X402Auth
from x402mw.client.webhooks import WebhookVerificationError, construct_event
from x402mw.platform.db import tables
from x402mw.platform.server import free_port
from x402mw.platform.services.outbox import event_row
from x402mw.platform.settings import PlatformSettings
from x402mw.platform.timestamps import iso
from x402mw.platform.webhooks.delivery import _fan_out


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    answered: int

    @property
    def webhook_id(self) -> str:
        return self.headers["webhook-id"]


class Receiver:
    """A merchant's webhook server: records every POST; ``answers[path]`` sets the status it gives."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.received: list[Received] = []
        self.answers: dict[str, int] = {}
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    async def _hook(self, request: Request) -> Response:
        path = request.path_params["name"]
        status = self.answers.get(path, 200)
        self.received.append(Received(path, dict(request.headers), await request.body(), status))
        return Response(status_code=status)

    def at(self, path: str) -> list[Received]:
        return [r for r in self.received if r.path == path]

    def start(self) -> Receiver:
        app = Starlette(routes=[Route("/{name}", self._hook, methods=["POST"])])
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off")
        self._server = server = uvicorn.Server(config)
        self._thread = threading.Thread(target=server.run, daemon=True)
        self._thread.start()
        eventually(lambda: server.started, what="the receiver to start", interval=0.01)
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=30)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver().start()
    yield server
    server.stop()


def _api(harness: PlatformHarness, key: str) -> httpx.Client:
    return httpx.Client(base_url=harness.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def _round(harness: PlatformHarness, at: datetime | None = None) -> int:
    return harness.server.call(lambda p: p.webhooks.deliver_due(now=at))


def _endpoint(api: httpx.Client, url: str, events: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    reply = api.post("/webhook-endpoints", json={"url": url, "enabledEvents": events or ["*"], **extra})
    assert reply.status_code == 201, reply.text
    endpoint: dict[str, Any] = reply.json()["webhookEndpoint"]
    return endpoint


def _order(api: httpx.Client, *, cancel: bool = False) -> dict[str, Any]:
    reply = api.post("/payment-intents", json={"orderId": f"o-{time.time_ns()}", "amount": "1.50", "currency": "USDC"})
    assert reply.status_code == 201, reply.text
    intent: dict[str, Any] = reply.json()["paymentIntent"]
    if cancel:
        assert api.post(f"/payment-intents/{intent['id']}/cancel").status_code == 200
    return intent


def _events(api: httpx.Client, **params: Any) -> list[dict[str, Any]]:
    reply = api.get("/events", params={"limit": 100, **params})
    assert reply.status_code == 200, reply.text
    data: list[dict[str, Any]] = reply.json()["data"]
    return data


def _event(api: httpx.Client, event_id: str) -> dict[str, Any]:
    reply = api.get(f"/events/{event_id}")
    assert reply.status_code == 200, reply.text
    event: dict[str, Any] = reply.json()["event"]
    return event


def _deliver_until(harness: PlatformHarness, done: Any) -> None:
    """Delivery rounds until ``done()`` holds."""

    def delivered() -> bool:
        if done():
            return True
        _round(harness)
        return False

    eventually(delivered, what="the deliveries to arrive")


def _expire_previous_secrets(harness: PlatformHarness, endpoint_id: str) -> list[datetime]:
    """When the endpoint's rotated-out secrets stop signing; each is then made to have stopped a
    second ago (what waiting until then would do)."""
    table = tables.webhook_endpoints

    async def expire(platform: Any) -> list[datetime]:
        async with platform.engine.begin() as conn:
            found = select(table.c.previous_secrets).where(table.c.id == endpoint_id)
            previous = (await conn.execute(found)).scalar_one()
            past = iso(datetime.now(UTC) - timedelta(seconds=1))
            ended = [{**old, "expiresAt": past} for old in previous]
            await conn.execute(table.update().where(table.c.id == endpoint_id).values(previous_secrets=ended))
        return [datetime.fromisoformat(old["expiresAt"]) for old in previous]

    return harness.server.call(expire)


def _error(reply: httpx.Response, status: int, code: str, param: str | None = None) -> None:
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert error["code"] == code, error
    if param is not None:
        assert error.get("param") == param, error


@pytest.mark.anyio
async def test_an_agent_payment_reaches_the_receiver_signed(deployment: Deployment, receiver: Receiver) -> None:
    harness = deployment.harness
    with _api(harness, deployment.api_key) as api:
        endpoint = await asyncio.to_thread(_endpoint, api, receiver.url("hook"), ["agent_payment.settled"])
    app = starlette_app(deployment.api_key, harness.url, deployment.endpoint_id)
    async with httpx.AsyncClient(
        transport=asgi_transport(app), base_url="http://testserver", auth=X402Auth(deployment.agent), timeout=60
    ) as client:
        paid = await client.get("/weather")
    assert paid.status_code == 200, paid.text

    await asyncio.to_thread(_deliver_until, harness, lambda: receiver.at("hook"))
    delivery = receiver.at("hook")[0]
    assert delivery.headers["content-type"] == "application/json"
    assert delivery.headers["user-agent"].startswith("x402mw-webhooks/")
    verified = Webhook(endpoint["secret"]).verify(delivery.body, delivery.headers)
    event = construct_event(delivery.body, delivery.headers, endpoint["secret"])
    assert verified["id"] == event.id == delivery.webhook_id
    assert event.type == "agent_payment.settled" and event.livemode is False
    assert event.data["agentPayment"]["payer"].lower() == deployment.agent.address.lower()
    assert set(event.raw) == {"id", "type", "createdAt", "livemode", "data"}
    with pytest.raises(WebhookVerificationError):
        construct_event(delivery.body + b" ", delivery.headers, endpoint["secret"])


def test_the_event_filter_and_the_merchant_are_honoured(dev_platform: PlatformHarness, receiver: Receiver) -> None:
    _, key_a, _ = dev_platform.merchant()
    _, key_b, _ = dev_platform.merchant()
    with _api(dev_platform, key_a) as api_a, _api(dev_platform, key_b) as api_b:
        _endpoint(api_a, receiver.url("canceled"), ["payment_intent.canceled"])
        _endpoint(api_a, receiver.url("all"), ["*"])
        _endpoint(api_b, receiver.url("other"), ["*"])
        intent = _order(api_a, cancel=True)
        events = _events(api_a)
        assert [e["type"] for e in events] == ["payment_intent.canceled", "payment_intent.created"]
        assert events[0]["data"]["paymentIntent"]["id"] == intent["id"]
        assert [e["id"] for e in _events(api_a, type="payment_intent.created")] == [events[1]["id"]]
        _deliver_until(dev_platform, lambda: len(receiver.at("all")) == 2 and receiver.at("canceled"))
        _round(dev_platform)
        assert [r.webhook_id for r in receiver.at("canceled")] == [events[0]["id"]]
        assert {r.webhook_id for r in receiver.at("all")} == {e["id"] for e in events}
        assert receiver.at("other") == []
        assert _events(api_b) == []


def _attempts(result: str) -> float:
    """Delivery attempts with ``result`` so far, by the platform's metrics (it runs in this process)."""
    return REGISTRY.get_sample_value("x402mw_webhook_attempts_total", {"result": result}) or 0.0


def test_a_receiver_that_is_down_then_recovers_gets_every_event(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant()
    down = Receiver()  # nothing listens on its port yet
    with _api(dev_platform, key) as api:
        endpoint = _endpoint(api, down.url("hook"))
        for _ in range(2):
            _order(api, cancel=True)
        events = _events(api)
        assert len(events) == 4
        at = datetime.now(UTC)
        gaps: list[float] = []
        retrying, delivered = _attempts("retrying"), _attempts("delivered")
        for _ in range(4):  # connection refused every time
            _round(dev_platform, at)
            deliveries = [_event(api, e["id"])["deliveries"] for e in events]
            assert all(len(d) == 1 and d[0]["status"] == "pending" for d in deliveries)
            last = deliveries[0][0]
            assert last["attempts"][-1]["error"] == "ConnectError" and last["lastStatusCode"] is None
            following = datetime.fromisoformat(last["nextAttemptAt"])
            gaps.append((following - at).total_seconds())
            at = max(datetime.fromisoformat(d[0]["nextAttemptAt"]) for d in deliveries) + timedelta(seconds=1)
        assert gaps == sorted(gaps) and gaps[0] < gaps[-1] / 4, gaps  # exponential backoff
        # (at least: other tests' endpoints may have deliveries due in the same rounds)
        assert _attempts("retrying") - retrying >= 4 * len(events)

        down.start()  # the port opens, but answers 500 at first
        down.answers["hook"] = 500
        try:
            _round(dev_platform, at)
            assert {r.webhook_id for r in down.at("hook")} == {e["id"] for e in events}
            first = _event(api, events[0]["id"])["deliveries"][0]
            assert first["status"] == "pending" and first["lastStatusCode"] == 500
            down.answers["hook"] = 200
            at = datetime.fromisoformat(first["nextAttemptAt"]) + timedelta(minutes=5)
            _round(dev_platform, at)
            answered = [r for r in down.at("hook") if r.answered == 200]
            assert sorted(r.webhook_id for r in answered) == sorted(e["id"] for e in events)
            assert _attempts("delivered") - delivered >= len(events)
            for event in events:
                delivery = _event(api, event["id"])["deliveries"][0]
                assert delivery["status"] == "delivered" and delivery["lastStatusCode"] == 200
                assert delivery["endpointId"] == endpoint["id"] and delivery["nextAttemptAt"] is None
                retries = [r for r in down.at("hook") if r.webhook_id == event["id"]]
                assert [r.answered for r in retries][-1] == 200 and len(retries) >= 2
                for retry in retries:  # every attempt is signed afresh, for both verifiers
                    assert construct_event(retry.body, retry.headers, endpoint["secret"]).id == event["id"]
                    assert Webhook(endpoint["secret"]).verify(retry.body, retry.headers)["id"] == event["id"]
            received = len(down.received)
            _round(dev_platform, at + timedelta(hours=1))  # (other tests' endpoints may have deliveries due)
            assert len(down.received) == received  # nothing is sent twice after a 2xx
        finally:
            down.stop()


def test_deliveries_give_up_after_three_days(dev_platform: PlatformHarness, receiver: Receiver) -> None:
    _, key, _ = dev_platform.merchant()
    receiver.answers["flaky"] = 503
    with _api(dev_platform, key) as api:
        _endpoint(api, receiver.url("flaky"))
        _order(api)
        event_id = _events(api)[0]["id"]
        at = datetime.now(UTC)
        _round(dev_platform, at)
        delivery = _event(api, event_id)["deliveries"][0]
        while delivery["status"] == "pending":
            at = datetime.fromisoformat(delivery["nextAttemptAt"]) + timedelta(seconds=1)
            assert at < datetime.now(UTC) + timedelta(days=4)
            _round(dev_platform, at)
            delivery = _event(api, event_id)["deliveries"][0]
        assert delivery["status"] == "failed" and delivery["lastStatusCode"] == 503
        assert len(delivery["attempts"]) >= 10 and delivery["nextAttemptAt"] is None
        assert (at - datetime.now(UTC)) > timedelta(days=2)


def test_410_disables_the_endpoint(dev_platform: PlatformHarness, receiver: Receiver) -> None:
    _, key, _ = dev_platform.merchant()
    receiver.answers["gone"] = 410
    with _api(dev_platform, key) as api:
        endpoint = _endpoint(api, receiver.url("gone"))
        _order(api)
        _deliver_until(dev_platform, lambda: receiver.at("gone"))
        assert api.get(f"/webhook-endpoints/{endpoint['id']}").json()["webhookEndpoint"]["status"] == "disabled"
        event_id = _events(api)[0]["id"]
        assert _event(api, event_id)["deliveries"][0]["status"] == "failed"
        _order(api, cancel=True)
        _round(dev_platform)
        _round(dev_platform, datetime.now(UTC) + timedelta(hours=1))
        assert len(receiver.at("gone")) == 1
        assert all(_event(api, e["id"])["deliveries"] == [] for e in _events(api)[:2])


def test_rotating_the_secret_signs_with_both_during_the_overlap(
    dev_platform: PlatformHarness, receiver: Receiver
) -> None:
    _, key, _ = dev_platform.merchant()
    with _api(dev_platform, key) as api:
        endpoint = _endpoint(api, receiver.url("rotating"))
        old = endpoint["secret"]
        before = datetime.now(UTC)
        reply = api.post(f"/webhook-endpoints/{endpoint['id']}/rotate-secret", json={"expiresInSeconds": 5})
        assert reply.status_code == 200, reply.text
        new = reply.json()["webhookEndpoint"]["secret"]
        rotated_at, after_rotation = time.monotonic(), datetime.now(UTC)
        assert new.startswith("whsec_") and new != old
        _order(api)
        _deliver_until(dev_platform, lambda: receiver.at("rotating"))
        assert time.monotonic() - rotated_at < 5
        during = receiver.at("rotating")[0]
        assert len(during.headers["webhook-signature"].split()) == 2
        for secret in (old, new):
            Webhook(secret).verify(during.body, during.headers)
            construct_event(during.body, during.headers, secret)

        # the old secret signs for the 5 s asked; then time passes for it (its expiry moved to the
        # past, as 5 s later, instead of waiting them out)
        [expiry] = _expire_previous_secrets(dev_platform, endpoint["id"])
        assert before + timedelta(seconds=5) <= expiry <= after_rotation + timedelta(seconds=5)
        event_id = _events(api)[0]["id"]
        assert api.post(f"/events/{event_id}/redeliver").json() == {"object": "event", "id": event_id, "redelivered": 1}
        _deliver_until(dev_platform, lambda: len(receiver.at("rotating")) == 2)
        after = receiver.at("rotating")[1]
        assert after.webhook_id == during.webhook_id
        assert len(after.headers["webhook-signature"].split()) == 1
        construct_event(after.body, after.headers, new)
        Webhook(new).verify(after.body, after.headers)
        with pytest.raises(WebhookVerificationError):
            construct_event(after.body, after.headers, old)


def test_redeliver_and_the_delivery_log(dev_platform: PlatformHarness, receiver: Receiver) -> None:
    _, key, _ = dev_platform.merchant()
    with _api(dev_platform, key) as api:
        endpoint = _endpoint(api, receiver.url("log"), ["payment_intent.created"])
        _order(api)
        _deliver_until(dev_platform, lambda: receiver.at("log"))
        event = _events(api)[0]
        reply = api.post(f"/events/{event['id']}/redeliver", headers={"Idempotency-Key": "again-1"})
        assert reply.status_code == 200 and reply.json()["redelivered"] == 1
        _deliver_until(dev_platform, lambda: len(receiver.at("log")) == 2)
        first, second = receiver.at("log")
        assert first.webhook_id == second.webhook_id == event["id"]
        assert first.body == second.body
        shown = _event(api, event["id"])
        assert {k: shown[k] for k in event} == event
        (delivery,) = shown["deliveries"]
        assert delivery["endpointId"] == endpoint["id"] and delivery["status"] == "delivered"
        assert [a["statusCode"] for a in delivery["attempts"]] == [200, 200]
        assert all(a["durationMs"] >= 0 and a["at"].endswith("Z") for a in delivery["attempts"])
        _error(api.post(f"/events/{event['id']}/redeliver", json={"force": True}), 400, "parameter_unknown", "force")


def test_an_endpoint_is_owed_the_events_recorded_once_it_exists(
    dev_platform: PlatformHarness, receiver: Receiver
) -> None:
    """An event goes to the endpoints enabled when it is recorded. One recorded while the account has
    no enabled endpoint is written fanned out already (the worker never touches it again), and
    redelivering it is how a new endpoint gets it."""
    merchant_id, key, _ = dev_platform.merchant()
    with _api(dev_platform, key) as api:
        before = _order(api)
        _endpoint(api, receiver.url("first"), ["payment_intent.created"])
        during = _order(api)
        _endpoint(api, receiver.url("second"), ["payment_intent.created"])
        events = {event["data"]["paymentIntent"]["id"]: event["id"] for event in _events(api)}

        async def fanned_out(platform: Any) -> dict[str, bool]:
            rows = await _rows(platform, tables.events.c.merchant_id == merchant_id)
            return {row.id: row.fanned_out_at is not None and row.fanned_out_at == row.created_at for row in rows}

        assert dev_platform.server.call(fanned_out)[events[before["id"]]] is True  # before any worker round
        _deliver_until(dev_platform, lambda: receiver.at("first"))
        _round(dev_platform)
        assert [r.webhook_id for r in receiver.at("first")] == [events[during["id"]]]
        assert receiver.at("second") == []
        assert _event(api, events[before["id"]])["deliveries"] == []
        reply = api.post(f"/events/{events[before['id']]}/redeliver")
        assert reply.status_code == 200 and reply.json()["redelivered"] == 2
        _deliver_until(dev_platform, lambda: receiver.at("second") and len(receiver.at("first")) == 2)
        assert [r.webhook_id for r in receiver.at("second")] == [events[before["id"]]]


async def _rows(platform: Any, where: Any) -> list[Any]:
    async with platform.engine.connect() as conn:
        return list(await conn.execute(select(tables.events).where(where)))


def test_secrets_never_appear_in_reads_and_crud(dev_platform: PlatformHarness, receiver: Receiver) -> None:
    _, key, _ = dev_platform.merchant()
    with _api(dev_platform, key) as api:
        created = _endpoint(api, receiver.url("crud"), ["agent_payment.settled"], description="orders")
        secret = created.pop("secret")
        assert secret.startswith("whsec_") and len(secret) == len("whsec_") + 32
        assert created["status"] == "enabled" and created["object"] == "webhook_endpoint"
        assert created["description"] == "orders" and created["livemode"] is False
        one = api.get(f"/webhook-endpoints/{created['id']}")
        listed = api.get("/webhook-endpoints")
        assert one.json()["webhookEndpoint"] == created
        assert listed.json()["data"] == [created] and listed.json()["hasMore"] is False
        assert "whsec_" not in one.text + listed.text
        patched = api.patch(
            f"/webhook-endpoints/{created['id']}",
            json={"status": "disabled", "enabledEvents": ["payment_intent.created", "payment_intent.created"]},
        )
        assert patched.status_code == 200, patched.text
        endpoint = patched.json()["webhookEndpoint"]
        assert endpoint["status"] == "disabled" and endpoint["enabledEvents"] == ["payment_intent.created"]
        assert "secret" not in endpoint
        _order(api)
        _round(dev_platform)
        assert receiver.at("crud") == []  # disabled
        gone = api.delete(f"/webhook-endpoints/{created['id']}")
        assert gone.json() == {"id": created["id"], "object": "webhook_endpoint", "deleted": True}
        _error(api.get(f"/webhook-endpoints/{created['id']}"), 404, "resource_missing")


def test_another_merchants_objects_are_missing(dev_platform: PlatformHarness, receiver: Receiver) -> None:
    _, key_a, _ = dev_platform.merchant()
    _, key_b, _ = dev_platform.merchant()
    with _api(dev_platform, key_a) as mine, _api(dev_platform, key_b) as theirs:
        endpoint = _endpoint(mine, receiver.url("mine"))
        _order(mine)
        event_id = _events(mine)[0]["id"]
        base = f"/webhook-endpoints/{endpoint['id']}"
        _error(theirs.get(base), 404, "resource_missing", "id")
        _error(theirs.patch(base, json={"status": "disabled"}), 404, "resource_missing")
        _error(theirs.delete(base), 404, "resource_missing")
        _error(theirs.post(base + "/rotate-secret"), 404, "resource_missing")
        _error(theirs.get(f"/events/{event_id}"), 404, "resource_missing")
        _error(theirs.post(f"/events/{event_id}/redeliver"), 404, "resource_missing")
        assert theirs.get("/webhook-endpoints").json()["data"] == []
        assert mine.get(base).json()["webhookEndpoint"]["status"] == "enabled"


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"url": "ftp://example.com/hook", "enabledEvents": ["*"]}, "url", "parameter_invalid"),
        ({"url": "https://", "enabledEvents": ["*"]}, "url", "parameter_invalid"),
        ({"url": "example.com/hook", "enabledEvents": ["*"]}, "url", "parameter_invalid"),
        ({"url": "https://example.com/hook", "enabledEvents": ["payment.exploded"]}, "enabledEvents", None),
        ({"url": "https://example.com/hook", "enabledEvents": []}, "enabledEvents", "parameter_invalid"),
        ({"url": "https://example.com/hook", "enabledEvents": ["*", "agent_payment.settled"]}, "enabledEvents", None),
        ({"url": "https://example.com/hook"}, "enabledEvents", "parameter_missing"),
        (
            {"url": "https://example.com/hook", "enabledEvents": ["*"], "secret": "whsec_x"},
            "secret",
            "parameter_unknown",
        ),
    ],
)
def test_bad_input_is_a_400_naming_the_param(
    dev_platform: PlatformHarness, body: dict[str, Any], param: str, code: str | None
) -> None:
    _, key, _ = dev_platform.merchant()
    with _api(dev_platform, key) as api:
        _error(api.post("/webhook-endpoints", json=body), 400, code or "parameter_invalid", param)


def test_bad_updates_and_rotations(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant()
    with _api(dev_platform, key) as api:
        endpoint = _endpoint(api, "https://example.com/hook")
        base = f"/webhook-endpoints/{endpoint['id']}"
        _error(api.patch(base, json={"status": "paused"}), 400, "parameter_invalid", "status")
        _error(api.patch(base, json={"url": None}), 400, "parameter_invalid", "url")
        _error(api.patch(base, json={"enabledEvents": ["nope"]}), 400, "parameter_invalid", "enabledEvents")
        rotate = base + "/rotate-secret"
        _error(api.post(rotate, json={"expiresInSeconds": 604801}), 400, "parameter_invalid", "expiresInSeconds")
        _error(api.post(rotate, json={"expiresInSeconds": "60"}), 400, "parameter_invalid", "expiresInSeconds")
        _error(api.get("/events/not-an-event"), 404, "resource_missing")


@pytest.mark.both_databases  # the outbox's claims of thousands of rows: each database's locking
def test_one_round_fans_out_thousands_of_events_exactly_once(database: str, tmp_path: Any) -> None:
    """A round used to fan out 100 events (50/s at one round every 2 s); it takes them in batches of
    a few statements each, so one round catches up with thousands, and nothing is owed twice. Events
    of an account no enabled endpoint listens to (another merchant, or live mode here) are marked
    without being read back."""
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(postgres_database()) if database == "postgresql" else None
        settings = PlatformSettings(  # no background worker: this test runs the rounds
            database_url=url or f"sqlite:///{tmp_path / 'platform.sqlite3'}", data_dir=tmp_path, run_worker=False
        )
        harness = PlatformHarness(stack.enter_context(platform_server(settings)))
        busy_id, busy_key, _ = harness.merchant("Busy")
        quiet_id, quiet_key, _ = harness.merchant("Quiet")
        silent_id, _, _ = harness.merchant("Silent")  # no endpoint at all
        with _api(harness, busy_key) as api, _api(harness, quiet_key) as quiet:
            every = _endpoint(api, "https://example.com/every")["id"]
            _endpoint(api, "https://example.com/canceled", ["payment_intent.canceled"])
            paused = _endpoint(api, "https://example.com/paused")["id"]
            assert api.patch(f"/webhook-endpoints/{paused}", json={"status": "disabled"}).status_code == 200
            theirs = _endpoint(quiet, "https://example.com/theirs")["id"]
        now = datetime.now(UTC)

        def created(merchant_id: str, livemode: bool = False) -> dict[str, Any]:
            return event_row(merchant_id=merchant_id, livemode=livemode, type="payment_intent.created", data={}, at=now)

        async def add_events(platform: Any) -> None:
            async with platform.engine.begin() as conn:
                rows = [created(busy_id) for _ in range(1500)] + [created(quiet_id) for _ in range(10)]
                rows += [created(silent_id) for _ in range(2500)] + [created(busy_id, livemode=True) for _ in range(5)]
                await conn.execute(tables.events.insert(), rows)

        async def owed(platform: Any) -> tuple[dict[str, int], int, int]:
            deliveries = tables.webhook_deliveries
            async with platform.engine.connect() as conn:
                counted = await conn.execute(
                    select(deliveries.c.endpoint_id, func.count().label("n")).group_by(deliveries.c.endpoint_id)
                )
                per_endpoint = {row.endpoint_id: int(row.n) for row in counted}
                pairs = select(deliveries.c.event_id, deliveries.c.endpoint_id).distinct().subquery()
                distinct = await conn.scalar(select(func.count()).select_from(pairs))
                unmarked = await conn.scalar(select(func.count()).where(tables.events.c.fanned_out_at.is_(None)))
            return per_endpoint, int(distinct or 0), int(unmarked or 0)

        harness.server.call(add_events)
        assert harness.server.call(lambda p: _fan_out(p.engine, now)) == 1510 + 2505  # one round
        assert harness.server.call(lambda p: _fan_out(p.engine, now)) == 0
        per_endpoint, distinct, unmarked = harness.server.call(owed)
        assert per_endpoint == {every: 1500, theirs: 10}  # not the filtered, the disabled or another's
        assert distinct == 1510 and unmarked == 0
