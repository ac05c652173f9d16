"""Health: ``/v1/health`` and the probes ``/healthz`` and ``/readyz`` (no API key)."""

from __future__ import annotations

from starlette.requests import Request

from x402mw._version import __version__
from x402mw.platform.http.responses import ModelResponse
from x402mw.platform.http.routing import Answer, ApiRoute, Operation
from x402mw.platform.http.state import platform_of
from x402mw.platform.objects.service import Error, HealthStatus, Reachable, Readiness, ReadinessCheck
from x402mw.platform.readiness import readiness
from x402mw.platform.request_ids import current_request_id


async def health(request: Request) -> ModelResponse:
    platform = platform_of(request)
    return ModelResponse(
        HealthStatus(
            version=__version__,
            receipt_signer=platform.receipt_address,
            networks=[c.network.caip2 for c in platform.chains],
        )
    )


async def ready(request: Request) -> ModelResponse:
    """Readiness: 200 when every check passes (`x402mw.platform.readiness`), else 503 naming each failure."""
    platform = platform_of(request)
    redis_url = platform.settings.redis_url
    checks = await readiness(
        platform.engine, platform.chains, redis_url.get_secret_value() if redis_url is not None else None
    )
    passed = {check.name: check.ok for check in checks}
    chains: dict[str, Reachable] = {
        c.network.caip2: "ok" if passed[f"chain {c.network.caip2}"] and c.relayer.available else "unavailable"
        for c in platform.chains
    }
    failed = [f"{check.name}: {check.detail}" for check in checks if not check.ok]
    error = None
    if failed:
        message = "Not ready: " + "; ".join(failed)
        error = Error(type="api_error", code="not_ready", message=message, request_id=current_request_id())
    body = Readiness(
        status="not_ready" if failed else "ready",
        database="ok" if passed["database"] else "unavailable",
        chains=chains,
        checks={check.name: ReadinessCheck(ok=check.ok, detail=check.detail) for check in checks},
        error=error,
    )
    return ModelResponse(body, status_code=503 if failed else 200, headers={"Retry-After": "2"} if failed else None)


_TAG = "Health"
routes = [
    ApiRoute(
        "GET",
        "/health",
        health,
        Operation(
            id="getHealth", tag=_TAG, summary="Platform health", answer=HealthStatus, public=True, standalone=True
        ),
    )
]
probe_routes = [
    ApiRoute(
        "GET",
        "/healthz",
        health,
        Operation(
            id="getHealthz",
            tag=_TAG,
            summary="Platform health (probe path)",
            answer=HealthStatus,
            public=True,
            standalone=True,
        ),
    ),
    ApiRoute(
        "GET",
        "/readyz",
        ready,
        Operation(
            id="getReadiness",
            tag=_TAG,
            summary="Readiness (probe path)",
            description="Whether the platform can take payments now: its database answers with the schema this "
            "release knows, Redis answers (when configured), each chain's node answers and each chain's relayer can "
            "send with gas above its floor. 200 with every check's result when all pass, else 503 with the same body "
            "and an `error` (code `not_ready`) naming each failure (new payments, orders and refunds are answered "
            "503 with `Retry-After` meanwhile).",
            answer=Readiness,
            public=True,
            standalone=True,
            answers=[Answer(status=503, description="Not ready: what cannot be reached is named", model=Readiness)],
        ),
    ),
]
"""The probes, at the platform's root."""
