"""Prices read from the upstream's OpenAPI document, and the documents the gateway publishes.

An operation of the upstream's document is priced by its ``x-payment-info``, in the shape API
catalogues read (``price.mode``, ``price.currency``, ``price.amount``, and ``protocols`` naming x402)::

    "x-payment-info": {"price": {"mode": "fixed", "currency": "USD", "amount": "0.01"}, "protocols": [{"x402": {}}]}

``mode`` ``fixed`` is an ``exact`` route. A currency ``USD`` (or ``USDC``) is paid in USDC, ``EUR``
(``EURC``) in EURC. The gateway's file may set what an operation cannot say (``network``, a
``usage_header``...) by a route of the same method and path, which wins over the document.

With ``publish = true`` the gateway answers ``GET /openapi.json`` (the upstream's document, or one
made from the routes, each priced operation carrying its ``x-payment-info`` and a ``402`` response)
and ``GET /llms.txt`` (the paid routes, for language models), instead of the upstream.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from x402mw.gateway.config import METHODS, GatewayConfig, GatewayRoute

_COINS = {"USD": "USDC", "USDC": "USDC", "EUR": "EURC", "EURC": "EURC"}
OPENAPI_PATH = "/openapi.json"
LLMS_PATH = "/llms.txt"


def _names_x402(protocols: Any) -> bool:
    if protocols is None:
        return True  # no list: the gateway takes x402 only anyway
    if not isinstance(protocols, list):
        return False
    return any(p == "x402" or (isinstance(p, dict) and "x402" in p) for p in protocols)


def routes_from_openapi(document: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """The route entries (the file's ``[[routes]]`` shape) of the operations ``document`` prices, and
    the problems of those it prices in a way the gateway cannot sell."""
    routes: list[dict[str, Any]] = []
    problems: list[str] = []
    paths = document.get("paths") if isinstance(document, dict) else None
    if not isinstance(paths, dict):
        return routes, ["the upstream's OpenAPI document has no paths"]
    for path, item in paths.items():
        if not isinstance(path, str) or not isinstance(item, dict):
            continue
        for method, operation in item.items():
            if method.upper() not in METHODS or not isinstance(operation, dict):
                continue
            info = operation.get("x-payment-info")
            if info is None:
                continue
            where = f"the OpenAPI operation {method.upper()} {path}"
            price = info.get("price") if isinstance(info, dict) else None
            if not isinstance(price, dict) or not _names_x402(info.get("protocols")):
                problems.append(f"{where}: x-payment-info needs price {{mode, currency, amount}} and x402 in protocols")
                continue
            coin = _COINS.get(str(price.get("currency", "USD")).upper())
            if price.get("mode", "fixed") != "fixed" or coin is None:
                problems.append(f"{where}: only fixed prices in USD/USDC or EUR/EURC can be sold")
                continue
            entry: dict[str, Any] = {
                "method": method.upper(),
                "path": path,
                "price": str(price.get("amount")),
                "coin": coin,
            }
            summary = operation.get("summary") or operation.get("description")
            if isinstance(summary, str) and summary.strip():
                entry["description"] = summary.strip()[:1000]
            routes.append(entry)
    return routes, problems


def merge_routes(data: dict[str, Any], document: Any) -> tuple[dict[str, Any], list[str]]:
    """The file's settings with the document's priced operations added as routes; a route of the
    file with the same method and path wins (its settings over the operation's)."""
    found, problems = routes_from_openapi(document)
    own = data.get("routes", [])
    if not isinstance(own, list):
        return data, problems
    by_key = {(str(r.get("method", "*")).upper(), r.get("path")): r for r in own if isinstance(r, dict)}
    merged = list(own)
    for entry in found:
        mine = by_key.get((entry["method"], entry["path"]))
        if mine is None:
            merged.append(entry)
        else:
            mine.update({k: v for k, v in entry.items() if k not in mine})
    return {**data, "routes": merged}, problems


def _payment_info(route: GatewayRoute) -> dict[str, Any]:
    info: dict[str, Any] = {
        "price": {"mode": "fixed" if route.scheme == "exact" else "metered", "currency": route.coin},
        "protocols": [{"x402": {"scheme": route.scheme, "network": route.network}}],
    }
    key = "amount" if route.scheme == "exact" else "maxAmount"
    info["price"][key] = format(route.price, "f")
    return info


def published_document(config: GatewayConfig, upstream: Any = None) -> dict[str, Any]:
    """The OpenAPI document the gateway publishes: ``upstream``'s (copied) or a minimal one, each
    priced operation with its ``x-payment-info`` and a ``402`` response."""
    if isinstance(upstream, dict) and isinstance(upstream.get("paths"), dict):
        document = copy.deepcopy(upstream)
    else:
        document = {"openapi": "3.1.0", "info": {"title": "Paid API", "version": "1"}, "paths": {}}
    paths = document["paths"]
    for route in config.routes:
        methods = [route.method.lower()] if route.method != "*" else ["get"]
        item = paths.setdefault(route.path, {})
        for method in methods:
            operation = item.setdefault(method, {"responses": {"200": {"description": "OK"}}})
            if route.description and "summary" not in operation:
                operation["summary"] = route.description
            operation["x-payment-info"] = _payment_info(route)
            operation.setdefault("responses", {})["402"] = {
                "description": "Payment Required: the x402 v2 terms are in the PAYMENT-REQUIRED header"
            }
    return document


def llms_txt(config: GatewayConfig, origin: str) -> str:
    """``/llms.txt``: what the gateway sells and how to pay, in Markdown."""
    lines = [
        "# Paid API",
        "",
        "> Routes below are paid per request with x402 v2: request one, answer its 402 by paying the "
        "terms in its PAYMENT-REQUIRED header, and send the request again with PAYMENT-SIGNATURE. "
        f"The list of paid routes for agents is at {origin}/.well-known/x402.",
        "",
        "## Paid routes",
        "",
    ]
    for route in config.routes:
        method = route.method if route.method != "*" else "ANY"
        cost = f"{format(route.price, 'f')} {route.coin}"
        cost = f"up to {cost}, charged by use" if route.scheme == "upto" else cost
        text = f": {route.description}" if route.description else ""
        lines.append(f"- [{method} {route.path}]({origin}{route.path}): {cost} on {route.network}{text}")
    return "\n".join(lines) + "\n"


def encoded(document: dict[str, Any]) -> bytes:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()
