"""The gateway's configuration file (TOML): the upstream, and the routes it sells.

::

    upstream = "http://127.0.0.1:9000"      # --upstream wins over it
    payout_address = "0x..."                # where endpoints the gateway creates are paid out
    coin = "USDC"                           # defaults for the routes below
    network = "eip155:84532"

    [[routes]]
    method = "GET"                          # or absent: any method
    path = "/weather/{city}"                # {name}: one segment, {name:path}: the rest
    price = "0.01"                          # a decimal of the coin, never a float

    [[routes]]
    method = "POST"
    path = "/generate"
    scheme = "upto"                         # metered: at most `price`, charged what the upstream reports
    usage_header = "X-Usage"                # a count of units the upstream sets on its response
    unit_price = "0.0001"                   # what one unit costs (absent: the header is a decimal of the coin)

Every problem is collected into one `ConfigurationError`; nothing is checked against the platform
here (that is `x402mw.gateway.endpoints`).
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

from x402mw.errors import ConfigurationError, PriceError
from x402mw.protocol.networks import get_network, parse_caip2
from x402mw.protocol.prices import format_amount, parse_decimal, to_atomic
from x402mw.seller import Discovery, SignIn

COINS = ("USDC", "EURC")
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
DEFAULT_TIMEOUT = 30.0
DEFAULT_MAX_BODY = 10 * 1024 * 1024
_SEGMENT_PARAM = re.compile(r"^\{[A-Za-z_][A-Za-z0-9_]*\}$")
_REST_PARAM = re.compile(r"^\{[A-Za-z_][A-Za-z0-9_]*:path\}$")
_HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$")
_ADDRESS = re.compile(r"^0x[0-9a-fA-F]{40}$")
_ROUTE_KEYS = frozenset(
    {
        "method",
        "path",
        "price",
        "coin",
        "network",
        "scheme",
        "usage_header",
        "unit_price",
        "unauthorized_to_402",
        "description",
        "mime_type",
        "endpoint",
        "upstream_authorization",
        "discovery",
        "sign_in",
    }
)
_DISCOVERY_KEYS = frozenset({"query", "query_schema", "body", "body_schema", "body_type", "output", "output_schema"})
_TOP_KEYS = frozenset(
    {
        "upstream",
        "payout_address",
        "coin",
        "network",
        "origin",
        "timeout",
        "max_request_body",
        "routes",
        "openapi",
        "publish",
    }
)

Scheme = Literal["exact", "upto"]


@dataclass(frozen=True, slots=True)
class GatewayRoute:
    """One priced route. ``amount`` is ``price`` in the coin's atomic units (the ceiling of an
    ``upto`` route); ``unit_atomic`` what one unit of ``usage_header`` costs (None: the header is a
    decimal of the coin)."""

    method: str  # "*" for any
    path: str
    price: Decimal
    amount: int
    coin: str
    network: str  # CAIP-2
    scheme: Scheme
    decimals: int = 6
    usage_header: str | None = None
    unit_atomic: int | None = None
    unauthorized_to_402: bool = False
    description: str | None = None
    mime_type: str | None = None
    endpoint: str | None = None
    upstream_authorization: str | None = field(default=None, repr=False)  # sent upstream with a paid request
    discovery: Discovery | None = None
    sign_in: SignIn | None = None

    @property
    def key(self) -> str:
        """The route as `x402mw.seller.RouteTable` names it: ``"GET /path"`` or ``"/path"``."""
        return self.path if self.method == "*" else f"{self.method} {self.path}"

    @property
    def name(self) -> str:
        """The name of the agent endpoint the gateway keeps for this route."""
        return f"gateway {self.method if self.method != '*' else 'ANY'} {self.path}"

    def usage(self, header: str | None) -> int:
        """What a response with usage header value ``header`` costs, in atomic units (0 when it is
        absent); `PriceError` for a value that is not a non-negative decimal."""
        if header is None or not header.strip():
            return 0
        value = parse_decimal(header.strip(), field=self.usage_header or "usage")
        if value < 0:
            raise PriceError(f"usage {header[:40]!r} is negative")
        total = value * self.unit_atomic if self.unit_atomic is not None else value.scaleb(self.decimals)
        if total != total.to_integral_value():
            raise PriceError(f"usage {header[:40]!r} is not a whole number of atomic units")
        return int(total)


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    upstream: str | None
    routes: tuple[GatewayRoute, ...]
    payout_address: str | None = None
    origin: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    max_request_body: int = DEFAULT_MAX_BODY
    openapi: str | None = None  # the upstream's OpenAPI document's path, read for prices
    publish: bool = False  # serve /openapi.json and /llms.txt naming the paid routes


def read_toml(path: str | Path) -> dict[str, Any]:
    """A configuration file's settings, unchecked; `ConfigurationError` when it cannot be read."""
    try:
        with open(path, "rb") as file:
            return tomllib.load(file)
    except OSError as exc:
        raise ConfigurationError(f"cannot read {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"{path} is not valid TOML: {exc}") from None


def load_config(path: str | Path) -> GatewayConfig:
    """Read and check a configuration file; `ConfigurationError` listing every problem."""
    return parse_config(read_toml(path))


def parse_config(data: dict[str, Any]) -> GatewayConfig:
    """Check a configuration read from TOML (see the module's docstring for its shape)."""
    problems: list[str] = [f"unknown setting {key!r}" for key in data if key not in _TOP_KEYS]
    upstream = data.get("upstream")
    if upstream is not None and not (isinstance(upstream, str) and upstream.startswith(("http://", "https://"))):
        problems.append("upstream must be an http(s) URL")
        upstream = None
    payout = data.get("payout_address")
    if payout is not None and not (isinstance(payout, str) and _ADDRESS.match(payout)):
        problems.append("payout_address must be an address (0x and 40 hex digits)")
        payout = None
    origin = data.get("origin")
    if origin is not None and not (isinstance(origin, str) and origin.startswith(("http://", "https://"))):
        problems.append("origin must be the gateway's public origin, such as https://api.example.com")
        origin = None
    timeout = data.get("timeout", DEFAULT_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 3600:
        problems.append("timeout must be a number of seconds, more than 0 and at most 3600")
        timeout = DEFAULT_TIMEOUT
    max_body = data.get("max_request_body", DEFAULT_MAX_BODY)
    if isinstance(max_body, bool) or not isinstance(max_body, int) or max_body < 0:
        problems.append("max_request_body must be a number of bytes (0 or more)")
        max_body = DEFAULT_MAX_BODY
    openapi = data.get("openapi")
    if openapi is not None and not (isinstance(openapi, str) and openapi.startswith("/")):
        problems.append("openapi must be the path of the upstream's OpenAPI document, such as /openapi.json")
        openapi = None
    publish = data.get("publish", False)
    if not isinstance(publish, bool):
        problems.append("publish must be true or false")
        publish = False
    defaults: dict[str, Any] = {key: data[key] for key in ("coin", "network") if key in data}
    entries = data.get("routes", [])
    routes: list[GatewayRoute] = []
    if not isinstance(entries, list):
        problems.append("routes must be an array of tables ([[routes]])")
        entries = []
    for index, entry in enumerate(entries, 1):
        if not isinstance(entry, dict):
            problems.append(f"route {index} must be a table")
            continue
        route = _route(index, {**defaults, **entry}, problems, origin)
        if route is not None:
            routes.append(route)
    problems.extend(_overlaps(routes))
    if problems:
        raise ConfigurationError(problems)
    return GatewayConfig(
        upstream=upstream,
        routes=tuple(routes),
        payout_address=payout,
        origin=origin.rstrip("/") if origin else None,
        timeout=float(timeout),
        max_request_body=max_body,
        openapi=openapi,
        publish=publish,
    )


def _route(index: int, entry: dict[str, Any], problems: list[str], origin: str | None) -> GatewayRoute | None:
    where = f"route {index}"
    before = len(problems)
    problems.extend(f"{where}: unknown setting {key!r}" for key in entry if key not in _ROUTE_KEYS)
    method = entry.get("method", "*")
    if not isinstance(method, str) or (method.upper() not in METHODS and method != "*"):
        problems.append(f"{where}: method must be one of {', '.join(sorted(METHODS))}")
        method = "*"
    method = method.upper()
    path = entry.get("path")
    if not isinstance(path, str) or not _path_ok(path):
        problems.append(f"{where}: path must start with '/' and use {{name}} or a last {{name:path}} as patterns")
        return None
    where = f"route {method if method != '*' else 'ANY'} {path}"
    scheme = entry.get("scheme", "exact")
    if scheme not in ("exact", "upto"):
        problems.append(f"{where}: scheme must be 'exact' (a fixed price) or 'upto' (metered)")
        scheme = "exact"
    network_text = entry.get("network")
    network = _network(network_text)
    if network is None:
        problems.append(f"{where}: unknown network {network_text!r} (give eip155:<chain id> or a known name)")
    coin = entry.get("coin")
    known = get_network(network) if network else None
    if not isinstance(coin, str) or coin.upper() not in COINS:
        problems.append(f"{where}: unknown coin {coin!r} (the coins are {', '.join(COINS)})")
        coin = "USDC"
    coin = coin.upper()
    if known is not None and known.asset(coin) is None:
        problems.append(f"{where}: {coin} is not a coin of {known.name} ({network})")
    decimals = 6
    if known is not None and known.asset(coin) is not None:
        decimals = known.assets[coin].decimals
    price_value = entry.get("price")
    price = Decimal(0)
    amount = 0
    if isinstance(price_value, float):
        problems.append(f'{where}: price must be a string such as "0.01", not a float')
    elif not isinstance(price_value, str | int) or isinstance(price_value, bool):
        problems.append(f'{where}: price is required, a decimal string such as "0.01"')
    else:
        try:
            price = parse_decimal(str(price_value), field="price")
            amount = to_atomic(str(price_value), decimals=decimals, symbol=coin)
        except PriceError as exc:
            smallest = format_amount(1, decimals)
            problems.append(
                f"{where}: price {price_value!r} is refused: {exc} (the smallest unit of {coin} is {smallest})"
            )
    usage_header = entry.get("usage_header")
    unit_atomic = None
    if scheme == "upto":
        if not isinstance(usage_header, str) or not _HEADER_NAME.match(usage_header):
            problems.append(f"{where}: an upto route needs usage_header, the response header saying what was used")
            usage_header = None
        unit_price = entry.get("unit_price")
        if isinstance(unit_price, float):
            problems.append(f'{where}: unit_price must be a string such as "0.0001", not a float')
        elif unit_price is not None:
            try:
                unit_atomic = to_atomic(str(unit_price), decimals=decimals, symbol=coin)
            except PriceError as exc:
                problems.append(f"{where}: unit_price {unit_price!r}: {exc}")
    elif usage_header is not None or "unit_price" in entry:
        problems.append(f"{where}: usage_header and unit_price are for scheme = 'upto' only")
    flag = entry.get("unauthorized_to_402", False)
    if not isinstance(flag, bool):
        problems.append(f"{where}: unauthorized_to_402 must be true or false")
    strings = {}
    for key in ("description", "mime_type", "endpoint"):
        value = entry.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip() or len(value) > 1000):
            problems.append(f"{where}: {key} must be a non-empty string")
            value = None
        strings[key] = value
    authorization = entry.get("upstream_authorization")
    if authorization is not None:
        authorization = _secret(authorization, f"{where}: upstream_authorization", problems)
    discovery = _discovery(entry.get("discovery"), where, problems)
    sign_in = _sign_in(entry.get("sign_in"), origin, where, problems)
    if len(problems) > before or network is None:
        return None
    return GatewayRoute(
        method=method,
        path=path,
        price=price,
        amount=amount,
        coin=coin,
        network=network,
        scheme=scheme,
        decimals=decimals,
        usage_header=usage_header,
        unit_atomic=unit_atomic,
        unauthorized_to_402=bool(flag),
        description=strings["description"],
        mime_type=strings["mime_type"],
        endpoint=strings["endpoint"],
        upstream_authorization=authorization,
        discovery=discovery,
        sign_in=sign_in,
    )


def _discovery(value: object, where: str, problems: list[str]) -> Discovery | None:
    """``[routes.discovery]``: the route's call contract for the Bazaar extension (`Discovery`)."""
    if value is None:
        return None
    if not isinstance(value, dict) or not set(value) <= _DISCOVERY_KEYS:
        problems.append(f"{where}: discovery takes {', '.join(sorted(_DISCOVERY_KEYS))}")
        return None
    try:
        return Discovery(**value)
    except (ConfigurationError, TypeError) as exc:
        problems.append(f"{where}: discovery: {exc}")
        return None


def _sign_in(value: object, origin: str | None, where: str, problems: list[str]) -> SignIn | None:
    """``sign_in = true`` (a payment lets its wallet back in for good) or a number of seconds."""
    if value is None or value is False:
        return None
    if origin is None:
        problems.append(f"{where}: sign_in needs origin, the gateway's public origin")
        return None
    if value is True:
        duration = None
    elif isinstance(value, int) and not isinstance(value, bool) and value > 0:
        duration = value
    else:
        problems.append(f"{where}: sign_in must be true or a number of seconds")
        return None
    try:
        return SignIn(origin=origin, duration=duration)
    except ConfigurationError as exc:
        problems.append(f"{where}: sign_in: {exc}")
        return None


def _secret(value: object, where: str, problems: list[str]) -> str | None:
    """A header value from the file, or from the environment variable it names (``env:NAME``)."""
    if not isinstance(value, str) or not value.strip():
        problems.append(f"{where} must be a header value or env:NAME")
        return None
    if value.startswith("env:"):
        found = os.environ.get(value[4:])
        if not found:
            problems.append(f"{where}: the environment variable {value[4:]!r} is not set")
            return None
        value = found
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        problems.append(f"{where} must not contain control characters")
        return None
    return value


def _network(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    try:
        return f"eip155:{parse_caip2(value)}"
    except ValueError:
        known = get_network(value)
        return known.caip2 if known is not None else None


def _path_ok(path: str) -> bool:
    if not path.startswith("/") or len(path) > 1000 or "?" in path or "#" in path:
        return False
    segments = path[1:].split("/")
    for position, segment in enumerate(segments):
        if _REST_PARAM.match(segment):
            if position != len(segments) - 1:
                return False
        elif ("{" in segment or "}" in segment) and not _SEGMENT_PARAM.match(segment):
            return False
    return True


def _may_match_same(a: str, b: str) -> bool:
    """Whether some request path matches both path patterns."""
    left, right = a[1:].split("/"), b[1:].split("/")
    for position in range(max(len(left), len(right))):
        x = left[position] if position < len(left) else None
        y = right[position] if position < len(right) else None
        x_rest = x is not None and bool(_REST_PARAM.match(x))
        y_rest = y is not None and bool(_REST_PARAM.match(y))
        if x_rest or y_rest:
            other = y if x_rest else x
            return other is not None  # the rest matches one segment or more
        if x is None or y is None:
            return False
        if _SEGMENT_PARAM.match(x) or _SEGMENT_PARAM.match(y):
            continue
        if x != y:
            return False
    return True


def _overlaps(routes: list[GatewayRoute]) -> list[str]:
    problems = []
    for position, first in enumerate(routes):
        for second in routes[position + 1 :]:
            if first.method not in ("*", second.method) and second.method != "*":
                continue
            if _may_match_same(first.path, second.path):
                problems.append(
                    f"routes {first.name[8:]!r} and {second.name[8:]!r} overlap: a request could match both"
                )
    return problems
