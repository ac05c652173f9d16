"""The Flask, Django (sync and async) and WSGI adapters, driven through their real test clients
against an in-process fake of the platform (`tests.fake_platform`)."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import django
import flask
import pytest
from django.conf import settings

if not settings.configured:
    settings.configure(
        DEBUG=False,
        SECRET_KEY="x402mw-tests",
        ALLOWED_HOSTS=["testserver"],
        ROOT_URLCONF=__name__,
        MIDDLEWARE=["x402mw.adapters.django.PaymentMiddleware"],
        INSTALLED_APPS=[],
        USE_TZ=True,
    )
    django.setup()

from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.test import AsyncClient as DjangoAsyncClient
from django.test import Client as DjangoClient
from django.test import override_settings
from django.urls import path
from werkzeug.test import Client as WerkzeugClient

from tests.fake_platform import API_KEY, DYNAMIC, FIXED, NETWORK, PAY_TO, PAYER, PLATFORM_URL, FakePlatform, pay
from tests.waiting import eventually
from x402mw.adapters import django as django_adapter
from x402mw.adapters import flask as flask_adapter
from x402mw.adapters.wsgi import SETTLEMENT_KEY
from x402mw.adapters.wsgi import PaymentMiddleware as WSGIPaymentMiddleware
from x402mw.errors import ConfigurationError
from x402mw.protocol import decode_payment_required, decode_settlement_response, encode_header
from x402mw.seller import Discovery, PaidRoute, Settlement, SignIn

MIDDLEWARE = "x402mw.adapters.django.PaymentMiddleware"


@dataclass
class Record:
    """What the apps' code saw: amount callback arguments, streamed chunks, closed bodies."""

    priced_with: list[Any] = field(default_factory=list)
    produced: list[bytes] = field(default_factory=list)
    closed: bool = False


RECORD = Record()


@pytest.fixture(autouse=True)
def record() -> Iterator[Record]:
    global RECORD
    RECORD = Record()
    yield RECORD


@pytest.fixture
def platform() -> FakePlatform:
    return FakePlatform()


def _chunks() -> Iterator[bytes]:
    try:
        for index in range(3):
            chunk = f"chunk{index}\n".encode()
            RECORD.produced.append(chunk)
            yield chunk
    finally:
        RECORD.closed = True


def _result(settlement: Settlement) -> dict[str, Any]:
    return {"tx": settlement.transaction, "payer": settlement.payer, "amount": settlement.amount}


def _explode(request: Any) -> str:
    raise RuntimeError("the price service is down")


# Flask ------------------------------------------------------------------------------------


def flask_app(platform: FakePlatform, **options: Any) -> flask.Flask:
    app = flask.Flask(__name__)
    app.testing = True
    app.config.update(X402_API_KEY=API_KEY, X402_PLATFORM_URL=PLATFORM_URL, X402_ROUTES={"GET /table": FIXED})
    x402 = flask_adapter.X402(app, transport=platform.transport, **options)

    def price(request: flask.Request) -> str:
        RECORD.priced_with.append(request)
        return "$0.05" if request.args.get("size") == "big" else "$0.01"

    @app.get("/weather")
    @x402.require_payment(FIXED)
    def weather() -> flask.Response:
        response = flask.jsonify(_result(flask.g.x402))
        response.set_cookie("a", "1")
        response.set_cookie("b", "2")
        return response

    @app.get("/priced")
    @flask_adapter.require_payment(DYNAMIC, amount=price)
    def priced() -> dict[str, Any]:
        return _result(flask.g.x402)

    @app.get("/stream")
    @x402.require_payment(FIXED)
    def stream() -> flask.Response:
        return flask.Response(_chunks(), mimetype="text/plain")

    @app.get("/table")
    def table() -> dict[str, Any]:
        return _result(flask.g.x402)

    @app.get("/free")
    def free() -> dict[str, Any]:
        return {"free": True}

    @app.get("/boom")
    @x402.require_payment(DYNAMIC, amount=_explode)
    def boom() -> str:
        return "never"

    @app.get("/missing")
    @x402.require_payment("ep_unknown")
    def missing() -> str:
        return "never"

    @app.get("/items/<int:item>")
    @x402.require_payment(FIXED, discovery=Discovery(output={"item": 1}), sign_in=SignIn(origin="https://shop.example"))
    def item(item: int) -> dict[str, Any]:
        return _result(flask.g.x402)

    return app


# Django -------------------------------------------------------------------------------------


