"""A merchant's day on the command line: ``x402mw platform endpoints list|create|show|update`` (prices
as decimals of their coin, ``--price 0.01 USDC``) and ``x402mw platform users list|invite``. The
commands parse and print; what they change goes through the platform's services. `x402mw.cli`
registers them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import click

from x402mw.cli_options import (
    _configuration_errors_exit,
    _emit,
    _table,
    _with_engine,
    settings_options,
)
from x402mw.platform.settings import ChainAccessSettings, PlatformSettings, ServerSettings, StorageSettings


class _Refused(click.ClickException):
    """A bad value, said in one line, with the usage errors' exit status (2)."""

    exit_code = 2


COIN_DECIMALS = 6  # USDC and EURC


def _price(value: tuple[str, str] | None, option: str = "--price") -> tuple[int, str] | None:
    """``--price AMOUNT COIN`` (or ``--max-price``) as minor units and the coin: a decimal greater than
    zero with at most the coin's 6 decimals, in USDC or EURC."""
    from decimal import Decimal

    from x402mw.errors import PriceError
    from x402mw.protocol.prices import parse_decimal

    if value is None:
        return None
    text, coin = value
    try:
        amount = parse_decimal(text, field=option)
    except PriceError as exc:
        raise _Refused(str(exc)) from None
    if amount <= 0:
        raise _Refused(f"{option} must be greater than zero: {text!r}")
    minor = amount.scaleb(COIN_DECIMALS)
    if minor != minor.to_integral_value():
        raise _Refused(f"{option} has at most {COIN_DECIMALS} decimals ({coin.upper()}): {text!r}")
    if coin.upper() not in ("USDC", "EURC"):
        raise _Refused(f"{option} is in USDC or EURC, not {coin[:20]!r}")
    return int(minor.quantize(Decimal(1))), coin.upper()


def _endpoint_shown(row: Any) -> dict[str, Any]:
    """An agent endpoint as the CLI prints it: prices as decimals of its coin."""
    from x402mw.protocol.prices import format_amount

    metered = row.pricing_mode == "metered"  # its amount_minor column holds the ceiling
    amount = None if row.amount_minor is None else f"{format_amount(row.amount_minor)} {row.currency}"
    return {
        "id": row.id,
        "name": row.name,
        "resourceUrl": row.resource_url,
        "network": f"eip155:{row.chain_id}",
        "currency": row.currency,
        "pricingMode": row.pricing_mode,
        "price": None if metered else amount,
        "maxPrice": amount if metered else None,
        "payoutAddress": row.payout_address,
        "releasePolicy": row.release_policy,
        "maxTimeoutSeconds": row.max_timeout_seconds,
        "discoverable": bool(row.discoverable),
        "livemode": bool(row.livemode),
        "createdAt": row.created_at,
        "updatedAt": row.updated_at,
    }


async def _networks(settings: PlatformSettings, engine: Any) -> list[Any]:
    """The networks this platform settles on, as its configuration and database say (the dev chain's
    tokens as it recorded them; a remote node's chain id as it answers)."""
    from x402mw.platform.services.status import chain_status
    from x402mw.protocol.networks import Asset, Network, get_network

    found = []
    for chain in await chain_status(settings, engine):
        if chain["chainId"] is None:
            continue
        known = get_network(chain["chainId"])
        assets = {s.upper(): Asset(s.upper(), a, COIN_DECIMALS, s.upper(), "2") for s, a in chain["tokens"].items()}
        if known is not None and not assets:
            assets = dict(known.assets)
        local = chain["rpcUrl"] is None or known is None or known.local
        found.append(
            Network(chain["chainId"], chain["name"], None, 1, known.testnet if known else True, assets, local=local)
        )
    return found


@contextlib.contextmanager
def _refusals_exit() -> Iterator[None]:
    """A service's refusal ends the command with its message (exit status 1)."""
    from x402mw.platform.services.errors import ServiceError

    try:
        yield
    except ServiceError as exc:
        raise click.ClickException(exc.message) from None


