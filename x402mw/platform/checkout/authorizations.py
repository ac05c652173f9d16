"""``POST /checkout/v1/payment-intents/:paymentId/authorizations``: a gasless wallet payment.

The body carries what the buyer's wallet signed with ``eth_signTypedData_v4``: the
``TransferWithAuthorization`` message that ``attempts`` (``method: "wallet"``) answers in its
``authorization`` field, with ``from`` set to the wallet's account, and the signature (a key's 65
bytes, or a smart account's: EIP-1271, or ERC-6492 for a wallet not deployed yet)::

    {"network": "eip155:8453", "currency": "USDC",
     "authorization": {"from", "to", "value", "validAfter", "validBefore", "nonce"},
     "signature": "0x…"}

The platform checks it like an agent payment (the signature recovers ``from``, or ``from``'s wallet
accepts it; ``to`` is the order's deposit address; ``value`` the amount due; the coin and network
are ones the order offers; the validity window), relays it (`x402mw.platform.checkout.relay`: the
relayer pays the gas, the buyer holds only the coin), looks for the transfer at once and answers the
order's public form: status ``processing`` or ``succeeded`` once the transfer is in a block. Each
refusal is a 4xx naming its ``param``; nothing is sent for it. While the chain cannot be reached:
503 with ``Retry-After``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request

from x402mw.platform.checkout.attempts import choose_option
from x402mw.platform.checkout.bodies import AuthorizationBody
from x402mw.platform.checkout.lookup import load_order, look_for_payment
from x402mw.platform.checkout.orders import amount_due, public_order_of
from x402mw.platform.checkout.relay import Relayed, RelayRefused, order_requirements, relay_authorization
from x402mw.platform.http.bodies import parse_body, read_json
from x402mw.platform.http.errors import HttpError
from x402mw.platform.http.responses import ModelResponse
from x402mw.platform.http.state import platform_of
from x402mw.platform.services.payment_intents import PaymentIntentError
from x402mw.platform.services.settlement.checks import PaymentRefusal
from x402mw.protocol.models import PaymentPayload

if TYPE_CHECKING:
    from x402mw.platform.runtime import Platform


def relayed_answer(platform: Platform, relayed: Relayed) -> ModelResponse:
    """The order's public form once its authorization went out; the refusal or outage otherwise."""
    outcome = relayed.outcome
    if outcome.status == "unavailable":
        raise HttpError(503, "chain_unavailable", "The chain cannot be reached right now; nothing was sent: retry")
    if outcome.status == "failed":
        raise _refused(
            RelayRefused.of(PaymentRefusal(outcome.response.error_reason or "", outcome.message or "refused"))
        )
    return ModelResponse(public_order_of(relayed.order, platform.chains))


def _refused(exc: RelayRefused) -> HttpError:
    return HttpError(exc.status, exc.code, exc.message, param=exc.param)


async def authorizations(request: Request) -> ModelResponse:
    platform = platform_of(request)
    order = await load_order(platform, request.path_params["payment_id"])
    body = parse_body(AuthorizationBody, await read_json(request))
    try:
        option = choose_option(platform.chains, order, body.network, body.currency, "wallet")
    except PaymentIntentError as exc:
        raise HttpError(exc.status, exc.code, exc.message, param=exc.param) from None
    if not option.asset.eip3009 or option.chain.domain(option.asset.address) is None:
        raise HttpError(
            409,
            "gasless_unavailable",
            f"{option.asset.symbol} cannot be paid by signature; send a transfer and report it with sync",
            param="currency",
        )
    deposit = order["deposit_address"]
    wire: dict[str, Any] = body.authorization.model_dump(by_alias=True)
    if deposit is None:
        raise HttpError(
            409,
            "authorization_wrong_recipient",
            "This payment has no deposit address yet: ask attempts (method wallet) for what to sign",
            param="authorization.to",
        )
    accepted = order_requirements(option, deposit, amount_due(order))
    payload = PaymentPayload.model_validate(
        {
            "x402Version": 2,
            "accepted": accepted.to_wire(),
            "payload": {"signature": body.signature, "authorization": wire},
        }
    )
    try:
        relayed = await relay_authorization(
            platform,
            order,
            accepted,
            payload,
            resource=str(request.url_for("checkout-payment-intent", payment_id=order["id"])),
        )
    except RelayRefused as exc:
        raise _refused(exc) from None
    if relayed.outcome.status == "settled":
        await look_for_payment(platform, relayed.order, [option.chain])
        relayed = Relayed(relayed.outcome, await load_order(platform, order["id"]))
    return relayed_answer(platform, relayed)
