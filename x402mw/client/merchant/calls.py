"""The sans-IO core of the merchant client.

Each API operation is written once, as a `Call`: the HTTP request plus the function that reads the
answer into a typed value. `call_flow` turns a call into a generator of two commands, `Send` (make
this HTTP request, send back the response or the ``httpx.HTTPError``) and `Sleep` (wait before a
retry), and returns the parsed value or raises an `APIError`. Retries, idempotency keys and error
mapping live here; the two drivers in `x402mw.client.merchant.drivers` only run the commands, one
with ``httpx.Client`` and ``time.sleep``, the other with ``httpx.AsyncClient`` and ``anyio.sleep``.

A flow can be stepped by hand, without a network::

    flow = call_flow(call, config)
    send = next(flow)                      # Send(method="POST", url=..., headers=...)
    command = flow.send(httpx.Response(503, headers={"Retry-After": "2"}))   # Sleep(2.0)
"""

from __future__ import annotations

import json
import math
import random
import uuid
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from decimal import Decimal
from email.utils import parsedate_to_datetime
from typing import Any, Generic, TypeVar
from urllib.parse import quote, urlsplit

import httpx

from x402mw._version import __version__
from x402mw.client.merchant.errors import APIConnectionError, APIError, error_from_response
from x402mw.errors import ConfigurationError
from x402mw.protocol import bounded_json

R = TypeVar("R")
T = TypeVar("T")

DEFAULT_BASE_URL = "http://127.0.0.1:4402/v1"
DEFAULT_TIMEOUT = 30.0
_RETRYABLE_TRANSPORT_ERRORS = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """What every request of one client shares. ``initial_delay`` doubles on each retry up to
    ``max_delay`` (with jitter); a ``Retry-After`` longer than ``max_retry_after`` is not waited for:
    the error is raised at once."""

    base_url: str
    api_key: str = field(repr=False)
    timeout: httpx.Timeout
    max_retries: int = 2
    initial_delay: float = 0.5
    max_delay: float = 8.0
    max_retry_after: float = 60.0

    @classmethod
    def create(cls, api_key: str, base_url: str, timeout: float | httpx.Timeout, max_retries: int) -> ClientConfig:
        """Check every argument, raising one `ConfigurationError` that lists every problem."""
        problems: list[str] = []
        if not isinstance(api_key, str) or not api_key.strip() or any(c.isspace() for c in api_key.strip()):
            problems.append("api_key must be an API key such as 'sk_test_...'")
        if not isinstance(base_url, str) or urlsplit(base_url).scheme not in ("http", "https"):
            problems.append("base_url must be an http(s) URL such as 'http://127.0.0.1:4402/v1'")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            problems.append("max_retries must be an int >= 0")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float | httpx.Timeout):
            problems.append("timeout must be a number of seconds or an httpx.Timeout")
        elif not isinstance(timeout, httpx.Timeout) and timeout <= 0:
            problems.append("timeout must be greater than zero")
        if problems:
            raise ConfigurationError(problems)
        return cls(
            base_url=base_url.rstrip("/"),
            api_key=api_key.strip(),
            timeout=timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout),
            max_retries=max_retries,
        )


@dataclass(frozen=True, slots=True)
class Call(Generic[R]):
    """One API operation: ``method`` and ``path`` (under the base URL), query ``params``, a JSON
    ``body``, and ``parse``, which turns the decoded 2xx answer into the operation's result.
    A POST without ``idempotency_key`` gets a fresh one from `call_flow`."""

    method: str
    path: str
    parse: Callable[[Any], R]
    params: Mapping[str, str] = field(default_factory=dict)
    body: Mapping[str, Any] | None = None
    idempotency_key: str | None = None


@dataclass(frozen=True, slots=True)
class Listing(Generic[T]):
    """A decoded list answer: ``{"object": "list", "data": [...], "hasMore": bool}``."""

    data: list[T]
    has_more: bool


@dataclass(frozen=True, slots=True)
class Send:
    """Command: send this request; reply with the read ``httpx.Response`` or the ``httpx.HTTPError``."""

    method: str
    url: str
    params: Mapping[str, str]
    headers: Mapping[str, str] = field(repr=False)  # holds the API key
    content: bytes | None
    timeout: httpx.Timeout


@dataclass(frozen=True, slots=True)
class Sleep:
    """Command: wait ``seconds`` before the next attempt; reply with None."""

    seconds: float


Reply = httpx.Response | httpx.HTTPError
Flow = Generator[Send | Sleep, Reply | None, R]


