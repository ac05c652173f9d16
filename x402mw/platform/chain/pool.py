"""A pool of relayer accounts on one chain, each a :class:`~x402mw.platform.chain.relayer.Relayer`
with a nonce space of its own.

One account is one lane: its transactions are mined strictly in nonce order, a node guarantees a
sender only a few executable slots (geth: 16), and one stuck transaction holds up every later one.
:class:`RelayerPool` spreads sends over the accounts it holds: each :meth:`~RelayerPool.send` goes
to the least-loaded account below its cap of transactions in flight (``cap``). Work beyond every
cap waits up to ``wait`` seconds for room, then gets :class:`RelayerBusy` (a 503 with
``Retry-After`` to the caller): nothing was sent, so the same work may be tried again.

Which accounts a process holds is decided elsewhere (the platform leases them in its database,
`x402mw.platform.services.relayer_leases`): :meth:`~RelayerPool.hold` starts an account (reading
its nonces from the node, which also takes over whatever another process left in flight), and
:meth:`~RelayerPool.drain` stops giving it new work so that it can be let go once nothing of it is
in flight (:meth:`~RelayerPool.let_go_idle`).

It answers as a single :class:`Relayer` does (simulations, receipts, ``available``), so the
settlement, refunds and sweeps use either alike.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from x402mw.platform.chain.relayer import Relayer, RelayerBusy
from x402mw.platform.chain.rpc import JsonRpc
from x402mw.platform.chain.transactions import TxReceipt
from x402mw.platform.clock import Clock

IN_FLIGHT_CAP = 16
"""Transactions one account may have in flight by default: geth's executable slots per sender."""
_WAIT = 2.0
_RECHECK = 0.1
"""Seconds a send waiting for room sleeps at most between looks: room this pool makes (a send
done, a receipt seen, an account held) wakes it at once; this catches what it cannot see (the
relayer's reconciler finding a transaction mined)."""
_FULL_FOR = 1.0  # seconds an account the node called full gets no new work


