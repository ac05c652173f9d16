"""A single-file Django seller: GET /weather costs what its agent endpoint says.

X402MW_API_KEY=sk_test_... X402MW_ENDPOINT_ID=... python examples/django_seller.py runserver 8004

or served asynchronously, by uvicorn, from any folder: ``python examples/django_seller.py asgi``
(``PORT`` changes its port, 8004), the same as ``uvicorn django_seller:application --port 8004``
with ``--app-dir`` naming the folder of this file.
"""

from __future__ import annotations

import os
import sys

from django.conf import settings

settings.configure(
    DEBUG=os.environ.get("DJANGO_DEBUG") == "1",
    SECRET_KEY=os.environ.get("DJANGO_SECRET_KEY", "example-only-not-secret"),
    ALLOWED_HOSTS=["*"],
    ROOT_URLCONF=__name__,
    MIDDLEWARE=["x402mw.adapters.django.PaymentMiddleware"],
    X402={
        "API_KEY": os.environ.get("X402MW_API_KEY", ""),
        "PLATFORM_URL": os.environ.get("X402MW_PLATFORM_URL")
        or os.environ.get("X402MW_BASE_URL")
        or "http://127.0.0.1:4402/v1",
    },
)

import django  # noqa: E402

django.setup()

from django.core.asgi import get_asgi_application  # noqa: E402
from django.http import HttpRequest, JsonResponse  # noqa: E402
from django.urls import path  # noqa: E402

from x402mw.adapters.django import require_payment  # noqa: E402

ENDPOINT_ID = os.environ.get("X402MW_ENDPOINT_ID", "set-X402MW_ENDPOINT_ID")


@require_payment(ENDPOINT_ID, description="Today's weather")
def weather(request: HttpRequest) -> JsonResponse:
    settlement = request.x402
    return JsonResponse({"forecast": "sunny", "transaction": settlement.transaction, "payer": settlement.payer})


def health(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"ok": True})


urlpatterns = [path("weather", weather), path("health", health)]
application = get_asgi_application()

if __name__ == "__main__":
    if sys.argv[1:] == ["asgi"]:
        import uvicorn

        uvicorn.run(application, host="127.0.0.1", port=int(os.environ.get("PORT", "8004")))
    else:
        from django.core.management import execute_from_command_line

        execute_from_command_line(sys.argv)
