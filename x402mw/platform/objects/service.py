"""What the platform answers of itself: errors, health, readiness, and its OpenAPI document."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from x402mw.platform.objects.base import EvmAddress, ResponseModel, omitted_if_none

ErrorType = Literal[
    "invalid_request_error",
    "authentication_error",
    "idempotency_error",
    "rate_limit_error",
    "api_error",
]


class Error(ResponseModel):
    """What went wrong with a request."""

    type: ErrorType
    code: str = Field(description="e.g. `parameter_invalid`, `resource_missing`")
    message: str
    request_id: str = Field(description="also in the `Request-Id` header")
    # "" too: the name of a key spelled ""
    param: str | None = omitted_if_none(description="the request parameter at fault, when there is one")


class ErrorEnvelope(ResponseModel):
    """Every error answer: ``{"error": {...}}``."""

    error: Error


class HealthStatus(ResponseModel):
    """The platform is up: its version, receipt signer and networks."""

    status: Literal["ok"] = "ok"
    version: str
    receipt_signer: EvmAddress = Field(description="address that signs settlement receipts")
    networks: list[str]


Reachable = Literal["ok", "unavailable"]


class ReadinessCheck(ResponseModel):
    """One dependency's check."""

    ok: bool
    detail: str = Field(description="what was found, or why the check failed")


class Readiness(ResponseModel):
    """Whether the platform can take payments now, and what it cannot reach."""

    status: Literal["ready", "not_ready"]
    database: Reachable
    chains: dict[str, Reachable] = Field(description="each served network (CAIP-2) and whether its node can be reached")
    checks: dict[str, ReadinessCheck] = Field(
        description="every check by name: `database` (reachable, schema migrated), `redis` (when configured), "
        "`chain <network>` (its JSON-RPC answers) and `relayer <network>` (can send, gas above its floor)"
    )
    error: Error | None = omitted_if_none(
        description="when not ready: the error envelope's body, code `not_ready`, its message every failed check"
    )


class OpenApiDocument(ResponseModel):
    """An OpenAPI 3.1 document (this one)."""

    openapi: str
    info: dict[str, Any]
    servers: list[dict[str, Any]]
    tags: list[dict[str, Any]]
    paths: dict[str, Any]
    components: dict[str, Any]
