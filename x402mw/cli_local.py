"""A local chain for the platform, on the command line: ``x402mw platform anvil`` runs anvil with our
token and contracts and writes the settings that point the platform at it; ``x402mw platform
rpc-relay`` gives a node one more address, so that RPC failover can be tried by stopping it.
`x402mw.cli` registers them."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
from pathlib import Path

import click

__all__ = ["anvil_command", "rpc_relay_command"]

_PORT = click.IntRange(1, 65535)


@click.command(name="anvil")
@click.option("--port", type=_PORT, default=8545, show_default=True, help="Where the chain answers JSON-RPC.")
@click.option(
    "--provider",
    "providers",
    multiple=True,
    metavar="URL",
    help="Another address of this chain (an `rpc-relay`) for the platform to try before this one; repeatable.",
)
@click.option("--block-time", type=click.FloatRange(min=0.01), default=None, help="Seconds between blocks.")
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="X402MW_DATA_DIR",
    default=".x402mw",
    show_default=True,
    help="Where anvil.env, the platform's settings for this chain, is written.",
)
def anvil_command(port: int, providers: tuple[str, ...], block_time: float | None, data_dir: Path) -> None:
    """Run anvil with USDC and EURC (our EIP-3009 token) and our contracts at their canonical
    addresses, and write anvil.env: the settings of a platform on it (its chain, tokens, faucet and
    relayer keys). Runs until stopped; its port answers once the chain is ready."""
    import uvicorn

    from x402mw.platform.chain.anvil import ANVIL_DEV_KEYS, AnvilProcess, deploy_test_tokens
    from x402mw.platform.chain.relay import relay_app
    from x402mw.platform.chain.rpc import HttpJsonRpc

    minter, relayer = ANVIL_DEV_KEYS[0], ANVIL_DEV_KEYS[1]
    try:
        node = AnvilProcess(args=["--block-time", str(block_time)] if block_time else [])
        node.start()
    except (FileNotFoundError, RuntimeError, TimeoutError) as exc:
        raise click.ClickException(f"anvil could not start: {exc}") from None
    try:

        async def deploy() -> dict[str, str]:
            rpc = HttpJsonRpc(node.url)
            try:
                return await deploy_test_tokens(rpc, minter)
            finally:
                await rpc.aclose()

        tokens = asyncio.run(deploy())
        url = f"http://127.0.0.1:{port}"
        rpc_url: list[str] | str = [*providers, url] if providers else url
        chain = {"rpc_url": rpc_url, "tokens": tokens, "minter_key": "0x" + minter.hex()}
        settings = {"X402MW_CHAINS": json.dumps([chain]), "X402MW_RELAYER_KEY": "0x" + relayer.hex()}
        data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        env_file = data_dir / "anvil.env"
        # anvil's well-known development keys, but keys all the same: readable by this user alone
        descriptor = os.open(env_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.writelines(f"{name}={shlex.quote(value)}\n" for name, value in settings.items())
        click.echo(f"anvil: chain eip155:{node.chain_id} at {url}, USDC {tokens['USDC']}, EURC {tokens['EURC']}")
        click.echo(f"settings: {env_file} (set -a; . {shlex.quote(str(env_file))}; set +a)")
        uvicorn.run(relay_app(node.url), host="127.0.0.1", port=port, log_level="warning")
    finally:
        node.stop()


@click.command(name="rpc-relay")
@click.option("--upstream", required=True, metavar="URL", help="The node's JSON-RPC URL.")
@click.option("--port", type=_PORT, required=True, help="Where the relay listens.")
@click.option("--host", default="127.0.0.1", show_default=True)
def rpc_relay_command(upstream: str, port: int, host: str) -> None:
    """Pass JSON-RPC to a node from one more address: one more provider of its chain for the platform,
    and stopping the relay is that provider going away."""
    import uvicorn

    from x402mw.platform.chain.relay import relay_app

    if not upstream.startswith(("http://", "https://")):
        raise click.BadParameter("must be an http(s) URL", param_hint="--upstream")
    uvicorn.run(relay_app(upstream), host=host, port=port, log_level="warning")
