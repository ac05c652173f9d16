"""What ``x402mw platform status`` reports: the chains the platform is configured with (id, tokens,
head block, the relayer's gas) and the health of its background work, read from the database.

The worker's health is read from the work it owes: an item (a webhook delivery, a subscriber's email,
a refund, an order past its expiry, a settlement left submitted) that has been due for longer than
`OVERDUE` means no worker is doing it. The embedded dev chain is read from its state in the data dir
when no platform holds it; while one runs, the chain is in that process and only the database's
record of it (id, tokens) is shown.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.errors import ConfigurationError
from x402mw.evm.keys import address_of
from x402mw.platform.chain.devchain import DEV_CHAIN_ID
from x402mw.platform.chain.rpc import HttpJsonRpc
from x402mw.platform.db import tables
from x402mw.platform.keys import parse_private_key
from x402mw.platform.services.embedded_chain import start_embedded_chain
from x402mw.platform.settings import ChainSettings, PlatformSettings, shown_url
from x402mw.protocol.networks import get_network

OVERDUE = timedelta(seconds=60)
"""How long an item may be due before the worker counts as behind (it passes every two seconds)."""

_WEI_PER_ETH = Decimal(10) ** 18


def _aware(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def _relayer_address(settings: PlatformSettings) -> str | None:
    """The relayer's address, from its setting or its key file (or the remote signer's account);
    None when neither exists yet."""
    if settings.relayer_signer_address is not None:
        return settings.relayer_signer_address
    if settings.relayer_key is not None:
        return address_of(parse_private_key(settings.relayer_key.get_secret_value()))
    path = settings.data_dir / "relayer.key"
    return address_of(parse_private_key(path.read_text())) if path.exists() else None


def _eth(wei: int) -> str:
    return f"{(Decimal(wei) / _WEI_PER_ETH).normalize():f}"


async def chain_status(settings: PlatformSettings, engine: AsyncEngine) -> list[dict[str, Any]]:
    """One entry per configured chain: network, chain id, name, ``rpcUrl`` (its first provider's
    scheme, host and port; None for the embedded chain), tokens (symbol to address), head block,
    the relayer's address and gas (in ETH), and ``state``: ``ok``, ``running`` (the dev chain is held
    by a running platform), ``new`` (the dev chain has not been made yet) or ``unreachable: ...``."""
    relayer = _relayer_address(settings)
    return [
        await (_embedded(settings.data_dir, engine, relayer) if chain.rpc_url is None else _remote(chain, relayer))
        for chain in settings.chains
    ]


async def _embedded(data_dir: Path, engine: AsyncEngine, relayer: str | None) -> dict[str, Any]:
    found = tables.embedded_chains
    async with engine.connect() as conn:
        row = (await conn.execute(select(found.c.tokens).where(found.c.chain_id == DEV_CHAIN_ID))).first()
    entry: dict[str, Any] = {
        "network": f"eip155:{DEV_CHAIN_ID}",
        "chainId": DEV_CHAIN_ID,
        "name": "x402mw dev chain (embedded)",
        "rpcUrl": None,
        "tokens": dict(row.tokens) if row is not None else {},
        "relayer": relayer,
        "relayerGas": None,
        "head": None,
    }
    if row is None or relayer is None:
        return entry | {"state": "new (made when the platform first starts)"}
    try:
        chain = await start_embedded_chain(engine, data_dir, relayer_address=relayer)
    except ConfigurationError as exc:
        if "locked" in str(exc) or "in use" in str(exc):
            return entry | {"state": "running (held by a running platform, which tops its relayer's gas up)"}
        return entry | {"state": f"unusable: {exc}"}
    try:
        head = int(await chain.rpc.request("eth_blockNumber", []), 16)
        gas = int(await chain.rpc.request("eth_getBalance", [relayer, "latest"]), 16)
    finally:
        await chain.aclose()
    return entry | {"head": head, "relayerGas": _eth(gas), "state": "ok"}


async def _remote(chain: ChainSettings, relayer: str | None) -> dict[str, Any]:
    assert chain.rpc_url is not None
    rpc = HttpJsonRpc(chain.rpc_url.get_secret_value(), timeout=5.0)
    configured = {s.upper(): a for s, a in chain.tokens.items()}
    entry: dict[str, Any] = {  # what is configured, where the node does not say more
        "network": None,
        "chainId": None,
        "name": None,
        "rpcUrl": shown_url(chain.rpc_url),
        "tokens": configured,
        "relayer": relayer,
    }
    try:
        chain_id = int(await rpc.request("eth_chainId", []), 16)
        head = int(await rpc.request("eth_blockNumber", []), 16)
        gas = int(await rpc.request("eth_getBalance", [relayer, "latest"]), 16) if relayer else None
    except Exception as exc:  # the node's answer, whatever it is, is what status reports
        return entry | {"head": None, "relayerGas": None, "state": f"unreachable: {exc}"}
    finally:
        await rpc.aclose()
    known = get_network(chain_id)
    tokens = configured or ({a.symbol: a.address for a in known.assets.values()} if known else {})
    return entry | {
        "network": f"eip155:{chain_id}",
        "chainId": chain_id,
        "name": known.name if known else f"chain {chain_id}",
        "tokens": tokens,
        "head": head,
        "relayerGas": _eth(gas) if gas is not None else None,
        "state": "ok",
    }


async def queue_status(engine: AsyncEngine, now: datetime, overdue: timedelta = OVERDUE) -> dict[str, Any]:
    """The background work owed, by kind: how many items are waiting and how many of them have been due
    longer than ``overdue``; ``worker`` is ``ok`` or ``behind`` (some item is overdue)."""
    late = now - overdue
    deliveries, emails, refunds = tables.webhook_deliveries, tables.subscription_emails, tables.refunds
    intents, payments = tables.payment_intents, tables.agent_payments
    kinds = {
        "webhookDeliveries": (deliveries, deliveries.c.status == "pending", deliveries.c.next_attempt_at),
        "emails": (emails, emails.c.status == "pending", emails.c.next_attempt_at),
        "refunds": (refunds, refunds.c.status == "processing", refunds.c.updated_at),
        "settlements": (payments, payments.c.status.in_(("claimed", "submitted")), payments.c.created_at),
        "expiringOrders": (
            intents,
            (intents.c.status == "requires_payment") & intents.c.expires_at.is_not(None),
            intents.c.expires_at,
        ),
    }
    queues: dict[str, Any] = {}
    async with engine.connect() as conn:
        for name, (table, waiting, due_at) in kinds.items():
            query = select(func.count(), func.count().filter(due_at < late)).select_from(table).where(waiting)
            if name == "expiringOrders":  # only the orders past their expiry are owed work
                query = query.where(due_at < now)
            waiting_count, overdue_count = (await conn.execute(query)).one()
            queues[name] = {"waiting": int(waiting_count), "overdue": int(overdue_count)}
    behind = [name for name, counts in queues.items() if counts["overdue"]]
    worker = "ok" if not behind else f"behind ({', '.join(behind)} due for over {overdue.total_seconds():g} s)"
    return {"worker": worker, "queues": queues}
