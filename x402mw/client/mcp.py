"""Paying MCP tools: `PayingSession` wraps an ``mcp`` ``ClientSession`` (or ``Client``) and pays the
tools that ask.

>>> from mcp import Client, ClientSession
>>> from x402mw.client import Wallet, X402Auth
>>> from x402mw.client.mcp import PayingSession
>>> auth = X402Auth(Wallet.from_env(), max_amount="0.10", max_total="5")
>>> tools = PayingSession(session, auth)               # session: an initialized ClientSession
>>> result = await tools.call_tool("forecast", {"city": "Lisbon"})
>>> auth.payments[-1].transaction

It follows the x402 MCP transport's tool-result binding: a tool error result whose
``structuredContent`` (or ``content[0].text``) is a ``PaymentRequired`` object is paid, within the
caps of the `X402Auth` given (``max_amount``, ``max_total``, ``networks``, ``assets``, and its
``receipt_signer`` check), by calling the tool again with the signed payload in
``_meta["x402/payment"]``; the settlement in the result's ``_meta["x402/payment-response"]`` is
recorded in ``auth.payments``. The same auth can pay HTTP routes too: its caps count both.

A tool offering ``batch-settlement`` is paid by payment channel when the auth has a
`ChannelPolicy`, as `X402Auth` pays a route (one mechanism, `x402mw.client.channel_flow`): a
deposit the first time, then one cumulative voucher a call, sent with the call itself once the
tool was paid by channel; a corrective refusal carrying the channel's state is followed as over
HTTP. The channel is the same one the auth pays over HTTP when the seller is the same.

A tool on a metered endpoint offers ``upto``: the ceiling is signed (through Permit2, and counted
against the caps), the settlement says what the tool charged, and ``auth.payments`` records that
amount with the ceiling. A wallet without a Permit2 allowance is refused with
``permit2_allowance_required`` once, and pays again with an EIP-2612 permit for Permit2 (no gas).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from mcp import Client, ClientSession
from mcp.types import CallToolResult

from x402mw.client.auth import X402Auth
from x402mw.client.channel_flow import CORRECTIONS, channel_offer, choose, record_charge
from x402mw.client.channels import offered_terms
from x402mw.client.replies import permit_nonce_wanted
from x402mw.errors import InvalidPaymentError, PaymentRefusedError
from x402mw.protocol import payment_identifier, reasons
from x402mw.protocol.codec import decode_payment_required
from x402mw.protocol.models import PaymentRequired, PaymentRequirements, SettlementResponse

__all__ = ["PAYMENT_META", "PAYMENT_RESPONSE_META", "PayingSession", "payment_required", "settlement_of"]

PAYMENT_META = "x402/payment"
PAYMENT_RESPONSE_META = "x402/payment-response"
_RENEWED = frozenset({reasons.CHALLENGE_EXPIRED, reasons.INVALID_REQUIREMENTS})


class PayingSession:
    """An MCP client session that pays x402 tools from an `X402Auth`'s wallet, within its caps.

    `call_tool` takes what ``ClientSession.call_tool`` takes. A tool asking for payment is paid once;
    if the paid call is refused because the terms it paid are stale (the challenge expired, or the
    tool is priced per call and now costs more), the new terms are paid once more, within the caps.
    Any other refusal is returned as the tool's error result. Offers the caps refuse raise
    `PaymentRefusedError` (reason ``over_cap`` or ``no_acceptable_option``), nothing signed.
    """

    def __init__(self, session: ClientSession | Client, auth: X402Auth) -> None:
        if not isinstance(auth, X402Auth):
            raise TypeError("PayingSession needs an X402Auth (it holds the wallet and the caps)")
        self.session = session
        self.auth = auth
        self._call: Callable[..., Awaitable[CallToolResult]] = session.call_tool
        self._channel_tools: dict[str, PaymentRequired] = {}  # tools paid by channel: pay at once

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None = None, *, meta: dict[str, Any] | None = None, **kwargs: Any
    ) -> CallToolResult:
        known = self._channel_tools.get(name)
        if known is not None:
            result = await self._pay_by_channel(name, arguments, meta, known, kwargs, first=True)
            if payment_required(result) is None:
                return result
            self._channel_tools.pop(name, None)
        else:
            result = await self._call(name, arguments, meta=meta, **kwargs)
        required = payment_required(result)
        if required is not None and channel_offer(self.auth, required) is not None:
            return await self._pay_by_channel(name, arguments, meta, required, kwargs)
        # One payment identifier per logical call, for tools that declare the extension, kept across
        # the retry below (as `X402Auth` does for a request).
        identifier = payment_identifier.new_identifier()
        permit_nonce: int | None = None
        for attempt in range(2):
            if required is None:
                return result
            url = required.resource.url if required.resource and required.resource.url else f"mcp://tool/{name}"
            choice = self.auth._choose(required, url)
            upto = choice.requirements.scheme == "upto"
            if upto and permit_nonce is None:
                permit_nonce = self.auth._permit_nonce(choice.requirements)
            paid_meta = {
                **(meta or {}),
                PAYMENT_META: self._sign(choice.requirements, required, identifier, permit_nonce),
            }
            result = await self._call(name, arguments, meta=paid_meta, **kwargs)
            settlement = settlement_of(result)
            if not result.is_error:
                if upto and permit_nonce is not None:
                    self.auth._permit_used(choice.requirements, permit_nonce, settlement)
                self.auth._record(url, settlement, choice)
                return result
            renewed = payment_required(result)
            if attempt == 1 or renewed is None or renewed.error is None:
                return result
            wanted = permit_nonce_wanted(renewed) if upto else None
            if wanted is not None:
                permit_nonce = wanted  # no Permit2 allowance: sign again with an EIP-2612 permit for it
            elif reasons.normalize_reason(renewed.error) not in _RENEWED:
                return result
            required = renewed  # the terms paid are stale: pay the new ones, once
        return result

    async def _pay_by_channel(
        self,
        name: str,
        arguments: dict[str, Any] | None,
        meta: dict[str, Any] | None,
        required: PaymentRequired,
        kwargs: dict[str, Any],
        first: bool = False,
    ) -> CallToolResult:
        """Call the tool paying by channel: `x402mw.client.channel_flow.pay_by_channel`'s steps,
        with the payload in ``_meta`` and the settlement read from the result's ``_meta``."""
        book = self.auth.channels
        assert book is not None
        url = required.resource.url if required.resource and required.resource.url else f"mcp://tool/{name}"
        choice = choose(self.auth, required, url, refund=False)
        entry = offered_terms(choice.requirements)
        state = book.state_for(entry)
        while not book.claim(state):  # one call at a time signs on a channel
            await anyio.sleep(0.005)
        try:
            book.correct(state, required)
            for attempt in range(CORRECTIONS + 1):
                pending = book.sign(entry, required.resource, choice.decimals, state)
                result = await self._call(
                    name, arguments, meta={**(meta or {}), PAYMENT_META: pending.payload}, **kwargs
                )
                settlement = (result.meta or {}).get(PAYMENT_RESPONSE_META)
                if not result.is_error and isinstance(settlement, dict) and book.settled(pending, settlement):
                    record_charge(self.auth, ("MCP", url), required, choice, pending, settlement, remember=False)
                    self._channel_tools[name] = required
                    return result
                again = payment_required(result)
                if again is None or first or attempt == CORRECTIONS or not book.correct(state, again, pending.kind):
                    return result
            raise AssertionError("unreachable")
        finally:
            book.release(state)

    def _sign(
        self, accepted: PaymentRequirements, required: PaymentRequired, identifier: str, permit_nonce: int | None
    ) -> dict[str, Any]:
        """The wire payload paying ``accepted``: an EIP-3009 authorization (``exact``), or a Permit2
        signature for the ceiling (``upto``, with an EIP-2612 permit for Permit2 given its nonce)."""
        if accepted.scheme == "upto":
            upto = self.auth.wallet.sign_upto(accepted, resource=required.resource, permit_nonce=permit_nonce)
            return upto.to_wire()
        payload = self.auth.wallet.sign_payment(accepted, resource=required.resource)
        if payment_identifier.declared(required):
            extensions = payment_identifier.payload_extensions(required.extensions, identifier)
            payload = payload.model_copy(update={"extensions": extensions})
        return payload.to_wire()


