"""A seller's ``bazaar`` declaration as the discovery catalogue keeps it: bounded, and checked by its
shape, never executed.

Only the seller's own word reaches here: the route's declaration that the seller middleware sends
in its settlement call (``POST /agent/settlements``, field ``extensions``), never the payer's
``paymentPayload.extensions``. Even so, the declaration's JSON Schema is kept as data and never
compiled: its ``pattern``, ``patternProperties`` and ``format`` keywords would run regular
expressions the declaration chose, on the event loop that serves every merchant. What the
catalogue lists is checked instead against the ``info`` structure the extension's specification
defines (``input`` of type ``http`` with its method, ``bodyType``, ``body``, ``queryParams``,
``headers`` and ``pathParams``, or of type ``mcp`` with its ``toolName`` and ``inputSchema``;
``output`` with its ``type``), in one pass that stops at the first node past its bounds.
"""

from __future__ import annotations

from numbers import Number
from typing import Any

MAX_DECLARATION_CHARS = 32_768
"""A declaration larger than this (its keys and strings, in characters, and 8 for other values) is
not listed."""
MAX_DEPTH = 32
MAX_NODES = 4_096
MAX_TOOL_NAME = 200

_QUERY_METHODS = ("GET", "HEAD", "DELETE")
_BODY_METHODS = ("POST", "PUT", "PATCH")
_BODY_TYPES = ("json", "form-data", "text")
_TRANSPORTS = ("streamable-http", "sse")
_HTTP_FIELDS = frozenset({"type", "method", "queryParams", "headers", "pathParams", "bodyType", "body"})
_MCP_FIELDS = frozenset({"type", "toolName", "description", "transport", "inputSchema", "example"})
_OUTPUT_FIELDS = frozenset({"type", "format", "example"})


def seller_declaration(extensions: Any) -> dict[str, Any] | None:
    """The ``bazaar`` declaration of a seller's ``extensions`` (``{"info", "schema"}``) when it is
    within bounds, refers only inside itself and has the extension's shape; None otherwise."""
    declared = extensions.get("bazaar") if isinstance(extensions, dict) else None
    if not isinstance(declared, dict) or not _bounded(declared):
        return None
    info, schema = declared.get("info"), declared.get("schema")
    if not isinstance(info, dict) or not isinstance(schema, dict) or set(info) - {"input", "output"}:
        return None
    if not _valid_input(info.get("input")):
        return None
    if "output" in info and not _valid_output(info["output"]):
        return None
    properties = schema.get("properties")
    if not isinstance(properties, dict) or not isinstance(properties.get("input"), dict):
        return None  # the extension's schema must describe the input
    return {"info": info, "schema": schema}


def declared_tool(declaration: dict[str, Any] | None) -> str | None:
    """The MCP tool a checked declaration is for, or None for an HTTP route."""
    if declaration is None or declaration["info"]["input"]["type"] != "mcp":
        return None
    return str(declaration["info"]["input"]["toolName"])


def _bounded(value: Any) -> bool:
    """Whether a JSON value stays within `MAX_DECLARATION_CHARS`, `MAX_DEPTH` and `MAX_NODES`, holds
    only JSON values, and has only same-document ``$ref``/``$id`` values (``#...``). Iterative: no
    nesting can exhaust the stack, and no container is walked past the first node out of bounds."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    size = nodes = 0
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if nodes > MAX_NODES or depth > MAX_DEPTH:
            return False
        if isinstance(node, dict):
            if len(node) > MAX_NODES:
                return False
            for key, item in node.items():
                if not isinstance(key, str):
                    return False
                if key in ("$ref", "$id") and not (isinstance(item, str) and item.startswith("#")):
                    return False
                size += len(key) + 4
                stack.append((item, depth + 1))
        elif isinstance(node, list):
            if len(node) > MAX_NODES:
                return False
            size += 2
            stack.extend((item, depth + 1) for item in node)
        elif isinstance(node, str):
            size += len(node) + 2
        elif node is None or isinstance(node, (bool, Number)):
            size += 8
        else:
            return False
        if size > MAX_DECLARATION_CHARS:
            return False
    return True


def _valid_input(given: Any) -> bool:
    if not isinstance(given, dict):
        return False
    kind = given.get("type")
    if kind == "mcp":
        return _valid_tool(given)
    if kind != "http" or set(given) - _HTTP_FIELDS:
        return False
    method = given.get("method")
    for name in ("queryParams", "pathParams", "headers"):
        if name in given and not isinstance(given[name], dict):
            return False
    if not all(isinstance(v, str) for v in (given.get("headers") or {}).values()):
        return False
    if method in _QUERY_METHODS:
        return "bodyType" not in given and "body" not in given
    return method in _BODY_METHODS and given.get("bodyType") in _BODY_TYPES and "body" in given


def _valid_tool(given: dict[str, Any]) -> bool:
    name = given.get("toolName")
    return (
        not set(given) - _MCP_FIELDS
        and isinstance(name, str)
        and 0 < len(name) <= MAX_TOOL_NAME
        and bool(name.strip())
        and name.isprintable()
        and isinstance(given.get("inputSchema"), dict)
        and isinstance(given.get("description", ""), str)
        and given.get("transport", _TRANSPORTS[0]) in _TRANSPORTS
        and isinstance(given.get("example", {}), dict)
    )


def _valid_output(given: Any) -> bool:
    return (
        isinstance(given, dict)
        and not set(given) - _OUTPUT_FIELDS
        and isinstance(given.get("type"), str)
        and 0 < len(given["type"]) <= 100
        and isinstance(given.get("format", ""), str)
    )