def _parsed(model: Any, fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` checked as the API checks its body; each problem a one-line refusal (exit status 2)."""
    from pydantic import ValidationError

    try:
        return dict(model.model_validate(fields).model_dump(exclude_unset=True))
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "value"
        raise _Refused(f"{where}: {error['msg']}") from None


_MODE = click.option("--mode", type=click.Choice(["test", "live"]), default="test", show_default=True)

_F = TypeVar("_F", bound=Callable[..., Any])


def _amount_option(flag: str, help: str) -> Callable[[_F], _F]:
    """An option taking an amount and its coin (``--price 0.01 USDC``)."""
    return click.option(flag, nargs=2, type=str, default=None, metavar="AMOUNT COIN", help=help)


_PRICE = _amount_option("--price", "A decimal amount and its coin, e.g. --price 0.01 USDC (at most 6 decimals).")
_MAX_PRICE = _amount_option(
    "--max-price", "A metered endpoint's ceiling: the most one request may charge, e.g. --max-price 0.05 USDC."
)
_PRICING_MODES = ["fixed", "dynamic", "metered"]


@click.group()
def endpoints() -> None:
    """Agent endpoints: what a merchant sells to agents per request (prices as decimals of their coin)."""


@endpoints.command(name="create")
@settings_options(StorageSettings, ChainAccessSettings)
@click.option("--merchant", "merchant_id", required=True)
@_MODE
@click.option("--name", required=True)
@click.option("--resource-url", required=True, help="http(s) URL of the paid resource, or mcp://tool/<name>.")
@click.option("--payout-address", required=True, help="EVM address receiving the funds.")
@_PRICE
@_MAX_PRICE
@click.option("--chain-id", type=int, default=None, help="The chain it settles on (default: the mode's first).")
@click.option("--pricing-mode", type=click.Choice(_PRICING_MODES), default="fixed", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def endpoints_create(
    settings: PlatformSettings,
    merchant_id: str,
    mode: str,
    name: str,
    resource_url: str,
    payout_address: str,
    price: tuple[str, str] | None,
    max_price: tuple[str, str] | None,
    chain_id: int | None,
    pricing_mode: str,
    as_json: bool,
) -> None:
    """Create an agent endpoint, priced as an amount and its coin: --price 0.01 USDC (metered:
    --pricing-mode metered --max-price 0.05 USDC)"""
    from x402mw.platform.http.request_models.agent_endpoints import EndpointCreate
    from x402mw.platform.services.endpoints import create_endpoint
    from x402mw.platform.services.merchants import find_merchant

    priced = _price(price)
    ceiling = _price(max_price, "--max-price")
    if ceiling is not None and pricing_mode != "metered":
        raise _Refused("--max-price is for --pricing-mode metered only")
    if pricing_mode == "fixed" and priced is None:
        raise _Refused("a fixed-price endpoint needs --price AMOUNT COIN, e.g. --price 0.01 USDC")
    if pricing_mode == "metered" and (ceiling is None or priced is not None):
        raise _Refused("a metered endpoint takes --max-price AMOUNT COIN (its ceiling), not --price")
    coin = (priced or ceiling or (0, "USDC"))[1]
    livemode = mode == "live"

    async def create(engine: Any) -> Any:
        if await find_merchant(engine, merchant_id) is None:
            raise click.ClickException(f"no merchant {merchant_id}")
        networks = await _networks(settings, engine)
        chosen = chain_id
        if chosen is None:
            mode_networks = [n for n in networks if (not (n.testnet or n.local)) == livemode]
            if not mode_networks:
                served = ", ".join(str(n.chain_id) for n in networks) or "none"
                raise click.ClickException(f"this platform settles on no {mode} chain (its chains: {served})")
            chosen = mode_networks[0].chain_id
        fields = _parsed(
            EndpointCreate,
            {
                "name": name,
                "resourceUrl": resource_url,
                "payoutAddress": payout_address,
                "chainId": chosen,
                "currency": coin,
                "pricingMode": pricing_mode,
                "amountMinor": str(priced[0]) if priced else None,
                "maxAmountMinor": str(ceiling[0]) if ceiling else None,
            },
        )
        fields.setdefault("currency", coin)
        return await create_endpoint(engine, networks, merchant_id, livemode, fields)

    with _refusals_exit(), _configuration_errors_exit():
        row = asyncio.run(_with_engine(settings, create))
    _emit(_endpoint_shown(row), as_json)


@endpoints.command(name="list")
@settings_options(StorageSettings)
@click.option("--merchant", "merchant_id", required=True)
@_MODE
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per endpoint, one a line.")
def endpoints_list(settings: PlatformSettings, merchant_id: str, mode: str, as_json: bool) -> None:
    """List a merchant's agent endpoints of one mode, newest first."""
    from x402mw.platform.services.endpoints import list_endpoints

    rows = asyncio.run(_with_engine(settings, lambda engine: list_endpoints(engine, merchant_id, mode == "live")))
    found = [_endpoint_shown(row) for row in rows]
    if as_json:
        for endpoint in found:
            _emit(endpoint, True)
    elif not found:
        click.echo(f"no {mode} endpoints yet: x402mw platform endpoints create --merchant {merchant_id} ...")
    else:
        _table(found, ["id", "name", "pricingMode", "price", "network", "resourceUrl"])


@endpoints.command(name="show")
@settings_options(StorageSettings)
@click.argument("endpoint_id")
@click.option("--merchant", "merchant_id", required=True)
@_MODE
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def endpoints_show(settings: PlatformSettings, endpoint_id: str, merchant_id: str, mode: str, as_json: bool) -> None:
    """Show one agent endpoint."""
    from x402mw.platform.services.endpoints import find_endpoint

    async def show(engine: Any) -> Any:
        async with engine.connect() as conn:
            return await find_endpoint(conn, merchant_id, mode == "live", endpoint_id.lower())

    row = asyncio.run(_with_engine(settings, show))
    if row is None:
        raise click.ClickException(f"no {mode} agent endpoint {endpoint_id} of merchant {merchant_id}")
    _emit(_endpoint_shown(row), as_json)


@endpoints.command(name="update")
@settings_options(StorageSettings)
@click.argument("endpoint_id")
@click.option("--merchant", "merchant_id", required=True)
@_MODE
@click.option("--name", default=None)
@click.option("--resource-url", default=None)
@click.option("--payout-address", default=None)
@_PRICE
@_MAX_PRICE
@click.option("--pricing-mode", type=click.Choice(_PRICING_MODES), default=None)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def endpoints_update(
    settings: PlatformSettings,
    endpoint_id: str,
    merchant_id: str,
    mode: str,
    name: str | None,
    resource_url: str | None,
    payout_address: str | None,
    price: tuple[str, str] | None,
    max_price: tuple[str, str] | None,
    pricing_mode: str | None,
    as_json: bool,
) -> None:
    """Change an agent endpoint (its coin and chain stay), its price as --price 0.02 USDC (a metered
    one's ceiling as --max-price 0.10 USDC)"""
    from x402mw.platform.http.request_models.agent_endpoints import EndpointUpdate
    from x402mw.platform.services.endpoints import find_endpoint, update_endpoint

    priced = _price(price)
    ceiling = _price(max_price, "--max-price")
    given = {
        "name": name,
        "resourceUrl": resource_url,
        "payoutAddress": payout_address,
        "pricingMode": pricing_mode,
        "amountMinor": str(priced[0]) if priced else None,
        "maxAmountMinor": str(ceiling[0]) if ceiling else None,
    }
    changes = _parsed(EndpointUpdate, {key: value for key, value in given.items() if value is not None})
    if not changes:
        raise _Refused(
            "nothing to change: give --price, --max-price, --name, --resource-url, --payout-address or --pricing-mode"
        )
    livemode = mode == "live"

    async def update(engine: Any) -> Any:
        async with engine.connect() as conn:
            row = await find_endpoint(conn, merchant_id, livemode, endpoint_id.lower())
        for option, asked in (("--price", priced), ("--max-price", ceiling)):
            if row is not None and asked is not None and asked[1] != row.currency:
                raise _Refused(
                    f"the endpoint is priced in {row.currency}; its coin does not change ({option} ... {row.currency})"
                )
        return await update_endpoint(engine, merchant_id, livemode, endpoint_id.lower(), changes)

    with _refusals_exit():
        row = asyncio.run(_with_engine(settings, update))
    _emit(_endpoint_shown(row), as_json)


@click.command(name="list")
@settings_options(StorageSettings)
@click.option("--merchant", "merchant_id", required=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per user, one a line.")
def users_list(settings: PlatformSettings, merchant_id: str, as_json: bool) -> None:
    """List a merchant's dashboard users (not the disabled ones)."""
    from x402mw.platform.services.dashboard_users import list_users

    found = [
        {"id": u.id, "email": u.email, "role": u.role, "twoFactor": u.totp_enabled}
        for u in asyncio.run(_with_engine(settings, lambda engine: list_users(engine, merchant_id)))
    ]
    if as_json:
        for user in found:
            _emit(user, True)
    elif not found:
        click.echo(f"no users yet: x402mw platform users create --merchant {merchant_id} --email <email>")
    else:
        _table(found, ["id", "email", "role", "twoFactor"])


@click.command(name="invite")
@settings_options(StorageSettings, ServerSettings)
@click.option("--merchant", "merchant_id", required=True)
@click.option("--email", required=True)
@click.option("--role", type=click.Choice(["owner", "developer", "support", "viewer"]), required=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def users_invite(settings: PlatformSettings, merchant_id: str, email: str, role: str, as_json: bool) -> None:
    """Invite someone to a merchant's dashboard: prints the invitation link (shown once; valid 3 days)."""
    from datetime import UTC, datetime

    from x402mw.platform.services.dashboard_users import AccountError, invite_to

    try:
        token = asyncio.run(
            _with_engine(settings, lambda engine: invite_to(engine, merchant_id, "cli", email, role, datetime.now(UTC)))
        )
    except AccountError as exc:
        raise click.ClickException(str(exc)) from None
    dashboard = settings.base_url.rstrip("/").removesuffix("/v1") + "/dashboard"
    _emit(
        {
            "merchant": merchant_id,
            "email": email.strip().lower(),
            "role": role,
            "link": f"{dashboard}/invitations/{token}",
        },
        as_json,
    )
