"""construct_event verifies Standard Webhooks signatures; the public `standardwebhooks` package agrees."""

from __future__ import annotations

import base64
import json
import secrets
import time
from datetime import UTC, datetime
from typing import Any

import django
import flask
import httpx
import pytest
from django.conf import settings
from standardwebhooks import Webhook

from x402mw.client.webhooks import WebhookVerificationError, construct_event, event_from_flask, sign_payload

if not settings.configured:
    settings.configure(
        DEBUG=False, SECRET_KEY="x402mw-tests", ALLOWED_HOSTS=["testserver"], INSTALLED_APPS=[], USE_TZ=True
    )
    django.setup()

SECRET = "whsec_" + base64.b64encode(b"x402mw-test-webhook-secret").decode()
EVENT = {
    "id": "evt_1",
    "type": "agent_payment.settled",
    "createdAt": "2026-11-21T23:25:16.464Z",
    "livemode": False,
    "data": {"agentPayment": {"id": "p1", "amountMinor": "10000"}},
}
BODY = json.dumps(EVENT, separators=(",", ":")).encode()
T0 = 1_800_000_000  # a fixed "now" for the refusal table, so that no margin depends on test speed


def _headers(body: bytes = BODY, secret: str = SECRET, msg_id: str = "evt_1", at: int | None = None) -> dict[str, str]:
    stamp = int(time.time()) if at is None else at
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(stamp),
        "webhook-signature": sign_payload(secret, msg_id, stamp, body),
    }


def test_our_signature_verifies_with_the_standardwebhooks_package() -> None:
    assert Webhook(SECRET).verify(BODY, _headers()) == EVENT


def test_the_packages_signature_verifies_with_construct_event() -> None:
    stamp = datetime.now(UTC).replace(microsecond=0)
    signature = Webhook(SECRET).sign("evt_1", stamp, BODY.decode())
    event = construct_event(
        BODY,
        {"Webhook-Id": "evt_1", "Webhook-Timestamp": str(int(stamp.timestamp())), "Webhook-Signature": signature},
        SECRET,
    )
    assert (event.id, event.type, event.livemode) == ("evt_1", "agent_payment.settled", False)
    assert event.data["agentPayment"]["amountMinor"] == "10000"


@pytest.mark.parametrize(
    ("body", "headers", "secret"),
    [
        (BODY + b" ", _headers(at=T0), SECRET),  # body changed after signing
        (BODY, _headers(at=T0, secret="whsec_" + base64.b64encode(b"other").decode()), SECRET),  # wrong secret
        (BODY, _headers(at=T0 - 301), SECRET),  # too old: replay
        (BODY, _headers(at=T0 + 301), SECRET),  # too new
        (BODY, {k: v for k, v in _headers(at=T0).items() if k != "webhook-signature"}, SECRET),
        (BODY, _headers(at=T0) | {"webhook-timestamp": "yesterday"}, SECRET),
        (BODY, _headers(at=T0) | {"webhook-signature": "v1,%%%"}, SECRET),
        (BODY, _headers(at=T0) | {"webhook-signature": "v2," + _headers(at=T0)["webhook-signature"][3:]}, SECRET),
        (BODY, _headers(at=T0, msg_id="evt_2") | {"webhook-id": "evt_1"}, SECRET),  # id swapped
        (b"not json", _headers(at=T0, body=b"not json"), SECRET),
        (b"[1]", _headers(at=T0, body=b"[1]"), SECRET),
        (BODY, _headers(at=T0), "whsec_!!!"),
    ],
    ids=[
        "body-altered",
        "wrong-secret",
        "too-old",
        "too-new",
        "no-signature",
        "bad-timestamp",
        "bad-base64",
        "unknown-version",
        "id-swapped",
        "not-json",
        "not-an-event",
        "malformed-secret",
    ],
)
def test_tampered_stale_or_malformed_deliveries_are_refused(body: bytes, headers: dict[str, str], secret: str) -> None:
    with pytest.raises(WebhookVerificationError):
        construct_event(body, headers, secret, now=T0)


def test_a_signed_body_nested_too_deep_is_refused_before_parsing() -> None:
    for depth in (64, 5000):  # 65 levels with the envelope; far more than the recursion limit
        body = json.dumps(EVENT, separators=(",", ":")).encode()[:-1] + b',"x":' + b"[" * depth + b"]" * depth + b"}"
        with pytest.raises(WebhookVerificationError) as caught:
            construct_event(body, _headers(body, at=T0), SECRET, now=T0)
        assert "nested more than 64 levels deep" in str(caught.value)
    shallow = BODY[:-1] + b',"x":' + b"[" * 63 + b"]" * 63 + b"}"
    assert construct_event(shallow, _headers(shallow, at=T0), SECRET, now=T0).raw["x"] is not None


def test_any_of_several_signatures_or_secrets_passes_during_rotation() -> None:
    new = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
    stamp = int(time.time())
    both = f"{sign_payload(new, 'evt_1', stamp, BODY)} {sign_payload(SECRET, 'evt_1', stamp, BODY)}"
    headers = {"webhook-id": "evt_1", "webhook-timestamp": str(stamp), "webhook-signature": both}
    assert construct_event(BODY, headers, SECRET).id == "evt_1"
    assert construct_event(BODY, _headers(secret=new), [SECRET, new]).id == "evt_1"


def test_flask_helper_reads_the_raw_body() -> None:
    app = flask.Flask(__name__)
    seen: list[Any] = []

    @app.post("/hook")
    def hook() -> Any:
        try:
            seen.append(event_from_flask(flask.request, SECRET))
        except WebhookVerificationError as exc:
            return {"error": exc.message}, 400
        return {"received": True}

    client = app.test_client()
    assert client.post("/hook", data=BODY, headers=_headers(), content_type="application/json").status_code == 200
    assert (
        client.post("/hook", data=BODY, headers=_headers(body=b"{}"), content_type="application/json").status_code
        == 400
    )
    assert seen[0].type == "agent_payment.settled"


@pytest.mark.anyio
async def test_starlette_helper_reads_the_raw_body() -> None:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from x402mw.client.webhooks import event_from_starlette

    async def hook(request: Request) -> JSONResponse:
        try:
            event = await event_from_starlette(request, SECRET)
        except WebhookVerificationError as exc:
            return JSONResponse({"error": exc.message}, status_code=400)
        return JSONResponse({"type": event.type})

    app = Starlette(routes=[Route("/hook", hook, methods=["POST"])])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        good = await client.post("/hook", content=BODY, headers=_headers())
        bad = await client.post("/hook", content=BODY.replace(b"10000", b"99999"), headers=_headers())
    assert good.json() == {"type": "agent_payment.settled"} and bad.status_code == 400


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_django_helper_reads_the_raw_body() -> None:
    from django.test import RequestFactory

    from x402mw.client.webhooks import event_from_django

    headers = {"HTTP_" + k.upper().replace("-", "_"): v for k, v in _headers().items()}
    request = RequestFactory().post("/hook", data=BODY, content_type="application/json", **headers)
    assert event_from_django(request, SECRET).data["agentPayment"]["id"] == "p1"
