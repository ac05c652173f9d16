"""Several RPC providers of one chain behind one :class:`~x402mw.platform.chain.rpc.JsonRpc`.

:class:`FailoverJsonRpc` keeps each provider *in* or *out*:

- a read goes to the first provider in; should it not answer within ``hedge_after`` seconds, the
  next one is asked too, and the first answer wins. A provider that fails to answer (connection
  refused, timeout, HTTP error) is taken out, and the read goes on to the next at once;
- a signed transaction (``eth_sendRawTransaction``) goes to every provider in, at once: it is the
  same transaction by hash wherever it lands, so a provider's "already known" is a success, and
  the send succeeds when any provider took it. A refusal is raised only when no provider took it;
- every ``check_interval`` seconds each provider is asked for its head: one that does not answer,
  or whose head lags the best by more than ``max_lag`` blocks, is out; one out that answers and
  has caught up is in again.

When every provider is out, calls go to them all the same, in order: one of them may be back, and
the caller gets the error of the last one otherwise. A JSON-RPC error object is an answer, not a
fault of the provider (the node refused the call).

>>> rpc = FailoverJsonRpc([HttpJsonRpc(url_a), HttpJsonRpc(url_b)], network="eip155:8453")  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import httpx

from x402mw.evm.keccak import keccak256
from x402mw.platform.chain.rpc import HttpJsonRpc, RpcError
from x402mw.platform.metrics import RPC_PROVIDER_UP

__all__ = ["CHECK_INTERVAL", "HEDGE_AFTER", "MAX_LAG", "FailoverJsonRpc"]

logger = logging.getLogger(__name__)

HEDGE_AFTER = 0.5
"""Seconds a read waits for its provider before the next one is asked too."""
CHECK_INTERVAL = 2.0
"""Seconds between two looks at every provider's head."""
MAX_LAG = 3
"""Blocks a provider's head may lag the best one's before it is taken out."""

_FAULTS = (httpx.HTTPError, OSError, TimeoutError)
_KNOWN = ("already known", "known transaction", "already imported")
T = TypeVar("T")


class _Provider:
    def __init__(self, rpc: HttpJsonRpc, name: str, network: str) -> None:
        self.rpc = rpc
        self.name = name
        self.up = True
        self.head = -1
        self._gauge = RPC_PROVIDER_UP.labels(network, name)
        self._gauge.set(1)

    def mark(self, up: bool, why: object = None) -> None:
        if up != self.up:
            if up:
                logger.warning("RPC provider %s is back in", self.name)
            else:
                logger.warning("RPC provider %s taken out: %s", self.name, why)
        self.up = up
        self._gauge.set(1 if up else 0)


