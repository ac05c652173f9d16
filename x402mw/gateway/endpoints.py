"""The agent endpoints behind the gateway's routes, made to say what the file says, at start.

Each priced route is sold through one agent endpoint of the merchant whose API key the gateway
runs with: the one the route names (``endpoint = "<id>"``), or the one named ``gateway <METHOD>
<path>``, created when missing (paid out to ``payout_address``). An endpoint whose price or scheme
differs from the file is updated; one on another network or coin is refused (an endpoint's network
and coin never change). Every problem is collected into one `ConfigurationError`.
"""

from __future__ import annotations

import re
from typing import Any

import httpx

from x402mw.errors import ConfigurationError
from x402mw.gateway.config import GatewayConfig, GatewayRoute
from x402mw.protocol.networks import parse_caip2


def provision(
    config: GatewayConfig,
    *,
    api_key: str,
    platform_url: str,
    public_base: str,
    default_endpoint: str | None = None,
    transport: httpx.BaseTransport | None = None,
) -> dict[str, str]:
    """The endpoint id of each route (by `GatewayRoute.key`), the endpoints created or updated.
    ``default_endpoint`` (``X402MW_ENDPOINT_ID``) is used by a file with a single priced route
    that names none."""
    headers = {"Authorization": f"Bearer {api_key}"}
    try:
        with httpx.Client(
            base_url=platform_url.rstrip("/"), headers=headers, timeout=15, transport=transport
        ) as client:
            return _provision(client, config, public_base, default_endpoint)
    except httpx.HTTPError as exc:
        raise ConfigurationError(f"cannot reach the platform at {platform_url}: {exc}") from None


def _provision(
    client: httpx.Client, config: GatewayConfig, public_base: str, default_endpoint: str | None
) -> dict[str, str]:
    problems: list[str] = []
    supported = client.get("/x402/supported")
    if supported.status_code != 200:
        raise ConfigurationError(
            f"the platform at {client.base_url} answered {supported.status_code} to /x402/supported"
        )
    networks = {str(kind.get("network")) for kind in supported.json().get("kinds", [])}
    for route in config.routes:
        if route.network not in networks:
            problems.append(
                f"route {route.name[8:]}: network {route.network} is not settled by the platform "
                f"(it settles {', '.join(sorted(networks)) or 'none'})"
            )
    if problems:
        raise ConfigurationError(problems)
    existing = _list_endpoints(client)
    by_name = {str(e.get("name")): e for e in existing}
    by_id = {str(e.get("id")): e for e in existing}
    found: dict[str, str] = {}
    single = len(config.routes) == 1
    for route in config.routes:
        wanted_id = route.endpoint or (default_endpoint if single else None)
        if wanted_id is not None:
            endpoint = by_id.get(wanted_id)
            if endpoint is None:
                problems.append(f"route {route.name[8:]}: endpoint {wanted_id} is not one of this API key's merchant")
                continue
        else:
            endpoint = by_name.get(route.name)
        if endpoint is None:
            if config.payout_address is None:
                problems.append(
                    f"route {route.name[8:]}: no endpoint is named {route.name!r} and payout_address is not set "
                    "to create it"
                )
                continue
            created = _create(client, route, config.payout_address, public_base)
            if isinstance(created, str):
                problems.append(f"route {route.name[8:]}: {created}")
                continue
            endpoint = created
        else:
            updated = _reconcile(client, route, endpoint)
            if isinstance(updated, str):
                problems.append(f"route {route.name[8:]}: {updated}")
                continue
        found[route.key] = str(endpoint["id"])
    if problems:
        raise ConfigurationError(problems)
    return found


def _list_endpoints(client: httpx.Client) -> list[dict[str, Any]]:
    endpoints: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": 100}
    while True:
        reply = client.get("/agent/endpoints", params=params)
        if reply.status_code != 200:
            raise ConfigurationError(f"the platform refused to list agent endpoints: {_message(reply)}")
        page = reply.json()
        endpoints.extend(page.get("data", []))
        if not page.get("hasMore") or not page.get("data"):
            return endpoints
        params["starting_after"] = page["data"][-1]["id"]


def _terms(route: GatewayRoute) -> dict[str, Any]:
    if route.scheme == "upto":
        return {"pricingMode": "metered", "maxAmountMinor": str(route.amount)}
    return {"pricingMode": "fixed", "amountMinor": str(route.amount)}


def _create(client: httpx.Client, route: GatewayRoute, payout: str, public_base: str) -> dict[str, Any] | str:
    path = re.sub(r"\{([A-Za-z_][A-Za-z0-9_]*)(?::path)?\}", r":\1", route.path)
    body = {
        "name": route.name,
        "resourceUrl": public_base.rstrip("/") + path,
        "chainId": parse_caip2(route.network),
        "currency": route.coin,
        "payoutAddress": payout,
        **_terms(route),
    }
    reply = client.post("/agent/endpoints", json=body)
    if reply.status_code != 201:
        return f"the platform refused to create its endpoint: {_message(reply)}"
    endpoint: dict[str, Any] = reply.json()["endpoint"]
    return endpoint


def _reconcile(client: httpx.Client, route: GatewayRoute, endpoint: dict[str, Any]) -> dict[str, Any] | str:
    if endpoint.get("network") != route.network or str(endpoint.get("currency", "")).upper() != route.coin:
        return (
            f"endpoint {endpoint.get('id')} takes {endpoint.get('currency')} on {endpoint.get('network')}, "
            f"the file says {route.coin} on {route.network} (an endpoint's coin and network never change)"
        )
    wanted = _terms(route)
    mode = endpoint.get("pricingMode")
    amount_key = "maxAmountMinor" if wanted["pricingMode"] == "metered" else "amountMinor"
    if mode == wanted["pricingMode"] and str(endpoint.get(amount_key)) == wanted[amount_key]:
        return endpoint
    body = dict(wanted)
    if wanted["pricingMode"] == "metered":
        body["amountMinor"] = None
    reply = client.patch(f"/agent/endpoints/{endpoint['id']}", json=body)
    if reply.status_code != 200:
        return f"the platform refused to update endpoint {endpoint['id']}: {_message(reply)}"
    updated: dict[str, Any] = reply.json()["endpoint"]
    return updated


def _message(reply: httpx.Response) -> str:
    try:
        error = reply.json().get("error", {})
        return f"{reply.status_code} {error.get('code')}: {error.get('message')}"
    except ValueError:
        return f"{reply.status_code}"
