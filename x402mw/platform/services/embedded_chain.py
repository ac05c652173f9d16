"""The embedded dev chain, kept in the data dir and bound to the platform's records.

The chain lives in ``<data dir>/devchain/`` (:mod:`~x402mw.platform.chain.devstate`) and the
database records which chain its records belong to (``embedded_chains``: chain id, genesis hash,
token addresses). :func:`start_embedded_chain` reopens that chain, or makes one when the database
has no records on a dev chain, and refuses (`ConfigurationError`, saying what to do) wherever the
two would not belong together: the chain's state is missing or unfinished while the database has
records of one, it is another chain than the records', or the records predate kept chains.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from sqlalchemy import insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.errors import ConfigurationError
from x402mw.platform.chain.devchain import DEV_CHAIN_ID, DevChain, start_dev_chain
from x402mw.platform.chain.devstate import ChainIdentity, DevChainState
from x402mw.platform.db import tables
from x402mw.platform.db.models import utcnow

STATE_DIR = "devchain"  # under the data dir
# Records that state facts about a chain (money moved, blocks read): a database holding some on the
# dev chain but no embedded_chains row was written before the dev chain was kept.
_CHAIN_RECORDS = (
    tables.agent_payments,
    tables.payment_intents,
    tables.incoming_transfers,
    tables.chain_cursors,
    tables.balances,
    tables.ledger_entries,
    tables.refunds,
)


async def start_embedded_chain(
    engine: AsyncEngine, data_dir: Path, *, relayer_address: str, fund_addresses: Sequence[str] = ()
) -> DevChain:
    """Start the dev chain kept in ``data_dir``, checked against the records in ``engine``'s database
    (see the module's docstring); a new chain's identity is recorded there."""
    directory = data_dir / STATE_DIR
    recorded = await _recorded(engine)
    if recorded is None and await _has_chain_records(engine):
        raise ConfigurationError(
            f"the database has payments, orders or balances on the dev chain (chain {DEV_CHAIN_ID}) from an "
            "x402mw that did not keep the dev chain, and that chain is gone; the platform will not pair them "
            f"with a new chain. Delete the data dir ({data_dir}), and the database if it lives elsewhere, to "
            "start over."
        )
    if recorded is not None and not DevChainState.exists(directory):
        raise ConfigurationError(_missing(recorded, directory, data_dir, "is not there"))
    state = await asyncio.to_thread(DevChainState.open, directory)
    if recorded is not None and state.identity != recorded:
        state.close()
        if state.identity is None:
            raise ConfigurationError(_missing(recorded, directory, data_dir, "was never finished"))
        raise ConfigurationError(
            f"the dev chain in {directory} (genesis {state.identity.genesis_hash}) is not the chain the "
            f"database's records belong to (genesis {recorded.genesis_hash}); the platform will not pair "
            "them. Point --data-dir and --database-url at the pair that belongs together, or delete the data "
            f"dir ({data_dir}), and the database if it lives elsewhere, to start over."
        )
    chain = await start_dev_chain(relayer_address=relayer_address, fund_addresses=fund_addresses, state=state)
    if recorded is None:
        try:
            await _record(engine, chain.identity)
        except BaseException:
            await chain.aclose()
            raise
    return chain


def _missing(recorded: ChainIdentity, directory: Path, data_dir: Path, what: str) -> str:
    return (
        f"the database's records belong to the dev chain with genesis {recorded.genesis_hash}, whose state "
        f"in {directory} {what}; the platform will not pair those records with a new chain. Restore "
        f"{directory} from a backup, or delete the data dir ({data_dir}), and the database if it lives "
        "elsewhere, to start over."
    )


async def _recorded(engine: AsyncEngine) -> ChainIdentity | None:
    chains = tables.embedded_chains
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                select(chains.c.chain_id, chains.c.genesis_hash, chains.c.tokens).where(
                    chains.c.chain_id == DEV_CHAIN_ID
                )
            )
        ).first()
    if row is None:
        return None
    return ChainIdentity(int(row.chain_id), str(row.genesis_hash), {str(k): str(v) for k, v in row.tokens.items()})


async def _has_chain_records(engine: AsyncEngine) -> bool:
    async with engine.connect() as conn:
        for table in _CHAIN_RECORDS:
            found = await conn.execute(select(table.c.chain_id).where(table.c.chain_id == DEV_CHAIN_ID).limit(1))
            if found.first() is not None:
                return True
    return False


async def _record(engine: AsyncEngine, identity: ChainIdentity) -> None:
    chains = tables.embedded_chains
    try:
        async with engine.begin() as conn:
            await conn.execute(
                insert(chains).values(
                    chain_id=identity.chain_id,
                    genesis_hash=identity.genesis_hash,
                    tokens=identity.tokens,
                    created_at=utcnow(),
                )
            )
    except IntegrityError:
        # Another process recorded its chain first: this one is only welcome if it is the same.
        if await _recorded(engine) != identity:
            raise ConfigurationError(
                "another platform process recorded a different dev chain in this database meanwhile"
            ) from None
