"""The ``x402mw`` command line. Every option can also be set from its ``X402MW_*`` environment variable."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

__all__ = ["main"]


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


def _connection_options(func: Any) -> Any:
    func = click.option(
        "--database-url",
        envvar="X402MW_DATABASE_URL",
        default=None,
        help="sqlite:///path or postgresql://user@host/db [default: sqlite in the data dir]",
    )(func)
    func = click.option(
        "--data-dir",
        envvar="X402MW_DATA_DIR",
        default=".x402mw",
        show_default=True,
        type=click.Path(path_type=Path),
        help="Where keys and the SQLite database live.",
    )(func)
    return func


def _comma_separated(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(part.strip() for value in values for part in value.split(",") if part.strip())


def _chain_options(func: Any) -> Any:
    func = click.option(
        "--rpc-url",
        "rpc_urls",
        envvar="X402MW_RPC_URL",
        multiple=True,
        callback=_comma_separated,
        help="JSON-RPC URL of a chain; repeat for several (in the environment: comma-separated). "
        "Without it: the in-process dev chain.",
    )(func)
    func = click.option(
        "--token",
        "tokens",
        envvar="X402MW_TOKENS",
        multiple=True,
        metavar="SYMBOL=ADDRESS",
        help="Token address on a chain the built-in table does not know, such as anvil; repeat for several "
        "(in the environment: separated by spaces).",
    )(func)
    return func


def _log_format_option(func: Any) -> Any:
    return click.option(
        "--log-format",
        envvar="X402MW_LOG_FORMAT",
        type=click.Choice(["text", "json"]),
        default="text",
        show_default=True,
        help="json: one JSON object per line, with the id of the request each line was written for.",
    )(func)


def _log_config(log_format: str, log_level: str) -> dict[str, Any] | None:
    from x402mw.platform.logs import log_config

    try:
        return log_config(log_format, log_level)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--log-level") from None


def _metrics_options(func: Any) -> Any:
    func = click.option(
        "--metrics-port",
        envvar="X402MW_METRICS_PORT",
        default=None,
        type=click.IntRange(min=0, max=65535),
        help="Serve Prometheus metrics at http://<metrics host>:<port>/metrics [default: not served].",
    )(func)
    func = click.option(
        "--metrics-host",
        envvar="X402MW_METRICS_HOST",
        default="127.0.0.1",
        show_default=True,
        help="Address of the metrics listener (keep it off the public network).",
    )(func)
    return func


@contextlib.contextmanager
def _metrics_served(host: str, port: int | None, registry: Any = None) -> Iterator[None]:
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


def _database_url(database_url: str | None, data_dir: Path) -> str:
    return database_url or f"sqlite:///{data_dir / 'platform.sqlite3'}"


def _webhooks_option(func: Any) -> Any:
    return click.option(
        "--webhooks-allow-private/--no-webhooks-allow-private",
        envvar="X402MW_WEBHOOKS_ALLOW_PRIVATE",
        default=None,
        help="Let test-mode webhook endpoints point at loopback and private addresses (link-local ones "
        "never). [default: only with the in-process dev chain]",
    )(func)


def _settings(
    database_url: str | None,
    data_dir: Path,
    rpc_urls: tuple[str, ...],
    tokens: tuple[str, ...],
    webhooks_allow_private: bool | None = None,
) -> Any:
    from x402mw.platform.settings import ChainSettings, PlatformSettings

    token_map = {}
    for item in tokens:
        symbol, _, address = item.partition("=")
        if not address:
            raise click.BadParameter(f"{item!r} is not SYMBOL=ADDRESS", param_hint="--token")
        token_map[symbol.upper()] = address
    chains = [ChainSettings(rpc_url=u, tokens=token_map) for u in rpc_urls] or [ChainSettings()]
    return PlatformSettings.from_env(
        database_url=_database_url(database_url, data_dir),
        data_dir=data_dir,
        chains=chains,
        webhooks_allow_private=webhooks_allow_private,
    )


@platform.command()
@_connection_options
@click.option("--host", envvar="X402MW_HOST", default="127.0.0.1", show_default=True)
@click.option("--port", envvar="X402MW_PORT", default=4402, show_default=True, type=int)
@_chain_options
@click.option("--log-level", envvar="X402MW_LOG_LEVEL", default="info", show_default=True)
@_log_format_option
@click.option(
    "--workers",
    envvar="X402MW_WORKERS",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Server processes, each with its own socket on the port (SO_REUSEPORT). Above 1 needs --rpc-url: "
    "the dev chain lives in one process.",
)
@_metrics_options
@_webhooks_option
def serve(
    database_url: str | None,
    data_dir: Path,
    host: str,
    port: int,
    rpc_urls: tuple[str, ...],
    tokens: tuple[str, ...],
    log_level: str,
    log_format: str,
    workers: int,
    metrics_host: str,
    metrics_port: int | None,
    webhooks_allow_private: bool | None,
) -> None:
    """Serve the merchant API, the agent settlement API and the facilitator API."""
    import logging.config

    import uvicorn
    from uvicorn.config import LOGGING_CONFIG

    from x402mw.platform.app import create_app

    logs = _log_config(log_format, log_level)
    if logs is not None:
        logging.config.dictConfig(logs)
    settings = _settings(database_url, data_dir, rpc_urls, tokens, webhooks_allow_private)
    settings.serve_at(f"http://{host}:{port}/v1")
    if workers == 1:
        if not rpc_urls:
            # The embedded chain may refuse its data dir: say why and exit, rather than let the app's
            # start-up fail inside uvicorn with a traceback. A second start reopens the chain quickly.
            _start_and_stop_or_exit(settings)
        with _metrics_served(metrics_host, metrics_port):
            app = create_app(settings, serving_process=True)
            uvicorn.run(app, host=host, port=port, log_level=log_level, log_config=logs or LOGGING_CONFIG)
        return
    if not rpc_urls:
        raise click.UsageError("--workers above 1 needs --rpc-url: the in-process dev chain cannot be shared")
    # Once, before the workers start: migrations, key files, the chains' checks (workers racing to
    # create the key files would each make their own keys).
    _start_and_stop_or_exit(settings)
    os.environ.update(
        X402MW_DATABASE_URL=settings.database_url,
        X402MW_DATA_DIR=str(data_dir),
        X402MW_RPC_URL=",".join(rpc_urls),
        X402MW_TOKENS=" ".join(tokens),
        X402MW_BASE_URL=settings.base_url,
    )
    if webhooks_allow_private is not None:
        os.environ["X402MW_WEBHOOKS_ALLOW_PRIVATE"] = str(webhooks_allow_private).lower()
    from x402mw.platform.metrics import MultiprocessMetrics
    from x402mw.platform.workers import serve_workers

    # The workers write their metrics to files the supervisor sums and serves (made before they start).
    collected = MultiprocessMetrics() if metrics_port is not None else None
    try:
        with _metrics_served(metrics_host, metrics_port, collected.registry if collected else None):
            serve_workers(
                "x402mw.cli:worker_app", host=host, port=port, workers=workers, log_level=log_level, log_config=logs
            )
    finally:
        if collected is not None:
            collected.close()


def _start_and_stop_or_exit(settings: Any) -> None:
    from dataclasses import replace

    from x402mw.platform.runtime import Platform

    async def start_and_stop() -> None:
        platform = await Platform.start(replace(settings, run_worker=False))
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
    environment `serve` sets before starting the workers."""
    from x402mw.platform.app import create_app

    env = os.environ
    rpc_urls = tuple(url for url in env["X402MW_RPC_URL"].split(",") if url)
    tokens = tuple(env["X402MW_TOKENS"].split())
    settings = _settings(env["X402MW_DATABASE_URL"], Path(env["X402MW_DATA_DIR"]), rpc_urls, tokens)
    settings.serve_at(env["X402MW_BASE_URL"])
    settings.migrate = False  # serve migrated once before starting the workers
    return create_app(settings, serving_process=True)


