"""The public checkout API (spec 4.2), under ``/checkout/v1``: no API key, the order's id is the key.

- ``GET  /payment-intents/:paymentId``: what checkout may show of the order;
- ``POST /payment-intents/:paymentId/attempts`` ``{network, currency, method}``: how to pay it;
- ``POST /payment-intents/:paymentId/transfer-status``: look for money at the deposit address now;
- ``POST /payment-intents/:paymentId/sync`` ``{txHash, network}``: the buyer's wallet sent a transfer;
- ``POST /payment-intents/:paymentId/authorizations``: a wallet signed an EIP-3009 authorization, which
  the platform relays (gasless: `x402mw.platform.checkout.authorizations`);
- ``POST /payment-intents/:paymentId/prepare`` ``{network?, currency?}``: legacy and deprecated, a
  transfer ``attempts`` with defaults, answered with ``Deprecation: true`` and a ``Link`` to its successor.

``:paymentId`` is the bare UUID or ``pi_<uuid>``. Errors use the platform's envelope; an unknown id is
404 ``resource_missing``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict
from starlette.requests import Request

from x402mw.platform.checkout.attempts import prepare_attempt
from x402mw.platform.checkout.authorizations import authorizations
from x402mw.platform.checkout.bodies import AttemptBody, AuthorizationBody, PrepareBody, SyncBody
from x402mw.platform.checkout.lookup import load_order, look_for_payment, order_chains
from x402mw.platform.checkout.orders import PAYMENT_ID, payment_options, public_order_of
from x402mw.platform.http.bodies import parse_body, read_json
from x402mw.platform.http.errors import HttpError
from x402mw.platform.http.responses import ModelResponse
from x402mw.platform.http.routing import ApiRoute, Operation
from x402mw.platform.http.state import platform_of
from x402mw.platform.objects.checkout import CheckoutAttempt, CheckoutPaymentIntent
from x402mw.platform.services.payment_intents import PaymentIntentError

if TYPE_CHECKING:
    from x402mw.platform.runtime import Platform

logger = logging.getLogger("x402mw.platform.checkout")
SYNC_WAIT_SECONDS = 10.0  # how long sync waits for the buyer's transaction to be mined


class TransferStatusBody(BaseModel):
    model_config = ConfigDict(extra="forbid")


async def _answer(platform: Platform, payment_id: str) -> ModelResponse:
    order = await load_order(platform, payment_id)
    return ModelResponse(public_order_of(order, platform.chains))


async def retrieve(request: Request) -> ModelResponse:
    return await _answer(platform_of(request), request.path_params["payment_id"])


async def attempt(request: Request) -> ModelResponse:
    platform = platform_of(request)
    order = await load_order(platform, request.path_params["payment_id"])
    body = parse_body(AttemptBody, await read_json(request))
    try:
        answer = await prepare_attempt(
            platform.engine,
            platform.deposit_keys,
            platform.chains,
            order,
            network=body.network,
            currency=body.currency,
            method=body.method,
            now=platform.clock.now(),
        )
    except PaymentIntentError as exc:
        raise HttpError(exc.status, exc.code, exc.message, param=exc.param) from None
    return ModelResponse(answer)


async def transfer_status(request: Request) -> ModelResponse:
    platform = platform_of(request)
    raw_id = request.path_params["payment_id"]
    order = await load_order(platform, raw_id)
    parse_body(TransferStatusBody, await read_json(request, allow_empty=True))
    await look_for_payment(platform, order, order_chains(platform, order))
    return await _answer(platform, raw_id)


async def sync(request: Request) -> ModelResponse:
    platform = platform_of(request)
    raw_id = request.path_params["payment_id"]
    order = await load_order(platform, raw_id)
    body = parse_body(SyncBody, await read_json(request))
    if platform.chains.by_network(body.network) is None:
        raise HttpError(
            400, "unsupported_chain", f"This platform takes no payments on {body.network[:80]!r}", param="network"
        )
    chain = next((c for c in order_chains(platform, order) if c.network.caip2 == body.network), None)
    if chain is None:  # a network of the platform, but not one this order can be paid on
        raise HttpError(
            409, "unsupported_chain", f"This payment cannot be made on {body.network[:80]!r}", param="network"
        )
    tx_hash = body.txHash.lower()
    # Only a transaction the chain knows (pending or mined) is waited for: a hash it does not know
    # (zeros, another chain's, made up) is answered at once, as a public request cannot be held
    # waiting for a transaction that may never come.
    if await chain.rpc.request("eth_getTransactionByHash", [tx_hash]):
        with contextlib.suppress(TimeoutError):  # not mined yet: answer what is known; polling keeps looking
            await chain.relayer.wait_for_receipt(tx_hash, timeout=SYNC_WAIT_SECONDS)
    await look_for_payment(platform, order, [chain])
    return await _answer(platform, raw_id)


PREPARE_SUCCESSOR = "/v1/openapi.json#/paths/~1checkout~1v1~1payment-intents~1%7Bpayment_id%7D~1attempts/post"
"""Where ``/prepare`` answers point (``Link: <…>; rel="successor-version"``): the ``attempts`` operation."""


async def prepare(request: Request) -> ModelResponse:
    """Legacy ``/prepare`` (deprecated): a transfer ``attempts`` with the order's own defaults."""
    platform = platform_of(request)
    order = await load_order(platform, request.path_params["payment_id"])
    body = parse_body(PrepareBody, await read_json(request, allow_empty=True))
    options = payment_options(platform.chains, order)
    network = body.network or (options[0].network if options else "")
    on_network = [o.asset.symbol for o in options if o.network == network]
    currency = body.currency or (order["currency"] if order["currency"] in on_network else None)
    currency = currency or (on_network[0] if on_network else order["currency"])
    try:
        answer = await prepare_attempt(
            platform.engine,
            platform.deposit_keys,
            platform.chains,
            order,
            network=network,
            currency=currency,
            method="transfer",
            now=platform.clock.now(),
        )
    except PaymentIntentError as exc:
        raise HttpError(exc.status, exc.code, exc.message, param=exc.param) from None
    headers = {"Deprecation": "true", "Link": f'<{PREPARE_SUCCESSOR}>; rel="successor-version"'}
    return ModelResponse(answer, headers=headers)


