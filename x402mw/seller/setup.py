"""Building a gate from a seller's configuration, shared by every adapter: all problems at once."""

from __future__ import annotations

import inspect
from collections.abc import Mapping

from x402mw.errors import ConfigurationError
from x402mw.seller.config import PaidRoute
from x402mw.seller.gate import PaymentGate
from x402mw.seller.routes import RouteTable

WELL_KNOWN_PATHS = frozenset({"/.well-known/x402", "/.well-known/x402.json"})
"""Where a seller lists its paid routes (the x402 well-known discovery draft names the second)."""


def is_well_known(method: str, path: str) -> bool:
    """Whether a request is for the seller's ``/.well-known/x402`` manifest (``GET`` or ``HEAD``)."""
    return path in WELL_KNOWN_PATHS and method in ("GET", "HEAD")


ASYNC_AMOUNT_PROBLEM = (
    "the amount callback is an async function; this framework runs synchronously, give a plain function"
)


def is_async_callable(func: object) -> bool:
    """True for ``async def`` functions and objects whose ``__call__`` is one."""
    return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(type(func).__call__)


def build_gate(
    *,
    api_key: object,
    platform_url: object,
    routes: object,
    settle_timeout: object,
    refuse_async: bool,
    paywall: object = None,
    origin: object = None,
) -> tuple[PaymentGate, RouteTable]:
    """Validate a seller's configuration and build its gate and route table.

    ``origin`` is the seller's public origin (``https://api.example.com``): the URLs it publishes
    are under it, whatever ``Host`` a request carries (see `x402mw.seller.origins`).
    Raises `ConfigurationError` listing every problem. With ``refuse_async``, amount callbacks
    that are coroutine functions are refused: a sync framework cannot await them.
    """
    problems: list[str] = []
    if isinstance(settle_timeout, bool) or not isinstance(settle_timeout, int | float):
        problems.append(f"settle_timeout must be a number of seconds, not {settle_timeout!r}")
        settle_timeout = 30.0
    table = RouteTable({})
    if routes is not None and not isinstance(routes, Mapping):
        problems.append('routes must be a mapping such as {"GET /weather": "<endpoint id>"}')
    elif routes is not None:
        try:
            table = RouteTable(routes)
        except ConfigurationError as exc:
            problems.extend(exc.problems)
        if refuse_async:
            problems.extend(
                f"route {key!r}: {ASYNC_AMOUNT_PROBLEM}"
                for key, value in routes.items()
                if isinstance(value, PaidRoute) and is_async_callable(value.amount)
            )
    try:
        gate = PaymentGate(
            api_key=api_key if isinstance(api_key, str) else "",
            platform_url=platform_url if isinstance(platform_url, str) else "",
            settle_timeout=float(settle_timeout),
            paywall=paywall,  # type: ignore[arg-type]  # checked by the gate
            origin=origin,  # type: ignore[arg-type]  # checked by the gate
        )
    except ConfigurationError as exc:
        problems = exc.problems + problems
    if problems:
        raise ConfigurationError(problems)
    return gate, table
