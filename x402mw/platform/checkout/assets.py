"""The checkout's static files (``{checkout_url_base}/static/``), with caching headers.

The hosted page links its script and stylesheet with ``?v=<digest of the file>`` (`asset_url`), so
those answers may be kept for a year: a changed file has a new URL. Anything fetched without it, such
as ``x402mw-checkout.js`` at its stable documented URL, is kept five minutes and then revalidated with
its ``ETag``, so a merchant's pages pick up a new release within minutes without a reload storm.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

from starlette.datastructures import QueryParams
from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

__all__ = ["STATIC_DIR", "CheckoutAssets", "asset_digest"]

STATIC_DIR = Path(__file__).parent / "static"
IMMUTABLE = "public, max-age=31536000, immutable"
REVALIDATE = "public, max-age=300"


@functools.cache
def asset_digest(name: str) -> str:
    """A short digest of the static file ``name``'s content: its cache-busting version."""
    return hashlib.sha256((STATIC_DIR / name).read_bytes()).hexdigest()[:16]


class CheckoutAssets(StaticFiles):
    """`StaticFiles` (which answers ``ETag`` and ``Last-Modified``, and 304 to a matching
    ``If-None-Match``) with ``Cache-Control``: a year for a versioned URL, five minutes otherwise."""

    def __init__(self) -> None:
        super().__init__(directory=STATIC_DIR)

    def file_response(
        self, full_path: str | os.PathLike[str], stat_result: os.stat_result, scope: Scope, status_code: int = 200
    ) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        versioned = "v" in QueryParams(scope.get("query_string", b""))
        response.headers["Cache-Control"] = IMMUTABLE if versioned else REVALIDATE
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response
