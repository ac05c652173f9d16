"""``/agent/endpoints``: the resources a merchant sells to agents per request (x402)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from x402mw.client.merchant.calls import Call, Listing
from x402mw.client.merchant.resource import (
    NOT_GIVEN,
    APIObject,
    Collection,
    Mode,
    NotGiven,
    Resource,
    operation,
    paginated,
    present,
)

PricingMode = Literal["fixed", "dynamic"]
ReleasePolicy = Literal["included", "confirmed"]


class AgentEndpoint(APIObject):
    """A paid resource. ``amount_minor`` is the fixed price in the coin's minor units (``10000`` is
    0.01 USDC), None with ``pricing_mode="dynamic"``; ``release_policy`` is ``included`` or
    ``confirmed``."""

    id: str
    object: str = "agent_endpoint"
    name: str
    resource_url: str
    chain_id: int
    network: str
    currency: str
    asset: str | None = None
    asset_name: str | None = None
    asset_version: str | None = None
    decimals: int = 6
    payout_address: str
    pricing_mode: str
    amount_minor: int | None = None
    release_policy: str
    max_timeout_seconds: int
    livemode: bool
    created_at: datetime
    updated_at: datetime


_endpoints = Collection("/agent/endpoints", AgentEndpoint, "endpoint")


def _minor(value: int | str | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise TypeError(f"amount_minor must be an int or a str of minor units, not {type(value).__name__}")
    return str(value)


class AgentEndpoints(Resource[Mode]):
    """``client.agent_endpoints``: create, retrieve, update and list paid resources."""

    @operation
    def create(
        self,
        *,
        name: str,
        resource_url: str,
        chain_id: int,
        currency: str,
        payout_address: str,
        pricing_mode: PricingMode | None = None,
        amount_minor: int | str | None = None,
        release_policy: ReleasePolicy | None = None,
        max_timeout_seconds: int | None = None,
        idempotency_key: str | None = None,
    ) -> Call[AgentEndpoint]:
        """Sell ``resource_url`` for ``amount_minor`` minor units of ``currency`` (USDC or EURC) on
        ``chain_id``, paid out to ``payout_address``; ``pricing_mode="dynamic"`` prices each request."""
        body = present(
            name=name,
            resource_url=resource_url,
            chain_id=chain_id,
            currency=currency,
            payout_address=payout_address,
            pricing_mode=pricing_mode,
            amount_minor=_minor(amount_minor),
            release_policy=release_policy,
            max_timeout_seconds=max_timeout_seconds,
        )
        return _endpoints.create(body, idempotency_key)

    @operation
    def retrieve(self, endpoint_id: str) -> Call[AgentEndpoint]:
        return _endpoints.retrieve(endpoint_id)

    @operation
    def update(
        self,
        endpoint_id: str,
        *,
        name: str | None = None,
        resource_url: str | None = None,
        payout_address: str | None = None,
        pricing_mode: PricingMode | None = None,
        amount_minor: int | str | NotGiven | None = NOT_GIVEN,
        release_policy: ReleasePolicy | None = None,
        max_timeout_seconds: int | None = None,
    ) -> Call[AgentEndpoint]:
        """Change the given fields only; ``amount_minor=None`` removes the fixed price (with
        ``pricing_mode="dynamic"``)."""
        body = present(
            name=name,
            resource_url=resource_url,
            payout_address=payout_address,
            pricing_mode=pricing_mode,
            release_policy=release_policy,
            max_timeout_seconds=max_timeout_seconds,
        )
        if not isinstance(amount_minor, NotGiven):
            body["amountMinor"] = _minor(amount_minor)
        return _endpoints.update(endpoint_id, body)

    @paginated
    def list(
        self, *, limit: int | None = None, starting_after: str | None = None, ending_before: str | None = None
    ) -> Call[Listing[AgentEndpoint]]:
        return _endpoints.list(limit=limit, starting_after=starting_after, ending_before=ending_before)
