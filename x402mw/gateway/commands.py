"""``x402mw gateway`` and ``x402mw check``, registered on the CLI by `register`."""

from __future__ import annotations

import os
import sys
from typing import Any

import click
import httpx

from x402mw.errors import ConfigurationError

PLATFORM_URL = "http://127.0.0.1:4402/v1"


def _fail(message: str) -> None:
    click.echo(f"x402mw gateway: {message}", err=True)
    sys.exit(2)


def _upstream_answers(url: str) -> str | None:
    """None when the upstream answers HTTP at all (any status), else why not."""
    try:
        with httpx.Client(timeout=5, trust_env=False) as client:
            client.get(url)
    except httpx.HTTPError as exc:
        return f"the upstream {url} does not answer ({type(exc).__name__}: {exc})"
    return None


def _upstream_document(url: str) -> Any:
    """The upstream's OpenAPI document (exit 2 when it cannot be read)."""
    try:
        with httpx.Client(timeout=10, trust_env=False) as client:
            reply = client.get(url)
        if reply.status_code == 200:
            return reply.json()
        _fail(f"the upstream's OpenAPI document {url} answered {reply.status_code}")
    except (httpx.HTTPError, ValueError) as exc:
        _fail(f"the upstream's OpenAPI document {url} cannot be read: {exc}")
    return None


@click.command(name="gateway")
@click.option(
    "--upstream",
    envvar="X402MW_UPSTREAM",
    show_envvar=True,
    help="The API to sell, e.g. http://127.0.0.1:9000 (or in the file).",
)
@click.option(
    "--config",
    "config_path",
    envvar="X402MW_GATEWAY_CONFIG",
    show_envvar=True,
    required=True,
    type=click.Path(dir_okay=False),
    help="The TOML file naming the priced routes (see docs/gateway.md).",
)
@click.option("--host", envvar="X402MW_GATEWAY_HOST", show_envvar=True, default="127.0.0.1", show_default=True)
@click.option(
    "--port",
    envvar="X402MW_GATEWAY_PORT",
    show_envvar=True,
    default=8402,
    show_default=True,
    type=click.IntRange(1, 65535),
)
def gateway_command(upstream: str | None, config_path: str, host: str, port: int) -> None:
    """Sell an existing HTTP API: a reverse proxy that charges x402 payments for the routes the file
    prices and passes every other route through.

    The platform and merchant come from X402MW_API_KEY and X402MW_PLATFORM_URL; X402MW_ENDPOINT_ID
    is the endpoint of a file with one priced route that names none; X402MW_PAYOUT_ADDRESS, when the
    file sets no payout_address, pays out the endpoints the gateway creates. A configuration error
    is one line on standard error, exit status 2."""
    from x402mw.gateway.app import GatewayApp
    from x402mw.gateway.config import parse_config, read_toml
    from x402mw.gateway.endpoints import provision
    from x402mw.gateway.openapi import merge_routes

    api_key = os.environ.get("X402MW_API_KEY", "")
    platform_url = os.environ.get("X402MW_PLATFORM_URL") or os.environ.get("X402MW_BASE_URL") or PLATFORM_URL
    try:
        data = read_toml(config_path)
        config = parse_config(data)
    except ConfigurationError as exc:
        _fail(f"{config_path}: {exc}")
        return
    if not api_key.startswith(("sk_test_", "sk_live_")):
        _fail("X402MW_API_KEY must be a merchant API key (sk_test_... or sk_live_...)")
    target = upstream or config.upstream
    if not target or not target.startswith(("http://", "https://")):
        _fail("no upstream: give --upstream http(s)://... or upstream = ... in the file")
        return
    down = _upstream_answers(target)
    if down is not None:
        _fail(down)
    document = None
    if config.openapi is not None:
        document = _upstream_document(target.rstrip("/") + config.openapi)
        data, problems = merge_routes(data, document)
        try:
            config = parse_config(data)
        except ConfigurationError as exc:
            problems.extend(exc.problems)
        if problems:
            _fail(f"{config_path}: {'; '.join(problems)}")
    if config.payout_address is None and os.environ.get("X402MW_PAYOUT_ADDRESS"):
        from dataclasses import replace

        config = replace(config, payout_address=os.environ["X402MW_PAYOUT_ADDRESS"])
    public = config.origin or f"http://{host}:{port}"
    try:
        endpoints = provision(
            config,
            api_key=api_key,
            platform_url=platform_url,
            public_base=public,
            default_endpoint=os.environ.get("X402MW_ENDPOINT_ID") or None,
        )
        app = GatewayApp(
            config,
            upstream_url=target,
            api_key=api_key,
            platform_url=platform_url,
            endpoints=endpoints,
            openapi_document=document,
        )
    except ConfigurationError as exc:
        _fail(str(exc))
        return
    import uvicorn

    click.echo(f"x402mw gateway: selling {len(config.routes)} route(s) of {target} at http://{host}:{port}", err=True)
    uvicorn.run(app, host=host, port=port, log_level="warning", proxy_headers=False)


@click.command(name="check")
@click.argument("urls", nargs=-1, required=True)
@click.option(
    "--network",
    "networks",
    multiple=True,
    help="A network to accept beyond the built-in table (eip155:<id>), with any asset: a local chain.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per checked route, one a line.")
def check_command(urls: tuple[str, ...], networks: tuple[str, ...], as_json: bool) -> None:
    """Check that a seller's paid routes answer an unpaid request with a valid x402 v2 402.

    A URL without a path (https://api.example.com) is checked through its /.well-known/x402: every
    route it lists. A URL with a path is checked itself (GET). Every problem is printed; the exit
    status is 0 when there is none, 1 otherwise."""
    import json

    from x402mw.gateway.check import check_urls

    reports = check_urls(list(urls), extra_networks=set(networks))
    failed = False
    for report in reports:
        failed = failed or bool(report.problems)
        if as_json:
            click.echo(json.dumps(report.as_dict()))
            continue
        mark = "FAIL" if report.problems else "ok"
        click.echo(f"{mark:4} {report.method} {report.url}")
        for problem in report.problems:
            click.echo(f"     - {problem}")
    sys.exit(1 if failed else 0)


def register(group: Any) -> None:
    """Add ``gateway`` and ``check`` to the CLI group."""
    group.add_command(gateway_command, "gateway")
    group.add_command(check_command, "check")
