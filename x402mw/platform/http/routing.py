"""Routes that carry their own documentation: an `ApiRoute` is a Starlette route of one method with
the `Operation` the OpenAPI document says of it (`x402mw.platform.openapi.document` walks the route
tables, mounts included, and reads each route's operation; there is no other list of operations).

::

    routes = [
        ApiRoute(
            "GET",
            "/refunds/{refund_id}",
            retrieve,
            Operation(
                id="retrieveRefund", tag="Refunds", summary="Retrieve a refund", answer=RefundEnvelope, errors=(404,)
            ),
        ),
    ]

What an operation implies is added by the document: the API key and its 401 (unless ``public``),
``Idempotency-Key`` on a POST that takes a key, 400 and 413 with a body, 503 unless ``standalone``,
and each ``{name}`` of the path as a parameter described by its name (a path parameter given in
``parameters`` replaces that description).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from starlette.routing import Route

from x402mw.platform.http.fields import NO_NUL, UUID_PATTERN

__all__ = [
    "ETAG",
    "IF_NONE_MATCH",
    "LIST_PARAMS",
    "NOT_MODIFIED",
    "STRING",
    "TEXT",
    "UUID",
    "Answer",
    "ApiRoute",
    "Operation",
    "Schema",
    "enum",
    "header",
    "path",
    "query",
]

Schema = dict[str, Any]

STRING: Schema = {"type": "string"}
TEXT: Schema = {"type": "string", "pattern": NO_NUL}
"""A string in a request: no JSON string a request carries may hold NUL (`read_json` refuses it)."""
UUID: Schema = {"type": "string", "pattern": UUID_PATTERN}
LIST_PARAMS: list[Schema] = [
    {"$ref": "#/components/parameters/" + name} for name in ("limit", "starting_after", "ending_before")
]
"""The parameters of a list (`x402mw.platform.http.pagination`): ``limit``, ``starting_after``, ``ending_before``."""


def enum(*values: str) -> Schema:
    """A string parameter taking one of ``values``."""
    return {"type": "string", "enum": list(values)}


def query(name: str, description: str, schema: Schema) -> Schema:
    """A query parameter; a value its schema refuses is a 400 naming it."""
    return {"name": name, "in": "query", "description": description, "schema": schema}


def header(name: str, description: str, schema: Schema) -> Schema:
    """An optional request header."""
    return {"name": name, "in": "header", "required": False, "description": description, "schema": schema}


def path(name: str, description: str, schema: Schema) -> Schema:
    """A path parameter described otherwise than its name says elsewhere."""
    return {"name": name, "in": "path", "required": True, "description": description, "schema": schema}


@dataclass(frozen=True, kw_only=True)
class Answer:
    """An answer an operation documents besides its success and its errors' envelopes."""

    status: int
    description: str
    model: type[BaseModel] | None = None  # None: no body (304)
    headers: Mapping[str, str] = field(default_factory=dict)  # string headers, by name: their description


@dataclass(frozen=True, kw_only=True)
class Operation:
    """What the OpenAPI document says of one route: its id, tag, summary and description; the
    response model it answers with ``status`` (and that answer's ``headers``), the error statuses it
    documents and any other ``answers``; the body model it validates and the parameters it reads
    (query and header parameters, as `query` and `header` make them)."""

    id: str
    tag: str
    summary: str
    description: str = ""
    answer: type[BaseModel]
    status: int = 200
    body: type[BaseModel] | None = None
    body_required: bool = True
    parameters: Sequence[Schema] = ()
    errors: tuple[int, ...] = ()
    public: bool = False  # no API key
    standalone: bool = False  # answers without the database or a chain: never 503
    deprecated: bool = False
    headers: Mapping[str, str] = field(default_factory=dict)  # the success answer's string headers
    answers: Sequence[Answer] = ()


# A read answering an `ETag` that takes `If-None-Match`: 304 without a body while unchanged.
ETAG = {"ETag": "the answer's entity tag, for `If-None-Match`"}
IF_NONE_MATCH = header(
    "If-None-Match",
    "an `ETag` of an earlier answer: 304 without a body while it is still the current one",
    STRING,
)
NOT_MODIFIED = Answer(
    status=304, description="Not modified: the answer would be the one `If-None-Match` names", headers=ETAG
)


class ApiRoute(Route):
    """A route of one method and its `Operation` (HEAD is answered too where the method is GET)."""

    def __init__(
        self,
        method: str,
        path: str,
        endpoint: Callable[..., Any],
        operation: Operation,
        *,
        name: str | None = None,
    ) -> None:
        super().__init__(path, endpoint, methods=[method], name=name)
        self.operation = operation