@platform.command()
@_connection_options
@_chain_options
@_log_format_option
@_metrics_options
@_webhooks_option
def worker(
    database_url: str | None,
    data_dir: Path,
    rpc_urls: tuple[str, ...],
    tokens: tuple[str, ...],
    log_format: str,
    metrics_host: str,
    metrics_port: int | None,
    webhooks_allow_private: bool | None,
) -> None:
    """Run time-based work (finishing settlements a stopped server left submitted) until interrupted."""
    import logging.config

    from x402mw.platform.runtime import Platform

    logs = _log_config(log_format, "info")
    if logs is not None:
        logging.config.dictConfig(logs)
    settings = _settings(database_url, data_dir, rpc_urls, tokens, webhooks_allow_private)

    async def run() -> None:
        platform = await Platform.start(settings)
        try:
            click.echo(f"worker running on {', '.join(c.network.caip2 for c in platform.chains)}")
            await asyncio.Event().wait()
        finally:
            await platform.aclose()

    with (
        contextlib.suppress(KeyboardInterrupt),
        _metrics_served(metrics_host, metrics_port),
        _configuration_errors_exit(),
    ):
        asyncio.run(run())


@platform.command(name="migrate")
@_connection_options
def migrate_command(database_url: str | None, data_dir: Path) -> None:
    """Bring the database schema up to date."""
    from x402mw.platform.db.engine import migrate

    migrate(_database_url(database_url, data_dir))
    click.echo("database is up to date")


