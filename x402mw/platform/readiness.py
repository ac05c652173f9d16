"""Readiness: whether this process can take payments now (``/readyz``), one `Check` per dependency.

The database answers and its schema is the one this x402mw knows; Redis answers, when one is
configured; each chain's JSON-RPC answers; each chain's relayer can send and holds gas above a floor
(`READY_TRANSFERS` transfers at the going fees); a remote signer holding the relayer's key is up
and holds it. Every check runs at once, each bounded by its
timeout, so a dependency that hangs costs the probe that long and no more.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass

import httpx
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.platform.chain.signers import Signer, SignerUnavailable
from x402mw.platform.db.schema import known_head
from x402mw.platform.services.chains import ChainHandle

CHECK_TIMEOUT = 3.0
READY_TRANSFERS = 10  # the relayer's floor: gas for this many settlement transfers at the going fees
TRANSFER_GAS = 120_000


@dataclass(frozen=True, slots=True)
class Check:
    """One dependency's result: its name (``database``, ``redis``, ``chain eip155:…``, ``relayer eip155:…``),
    whether it passed, and what was found (or why it failed), for an operator."""

    name: str
    ok: bool
    detail: str


async def readiness(
    engine: AsyncEngine, chains: Iterable[ChainHandle], redis_url: str | None, *, timeout: float = CHECK_TIMEOUT
) -> list[Check]:
    """Every check, in a fixed order: database, Redis (when ``redis_url``), then each chain and its relayer."""
    checks: list[tuple[str, Awaitable[str]]] = [("database", _database(engine))]
    if redis_url:
        checks.append(("redis", _redis(redis_url)))
    for chain in chains:
        checks.append((f"chain {chain.network.caip2}", _chain(chain)))
        checks.append((f"relayer {chain.network.caip2}", _relayer(chain)))
        if chain.signer is not None:
            checks.append((f"relayer signer {chain.network.caip2}", _signer(chain.signer)))
    results = await asyncio.gather(*(_bounded(name, work, timeout) for name, work in checks))
    return list(results)


class NotReady(Exception):
    """A check's failure, its message what an operator reads."""


async def _bounded(name: str, work: Awaitable[str], timeout: float) -> Check:
    try:
        async with asyncio.timeout(timeout):
            return Check(name, True, await work)
    except NotReady as exc:
        return Check(name, False, str(exc))
    except TimeoutError:
        return Check(name, False, f"no answer within {timeout:g} s")
    except (SQLAlchemyError, httpx.HTTPError, OSError, ConnectionError) as exc:
        reason = (str(exc).strip().splitlines() or [""])[0][:200]
        return Check(name, False, f"cannot be reached: {type(exc).__name__}" + (f": {reason}" if reason else ""))


async def _database(engine: AsyncEngine) -> str:
    async with engine.connect() as conn:
        revision = (await conn.execute(text("SELECT version_num FROM alembic_version"))).scalar()
    head = known_head()
    if revision != head:
        raise NotReady(f"schema at revision {revision}, this x402mw runs on {head}: run `x402mw platform migrate`")
    return f"reachable, schema at revision {revision}"


async def _redis(url: str) -> str:
    from redis.asyncio import Redis
    from redis.exceptions import RedisError

    client = Redis.from_url(url.removeprefix("async+"), socket_connect_timeout=CHECK_TIMEOUT)
    try:
        await client.ping()  # type: ignore[misc]  # redis-py types ping for its sync and async clients at once
    except RedisError as exc:
        raise NotReady(f"cannot be reached: {type(exc).__name__}: {str(exc)[:200]}") from exc
    finally:
        await client.aclose()
    return "reachable"


async def _chain(chain: ChainHandle) -> str:
    head = int(await chain.rpc.request("eth_blockNumber", []), 16)
    return f"JSON-RPC answers, head block {head}"


async def _signer(signer: Signer) -> str:
    try:
        return await signer.check()
    except SignerUnavailable as exc:
        raise NotReady(f"cannot sign: {exc}; settlements stay pending until it can") from exc


async def _relayer(chain: ChainHandle) -> str:
    relayer = chain.relayer
    if not relayer.available:
        raise NotReady("cannot send: its node or its accounts are unavailable")
    floor = await relayer.gas_cost(TRANSFER_GAS) * READY_TRANSFERS
    addresses = relayer.addresses
    balances = await chain.rpc.batch([("eth_getBalance", [address, "latest"]) for address in addresses])
    held = {address: int(balance, 16) for address, balance in zip(addresses, balances, strict=True)}
    best = max(held.values(), default=0)
    if best < floor:
        shown = ", ".join(f"{address} {balance} wei" for address, balance in held.items()) or "no account"
        raise NotReady(f"gas below the floor of {floor} wei ({READY_TRANSFERS} transfers): {shown}")
    return f"{len(held)} account(s), the best funded with {best} wei (floor {floor})"
