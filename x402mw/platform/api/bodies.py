"""Reading request bodies: JSON objects validated by pydantic models into documented 400s."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, GetJsonSchemaHandler, ValidationError
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema
from starlette.requests import Request

from x402mw.platform.api.errors import ApiError
from x402mw.protocol.prices import json_number

__all__ = ["MAX_BODY_BYTES", "PatchBody", "iso", "parse_body", "path_uuid", "read_json"]

M = TypeVar("M", bound=BaseModel)
MAX_BODY_BYTES = 1024 * 1024


def iso(value: datetime | None) -> str | None:
    """ISO 8601 UTC with milliseconds: ``2026-11-21T23:25:16.464Z``."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def read_json(request: Request, *, allow_empty: bool = False) -> Any:
    body = await request.body()
    if len(body) > MAX_BODY_BYTES:
        raise ApiError(413, "body_too_large", "Request body is larger than 1 MiB")
    if not body.strip():
        if allow_empty:
            return {}
        raise ApiError(400, "body_missing", "Request body must be a JSON object")
    try:
        data = json.loads(body, parse_float=json_number)
    except (ValueError, RecursionError):
        raise ApiError(400, "invalid_json", "Request body is not valid JSON") from None
    if not isinstance(data, dict):
        raise ApiError(400, "invalid_json", "Request body must be a JSON object")
    if b"\\u0000" in body:  # JSON spells NUL only as this escape; no stored text can hold it
        where = _nul_at(data)
        if where is not None:
            raise ApiError(400, "parameter_invalid", f"Invalid {where}: contains a NUL character", param=where)
    if b"\\ud" in body.lower():  # an unpaired surrogate escape: no UTF-8 text, stored or answered, can hold it
        where = _nul_at(data, unpaired=True)
        if where is not None:
            raise ApiError(400, "parameter_invalid", f"Invalid {where}: contains an unpaired surrogate", param=where)
    return data


def _unfit(text: str, unpaired: bool) -> bool:
    if not unpaired:
        return "\x00" in text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _nul_at(value: Any, path: str = "", *, unpaired: bool = False) -> str | None:
    """The dotted path of the first key or string in ``value`` that holds a NUL character (with
    ``unpaired``: a surrogate without its pair, which UTF-8 cannot encode)."""
    if isinstance(value, str):
        return (path or "body") if _unfit(value, unpaired) else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        here = f"{path}.{key}" if path else str(key)
        if _unfit(str(key), unpaired):
            return here.encode("utf-8", "backslashreplace").decode()
        found = _nul_at(item, here, unpaired=unpaired)
        if found is not None:
            return found.encode("utf-8", "backslashreplace").decode()
    return None


def parse_body(model: type[M], data: Any, *, prefix: str = "") -> M:
    """Validate ``data`` with ``model``; the first problem becomes a 400 naming its ``param``
    (``prefix`` names where ``data`` sits in the request body, e.g. ``"accepted."``)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = prefix + ".".join(str(p) for p in first.get("loc", ()))
        kind = first.get("type", "")
        if kind == "missing":
            raise ApiError(400, "parameter_missing", f"Missing required parameter: {param}", param=param) from None
        if kind == "extra_forbidden":
            raise ApiError(400, "parameter_unknown", f"Received unknown parameter: {param}", param=param) from None
        message = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
        raise ApiError(400, "parameter_invalid", f"Invalid {param}: {message}", param=param) from None


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
                raise ApiError(400, "parameter_invalid", f"{key} cannot be null", param=key)
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
            field.update(kept[0] if len(kept) == 1 else {"anyOf": kept})
            if "default" in field and field["default"] is None:  # "leave it out", not a value to send
                del field["default"]
        return answer


def path_uuid(request: Request, name: str, what: str) -> str:
    """The path parameter ``name``, a bare UUID in canonical form; 404 ``resource_missing`` otherwise."""
    raw: str = request.path_params[name]
    try:
        canonical = str(uuid.UUID(raw))
    except ValueError:
        raise ApiError.missing(what, raw) from None
    if canonical != raw.lower():
        raise ApiError.missing(what, raw)
    return canonical
