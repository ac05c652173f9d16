"""The OpenAPI operation of one route: its `Operation` record (`x402mw.platform.http.routing`) with
what it implies written out (the API key, ``Idempotency-Key``, path parameters, the errors every
operation of its kind may answer). The response models stay classes here; the document puts their
generated schemas in place (see `x402mw.platform.openapi.document`)."""

from __future__ import annotations

from x402mw.platform.http.fields import CHALLENGE_ID_SCHEMA, UUID_PATTERN
from x402mw.platform.http.routing import STRING, UUID, Operation, Schema
from x402mw.platform.openapi.schemas import ref

ERRORS = {
    400: (
        "BadRequest",
        "Invalid request: a parameter is missing, unknown or invalid (`param` names it; a NUL character "
        "in any query parameter too), an `Idempotency-Key` was reused with another request "
        "(`idempotency_error`), or the URL path holds a control character (`url_invalid`).",
    ),
    401: ("Unauthorized", "The API key is missing, invalid or revoked."),
    404: ("NotFound", "No such object, or it belongs to another merchant (`resource_missing`)."),
    409: (
        "Conflict",
        "A request with this `Idempotency-Key` is still running (`idempotency_key_in_use`), or the request "
        "conflicts with the object's state (the operation names the codes).",
    ),
    413: ("PayloadTooLarge", "The request body is larger than 1 MiB."),
    422: ("Unprocessable", "The request is valid but cannot be carried out (e.g. `insufficient_balance`)."),
    429: (
        "TooManyRequests",
        "Rate limited (type `rate_limit_error`, code `rate_limited`): the public checkout endpoints count "
        "requests per client address and per payment intent; retry after `Retry-After` seconds.",
    ),
    503: (
        "ServiceUnavailable",
        "A dependency is down: the database (`database_unavailable`) or a chain's node (`chain_unavailable`). "
        "Nothing was taken or recorded; retry after `Retry-After` seconds, with the same `Idempotency-Key`.",
    ),
}
_MISSING = "; any other value answers 404 `resource_missing`, as an unknown id does"
# What a path parameter is, by its name (a route may describe one of its own otherwise: `routing.path`).
_PATH_PARAMS: dict[str, tuple[str, Schema]] = {
    "endpoint_id": ("id of an agent endpoint (a UUID)", UUID),
    "challenge_id": ("id of a challenge, as the seller middleware made it", CHALLENGE_ID_SCHEMA),
    "payment_id": (
        "id of an agent payment or of a payment intent (a UUID; a payment intent's also as `pi_<uuid>`, "
        "as its `checkoutUrl` shows it)",
        {"type": "string", "pattern": "^(pi_)?" + UUID_PATTERN.removeprefix("^")},
    ),
    "link_id": ("id of a payment link (a UUID)", UUID),
    "webhook_endpoint_id": ("id of a webhook endpoint (a UUID)", UUID),
    "event_id": ("id of an event (a UUID)", UUID),
    "refund_id": ("id of a refund (a UUID)", UUID),
    "plan_id": ("id of a subscription plan (a UUID)", UUID),
    "subscription_id": ("id of a subscription (a UUID)", UUID),
    "test_clock_id": ("id of a test clock (a UUID)", UUID),
    "channel_id": (
        "id of a payment channel (0x and 64 hex digits)",
        {"type": "string", "pattern": "^0x[0-9a-fA-F]{64}$"},
    ),
}
_REQUEST_ID = {"$ref": "#/components/headers/Request-Id"}


def _path_parameters(path: str, given: list[Schema]) -> list[Schema]:
    own = {parameter["name"]: parameter for parameter in given if parameter.get("in") == "path"}
    found = []
    for name in (part[1:-1] for part in path.split("/") if part.startswith("{") and part.endswith("}")):
        if name in own:
            found.append(own[name])
        else:
            text, schema = _PATH_PARAMS[name]
            found.append(
                {"name": name, "in": "path", "required": True, "description": text + _MISSING, "schema": schema}
            )
    return found


def _headers(headers: dict[str, str]) -> Schema:
    return {"Request-Id": _REQUEST_ID} | {
        name: {"description": text, "schema": STRING} for name, text in headers.items()
    }


def describe(method: str, path: str, op: Operation) -> Schema:
    """The OpenAPI operation of the route ``method path`` (``method`` in lower case) documented by
    ``op``; its answers name their response models (classes), for `x402mw.platform.openapi.document`
    to replace."""
    idempotent = method == "post" and not op.public
    given = list(op.parameters)
    parameters = [parameter for parameter in given if parameter.get("in") not in ("path", "header")]  # query
    if idempotent:
        parameters.append({"$ref": "#/components/parameters/Idempotency-Key"})
    parameters += _path_parameters(path, given)
    parameters += [parameter for parameter in given if parameter.get("in") == "header"]
    responses: Schema = {
        str(op.status): {
            "description": "Created" if op.status == 201 else "OK",
            "headers": _headers(dict(op.headers)),
            "content": {"application/json": {"schema": op.answer}},
        }
    }
    implied = (
        *(() if op.public else (401,)),
        *((400, 413) if op.body else ()),
        *((400, 409) if idempotent else ()),
        # a parameter its schema refuses; and for every operation, a NUL in the query or a control
        # character in the path (refused before any handler runs)
        400,
        *(() if op.standalone else (503,)),
    )
    for code in sorted({*op.errors, *implied}):
        responses[str(code)] = {"$ref": "#/components/responses/" + ERRORS[code][0]}
    for answer in op.answers:
        response: Schema = {"description": answer.description, "headers": _headers(dict(answer.headers))}
        if answer.model is not None:
            response["content"] = {"application/json": {"schema": answer.model}}
        responses[str(answer.status)] = response
    operation: Schema = {
        "operationId": op.id,
        "tags": [op.tag],
        "summary": op.summary,
        "description": op.description,
        "security": [] if op.public else [{"bearerAuth": []}, {"apiKeyHeader": []}],
    }
    if parameters:
        operation["parameters"] = parameters
    if op.body is not None:
        operation["requestBody"] = {
            "required": op.body_required,
            "content": {"application/json": {"schema": ref(op.body.__name__)}},
        }
    operation["responses"] = dict(sorted(responses.items()))
    if op.deprecated:
        operation["deprecated"] = True
    return operation
