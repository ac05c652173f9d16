"""The ``x402mw`` command line.

The platform's commands take their options from `~x402mw.platform.settings.PlatformSettings`: each
setting with an `~x402mw.platform.settings.Option` is an option of the commands that take its group,
and every setting can also be set from its ``X402MW_*`` environment variable (an option given wins).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import sys
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, TypeVar

import click
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from x402mw.platform.settings import (
    ChainAccessSettings,
    LogSettings,
    MetricsSettings,
    Option,
    PlatformSettings,
    ServerSettings,
    SettingsError,
    SettingsGroup,
    StorageSettings,
    SubscriptionSettings,
    WorkSettings,
    env_variable,
    option_of,
)

__all__ = ["main"]

R = TypeVar("R")
T = TypeVar("T")


def _emit(data: dict[str, Any], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(data))
    else:
        for key, value in data.items():
            click.echo(f"{key}: {value}")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="x402mw")
def main() -> None:
    """x402mw: get paid in stablecoins, per request by agents (x402 v2) and by people."""


@main.command()
@click.option(
    "--requests",
    "count",
    default=3,
    show_default=True,
    envvar="X402MW_DEMO_REQUESTS",
    help="How many paid requests the agent makes.",
)
def demo(count: int) -> None:
    """The whole story on the embedded defaults: platform, seller, agent, dev chain."""
    from x402mw.demo import run_demo

    sys.exit(asyncio.run(run_demo(count)))


def _register_pay() -> None:
    try:
        from x402mw.client.pay import pay_command
    except ImportError:  # the agent client is part of the base install; this guards partial checkouts
        return
    main.add_command(pay_command, "pay")


@main.group()
def platform() -> None:
    """Run and administer the platform (needs the 'platform' extra)."""


# The settings groups whose options the commands that run the platform take; the administrative
# commands take the storage options only.
PROCESS_GROUPS: tuple[type[SettingsGroup], ...] = (
    StorageSettings,
    ChainAccessSettings,
    LogSettings,
    MetricsSettings,
    WorkSettings,
    SubscriptionSettings,
)


def settings_options(*groups: type[SettingsGroup], **fixed: object) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """Give a command the options of the settings of ``groups`` that have one (their `Option`), and
    call it with ``settings``: the `PlatformSettings` those options fill over the ``X402MW_*``
    variables, with ``fixed`` settings the command itself decides. The options have no defaults of
    their own and read no environment: both are the model's, and so is every check of a value."""
    fields = [
        (name, info, option)
        for group in groups
        for name, info in group.model_fields.items()
        if (option := option_of(info)) is not None
    ]

    def decorate(command: Callable[..., R]) -> Callable[..., R]:
        @functools.wraps(command)
        def run(**params: Any) -> R:
            options = {name: params.pop(name) for name, _, _ in fields}
            return command(settings=_settings(options, **fixed), **params)

        for name, info, option in reversed(fields):
            run = _click_option(name, info, option)(run)
        return run

    return decorate


def _click_option(name: str, info: FieldInfo, option: Option) -> Callable[[Any], Any]:
    default = option.default
    if default is None and info.default not in (None, PydanticUndefined, "", [], {}):
        default = str(info.default)
    described = f"env var: {env_variable(name)}" + (f"; default: {default}" if default else "")
    flag = info.annotation in (bool, bool | None)
    return click.option(
        f"{option.flag}/--no-{option.flag.removeprefix('--')}" if flag else option.flag,
        name,
        default=None,
        multiple=option.multiple,
        metavar=option.metavar,
        help=f"{info.description}  [{described}]",
    )


def _environment_only() -> str:
    """The ``--help`` epilog of the commands that run the platform: the settings without an option."""
    names = [env_variable(name) for name, info in PlatformSettings.model_fields.items() if option_of(info) is None]
    lines = ["  " + ", ".join(names[index : index + 3]) for index in range(0, len(names), 3)]
    return "\b\nSettings read from the environment only (docs/platform.md says what each does):\n" + "\n".join(lines)


_ENVIRONMENT_ONLY = _environment_only()


def _settings(options: Mapping[str, object], **fixed: object) -> PlatformSettings:
    """The settings that command-line ``options`` (by setting; None or () where not given) and
    ``fixed`` fill over the ``X402MW_*`` variables. Problems end the command as one usage error
    (exit status 2) listing every one."""
    given = {name: value for name, value in options.items() if value not in (None, ())} | fixed
    try:
        return PlatformSettings.from_options(given)
    except SettingsError as exc:
        problems = exc.problems
    if len(problems) > 1:
        problems = [f"{len(problems)} problems with the settings:\n  - " + "\n  - ".join(problems)]
    raise click.UsageError(problems[0], click.get_current_context(silent=True))


@contextlib.contextmanager
def _metrics_served(settings: PlatformSettings, registry: Any = None) -> Iterator[None]:
    host, port = settings.metrics_host, settings.metrics_port
    if port is None:
        yield
        return
    from x402mw.platform.metrics import serve_metrics

    try:
        stop = serve_metrics(port, host, registry)
    except OSError as exc:
        raise click.UsageError(f"cannot serve metrics at {host}:{port}: {exc.strerror or exc}") from None
    try:
        yield
    finally:
        stop()


def _configure_logs(settings: PlatformSettings) -> dict[str, Any] | None:
    import logging.config

    from x402mw.platform.logs import log_config

    logs = log_config(settings.log_format, settings.log_level)
    if logs is not None:
        logging.config.dictConfig(logs)
    return logs


