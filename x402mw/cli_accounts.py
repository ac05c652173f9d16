"""The platform's accounts on the command line: ``x402mw platform merchants create|list|show|rename``,
``x402mw platform keys create|list|revoke`` and ``x402mw platform users create``. The commands parse
and print; what they change goes through the platform's services. `x402mw.cli` registers them (and
`x402mw.cli_day` adds ``users list|invite``)."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import click

from x402mw.cli_options import _emit, _table, _with_engine, settings_options
from x402mw.platform.settings import PlatformSettings, StorageSettings


@click.group()
def merchants() -> None:
    """Merchants."""


@merchants.command(name="create")
@settings_options(StorageSettings)
@click.option("--name", required=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def merchants_create(settings: PlatformSettings, name: str, as_json: bool) -> None:
    """Create a merchant."""
    from x402mw.platform.services.merchants import create_merchant

    merchant = asyncio.run(_with_engine(settings, lambda engine: create_merchant(engine, name)))
    _emit({"id": merchant.id, "name": merchant.name}, as_json)


@merchants.command(name="list")
@settings_options(StorageSettings)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per merchant, one a line.")
def merchants_list(settings: PlatformSettings, as_json: bool) -> None:
    """List the merchants, oldest first, with their keys (all, and active)."""
    from x402mw.platform.services.merchants import list_merchants

    found = asyncio.run(_with_engine(settings, list_merchants))
    if as_json:
        for merchant in found:
            _emit(merchant, True)
    elif not found:
        click.echo("no merchants yet: x402mw platform merchants create --name 'My shop'")
    else:
        _table(found, ["id", "name", "createdAt", "keys", "activeKeys"])


@merchants.command(name="show")
@settings_options(StorageSettings)
@click.argument("merchant_id")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def merchants_show(settings: PlatformSettings, merchant_id: str, as_json: bool) -> None:
    """Show one merchant and its API keys."""
    from x402mw.platform.services.merchants import find_merchant, list_api_keys

    async def show(engine: Any) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        merchant = await find_merchant(engine, merchant_id)
        return merchant, (await list_api_keys(engine, merchant_id) if merchant else [])

    merchant, api_keys = asyncio.run(_with_engine(settings, show))
    if merchant is None:
        raise click.ClickException(f"no merchant {merchant_id}")
    if as_json:
        _emit(merchant | {"apiKeys": api_keys}, True)
        return
    _emit(merchant, False)
    if api_keys:
        click.echo("")
        _table(api_keys, list(api_keys[0]))


@merchants.command(name="rename")
@settings_options(StorageSettings)
@click.argument("merchant_id")
@click.option("--name", required=True, help="The merchant's new name.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def merchants_rename(settings: PlatformSettings, merchant_id: str, name: str, as_json: bool) -> None:
    """Give a merchant a new name."""
    from x402mw.platform.services.merchants import rename_merchant

    if not name.strip() or len(name) > 200:
        raise click.BadParameter("a name has 1 to 200 characters", param_hint="--name")
    if not asyncio.run(_with_engine(settings, lambda engine: rename_merchant(engine, merchant_id, name))):
        raise click.ClickException(f"no merchant {merchant_id}")
    _emit({"id": merchant_id, "name": name}, as_json)


@click.group()
def keys() -> None:
    """API keys (shown once at creation, stored only as hashes)."""


@keys.command(name="create")
@settings_options(StorageSettings)
@click.option("--merchant", "merchant_id", required=True)
@click.option("--mode", type=click.Choice(["test", "live"]), default="test", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def keys_create(settings: PlatformSettings, merchant_id: str, mode: str, as_json: bool) -> None:
    """Create an API key; the key is printed once and never again."""
    from x402mw.platform.services.merchants import create_api_key

    try:
        row, key = asyncio.run(
            _with_engine(settings, lambda engine: create_api_key(engine, merchant_id, livemode=mode == "live"))
        )
    except LookupError as exc:
        raise click.ClickException(str(exc)) from None
    _emit({"id": row.id, "key": key, "mode": mode}, as_json)


@keys.command(name="list")
@settings_options(StorageSettings)
@click.option("--merchant", "merchant_id", required=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per key, one a line.")
def keys_list(settings: PlatformSettings, merchant_id: str, as_json: bool) -> None:
    """List a merchant's API keys: id, prefix, mode, created, last used (to the minute), revoked."""
    from x402mw.platform.services.merchants import list_api_keys

    try:
        found = asyncio.run(_with_engine(settings, lambda engine: list_api_keys(engine, merchant_id)))
    except LookupError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        for key in found:
            _emit(key, True)
    elif not found:
        click.echo(f"no keys yet: x402mw platform keys create --merchant {merchant_id}")
    else:
        _table(found, ["id", "prefix", "mode", "createdAt", "lastUsedAt", "revokedAt"])


@keys.command(name="revoke")
@settings_options(StorageSettings)
@click.argument("key_id")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def keys_revoke(settings: PlatformSettings, key_id: str, as_json: bool) -> None:
    """Revoke an API key by its id."""
    from x402mw.platform.services.merchants import revoke_api_key

    if not asyncio.run(_with_engine(settings, lambda engine: revoke_api_key(engine, key_id))):
        raise click.ClickException(f"no active key {key_id}")
    if as_json:
        _emit({"id": key_id, "revoked": True}, True)
    else:
        click.echo(f"revoked {key_id}")


@click.group()
def users() -> None:
    """People who sign in to a merchant's dashboard (``{api_host}/dashboard``)."""


@users.command(name="create")
@settings_options(StorageSettings)
@click.option("--merchant", "merchant_id", required=True)
@click.option("--email", required=True)
@click.option(
    "--role", type=click.Choice(["owner", "developer", "support", "viewer"]), default="owner", show_default=True
)
@click.option(
    "--password-stdin",
    is_flag=True,
    help="Read the password from standard input (else X402MW_USER_PASSWORD or a prompt).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def users_create(
    settings: PlatformSettings, merchant_id: str, email: str, role: str, password_stdin: bool, as_json: bool
) -> None:
    """Create a dashboard user, e.g. a merchant's first owner; others are invited from the dashboard."""
    from x402mw.platform.services.dashboard_users import AccountError, create_user

    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    elif os.environ.get("X402MW_USER_PASSWORD"):
        password = os.environ["X402MW_USER_PASSWORD"]
    else:
        password = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    try:
        user = asyncio.run(
            _with_engine(settings, lambda engine: create_user(engine, merchant_id, email, password, role))
        )
    except AccountError as exc:
        raise click.ClickException(str(exc)) from None
    _emit({"id": user.id, "merchant": user.merchant_id, "email": user.email, "role": user.role}, as_json)
