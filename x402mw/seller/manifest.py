"""The items of a seller's ``/.well-known/x402`` manifest (the x402 well-known discovery draft):
each paid route's terms (advisory; the live 402 decides) and what its declaration says."""

from __future__ import annotations

import re
from typing import Any

from x402mw.seller.config import EndpointTerms, PaidRoute


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
