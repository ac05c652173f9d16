"""Agent endpoints: as the settlement path reads them (one indexed read, cached briefly), and made,
changed and listed by the API, the dashboard and the CLI."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import Row, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from x402mw.platform.db import tables
from x402mw.platform.db.models import AgentEndpoint, utcnow
from x402mw.platform.services.cache import TTLCache
from x402mw.platform.services.errors import ServiceError
from x402mw.protocol.networks import Network


async def find_endpoint(conn: AsyncConnection, merchant_id: str, livemode: bool, endpoint_id: str) -> Row[Any] | None:
    """The merchant's endpoint row, or None (another merchant's endpoint is indistinguishable from none)."""
    table = tables.agent_endpoints
    return (
        await conn.execute(
            select(table).where(
                table.c.id == endpoint_id, table.c.merchant_id == merchant_id, table.c.livemode == livemode
            )
        )
    ).first()


class EndpointDirectory:
    """Endpoint reads for settlement, cached ``ttl`` seconds; `invalidate` after a change in this process."""

    def __init__(self, engine: AsyncEngine, *, ttl: float = 2.0) -> None:
        self.engine = engine
        self._cache: TTLCache[tuple[str, bool, str], Row[Any] | None] = TTLCache(ttl)

    async def get(self, merchant_id: str, livemode: bool, endpoint_id: str, *, fresh: bool = False) -> Row[Any] | None:
        """The merchant's endpoint row (read at most ``ttl`` seconds ago, or now when ``fresh``), or None."""

        async def load() -> Row[Any] | None:
            async with self.engine.connect() as conn:
                return await find_endpoint(conn, merchant_id, livemode, endpoint_id)

        key = (merchant_id, livemode, endpoint_id)
        if fresh:
            self._cache.invalidate(key)
        return await self._cache.get(key, load)

    def invalidate(self) -> None:
        self._cache.invalidate()


def _livemode(network: Network) -> bool:
    return not (network.testnet or network.local)


def _network_for(networks: Iterable[Network], livemode: bool, chain_id: int, currency: str) -> Network:
    """The network an endpoint of ``currency`` on ``chain_id`` settles on, or the ServiceError saying why not."""
    symbol = currency.upper()
    if symbol == "USDT":
        raise ServiceError(
            400,
            "unsupported_currency",
            "USDT cannot be used for agent payments: it has no EIP-3009 transferWithAuthorization. Use USDC or EURC.",
            param="currency",
        )
    if symbol not in ("USDC", "EURC"):
        raise ServiceError(400, "parameter_invalid", "currency must be USDC or EURC", param="currency")
    served = {network.chain_id: network for network in networks}
    network = served.get(chain_id)
    if network is None:
        supported = ", ".join(str(c) for c in served)
        raise ServiceError(
            400,
            "unsupported_chain",
            f"chainId {chain_id} is not settled by this platform (supported: {supported})",
            param="chainId",
        )
    if _livemode(network) != livemode:
        kind = "live" if _livemode(network) else "test"
        raise ServiceError(
            400,
            "livemode_mismatch",
            f"chainId {chain_id} is a {kind} network; use a {kind} API key for it",
            param="chainId",
        )
    if network.asset(symbol) is None:
        raise ServiceError(
            400, "unsupported_currency", f"{symbol} is not available on chainId {chain_id}", param="currency"
        )
    return network


def _amount_of(pricing: str, amount: int | None, ceiling: int | None) -> int | None:
    """What the ``amount_minor`` column holds: the fixed amount, or a metered endpoint's ceiling."""
    if pricing == "metered":
        if ceiling is None:
            raise ServiceError(
                400, "parameter_missing", "maxAmountMinor is required with metered pricing", param="maxAmountMinor"
            )
        if amount is not None:
            raise ServiceError(
                400,
                "parameter_invalid",
                "a metered endpoint has no fixed amount: send maxAmountMinor only",
                param="amountMinor",
            )
        return ceiling
    if ceiling is not None:
        raise ServiceError(
            400, "parameter_invalid", "maxAmountMinor is for pricingMode 'metered' only", param="maxAmountMinor"
        )
    return amount


def channel_columns(offer: Mapping[str, Any] | None, authorizer: str | None) -> dict[str, Any]:
    """The ``channel_*`` columns of an endpoint offering payment channels as ``offer`` (the API's
    ``channel`` object) with the merchant's receiver ``authorizer``; ``offer`` None: not offered."""
    if offer is None:
        return {
            "channel_min_deposit": None,
            "channel_withdraw_delay": None,
            "channel_only": False,
            "channel_idle_refund_seconds": None,
            "channel_receiver_authorizer": None,
        }
    if authorizer is None:  # pragma: no cover - the surfaces pass it with an offer
        raise ServiceError(
            400, "parameter_invalid", "channels need the merchant's receiver authorizer", param="channel"
        )
    return {
        "channel_min_deposit": offer.get("minDepositMinor"),
        "channel_withdraw_delay": offer.get("withdrawDelaySeconds", 900),
        "channel_only": bool(offer.get("only", False)),
        "channel_idle_refund_seconds": offer.get("idleRefundSeconds"),
        "channel_receiver_authorizer": authorizer,
    }


