"""The ``x402mw`` command line.

The platform's commands take their options from `~x402mw.platform.settings.PlatformSettings`: each
setting with an `~x402mw.platform.settings.Option` is an option of the commands that take its group,
and every setting can also be set from its ``X402MW_*`` environment variable (an option given wins).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import Iterator
from typing import Any, TypeVar

import click

from x402mw.cli_options import (
    _configuration_errors_exit,
    _environment_only,
    _shown,
    _with_engine,
    settings_options,
)
from x402mw.gateway.commands import register as register_gateway
from x402mw.platform.settings import (
    ChainAccessSettings,
    LogSettings,
    MetricsSettings,
    PlatformSettings,
    ServerSettings,
    SettingsGroup,
    StorageSettings,
    SubscriptionSettings,
    WorkSettings,
)

__all__ = ["main"]

R = TypeVar("R")
T = TypeVar("T")


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


_ENVIRONMENT_ONLY = _environment_only()


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


def _data_dir_in_git(settings: PlatformSettings) -> str | None:
    """The warning for a data dir (the platform's keys) inside a git work tree, or None."""
    from x402mw.platform.keys import git_work_tree

    tree = git_work_tree(settings.data_dir)
    if tree is None:
        return None
    return (
        f"warning: the data dir {settings.data_dir} (the platform's keys) is inside the git work tree {tree}; "
        "it holds a .gitignore of '*', but keep it out of commits, or move it with --data-dir"
    )


@platform.command(epilog=_ENVIRONMENT_ONLY)
@settings_options(ServerSettings, *PROCESS_GROUPS)
def serve(settings: PlatformSettings) -> None:
    """Serve the merchant API, the agent settlement API and the facilitator API."""
    import uvicorn
    from uvicorn.config import LOGGING_CONFIG

    from x402mw.platform.app import create_app
    from x402mw.platform.drain import draining_config, serve_draining

    logs = _configure_logs(settings)
    settings = settings.model_copy(update={"migrate": settings.migrates_on_start})
    # Once before serving: migrations, key files, the chains' checks. A problem (a chain whose
    # tokens sign otherwise than the table says, a dev chain that refuses its data dir) ends the
    # command with its message, where inside uvicorn it would be a traceback; and several workers
    # do not race to create the key files (each would make its own keys).
    started = _start_and_stop_or_exit(settings)
    inside = _data_dir_in_git(settings)
    if logs is None:
        click.echo(started)
        if inside:
            click.echo(inside, err=True)
    else:  # JSON lines: where the platform is, as one record
        import logging

        logging.getLogger("x402mw.platform").info(started)
        if inside:
            logging.getLogger("x402mw.platform").warning(inside)
    settings = settings.model_copy(update={"migrate": False})
    if settings.workers == 1:
        with _metrics_served(settings):
            app = create_app(settings, serving_process=True)
            logging_config = logs or LOGGING_CONFIG
            config = uvicorn.Config(
                app, host=settings.host, port=settings.port, log_level=settings.log_level, log_config=logging_config
            )
            serve_draining(draining_config(config, settings.drain_seconds), settings.drain_seconds)
        return
    os.environ.update(settings.as_environment())  # what each worker reads (worker_app)
    from x402mw.platform.metrics import MultiprocessMetrics
    from x402mw.platform.supervisor import serve_workers

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
                drain_seconds=settings.drain_seconds,
            )
    finally:
        if collected is not None:
            collected.close()


def _start_and_stop_or_exit(settings: PlatformSettings) -> str:
    """Start the platform once and stop it; what `serve` says on start (`_started`)."""
    from x402mw.platform.runtime import Platform

    async def start_and_stop() -> str:
        platform = await Platform.start(settings.model_copy(update={"run_worker": False}))
        try:
            return _started(platform)
        finally:
            await platform.aclose()

    with _start_up_failures_exit():
        return asyncio.run(start_and_stop())


