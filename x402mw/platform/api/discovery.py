"""The Bazaar discovery API under ``{base_url}/x402/discovery/``: public, rate limited, read only.

``GET /resources`` lists the catalogue (filters ``type``, ``payTo``, ``scheme``, ``network``,
``extensions``; ``limit`` 1 to 100, ``offset`` up to 10,000) as ``{x402Version, items,
pagination: {limit, offset, total}}``, newest first. ``GET /search?query=`` matches every word of
the query against the resources' URLs, descriptions and names, ranked (names before descriptions,
then the most settled for lately: `x402mw.platform.services.catalogue`), as ``{x402Version,
resources, partialResults, pagination: {limit, cursor}}`` (the cursor is the next offset, or null).
Only endpoints their merchants made ``discoverable`` are listed.
"""

from __future__ import annotations

import re

from starlette.requests import Request

from x402mw.platform.http.errors import HttpError
from x402mw.platform.http.responses import ModelResponse
from x402mw.platform.http.routing import ApiRoute, Operation, Schema, query
from x402mw.platform.http.state import platform_of
from x402mw.platform.objects import agents as objects
from x402mw.platform.services.catalogue import CatalogueQuery

__all__ = ["ADDRESS", "EXTENSION", "MAX_LIMIT", "MAX_OFFSET", "NETWORK", "SCHEME", "TYPE", "routes"]

MAX_LIMIT = 100
MAX_OFFSET = 10_000
_DEFAULT_LIMIT = 20
_KNOWN = frozenset({"type", "payTo", "scheme", "network", "extensions", "limit", "offset", "query", "cursor"})
TYPE = re.compile(r"^(?:http|mcp)$")
ADDRESS = re.compile(r"^0x[0-9a-fA-F]{40}$")
SCHEME = re.compile(r"^[a-z0-9-]{1,32}$")
NETWORK = re.compile(r"^[a-z0-9-]{3,8}:[A-Za-z0-9-]{1,32}$")
EXTENSION = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_HEADERS = {"Cache-Control": "public, max-age=30", "Access-Control-Allow-Origin": "*"}


def _text(request: Request, name: str, pattern: re.Pattern[str], what: str) -> str | None:
    value = request.query_params.get(name)
    if value is None:
        return None
    if not pattern.match(value):
        raise HttpError(400, "parameter_invalid", f"{name} must be {what}", param=name)
    return value


def _number(request: Request, name: str, default: int, low: int, high: int) -> int:
    value = request.query_params.get(name)
    if value is None:
        return default
    if not value.isascii() or not value.isdigit() or len(value) > 6 or not low <= int(value) <= high:
        raise HttpError(400, "parameter_invalid", f"{name} must be a whole number from {low} to {high}", param=name)
    return int(value)


def _query(request: Request, *, search: bool) -> CatalogueQuery:
    unknown = sorted(set(request.query_params.keys()) - _KNOWN)
    if unknown:
        raise HttpError(400, "parameter_invalid", f"unknown query parameter {unknown[0][:40]!r}", param=unknown[0][:40])
    words = None
    offset_name = "cursor" if search else "offset"
    if search:
        words = request.query_params.get("query", "").strip()
        if not words:
            raise HttpError(400, "parameter_missing", "query is required: the words to search for", param="query")
        if len(words) > 200 or not words.isprintable():
            raise HttpError(400, "parameter_invalid", "query must be at most 200 printable characters", param="query")
    return CatalogueQuery(
        type=_text(request, "type", TYPE, "http or mcp"),
        pay_to=_text(request, "payTo", ADDRESS, "an EVM address"),
        scheme=_text(request, "scheme", SCHEME, "a payment scheme such as exact"),
        network=_text(request, "network", NETWORK, "a CAIP-2 network such as eip155:8453"),
        extensions=_text(request, "extensions", EXTENSION, "an extension key such as bazaar"),
        query=words,
        limit=_number(request, "limit", _DEFAULT_LIMIT, 1, MAX_LIMIT),
        offset=_number(request, offset_name, 0, 0, MAX_OFFSET),
    )


async def list_resources(request: Request) -> ModelResponse:
    query = _query(request, search=False)
    items, total = await platform_of(request).catalogue.page(query)
    page = objects.DiscoveryList(
        x402_version=2,
        items=[objects.DiscoveredResource.model_validate(item) for item in items],
        pagination=objects.DiscoveryPagination(limit=query.limit, offset=query.offset, total=total),
    )
    return _public(ModelResponse(page))


async def search_resources(request: Request) -> ModelResponse:
    query = _query(request, search=True)
    items, total = await platform_of(request).catalogue.page(query)
    following = query.offset + len(items)
    cursor = str(following) if following < total and following <= MAX_OFFSET else None
    found = objects.DiscoverySearch(
        x402_version=2,
        resources=[objects.DiscoveredResource.model_validate(item) for item in items],
        partial_results=cursor is not None,
        pagination=objects.SearchPagination(limit=query.limit, cursor=cursor),
    )
    return _public(ModelResponse(found))


def _public(response: ModelResponse) -> ModelResponse:
    response.headers.update(_HEADERS)
    return response


def _pattern(regex: re.Pattern[str]) -> Schema:
    return {"type": "string", "pattern": regex.pattern}


# The filters, with the patterns they are checked by.
_OFFSET: Schema = {"type": "string", "pattern": "^(?:0|[1-9][0-9]{0,3}|10000)$"}
_WORDS: Schema = {"type": "string", "maxLength": 200, "pattern": "^[ -~]*[!-~][ -~]*$"}
_FILTERS = [
    query("type", "`http` or `mcp`", {"type": "string", "enum": ["http", "mcp"]}),
    query("payTo", "recipient address", _pattern(ADDRESS)),
    query("scheme", "payment scheme, e.g. `exact`", _pattern(SCHEME)),
    query("network", "CAIP-2 network, e.g. `eip155:8453`", _pattern(NETWORK)),
    query("extensions", "an extension the resource declares, e.g. `bazaar`", _pattern(EXTENSION)),
    query("limit", "1–100; default 20", {"type": "string", "pattern": "^(?:[1-9][0-9]?|100)$"}),
]
routes = [
    ApiRoute(
        "GET",
        "/x402/discovery/resources",
        list_resources,
        Operation(
            id="discoveryListResources",
            tag="Facilitator",
            summary="List discoverable resources (x402 Bazaar)",
            description="The resources this platform settled for whose endpoints are `discoverable`, newest first. "
            "Public; rate limited per client address (429 with `Retry-After`).",
            answer=objects.DiscoveryList,
            public=True,
            parameters=[*_FILTERS, query("offset", "0–10000; default 0", _OFFSET)],
            errors=(429,),
        ),
    ),
    ApiRoute(
        "GET",
        "/x402/discovery/search",
        search_resources,
        Operation(
            id="discoverySearch",
            tag="Facilitator",
            summary="Search discoverable resources (x402 Bazaar)",
            description="Resources whose URL, description or name contain every word of `query`. Public; rate limited.",
            answer=objects.DiscoverySearch,
            public=True,
            parameters=[
                query("query", "1–200 printable characters: the words to find", _WORDS) | {"required": True},
                *_FILTERS,
                query("cursor", "the `pagination.cursor` of the previous page", _OFFSET),
            ],
            errors=(429,),
        ),
    ),
]
