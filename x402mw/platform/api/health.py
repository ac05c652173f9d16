"""Health: ``/v1/health`` and the probes ``/healthz`` and ``/readyz`` (no API key)."""

from __future__ import annotations

import asyncio

from sqlalchemy import text
from starlette.requests import Request

from x402mw._version import __version__
from x402mw.platform.http.errors import outage_error
from x402mw.platform.http.responses import ModelResponse
from x402mw.platform.http.routing import Answer, ApiRoute, Operation
from x402mw.platform.http.state import platform_of
from x402mw.platform.objects.service import HealthStatus, Reachable, Readiness

__all__ = ["READINESS_TIMEOUT", "probe_routes", "routes"]

READINESS_TIMEOUT = 3.0


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
    """Readiness: 200 when the database answers and every chain's node can be reached, else 503."""
    platform = platform_of(request)
    database: Reachable
    try:
        async with asyncio.timeout(READINESS_TIMEOUT), platform.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
        database = "ok"
    except Exception as exc:
        if outage_error(exc) is None and not isinstance(exc, TimeoutError):
            raise
        database = "unavailable"
    chains: dict[str, Reachable] = {
        c.network.caip2: "ok" if c.relayer.available else "unavailable" for c in platform.chains
    }
    ok = database == "ok" and all(state == "ok" for state in chains.values())
    body = Readiness(status="ready" if ok else "not_ready", database=database, chains=chains)
    return ModelResponse(body, status_code=200 if ok else 503, headers=None if ok else {"Retry-After": "2"})


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
            description="Whether the platform can take payments now: its database answers and each chain's node can "
            "be reached. 200 when all can, else 503 with the same body naming what cannot (new payments, orders "
            "and refunds are answered 503 with `Retry-After` meanwhile).",
            answer=Readiness,
            public=True,
            standalone=True,
            answers=[Answer(status=503, description="Not ready: what cannot be reached is named", model=Readiness)],
        ),
    ),
]
"""The probes, at the platform's root."""