class RelayerPool:
    """The relayer accounts this process holds on one chain (see the module's docstring).

    ``reader`` is the funding account's relayer: it sends the top-ups, and the ``upto`` settlements
    (`x402mw.platform.services.chains.ChainHandle.facilitator`); simulations and receipts go
    through it while the process holds no account. :meth:`start` starts it. ``can_pay`` says whether an account's gas
    balance, as last read, pays for a transaction (set by whoever reads balances; then call :meth:`changed`).
    ``clock`` times the waits (`Clock.monotonic`)."""

    def __init__(
        self,
        rpc: JsonRpc,
        reader: Relayer,
        *,
        chain_id: int,
        cap: int = IN_FLIGHT_CAP,
        wait: float = _WAIT,
        relayer: Callable[[bytes], Relayer] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.rpc = rpc
        self.reader = reader
        self.chain_id = chain_id
        self.cap = cap
        self.wait = wait
        self._make = relayer or (lambda key: Relayer(rpc, key, chain_id=chain_id))
        self._held: dict[str, Relayer] = {}  # by address: may take new work
        self._draining: dict[str, Relayer] = {}  # by address: finishing what is in flight
        self._sending: dict[str, int] = {}  # by address: sends chosen for it and not yet out
        self._full_until: dict[str, float] = {}
        self.can_pay: dict[str, bool] = {}
        self.clock = clock or Clock()
        self._room = asyncio.Event()  # set (and replaced) whenever an account may have room

    def __repr__(self) -> str:
        return f"RelayerPool(chain_id={self.chain_id}, held={list(self._held)!r})"

    def changed(self) -> None:
        """Wake the sends waiting for room: an account may have some now (one held, a send or a
        transaction finished, ``can_pay`` set)."""
        self._room.set()
        self._room = asyncio.Event()

    # -- which accounts -----------------------------------------------------------------------------

    @property
    def addresses(self) -> list[str]:
        """The accounts held (taking work, or finishing it)."""
        return [*self._held, *self._draining]

    @property
    def address(self) -> str:
        """An account of the pool: the first held, else the reader's."""
        return next(iter(self._held), self.reader.address)

    def taking_work(self, address: str) -> bool:
        return address in self._held

    def relayers(self) -> dict[str, Relayer]:
        return {**self._held, **self._draining}

    async def start(self) -> None:
        """Start the funding account's relayer (its nonces and fees read from the node)."""
        await self.reader.start()

    async def hold(self, key: bytes) -> Relayer:
        """Start sending from ``key``'s account: its nonces are read from the node first, so what
        another holder left in flight is neither reused nor lost."""
        relayer = self._make(key)
        if relayer.address in self._draining:
            self._held[relayer.address] = self._draining.pop(relayer.address)
            self.changed()
            return self._held[relayer.address]
        if relayer.address in self._held:
            return self._held[relayer.address]
        await relayer.start()
        self._held[relayer.address] = relayer
        self.changed()
        return relayer

    def drain(self, address: str) -> None:
        """Give ``address`` no new work; it is let go once nothing of it is in flight."""
        relayer = self._held.pop(address, None)
        if relayer is not None:
            self._draining[address] = relayer

    async def let_go_idle(self) -> list[str]:
        """Stop the draining accounts with nothing in flight; their addresses."""
        idle = [a for a, r in self._draining.items() if r.in_flight == 0 and not self._sending.get(a)]
        for address in idle:
            await self._draining.pop(address).aclose()
        return idle

    async def drop(self, address: str) -> None:
        """Stop ``address`` at once (its lease is lost: another process may send from it now)."""
        relayer = self._held.pop(address, None) or self._draining.pop(address, None)
        if relayer is not None:
            await relayer.aclose()

    def in_flight(self, address: str) -> int:
        relayer = self.relayers().get(address)
        return (relayer.in_flight if relayer is not None else 0) + self._sending.get(address, 0)

    # -- sending ------------------------------------------------------------------------------------

    @property
    def available(self) -> bool:
        """Whether a held account can send: the node answers it and it can pay for gas."""
        return any(r.available and self.can_pay.get(a, True) for a, r in self._held.items())

    def _choose(self) -> Relayer | None:
        now = self.clock.monotonic()
        best: tuple[int, Relayer] | None = None
        for address, relayer in self._held.items():
            if self._full_until.get(address, 0.0) > now or not self.can_pay.get(address, True):
                continue
            load = self.in_flight(address)
            if load < self.cap and (best is None or load < best[0]):
                best = (load, relayer)
        return best[1] if best else None

    async def send(
        self, to: str | None, data: bytes, *, gas: int = 120_000, value: int = 0, valid_until: int | None = None
    ) -> str:
        """Send from the least-loaded account below its cap (see :meth:`Relayer.send`); wait up to
        ``wait`` seconds for room, then raise :class:`RelayerBusy` (nothing was sent)."""
        deadline = self.clock.monotonic() + self.wait
        while True:
            relayer = self._choose()
            if relayer is not None:
                address = relayer.address
                self._sending[address] = self._sending.get(address, 0) + 1
                try:
                    return await relayer.send(to, data, gas=gas, value=value, valid_until=valid_until)
                except RelayerBusy:
                    self._full_until[address] = self.clock.monotonic() + _FULL_FOR  # the node's limit: try another
                finally:
                    self._sending[address] -= 1
                    self.changed()
                continue
            now = self.clock.monotonic()
            if now >= deadline:
                held = len(self._held)
                raise RelayerBusy(
                    f"every relayer account of chain {self.chain_id} this process holds ({held}) "
                    f"has {self.cap} transactions in flight"
                    if held
                    else f"this process holds no relayer account of chain {self.chain_id} yet"
                )
            room = self._room
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(_RECHECK, deadline - now)):
                    await room.wait()

    # -- as a single relayer ------------------------------------------------------------------------

    def _any(self) -> Relayer:
        return next(iter(self._held.values()), None) or next(iter(self._draining.values()), self.reader)

    def _senders(self) -> list[Relayer]:
        """Every account of this pool that may have sent something: the held and draining ones, and
        the funding account (top-ups, and the ``upto`` settlements it sends as the facilitator)."""
        return [*self._held.values(), *self._draining.values(), self.reader]

    def _owner(self, tx_hash: str) -> Relayer:
        for relayer in self._senders():
            if relayer.knows(tx_hash):
                return relayer
        return self._any()

    async def simulate(self, to: str, data: bytes) -> None:
        await self._any().simulate(to, data)

    def simulate_soon(self, to: str, data: bytes) -> asyncio.Future[Any]:
        return self._any().simulate_soon(to, data)

    async def probe(self, *, timeout: float = 3.0) -> bool:
        return await self._any().probe(timeout=timeout)

    def sending(self, tx_hash: str) -> bool:
        return any(relayer.sending(tx_hash) for relayer in self._senders())

    async def wait_for_receipt(self, tx_hash: str, *, confirmations: int = 0, timeout: float = 60.0) -> TxReceipt:
        try:
            return await self._owner(tx_hash).wait_for_receipt(tx_hash, confirmations=confirmations, timeout=timeout)
        finally:
            self.changed()  # mined: its account's room back

    async def nonces(self) -> tuple[int, int]:
        """The held accounts' nonces on the node, summed: ``(mined, pending)``."""
        mined = pending = 0
        for relayer in list(self.relayers().values()) or [self.reader]:
            one, two = await relayer.nonces()
            mined, pending = mined + one, pending + two
        return mined, pending

    async def gas_cost(self, gas: int = 120_000) -> int:
        return await self._any().gas_cost(gas)

    async def aclose(self) -> None:
        for relayer in [*self._held.values(), *self._draining.values()]:
            await relayer.aclose()
        self._held.clear()
        self._draining.clear()
        await self.reader.aclose()
