"""The checkout's static files (``{checkout_url_base}/static/``), with caching headers.

The hosted page links its script and stylesheet with ``?v=<digest of the file>`` (`asset_url`), so
those answers may be kept for a year: a changed file has a new URL. Anything fetched without it, such
as ``x402mw-checkout.js`` at its stable documented URL, is kept five minutes and then revalidated with
its ``ETag``, so a merchant's pages pick up a new release within minutes without a reload storm.
"""

from __future__ import annotations

import functools
from pathlib import Path

from x402mw.platform.http.static import StaticAssets, file_digest

__all__ = ["STATIC_DIR", "CheckoutAssets", "asset_digest"]

STATIC_DIR = Path(__file__).parent / "static"
REVALIDATE = "public, max-age=300"


@functools.cache
def asset_digest(name: str) -> str:
    """A short digest of the static file ``name``'s content: its cache-busting version."""
    return file_digest(STATIC_DIR / name)


class CheckoutAssets(StaticAssets):
    """The checkout's files: a versioned URL kept a year, any other five minutes."""

    def __init__(self) -> None:
        super().__init__(STATIC_DIR, unversioned=REVALIDATE)