def _started(platform: Any) -> str:
    """What `serve` prints on start: where the API and checkout are, each chain with its id and tokens,
    the data dir, and on a test chain the one command that funds an agent (the sandbox faucet)."""
    settings = platform.settings
    lines = [
        f"x402mw platform: API at {settings.base_url}",
        f"  checkout pages at {settings.checkout_url_base}/pi_<paymentId>",
        f"  dashboard at {settings.base_url.rstrip('/').removesuffix('/v1')}/dashboard "
        "(its first user: x402mw platform users create --merchant <id> --email <email>)",
        f"  data dir: {settings.data_dir}",
        f"  receipts signed by {platform.receipt_address} (GET /v1/health: receiptSigner)",
    ]
    test_chain = None
    for chain in platform.chains:
        network = chain.network
        mode = "test" if not chain.livemode else "live"
        lines.append(f"  chain {network.caip2} (chainId {network.chain_id}, {network.name}, {mode}):")
        lines += [f"    {asset.symbol} {asset.address}" for asset in network.assets.values()]
        if not chain.livemode and test_chain is None and network.asset("USDC") is not None:
            test_chain = network
    if test_chain is not None:
        body = json.dumps(
            {"network": test_chain.caip2, "currency": "USDC", "address": "$AGENT_ADDRESS", "amount": "5"}
        ).replace('"$AGENT_ADDRESS"', '"\'"$AGENT_ADDRESS"\'"')
        lines += [
            "  fund an agent with 5 test USDC (a test key: x402mw platform keys create --merchant <id>):",
            f'    curl -s {settings.base_url}/sandbox/faucet -H "Authorization: Bearer $X402MW_API_KEY" \\',
            f"      -H 'Content-Type: application/json' -d '{body}'",
        ]
    return "\n".join(lines)


@contextlib.contextmanager
def _start_up_failures_exit() -> Iterator[None]:
    """Any failure to start (a configuration problem, a chain's node or the database that does not
    answer) ends the command with one line and exit status 1; the traceback goes to the log at
    debug level (``--log-level debug``)."""
    import logging

    from x402mw.errors import ConfigurationError

    with _configuration_errors_exit():
        try:
            yield
        except (click.ClickException, ConfigurationError):
            raise
        except Exception as exc:
            logging.getLogger("x402mw.platform").debug("the platform could not start", exc_info=True)
            reason = (str(exc).strip().splitlines() or [""])[0][:300]
            described = f"{type(exc).__name__}: {reason}" if reason else type(exc).__name__
            raise click.ClickException(f"the platform could not start: {described}") from None


def worker_app() -> Any:
    """The app of one ``platform serve --workers N`` process (a uvicorn factory), configured from the
    environment `serve` sets before starting the workers (it has migrated the database)."""
    from x402mw.platform.app import create_app

    return create_app(PlatformSettings.from_env(migrate=False), serving_process=True)


@platform.command(epilog=_ENVIRONMENT_ONLY)
@settings_options(*PROCESS_GROUPS, run_worker=True)
def worker(settings: PlatformSettings) -> None:
    """Run time-based work (finishing settlements a stopped server left submitted) until interrupted."""
    from x402mw.platform.background import start_platform
    from x402mw.platform.drain import Drain

    _configure_logs(settings)
    settings = settings.model_copy(update={"migrate": settings.migrates_on_start})

    async def run() -> None:
        with _start_up_failures_exit():
            platform = await start_platform(settings)
        stop, loop = asyncio.Event(), asyncio.get_running_loop()
        drain = Drain(settings.drain_seconds, begin=lambda: loop.call_soon_threadsafe(stop.set), what="worker")
        signal.signal(signal.SIGTERM, drain.handle)  # kept to the end: a second SIGTERM always exits at once
        try:
            click.echo(f"worker running on {', '.join(c.network.caip2 for c in platform.chains)}")
            await stop.wait()
        finally:
            await platform.aclose()  # the duty under way finishes, the relayer leases are given back
            drain.cancel()

    with (
        contextlib.suppress(KeyboardInterrupt),
        _metrics_served(settings),
        _configuration_errors_exit(),
    ):
        asyncio.run(run())


@platform.command(name="migrate")
@settings_options(StorageSettings)
@click.option("--check", is_flag=True, help="Change nothing: exit 1 naming the migrations not applied yet.")
def migrate_command(settings: PlatformSettings, check: bool) -> None:
    """Bring the database schema up to date (a step of its own before `serve` and `worker` on PostgreSQL)."""
    from x402mw.cli_migrate import migrate_or_check

    with _start_up_failures_exit():
        migrate_or_check(settings.database_url.get_secret_value(), check=check)