def _django_price(request: HttpRequest) -> str:
    RECORD.priced_with.append(request)
    return "$0.05" if request.GET.get("size") == "big" else "$0.01"


async def _django_async_price(request: HttpRequest) -> str:
    return _django_price(request)


def _django_weather(request: HttpRequest) -> HttpResponse:
    response = JsonResponse(_result(request.x402))
    response.set_cookie("a", "1")
    response.set_cookie("b", "2")
    return response


async def _async_chunks() -> AsyncIterator[bytes]:
    for chunk in _chunks():
        yield chunk


@django_adapter.require_payment(FIXED)
def django_weather(request: HttpRequest) -> HttpResponse:
    return _django_weather(request)


@django_adapter.require_payment(DYNAMIC, amount=_django_price)
def django_priced(request: HttpRequest) -> HttpResponse:
    return JsonResponse(_result(request.x402))


@django_adapter.require_payment(FIXED)
def django_stream(request: HttpRequest) -> StreamingHttpResponse:
    return StreamingHttpResponse(_chunks(), content_type="text/plain")


def django_table(request: HttpRequest) -> HttpResponse:
    return JsonResponse(_result(request.x402))


def django_free(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"free": True})


@django_adapter.require_payment(DYNAMIC, amount=_explode)
def django_boom(request: HttpRequest) -> HttpResponse:
    return HttpResponse("never")


@django_adapter.require_payment("ep_unknown")
def django_missing(request: HttpRequest) -> HttpResponse:
    return HttpResponse("never")


@django_adapter.require_payment(
    FIXED, discovery=Discovery(output={"item": 1}), sign_in=SignIn(origin="https://shop.example")
)
def django_item(request: HttpRequest, item: int) -> HttpResponse:
    return JsonResponse(_result(request.x402))


@django_adapter.require_payment(FIXED)
async def django_async_weather(request: HttpRequest) -> HttpResponse:
    return _django_weather(request)


@django_adapter.require_payment(DYNAMIC, amount=_django_async_price)
async def django_async_priced(request: HttpRequest) -> HttpResponse:
    return JsonResponse(_result(request.x402))


@django_adapter.require_payment(FIXED)
async def django_async_stream(request: HttpRequest) -> StreamingHttpResponse:
    return StreamingHttpResponse(_async_chunks(), content_type="text/plain")


urlpatterns = [
    path("weather", django_weather),
    path("priced", django_priced),
    path("stream", django_stream),
    path("table", django_table),
    path("free", django_free),
    path("boom", django_boom),
    path("missing", django_missing),
    path("async/weather", django_async_weather),
    path("async/priced", django_async_priced),
    path("async/stream", django_async_stream),
    path("items/<int:item>", django_item),
]


def django_settings(platform: FakePlatform, **x402: Any) -> override_settings:
    config = {
        "API_KEY": API_KEY,
        "PLATFORM_URL": PLATFORM_URL,
        "ROUTES": {"GET /table": FIXED},
        "TRANSPORT": platform.transport,
        **x402,
    }
    return override_settings(ROOT_URLCONF=__name__, MIDDLEWARE=[MIDDLEWARE], X402=config)


# WSGI ---------------------------------------------------------------------------------------


class ChunkBody:
    """A streaming WSGI body that records whether the server closed it."""

    def __iter__(self) -> Iterator[bytes]:
        for index in range(3):
            chunk = f"chunk{index}\n".encode()
            RECORD.produced.append(chunk)
            yield chunk

    def close(self) -> None:
        RECORD.closed = True


