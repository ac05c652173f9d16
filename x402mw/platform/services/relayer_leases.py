"""Which relayer accounts of a chain's pool this process sends from: leases in the database.

Each account of the pool (``relayer_accounts``, one row per slot) is held by at most one process at
a time, for `lease` seconds that the holder renews every round (`RelayerLeases.round`, every few
seconds), so no two processes ever share an account's nonces. The live processes
(``relayer_holders``, renewed alike) share the accounts evenly: each takes free or lapsed accounts
up to its share (the pool's size over the live processes, rounded up) and lets go of those beyond
it, once nothing of theirs is in flight. The pool's size (``relayer_pools``) is read every round,
so it changes without a restart.

A process that stops leaves its leases to run out. Whoever takes such an account over reads its
nonces from the node first (`RelayerPool.hold`): what the stopped process had in flight there is
neither reused nor lost; its settlements are finished by the settlement recovery, whose
one-outcome rules hold whichever account sends them again.

Each round also reads the held accounts' gas balances (metrics; an account that cannot pay for a
transaction is given no work, and `/readyz` fails when none can) and tops up from the funding
account (the relayer key's) those below the floor.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import math
import os
import socket
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.evm.keys import address_of
from x402mw.platform.chain.pool import RelayerPool
from x402mw.platform.clock import Clock
from x402mw.platform.db import tables
from x402mw.platform.metrics import RELAYER_BALANCE, RELAYER_IN_FLIGHT, RELAYER_LEASE

logger = logging.getLogger("x402mw.platform.relayer")

_ACCOUNTS, _HOLDERS, _POOLS = tables.relayer_accounts, tables.relayer_holders, tables.relayer_pools


def pool_key(relayer_key: bytes, slot: int) -> bytes:
    """The key of account ``slot`` of the pool derived from ``relayer_key``."""
    return hmac.new(relayer_key, f"x402mw relayer pool/{slot}".encode(), hashlib.sha256).digest()


def holder_name() -> str:
    """This process, as the holder of its leases: host, process id and a random part."""
    return f"{socket.gethostname()[:60]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _insert(engine: AsyncEngine) -> Any:
    return postgresql.insert if engine.dialect.name == "postgresql" else sqlite.insert


async def set_pool_size(engine: AsyncEngine, chain_id: int, size: int) -> None:
    """Make chain ``chain_id``'s pool ``size`` accounts; every process follows within a round."""
    now = datetime.now(UTC)
    insert = _insert(engine)(_POOLS).values(chain_id=chain_id, size=size, updated_at=now)
    async with engine.begin() as conn:
        await conn.execute(
            insert.on_conflict_do_update(index_elements=["chain_id"], set_={"size": size, "updated_at": now})
        )


async def resize_pool(engine: AsyncEngine, chain_id: int, size: int) -> list[int] | None:
    """Make chain ``chain_id``'s pool ``size`` accounts, if the chain has a pool (the platform
    started one there: `set_pool_size`); None when it has, else the chains that have one (a
    process that started without a pool holds no leases, and would never follow a size)."""
    now = datetime.now(UTC)
    async with engine.begin() as conn:
        changed = await conn.execute(
            update(_POOLS).where(_POOLS.c.chain_id == chain_id).values(size=size, updated_at=now)
        )
        if changed.rowcount:
            return None
        return [int(c) for c in await conn.scalars(select(_POOLS.c.chain_id).order_by(_POOLS.c.chain_id))]


