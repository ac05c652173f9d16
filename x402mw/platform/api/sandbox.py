"""``/sandbox``: test-mode helpers, refused for live keys.

- ``POST /sandbox/faucet`` mints test coins on the dev chain or on a local node whose token minter the
  platform holds (anvil);
- ``POST /sandbox/payment-intents/:paymentId/simulate-payment`` makes a real transfer to the order's
  deposit address from a fresh wallet, in one of the scenarios ``exact``, ``underpaid``, ``overpaid``,
  ``late`` (the order is expired first) or ``wrong_asset``, and answers once the platform has seen it.
"""

from __future__ import annotations

import secrets
from decimal import Decimal
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema
from starlette.requests import Request

from x402mw.errors import PriceError
from x402mw.evm.keys import address_of, new_private_key
from x402mw.platform.api.auth import authenticate
from x402mw.platform.chain.token import mint
from x402mw.platform.http.bodies import PAYMENT_PREFIX, parse_body, path_uuid, read_json
from x402mw.platform.http.errors import HttpError
from x402mw.platform.http.fields import NonZeroAddress, amount_schema
from x402mw.platform.http.responses import ModelResponse
from x402mw.platform.http.routing import ApiRoute, Operation
from x402mw.platform.http.state import platform_of
from x402mw.platform.objects.base import money
from x402mw.platform.objects.payments import FaucetTransfer, SandboxPayment
from x402mw.platform.services.chains import ChainHandle
from x402mw.platform.services.deposits import assign_deposit_address, authorization_call
from x402mw.platform.services.merchants import Caller
from x402mw.platform.services.payment_intents import find_payment_intent, payment_intent_of, transition
from x402mw.protocol.networks import Asset
from x402mw.protocol.prices import AmountFormat, JsonNumber

if TYPE_CHECKING:
    from x402mw.platform.runtime import Platform

__all__ = ["FaucetBody", "SimulatePaymentBody", "fund", "routes", "simulate"]

FAUCET_AMOUNTS = AmountFormat(decimals=6, max_exponent=6)
"""What the faucet's ``amount`` may be: at most 1,000,000 coins, 6 decimals (the OpenAPI document
publishes its pattern)."""


class FaucetBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    network: str = Field(max_length=64, description="a test network of this platform, e.g. `eip155:1337`")
    currency: Literal["USDC", "EURC"] = Field(description="coin to mint")
    address: NonZeroAddress = Field(description="EVM address receiving the coins")
    amount: Annotated[Any, WithJsonSchema(amount_schema(FAUCET_AMOUNTS))] = Field(
        description="decimal amount of coins, at most 1,000,000"
    )  # read by FAUCET_AMOUNTS


