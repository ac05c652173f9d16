"""Paid MCP tools: x402 for servers on the official ``mcp`` SDK: version 2's ``MCPServer``, and
version 1's ``FastMCP``.

>>> from mcp.server.mcpserver import MCPServer
>>> from x402mw.adapters.mcp import PaidTools
>>> server = MCPServer("weather")
>>> @server.tool()
... def forecast(city: str) -> str: ...
>>> PaidTools(api_key="sk_test_...", tools={"forecast": "<agent endpoint id>"}).install(server)

Each tool named in ``tools`` is sold per call by an agent endpoint (fixed, dynamic or metered
price; its ``resourceUrl`` may be ``mcp://tool/<name>``), following the x402 MCP transport's
tool-result binding (``specs/transports-v2/mcp.md``):

- a call without ``_meta["x402/payment"]`` is answered with a tool error result whose
  ``structuredContent`` (and ``content[0].text``, as JSON) is the ``PaymentRequired`` object;
- a paid call is verified and its authorization claimed (held) *before* the tool runs, nothing
  taken; once the tool succeeded the payment is settled and the result carries the settlement with
  the platform's signed receipt in ``_meta["x402/payment-response"]``. A tool that fails (raises, or
  returns an error result) is never charged: the held payment is released, and the agent may use the
  same authorization again. A settlement that fails answers the payment error only, never the
  tool's result;
- a tool on a metered endpoint (``pricingMode: "metered"``, paid with the ``upto`` scheme) reports
  what the call used with ``current_payment().charge(amount)``, as a metered route's handler does;
  once it succeeded, that amount (at most the ceiling signed; 0 sends no transaction) is settled and
  the result carries the settlement, whose receipt names amount and ceiling. A metered tool that
  fails is charged nothing, and its authorization is closed;
- a payment that is garbage, made for another tool, or already used is refused in the same shape
  (``PaymentRequired`` with its reason in ``error``).

The adapter is a server middleware, so it serves every transport the server runs on (streamable
HTTP, stdio): wrap the streamable HTTP app with `PaidTools.asgi`, or run stdio inside
`PaidTools.running`, so that its connections to the platform close with the server. While a paid
tool runs, `current_payment` tells it who pays and how much.
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import json
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import anyio
import httpx
from mcp.types import CallToolResult

from x402mw import tracing
from x402mw.errors import ConfigurationError
from x402mw.protocol.codec import PAYMENT_REQUIRED, PAYMENT_RESPONSE, decode_json_header
from x402mw.seller import (
    DEFAULT_PLATFORM_URL,
    Answer,
    AsyncSeller,
    Held,
    MeteredPayment,
    PaidRoute,
    RequestView,
    Serve,
    ServeMetered,
    UsageError,
    build_gate,
    internal_error_answer,
)
from x402mw.seller.routes import as_route

__all__ = ["PAYMENT_META", "PAYMENT_RESPONSE_META", "PaidTools", "ToolCall", "ToolPayment", "current_payment"]

logger = logging.getLogger("x402mw.seller")

PAYMENT_META = "x402/payment"
PAYMENT_RESPONSE_META = "x402/payment-response"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """What an amount callback of a paid tool receives: the tool's name and its call's arguments."""

    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ToolPayment:
    """The payment held for the tool call that is running: verified and claimed, settled once the
    tool returns successfully. ``amount`` is in atomic units of the endpoint's token: the price, or
    for a tool on a metered endpoint the ceiling the agent signed. Such a tool reports what the call
    used with `charge`, as a metered route's handler does (see `MeteredPayment`)::

        current_payment().charge(tokens * PRICE_PER_TOKEN)
    """

    payment_id: str
    payer: str
    amount: int
    network: str
    tool: str
    metered: MeteredPayment | None = None

    def charge(self, amount: int | str | Decimal) -> int:
        """Add ``amount`` (atomic units, or a price such as ``"$0.0001"``) to this call's usage and
        return the total so far; what is settled once the tool returned is that total, at most the
        ceiling. `UsageError` for a tool sold at a fixed price, or an amount that cannot be charged."""
        if self.metered is None:
            raise UsageError(f"tool {self.tool} is sold at a fixed price: it has no usage to report")
        return self.metered.charge(amount)

    @property
    def charged(self) -> int:
        """The usage reported so far (0 for a tool sold at a fixed price)."""
        return 0 if self.metered is None else self.metered.charged


_current: contextvars.ContextVar[ToolPayment | None] = contextvars.ContextVar("x402mw_tool_payment", default=None)


def current_payment() -> ToolPayment | None:
    """The payment of the paid tool call running in this task, or None (an unpaid tool)."""
    return _current.get()


class PaidTools:
    """x402 payments for an MCP server's tools: a server middleware of the ``mcp`` SDK.

    ``tools`` maps tool names to agent endpoint ids, or to `PaidRoute` objects for dynamic pricing
    (the amount callback receives a `ToolCall`). Add it with `install` (or pass it in
    ``MCPServer(middleware=[...])``); serve the streamable HTTP app through `asgi`, or stdio inside
    `running`.
    """

    def __init__(
        self,
        *,
        api_key: str,
        tools: Mapping[str, PaidRoute | str],
        platform_url: str = DEFAULT_PLATFORM_URL,
        settle_timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if not isinstance(tools, Mapping) or not all(isinstance(name, str) and name for name in tools):
            raise ConfigurationError("tools must be a mapping such as {'forecast': '<agent endpoint id>'}")
        routes = {f"TOOL /{name}": value for name, value in tools.items()}
        self._gate, _ = build_gate(
            api_key=api_key,
            platform_url=platform_url,
            routes=routes,
            settle_timeout=settle_timeout,
            refuse_async=False,
        )
        self._tools = {name: as_route(value) for name, value in tools.items()}
        by_endpoint: dict[str, list[str]] = {}
        for name, route in self._tools.items():
            by_endpoint.setdefault(route.endpoint, []).append(name)
        shared = [names for names in by_endpoint.values() if len(names) > 1]
        if shared:
            # A payment names its endpoint (in its sealed terms), not its tool: two tools on one
            # endpoint could each be paid with the other's challenge.
            raise ConfigurationError(
                [
                    f"tools {', '.join(sorted(names))} share an agent endpoint: give each paid tool its own"
                    for names in shared
                ]
            )
        self._seller = AsyncSeller(self._gate, transport=transport)

    def __repr__(self) -> str:
        return f"PaidTools(tools={sorted(self._tools)!r}, platform_url={self._gate.platform_url!r})"

    def install(self, server: Any) -> None:
        """Add this middleware to an ``MCPServer`` (mcp 2), or wrap the ``tools/call`` handler of a
        ``FastMCP`` server (mcp 1) with it."""
        middleware = getattr(server, "middleware", None)
        if isinstance(middleware, list):
            middleware.append(self)
            return
        handlers = getattr(getattr(server, "_mcp_server", None), "request_handlers", None)
        if not isinstance(handlers, dict):
            raise TypeError("PaidTools.install takes an MCPServer (mcp 2) or a FastMCP server (mcp 1)")
        from mcp import types

        original = handlers[types.CallToolRequest]
        server_result: Any = types.ServerResult  # a model in mcp 1

        async def call_tool(request: Any) -> Any:
            params = request.params.model_dump(by_alias=True, exclude_none=True, mode="json")

            async def call_next(_ctx: Any) -> Any:
                return (await original(request)).root

            result = await self(_V1Context("tools/call", params), call_next)
            return server_result(result)

        handlers[types.CallToolRequest] = call_tool

    async def aclose(self) -> None:
        """Register the challenges still queued and close the connections to the platform."""
        await self._seller.aclose()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Run the background work (registering issued challenges, refreshing the endpoints' terms)
        while the block lasts, then `aclose`: around ``server.run_stdio_async()``, say."""
        try:
            async with self._seller.running():
                yield
        finally:
            await self._seller.aclose()

    def asgi(self, app: Any) -> Any:
        """Wrap the server's ASGI app (``server.streamable_http_app()``) so that the background work
        runs during its lifespan and the connections to the platform close at its shutdown."""

        async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] != "lifespan":
                await app(scope, receive, send)
                return

            async def shutdown_closes() -> Any:
                message = await receive()
                if message.get("type") == "lifespan.shutdown":
                    await self._seller.aclose()
                return message

            async with self._seller.running():
                await app(scope, shutdown_closes, send)

        return wrapped

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        params = ctx.params
        name = params.get("name") if ctx.method == "tools/call" and isinstance(params, Mapping) else None
        route = self._tools.get(name) if isinstance(name, str) else None
        if route is None or not isinstance(name, str):
            return await call_next(ctx)
        try:
            return await self._paid_call(ctx, call_next, name, route, params)
        finally:
            await self._seller.after_response()

    async def _paid_call(self, ctx: Any, call_next: Any, name: str, route: PaidRoute, params: Mapping[str, Any]) -> Any:
        meta = params.get("_meta")
        payment = meta.get(PAYMENT_META) if isinstance(meta, Mapping) else None
        if payment is not None and not isinstance(payment, dict):
            payment = {"x402Version": 2, "payload": payment}  # garbage: refused as a malformed payload
        arguments = params.get("arguments")
        call = ToolCall(name, arguments if isinstance(arguments, Mapping) else {})
        traceparent = meta.get("traceparent") if tracing.enabled and isinstance(meta, Mapping) else None
        request = RequestView("TOOL", f"mcp://tool/{name}", payment, traceparent=_text(traceparent))
        try:
            decision = await self._seller.run(self._gate.hold(route, request, call))
        except Exception:
            logger.exception("payment check failed unexpectedly for tool %s", name)
            decision = internal_error_answer()
        if isinstance(decision, Answer):
            return _refusal(decision)
        if isinstance(decision, ServeMetered):
            return await self._metered_call(ctx, call_next, name, decision.payment)
        held: Held = decision
        token = _current.set(ToolPayment(held.payment_id, held.payer, held.amount, held.network, name))
        try:
            result = await call_next(ctx)
        except BaseException:
            await self._release(held)
            raise
        finally:
            _current.reset(token)
        if not _succeeded(result):
            await self._release(held)
            return result
        settled = await self._seller.run(self._gate.capture(held))
        if isinstance(settled, Answer):
            return _refusal(settled)  # the payment error only: the tool's result is not given away
        assert isinstance(settled, Serve)  # a capture settles an exact payment
        return _with_meta(result, {PAYMENT_RESPONSE_META: settled.settlement.response.to_wire()})

    async def _metered_call(self, ctx: Any, call_next: Any, name: str, metered: MeteredPayment) -> Any:
        """Run a tool of a metered endpoint with ``metered`` to report usage to, then settle what it
        reported (at most the ceiling; 0 sends nothing). A tool that fails is charged nothing."""
        payment = ToolPayment(metered.payment_id, metered.payer, metered.ceiling, metered.network, name, metered)
        token = _current.set(payment)
        try:
            result = await call_next(ctx)
        except BaseException:
            await self._finish(metered, served=False)
            raise
        finally:
            _current.reset(token)
        if not _succeeded(result):
            await self._finish(metered, served=False)
            return result
        finished = await self._finish(metered, served=True)
        if isinstance(finished, Answer):
            return _refusal(finished)  # the settlement was refused: the payment error only
        response = dict(finished).get(PAYMENT_RESPONSE)
        if response is None:
            return result
        # settled, or pending (its outcome is not known yet), as a metered HTTP response is served
        return _with_meta(result, {PAYMENT_RESPONSE_META: decode_json_header(response)})

    async def _finish(self, metered: MeteredPayment, *, served: bool) -> list[tuple[str, str]] | Answer:
        # Shielded: a call cancelled while its tool ran still closes its authorization.
        finished: list[tuple[str, str]] | Answer = []
        with anyio.CancelScope(shield=True):
            try:
                finished = await self._seller.run(self._gate.finish(metered, served=served))
            except Exception:
                logger.exception("settling metered tool call failed unexpectedly (challenge %s)", metered.challenge_id)
        return finished

    async def _release(self, held: Held) -> None:
        # Shielded: a call cancelled while its tool ran (the client went away) still gives its hold up.
        with anyio.CancelScope(shield=True):
            try:
                await self._seller.run(self._gate.release(held))
            except Exception:
                logger.exception("could not release held payment %s", held.payment_id)


