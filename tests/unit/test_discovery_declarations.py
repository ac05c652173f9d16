"""A seller's ``bazaar`` declaration as the catalogue keeps it (`x402mw.platform.services.declarations`):
checked by its shape within bounds, its JSON Schema kept as data and never compiled."""

from __future__ import annotations

from typing import Any

import pytest

from x402mw.platform.services.declarations import MAX_DECLARATION_CHARS, declared_tool, seller_declaration
from x402mw.seller import Discovery

WEATHER = Discovery(query={"city": "Paris"}, query_schema={"properties": {"city": {"type": "string"}}}, output={"a": 1})
TRANSLATE = Discovery(body={"text": "hello"}, body_schema={"properties": {"text": {"type": "string"}}})
TOOL = Discovery.tool("forecast", {"type": "object", "properties": {"city": {"type": "string"}}}, description="Sky")


@pytest.mark.parametrize(
    ("discovery", "method", "tool"),
    [(WEATHER, "GET", None), (WEATHER, "DELETE", None), (TRANSLATE, "POST", None), (TOOL, "POST", "forecast")],
)
def test_the_seller_middlewares_own_declarations_are_kept_as_they_are(
    discovery: Discovery, method: str, tool: str | None
) -> None:
    extension = discovery.extension(method)
    kept = seller_declaration({"bazaar": extension})
    assert kept == extension
    assert declared_tool(kept) == tool


def test_a_schemas_patterns_are_data_not_run() -> None:
    """The schema is listed as the seller wrote it; nothing of it decides what is kept, so a pattern
    that would backtrack for ever is never compiled (checking ``info`` against it would be)."""
    extension = WEATHER.extension("GET")
    extension["schema"]["properties"]["input"]["properties"]["queryParams"]["pattern"] = "^(a+)+$"
    extension["info"]["input"]["queryParams"] = {"city": "a" * 60 + "!"}
    assert seller_declaration({"bazaar": extension}) == extension


def http(**input_fields: Any) -> dict[str, Any]:
    schema = {"type": "object", "properties": {"input": {"type": "object"}}}
    return {"bazaar": {"info": {"input": {"type": "http", "method": "GET", **input_fields}}, "schema": schema}}


def deep(levels: int) -> Any:
    node: Any = "x"
    for _ in range(levels):
        node = [node]
    return node


@pytest.mark.parametrize(
    "extensions",
    [
        None,
        [],
        {"bazaar": "yes"},
        {"bazaar": {"info": {"input": {"type": "http", "method": "GET"}}}},  # no schema
        {"bazaar": {"info": {"input": {"type": "http", "method": "GET"}}, "schema": {"type": "object"}}},
        http(method="TRACE"),
        http(extra="field"),
        http(body={"a": 1}),  # a body on a query method
        http(method="POST", body={}),  # no bodyType
        http(method="POST", bodyType="xml", body={}),
        http(headers={"a": 1}),
        http(queryParams=[1]),
        http(queryParams={"$ref": "https://evil.test/schema.json"}),  # only references inside itself
        http(queryParams={"a": "x" * MAX_DECLARATION_CHARS}),
        http(queryParams={"a": ["x"] * 1_000_000}),
        http(queryParams={"a": deep(100_000)}),  # no recursion: refused, not a RecursionError
        http(queryParams={"a": {"b": object()}}),  # not JSON
        {"bazaar": {"info": {"input": {"type": "mcp", "toolName": "", "inputSchema": {}}}, "schema": {}}},
    ],
)
def test_anything_else_is_not_kept(extensions: Any) -> None:
    assert seller_declaration(extensions) is None


@pytest.mark.parametrize("name", ["", " ", "a\nb", "a\x00", "x" * 201, 7])
def test_a_tool_is_named_in_one_printable_line(name: Any) -> None:
    extension = TOOL.extension("POST")
    extension["info"]["input"]["toolName"] = name
    assert seller_declaration({"bazaar": extension}) is None
