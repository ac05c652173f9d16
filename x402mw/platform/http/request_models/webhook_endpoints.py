"""The bodies of ``/webhook-endpoints``: create, update and rotate-secret."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, WithJsonSchema, field_validator

from x402mw.platform.http.bodies import PatchBody
from x402mw.platform.http.fields import HttpUrl, http_url
from x402mw.platform.webhooks import EVENT_TYPES


def _events(value: list[str] | None) -> list[str] | None:
    if value is None:
        return None
    for name in value:
        if name != "*" and name not in EVENT_TYPES:
            raise ValueError(f"unknown event type {name[:64]!r} (use one of {', '.join(EVENT_TYPES)}, or '*')")
    if "*" in value and len(value) > 1:
        raise ValueError("'*' must be alone")
    return list(dict.fromkeys(value))


EventTypes = Annotated[
    list[str],
    WithJsonSchema(
        {
            "type": "array",
            "items": {"type": "string", "enum": [*EVENT_TYPES, "*"]},
            "minItems": 1,
            "maxItems": len(EVENT_TYPES),
            "if": {"contains": {"const": "*"}},  # "*" stands alone
            "then": {"maxItems": 1},
        }
    ),
]


class _Fields(BaseModel):
    model_config = ConfigDict(extra="forbid")

    _v_url = field_validator("url", check_fields=False)(http_url)
    _v_events = field_validator("enabledEvents", check_fields=False)(_events)


class WebhookEndpointCreate(_Fields):
    url: HttpUrl = Field(description="absolute http(s) URL receiving the POSTed events")
    enabledEvents: EventTypes = Field(
        min_length=1,
        max_length=len(EVENT_TYPES),
        description='event types to receive (e.g. `agent_payment.settled`), or `["*"]` for all',
    )
    description: str | None = Field(default=None, max_length=500, description="free text, at most 500 characters")


class WebhookEndpointUpdate(_Fields, PatchBody):
    CLEARABLE = frozenset({"description"})

    url: HttpUrl | None = Field(default=None, description="absolute http(s) URL receiving the POSTed events")
    enabledEvents: EventTypes | None = Field(
        default=None,
        min_length=1,
        max_length=len(EVENT_TYPES),
        description='event types to receive (e.g. `agent_payment.settled`), or `["*"]` for all',
    )
    description: str | None = Field(default=None, max_length=500, description="free text, at most 500 characters")
    status: Literal["enabled", "disabled"] | None = Field(
        default=None, description="`disabled` stops deliveries (pending ones wait); `enabled` resumes them"
    )


class SecretRotation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    expiresInSeconds: StrictInt = Field(
        default=86400,
        ge=0,
        le=604800,
        description="how long the previous secret keeps signing deliveries next to the new one, 0–604800 (7 "
        "days); default 86400",
    )