@dataclass(frozen=True, slots=True)
class _V1Context:
    """What the middleware reads of a request context, for an mcp 1 server."""

    method: str
    params: Mapping[str, Any]


def _succeeded(result: Any) -> bool:
    """Whether a ``tools/call`` handler's result is a complete, successful tool result."""
    if isinstance(result, Mapping):
        data: Mapping[str, Any] = result
    elif hasattr(result, "model_dump"):
        data = result.model_dump(by_alias=True)
    else:
        return False
    if data.get("resultType", "complete") != "complete" or "content" not in data:
        return False
    return not data.get("isError", False)


def _with_meta(result: Any, extra: dict[str, Any]) -> Any:
    if isinstance(result, Mapping):
        return {**result, "_meta": {**(result.get("_meta") or {}), **extra}}
    return result.model_copy(update={"meta": {**(result.meta or {}), **extra}})


def _refusal(answer: Answer) -> Any:
    """The tool error result for a gate's answer: ``PaymentRequired`` (and the ``PAYMENT-RESPONSE``
    settlement, if any, in ``_meta``) for a 402, the error object otherwise (an outage, a pending
    settlement, a misconfiguration)."""
    headers = dict(answer.headers)
    structured: Any
    if PAYMENT_REQUIRED in headers:
        structured = json.loads(base64.b64decode(headers[PAYMENT_REQUIRED]))
        body = json.loads(answer.body)
        if isinstance(body, dict) and isinstance(body.get("message"), str):
            structured["message"] = body["message"]
    else:
        structured = json.loads(answer.body)
    meta = None
    if PAYMENT_RESPONSE in headers:
        meta = {PAYMENT_RESPONSE_META: decode_json_header(headers[PAYMENT_RESPONSE])}
    text = json.dumps(structured, separators=(",", ":"), ensure_ascii=False)
    result = {"content": [{"type": "text", "text": text}], "structuredContent": structured, "isError": True}
    if meta is not None:
        result["_meta"] = meta
    return CallToolResult.model_validate(result)  # by the wire names: the same in mcp 1 and 2


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
