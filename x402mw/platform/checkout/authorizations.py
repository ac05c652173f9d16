"""``POST /checkout/v1/payment-intents/:paymentId/authorizations``: a gasless wallet payment.

The body carries what the buyer's wallet signed with ``eth_signTypedData_v4``: the
``TransferWithAuthorization`` message that ``attempts`` (``method: "wallet"``) answers in its
``authorization`` field, with ``from`` set to the wallet's account, and the 65-byte signature::

    {"network": "eip155:8453", "currency": "USDC",
     "authorization": {"from", "to", "value", "validAfter", "validBefore", "nonce"},
     "signature": "0x…"}

The platform checks it like an agent payment (the signature recovers ``from``; ``to`` is the order's
deposit address; ``value`` the amount due; the coin and network are ones the order offers; the
validity window), relays it (`x402mw.platform.checkout.relay`: the relayer pays the gas, the buyer
holds only the coin), looks for the transfer at once and answers the order's public form: status
``processing`` or ``succeeded`` once the transfer is in a block. Each refusal is a 4xx naming its
``param``; nothing is sent for it. While the chain cannot be reached: 503 with ``Retry-After``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema
from starlette.requests import Request
from starlette.responses import JSONResponse

from x402mw.platform.api.bodies import parse_body, read_json
from x402mw.platform.api.errors import ApiError
from x402mw.platform.api.fields import Address
from x402mw.platform.checkout.attempts import choose_option
from x402mw.platform.checkout.lookup import load_order, look_for_payment
from x402mw.platform.checkout.orders import amount_due, public_order_json
from x402mw.platform.checkout.relay import Relayed, RelayRefused, order_requirements, relay_authorization
from x402mw.platform.runtime import Platform
from x402mw.platform.services.payment_intents import PaymentIntentError
from x402mw.platform.services.settlement_checks import Refusal
from x402mw.protocol.models import PaymentPayload

__all__ = ["AuthorizationBody", "WalletAuthorization", "authorizations", "relayed_answer"]

UINT_PATTERN = r"^(?:0|[1-9][0-9]{0,17})$"
"""What the document promises for a uint256 field (below 10**18: values and Unix times); larger ones
up to 2**256 - 1 are read too."""


def _uint(value: object) -> str:
    """A uint256 as the typed data has it: a decimal string, or a JSON integer."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**256:
        return str(value)
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 77 and int(value) < 2**256:
        return str(int(value))
    raise ValueError("must be an unsigned integer, as a decimal string")


Uint = Annotated[
    str,
    BeforeValidator(_uint),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "pattern": UINT_PATTERN},
                {"type": "integer", "minimum": 0, "maximum": 10**18 - 1},
            ]
        },
    ),
]


class WalletAuthorization(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    from_: Address = Field(alias="from")
    to: Address
    value: Uint
    validAfter: Uint
    validBefore: Uint
    nonce: str = Field(pattern=r"^0x[0-9a-fA-F]{64}$")


class AuthorizationBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    network: str = Field(max_length=64)
    currency: Literal["USDC", "USDT", "EURC"]
    authorization: WalletAuthorization
    signature: str = Field(pattern=r"^0x[0-9a-fA-F]{130}$")


def relayed_answer(platform: Platform, relayed: Relayed) -> JSONResponse:
    """The order's public form once its authorization went out; the refusal or outage otherwise."""
    outcome = relayed.outcome
    if outcome.status == "unavailable":
        raise ApiError(503, "chain_unavailable", "The chain cannot be reached right now; nothing was sent: retry")
    if outcome.status == "failed":
        raise _refused(RelayRefused.of(Refusal(outcome.response.error_reason or "", outcome.message or "refused")))
    return JSONResponse(public_order_json(relayed.order, platform.chains))


def _refused(exc: RelayRefused) -> ApiError:
    return ApiError(exc.status, exc.code, exc.message, param=exc.param)


async def authorizations(request: Request) -> JSONResponse:
    platform: Platform = request.app.state.platform
    order = await load_order(platform, request.path_params["payment_id"])
    body = parse_body(AuthorizationBody, await read_json(request))
    try:
        option = choose_option(platform.chains, order, body.network, body.currency, "wallet")
    except PaymentIntentError as exc:
        raise ApiError(exc.status, exc.code, exc.message, param=exc.param) from None
    if not option.asset.eip3009 or option.chain.domain(option.asset.address) is None:
        raise ApiError(
            409,
            "gasless_unavailable",
            f"{option.asset.symbol} cannot be paid by signature; send a transfer and report it with sync",
            param="currency",
        )
    deposit = order["deposit_address"]
    wire: dict[str, Any] = body.authorization.model_dump(by_alias=True)
    if deposit is None:
        raise ApiError(
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