@platform.command(epilog=_ENVIRONMENT_ONLY)
@settings_options(ServerSettings, *PROCESS_GROUPS)
def serve(settings: PlatformSettings) -> None:
    """Serve the merchant API, the agent settlement API and the facilitator API."""
    import uvicorn
    from uvicorn.config import LOGGING_CONFIG

    from x402mw.platform.app import create_app

    logs = _configure_logs(settings)
    # Once before serving: migrations, key files, the chains' checks. A problem (a chain whose
    # tokens sign otherwise than the table says, a dev chain that refuses its data dir) ends the
    # command with its message, where inside uvicorn it would be a traceback; and several workers
    # do not race to create the key files (each would make its own keys).
    _start_and_stop_or_exit(settings)
    settings = settings.model_copy(update={"migrate": False})
    if settings.workers == 1:
        with _metrics_served(settings):
            app = create_app(settings, serving_process=True)
            uvicorn.run(
                app,
                host=settings.host,
                port=settings.port,
                log_level=settings.log_level,
                log_config=logs or LOGGING_CONFIG,
            )
        return
    os.environ.update(settings.as_environment())  # what each worker reads (worker_app)
    from x402mw.platform.metrics import MultiprocessMetrics
    from x402mw.platform.workers import serve_workers

    # The workers write their metrics to files the supervisor sums and serves (made before they start).
    collected = MultiprocessMetrics() if settings.metrics_port is not None else None
    try:
        with _metrics_served(settings, collected.registry if collected else None):
            serve_workers(
                "x402mw.cli:worker_app",
                host=settings.host,
                port=settings.port,
                workers=settings.workers,
                log_level=settings.log_level,
                log_config=logs,
            )
    finally:
        if collected is not None:
            collected.close()


def _start_and_stop_or_exit(settings: PlatformSettings) -> None:
    from x402mw.platform.runtime import Platform

    async def start_and_stop() -> None:
        platform = await Platform.start(settings.model_copy(update={"run_worker": False}))
        await platform.aclose()

    with _configuration_errors_exit():
        asyncio.run(start_and_stop())


@contextlib.contextmanager
def _configuration_errors_exit() -> Iterator[None]:
    """A `ConfigurationError` ends the command with its message (exit status 1), not a traceback."""
    from x402mw.errors import ConfigurationError

    try:
        yield
    except ConfigurationError as exc:
        raise click.ClickException(str(exc)) from None


def worker_app() -> Any:
    """The app of one ``platform serve --workers N`` process (a uvicorn factory), configured from the
    environment `serve` sets before starting the workers (it has migrated the database)."""
    from x402mw.platform.app import create_app

    return create_app(PlatformSettings.from_env(migrate=False), serving_process=True)


@platform.command(epilog=_ENVIRONMENT_ONLY)
@settings_options(*PROCESS_GROUPS, run_worker=True)
def worker(settings: PlatformSettings) -> None:
    """Run time-based work (finishing settlements a stopped server left submitted) until interrupted."""
    from x402mw.platform.worker import start_platform

    _configure_logs(settings)

    async def run() -> None:
        platform = await start_platform(settings)
        try:
            click.echo(f"worker running on {', '.join(c.network.caip2 for c in platform.chains)}")
            await asyncio.Event().wait()
        finally:
            await platform.aclose()

    with (
        contextlib.suppress(KeyboardInterrupt),
        _metrics_served(settings),
        _configuration_errors_exit(),
    ):
        asyncio.run(run())


@platform.command(name="migrate")
@settings_options(StorageSettings)
def migrate_command(settings: PlatformSettings) -> None:
    """Bring the database schema up to date."""
    from x402mw.platform.db.engine import migrate

    migrate(settings.database_url.get_secret_value())
    click.echo("database is up to date")


async def _with_engine(settings: PlatformSettings, action: Callable[[Any], Awaitable[T]]) -> T:
    from x402mw.platform.db.engine import create_engine_for, migrate

    database_url = settings.database_url.get_secret_value()
    await asyncio.to_thread(migrate, database_url)
    engine = create_engine_for(database_url)
    try:
        return await action(engine)
    finally:
        await engine.dispose()


@platform.command(name="relayer-pool")
@settings_options(StorageSettings)
@click.option("--chain-id", type=int, required=True, help="The chain whose pool to size.")
@click.option("--size", type=click.IntRange(1, 1000), required=True, help="How many relayer accounts it has.")
def relayer_pool_command(settings: PlatformSettings, chain_id: int, size: int) -> None:
    """Size a chain's pool of relayer accounts (X402MW_RELAYER_POOL_SIZE) while the platform runs:
    every process follows within a few seconds, without a restart."""
    from x402mw.platform.services.relayer_leases import set_pool_size

    asyncio.run(_with_engine(settings, lambda engine: set_pool_size(engine, chain_id, size)))
    click.echo(f"the relayer pool of chain {chain_id} has {size} accounts")


@platform.group()
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


@platform.group()
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


@keys.command(name="revoke")
@settings_options(StorageSettings)
@click.argument("key_id")
def keys_revoke(settings: PlatformSettings, key_id: str) -> None:
    """Revoke an API key by its id."""
    from x402mw.platform.services.merchants import revoke_api_key

    if not asyncio.run(_with_engine(settings, lambda engine: revoke_api_key(engine, key_id))):
        raise click.ClickException(f"no active key {key_id}")
    click.echo(f"revoked {key_id}")


_register_pay()
