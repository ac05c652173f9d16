"""A small time-bounded cache for hot reads (agent endpoints on the settlement path).

Entries live ``ttl`` seconds; changes made through this process invalidate them at once, changes
made by another process are seen within ``ttl``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class TTLCache(Generic[K, V]):
    def __init__(self, ttl: float, *, max_entries: int = 10_000) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self._entries: dict[K, tuple[float, V]] = {}

    async def get(self, key: K, load: Callable[[], Awaitable[V]]) -> V:
        now = time.monotonic()
        found = self._entries.get(key)
        if found is not None and found[0] > now:
            return found[1]
        value = await load()
        if len(self._entries) >= self.max_entries:
            self._entries.clear()
        self._entries[key] = (now + self.ttl, value)
        return value

    def invalidate(self, key: K | None = None) -> None:
        """Forget one key, or everything."""
        if key is None:
            self._entries.clear()
        else:
            self._entries.pop(key, None)