def payment_required(result: CallToolResult) -> PaymentRequired | None:
    """The ``PaymentRequired`` of a tool error result (``structuredContent``, else ``content[0].text``),
    or None when the result is not one. `PaymentRefusedError` for an offer that is malformed."""
    if not result.is_error:
        return None
    data: Any = result.structured_content
    if not _is_offer(data):
        first = result.content[0] if result.content else None
        text = getattr(first, "text", None)
        try:
            data = json.loads(text) if isinstance(text, str) else None
        except ValueError:
            return None
        if not _is_offer(data):
            return None
    try:
        return decode_payment_required(data)
    except InvalidPaymentError as exc:
        raise PaymentRefusedError(
            f"the tool's payment offer is malformed: {exc.message}", reason="invalid_payment_required"
        ) from None


def settlement_of(result: CallToolResult) -> SettlementResponse | None:
    """The settlement a tool result carries in ``_meta["x402/payment-response"]``, if any."""
    raw = (result.meta or {}).get(PAYMENT_RESPONSE_META)
    if not isinstance(raw, dict):
        return None
    try:
        return SettlementResponse.model_validate(raw)
    except ValueError:
        return None


def _is_offer(data: Any) -> bool:
    return isinstance(data, dict) and "x402Version" in data and "accepts" in data
