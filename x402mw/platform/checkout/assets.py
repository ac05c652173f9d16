"""The checkout's static files (``{checkout_url_base}/static/``), with caching headers.

The hosted page links its script and stylesheet with ``?v=<digest of the file>`` (`asset_url`), so
those answers may be kept for a year: a changed file has a new URL. Anything fetched without it, such
as ``x402mw-checkout.js`` at its stable documented URL, is kept five minutes and then revalidated with
its ``ETag``, so a merchant's pages pick up a new release within minutes without a reload storm.
"""

from __future__ import annotations

import functools
from pathlib import Path

from x402mw.page_assets import STATIC_DIR as SHARED_DIR
from x402mw.platform.http.static import StaticAssets, file_digest

STATIC_DIR = Path(__file__).parent / "static"
"""The checkout's own files; those it shares with the seller's paywall (``wallet.js``,
``checkout.css``) are in `x402mw.page_assets`, served from the same URLs."""
REVALIDATE = "public, max-age=300"


@functools.cache
def asset_digest(name: str) -> str:
    """A short digest of the static file ``name``'s content: its cache-busting version."""
    own = STATIC_DIR / name
    return file_digest(own if own.exists() else SHARED_DIR / name)


class CheckoutAssets(StaticAssets):
    """The checkout's files: a versioned URL kept a year, any other five minutes."""

    def __init__(self) -> None:
        super().__init__(STATIC_DIR, SHARED_DIR, unversioned=REVALIDATE)