def wsgi_inner(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    route = environ["PATH_INFO"]
    if route == "/stream":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return ChunkBody()
    free = route == "/free" or route.startswith("/.well-known/")
    body = {"free": True} if free else _result(environ[SETTLEMENT_KEY])
    start_response("200 OK", [("Content-Type", "application/json"), ("Set-Cookie", "a=1"), ("Set-Cookie", "b=2")])
    return [json.dumps(body).encode()]


def wsgi_price(environ: dict[str, Any]) -> str:
    RECORD.priced_with.append(environ)
    return "$0.05" if "size=big" in environ.get("QUERY_STRING", "") else "$0.01"


def wsgi_app(platform: FakePlatform, **options: Any) -> WSGIPaymentMiddleware:
    return WSGIPaymentMiddleware(
        wsgi_inner,
        api_key=API_KEY,
        platform_url=PLATFORM_URL,
        transport=platform.transport,
        **options,
        routes={
            "GET /weather": FIXED,
            "GET /table": FIXED,
            "GET /stream": FIXED,
            "GET /priced": PaidRoute(DYNAMIC, amount=wsgi_price),
            "GET /boom": PaidRoute(DYNAMIC, amount=_explode),
            "GET /missing": "ep_unknown",
            "GET /items/{item}": PaidRoute(
                FIXED, discovery=Discovery(output={"item": 1}), sign_in=SignIn(origin="https://shop.example")
            ),
        },
    )


# One client interface over the three sync stacks ---------------------------------------------------


@dataclass
class Reply:
    status: int
    headers: Any  # werkzeug's Headers or Django's ResponseHeaders: both case-insensitive
    cookies: list[str]
    chunks: Iterable[bytes]
    _body: bytes | None = None

    @property
    def body(self) -> bytes:
        if self._body is None:
            self._body = b"".join(self.chunks)
        return self._body

    def json(self) -> Any:
        return json.loads(self.body)


class Seller:
    name: str
    host = "localhost"
    request_type: type

    def get(self, path: str, payment: str | None = None, header: str = "Payment-Signature") -> Reply:
        raise NotImplementedError

    def close(self) -> None:
        pass


class WerkzeugSeller(Seller):
    def __init__(self, name: str, app: Any, request_type: type, close: Callable[[], None]) -> None:
        self.name, self.client, self.request_type, self._close = name, WerkzeugClient(app), request_type, close

    def get(self, path: str, payment: str | None = None, header: str = "Payment-Signature") -> Reply:
        headers = {header: payment} if payment is not None else {}
        response = self.client.get(path, headers=headers, buffered=False)
        cookies = [c.split("=", 1)[0] for c in response.headers.getlist("Set-Cookie")]
        return Reply(response.status_code, response.headers, cookies, response.response)  # type: ignore[arg-type]

    def close(self) -> None:
        self._close()


class DjangoSeller(Seller):
    name = "django"
    host = "testserver"
    request_type = HttpRequest

    def __init__(self, platform: FakePlatform) -> None:
        self.settings = django_settings(platform)
        self.settings.enable()
        self.client = DjangoClient()

    def get(self, path: str, payment: str | None = None, header: str = "Payment-Signature") -> Reply:
        headers = {header: payment} if payment is not None else {}
        response = self.client.get(path, headers=headers)
        chunks = response.streaming_content if response.streaming else [response.content]
        return Reply(response.status_code, response.headers, list(response.cookies), chunks)

    def close(self) -> None:
        self.settings.disable()


@pytest.fixture(params=["flask", "django", "wsgi"])
def seller(request: pytest.FixtureRequest, platform: FakePlatform) -> Iterator[Seller]:
    made: Seller
    if request.param == "flask":
        app = flask_app(platform)
        made = WerkzeugSeller("flask", app, flask.Request, app.extensions["x402mw"].close)
    elif request.param == "wsgi":
        middleware = wsgi_app(platform)
        made = WerkzeugSeller("wsgi", middleware, dict, middleware.close)
    else:
        made = DjangoSeller(platform)
    yield made
    made.close()


def assert_challenge(reply: Reply, *, amount: int = 10000, error: str | None = None) -> str:
    assert reply.status == 402, reply.body
    header: str = reply.headers["PAYMENT-REQUIRED"]
    required = decode_payment_required(header)
    assert required.x402_version == 2
    assert required.error == error
    offer = required.accepts[0]
    assert (offer.network, offer.pay_to, offer.amount) == (NETWORK, PAY_TO, amount)
    assert required.resource is not None and required.resource.url.startswith("http://")
    assert reply.headers["Cache-Control"] == "no-store"
    assert "PAYMENT-REQUIRED" in reply.headers["Access-Control-Expose-Headers"]
    assert reply.headers["Content-Type"].startswith("application/json")
    body = reply.json()
    assert body["x402Version"] == 2 and body["accepts"] == [offer.to_wire()]
    assert body.get("error") == error
    return header


def assert_paid(reply: Reply, *, amount: int = 10000) -> dict[str, Any]:
    assert reply.status == 200, reply.body
    receipt = decode_settlement_response(reply.headers["PAYMENT-RESPONSE"])
    assert "PAYMENT-RESPONSE" in reply.headers["Access-Control-Expose-Headers"]
    body: dict[str, Any] = reply.json()
    assert body == {"tx": receipt.transaction, "payer": PAYER, "amount": amount}
    assert receipt.success and receipt.payer == PAYER and receipt.amount == amount
    assert receipt.receipt is not None and receipt.receipt["payTo"] == PAY_TO
    return body


# The sync stacks --------------------------------------------------------------------------------


def test_unpaid_request_gets_a_challenge(seller: Seller, platform: FakePlatform) -> None:
    reply = seller.get("/weather?city=paris")
    assert_challenge(reply)
    required = decode_payment_required(reply.headers["PAYMENT-REQUIRED"])
    assert required.resource is not None
    assert required.resource.url == f"http://{seller.host}/weather?city=paris"
    assert platform.settlements == []


def test_paid_retry_is_served_with_the_settlement(seller: Seller, platform: FakePlatform) -> None:
    challenge = assert_challenge(seller.get("/weather"))
    reply = seller.get("/weather", pay(challenge))
    body = assert_paid(reply)
    assert body["tx"].startswith("0x") and len(body["tx"]) == 66
    assert len(platform.settlements) == 1
    assert platform.settlements[0]["accepted"]["amount"] == "10000"


def test_repeated_set_cookie_headers_survive(seller: Seller) -> None:
    challenge = assert_challenge(seller.get("/weather"))
    reply = seller.get("/weather", pay(challenge))
    assert reply.status == 200
    assert sorted(reply.cookies) == ["a", "b"]


def test_v1_x_payment_header_is_read(seller: Seller) -> None:
    challenge = decode_payment_required(seller.get("/weather").headers["PAYMENT-REQUIRED"])
    signature = json.loads(base64.b64decode(pay(encode_header(challenge))))
    v1 = {"x402Version": 1, "scheme": "exact", "network": NETWORK, "payload": signature["payload"]}
    assert_paid(seller.get("/weather", encode_header(v1), header="X-Payment"))


def test_tampered_terms_are_refused_without_a_settlement_call(seller: Seller, platform: FakePlatform) -> None:
    challenge = assert_challenge(seller.get("/weather"))
    reply = seller.get("/weather", pay(challenge, amount=1))
    assert_challenge(reply, error="invalid_payment_requirements")
    assert platform.settlements == []


@pytest.mark.parametrize(
    "payment",
    [
        "not base64 at all!",
        base64.b64encode(b"not json").decode(),
        base64.b64encode(b'["a list"]').decode(),
        "A" * 9000,
    ],
    ids=["garbage", "not-json", "not-an-object", "oversized"],
)
def test_malformed_payment_header_is_invalid_payload(seller: Seller, platform: FakePlatform, payment: str) -> None:
    assert_challenge(seller.get("/weather", payment), error="invalid_payload")
    assert platform.settlements == []


def test_dynamic_price_callback_gets_the_framework_request(seller: Seller) -> None:
    challenge = assert_challenge(seller.get("/priced?size=big"), amount=50000)
    assert len(RECORD.priced_with) == 1
    assert isinstance(RECORD.priced_with[0], seller.request_type)
    assert_paid(seller.get("/priced?size=big", pay(challenge)), amount=50000)
    assert len(RECORD.priced_with) == 2  # the paid retry is priced again: a challenge pays for what it priced
    small = assert_challenge(seller.get("/priced"), amount=10000)
    assert_challenge(seller.get("/priced?size=big", pay(small)), error="invalid_payment_requirements", amount=50000)


def test_streaming_response_streams(seller: Seller) -> None:
    challenge = assert_challenge(seller.get("/stream"))
    reply = seller.get("/stream", pay(challenge))
    assert reply.status == 200
    assert decode_settlement_response(reply.headers["PAYMENT-RESPONSE"]).success
    # Headers are out and the body is not read (werkzeug's client pulls the first chunk itself).
    assert RECORD.produced in ([], [b"chunk0\n"]) and not RECORD.closed
    assert reply.body == b"chunk0\nchunk1\nchunk2\n"
    if hasattr(reply.chunks, "close"):
        reply.chunks.close()
    assert RECORD.closed


def test_the_well_known_manifest_lists_the_paid_routes(seller: Seller, platform: FakePlatform) -> None:
    for where in ("/.well-known/x402", "/.well-known/x402.json"):
        reply = seller.get(where)
        assert reply.status == 200, reply.body
        assert reply.headers["Content-Type"] == "application/json"
        assert reply.headers["Cache-Control"] == "private, max-age=60" and reply.headers["Vary"] == "Host"
        manifest = reply.json()
        assert manifest["x402Version"] == 2 and isinstance(manifest["lastUpdated"], int)
        items = {item["resource"]["url"]: item for item in manifest["items"]}
        origin = f"http://{seller.host}"
        # every paid route (table and marked views), the unknown endpoint left out, no free route
        assert {f"{origin}/weather", f"{origin}/priced", f"{origin}/table", f"{origin}/items/:item"} <= set(items)
        assert f"{origin}/missing" not in items and f"{origin}/free" not in items
        weather, item = items[f"{origin}/weather"], items[f"{origin}/items/:item"]
        assert weather["accepts"][0]["amount"] == "10000" and weather["accepts"][0]["payTo"] == PAY_TO
        assert "amount" not in items[f"{origin}/priced"]["accepts"][0]  # priced per request
        assert item["input"] == {"method": "GET", "routeTemplate": "/items/:item"}
        assert item["output"] == {"type": "json", "example": {"item": 1}}
        assert item["requires"] == ["sign-in-with-x"]
    assert all(path.startswith("/v1/agent/endpoints/") for _, path in platform.requests)


def test_the_well_known_manifest_can_be_turned_off(platform: FakePlatform) -> None:
    flask_off = flask_app(platform, well_known=False)
    assert WerkzeugClient(flask_off).get("/.well-known/x402").status_code == 404
    flask_config_off = flask.Flask(__name__)
    flask_config_off.config.update(X402_API_KEY=API_KEY, X402_WELL_KNOWN=False)
    flask_adapter.X402(flask_config_off, transport=platform.transport)
    assert WerkzeugClient(flask_config_off).get("/.well-known/x402").status_code == 404
    wsgi_off = wsgi_app(platform, well_known=False)
    own = WerkzeugClient(wsgi_off).get("/.well-known/x402")
    assert own.status_code == 200 and own.get_json() == {"free": True}  # the app's own answer
    with django_settings(platform, WELL_KNOWN=False):
        assert DjangoClient().get("/.well-known/x402").status_code == 404
    assert platform.requests == []


def test_table_route_is_paid(seller: Seller) -> None:
    challenge = assert_challenge(seller.get("/table"))
    assert_paid(seller.get("/table", pay(challenge)))


def test_unpaid_routes_are_untouched(seller: Seller, platform: FakePlatform) -> None:
    reply = seller.get("/free")
    assert reply.status == 200 and reply.json() == {"free": True}
    assert "PAYMENT-REQUIRED" not in reply.headers and "PAYMENT-RESPONSE" not in reply.headers
    assert "Access-Control-Expose-Headers" not in reply.headers
    assert platform.requests == []


def test_unreachable_platform_is_503_with_retry_after(seller: Seller, platform: FakePlatform) -> None:
    platform.unreachable = True
    reply = seller.get("/weather")
    assert reply.status == 503
    assert reply.headers["Retry-After"].isdigit()
    assert reply.json()["error"]["code"] == "payment_platform_unavailable"


def test_failed_settlement_is_402_with_reason(seller: Seller, platform: FakePlatform) -> None:
    challenge = assert_challenge(seller.get("/weather"))
    platform.outcome = "insufficient_funds"
    reply = seller.get("/weather", pay(challenge))
    assert_challenge(reply, error="insufficient_funds")
    response = decode_settlement_response(reply.headers["PAYMENT-RESPONSE"])
    assert not response.success and response.error_reason == "insufficient_funds"


def test_pending_settlement_is_402_with_retry_after(seller: Seller, platform: FakePlatform) -> None:
    challenge = assert_challenge(seller.get("/weather"))
    platform.outcome = "pending"
    reply = seller.get("/weather", pay(challenge))
    assert reply.status == 402
    assert reply.headers["Retry-After"] == "1"
    response = decode_settlement_response(reply.headers["PAYMENT-RESPONSE"])
    assert response.error_reason == "settlement_pending" and response.transaction.startswith("0x")


def test_unknown_endpoint_is_a_logged_500(seller: Seller, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="x402mw.seller"):
        reply = seller.get("/missing")
    assert reply.status == 500
    assert reply.json()["error"]["code"] == "payment_configuration_error"
    assert any("ep_unknown" in r.getMessage() for r in caplog.records)


def test_unexpected_error_is_a_logged_500_never_a_402(seller: Seller, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="x402mw.seller"):
        reply = seller.get("/boom")
    assert reply.status == 500
    assert reply.json()["error"]["code"] == "internal_error"
    assert "PAYMENT-REQUIRED" not in reply.headers
    failures = [r for r in caplog.records if r.exc_info is not None]
    assert failures and "the price service is down" in str(failures[0].exc_info[1])  # type: ignore[index]


def test_issued_challenges_reach_the_platform_in_the_background(seller: Seller, platform: FakePlatform) -> None:
    challenge = decode_payment_required(assert_challenge(seller.get("/weather")))
    eventually(lambda: platform.challenges, what="the challenge to reach the platform")
    assert [c["challengeId"] for c in platform.challenges] == [challenge.accepts[0].extra["challengeId"]]


# Flask specifics --------------------------------------------------------------------------------


async def _async_price(request: Any) -> str:
    return "$0.01"


def test_flask_configuration_problems_are_listed_together() -> None:
    app = flask.Flask(__name__)
    app.config["X402_SETTLE_TIMEOUT"] = "soon"
    with pytest.raises(ConfigurationError) as caught:
        flask_adapter.X402(
            app,
            platform_url="ftp://platform",
            routes={"weather": FIXED, "GET /a": PaidRoute(FIXED, amount=_async_price)},
        )
    problems = "\n".join(caught.value.problems)
    assert len(caught.value.problems) == 5, problems
    for expected in ("api_key", "platform_url", "'weather'", "async", "settle_timeout"):
        assert expected in problems
    assert "x402mw" not in app.extensions


def test_flask_explicit_arguments_win_over_config(platform: FakePlatform) -> None:
    app = flask.Flask(__name__)
    app.config.update(X402_API_KEY="not a key", X402_ROUTES={"GET /x": FIXED})
    extension = flask_adapter.X402()
    extension_with_key = flask_adapter.X402(api_key=API_KEY, routes={}, transport=platform.transport)
    with pytest.raises(ConfigurationError):
        extension.init_app(app)
    extension_with_key.init_app(app)
    state = app.extensions["x402mw"]
    assert isinstance(state, flask_adapter.X402State) and not state.routes
    assert "sk_test" not in repr(extension_with_key) and "sk_test" not in repr(state.gate)
    state.close()


def test_flask_async_amount_callback_refused_at_decoration() -> None:
    with pytest.raises(ConfigurationError, match="async"):
        flask_adapter.require_payment(DYNAMIC, amount=_async_price)


def test_flask_view_without_extension_fails_loudly() -> None:
    app = flask.Flask(__name__)
    app.testing = True

    @app.get("/weather")
    @flask_adapter.require_payment(FIXED)
    def weather() -> str:
        return "free lunch"

    with pytest.raises(ConfigurationError, match="no X402 extension"):
        app.test_client().get("/weather")


def test_flask_cors_preflight_is_not_charged(platform: FakePlatform) -> None:
    app = flask_app(platform)
    reply = app.test_client().options("/weather")
    assert reply.status_code == 200 and "PAYMENT-REQUIRED" not in reply.headers
    app.extensions["x402mw"].close()


def test_flask_async_view_is_paid(platform: FakePlatform) -> None:
    app = flask_app(platform)

    @app.get("/async")
    @flask_adapter.require_payment(FIXED)
    async def async_view() -> dict[str, Any]:
        return _result(flask.g.x402)

    client = app.test_client()
    challenge = client.get("/async").headers["PAYMENT-REQUIRED"]
    reply = client.get("/async", headers={"Payment-Signature": pay(challenge)})
    assert reply.status_code == 200 and reply.get_json()["payer"] == PAYER
    app.extensions["x402mw"].close()


# Django specifics -------------------------------------------------------------------------------


def _get_response(request: HttpRequest) -> HttpResponse:
    return HttpResponse()


async def _aget_response(request: HttpRequest) -> HttpResponse:
    return HttpResponse()


def test_django_configuration_problems_are_listed_together(platform: FakePlatform) -> None:
    bad = {
        "API_KEY": "not a key",
        "ROUTES": {"weather": FIXED, "GET /a": PaidRoute(FIXED, amount=_async_price)},
        "SETTLE_TIMEOUT": -1,
        "COLOUR": "red",
    }
    with override_settings(X402=bad), pytest.raises(ImproperlyConfigured) as caught:
        django_adapter.PaymentMiddleware(_get_response)
    message = str(caught.value)
    for expected in ("'COLOUR'", "api_key", "'weather'", "async", "settle_timeout"):
        assert expected in message, message
    assert "not a key" not in message
    with override_settings(X402=None), pytest.raises(ImproperlyConfigured, match="X402 must be a dict"):
        django_adapter.PaymentMiddleware(_get_response)


def test_django_async_amount_callbacks_are_fine_in_async_mode(platform: FakePlatform) -> None:
    routes = {"GET /a": PaidRoute(FIXED, amount=_async_price)}
    with django_settings(platform, ROUTES=routes):
        middleware = django_adapter.PaymentMiddleware(_aget_response)
        assert middleware.is_async
        with pytest.raises(ImproperlyConfigured, match="async"):
            django_adapter.PaymentMiddleware(_get_response)


def test_django_view_without_middleware_fails_loudly(platform: FakePlatform) -> None:
    with (
        django_settings(platform),
        override_settings(MIDDLEWARE=[]),
        pytest.raises(ImproperlyConfigured, match="PaymentMiddleware"),
    ):
        DjangoClient().get("/weather")


@pytest.mark.anyio
async def test_django_async_unpaid_then_paid(platform: FakePlatform) -> None:
    with django_settings(platform):
        client = DjangoAsyncClient()
        reply = await client.get("/async/weather")
        challenge = assert_challenge(Reply(reply.status_code, reply.headers, list(reply.cookies), [reply.content]))
        reply = await client.get("/async/weather", headers={"Payment-Signature": pay(challenge)})
        assert_paid(Reply(reply.status_code, reply.headers, [], [reply.content]))
        assert sorted(reply.cookies) == ["a", "b"]
        tampered = await client.get("/async/weather", headers={"Payment-Signature": pay(challenge, amount=1)})
        assert_challenge(
            Reply(tampered.status_code, tampered.headers, [], [tampered.content]),
            error="invalid_payment_requirements",
        )
        garbage = await client.get("/async/weather", headers={"Payment-Signature": "%%%"})
        assert_challenge(Reply(garbage.status_code, garbage.headers, [], [garbage.content]), error="invalid_payload")
        manifest = await client.get("/.well-known/x402")  # served in async mode too
        assert manifest.status_code == 200 and manifest.headers["Cache-Control"] == "private, max-age=60"
        listed = {item["resource"]["url"] for item in manifest.json()["items"]}
        assert {"http://testserver/async/weather", "http://testserver/items/:item"} <= listed
    assert len(platform.settlements) == 1


@pytest.mark.anyio
async def test_django_async_dynamic_price_may_be_async(platform: FakePlatform) -> None:
    with django_settings(platform):
        client = DjangoAsyncClient()
        reply = await client.get("/async/priced?size=big")
        challenge = assert_challenge(Reply(reply.status_code, reply.headers, [], [reply.content]), amount=50000)
        assert isinstance(RECORD.priced_with[0], HttpRequest)
        reply = await client.get("/async/priced?size=big", headers={"Payment-Signature": pay(challenge)})
        assert_paid(Reply(reply.status_code, reply.headers, [], [reply.content]), amount=50000)


@pytest.mark.anyio
async def test_django_async_streaming_response_streams(platform: FakePlatform) -> None:
    with django_settings(platform):
        client = DjangoAsyncClient()
        first = await client.get("/async/stream")
        reply = await client.get("/async/stream", headers={"Payment-Signature": pay(first.headers["PAYMENT-REQUIRED"])})
        assert reply.status_code == 200 and reply.streaming
        assert decode_settlement_response(reply.headers["PAYMENT-RESPONSE"]).success
        assert RECORD.produced == []
        chunks = [chunk async for chunk in reply.streaming_content]
        assert b"".join(chunks) == b"chunk0\nchunk1\nchunk2\n"


@pytest.mark.anyio
async def test_django_async_unreachable_platform_is_503(platform: FakePlatform) -> None:
    platform.unreachable = True
    with django_settings(platform):
        reply = await DjangoAsyncClient().get("/async/weather")
    assert reply.status_code == 503 and reply.headers["Retry-After"].isdigit()


def test_django_merges_the_expose_header_of_the_view(platform: FakePlatform) -> None:
    @django_adapter.require_payment(FIXED)
    def view(request: HttpRequest) -> HttpResponse:
        response = HttpResponse("ok")
        response.headers["Access-Control-Expose-Headers"] = "X-Trace"
        return response

    with django_settings(platform), override_settings(ROOT_URLCONF=_ExposeUrls(view)):
        client = DjangoClient()
        challenge = client.get("/expose").headers["PAYMENT-REQUIRED"]
        reply = client.get("/expose", headers={"Payment-Signature": pay(challenge)})
    assert reply.headers["Access-Control-Expose-Headers"] == "X-Trace, PAYMENT-REQUIRED, PAYMENT-RESPONSE"


class _ExposeUrls:
    def __init__(self, view: Callable[..., Any]) -> None:
        self.urlpatterns = [path("expose", view)]


# WSGI specifics ---------------------------------------------------------------------------------


def test_wsgi_configuration_problems_are_listed_together() -> None:
    with pytest.raises(ConfigurationError) as caught:
        WSGIPaymentMiddleware(
            wsgi_inner,
            api_key="nope",
            routes={"nope": FIXED, "GET /a": PaidRoute(FIXED, amount=_async_price)},
            settle_timeout=0,
        )
    assert len(caught.value.problems) == 4, caught.value.problems


def test_wsgi_headers_are_appended_to_the_apps_list(platform: FakePlatform) -> None:
    middleware = wsgi_app(platform)
    seen: list[tuple[str, list[tuple[str, str]]]] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], None]:
        seen.append((status, headers))
        return lambda data: None

    environ = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": "/weather",
        "SCRIPT_NAME": "/shop",
        "QUERY_STRING": "",
        "SERVER_NAME": "example.com",
        "SERVER_PORT": "8080",
        "wsgi.url_scheme": "https",
    }
    b"".join(middleware(dict(environ), start_response))
    challenge = dict(seen[0][1])["PAYMENT-REQUIRED"]
    required = decode_payment_required(challenge)
    assert required.resource is not None and required.resource.url == "https://example.com:8080/shop/weather"
    paid = {**environ, "HTTP_PAYMENT_SIGNATURE": pay(challenge)}
    b"".join(middleware(paid, start_response))
    status, headers = seen[1]
    assert status == "200 OK"
    names = [name for name, _ in headers]
    assert names[:3] == ["Content-Type", "Set-Cookie", "Set-Cookie"]
    assert names[3:] == ["PAYMENT-RESPONSE", "Access-Control-Expose-Headers"]
    middleware.close()