_TAG = "Checkout"


def _route(method: str, action: str, endpoint: Callable[..., Any], name: str, **operation: Any) -> ApiRoute:
    """A public checkout operation on one payment intent, at ``/payment-intents/{payment_id}`` and ``action``."""
    return ApiRoute(
        method,
        "/payment-intents/{payment_id}" + action,
        endpoint,
        Operation(tag=_TAG, public=True, parameters=[PAYMENT_ID], **operation),
        name=name,
    )


routes = [
    _route(
        "GET",
        "",
        retrieve,
        "checkout-payment-intent",
        id="retrieveCheckoutPaymentIntent",
        summary="Read a payment intent for checkout",
        answer=CheckoutPaymentIntent,
        errors=(404, 429),
    ),
    _route(
        "POST",
        "/attempts",
        attempt,
        "checkout-attempts",
        id="createCheckoutAttempt",
        summary="Choose how to pay",
        description="Validates the buyer's choice against the order (400 `unsupported_chain`, "
        "`unsupported_currency` or `payment_method_unavailable`, naming `param`) and answers the payment "
        "configuration, giving the order its deposit address on first use. 409 "
        "`payment_intent_unexpected_state` once the order no longer awaits payment (paid, cancelled or past "
        "`expiresAt`).",
        answer=CheckoutAttempt,
        body=AttemptBody,
        errors=(404, 409, 429),
    ),
    _route(
        "POST",
        "/transfer-status",
        transfer_status,
        "checkout-transfer-status",
        id="checkCheckoutTransferStatus",
        summary="Check for a transfer",
        description="Looks for money at the order's deposit address now (the platform's worker also does every "
        "few seconds) and answers the order as it then is. No body, or `{}`.",
        answer=CheckoutPaymentIntent,
        errors=(400, 404, 413, 429),
    ),
    _route(
        "POST",
        "/sync",
        sync,
        "checkout-sync",
        id="syncCheckoutTransaction",
        summary="Report a wallet's transaction",
        description="The buyer's wallet sent a transfer to the deposit address: waits up to 10 s for it to be "
        "mined, looks for the money, and answers the order as it then is.",
        answer=CheckoutPaymentIntent,
        body=SyncBody,
        errors=(404, 429),
    ),
    _route(
        "POST",
        "/authorizations",
        authorizations,
        "checkout-authorizations",
        id="createCheckoutAuthorization",
        summary="Pay with a wallet's signed authorization (gasless)",
        description="The wallet signed the EIP-3009 `TransferWithAuthorization` that `attempts` (`method: "
        "wallet`) answered; the platform checks it like an agent payment and relays it, paying the gas, then "
        "answers the order (`processing` or `succeeded` once the transfer is in a block). 409 when the "
        "authorization does not fit the order, naming `param`: `authorization_signature_invalid` "
        "(not signed by `from` for this coin and chain), `authorization_wrong_recipient` (not the "
        "order's deposit address), `authorization_wrong_amount` (not the amount due), "
        "`authorization_expired`, `authorization_not_yet_valid`, `authorization_used` (its nonce is "
        "spent), `gasless_unavailable` (USDT), `payment_intent_unexpected_state`, "
        "`payment_in_progress` (another authorization is paying it); 422 `insufficient_funds`. "
        "Nothing is sent for a refused one. The same authorization sent again answers the order as "
        "it is, and is never credited twice. 503 `chain_unavailable` (with `Retry-After`): nothing "
        "was sent.",
        answer=CheckoutPaymentIntent,
        body=AuthorizationBody,
        errors=(404, 409, 422, 429),
    ),
    _route(
        "POST",
        "/prepare",
        prepare,
        "checkout-prepare",
        id="prepareCheckoutPayment",
        summary="Prepare a transfer (legacy, deprecated)",
        description="Kept for old integrations; use `attempts`. Answers what a transfer `attempts` answers, for "
        "`network` and `currency` (each optional), with `Deprecation: true` and `Link: <…>; "
        'rel="successor-version"` pointing to the `attempts` operation.',
        answer=CheckoutAttempt,
        body=PrepareBody,
        body_required=False,
        errors=(404, 409, 429),
        deprecated=True,
        headers={
            "Deprecation": "`true`: this operation is deprecated",
            "Link": '`<…attempts…>; rel="successor-version"`',
        },
    ),
]