async def faucet(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    if caller.livemode:
        raise HttpError(400, "livemode_not_allowed", "The sandbox is for test keys only")
    body = parse_body(FaucetBody, await read_json(request))
    return ModelResponse(await fund(platform_of(request), body))


async def fund(platform: Platform, body: FaucetBody) -> FaucetTransfer:
    """Mint test coins to an address (the API's faucet, and the dashboard's sandbox)."""
    chain = platform.chains.by_network(body.network)
    if chain is None or chain.livemode:
        raise HttpError(400, "unsupported_chain", f"no test network {body.network} here", param="network")
    asset = chain.asset(body.currency)
    if asset is None:
        raise HttpError(400, "unsupported_currency", f"{body.currency} is not on {body.network}", param="currency")
    try:
        micro = FAUCET_AMOUNTS.parse(body.amount)
    except PriceError as exc:
        raise HttpError(400, "parameter_invalid", f"Invalid amount: {exc.message}", param="amount") from None
    if asset.decimals < FAUCET_AMOUNTS.decimals and micro % 10 ** (FAUCET_AMOUNTS.decimals - asset.decimals):
        message = f"{asset.symbol} has {asset.decimals} decimals"
        raise HttpError(400, "parameter_invalid", f"Invalid amount: {message}", param="amount")
    amount = micro * 10**asset.decimals // 10**FAUCET_AMOUNTS.decimals
    tx = await _mint(chain, asset, body.address, amount)
    return FaucetTransfer(
        network=body.network,
        currency=asset.symbol,
        address=body.address,
        # the text as sent; a JSON number (whose spelling may have an exponent) as a plain decimal
        amount=Decimal(body.amount) if _as_text(body.amount) else money(micro, FAUCET_AMOUNTS.decimals),
        transaction=tx,
    )


def _as_text(amount: object) -> bool:
    return isinstance(amount, str) and not isinstance(amount, JsonNumber)


async def _mint(chain: ChainHandle, asset: Asset, address: str, amount: int) -> str:
    if chain.dev is not None:
        return await chain.dev.mint(asset.symbol, address, amount)
    if chain.minter_key is not None:
        return await mint(chain.rpc, chain.minter_key, asset.address, address, amount)
    raise HttpError(400, "faucet_unavailable", f"the platform cannot mint on {chain.network.caip2}", param="network")


def _test_chain(platform: Platform, network: str | None) -> ChainHandle:
    chains = platform.chains
    chain = chains.by_network(network) if network else next((c for c in chains if not c.livemode), None)
    if chain is None or chain.livemode:
        raise HttpError(400, "unsupported_chain", f"no test network {network or ''} here".strip(), param="network")
    return chain


Scenario = Literal["exact", "underpaid", "overpaid", "late", "wrong_asset"]


class SimulatePaymentBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    scenario: Scenario = Field(
        default="exact",
        description="`exact` (default), `underpaid` (half), `overpaid` (10 % more), `late` (the order is "
        "expired first) or `wrong_asset` (a coin the order does not accept)",
    )
    network: str | None = Field(
        default=None, max_length=64, description="a test network of this platform; default: the first one"
    )


def _pick(chain: ChainHandle, order: Any, scenario: Scenario) -> Asset:
    """The coin the simulated buyer sends."""
    accepted = [order["paid_currency"]] if order["paid_currency"] else list(order["accepted_currencies"])
    if scenario == "wrong_asset":
        candidates = [a for a in chain.network.assets.values() if a.symbol not in order["accepted_currencies"]]
    else:
        candidates = [a for symbol in accepted if (a := chain.asset(symbol)) is not None]
    candidates = [a for a in candidates if a.eip3009]
    if not candidates:
        what = "a coin this order does not accept" if scenario == "wrong_asset" else "a coin this order accepts"
        raise HttpError(409, "scenario_unavailable", f"{chain.network.caip2} has no {what}", param="scenario")
    return candidates[0]


def _amount(order: Any, scenario: Scenario) -> int:
    remaining = max(1, int(order["amount_minor"]) - int(order["amount_received_minor"]))
    if scenario == "underpaid":
        if remaining < 2:
            raise HttpError(409, "scenario_unavailable", "1 minor unit cannot be underpaid", param="scenario")
        return remaining // 2
    if scenario == "overpaid":
        return remaining + max(1, remaining // 10)
    return remaining


async def simulate_payment(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    if caller.livemode:
        raise HttpError(400, "livemode_not_allowed", "The sandbox is for test keys only")
    payment_id = path_uuid(request, "payment_id", "payment intent", prefix=PAYMENT_PREFIX)
    body = parse_body(SimulatePaymentBody, await read_json(request, allow_empty=True) or {})
    return ModelResponse(await simulate(platform_of(request), caller, payment_id, body))


async def simulate(platform: Platform, caller: Caller, payment_id: str, body: SimulatePaymentBody) -> SandboxPayment:
    """Pay a test order from a fresh payer on a test chain, as ``body.scenario`` says (the API's
    simulate-payment, and the dashboard's sandbox)."""
    chain = _test_chain(platform, body.network)
    base = platform.payment_intents.checkout_url_base
    async with platform.engine.begin() as conn:
        order = await find_payment_intent(conn, caller.merchant_id, caller.livemode, payment_id)
        if order is None:
            raise HttpError.missing("payment intent", payment_id)
        if order["status"] != "requires_payment":
            raise HttpError(
                409,
                "payment_intent_unexpected_state",
                f"The sandbox pays payment intents awaiting payment; this one is {order['status']}",
            )
        asset, amount = _pick(chain, order, body.scenario), _amount(order, body.scenario)
        if body.scenario == "late":
            now = platform.clock.now()
            order = await transition(conn, order, "expired", now, base, {"expires_at": now}) or order
    deposit = await assign_deposit_address(platform.engine, platform.deposit_keys, order)
    payer_key = new_private_key()
    payer = address_of(payer_key)
    await _mint(chain, asset, payer, amount)
    data, _, _ = authorization_call(chain, asset.address, payer_key, deposit, amount, secrets.token_bytes(32))
    tx = await chain.relayer.send(asset.address, data)
    await chain.wait_for(tx)
    await platform.watcher.scan(chain)
    await platform.watcher.confirm()
    async with platform.engine.connect() as conn:
        seen = await find_payment_intent(conn, caller.merchant_id, caller.livemode, payment_id)
    assert seen is not None
    return SandboxPayment(
        scenario=body.scenario,
        network=chain.network.caip2,
        currency=asset.symbol,
        amount=money(amount, asset.decimals),
        payer=payer,
        deposit_address=deposit,
        tx_hash=tx,
        payment_intent=payment_intent_of(seen, base),
    )


_TAG = "Sandbox"
routes = [
    ApiRoute(
        "POST",
        "/sandbox/faucet",
        faucet,
        Operation(
            id="sandboxFaucet",
            tag=_TAG,
            summary="Mint test coins",
            description="Test keys only. Mints test USDC or EURC on the dev chain or on a local node whose token "
            "minter the platform holds.",
            answer=FaucetTransfer,
            body=FaucetBody,
        ),
    ),
    ApiRoute(
        "POST",
        "/sandbox/payment-intents/{payment_id}/simulate-payment",
        simulate_payment,
        Operation(
            id="sandboxSimulatePayment",
            tag=_TAG,
            summary="Simulate a payment",
            description="Test keys only. Sends a real transfer from a fresh wallet to the order's deposit address on "
            "a test chain and answers once the platform has seen it. 409 `payment_intent_unexpected_state` "
            "unless the order awaits payment.",
            answer=SandboxPayment,
            body=SimulatePaymentBody,
            errors=(404, 409),
        ),
    ),
]
