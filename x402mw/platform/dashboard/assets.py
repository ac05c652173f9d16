"""The dashboard's static files (``/dashboard/static/``): linked with ``?v=<digest>``, kept a year."""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

__all__ = ["DashboardAssets", "asset_digest"]

STATIC_DIR = Path(__file__).parent / "static"


@functools.cache
def asset_digest(name: str) -> str:
    return hashlib.sha256((STATIC_DIR / name).read_bytes()).hexdigest()[:16]


class DashboardAssets(StaticFiles):
    def __init__(self) -> None:
        super().__init__(directory=STATIC_DIR)

    def file_response(
        self, full_path: str | os.PathLike[str], stat_result: os.stat_result, scope: Scope, status_code: int = 200
    ) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        response.headers["Cache-Control"] = "public, max-age=31536000, immutable"
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response
