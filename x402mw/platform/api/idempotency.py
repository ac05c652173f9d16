"""``Idempotency-Key`` on the merchant API's POSTs, with Stripe's semantics.

A POST that carries ``Idempotency-Key`` (1–255 printable ASCII characters) runs once per key, per
merchant and mode. Its response (status, headers, body) is stored unless it is a 5xx; the same key
with the same request (method, path, query, body) answers that response again with
``Idempotent-Replayed: true`` and a fresh ``Request-Id``. The same key with another request is 400
``idempotency_key_reused``, and while the first request still runs 409 ``idempotency_key_in_use``
(both of type ``idempotency_error``). A 5xx or an exception releases the key so that the client may
retry; so does the stop of the process running the request, once its lease on the key has run out
(`x402mw.platform.services.idempotency.LEASE`, 30 s), when a retry takes the key over. Keys are
kept 24 hours (`x402mw.platform.services.idempotency.KEEP_FOR`).

While the request runs, ``scope["x402mw.idempotency"]`` holds its `KeySlot` (`key_slot`). The
endpoints named in ``takes_over`` (POST paths under the mount) take the key over: it is not claimed
before they run; they write it, done with their response, in their own transaction, and raise
`KeyTaken` if it turns out used (`x402mw.platform.services.idempotency`). Any other endpoint runs
with the key claimed in flight, and the middleware stores its response.

::

    Mount("/v1", routes=routes, middleware=[Middleware(IdempotencyMiddleware)])
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Collection
from datetime import datetime
from typing import Any

from sqlalchemy import Row, select
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from x402mw.platform.api.auth import CHECKED, caller_for
from x402mw.platform.db import tables
from x402mw.platform.db.models import new_id
from x402mw.platform.http.bodies import MAX_BODY_BYTES
from x402mw.platform.http.errors import HttpError, error_response
from x402mw.platform.http.state import scope_platform
from x402mw.platform.services.idempotency import DONE, IdempotencyKeys, KeySlot, KeyTaken
from x402mw.platform.services.merchants import Caller

logger = logging.getLogger("x402mw.platform")

REPLAYED = (b"idempotent-replayed", b"true")
SLOT = "x402mw.idempotency"


def key_slot(scope: Scope) -> KeySlot | None:
    """The idempotency key the request of ``scope`` holds, if it carries one."""
    slot = scope.get(SLOT)
    return slot if isinstance(slot, KeySlot) else None


class IdempotencyMiddleware:
    """Pure ASGI. Needs the platform in ``app.state.platform``; place it inside `RequestIdMiddleware`."""

    def __init__(self, app: ASGIApp, *, takes_over: Collection[str] = ()) -> None:
        self.app = app
        self.takes_over = frozenset(takes_over)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        key = headers.get("idempotency-key")
        if key is None:
            await self.app(scope, receive, send)
            return
        platform = scope_platform(scope)
        try:
            caller = await caller_for(headers, platform.keys)
        except HttpError:
            await self.app(scope, receive, send)  # the endpoint answers its own 401
            return
        scope[CHECKED] = caller  # the endpoint's `authenticate` takes it from here
        try:
            if not 1 <= len(key) <= 255 or not all(" " <= char <= "~" for char in key):
                raise HttpError(
                    400,
                    "idempotency_key_invalid",
                    "Idempotency-Key must be 1 to 255 printable ASCII characters",
                    param="Idempotency-Key",
                )
            body = await _read_body(receive)
            if body is None:
                return  # the client went away before sending its body
            keys = platform.idempotency
            fingerprint, now = _fingerprint(scope, body), platform.clock.now()
            if scope["path"][len(scope.get("root_path", "")) :] in self.takes_over:
                slot = KeySlot(new_id(), caller.merchant_id, caller.livemode, key, fingerprint, now, claimed=False)
                try:
                    await self._run_once(scope, _replaying(body, receive), send, keys, slot)
                    return
                except KeyTaken:
                    pass  # used already: answer as its first use decides, below
            claim = await _claim(keys, caller, key, fingerprint, now)
        except HttpError as error:
            await error_response(error)(scope, receive, send)
            return
        if isinstance(claim, KeySlot):
            await self._run_once(scope, _replaying(body, receive), send, keys, claim)
        else:
            await _replay(claim, send)

    async def _run_once(self, scope: Scope, receive: Receive, send: Send, keys: IdempotencyKeys, slot: KeySlot) -> None:
        status = 0
        headers: list[tuple[bytes, bytes]] = []
        body = bytearray()
        held: list[Message] = []  # a key not claimed: the answer waits until the key is stored

        async def capture(message: Message) -> None:
            nonlocal status, headers
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [(name, value) for name, value in message.get("headers", []) if name.lower() != b"request-id"]
            elif message["type"] == "http.response.body":
                body.extend(message.get("body", b""))
                # Stored before the client sees the end of the response, so that a retry sent as soon
                # as it arrives finds the key done rather than still in flight.
                last = not message.get("more_body", False)
                if (
                    last
                    and status < 500
                    and not slot.stored
                    and not await keys.store(slot, status, headers, bytes(body))
                ):
                    raise KeyTaken  # nothing was sent: the key's first use answers instead
            if slot.claimed or slot.stored or status >= 500:
                for earlier in held:
                    await send(earlier)
                held.clear()
                await send(message)
            else:
                held.append(message)

        scope[SLOT] = slot
        try:
            await self.app(scope, receive, capture)
        finally:
            if slot.claimed and not slot.stored:
                await _release(keys, slot.row_id)


def _fingerprint(scope: Scope, body: bytes) -> str:
    digest = hashlib.sha256()
    for part in (scope["method"], scope["path"]):
        digest.update(part.encode("utf-8", "surrogatepass") + b"\0")
    digest.update(scope.get("query_string", b"") + b"\0")
    digest.update(body)
    return digest.hexdigest()


async def _read_body(receive: Receive) -> bytes | None:
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body.extend(message.get("body", b""))
        if len(body) > MAX_BODY_BYTES:
            raise HttpError(413, "body_too_large", "Request body is larger than 1 MiB")
        if not message.get("more_body", False):
            return bytes(body)


def _replaying(body: bytes, receive: Receive) -> Receive:
    pending = True

    async def replay() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # after the body, only http.disconnect

    return replay


async def _claim(
    keys: IdempotencyKeys, caller: Caller, key: str, fingerprint: str, now: datetime
) -> KeySlot | Row[Any]:
    """The key claimed in flight for this request, or the row of the key's first use."""
    table = tables.idempotency_keys
    for _ in range(3):
        slot = KeySlot(new_id(), caller.merchant_id, caller.livemode, key, fingerprint, now)
        if await keys.claim(slot):
            return slot
        async with keys.engine.begin() as conn:
            first = (await conn.execute(select(table).where(*caller.owns(table), table.c.key == key))).first()
            if first is None:
                continue  # the first use failed and released the key meanwhile
            if first.fingerprint != fingerprint:
                raise HttpError(
                    400,
                    "idempotency_key_reused",
                    "This Idempotency-Key was used with another request (method, path or body); "
                    "use a new key for a different request",
                    type="idempotency_error",
                )
            if first.status == DONE:
                return first
        if await keys.take_over(str(first.id), now):  # its first use's process stopped: this request runs it
            return KeySlot(str(first.id), caller.merchant_id, caller.livemode, key, fingerprint, now)
        break
    raise HttpError(
        409,
        "idempotency_key_in_use",
        "A request with this Idempotency-Key is still being processed; retry once it has finished",
        type="idempotency_error",
    )


async def _release(keys: IdempotencyKeys, row_id: str) -> None:
    try:
        await keys.release(row_id)
    except Exception:
        # The key stays in flight until its lease runs out, when a retry may take it over.
        logger.exception("could not release idempotency key %s", row_id)


async def _replay(row: Row[Any], send: Send) -> None:
    headers = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in row.response_headers or []]
    await send({"type": "http.response.start", "status": row.response_status, "headers": [*headers, REPLAYED]})
    await send({"type": "http.response.body", "body": row.response_body or b""})
