"""The queue of issued challenges waiting to be registered with the platform.

A 402 is issued locally (no network call); the platform learns of it in background batches, so that
the payment made on it is recognised. A paid request's settlement call carries its challenge, so it
is taken off the queue then, and put back if that call was not answered.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Generator
from json.encoder import encode_basestring as _json_str  # type: ignore[attr-defined]
from typing import Any

from x402mw.errors import PlatformError
from x402mw.seller.decisions import PlatformCall, reply_error

logger = logging.getLogger("x402mw.seller")
_ISSUED_KEPT = 100_000  # challenges kept for registration while the platform cannot be reached
_REGISTER_BATCH = 500  # challenges registered per call
_REGISTER_ROUND = 20_000  # challenges registered per background round at most (80,000/s at 4 rounds/s)

Challenge = tuple[Any, ...]
"""An issued challenge: (id, endpoint id, network, asset, pay-to, amount, resource, expires at)."""


class ChallengeQueue:
    """Issued challenges not registered yet, oldest first; safe to share between threads."""

    def __init__(self) -> None:
        # An OrderedDict, whose front can be taken in O(1) (a dict's front, after many deletions, is
        # found by scanning past them).
        self._issued: OrderedDict[str, Challenge] = OrderedDict()
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self._issued)

    def issue(self, challenge: Challenge) -> None:
        with self._lock:
            if len(self._issued) >= _ISSUED_KEPT:  # the platform has been unreachable for long: drop the oldest
                self._issued.popitem(last=False)
            self._issued[challenge[0]] = challenge

    def withdraw(self, challenge_id: str) -> Challenge | None:
        """Take a challenge off the queue (a paid request's settlement registers it)."""
        with self._lock:
            return self._issued.pop(challenge_id, None)

    def requeue(self, *challenges: Challenge | None) -> None:
        """Put challenges back at the front of the queue: their registration did not go through."""
        back = [c for c in challenges if c is not None]
        if back:
            with self._lock:
                for challenge in reversed(back):
                    self._issued[challenge[0]] = challenge
                    self._issued.move_to_end(challenge[0], last=False)

    def register(self) -> Generator[PlatformCall, Any, None]:
        """Register the issued challenges: all of them, a batch a call, up to `_REGISTER_ROUND`."""
        for _ in range(_REGISTER_ROUND // _REGISTER_BATCH):
            if not (yield from self._register_batch()):
                break

    def _register_batch(self) -> Generator[PlatformCall, Any, bool]:
        """Register the oldest batch; whether a full batch went through (so that more may be waiting)."""
        with self._lock:
            batch = [self._issued.popitem(last=False)[1] for _ in range(min(len(self._issued), _REGISTER_BATCH))]
        if not batch:
            return False
        body = f'{{"challenges":[{",".join(map(_challenge_json, batch))}]}}'.encode()
        try:
            reply = yield PlatformCall("POST", "/agent/challenges/batch", encoded=body)
            if reply.status != 200:
                raise reply_error(reply)
        except PlatformError as exc:
            logger.warning("could not register %d challenges (will retry): %s", len(batch), exc)
            self.requeue(*batch)
            return False
        return len(batch) == _REGISTER_BATCH


def _challenge_json(challenge: Challenge) -> str:
    """An issued challenge as the JSON its registration sends (written out: this is every 402's
    cost, a batch at a time; the members a route's challenges share are written once)."""
    challenge_id, endpoint_id, network, asset, pay_to, amount, resource, expires = challenge
    terms = (endpoint_id, network, asset, pay_to)
    shared = _SHARED_JSON.get(terms)
    if shared is None:
        if len(_SHARED_JSON) >= 1024:
            _SHARED_JSON.clear()
        shared = _SHARED_JSON[terms] = (
            f'"endpointId":{_json_str(endpoint_id)},"network":{_json_str(network)},'
            f'"asset":{_json_str(asset)},"payTo":{_json_str(pay_to)}'
        )
    return (
        f'{{"challengeId":{_json_str(challenge_id)},{shared},"amount":"{int(amount)}",'
        f'"resource":{_json_str(resource)},"expiresAt":{int(expires)}}}'
    )


_SHARED_JSON: dict[tuple[Any, ...], str] = {}
