"""The dashboard's static files (``/dashboard/static/``): linked with ``?v=<digest>``, kept a year."""

from __future__ import annotations

import functools
from pathlib import Path

from x402mw.platform.http.static import StaticAssets, file_digest

__all__ = ["DashboardAssets", "asset_digest"]

STATIC_DIR = Path(__file__).parent / "static"


@functools.cache
def asset_digest(name: str) -> str:
    return file_digest(STATIC_DIR / name)


class DashboardAssets(StaticAssets):
    def __init__(self) -> None:
        super().__init__(STATIC_DIR)
