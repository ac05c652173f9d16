"""Every JSON answer the platforms of the test suite give, checked against the OpenAPI document.

The platforms the suite starts in-process (`tests.harness.platform_server`) carry `AnswerRecorder`,
a pure ASGI middleware outside the platform's own, which keeps each JSON answer as the client gets
it: method, path, status and body. `AnswerSchemas` finds the documented operation of each (the
path templates of the document, a literal segment before a parameter, as the router does) and
validates the body with a JSON Schema (2020-12) validator against the schema the document gives
that operation and status. An answer is a problem when:

- its body is not JSON, or does not keep to its schema (every response object of the document is
  closed: a member the document does not name is a problem too);
- its status is not documented for its operation, but for 500 (an error nobody anticipated) and
  405 (a method the path does not take), which must still be the error envelope;
- its path is not documented and it is not the error envelope (a 404 for an unknown URL).

``tests/conftest.py`` checks the answers after every test (a problem fails the test that received
it) and prints how many were checked at the end of the session.
"""

from __future__ import annotations

import functools
import json
import re
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from x402mw.platform.openapi.document import build_document

__all__ = ["MIDDLEWARE", "Answer", "AnswerRecorder", "AnswerSchemas", "recorded", "schemas"]

_URI = "urn:x402mw:openapi"
_ENVELOPE = "/components/schemas/ErrorEnvelope"
_UNDOCUMENTED_OK = {405, 500}
_METHODS = {"get", "put", "post", "delete", "patch"}


@dataclass(frozen=True)
class Answer:
    """One JSON answer, as the client received it."""

    method: str
    path: str
    status: int
    body: bytes


_recorded: list[Answer] = []
_lock = threading.Lock()


def recorded(start: int = 0) -> list[Answer]:
    """The answers recorded in this process, from the ``start``-th on."""
    with _lock:
        return _recorded[start:]


class AnswerRecorder:
    """Pure ASGI: keeps every ``application/json`` answer of the app it wraps, in ``sink`` (by
    default, the answers `recorded` gives and the suite checks)."""

    def __init__(self, app: ASGIApp, sink: list[Answer] | None = None) -> None:
        self.app = app
        self.sink = _recorded if sink is None else sink

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] == "HEAD":
            await self.app(scope, receive, send)
            return
        status = 0
        body: bytearray | None = None

        async def record(message: Message) -> None:
            nonlocal status, body
            if message["type"] == "http.response.start":
                status = message["status"]
                types = [value for name, value in message.get("headers", []) if name.lower() == b"content-type"]
                body = bytearray() if types and types[0].split(b";")[0].strip() == b"application/json" else None
            elif message["type"] == "http.response.body" and body is not None:
                body.extend(message.get("body", b""))
                if not message.get("more_body", False):
                    with _lock:
                        self.sink.append(Answer(scope["method"], scope["path"], status, bytes(body)))
            await send(message)

        await self.app(scope, receive, record)


MIDDLEWARE = [Middleware(AnswerRecorder)]
"""What `tests.harness.platform_server` adds to every platform it starts."""


class AnswerSchemas:
    """The OpenAPI document's answers: which schema an answer must keep to, and whether it does."""

    def __init__(self, document: dict[str, Any]) -> None:
        resource = Resource.from_contents(document, default_specification=DRAFT202012)
        self._registry: Registry[Any] = Registry().with_resource(_URI, resource)
        self._paths = sorted(
            ((_template_regex(path), path, item) for path, item in document["paths"].items()),
            key=lambda entry: [part.startswith("{") for part in entry[1].split("/")],
        )
        self.covered: Counter[tuple[str, str, str]] = Counter()
        self.documented = {
            (method, path, status)
            for path, item in document["paths"].items()
            for method, operation in item.items()
            if method in _METHODS
            for status in operation["responses"]
        }

    def problems(self, answer: Answer) -> list[str]:
        """What is wrong with ``answer`` (nothing: an empty list); counts it in `covered`."""
        where = f"{answer.method} {answer.path} -> {answer.status}"
        try:
            body = json.loads(answer.body)
        except ValueError:
            return [f"{where}: the body is not JSON: {answer.body[:200]!r}"]
        found = next(((path, item) for regex, path, item in self._paths if regex.fullmatch(answer.path)), None)
        method = answer.method.lower()
        if found is None or method not in found[1]:
            pointer, why = _ENVELOPE, "an undocumented path or method answers the error envelope"
        else:
            path, item = found
            status = str(answer.status)
            if status not in item[method]["responses"]:
                if answer.status not in _UNDOCUMENTED_OK:
                    return [f"{where}: status {status} is not documented for {method.upper()} {path}"]
                pointer, why = _ENVELOPE, f"an undocumented {status} answers the error envelope"
            else:
                self.covered[method, path, status] += 1
                pointer = "/".join(["/paths", _escape(path), method, "responses", status])
                pointer, why = self._content(pointer), f"the schema of {method.upper()} {path} {status}"
        return [
            f"{where}: {why}: {'/'.join(map(str, error.absolute_path)) or '(the body)'}: {error.message[:300]}"
            for error in self._validator(pointer).iter_errors(body)
        ]

    def _content(self, pointer: str) -> str:
        response = self._registry.resolver(_URI).lookup(f"{_URI}#{quote(pointer)}").contents
        if "$ref" in response:  # a shared response (the errors)
            pointer = response["$ref"].removeprefix("#")
        return pointer + "/content/application~1json/schema"

    @functools.cache  # noqa: B019 (one per document, kept for the session)
    def _validator(self, pointer: str) -> Draft202012Validator:
        return Draft202012Validator(
            {"$ref": f"{_URI}#{quote(pointer)}"},
            registry=self._registry,
            format_checker=Draft202012Validator.FORMAT_CHECKER,
        )


def _escape(path: str) -> str:
    return path.replace("~", "~0").replace("/", "~1")


def _template_regex(path: str) -> re.Pattern[str]:
    return re.compile(re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(path)))


@functools.cache
def schemas() -> AnswerSchemas:
    """The answers of the document the platform serves (the same for every platform of the suite)."""
    return AnswerSchemas(build_document())
