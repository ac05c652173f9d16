"""The sandbox, test mode only: minting test coins (the faucet) and paying a test order from a fresh
wallet in one of a few scenarios; the API's ``/sandbox`` operations and the dashboard's sandbox page."""

from __future__ import annotations

import secrets
from decimal import Decimal
from typing import Any, Literal

from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.errors import PriceError
from x402mw.evm.keys import address_of, new_private_key
from x402mw.platform.chain.token import mint
from x402mw.platform.clock import Clock
from x402mw.platform.objects.base import money
from x402mw.platform.objects.payments import FaucetTransfer, SandboxPayment
from x402mw.platform.services.chains import ChainHandle, Chains
from x402mw.platform.services.deposits import DepositKeys, assign_deposit_address, authorization_call
from x402mw.platform.services.errors import ServiceError
from x402mw.platform.services.merchants import Caller
from x402mw.platform.services.payment_intents import find_payment_intent, payment_intent_of, transition
from x402mw.platform.services.watcher import DepositWatcher
from x402mw.protocol.networks import Asset
from x402mw.protocol.prices import AmountFormat, JsonNumber

FAUCET_AMOUNTS = AmountFormat(decimals=6, max_exponent=6)
"""What the faucet's ``amount`` may be: at most 1,000,000 coins, 6 decimals (the OpenAPI document
publishes its pattern)."""

Scenario = Literal["exact", "underpaid", "overpaid", "late", "wrong_asset"]


async def fund(chains: Chains, network: str, currency: str, address: str, amount: Any) -> FaucetTransfer:
    """Mint ``amount`` (a decimal, as sent) test coins of ``currency`` to ``address`` on ``network``.
    ServiceError 400: not a test network here, a coin it lacks, an amount `FAUCET_AMOUNTS` refuses,
    a network the platform cannot mint on."""
    chain = chains.by_network(network)
    if chain is None or chain.livemode:
        raise ServiceError(400, "unsupported_chain", f"no test network {network} here", param="network")
    asset = chain.asset(currency)
    if asset is None:
        raise ServiceError(400, "unsupported_currency", f"{currency} is not on {network}", param="currency")
    try:
        micro = FAUCET_AMOUNTS.parse(amount)
    except PriceError as exc:
        raise ServiceError(400, "parameter_invalid", f"Invalid amount: {exc.message}", param="amount") from None
    if asset.decimals < FAUCET_AMOUNTS.decimals and micro % 10 ** (FAUCET_AMOUNTS.decimals - asset.decimals):
        message = f"{asset.symbol} has {asset.decimals} decimals"
        raise ServiceError(400, "parameter_invalid", f"Invalid amount: {message}", param="amount")
    minor = micro * 10**asset.decimals // 10**FAUCET_AMOUNTS.decimals
    tx = await _mint(chain, asset, address, minor)
    return FaucetTransfer(
        network=network,
        currency=asset.symbol,
        address=address,
        # the text as sent; a JSON number (whose spelling may have an exponent) as a plain decimal
        amount=Decimal(amount) if _as_text(amount) else money(micro, FAUCET_AMOUNTS.decimals),
        transaction=tx,
    )


def _as_text(amount: object) -> bool:
    return isinstance(amount, str) and not isinstance(amount, JsonNumber)


async def _mint(chain: ChainHandle, asset: Asset, address: str, amount: int) -> str:
    if chain.dev is not None:
        return await chain.dev.mint(asset.symbol, address, amount)
    if chain.minter_key is not None:
        return await mint(chain.rpc, chain.minter_key, asset.address, address, amount)
    raise ServiceError(400, "faucet_unavailable", f"the platform cannot mint on {chain.network.caip2}", param="network")


def _test_chain(chains: Chains, network: str | None) -> ChainHandle:
    chain = chains.by_network(network) if network else next((c for c in chains if not c.livemode), None)
    if chain is None or chain.livemode:
        raise ServiceError(400, "unsupported_chain", f"no test network {network or ''} here".strip(), param="network")
    return chain


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
        raise ServiceError(409, "scenario_unavailable", f"{chain.network.caip2} has no {what}", param="scenario")
    return candidates[0]


def _amount(order: Any, scenario: Scenario) -> int:
    remaining = max(1, int(order["amount_minor"]) - int(order["amount_received_minor"]))
    if scenario == "underpaid":
        if remaining < 2:
            raise ServiceError(409, "scenario_unavailable", "1 minor unit cannot be underpaid", param="scenario")
        return remaining // 2
    if scenario == "overpaid":
        return remaining + max(1, remaining // 10)
    return remaining


async def simulate(
    engine: AsyncEngine,
    chains: Chains,
    deposit_keys: DepositKeys,
    watcher: DepositWatcher,
    clock: Clock,
    checkout_url_base: str,
    caller: Caller,
    payment_id: str,
    scenario: Scenario,
    network: str | None = None,
) -> SandboxPayment:
    """Pay the caller's test order from a fresh payer on a test chain (``network``, or the first), as
    ``scenario`` says, and answer once the watcher has seen it. ServiceError: 404 for an order the
    caller does not have, 409 for one not awaiting payment or a scenario the chain cannot play, 400
    for a network that is not a test one here."""
    chain = _test_chain(chains, network)
    async with engine.begin() as conn:
        order = await find_payment_intent(conn, caller.merchant_id, caller.livemode, payment_id)
        if order is None:
            raise ServiceError(404, "resource_missing", f"No such payment intent: '{payment_id[:80]}'", param="id")
        if order["status"] != "requires_payment":
            raise ServiceError(
                409,
                "payment_intent_unexpected_state",
                f"The sandbox pays payment intents awaiting payment; this one is {order['status']}",
            )
        asset, amount = _pick(chain, order, scenario), _amount(order, scenario)
        if scenario == "late":
            now = clock.now()
            order = await transition(conn, order, "expired", now, checkout_url_base, {"expires_at": now}) or order
    deposit = await assign_deposit_address(engine, deposit_keys, order)
    payer_key = new_private_key()
    payer = address_of(payer_key)
    await _mint(chain, asset, payer, amount)
    data, _, _ = authorization_call(chain, asset.address, payer_key, deposit, amount, secrets.token_bytes(32))
    tx = await chain.relayer.send(asset.address, data)
    await chain.wait_for(tx)
    await watcher.scan(chain)
    await watcher.confirm()
    async with engine.connect() as conn:
        seen = await find_payment_intent(conn, caller.merchant_id, caller.livemode, payment_id)
    assert seen is not None
    return SandboxPayment(
        scenario=scenario,
        network=chain.network.caip2,
        currency=asset.symbol,
        amount=money(amount, asset.decimals),
        payer=payer,
        deposit_address=deposit,
        tx_hash=tx,
        payment_intent=payment_intent_of(seen, checkout_url_base),
    )