@platform.command(name="relayer-pool")
@settings_options(StorageSettings)
@click.option("--chain-id", type=int, required=True, help="The chain whose pool to size.")
@click.option("--size", type=click.IntRange(1, 1000), required=True, help="How many relayer accounts it has.")
def relayer_pool_command(settings: PlatformSettings, chain_id: int, size: int) -> None:
    """Size a chain's pool of relayer accounts (X402MW_RELAYER_POOL_SIZE) while the platform runs:
    every process follows within a few seconds, without a restart. The chain must have a pool: the
    platform started with X402MW_RELAYER_POOL_SIZE on it (chains reached over JSON-RPC only)."""
    from x402mw.platform.chain.devchain import DEV_CHAIN_ID
    from x402mw.platform.services.relayer_leases import resize_pool

    if chain_id == DEV_CHAIN_ID:
        raise click.ClickException(
            f"chain {chain_id} is the in-process dev chain: it has one relayer account, and pools are for "
            "chains reached over JSON-RPC"
        )
    pooled = asyncio.run(_with_engine(settings, lambda engine: resize_pool(engine, chain_id, size)))
    if pooled is not None:
        having = f"the chains with one: {', '.join(map(str, pooled))}" if pooled else "no chain has one"
        raise click.ClickException(
            f"chain {chain_id} has no relayer pool on this platform ({having}); start the platform on it with "
            "X402MW_RELAYER_POOL_SIZE first"
        )
    click.echo(f"the relayer pool of chain {chain_id} has {size} accounts")


@platform.command(name="status")
@settings_options(StorageSettings, ChainAccessSettings)
@click.option(
    "--overdue-seconds",
    type=click.FloatRange(min=0, min_open=True),
    default=60.0,
    show_default=True,
    help="How long work may be due before the worker counts as behind.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def status_command(settings: PlatformSettings, overdue_seconds: float, as_json: bool) -> None:
    """The chains (ids, tokens, head, relayer gas) and the worker's and queues' health, read from the
    database and the chains this platform is configured with. Exits 1 when the worker is behind or a
    chain cannot be reached."""
    from datetime import UTC, datetime, timedelta

    from x402mw.platform.services.status import chain_status, queue_status

    async def read(engine: Any) -> dict[str, Any]:
        chains = await chain_status(settings, engine)
        queues = await queue_status(engine, datetime.now(UTC), timedelta(seconds=overdue_seconds))
        return {"dataDir": str(settings.data_dir), "chains": chains} | queues

    with _configuration_errors_exit():
        report = asyncio.run(_with_engine(settings, read))
    healthy = report["worker"] == "ok" and all(
        c["state"].startswith(("ok", "running", "new")) for c in report["chains"]
    )
    if as_json:
        click.echo(json.dumps(report))
    else:
        click.echo(f"data dir: {report['dataDir']}")
        for chain in report["chains"]:
            if chain["network"] is None:  # the node did not answer: what is configured
                click.echo(f"chain at {chain['rpcUrl']} (chain id unknown until it answers): {chain['state']}")
            else:
                click.echo(f"chain {chain['network']} ({chain['name']}): {chain['state']}")
            for symbol, address in chain["tokens"].items():
                click.echo(f"  token {symbol}: {address}")
            click.echo(f"  head block: {_shown(chain['head'])}")
            click.echo(f"  relayer {_shown(chain['relayer'])}: {_shown(chain['relayerGas'])} ETH of gas")
        click.echo(f"worker: {report['worker']}")
        for name, counts in report["queues"].items():
            click.echo(f"  {name}: {counts['waiting']} waiting, {counts['overdue']} overdue")
    if not healthy:
        sys.exit(1)


def _register_accounts() -> None:
    from x402mw.cli_accounts import keys, merchants, users

    platform.add_command(merchants, "merchants")
    platform.add_command(keys, "keys")
    platform.add_command(users, "users")


def _register_merchant_day() -> None:
    from x402mw.cli_accounts import users
    from x402mw.cli_day import endpoints, users_invite, users_list

    platform.add_command(endpoints, "endpoints")
    users.add_command(users_list, "list")
    users.add_command(users_invite, "invite")


def _register_local_chain() -> None:
    from x402mw.cli_local import anvil_command, rpc_relay_command

    platform.add_command(anvil_command, "anvil")
    platform.add_command(rpc_relay_command, "rpc-relay")


_register_pay()
_register_accounts()
_register_merchant_day()
_register_local_chain()
register_gateway(main)