def _host_answers(framework: str, platform: FakePlatform, origin: str | None) -> list[tuple[int, Any, Any]]:
    """The well-known list and the 402 of ``/weather`` for requests with ``Host: evil.test``, from
    ``framework`` configured with ``origin``: each answer's status, headers and JSON."""
    options = {} if origin is None else {"origin": origin}
    found = []
    if framework == "django":
        with django_settings(platform, **{k.upper(): v for k, v in options.items()}):
            client = DjangoClient()
            for where in ("/.well-known/x402", "/weather"):
                response = client.get(where, headers={"Host": "evil.test"})
                found.append((response.status_code, response.headers, json.loads(response.content)))
        return found
    app = flask_app(platform, **options) if framework == "flask" else wsgi_app(platform, **options)
    werkzeug = WerkzeugClient(app)
    for where in ("/.well-known/x402", "/weather"):
        reply = werkzeug.get(where, headers={"Host": "evil.test"})
        found.append((reply.status_code, reply.headers, reply.get_json()))
    return found


@pytest.mark.parametrize("framework", ["flask", "wsgi", "django"])
def test_published_urls_are_under_the_configured_origin_whatever_the_host(
    framework: str, platform: FakePlatform
) -> None:
    (status, headers, manifest), (paid_status, _, challenge) = _host_answers(
        framework, platform, "https://Shop.example"
    )
    assert status == 200 and manifest["items"], manifest
    urls = [item["resource"]["url"] for item in manifest["items"]]
    assert all(url.startswith("https://shop.example/") for url in urls), urls
    assert headers["Cache-Control"] == "public, max-age=60" and "Vary" not in headers
    assert paid_status == 402 and challenge["resource"]["url"] == "https://shop.example/weather"

    # without an origin: the request's own, and no shared cache keeps the list
    (status, headers, manifest), (_, _, challenge) = _host_answers(framework, platform, None)
    assert all(item["resource"]["url"].startswith("http://evil.test/") for item in manifest["items"])
    assert headers["Cache-Control"] == "private, max-age=60" and headers["Vary"] == "Host"
    assert challenge["resource"]["url"] == "http://evil.test/weather"


def test_an_origin_that_is_not_one_is_refused(platform: FakePlatform) -> None:
    for bad in ("shop.example", "https://shop.example/path", "ftp://shop.example", "https://u@shop.example"):
        with pytest.raises(ConfigurationError, match="origin must be"):
            wsgi_app(platform, origin=bad)
        with pytest.raises(ImproperlyConfigured, match="origin must be"), django_settings(platform, ORIGIN=bad):
            DjangoClient().get("/weather")
