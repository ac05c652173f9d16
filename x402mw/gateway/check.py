"""``x402mw check``: does each paid route of a seller answer an unpaid request with a valid x402 v2 402?

For every route (listed by the seller's ``/.well-known/x402``, or given as a URL) one unpaid
request is sent, and its answer checked: status 402, a ``PAYMENT-REQUIRED`` header that decodes to
x402 v2 terms, each offer's network and asset known, a payee set, the amount a positive integer, the
EIP-712 domain of an ``exact`` offer named, and the ``bazaar`` discovery extension (when declared)
well-formed. Every problem is reported, not only the first.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
from pydantic import ValidationError

from x402mw.protocol.codec import PAYMENT_REQUIRED
from x402mw.protocol.models import PaymentRequired
from x402mw.protocol.networks import get_network, parse_caip2

_ADDRESS = re.compile(r"^0x[0-9a-fA-F]{40}$")
_ZERO = "0x" + "0" * 40
_SCHEMES = frozenset({"exact", "upto", "batch-settlement"})
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


@dataclass
class RouteReport:
    """What one route's unpaid request answered, and every problem with it."""

    method: str
    url: str
    status: int | None = None
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"method": self.method, "url": self.url, "status": self.status, "problems": self.problems}


def check_urls(
    urls: list[str], *, extra_networks: set[str] | None = None, transport: httpx.BaseTransport | None = None
) -> list[RouteReport]:
    """Check each URL (an origin: the routes of its ``/.well-known/x402``; else the route itself)."""
    extra = {n.strip() for n in extra_networks or set()}
    reports: list[RouteReport] = []
    with httpx.Client(timeout=15, transport=transport, trust_env=False, follow_redirects=False) as client:
        for url in urls:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                reports.append(RouteReport("GET", url, problems=["not an http(s) URL"]))
            elif parts.path in ("", "/") and not parts.query:
                reports.extend(_check_manifest(client, f"{parts.scheme}://{parts.netloc}", extra))
            else:
                report = RouteReport("GET", url)
                _check_route(client, report, None, extra)
                reports.append(report)
    return reports


def _check_manifest(client: httpx.Client, origin: str, extra: set[str]) -> list[RouteReport]:
    where = origin + "/.well-known/x402"
    report = RouteReport("GET", where)
    try:
        reply = client.get(where, headers={"Accept": "application/json"})
    except httpx.HTTPError as exc:
        report.problems.append(f"cannot fetch it: {type(exc).__name__}: {exc}")
        return [report]
    report.status = reply.status_code
    if reply.status_code != 200:
        report.problems.append(f"answered {reply.status_code}, not 200")
        return [report]
    try:
        manifest = reply.json()
    except ValueError:
        report.problems.append("is not JSON")
        return [report]
    items = manifest.get("items") if isinstance(manifest, dict) else None
    if not isinstance(manifest, dict) or manifest.get("x402Version") != 2 or not isinstance(items, list):
        report.problems.append("is not an x402 v2 manifest ({x402Version: 2, items: [...]})")
        return [report]
    if not items:
        report.problems.append("lists no paid route")
        return [report]
    reports = []
    for index, item in enumerate(items, 1):
        resource = item.get("resource") if isinstance(item, dict) else None
        url = resource.get("url") if isinstance(resource, dict) else None
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            reports.append(RouteReport("?", f"{where} item {index}", problems=["the item has no resource.url"]))
            continue
        contract = item.get("input") if isinstance(item.get("input"), dict) else {}
        method = str(contract.get("method") or "GET").upper()
        route = RouteReport(method, url)
        if not isinstance(item.get("accepts"), list) or not item["accepts"]:
            route.problems.append("the manifest's item lists no accepted payment")
        _check_route(client, route, item, extra)
        reports.append(route)
    return reports


