"""Render the API reference page (``docs/api-reference.md``) from the OpenAPI document.

::

    python -m x402mw.platform.openapi.reference > docs/api-reference.md

A test checks that the page in the repository equals ``render_markdown(build_document())``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

Schema = dict[str, Any]
_SCHEMAS = "#/components/schemas/"
_SHORT_PATTERN = 80
NO_NUL = r"^[^\x00]*$"  # every free string's pattern (x402mw.platform.http.fields.NO_NUL): said once, above

_HEADER = """\
# API reference

<!-- Generated from the OpenAPI document: do not edit by hand. -->

This page is generated from the OpenAPI 3.1 document that the platform serves at
`GET /v1/openapi.json`. After changing the API, regenerate it with

```
python -m x402mw.platform.openapi.reference > docs/api-reference.md
```
"""


def render_markdown(document: Schema) -> str:
    """The reference page: the API's conventions, one section per tag with each of its operations,
    then every object the operations take or answer."""
    return "\n".join(_page(document)).rstrip("\n") + "\n"


def _page(document: Schema) -> Iterator[str]:
    yield _HEADER
    yield _one_line(document["info"]["description"]) + "\n"
    server = document["servers"][0]
    default = server["variables"]["api_host"]["default"]
    yield f"Version {document['info']['version']}. `{{api_host}}` is {server['description']}, e.g. `{default}`.\n"
    operations = [
        (method, path, operation) for path, item in document["paths"].items() for method, operation in item.items()
    ]
    for tag in document["tags"]:
        yield f"## {tag['name']}\n"
        yield tag["description"] + "\n"
        for method, path, operation in operations:
            if tag["name"] in operation["tags"]:
                yield from _operation(document, method, path, operation)
    yield "## Objects\n"
    for name, schema in document["components"]["schemas"].items():
        yield f"### {name}\n"
        if schema.get("description"):
            yield _one_line(schema["description"]) + "\n"
        yield from _fields(schema)


def _operation(document: Schema, method: str, path: str, operation: Schema) -> Iterator[str]:
    yield f"### {operation['summary']}\n"
    auth = "API key" if operation["security"] else "none"
    yield f"`{method.upper()} {path}` · auth: {auth} · operationId `{operation['operationId']}`\n"
    if operation["description"]:
        yield operation["description"] + "\n"
    parameters = [_resolve(document, p) for p in operation.get("parameters", [])]
    if parameters:
        yield "| parameter | in | type | required | description |\n|---|---|---|---|---|"
        for p in parameters:
            row = [f"`{p['name']}`", p["in"], _type(p["schema"]), _yes(p.get("required", False)), _describe(p)]
            yield _row(row)
        yield ""
    if "requestBody" in operation:
        schema = operation["requestBody"]["content"]["application/json"]["schema"]
        yield f"Request body: {_type(schema)}\n"
        yield from _fields(_resolve(document, schema))
    yield "Responses:\n"
    for status, response in operation["responses"].items():
        response = _resolve(document, response)
        if "content" not in response:  # 304: no body
            yield f"- `{status}` {response['description']}"
            continue
        schema = response["content"]["application/json"]["schema"]
        yield f"- `{status}` {response['description']} — {_type(schema)}"
    yield ""


def _fields(schema: Schema) -> Iterator[str]:
    properties: Schema = schema.get("properties", {})
    if not properties:
        yield f"Type: {_type(schema)}\n"
        return
    required = set(schema.get("required", []))
    yield "| field | type | required | description |\n|---|---|---|---|"
    for name, field in properties.items():
        yield _row([f"`{name}`", _type(field), _yes(name in required), _describe(field)])
    yield ""


def _type(schema: Schema) -> str:
    if "$ref" in schema:
        name = schema["$ref"].removeprefix(_SCHEMAS)
        return f"[{name}](#{name.lower()})"
    if "anyOf" in schema:
        return " or ".join(_type(s) for s in schema["anyOf"])
    if "const" in schema:
        return f'`"{schema["const"]}"`'
    if "enum" in schema:
        return " or ".join(f'`"{value}"`' for value in schema["enum"])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if kind == "object" and "properties" in schema:
        return "{" + ", ".join(f"{name}: {_type(s)}" for name, s in schema["properties"].items()) + "}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"map of {_type(schema['additionalProperties'])}"
    return str(kind)


def _describe(schema: Schema) -> str:
    inner = schema.get("schema", schema)
    branches = [s for s in inner.get("anyOf", []) if s.get("type") != "null"]
    if len(branches) == 1:
        inner = branches[0] | {k: v for k, v in inner.items() if k != "anyOf"}
    text = schema.get("description") or inner.get("description")
    parts = [_one_line(text)] if text else []
    limits = [
        f"{label} {inner[key]}"
        for key, label in (
            ("minimum", "min"),
            ("maximum", "max"),
            ("minLength", "min length"),
            ("maxLength", "max length"),
            ("maxItems", "at most"),
        )
        if key in inner
    ]
    pattern = inner.get("pattern")
    if pattern and pattern != NO_NUL and len(pattern) <= _SHORT_PATTERN:  # a long one is described in words
        limits.append(f"pattern `{pattern}`")
    if inner.get("default") is not None:
        limits.append(f"default `{json.dumps(inner['default'])}`")
    if limits:
        parts.append("(" + ", ".join(limits) + ")")
    return " ".join(parts)


def _resolve(document: Schema, node: Schema) -> Schema:
    while "$ref" in node:
        target: Any = document
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node = target
    return node


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def main() -> None:
    from x402mw.platform.openapi.document import build_document

    sys.stdout.write(render_markdown(build_document()))


if __name__ == "__main__":
    main()
