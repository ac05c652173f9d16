"""Tiny app factories for the tests of ``x402mw.platform.supervisor`` (imported by its worker processes)."""

from __future__ import annotations

import os

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


def pid_app() -> Starlette:
    async def pid(request: Request) -> JSONResponse:
        return JSONResponse({"pid": os.getpid()})

    return Starlette(routes=[Route("/", pid)])


def broken_app() -> Starlette:
    raise RuntimeError("this worker cannot start")
