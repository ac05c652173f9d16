"""Reading request bodies: JSON objects validated by pydantic models into documented 400s."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, GetJsonSchemaHandler, ValidationError
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema
from starlette.requests import Request

from x402mw.platform.http.errors import HttpError
from x402mw.platform.http.values import unstorable
from x402mw.protocol import bounded_json
from x402mw.protocol.prices import json_number

PAYMENT_PREFIX = "pi_"
"""The prefix a payment intent's id may carry wherever the API takes it (its ``checkoutUrl`` shows it so)."""

M = TypeVar("M", bound=BaseModel)
MAX_BODY_BYTES = 1024 * 1024


async def _body(request: Request) -> bytes:
    """The request body, read only as far as `MAX_BODY_BYTES` (413 past it)."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise HttpError(413, "body_too_large", "Request body is larger than 1 MiB")
    return bytes(body)


async def read_json(request: Request, *, allow_empty: bool = False) -> Any:
    """The request's JSON object: 413 ``body_too_large`` past `MAX_BODY_BYTES`; 400 ``body_missing``
    (unless ``allow_empty``, which gives ``{}``), ``invalid_json``, ``json_too_deep`` (arrays and
    objects nested deeper than `bounded_json.MAX_DEPTH`, refused before they are parsed) or
    ``parameter_invalid`` (a NUL character or an unpaired surrogate, ``param`` naming where)."""
    body = await _body(request)
    if not body.strip():
        if allow_empty:
            return {}
        raise HttpError(400, "body_missing", "Request body must be a JSON object")
    try:
        data = bounded_json.loads(body, max_bytes=MAX_BODY_BYTES, parse_float=json_number)
    except bounded_json.JsonLimitError as exc:
        if exc.code == "json_too_large":
            raise HttpError(413, "body_too_large", "Request body is larger than 1 MiB") from None
        message = f"Request body is nested more than {exc.limit} levels deep (arrays and objects)"
        raise HttpError(400, "json_too_deep", message) from None
    except ValueError:
        raise HttpError(400, "invalid_json", "Request body is not valid JSON") from None
    if not isinstance(data, dict):
        raise HttpError(400, "invalid_json", "Request body must be a JSON object")
    if _UNSTORABLE_ESCAPE.search(body):
        found = _unstorable_at(data, ())
        if found is not None:
            where, what = _param(found[0]), found[1]
            raise HttpError(400, "parameter_invalid", f"Invalid {where}: contains {what}", param=where)
    return data


# JSON spells NUL and half a UTF-16 pair only as escapes. No stored text can hold either (PostgreSQL
# refuses both; a lone surrogate cannot even be encoded as UTF-8), so they are refused on the way in.
_UNSTORABLE_ESCAPE = re.compile(rb"\\u(?:0000|[dD][89a-fA-F])")


def _unstorable_at(value: Any, path: tuple[str, ...]) -> tuple[tuple[str, ...], str] | None:
    """Where in ``value`` the first key or string that no stored text can hold sits, and why."""
    if isinstance(value, str):
        what = unstorable(value)
        return None if what is None else (path, what)
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        here = (*path, str(key))
        what = unstorable(key) if isinstance(key, str) else None
        found = (here, what) if what is not None else _unstorable_at(item, here)
        if found is not None:
            return found
    return None


def _param(parts: Iterable[object]) -> str:
    """The dotted path of a field, as ``param`` names it: cut at 200 characters, since a key the
    request invented may be as long as the body, and a lone surrogate in it spelled ``\\ud800``
    (the answer is UTF-8)."""
    return ".".join(str(part) for part in parts)[:200].encode("utf-8", "backslashreplace").decode()


def parse_body(model: type[M], data: Any, *, prefix: str = "") -> M:
    """Validate ``data`` with ``model``; the first problem becomes a 400 naming its ``param``
    (``prefix`` names where ``data`` sits in the request body, e.g. ``"accepted."``)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = first.get("loc", ())
        param = _param([prefix.rstrip("."), *loc] if prefix else loc)  # "" for a key spelled ""
        if not loc and not prefix:  # a check of the whole body: nothing narrower to name
            message = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
            raise HttpError(400, "invalid_json", f"Invalid request body: {message}") from None
        kind = first.get("type", "")
        if kind == "missing":
            raise HttpError(400, "parameter_missing", f"Missing required parameter: {param}", param=param) from None
        if kind == "extra_forbidden":
            raise HttpError(400, "parameter_unknown", f"Received unknown parameter: {param}", param=param) from None
        message = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
        raise HttpError(400, "parameter_invalid", f"Invalid {param}: {message}", param=param) from None


class PatchBody(BaseModel):
    """The body of a PATCH: a field left out keeps its value; ``null`` clears the fields named in
    ``CLEARABLE`` and is refused for the others. Its JSON schema says the same (only those fields
    take ``null``), so the OpenAPI document and the handler cannot disagree."""

    CLEARABLE: ClassVar[frozenset[str]] = frozenset()

    def changes(self) -> dict[str, Any]:
        """The fields the request sent, by name; a 400 naming the first one sent as an unclearable ``null``."""
        changes = self.model_dump(exclude_unset=True)
        for key, value in changes.items():
            if value is None and key not in self.CLEARABLE:
                raise HttpError(400, "parameter_invalid", f"{key} cannot be null", param=key)
        return changes

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        answer = handler(schema)
        for name, field in handler.resolve_ref_schema(answer)["properties"].items():
            options = field.get("anyOf")
            if name in cls.CLEARABLE or not options:
                continue
            kept = [option for option in options if option != {"type": "null"}]
            del field["anyOf"]
            present = kept[0] if len(kept) == 1 else {"anyOf": kept}
            field |= {key: value for key, value in present.items() if key not in field}  # the field's description wins
            if "default" in field and field["default"] is None:  # "leave it out", not a value to send
                del field["default"]
        return answer


def path_uuid(request: Request, name: str, what: str, *, prefix: str = "") -> str:
    """The path parameter ``name``, a bare UUID in canonical form (or, with ``prefix``, also that
    prefix and the UUID: ``pi_<uuid>`` as a payment intent's ``checkoutUrl`` shows it); 404
    ``resource_missing`` otherwise."""
    raw: str = request.path_params[name]
    bare = raw.removeprefix(prefix) if prefix else raw
    try:
        canonical = str(uuid.UUID(bare))
    except ValueError:
        raise HttpError.missing(what, raw) from None
    if canonical != bare.lower():
        raise HttpError.missing(what, raw)
    return canonical
