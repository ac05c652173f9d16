"""The relayer's nonces, kept locally (`NonceBook`) so that many transactions can be in flight at
once without a round trip to the node per send.

A nonce is *allocated* to a send, is *broadcasting* while its transaction is on its way to the node,
and is then *pending* (the relayer's submissions, which the book reads through ``pending``) until
it is seen mined. A send the node refused gives its nonce back (`NonceBook.release`): the next
send takes it again, and should later nonces be out already the relayer fills the gap if no send
comes soon (`NonceBook.next_unfilled`). The book starts from, and returns to, the node's pending nonce
(`NonceBook.resync`) whenever it may have drifted (``stale``).
"""

from __future__ import annotations

import heapq
from collections.abc import Container


class NonceBook:
    def __init__(self, pending: Container[int]) -> None:
        self._pending = pending  # nonces of transactions sent and not yet seen mined
        self.next: int | None = None  # the next nonce never handed out (None: not read from the node yet)
        self.broadcasting: set[int] = set()  # nonces whose transaction is on its way to the node
        self.stale = False  # the node may know better (a send was cancelled or refused mid-way)
        self._released: list[int] = []  # nonces handed out but never sent (a heap)

    @property
    def ready(self) -> bool:
        """Whether sends may allocate without reading the node's pending nonce first."""
        return self.next is not None and not self.stale

    def resync(self, pending: int) -> None:
        """Start again from the node's pending nonce."""
        self.next = pending
        self._released.clear()
        self.stale = False

    def catch_up(self, pending: int) -> None:
        """The node's pending nonce is ``pending``: nonces below it were taken (by another process of
        this account) and are not handed out again."""
        if self.next is not None and pending > self.next:
            self.next = pending

    def taken(self, nonce: int) -> bool:
        return nonce in self.broadcasting or nonce in self._pending

    def allocate(self) -> int:
        """The lowest nonce free to send with: one given back, else the next."""
        assert self.next is not None
        while self._released:
            nonce = heapq.heappop(self._released)
            if nonce < self.next and not self.taken(nonce):
                return nonce
        nonce = self.next
        while self.taken(nonce):
            nonce += 1
        self.next = nonce + 1
        return nonce

    def release(self, nonce: int) -> bool:
        """Give back a nonce whose transaction was never sent; True when later nonces are out, so
        that it is a gap to fill should no send take it soon."""
        if self.next is not None and nonce == self.next - 1:
            self.next = nonce
            return False
        heapq.heappush(self._released, nonce)
        return True

    def next_unfilled(self) -> int | None:
        """The lowest nonce given back and still free (taken off the book: the caller fills it), or
        None. Asked once per fill, so that what changed during the last fill (a resync, a send taking
        a nonce) counts."""
        while self._released and self.next is not None:
            nonce = heapq.heappop(self._released)
            if nonce < self.next and not self.taken(nonce):
                return nonce
        return None
