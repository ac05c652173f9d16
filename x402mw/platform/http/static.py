"""Static files served with caching headers (the checkout's and the dashboard's).

A page links a file with ``?v=<digest of its content>`` (`file_digest`), so that answer may be kept
for a year: a changed file has a new URL. What a URL without it is kept for is each mount's choice.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from starlette.datastructures import QueryParams
from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

IMMUTABLE = "public, max-age=31536000, immutable"


def file_digest(path: Path) -> str:
    """A short digest of a file's content: its cache-busting version."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


class StaticAssets(StaticFiles):
    """`StaticFiles` (which answers ``ETag`` and ``Last-Modified``, and 304 to a matching
    ``If-None-Match``) with ``Cache-Control``: a year for a versioned URL, ``unversioned`` otherwise;
    and ``nosniff``. The files of ``more`` directories are served too (the first that has a name wins)."""

    def __init__(self, directory: Path, *more: Path, unversioned: str = IMMUTABLE) -> None:
        super().__init__(directory=directory)
        self.all_directories = [*self.all_directories, *more]
        self.unversioned = unversioned

    def file_response(
        self, full_path: str | os.PathLike[str], stat_result: os.stat_result, scope: Scope, status_code: int = 200
    ) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        versioned = "v" in QueryParams(scope.get("query_string", b""))
        response.headers["Cache-Control"] = IMMUTABLE if versioned else self.unversioned
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response