async def create_endpoint(
    engine: AsyncEngine,
    networks: Iterable[Network],
    merchant_id: str,
    livemode: bool,
    fields: Mapping[str, Any],
    *,
    channel_authorizer: str | None = None,
) -> AgentEndpoint:
    """A new agent endpoint of the merchant's, from ``fields`` as the API's create body names them
    (already parsed: the API's and the dashboard's ``EndpointCreate``, the CLI's options).
    ServiceError: a chain or currency the platform does not settle in this mode, a price that does
    not fit the pricing mode. ``channel_authorizer``: the merchant's receiver authorizer, for an
    endpoint that offers payment channels (``fields["channel"]``)."""
    pricing = fields.get("pricingMode", "fixed")
    _network_for(networks, livemode, fields["chainId"], fields["currency"])
    if pricing == "fixed" and fields.get("amountMinor") is None:
        raise ServiceError(400, "parameter_missing", "amountMinor is required with fixed pricing", param="amountMinor")
    amount = _amount_of(pricing, fields.get("amountMinor"), fields.get("maxAmountMinor"))
    now = utcnow()
    row = AgentEndpoint(
        merchant_id=merchant_id,
        livemode=livemode,
        name=fields["name"],
        resource_url=fields["resourceUrl"],
        chain_id=fields["chainId"],
        currency=fields["currency"].upper(),
        payout_address=fields["payoutAddress"],
        payout_history=[fields["payoutAddress"]],
        pricing_mode=pricing,
        amount_minor=amount,
        release_policy=fields.get("releasePolicy", "included"),
        max_timeout_seconds=fields.get("maxTimeoutSeconds", 300),
        discoverable=fields.get("discoverable", False),
        created_at=now,
        updated_at=now,
        **channel_columns(fields.get("channel"), channel_authorizer),
    )
    async with engine.begin() as conn:
        await conn.execute(tables.agent_endpoints.insert(), row.model_dump())
    return row


def _missing(endpoint_id: str) -> ServiceError:
    return ServiceError(404, "resource_missing", f"No such agent endpoint: '{endpoint_id[:80]}'", param="id")


_COLUMNS = {
    "name": "name",
    "resourceUrl": "resource_url",
    "pricingMode": "pricing_mode",
    "amountMinor": "amount_minor",
    "releasePolicy": "release_policy",
    "maxTimeoutSeconds": "max_timeout_seconds",
    "payoutAddress": "payout_address",
    "discoverable": "discoverable",
}


async def update_endpoint(
    engine: AsyncEngine,
    merchant_id: str,
    livemode: bool,
    endpoint_id: str,
    asked: Mapping[str, Any],
    *,
    channel_authorizer: str | None = None,
) -> Row[Any]:
    """The endpoint's row with the changes ``asked`` (as the API's update body names them; only what
    was sent). A refusal the changes alone explain is a 400, one they explain only with what the
    endpoint already is a 409; an endpoint the merchant does not have in this mode a 404."""
    table = tables.agent_endpoints
    changes = dict(asked)
    channel = channel_columns(changes.pop("channel"), channel_authorizer) if "channel" in changes else {}
    async with engine.begin() as conn:
        row = await find_endpoint(conn, merchant_id, livemode, endpoint_id)
        if row is None:
            raise _missing(endpoint_id)
        pricing = changes.get("pricingMode", row.pricing_mode)
        was_metered = row.pricing_mode == "metered"  # its amount_minor is a ceiling, not an amount
        amount = changes.get("amountMinor", None if was_metered else row.amount_minor)
        if pricing == "metered":
            ceiling = changes.get("maxAmountMinor", row.amount_minor if was_metered else None)
            if ceiling is None:
                message = "A metered endpoint needs a ceiling: send maxAmountMinor too"
                raise ServiceError(409, "endpoint_needs_ceiling", message, param="maxAmountMinor")
            if changes.get("amountMinor") is not None:
                status, code = (400, "parameter_invalid") if "pricingMode" in asked else (409, "endpoint_is_metered")
                message = "a metered endpoint has no fixed amount: send maxAmountMinor only"
                raise ServiceError(status, code, message, param="amountMinor")
            changes["amountMinor"] = ceiling
        elif "maxAmountMinor" in changes:
            status, code = (400, "parameter_invalid") if "pricingMode" in asked else (409, "endpoint_not_metered")
            message = "maxAmountMinor is for pricingMode 'metered' only"
            raise ServiceError(status, code, message, param="maxAmountMinor")
        elif was_metered and "amountMinor" not in changes:
            changes["amountMinor"] = None  # the ceiling is no amount
        changes.pop("maxAmountMinor", None)
        if pricing == "fixed" and amount is None:
            if "pricingMode" in asked and "amountMinor" in asked:  # the request contradicts itself
                raise ServiceError(
                    400, "parameter_missing", "amountMinor is required with fixed pricing", param="amountMinor"
                )
            # the request is fine, but not with what the endpoint already is
            raise ServiceError(
                409,
                "endpoint_needs_amount",
                "With fixed pricing the endpoint needs an amount: send amountMinor too, or pricingMode 'dynamic'",
                param="amountMinor",
            )
        values: dict[str, Any] = {"updated_at": utcnow(), **channel}
        for key, value in changes.items():
            values[_COLUMNS[key]] = value
        if "payoutAddress" in changes:
            history = list(row.payout_history or [])
            if changes["payoutAddress"] not in history:
                history.append(changes["payoutAddress"])
            values["payout_history"] = history
        await conn.execute(table.update().where(table.c.id == row.id).values(**values))
        updated = await find_endpoint(conn, merchant_id, livemode, row.id)
    assert updated is not None
    return updated


async def list_endpoints(engine: AsyncEngine, merchant_id: str, livemode: bool) -> list[Row[Any]]:
    """The merchant's endpoints in this mode, newest first."""
    table = tables.agent_endpoints
    query = (
        select(table)
        .where(table.c.merchant_id == merchant_id, table.c.livemode == livemode)
        .order_by(table.c.created_at.desc(), table.c.id.desc())
    )
    async with engine.connect() as conn:
        return list((await conn.execute(query)).all())
