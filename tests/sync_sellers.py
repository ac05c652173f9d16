"""Real sync seller apps and Django's (sync through WSGI, async through ASGI), each selling one
path through one agent endpoint, for the tests every adapter must pass alike (paid exactly, or
metered): what the handler answers is ``respond(payment)``, the JSON of what the framework hands
it (``g.x402``, ``environ[SETTLEMENT_KEY]``, ``request.x402``).

`sync_seller` gives the WSGI app of ``flask``, ``wsgi`` or ``django`` (with Django's settings in
force while it is open); `django_settings` with ``asynchronous=True`` serves ``/async/<path>``
through Django's ASGI handler.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import django
import flask
from django.conf import settings

if not settings.configured:
    settings.configure(
        DEBUG=False,
        SECRET_KEY="x402mw-tests",
        ALLOWED_HOSTS=["testserver"],
        INSTALLED_APPS=[],
        USE_TZ=True,
        ROOT_URLCONF=__name__,
    )
    django.setup()

from django.http import HttpRequest, JsonResponse
from django.test import override_settings
from django.urls import path as url_path

from tests.harness import Deployment
from x402mw.adapters.flask import X402
from x402mw.adapters.wsgi import SETTLEMENT_KEY
from x402mw.adapters.wsgi import PaymentMiddleware as WSGIPaymentMiddleware

__all__ = ["SYNC_FRAMEWORKS", "Respond", "django_settings", "flask_app", "sync_seller", "wsgi_app"]

Respond = Callable[[Any], dict[str, Any]]
SYNC_FRAMEWORKS = ["flask", "wsgi", "django"]
urlpatterns: list[Any] = []  # (each test's URLs are set with its Django settings)


def flask_app(deployment: Deployment, path: str, respond: Respond) -> flask.Flask:
    app = flask.Flask(__name__)
    x402 = X402(app, api_key=deployment.api_key, platform_url=deployment.harness.url)

    @app.get(path)
    @x402.require_payment(deployment.endpoint_id)
    def handler() -> Any:
        return flask.jsonify(respond(flask.g.x402))

    return app


def wsgi_app(deployment: Deployment, path: str, respond: Respond) -> WSGIPaymentMiddleware:
    def inner(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        body = json.dumps(respond(environ[SETTLEMENT_KEY])).encode()
        start_response("200 OK", [("Content-Type", "application/json")])
        return [body]

    return WSGIPaymentMiddleware(
        inner,
        api_key=deployment.api_key,
        platform_url=deployment.harness.url,
        routes={f"GET {path}": deployment.endpoint_id},
    )


class _Urls:
    """A URL configuration answering ``path`` with a sync view and ``/async<path>`` with an async one."""

    def __init__(self, path: str, respond: Respond) -> None:
        def view(request: HttpRequest) -> JsonResponse:
            return JsonResponse(respond(request.x402))  # type: ignore[attr-defined]

        async def async_view(request: HttpRequest) -> JsonResponse:
            return JsonResponse(respond(request.x402))  # type: ignore[attr-defined]

        route = path.lstrip("/")
        self.urlpatterns = [url_path(route, view), url_path(f"async/{route}", async_view)]


def django_settings(
    deployment: Deployment, path: str, respond: Respond, *, asynchronous: bool = False
) -> override_settings:
    """Django's settings selling ``path`` (``/async<path>``, its async view, with ``asynchronous``)."""
    paid = f"/async{path}" if asynchronous else path
    return override_settings(
        ROOT_URLCONF=_Urls(path, respond),
        MIDDLEWARE=["x402mw.adapters.django.PaymentMiddleware"],
        X402={
            "API_KEY": deployment.api_key,
            "PLATFORM_URL": deployment.harness.url,
            "ROUTES": {f"GET {paid}": deployment.endpoint_id},
        },
    )


@contextlib.contextmanager
def sync_seller(framework: str, deployment: Deployment, path: str, respond: Respond) -> Iterator[Any]:
    """The WSGI app of ``framework`` (one of `SYNC_FRAMEWORKS`) selling ``path``."""
    if framework == "django":
        from django.core.handlers.wsgi import WSGIHandler

        with django_settings(deployment, path, respond):
            yield WSGIHandler()
    elif framework == "flask":
        yield flask_app(deployment, path, respond)
    else:
        yield wsgi_app(deployment, path, respond)
