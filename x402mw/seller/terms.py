"""Each endpoint's terms as the platform states them, cached and kept current.

The gate fetches an endpoint's terms on its first request, then its background work revalidates
them once they are `TERMS_REFRESH_SECONDS` old, with a conditional request (their ETag, which the
platform answers ``304`` while they are unchanged). A revalidation that fails keeps the old terms.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator
from typing import Any

from x402mw.errors import PlatformError, PriceError
from x402mw.seller.config import EndpointTerms
from x402mw.seller.decisions import PlatformCall, reply_error

logger = logging.getLogger("x402mw.seller")
TERMS_REFRESH_SECONDS = 1.0
"""How old an endpoint's terms may get before the background work revalidates them (a conditional
request, ``304`` while unchanged): with the work's 0.25 s rounds, a change made on the platform is
in the challenges issued from about 1.25 s later, within the 2 s the documentation states."""


class TermsCache:
    """The terms of the endpoints a gate has served, when each was last known current, and its ETag."""

    def __init__(self, *, refresh_seconds: float, clock: Callable[[], float]) -> None:
        self.refresh_seconds = refresh_seconds
        self._clock = clock
        self._terms: dict[str, tuple[EndpointTerms, float, str | None]] = {}
        self._stale: set[str] = set()  # endpoints whose last revalidation failed (warned once)

    def get(self, endpoint_id: str) -> EndpointTerms | None:
        known = self._terms.get(endpoint_id)
        return None if known is None else known[0]

    def fetch(self, endpoint_id: str) -> Generator[PlatformCall, Any, EndpointTerms]:
        """Fetch (and cache) an endpoint's terms; terms already cached are revalidated with their
        ETag (``If-None-Match``)."""
        known = self._terms.get(endpoint_id)
        etag = known[2] if known is not None else None
        headers = (("If-None-Match", etag),) if etag else ()
        reply = yield PlatformCall("GET", f"/agent/endpoints/{endpoint_id}", headers=headers)
        now = self._clock()
        if reply.status == 304 and known is not None:
            self._terms[endpoint_id] = (known[0], now, etag)
            return known[0]
        if reply.status != 200 or not isinstance(reply.data, dict) or "endpoint" not in reply.data:
            raise reply_error(reply)
        try:
            terms = EndpointTerms.from_api(reply.data["endpoint"])
        except PriceError as exc:
            raise PlatformError(str(exc), status=502) from None
        self._terms[endpoint_id] = (terms, now, reply.etag)
        return terms

    def refresh(self) -> Generator[PlatformCall, Any, None]:
        """Revalidate the terms that are `refresh_seconds` old."""
        now = self._clock()
        for endpoint_id, (terms, fetched_at, etag) in list(self._terms.items()):
            if now - fetched_at >= self.refresh_seconds:
                try:
                    yield from self.fetch(endpoint_id)
                except PlatformError as exc:
                    # Keep the old terms, and try again a refresh interval later; warn once a spell.
                    self._terms[endpoint_id] = (terms, now, etag)
                    if endpoint_id not in self._stale:
                        self._stale.add(endpoint_id)
                        logger.warning("could not refresh endpoint %s (keeping the old terms): %s", endpoint_id, exc)
                else:
                    if endpoint_id in self._stale:
                        self._stale.discard(endpoint_id)
                        logger.info("endpoint %s refreshed again", endpoint_id)

    @property
    def due(self) -> bool:
        """Whether some terms are old enough to be revalidated."""
        now = self._clock()
        return any(now - at >= self.refresh_seconds for _, at, _ in self._terms.values())