async def _with_engine(database_url: str, action: Any) -> Any:
    from x402mw.platform.db.engine import create_engine_for, migrate

    await asyncio.to_thread(migrate, database_url)
    engine = create_engine_for(database_url)
    try:
        return await action(engine)
    finally:
        await engine.dispose()


@platform.group()
def merchants() -> None:
    """Merchants."""


@merchants.command(name="create")
@_connection_options
@click.option("--name", required=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def merchants_create(database_url: str | None, data_dir: Path, name: str, as_json: bool) -> None:
    """Create a merchant."""
    from x402mw.platform.services.merchants import create_merchant

    merchant = asyncio.run(
        _with_engine(_database_url(database_url, data_dir), lambda engine: create_merchant(engine, name))
    )
    _emit({"id": merchant.id, "name": merchant.name}, as_json)


@platform.group()
def keys() -> None:
    """API keys (shown once at creation, stored only as hashes)."""


@keys.command(name="create")
@_connection_options
@click.option("--merchant", "merchant_id", required=True)
@click.option("--mode", type=click.Choice(["test", "live"]), default="test", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def keys_create(database_url: str | None, data_dir: Path, merchant_id: str, mode: str, as_json: bool) -> None:
    """Create an API key; the key is printed once and never again."""
    from x402mw.platform.services.merchants import create_api_key

    try:
        row, key = asyncio.run(
            _with_engine(
                _database_url(database_url, data_dir),
                lambda engine: create_api_key(engine, merchant_id, livemode=mode == "live"),
            )
        )
    except LookupError as exc:
        raise click.ClickException(str(exc)) from None
    _emit({"id": row.id, "key": key, "mode": mode}, as_json)


@keys.command(name="revoke")
@_connection_options
@click.argument("key_id")
def keys_revoke(database_url: str | None, data_dir: Path, key_id: str) -> None:
    """Revoke an API key by its id."""
    from x402mw.platform.services.merchants import revoke_api_key

    done = asyncio.run(
        _with_engine(_database_url(database_url, data_dir), lambda engine: revoke_api_key(engine, key_id))
    )
    if not done:
        raise click.ClickException(f"no active key {key_id}")
    click.echo(f"revoked {key_id}")


_register_pay()
