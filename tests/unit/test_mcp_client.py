"""`PayingSession` sends one payment identifier per logical tool call, kept across its retry of a
stale challenge, when the tool's offer declares the extension (as `X402Auth` does for a request).
The MCP session is an in-process stand-in answering ``call_tool`` as a paid tool server would."""

from __future__ import annotations

from typing import Any

import pytest
from mcp.types import CallToolResult, TextContent

from tests.unit.test_client_auth import KEY_HEX, offer, required
from x402mw.client import Wallet, X402Auth
from x402mw.client.mcp import PAYMENT_META, PayingSession
from x402mw.protocol.models import PaymentPayload
from x402mw.protocol.payment_identifier import DECLARATION, PAYMENT_IDENTIFIER, identifier_of

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _offer_result(declare: bool, reason: str | None = None, **extra: Any) -> CallToolResult:
    offered = required(offer(**extra)) | ({"extensions": {PAYMENT_IDENTIFIER: DECLARATION}} if declare else {})
    if reason:
        offered["error"] = reason
    return CallToolResult(
        content=[TextContent(type="text", text="payment required")], structured_content=offered, is_error=True
    )


class _ToolServer:
    """Answers the unpaid call with an offer, the first paid call as stale, the second as done."""

    def __init__(self, declare: bool) -> None:
        self.declare = declare
        self.payments: list[PaymentPayload] = []

    async def call_tool(self, name: str, arguments: Any = None, *, meta: Any = None, **_: Any) -> CallToolResult:
        if not meta or PAYMENT_META not in meta:
            return _offer_result(self.declare)
        self.payments.append(PaymentPayload.model_validate(meta[PAYMENT_META]))
        if len(self.payments) == 1:
            return _offer_result(self.declare, "challenge_expired", challengeId="ch_2")
        return CallToolResult(content=[TextContent(type="text", text="sunny")])


async def test_one_identifier_per_call_kept_across_the_retry() -> None:
    server = _ToolServer(declare=True)
    paying = PayingSession(server, X402Auth(Wallet(KEY_HEX), max_total="1"))  # type: ignore[arg-type]
    done = await paying.call_tool("weather", {"city": "Oslo"})
    assert not done.is_error
    first, second = server.payments
    assert first.payload.signature != second.payload.signature  # the new terms signed anew
    identifier = identifier_of(first)
    assert identifier is not None and identifier == identifier_of(second)
    await paying.call_tool("weather", {"city": "Oslo"})
    assert identifier_of(server.payments[2]) not in (None, identifier)  # the next call has its own


async def test_no_identifier_for_a_tool_that_does_not_declare_it() -> None:
    server = _ToolServer(declare=False)
    paying = PayingSession(server, X402Auth(Wallet(KEY_HEX), max_total="1"))  # type: ignore[arg-type]
    await paying.call_tool("weather", {"city": "Oslo"})
    assert [identifier_of(p) for p in server.payments] == [None, None]
