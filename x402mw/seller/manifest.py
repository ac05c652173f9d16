"""A seller's ``/.well-known/x402`` manifest (the x402 well-known discovery draft): each paid
route's terms (advisory; the live 402 decides) and what its declaration says."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Generator
from typing import Any

from x402mw.errors import PlatformError
from x402mw.seller.config import EndpointTerms, PaidRoute, priced_per_request
from x402mw.seller.decisions import Answer, PlatformCall
from x402mw.seller.discovery import well_known_manifest
from x402mw.seller.origins import origin_of
from x402mw.seller.terms import TermsCache

logger = logging.getLogger("x402mw.seller")


def well_known(
    cache: TermsCache,
    routes: list[tuple[str, str, PaidRoute]],
    request_url: str,
    *,
    origin: str | None,
    clock: Callable[[], float],
) -> Generator[PlatformCall, Any, Answer]:
    """The ``/.well-known/x402`` answer listing ``routes``: see `PaymentGate.well_known`."""
    items = []
    for method, path, route in routes:
        terms = cache.get(route.endpoint)
        if terms is None:
            try:
                terms = yield from cache.fetch(route.endpoint)
            except PlatformError as exc:
                logger.warning("well-known: endpoint %s left out: %s", route.endpoint, exc.message)
                continue
        items.append(manifest_item(method, path, route, terms, priced_per_request(route, terms)))
    manifest = well_known_manifest(origin or origin_of(request_url), items, int(clock()))
    raw = json.dumps(manifest, separators=(",", ":"), ensure_ascii=False).encode()
    if origin is not None:
        return Answer(200, [("Content-Type", "application/json"), ("Cache-Control", "public, max-age=60")], raw)
    headers = [("Content-Type", "application/json"), ("Cache-Control", "private, max-age=60"), ("Vary", "Host")]
    return Answer(200, headers, raw)


def manifest_item(
    method: str, path: str, route: PaidRoute, terms: EndpointTerms, priced_per_request: bool
) -> dict[str, Any]:
    """One route's item of the ``/.well-known/x402`` manifest, its URL a path (see
    `x402mw.seller.discovery.well_known_manifest`); the amount only for a fixed price."""
    template = re.sub(r"\{([A-Za-z_][A-Za-z0-9_]*)(?::path)?\}", r":\1", path)
    verb = "GET" if method == "*" else method
    offer: dict[str, Any] = {"scheme": "exact", "network": terms.network}
    if terms.amount is not None and not priced_per_request:
        offer["amount"] = str(terms.amount)
    offer |= {
        "asset": terms.asset,
        "payTo": terms.pay_to,
        "maxTimeoutSeconds": terms.max_timeout_seconds,
        "extra": {"name": terms.eip712_name, "version": terms.eip712_version},
    }
    resource: dict[str, Any] = {"url": template}
    if route.description or terms.name:
        resource["description"] = route.description or terms.name
    if route.mime_type:
        resource["mimeType"] = route.mime_type
    kind = route.discovery.kind if route.discovery is not None else "http"
    item: dict[str, Any] = {"resource": resource, "type": kind, "accepts": [offer]}
    contract_input: dict[str, Any] = {"method": verb, "routeTemplate": template}
    if route.discovery is not None:
        given, output = route.discovery.contract(verb)
        contract_input = {k: v for k, v in given.items() if k != "type"} | {"routeTemplate": template}
        if kind == "http":
            contract_input["method"] = given.get("method", verb)
        if output is not None:
            item["output"] = output
    item["input"] = contract_input
    if route.sign_in is not None:
        item["requires"] = ["sign-in-with-x"]
    return item
