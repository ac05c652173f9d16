"""The running platform a request is served by, typed: the one way handlers and middleware reach it.

The app keeps it in ``app.state.platform`` (`x402mw.platform.app.create_app`), which Starlette
types as anything; `platform_of` and `scope_platform` give it its type, so that the type checker
sees every service a handler uses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.types import Scope

if TYPE_CHECKING:
    from x402mw.platform.runtime import Platform


def platform_of(request: Request) -> Platform:
    """The platform serving ``request``."""
    platform: Platform = request.app.state.platform
    return platform


def scope_platform(scope: Scope) -> Platform:
    """The platform serving the request of ``scope`` (for ASGI middleware, below the app)."""
    platform: Platform = scope["app"].state.platform
    return platform
