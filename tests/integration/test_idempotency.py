"""``Idempotency-Key`` on the merchant API's POSTs (Stripe semantics), against real platforms."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from datetime import UTC, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests import answers
from tests.harness import PlatformHarness
from x402mw.evm.keys import address_of, new_private_key
from x402mw.platform.api.idempotency import IdempotencyMiddleware
from x402mw.platform.app import create_app
from x402mw.platform.db import tables
from x402mw.platform.http.errors import RequestIdMiddleware
from x402mw.platform.runtime import Platform
from x402mw.platform.services.idempotency import purge_idempotency_keys

pytestmark = pytest.mark.both_databases  # idempotency keys under concurrent first uses: each database's locking


def _endpoint_body(harness: PlatformHarness, name: str = "Weather") -> dict[str, Any]:
    return {
        "name": name,
        "resourceUrl": "http://testserver/weather",
        "chainId": harness.chain.chain_id,
        "currency": "USDC",
        "payoutAddress": address_of(new_private_key()),
        "amountMinor": "10000",
    }


def _api(harness: PlatformHarness, key: str) -> httpx.Client:
    return httpx.Client(base_url=harness.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def _endpoint_ids(api: httpx.Client) -> list[str]:
    reply = api.get("/agent/endpoints", params={"limit": 100})
    assert reply.status_code == 200, reply.text
    return [endpoint["id"] for endpoint in reply.json()["data"]]


def _stored_keys(harness: PlatformHarness, merchant_id: str) -> list[Any]:
    table = tables.idempotency_keys

    async def query(platform: Platform) -> list[Any]:
        async with platform.engine.connect() as conn:
            return list((await conn.execute(select(table).where(table.c.merchant_id == merchant_id))).all())

    return harness.server.call(query)


def _new_key() -> str:
    return f"idem-{uuid.uuid4()}"


def test_the_same_key_creates_once_and_replays(dev_platform: PlatformHarness) -> None:
    merchant_id, api_key, _ = dev_platform.merchant()
    body, key = _endpoint_body(dev_platform), _new_key()
    with _api(dev_platform, api_key) as api:
        first = api.post("/agent/endpoints", json=body, headers={"Idempotency-Key": key})
        second = api.post("/agent/endpoints", json=body, headers={"Idempotency-Key": key})
        ids = _endpoint_ids(api)
    assert first.status_code == second.status_code == 201, first.text
    assert second.json()["endpoint"]["id"] == first.json()["endpoint"]["id"]
    assert second.content == first.content
    assert "idempotent-replayed" not in first.headers
    assert second.headers["idempotent-replayed"] == "true"
    assert second.headers["content-type"] == first.headers["content-type"]
    assert second.headers["request-id"] != first.headers["request-id"]
    assert second.headers.get_list("request-id") == [second.headers["request-id"]]
    assert ids == [first.json()["endpoint"]["id"]]
    [row] = _stored_keys(dev_platform, merchant_id)
    assert (row.key, row.status, row.response_status) == (key, "done", 201)


def test_the_same_key_with_another_request_is_refused(dev_platform: PlatformHarness) -> None:
    _, api_key, _ = dev_platform.merchant()
    body, key = _endpoint_body(dev_platform), _new_key()
    with _api(dev_platform, api_key) as api:
        created = api.post("/agent/endpoints", json=body, headers={"Idempotency-Key": key})
        other_body = api.post("/agent/endpoints", json=body | {"name": "Other"}, headers={"Idempotency-Key": key})
        other_path = api.post(
            "/sandbox/faucet",
            json={"network": dev_platform.network, "currency": "USDC", "address": body["payoutAddress"]},
            headers={"Idempotency-Key": key},
        )
        ids = _endpoint_ids(api)
    assert created.status_code == 201
    for refused in (other_body, other_path):
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert (error["type"], error["code"]) == ("idempotency_error", "idempotency_key_reused")
        assert error["requestId"] == refused.headers["request-id"]
    assert ids == [created.json()["endpoint"]["id"]]


def test_keys_are_scoped_to_the_merchant(dev_platform: PlatformHarness) -> None:
    _, key_a, _ = dev_platform.merchant("A")
    _, key_b, _ = dev_platform.merchant("B")
    body, key = _endpoint_body(dev_platform), _new_key()
    with _api(dev_platform, key_a) as api_a, _api(dev_platform, key_b) as api_b:
        created_a = api_a.post("/agent/endpoints", json=body, headers={"Idempotency-Key": key})
        created_b = api_b.post("/agent/endpoints", json=body, headers={"Idempotency-Key": key})
        ids_a, ids_b = _endpoint_ids(api_a), _endpoint_ids(api_b)
    assert created_a.status_code == created_b.status_code == 201
    assert "idempotent-replayed" not in created_b.headers
    assert ids_a == [created_a.json()["endpoint"]["id"]]
    assert ids_b == [created_b.json()["endpoint"]["id"]]
    assert ids_a != ids_b


def test_a_refused_request_is_replayed_as_refused(dev_platform: PlatformHarness) -> None:
    _, api_key, _ = dev_platform.merchant()
    body, key = _endpoint_body(dev_platform), _new_key()
    del body["name"]
    with _api(dev_platform, api_key) as api:
        first = api.post("/agent/endpoints", json=body, headers={"Idempotency-Key": key})
        again = api.post("/agent/endpoints", json=body, headers={"Idempotency-Key": key})
        ids = _endpoint_ids(api)
    assert first.status_code == again.status_code == 400
    assert first.json()["error"]["code"] == "parameter_missing"
    assert again.content == first.content, "the stored body, with the first request's requestId"
    assert again.headers["idempotent-replayed"] == "true"
    assert ids == []


def test_concurrent_first_uses_create_one_endpoint(dev_platform: PlatformHarness) -> None:
    _, api_key, _ = dev_platform.merchant()
    body, key = _endpoint_body(dev_platform), _new_key()
    barrier = threading.Barrier(10)
    replies: list[httpx.Response] = []

    def post() -> None:
        with _api(dev_platform, api_key) as api:
            barrier.wait()
            replies.append(api.post("/agent/endpoints", json=body, headers={"Idempotency-Key": key}))

    threads = [threading.Thread(target=post) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    with _api(dev_platform, api_key) as api:
        ids = _endpoint_ids(api)
        later = api.post("/agent/endpoints", json=body, headers={"Idempotency-Key": key})
    assert len(replies) == 10
    assert len(ids) == 1
    created = [reply for reply in replies if reply.status_code == 201]
    in_use = [reply for reply in replies if reply.status_code == 409]
    assert len(created) + len(in_use) == 10, [reply.status_code for reply in replies]
    assert len([reply for reply in created if "idempotent-replayed" not in reply.headers]) == 1
    assert {reply.json()["endpoint"]["id"] for reply in created} == set(ids)
    for reply in in_use:
        error = reply.json()["error"]
        assert (error["type"], error["code"]) == ("idempotency_error", "idempotency_key_in_use")
    assert later.status_code == 201 and later.headers["idempotent-replayed"] == "true"
    assert later.json()["endpoint"]["id"] == ids[0]


@pytest.mark.parametrize("key", [b"x" * 256, b"", b"with\ttab", "caf\u00e9".encode()])
def test_an_invalid_key_is_refused(dev_platform: PlatformHarness, key: bytes) -> None:
    _, api_key, _ = dev_platform.merchant()
    with _api(dev_platform, api_key) as api:
        reply = api.post("/agent/endpoints", json=_endpoint_body(dev_platform), headers={"Idempotency-Key": key})
        ids = _endpoint_ids(api)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert (error["code"], error["param"]) == ("idempotency_key_invalid", "Idempotency-Key")
    assert ids == []


def test_control_characters_in_a_key_are_refused(dev_platform: PlatformHarness) -> None:
    # uvicorn's parser already refuses most control characters, so the app is called directly here.
    _, api_key, _ = dev_platform.merchant()
    body = json.dumps(_endpoint_body(dev_platform)).encode()

    async def send_all(platform: Platform) -> list[httpx.Response]:
        transport = httpx.ASGITransport(create_app(platform=platform, middleware=answers.MIDDLEWARE))
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver/v1") as client:
            return [
                await client.post(
                    "/agent/endpoints",
                    content=body,
                    headers={"Authorization": f"Bearer {api_key}", "Idempotency-Key": key},
                )
                for key in (b"with\x01control", b"del\x7f", b"nul\x00", b"\x1b[31m")
            ]

    for reply in dev_platform.server.call(send_all):
        assert reply.status_code == 400, reply.text
        assert reply.json()["error"]["code"] == "idempotency_key_invalid"
    with _api(dev_platform, api_key) as api:
        assert _endpoint_ids(api) == []


def test_the_longest_key_is_accepted(dev_platform: PlatformHarness) -> None:
    _, api_key, _ = dev_platform.merchant()
    key = "~ !" + "x" * 252
    with _api(dev_platform, api_key) as api:
        reply = api.post("/agent/endpoints", json=_endpoint_body(dev_platform), headers={"Idempotency-Key": key})
    assert reply.status_code == 201, reply.text


def test_without_a_key_or_credentials_nothing_changes(dev_platform: PlatformHarness) -> None:
    _, api_key, _ = dev_platform.merchant()
    body = _endpoint_body(dev_platform)
    with _api(dev_platform, api_key) as api:
        first = api.post("/agent/endpoints", json=body)
        second = api.post("/agent/endpoints", json=body)
        ids = _endpoint_ids(api)
    unauthenticated = httpx.post(
        f"{dev_platform.url}/agent/endpoints", json=body, headers={"Idempotency-Key": "k" * 300}
    )
    assert first.status_code == second.status_code == 201
    assert "idempotent-replayed" not in second.headers
    assert sorted(ids) == sorted([first.json()["endpoint"]["id"], second.json()["endpoint"]["id"]])
    assert unauthenticated.status_code == 401
    assert unauthenticated.json()["error"]["type"] == "authentication_error"


def test_purged_keys_can_be_used_again(dev_platform: PlatformHarness) -> None:
    merchant_id, api_key, _ = dev_platform.merchant()
    body, key = _endpoint_body(dev_platform), _new_key()
    with _api(dev_platform, api_key) as api:
        first = api.post("/agent/endpoints", json=body, headers={"Idempotency-Key": key})
        kept = dev_platform.server.call(lambda p: purge_idempotency_keys(p.engine, p.clock.now() + timedelta(hours=23)))
        replayed = api.post("/agent/endpoints", json=body, headers={"Idempotency-Key": key})
        dev_platform.server.call(lambda p: purge_idempotency_keys(p.engine, p.clock.now() + timedelta(hours=25)))
        after_purge = api.post("/agent/endpoints", json=body, headers={"Idempotency-Key": key})
    assert kept == 0
    assert replayed.headers["idempotent-replayed"] == "true"
    assert after_purge.status_code == 201 and "idempotent-replayed" not in after_purge.headers
    assert after_purge.json()["endpoint"]["id"] != first.json()["endpoint"]["id"]
    assert len(_stored_keys(dev_platform, merchant_id)) == 1


def _flaky_app(platform: Platform, release: asyncio.Event, entered: asyncio.Event) -> Starlette:
    """A small app behind the real middlewares and the real platform: fails, then succeeds, or waits."""
    calls = {"fail": 0, "raise": 0}

    async def fail_once(request: Request) -> JSONResponse:
        calls["fail"] += 1
        return JSONResponse({"calls": calls["fail"]}, status_code=503 if calls["fail"] == 1 else 200)

    async def raise_once(request: Request) -> JSONResponse:
        calls["raise"] += 1
        if calls["raise"] == 1:
            raise RuntimeError("boom")
        return JSONResponse({"calls": calls["raise"], "body": (await request.body()).decode()})

    async def slow(request: Request) -> JSONResponse:
        entered.set()
        await release.wait()
        return JSONResponse({"done": True}, headers={"set-cookie": "a=1"})

    app = Starlette(
        routes=[
            Route("/fail", fail_once, methods=["POST"]),
            Route("/raise", raise_once, methods=["POST"]),
            Route("/slow", slow, methods=["POST"]),
        ],
        middleware=[Middleware(RequestIdMiddleware), Middleware(IdempotencyMiddleware)],
    )
    app.state.platform = platform
    return app


def test_failures_release_the_key_and_in_flight_keys_are_refused(dev_platform: PlatformHarness) -> None:
    merchant_id, api_key, _ = dev_platform.merchant()
    table = tables.idempotency_keys

    async def crash(platform: Platform, key: str, lease_left: timedelta | None, age: timedelta) -> None:
        """Leave the key as a process that stopped while running its request would have left it,
        its lease running out in ``lease_left`` (None: claimed before leases were kept), ``age`` ago."""
        now = platform.clock.now()
        async with platform.engine.begin() as conn:
            await conn.execute(
                update(table)
                .where(table.c.merchant_id == merchant_id, table.c.key == key)
                .values(
                    status="in_flight",
                    created_at=now - age,
                    locked_until=None if lease_left is None else now + lease_left,
                )
            )

    async def scenario(platform: Platform) -> dict[str, httpx.Response]:
        release, entered = asyncio.Event(), asyncio.Event()
        transport = httpx.ASGITransport(_flaky_app(platform, release, entered), raise_app_exceptions=False)
        replies: dict[str, httpx.Response] = {}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://testserver", headers={"Authorization": f"Bearer {api_key}"}
        ) as client:

            async def post(path: str, key: str, body: bytes = b"{}") -> httpx.Response:
                return await client.post(path, content=body, headers={"Idempotency-Key": key})

            replies["fail1"] = await post("/fail", "k-fail")
            replies["fail2"] = await post("/fail", "k-fail")
            replies["fail3"] = await post("/fail", "k-fail")
            await crash(platform, "k-fail", lease_left=timedelta(seconds=20), age=timedelta(seconds=10))
            replies["crashed_recently"] = await post("/fail", "k-fail")
            await crash(platform, "k-fail", lease_left=timedelta(seconds=-1), age=timedelta(seconds=31))
            replies["crashed_lease_out"] = await post("/fail", "k-fail")
            await crash(platform, "k-fail", lease_left=None, age=timedelta(seconds=10))
            replies["unleased_recently"] = await post("/fail", "k-fail")
            await crash(platform, "k-fail", lease_left=None, age=timedelta(minutes=10))
            replies["unleased_long_ago"] = await post("/fail", "k-fail")
            replies["raise1"] = await post("/raise", "k-raise", b"payload")
            replies["raise2"] = await post("/raise", "k-raise", b"payload")
            slow = asyncio.create_task(post("/slow", "k-slow"))
            await entered.wait()
            replies["busy"] = await post("/slow", "k-slow")
            replies["busy_other_body"] = await post("/slow", "k-slow", b"[]")
            release.set()
            replies["slow"] = await slow
            replies["slow_again"] = await post("/slow", "k-slow")
        return replies

    replies = dev_platform.server.call(scenario)
    assert replies["fail1"].status_code == 503
    assert replies["fail2"].status_code == 200 and "idempotent-replayed" not in replies["fail2"].headers
    assert replies["fail3"].json() == {"calls": 2} and replies["fail3"].headers["idempotent-replayed"] == "true"
    assert replies["crashed_recently"].status_code == 409
    assert replies["crashed_lease_out"].json() == {"calls": 3}, "a key whose lease ran out is taken over"
    assert "idempotent-replayed" not in replies["crashed_lease_out"].headers
    assert replies["unleased_recently"].status_code == 409
    assert replies["unleased_long_ago"].json() == {"calls": 4}, "a key claimed without a lease, 5 minutes on"
    assert replies["raise1"].status_code == 500
    assert replies["raise2"].json() == {"calls": 2, "body": "payload"}
    assert replies["busy"].status_code == 409
    assert replies["busy"].json()["error"]["code"] == "idempotency_key_in_use"
    assert replies["busy_other_body"].json()["error"]["code"] == "idempotency_key_reused"
    assert replies["slow"].status_code == 200
    assert replies["slow_again"].content == replies["slow"].content
    assert replies["slow_again"].headers["set-cookie"] == "a=1"
    assert replies["slow_again"].headers["idempotent-replayed"] == "true"


def test_a_request_still_running_keeps_its_key(dev_platform: PlatformHarness) -> None:
    """The process renews the lease of a request that runs longer than it (every
    `RENEW_EVERY`; here one renewal, at once): a retry meanwhile is refused (409), not run twice."""
    merchant_id, api_key, _ = dev_platform.merchant()
    table = tables.idempotency_keys

    async def scenario(platform: Platform) -> tuple[httpx.Response, httpx.Response, bool]:
        release, entered = asyncio.Event(), asyncio.Event()
        transport = httpx.ASGITransport(_flaky_app(platform, release, entered), raise_app_exceptions=False)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://testserver", headers={"Authorization": f"Bearer {api_key}"}
        ) as client:

            async def post() -> httpx.Response:
                return await client.post("/slow", content=b"{}", headers={"Idempotency-Key": "k-long"})

            slow = asyncio.create_task(post())
            await entered.wait()
            mine = (table.c.merchant_id == merchant_id, table.c.key == "k-long")
            async with platform.engine.begin() as conn:  # as if its lease had run out
                await conn.execute(update(table).where(*mine).values(locked_until=platform.clock.now()))
            await platform.idempotency.renew()
            async with platform.engine.connect() as conn:
                lease = (await conn.execute(select(table.c.locked_until).where(*mine))).scalar_one()
            renewed = lease.replace(tzinfo=lease.tzinfo or UTC) > platform.clock.now() + timedelta(seconds=20)
            retry = await asyncio.wait_for(post(), 10)  # a takeover would run it, and wait for release
            release.set()
            return await slow, retry, renewed

    first, retry, renewed = dev_platform.server.call(scenario)
    assert renewed, "the lease of a request still running is renewed"
    assert retry.status_code == 409 and retry.json()["error"]["code"] == "idempotency_key_in_use"
    assert first.status_code == 200 and first.json() == {"done": True}