class RelayerLeases:
    """Keeps ``pool`` holding this process's share of chain ``chain_id``'s accounts (see the
    module's docstring). The accounts are derived from ``relayer_key`` (`pool_key`), or are
    ``given_keys`` (the pool is then at most that many); ``relayer_key``'s account tops them up
    to twice ``gas_floor``. ``holder`` names this process (default: host, pid and a random part).
    ``clock`` says when leases are renewed to and when they have run out."""

    def __init__(
        self,
        engine: AsyncEngine,
        pool: RelayerPool,
        *,
        chain_id: int,
        relayer_key: bytes,
        given_keys: Sequence[bytes] = (),
        lease: float = 30.0,
        gas_floor: int = 10**17,
        holder: str | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.engine = engine
        self.pool = pool
        self.chain_id = chain_id
        self.network = f"eip155:{chain_id}"
        self._relayer_key = relayer_key
        self._given = list(given_keys)
        self.lease = timedelta(seconds=lease)
        self.every = min(lease / 3, 2.0)
        self.gas_floor = gas_floor
        self.holder = holder or holder_name()
        self.clock = clock or Clock()
        self.size = 0
        self._keys: dict[str, bytes] = {}  # by address, the accounts held
        self._addresses: dict[int, str] = {}  # by slot
        self._funder = address_of(relayer_key)
        self._funder_started = False
        self._task: asyncio.Task[None] | None = None
        self._funding: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"RelayerLeases(chain_id={self.chain_id}, holder={self.holder!r})"

    def key(self, slot: int) -> bytes:
        return self._given[slot] if self._given else pool_key(self._relayer_key, slot)

    def address(self, slot: int) -> str:
        if slot not in self._addresses:
            self._addresses[slot] = address_of(self.key(slot))
        return self._addresses[slot]

    async def start(self, size: int | None) -> None:
        """Write the pool's size (when given), take this process's share, and keep it."""
        if size is not None:
            await set_pool_size(self.engine, self.chain_id, min(size, len(self._given)) if self._given else size)
        await self.round()
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"x402mw-relayer-leases-{self.chain_id}")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.every)
            try:
                await self.round()
            except Exception:
                logger.exception("relayer pool of chain %d: the lease round failed", self.chain_id)

    async def round(self) -> None:
        """Renew what this process holds, take its share, let go of what is beyond it, read balances."""
        now = self.clock.now()
        until = now + self.lease
        insert = _insert(self.engine)
        async with self.engine.begin() as conn:
            size = await conn.scalar(select(_POOLS.c.size).where(_POOLS.c.chain_id == self.chain_id))
            self.size = size = int(size or 0)
            if self._given:
                size = min(size, len(self._given))
            await conn.execute(
                insert(_HOLDERS)
                .values(chain_id=self.chain_id, holder=self.holder, seen_until=until)
                .on_conflict_do_update(index_elements=["chain_id", "holder"], set_={"seen_until": until})
            )
            if size:
                rows = [
                    {"chain_id": self.chain_id, "slot": slot, "address": self.address(slot)} for slot in range(size)
                ]
                await conn.execute(insert(_ACCOUNTS).values(rows).on_conflict_do_nothing())
            mine = _ACCOUNTS.c.holder == self.holder
            renewed = await conn.execute(
                update(_ACCOUNTS)
                .where(_ACCOUNTS.c.chain_id == self.chain_id, mine)
                .values(locked_until=until)
                .returning(_ACCOUNTS.c.slot, _ACCOUNTS.c.address)
            )
            held = {row.address: row.slot for row in renewed}
            live = await conn.scalar(
                select(func.count())
                .select_from(_HOLDERS)
                .where(_HOLDERS.c.chain_id == self.chain_id, _HOLDERS.c.seen_until > now)
            )
            share = math.ceil(size / max(int(live or 1), 1))
            keep = sorted((slot, a) for a, slot in held.items() if slot < size)[:share]
            wanted = share - len(keep)
            taken: dict[str, int] = {}
            if wanted > 0:
                lapsed = or_(_ACCOUNTS.c.holder.is_(None), _ACCOUNTS.c.locked_until < now)
                free = await conn.execute(
                    select(_ACCOUNTS.c.slot, _ACCOUNTS.c.address)
                    .where(_ACCOUNTS.c.chain_id == self.chain_id, _ACCOUNTS.c.slot < size, lapsed)
                    .order_by(_ACCOUNTS.c.slot)
                    .limit(wanted)
                )
                for slot, address in free.all():
                    claimed = await conn.execute(
                        update(_ACCOUNTS)
                        .where(and_(_ACCOUNTS.c.chain_id == self.chain_id, _ACCOUNTS.c.slot == slot, lapsed))
                        .values(holder=self.holder, locked_until=until)
                    )
                    if claimed.rowcount == 1:
                        taken[address] = slot
        keep_addresses = {address for _, address in keep}
        # Accounts this process sent from whose lease it no longer has: stop at once.
        for address in [a for a in self.pool.addresses if a not in held]:
            logger.warning("relayer pool of chain %d: lost the lease of %s", self.chain_id, address)
            await self.pool.drop(address)
            self._forget(address)
        for address in held:
            if address not in keep_addresses:
                self.pool.drain(address)  # beyond this process's share, or the pool shrank
        lacking = {a: held[a] for a in keep_addresses if a not in self.pool.relayers()}  # a start that failed
        if taken or lacking:
            await self._hold({**taken, **lacking})
        for address in keep_addresses:
            if address in lacking:
                continue
            if not self.pool.taking_work(address):
                await self.pool.hold(self._keys[address])  # back within this process's share
        for address in await self.pool.let_go_idle():
            await self._let_go(address)
        await self._read_balances()

    async def _hold(self, taken: dict[str, int]) -> None:
        """Start sending from the accounts ``taken`` (address: slot), topped up first."""
        for address, slot in taken.items():
            self._keys[address] = self.key(slot)
        try:
            await self._fund(list(taken))
        except Exception:
            logger.warning("relayer pool of chain %d: could not top up %s", self.chain_id, list(taken), exc_info=True)
        for address, slot in taken.items():
            try:
                await self.pool.hold(self._keys[address])
            except Exception:
                # The node is away: let it go; whoever takes it next reads its nonces again.
                logger.warning("relayer pool of chain %d: could not start %s", self.chain_id, address, exc_info=True)
                await self._let_go(address)
                continue
            RELAYER_LEASE.labels(self.network, address, self.holder).set(1)
            logger.info("relayer pool of chain %d: holding %s (slot %d)", self.chain_id, address, slot)

    async def _let_go(self, address: str) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                update(_ACCOUNTS)
                .where(_ACCOUNTS.c.chain_id == self.chain_id, _ACCOUNTS.c.address == address)
                .where(_ACCOUNTS.c.holder == self.holder)
                .values(holder=None, locked_until=None)
            )
        self._forget(address)
        logger.info("relayer pool of chain %d: let go of %s", self.chain_id, address)

    def _forget(self, address: str) -> None:
        self._keys.pop(address, None)
        self.pool.can_pay.pop(address, None)
        for gauge, labels in (
            (RELAYER_LEASE, (self.network, address, self.holder)),
            (RELAYER_BALANCE, (self.network, address)),
            (RELAYER_IN_FLIGHT, (self.network, address)),
        ):
            with contextlib.suppress(KeyError):
                gauge.remove(*labels)

    # -- gas ----------------------------------------------------------------------------------------

    async def _balances(self, addresses: Sequence[str]) -> dict[str, int]:
        if not addresses:
            return {}
        found = await self.pool.rpc.batch([("eth_getBalance", [a, "latest"]) for a in addresses])
        return {a: int(b, 16) for a, b in zip(addresses, found, strict=True)}

    async def _read_balances(self) -> None:
        addresses = self.pool.addresses
        try:
            balances = await self._balances(addresses)
            cost = await self.pool.gas_cost()
        except Exception as exc:  # the node is away: the relayers say so themselves
            logger.debug("relayer pool of chain %d: balances not read: %s", self.chain_id, exc)
            return
        low = []
        for address, balance in balances.items():
            RELAYER_BALANCE.labels(self.network, address).set(balance)
            RELAYER_IN_FLIGHT.labels(self.network, address).set(self.pool.in_flight(address))
            self.pool.can_pay[address] = balance >= cost
            if balance < self.gas_floor:
                low.append(address)
        self.pool.changed()  # an account that can pay again has room
        if low and (self._funding is None or self._funding.done()):
            self._funding = asyncio.get_running_loop().create_task(self._fund_all(low))

    async def _fund_all(self, addresses: list[str]) -> None:
        try:
            await self._fund(addresses)
        except Exception:
            logger.warning("relayer pool of chain %d: could not top up %s", self.chain_id, addresses, exc_info=True)

    async def _fund(self, addresses: list[str]) -> None:
        """Top those of ``addresses`` below the floor up to twice the floor from the funding
        account: every transfer sent at once, then waited for."""
        balances = await self._balances(addresses)
        low = {a: 2 * self.gas_floor - b for a, b in balances.items() if b < self.gas_floor and a != self._funder}
        if not low:
            return
        funder = self.pool.reader
        if not self._funder_started:
            await funder.start()
            self._funder_started = True
        sent = {address: await funder.send(address, b"", gas=21_000, value=amount) for address, amount in low.items()}
        receipts = await asyncio.gather(*(funder.wait_for_receipt(tx, timeout=120) for tx in sent.values()))
        for (address, amount), receipt in zip(low.items(), receipts, strict=True):
            if receipt.status == 1:
                self.pool.can_pay[address] = True
                self.pool.changed()
                logger.info(
                    "relayer pool of chain %d: topped %s up by %d wei (%s)",
                    self.chain_id,
                    address,
                    amount,
                    receipt.transaction_hash,
                )

    async def aclose(self) -> None:
        """Stop renewing; let go at once of the accounts with nothing in flight (the others' leases
        run out, and whoever takes them over finds what is left on the node)."""
        for task in (self._task, self._funding):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        with contextlib.suppress(Exception):
            for address in list(self.pool.addresses):
                if self.pool.in_flight(address) == 0:
                    await self._let_go(address)
            async with self.engine.begin() as conn:
                await conn.execute(
                    _HOLDERS.delete().where(_HOLDERS.c.chain_id == self.chain_id, _HOLDERS.c.holder == self.holder)
                )
