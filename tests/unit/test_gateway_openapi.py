"""Prices read from an OpenAPI document's ``x-payment-info``, and the documents the gateway publishes."""

from __future__ import annotations

from typing import Any

from x402mw.gateway.config import parse_config
from x402mw.gateway.openapi import llms_txt, merge_routes, published_document, routes_from_openapi


def _operation(info: Any) -> dict[str, Any]:
    return {"paths": {"/items/{id}": {"get": {"summary": "An item", "x-payment-info": info}}}}


def test_a_fixed_usd_price_is_an_exact_usdc_route() -> None:
    info = {"price": {"mode": "fixed", "currency": "USD", "amount": "0.02"}, "protocols": [{"x402": {}}]}
    routes, problems = routes_from_openapi(_operation(info))
    assert problems == []
    assert routes == [
        {"method": "GET", "path": "/items/{id}", "price": "0.02", "coin": "USDC", "description": "An item"}
    ]


def test_what_cannot_be_sold_is_named() -> None:
    for info in (
        {"price": {"mode": "dynamic", "currency": "USD", "amount": "0.02"}},
        {"price": {"mode": "fixed", "currency": "JPY", "amount": "2"}},
        {"price": {"mode": "fixed", "currency": "USD", "amount": "1"}, "protocols": ["mpp"]},
        "0.02",
    ):
        routes, problems = routes_from_openapi(_operation(info))
        assert routes == [] and len(problems) == 1 and "GET /items/{id}" in problems[0], problems
    assert routes_from_openapi({"openapi": "3.1.0"})[1] == ["the upstream's OpenAPI document has no paths"]


def test_the_files_route_wins_and_the_result_is_published() -> None:
    info = {"price": {"mode": "fixed", "currency": "USD", "amount": "0.02"}}
    data = {"network": "eip155:84532", "routes": [{"method": "GET", "path": "/items/{id}", "price": "0.05"}]}
    merged, problems = merge_routes(data, _operation(info))
    config = parse_config(merged)
    assert problems == [] and [(r.key, r.amount, r.description) for r in config.routes] == [
        ("GET /items/{id}", 50_000, "An item")
    ]
    document = published_document(config, _operation(info))
    assert document["paths"]["/items/{id}"]["get"]["x-payment-info"]["price"]["amount"] == "0.05"
    assert "402" in document["paths"]["/items/{id}"]["get"]["responses"]
    assert "- [GET /items/{id}](https://api.example.com/items/{id}): 0.05 USDC on eip155:84532: An item" in llms_txt(
        config, "https://api.example.com"
    )