def path(template: str, *ids: str) -> str:
    """``template`` with each ``{}`` replaced by an id, percent-encoded so that it stays one segment."""
    for ident in ids:
        if not isinstance(ident, str) or not ident:
            raise ValueError(f"an object id must be a non-empty string, not {ident!r}")
    return template.format(*(quote(ident, safe="") for ident in ids))


def call_flow(call: Call[R], config: ClientConfig) -> Flow[R]:
    """Run ``call``: send it, retry what may be retried, return the parsed answer or raise `APIError`.

    Retried, up to ``config.max_retries`` times: no answer (connect or read failure, timeout), 409
    ``idempotency_key_in_use``, 429 and 5xx. The wait doubles from ``initial_delay`` with jitter, or is
    the answer's ``Retry-After``. A POST carries the same ``Idempotency-Key`` on every attempt, so the
    platform runs it at most once.
    """
    send = _send_command(call, config)
    attempt = 0
    while True:
        reply = yield send
        if isinstance(reply, httpx.Response) and reply.is_success:
            return _parse(call, reply)
        error = _error(reply, send)
        delay = _retry_delay(error, reply, attempt, config)
        if delay is None:
            if isinstance(reply, httpx.HTTPError):
                raise error from reply
            raise error
        attempt += 1
        if delay > 0:
            yield Sleep(delay)


def next_page_call(call: Call[Listing[T]], listing: Listing[T]) -> Call[Listing[T]] | None:
    """The call for the page after ``listing`` (towards older objects, or towards newer ones when the
    first call used ``ending_before``), or None when there is none."""
    if not listing.has_more or not listing.data:
        return None
    backwards = "ending_before" in call.params
    item = listing.data[0] if backwards else listing.data[-1]
    cursor = getattr(item, "id", None)
    if not isinstance(cursor, str):
        raise APIError(f"cannot page on from {call.path}: its objects have no id", code="invalid_response")
    params = dict(call.params)
    params["ending_before" if backwards else "starting_after"] = cursor
    return replace(call, params=params)


def _send_command(call: Call[Any], config: ClientConfig) -> Send:
    headers = {
        "Authorization": f"Bearer {config.api_key}",
        "Accept": "application/json",
        "User-Agent": f"x402mw-merchant/{__version__}",
    }
    content = None
    if call.body is not None:
        headers["Content-Type"] = "application/json"
        content = json.dumps(call.body, separators=(",", ":"), default=_json_default).encode()
    if call.method == "POST":
        headers["Idempotency-Key"] = call.idempotency_key or str(uuid.uuid4())
    return Send(call.method, config.base_url + call.path, dict(call.params), headers, content, config.timeout)


def _json_default(value: object) -> str:
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _parse(call: Call[R], response: httpx.Response) -> R:
    try:
        data = bounded_json.loads(response.content, parse_float=Decimal) if response.content else None
        return call.parse(data)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # pydantic's ValidationError is a ValueError
        raise APIError(
            f"unexpected answer to {call.method} {call.path}: {type(exc).__name__}: {str(exc)[:300]}",
            status=response.status_code,
            code="invalid_response",
            request_id=response.headers.get("request-id"),
            headers=response.headers,
        ) from exc


def _error(reply: Reply | None, send: Send) -> APIError:
    if isinstance(reply, httpx.Response):
        return error_from_response(reply)
    what = f"{type(reply).__name__}: {str(reply)[:200]}" if reply is not None else "no reply"
    return APIConnectionError(f"could not reach the merchant API for {send.method} {urlsplit(send.url).path}: {what}")


# Jitter from a generator of our own: the process-wide `random` state belongs to the application.
_JITTER = random.Random()


def _retry_delay(error: APIError, reply: Reply | None, attempt: int, config: ClientConfig) -> float | None:
    """Seconds to wait before retrying, or None when the error is final."""
    if attempt >= config.max_retries:
        return None
    if isinstance(reply, httpx.Response):
        in_use = error.status == 409 and error.code == "idempotency_key_in_use"
        if not (in_use or error.status == 429 or error.status >= 500):
            return None
        wait = _retry_after(reply.headers.get("retry-after"))
        if wait is not None:
            return wait if wait <= config.max_retry_after else None
    elif not isinstance(reply, _RETRYABLE_TRANSPORT_ERRORS):
        return None
    backoff = min(config.max_delay, config.initial_delay * 2.0**attempt)
    return backoff * (0.5 + _JITTER.random() / 2)


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)
