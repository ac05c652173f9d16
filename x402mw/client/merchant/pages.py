"""Pages of list answers, and iteration over every item across pages.

``MerchantClient`` list methods answer a `Page`; ``AsyncMerchantClient`` list methods answer an
`AsyncPager`, which is awaited for the first `AsyncPage` or iterated directly::

    for intent in client.payment_intents.list(limit=100).auto_paging_iter():
        ...
    async for intent in async_client.payment_intents.list(limit=100).auto_paging_iter():
        ...
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator
from typing import Any, Generic, TypeVar

from x402mw.client.merchant.calls import Call, Listing, next_page_call

T = TypeVar("T")
F = TypeVar("F")

Fetch = Callable[[Call[Listing[T]]], Listing[T]]
AsyncFetch = Callable[[Call[Listing[T]]], Awaitable[Listing[T]]]


class _Listed(Generic[T, F]):
    """What a page holds, sync or async: the listing, the call that fetched it, and ``fetch`` (a
    `Fetch` or an `AsyncFetch`), which runs the call of the next page."""

    object = "list"

    def __init__(self, listing: Listing[T], call: Call[Listing[T]], fetch: F) -> None:
        self.data = listing.data
        self.has_more = listing.has_more
        self._listing = listing
        self._call = call
        self._fetch = fetch

    def __repr__(self) -> str:
        return f"{type(self).__name__}(data=<{len(self.data)} items>, has_more={self.has_more})"

    def _in_order(self) -> list[T]:
        return self.data[::-1] if "ending_before" in self._call.params else self.data


class Page(_Listed[T, Fetch[T]]):
    """One page of a list: ``data`` (newest first) and ``has_more``.

    `auto_paging_iter` yields every item of this page and of the pages after it, fetching each page
    when it is reached. With ``ending_before``, pages go towards newer objects and each page's items
    are yielded oldest first.
    """

    def next_page(self) -> Page[T] | None:
        """The next page, or None after the last one."""
        call = next_page_call(self._call, self._listing)
        return None if call is None else Page(self._fetch(call), call, self._fetch)

    def auto_paging_iter(self) -> Iterator[T]:
        page: Page[T] | None = self
        while page is not None:
            yield from page._in_order()
            page = page.next_page()


class AsyncPage(_Listed[T, AsyncFetch[T]]):
    """One page of a list, from `AsyncMerchantClient`: as `Page`, with awaitable `next_page` and an
    async `auto_paging_iter`."""

    async def next_page(self) -> AsyncPage[T] | None:
        """The next page, or None after the last one."""
        call = next_page_call(self._call, self._listing)
        return None if call is None else AsyncPage(await self._fetch(call), call, self._fetch)

    async def auto_paging_iter(self) -> AsyncIterator[T]:
        page: AsyncPage[T] | None = self
        while page is not None:
            for item in page._in_order():
                yield item
            page = await page.next_page()


class AsyncPager(Generic[T]):
    """What an async list method answers, before any request: ``await`` it for the first
    `AsyncPage`, or iterate every item with ``async for item in pager.auto_paging_iter()``.
    Each ``await`` fetches the page again."""

    def __init__(self, call: Call[Listing[T]], fetch: AsyncFetch[T]) -> None:
        self._call = call
        self._fetch = fetch

    def __await__(self) -> Generator[Any, None, AsyncPage[T]]:
        return self._first().__await__()

    async def _first(self) -> AsyncPage[T]:
        return AsyncPage(await self._fetch(self._call), self._call, self._fetch)

    async def auto_paging_iter(self) -> AsyncIterator[T]:
        page = await self._first()
        async for item in page.auto_paging_iter():
            yield item