def _check_route(client: httpx.Client, report: RouteReport, item: dict[str, Any] | None, extra: set[str]) -> None:
    if report.method not in _METHODS:
        report.problems.append(f"method {report.method!r} is not an HTTP method")
        return
    try:
        reply = client.request(report.method, report.url, headers={"Accept": "application/json"})
    except httpx.HTTPError as exc:
        report.problems.append(f"cannot request it: {type(exc).__name__}: {exc}")
        return
    report.status = reply.status_code
    if reply.status_code != 402:
        report.problems.append(f"an unpaid request answered {reply.status_code}, not 402")
        return
    header = reply.headers.get(PAYMENT_REQUIRED)
    if header is None:
        report.problems.append("the 402 has no PAYMENT-REQUIRED header (x402 v2)")
        return
    report.problems.extend(payment_required_problems(header, extra))


def payment_required_problems(header: str, extra_networks: set[str] | None = None) -> list[str]:
    """Every problem with a ``PAYMENT-REQUIRED`` header's value (empty when it is valid)."""
    import base64
    import binascii

    try:
        data = json.loads(base64.b64decode(header, validate=True))
    except (binascii.Error, ValueError):
        return ["PAYMENT-REQUIRED is not base64 of JSON"]
    if not isinstance(data, dict):
        return ["PAYMENT-REQUIRED is not a JSON object"]
    if data.get("x402Version") != 2:
        return [f"x402Version is {data.get('x402Version')!r}, not 2"]
    try:
        required = PaymentRequired.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return [f"the terms do not parse: {where}: {first['msg']}"]
    problems = []
    if required.resource is None or not required.resource.url.startswith(("http://", "https://")):
        problems.append("resource.url is missing or not an http(s) URL")
    if not required.accepts:
        problems.append("accepts is empty: nothing can be paid")
    for position, offer in enumerate(required.accepts, 1):
        where = f"accepts[{position - 1}]"
        if offer.scheme not in _SCHEMES:
            problems.append(f"{where}: unknown scheme {offer.scheme!r}")
        network = get_network(offer.network) if _caip2(offer.network) else None
        if network is None and offer.network not in (extra_networks or set()):
            problems.append(f"{where}: unknown network {offer.network!r}")
        if not _ADDRESS.match(offer.asset):
            problems.append(f"{where}: asset {offer.asset!r} is not a token address")
        elif network is not None and network.asset_by_address(offer.asset) is None:
            problems.append(f"{where}: asset {offer.asset} is not a known token of {network.name}")
        if not _ADDRESS.match(offer.pay_to) or offer.pay_to.lower() == _ZERO:
            problems.append(f"{where}: payTo {offer.pay_to!r} is not set to an address")
        if offer.amount <= 0:
            problems.append(f"{where}: amount {offer.amount} is not positive")
        if offer.max_timeout_seconds <= 0:
            problems.append(f"{where}: maxTimeoutSeconds {offer.max_timeout_seconds} is not positive")
        if offer.scheme == "exact" and not (
            isinstance(offer.extra.get("name"), str) and isinstance(offer.extra.get("version"), str)
        ):
            problems.append(f"{where}: extra lacks the token's EIP-712 name and version")
    bazaar = (required.extensions or {}).get("bazaar")
    if bazaar is not None:
        problems.extend(f"extensions.bazaar: {p}" for p in _bazaar_problems(bazaar))
    return problems


def _caip2(network: str) -> bool:
    try:
        parse_caip2(network)
    except ValueError:
        return False
    return True


def _bazaar_problems(bazaar: Any) -> list[str]:
    if not isinstance(bazaar, dict):
        return ["is not an object"]
    info = bazaar.get("info")
    if not isinstance(info, dict) or not isinstance(info.get("input"), dict):
        return ["info.input is missing"]
    problems = []
    given = info["input"]
    kind = given.get("type")
    if kind not in ("http", "mcp"):
        problems.append(f"info.input.type is {kind!r}, not 'http' or 'mcp'")
    elif kind == "http" and str(given.get("method", "")).upper() not in _METHODS:
        problems.append(f"info.input.method {given.get('method')!r} is not an HTTP method")
    elif kind == "mcp" and not isinstance(given.get("toolName"), str):
        problems.append("info.input.toolName is missing")
    if "output" in info and not isinstance(info["output"], dict):
        problems.append("info.output is not an object")
    schema = bazaar.get("schema")
    if schema is not None and (not isinstance(schema, dict) or ("type" not in schema and "properties" not in schema)):
        problems.append("schema is not a JSON schema object")
    return problems
