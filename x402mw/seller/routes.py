"""Route tables shared by the adapters: ``{"GET /weather": PaidRoute(...), "/items/{id}": "ep_..."}``."""

from __future__ import annotations

import re
from collections.abc import Mapping

from x402mw.errors import ConfigurationError
from x402mw.seller.config import PaidRoute

_PARAM = re.compile(r"\{[A-Za-z_][A-Za-z0-9_]*(?::path)?\}")


def as_route(value: PaidRoute | str) -> PaidRoute:
    return value if isinstance(value, PaidRoute) else PaidRoute(endpoint=value)


class RouteTable:
    """Maps (method, path) to a `PaidRoute`. Keys are ``"METHOD /path"`` or ``"/path"`` (any method);
    ``{name}`` matches one path segment, ``{name:path}`` the rest of the path."""

    def __init__(self, routes: Mapping[str, PaidRoute | str] | None) -> None:
        self._exact: dict[tuple[str, str], PaidRoute] = {}
        self._patterns: list[tuple[str, re.Pattern[str], PaidRoute]] = []
        self._entries: list[tuple[str, str, PaidRoute]] = []
        problems = []
        for key, value in (routes or {}).items():
            method, _, path = key.strip().rpartition(" ")
            method = method.strip().upper() or "*"
            if not path.startswith("/"):
                problems.append(f"route {key!r} must look like 'GET /path' or '/path'")
                continue
            try:
                route = as_route(value)
            except ConfigurationError as exc:
                problems.extend(f"route {key!r}: {p}" for p in exc.problems)
                continue
            self._entries.append((method, path, route))
            if _PARAM.search(path):
                regex = (
                    "^"
                    + _PARAM.sub(
                        lambda m: "(.+)" if m.group(0).endswith(":path}") else "([^/]+)",
                        re.escape(path).replace(r"\{", "{").replace(r"\}", "}"),
                    )
                    + "$"
                )
                self._patterns.append((method, re.compile(regex), route))
            else:
                self._exact[(method, path)] = route
        if problems:
            raise ConfigurationError(problems)

    def __bool__(self) -> bool:
        return bool(self._exact or self._patterns)

    def entries(self) -> list[tuple[str, str, PaidRoute]]:
        """Every route as ``(method or "*", path template, route)``, in the order given."""
        return list(self._entries)

    def match(self, method: str, path: str) -> PaidRoute | None:
        found = self._exact.get((method, path)) or self._exact.get(("*", path))
        if found is not None:
            return found
        for wanted, pattern, route in self._patterns:
            if (wanted == "*" or wanted == method) and pattern.match(path):
                return route
        return None
