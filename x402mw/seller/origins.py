"""Where a seller's published URLs point: its configured public origin, not a request's ``Host``.

The URLs a seller publishes (its 402's ``resource.url``, the items of its ``/.well-known/x402``,
the resource the platform records and its catalogue lists) are built from the request's URL, whose
scheme and host come from the request itself: anyone can send ``Host: evil.test``. With an origin
configured (``origin="https://api.example.com"`` on every adapter) the gate publishes every URL
under it (`published_url`), whatever ``Host`` a request carried; without one, the request's own
origin is used, and the ``/.well-known/x402`` answer, which caches could share, says it varies by
``Host`` and is kept from shared caches.
"""

from __future__ import annotations

from urllib.parse import urlsplit


def public_origin(value: object) -> str | None:
    """``value`` as an origin (``https://api.example.com``; a port allowed, no path, query or user
    info), lower-cased; None when it is not one."""
    if not isinstance(value, str) or not value.isascii():
        return None
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
        return None
    if parts.query or parts.fragment or "@" in parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc.lower()}"


def origin_of(url: str) -> str:
    """The scheme and host of an absolute URL."""
    start = url.find("//")
    if start < 0:
        return url
    end = url.find("/", start + 2)
    return url if end < 0 else url[:end]


def published_url(origin: str, url: str) -> str:
    """``url`` (a request's absolute http(s) URL) under ``origin``: its path and query kept, its
    scheme and host replaced. Any other URL (an MCP tool's ``mcp://tool/<name>``) is kept."""
    if not url.startswith(("http://", "https://")):
        return url
    end = url.find("/", url.find("//") + 2)
    return origin if end < 0 else origin + url[end:]
