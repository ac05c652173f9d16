"""What a paid route takes and gives, for agents that search: the x402 ``bazaar`` extension.

A route declares a `Discovery`; its 402 carries it under ``extensions.bazaar`` (``info`` and the
JSON Schema that validates it), and the seller's ``/.well-known/x402`` manifest lists it. The same
declaration serves an MCP tool (`Discovery.tool`)::

    PaidRoute("<endpoint id>", discovery=Discovery(
        query={"city": "Paris"},
        query_schema={"properties": {"city": {"type": "string"}}, "required": ["city"]},
        output={"forecast": "sunny"},
    ))
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from x402mw.errors import ConfigurationError

BAZAAR = "bazaar"
_SCHEMA_DRAFT = "https://json-schema.org/draft/2020-12/schema"
_QUERY_METHODS = ("GET", "HEAD", "DELETE")
_BODY_METHODS = ("POST", "PUT", "PATCH")
_OUTPUT_SCHEMA = {"type": "object", "properties": {"type": {"type": "string"}, "example": {}}, "required": ["type"]}
_HEADERS_SCHEMA = {"type": "object", "additionalProperties": {"type": "string"}}


@dataclass(frozen=True, slots=True)
class Discovery:
    """A route's (or an MCP tool's) call contract, as the Bazaar extension describes it.

    HTTP query routes: ``query`` (example query parameters) and ``query_schema`` (a JSON Schema
    object's ``properties``/``required``). Body routes: ``body`` (an example), ``body_schema`` and
    ``body_type``. Either: ``output`` (an example response) and ``output_schema``. MCP tools: see
    `tool`. The HTTP method is the route's (or the request's, for a route of any method).
    """

    query: Mapping[str, Any] | None = None
    query_schema: Mapping[str, Any] | None = None
    body: Any = None
    body_schema: Mapping[str, Any] | None = None
    body_type: Literal["json", "form-data", "text"] = "json"
    output: Any = None
    output_schema: Mapping[str, Any] | None = None
    output_type: str = "json"
    tool_name: str | None = None
    tool_description: str | None = None
    transport: Literal["streamable-http", "sse"] | None = None
    _wire: dict[str, str] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        problems = []
        for name in ("query", "query_schema", "body_schema", "output_schema"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Mapping):
                problems.append(f"Discovery.{name} must be a mapping")
        if self.tool_name is not None and (not isinstance(self.tool_name, str) or not self.tool_name.strip()):
            problems.append("Discovery.tool_name must be the MCP tool's name")
        try:
            json.dumps([self.query, self.query_schema, self.body, self.body_schema, self.output, self.output_schema])
        except (TypeError, ValueError) as exc:
            problems.append(f"Discovery examples and schemas must be JSON: {exc}")
        if problems:
            raise ConfigurationError(problems)

    @classmethod
    def tool(
        cls,
        name: str,
        input_schema: Mapping[str, Any],
        *,
        description: str | None = None,
        example: Mapping[str, Any] | None = None,
        output: Any = None,
        transport: Literal["streamable-http", "sse"] | None = None,
    ) -> Discovery:
        """An MCP tool's declaration: its name and the JSON Schema of its arguments (the one the
        tool already declares to MCP)."""
        return cls(
            tool_name=name,
            tool_description=description,
            body=dict(example) if example is not None else None,
            body_schema=input_schema,
            output=output,
            transport=transport,
        )

    @property
    def kind(self) -> Literal["http", "mcp"]:
        return "mcp" if self.tool_name else "http"

    def extension(self, method: str) -> dict[str, Any]:
        """The ``bazaar`` extension (``info`` and ``schema``) for a request of ``method``."""
        return json.loads(self.extension_json(method))  # type: ignore[no-any-return]

    def extension_json(self, method: str) -> str:
        """`extension` as compact JSON, built once per method (a 402 splices it in as text)."""
        method = method.upper()
        cached = self._wire.get(method)
        if cached is None:
            info, schema = self._build(method)
            cached = json.dumps({"info": info, "schema": schema}, separators=(",", ":"), ensure_ascii=False)
            self._wire[method] = cached
        return cached

    def contract(self, method: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """The ``input`` and ``output`` of the info, for the well-known manifest."""
        info, _ = self._build(method.upper())
        return info["input"], info.get("output")

    def _build(self, method: str) -> tuple[dict[str, Any], dict[str, Any]]:
        props: dict[str, Any]
        info_input: dict[str, Any]
        if self.tool_name:
            info_input = {"type": "mcp", "toolName": self.tool_name}
            if self.tool_description:
                info_input["description"] = self.tool_description
            if self.transport:
                info_input["transport"] = self.transport
            info_input["inputSchema"] = dict(self.body_schema or {"type": "object", "properties": {}})
            if self.body is not None:
                info_input["example"] = self.body
            props = {
                "type": {"type": "string", "const": "mcp"},
                "toolName": {"type": "string"},
                "description": {"type": "string"},
                "transport": {"type": "string", "enum": ["streamable-http", "sse"]},
                "inputSchema": {"type": "object"},
                "example": {"type": "object"},
            }
            required = ["type", "toolName", "inputSchema"]
        elif method in _BODY_METHODS:
            info_input = {"type": "http", "method": method, "bodyType": self.body_type}
            info_input["body"] = self.body if self.body is not None else {}
            if self.query:
                info_input["queryParams"] = dict(self.query)
            body_schema: dict[str, Any] = {"type": "object", **dict(self.body_schema or {})}
            if self.body_type != "json" or not isinstance(info_input["body"], dict):
                body_schema = {}
            props = {
                "type": {"type": "string", "const": "http"},
                "method": {"type": "string", "enum": list(_BODY_METHODS)},
                "bodyType": {"type": "string", "enum": ["json", "form-data", "text"]},
                "body": body_schema,
                "queryParams": {"type": "object", **dict(self.query_schema or {})},
                "headers": _HEADERS_SCHEMA,
            }
            required = ["type", "method", "bodyType", "body"]
        else:
            info_input = {"type": "http", "method": method if method in _QUERY_METHODS else "GET"}
            if self.query:
                info_input["queryParams"] = dict(self.query)
            props = {
                "type": {"type": "string", "const": "http"},
                "method": {"type": "string", "enum": list(_QUERY_METHODS)},
                "queryParams": {"type": "object", **dict(self.query_schema or {})},
                "headers": _HEADERS_SCHEMA,
            }
            required = ["type", "method"]
        info: dict[str, Any] = {"input": info_input}
        properties: dict[str, Any] = {
            "input": {"type": "object", "properties": props, "required": required, "additionalProperties": False}
        }
        if self.output is not None:
            info["output"] = {"type": self.output_type, "example": self.output}
            output_schema = json.loads(json.dumps(_OUTPUT_SCHEMA))
            if self.output_schema:
                output_schema["properties"]["example"] = dict(self.output_schema)
            properties["output"] = output_schema
        schema = {"$schema": _SCHEMA_DRAFT, "type": "object", "properties": properties, "required": ["input"]}
        return info, schema


def discovery_from_openapi(document: Mapping[str, Any], method: str, path: str) -> Discovery | None:
    """A `Discovery` derived from an OpenAPI 3 document's operation (FastAPI's ``app.openapi()``):
    query parameters, the JSON body and the 200 response's schema and example, with the document's
    ``#/components`` references inlined. None when the document has no such operation."""
    operation = ((document.get("paths") or {}).get(path) or {}).get(method.lower())
    if not isinstance(operation, Mapping):
        return None
    components = document.get("components") or {}

    def inline(node: Any, depth: int = 0) -> Any:
        if depth > 32:  # a recursive model: stop describing it
            return {}
        if isinstance(node, Mapping):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/components/"):
                target: Any = components
                for part in ref.removeprefix("#/components/").split("/"):
                    target = target.get(part, {}) if isinstance(target, Mapping) else {}
                return inline(target, depth + 1)
            return {k: inline(v, depth + 1) for k, v in node.items() if k != "$ref"}
        if isinstance(node, list):
            return [inline(v, depth + 1) for v in node]
        return node

    query_props: dict[str, Any] = {}
    query_required: list[str] = []
    query_example: dict[str, Any] = {}
    for parameter in operation.get("parameters") or []:
        parameter = inline(parameter)
        if parameter.get("in") != "query" or not isinstance(parameter.get("name"), str):
            continue
        schema = parameter.get("schema") or {}
        query_props[parameter["name"]] = schema
        if parameter.get("required"):
            query_required.append(parameter["name"])
        example = parameter.get("example", schema.get("example", schema.get("default")))
        if example is not None:
            query_example[parameter["name"]] = example
    body_schema: dict[str, Any] | None = None
    body_example: Any = None
    content = ((operation.get("requestBody") or {}).get("content") or {}).get("application/json")
    if isinstance(content, Mapping):
        body_schema = inline(content.get("schema") or {})
        body_example = content.get("example", (body_schema or {}).get("example"))
    output_schema: dict[str, Any] | None = None
    output_example: Any = None
    responses = operation.get("responses") or {}
    answer = (((responses.get("200") or responses.get("201") or {}).get("content")) or {}).get("application/json")
    if isinstance(answer, Mapping):
        output_schema = inline(answer.get("schema") or {}) or None
        output_example = answer.get("example", (output_schema or {}).get("example"))
        if output_example is None and output_schema:
            output_example = _example(output_schema)
    query_schema = {"properties": query_props, **({"required": query_required} if query_required else {})}
    return Discovery(
        query=query_example or None,
        query_schema=query_schema if query_props else None,
        body=body_example if body_example is not None else ({} if body_schema is not None else None),
        body_schema=body_schema,
        output=output_example,
        output_schema=output_schema,
    )


def _example(schema: Any, depth: int = 0) -> Any:
    """A value that the JSON Schema ``schema`` accepts, made up from its types, examples, defaults
    and enums (for a route that declares a response schema but no example)."""
    if not isinstance(schema, Mapping) or depth > 8:
        return None
    for key in ("example", "default", "const"):
        if key in schema:
            return schema[key]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            return _example(next((o for o in options if o.get("type") != "null"), options[0]), depth + 1)
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        properties = schema.get("properties") or {}
        return {name: _example(sub, depth + 1) for name, sub in properties.items()}
    if kind == "array":
        return []
    return {"string": "string", "integer": 0, "number": 0, "boolean": False}.get(str(kind))


def well_known_manifest(origin: str, entries: list[dict[str, Any]], last_updated: int) -> dict[str, Any]:
    """The ``/.well-known/x402`` manifest (the draft's shape): ``entries`` are the routes'
    origin-free items, whose ``resource.url`` is a path until this fills in ``origin``."""
    items = []
    for entry in entries:
        item = dict(entry)
        item["resource"] = {**entry["resource"], "url": origin + entry["resource"]["url"]}
        items.append(item)
    return {"x402Version": 2, "lastUpdated": last_updated, "items": items}