class FailoverJsonRpc:
    """One chain's providers as one :class:`JsonRpc` (see the module's docstring). ``names`` label
    the providers in logs and metrics (never a URL: it may hold a secret)."""

    def __init__(
        self,
        providers: Sequence[HttpJsonRpc],
        *,
        network: str,
        names: Sequence[str] | None = None,
        hedge_after: float = HEDGE_AFTER,
        check_interval: float = CHECK_INTERVAL,
        max_lag: int = MAX_LAG,
    ) -> None:
        if not providers:
            raise ValueError("FailoverJsonRpc needs at least one provider")
        names = names or [f"provider-{n}" for n in range(len(providers))]
        self._providers = [_Provider(rpc, name, network) for rpc, name in zip(providers, names, strict=True)]
        self.hedge_after = hedge_after
        self.check_interval = check_interval
        self.max_lag = max_lag
        self._checker: asyncio.Task[None] | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"FailoverJsonRpc({[p.name for p in self._providers]!r})"

    @property
    def up(self) -> dict[str, bool]:
        """Each provider's name, and whether it is in."""
        return {p.name: p.up for p in self._providers}

    async def request(self, method: str, params: list[Any] | None = None) -> Any:
        params = params or []
        if method == "eth_sendRawTransaction":
            return await self._broadcast_one(params)
        return await self._read(lambda rpc: rpc.request(method, params))

    async def batch(self, calls: list[tuple[str, list[Any]]]) -> list[Any]:
        if not calls:
            return []
        if any(method == "eth_sendRawTransaction" for method, _ in calls):
            return await self._broadcast_batch(calls)
        results: list[Any] = await self._read(lambda rpc: rpc.batch(calls))
        return results

    async def check(self) -> None:
        """Ask every provider for its head now, and take out or put back in by the answers."""
        heads = await asyncio.gather(
            *(p.rpc.request("eth_blockNumber", []) for p in self._providers), return_exceptions=True
        )
        for provider, head in zip(self._providers, heads, strict=True):
            provider.head = int(head, 16) if isinstance(head, str) else -1
            if not isinstance(head, str):
                provider.mark(False, head)
        best = max(p.head for p in self._providers)
        for provider in self._providers:
            if provider.head >= 0:
                lagging = best - provider.head > self.max_lag
                provider.mark(not lagging, f"its head {provider.head} lags {best}" if lagging else None)

    # -- reads --------------------------------------------------------------------------------------

    def _order(self) -> list[_Provider]:
        self._ensure_checker()
        return [p for p in self._providers if p.up] + [p for p in self._providers if not p.up]

    async def _read(self, call: Any) -> Any:
        order = self._order()
        running: dict[asyncio.Task[Any], _Provider] = {}
        last: BaseException | None = None
        try:
            while order or running:
                if order and (not running or len(running) < 2):
                    provider = order.pop(0)
                    running[asyncio.ensure_future(call(provider.rpc))] = provider
                timeout = self.hedge_after if order and len(running) < 2 else None
                done, _ = await asyncio.wait(running, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    provider = running.pop(task)
                    error = task.exception()
                    if error is None or isinstance(error, RpcError):
                        return task.result()
                    if not isinstance(error, _FAULTS):
                        raise error
                    provider.mark(False, error)
                    last = error
            assert last is not None
            raise last
        finally:
            for task in running:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task

    # -- signed transactions ------------------------------------------------------------------------

    def _targets(self) -> list[_Provider]:
        order = self._order()
        up = [p for p in order if p.up]
        return up or order

    async def _broadcast_one(self, params: list[Any]) -> Any:
        targets = self._targets()
        answers = await asyncio.gather(
            *(p.rpc.request("eth_sendRawTransaction", params) for p in targets), return_exceptions=True
        )

        def known(refusal: RpcError) -> str | None:  # a node that has the transaction already: its hash
            if any(marker in refusal.message.lower() for marker in _KNOWN):
                return "0x" + keccak256(bytes.fromhex(str(params[0])[2:])).hex()
            return None

        return _first_answer(targets, answers, known)

    async def _broadcast_batch(self, calls: list[tuple[str, list[Any]]]) -> list[Any]:
        # The first provider that took the whole batch answers it; else the first refusal is raised
        # (the caller then learns transaction by transaction which ones the nodes have).
        targets = self._targets()
        answers = await asyncio.gather(*(p.rpc.batch(calls) for p in targets), return_exceptions=True)
        return _first_answer(targets, answers)

    # -- health -------------------------------------------------------------------------------------

    def _ensure_checker(self) -> None:
        if self._closed or (self._checker is not None and not self._checker.done()):
            return
        with contextlib.suppress(RuntimeError):  # no running loop: the next call in one starts it
            self._checker = asyncio.get_running_loop().create_task(self._check_forever(), name="x402mw-rpc-providers")

    async def _check_forever(self) -> None:
        next_at = time.monotonic()
        while not self._closed:
            next_at += self.check_interval
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            try:
                await self.check()
            except Exception:
                logger.exception("checking the RPC providers failed")

    async def aclose(self) -> None:
        self._closed = True
        checker, self._checker = self._checker, None
        if checker is not None:
            checker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await checker
        for provider in self._providers:
            await provider.rpc.aclose()


def _first_answer(
    targets: list[_Provider],
    answers: Sequence[T | BaseException],
    known: Callable[[RpcError], T | None] = lambda refusal: None,
) -> T:
    """The first answer of a broadcast to ``targets`` (in their order), or what ``known`` makes of a
    refusal (None: none); else the first refusal is raised, else the first fault (its provider is
    marked down). An unexpected error is raised as it comes."""
    refusal: RpcError | None = None
    fault: BaseException | None = None
    for provider, answer in zip(targets, answers, strict=True):
        if not isinstance(answer, BaseException):
            return answer
        if isinstance(answer, RpcError):
            accepted = known(answer)
            if accepted is not None:
                return accepted
            refusal = refusal or answer
        elif isinstance(answer, _FAULTS):
            provider.mark(False, answer)
            fault = fault or answer
        else:
            raise answer
    if refusal is not None:
        raise refusal
    assert fault is not None
    raise fault
