"""Payment attempts: once the buyer picks a network, a coin and a method, how to pay.

Both methods pay the order's deposit address (`x402mw.platform.services.deposits`), where the
deposit watcher sees the money arrive:

- ``transfer``: the buyer sends the coin from any wallet or exchange. The answer carries the address,
  the amount due, the token, and an EIP-681 URI (``ethereum:<token>@<chainId>/transfer?address=
  <deposit>&uint256=<amount>``) for a QR code.
- ``wallet``: a browser wallet (EIP-1193) pays. The answer adds ``transaction``, an ordinary token
  transfer the wallet can send (then reported through ``sync``), and for EIP-3009 coins
  ``authorization``, the EIP-712 typed data of a ``TransferWithAuthorization`` to the deposit address
  that the wallet signs for a gasless payment (``from`` is the wallet's own account).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.evm.eip712 import TYPED_DATA_TYPES
from x402mw.platform.checkout.orders import (
    PaymentOption,
    amount_due,
    awaiting_payment,
    enabled_methods,
    expires_at,
    payment_options,
)
from x402mw.platform.objects.base import money
from x402mw.platform.objects.checkout import (
    AuthorizationDomain,
    AuthorizationMessage,
    AuthorizationTypedData,
    CheckoutAttempt,
    WalletTransaction,
)
from x402mw.platform.services.chains import Chains
from x402mw.platform.services.deposits import DepositKeys, assign_deposit_address
from x402mw.platform.services.payment_intents import DECIMALS, PaymentIntentError

AUTHORIZATION_LIFETIME = 3600  # seconds a wallet's signed authorization stays valid (at most until expiresAt)
_TRANSFER_SELECTOR = "a9059cbb"  # transfer(address,uint256)


def payment_uri(token: str, chain_id: int, to: str, amount: int) -> str:
    """The EIP-681 URI of a token transfer: what wallets read from a QR code."""
    return f"ethereum:{token}@{chain_id}/transfer?address={to}&uint256={amount}"


def choose_option(chains: Chains, order: Mapping[Any, Any], network: str, currency: str, method: str) -> PaymentOption:
    """The option the buyer chose. `PaymentIntentError` naming the ``param`` that is wrong: 400 for a
    network this platform does not serve, 409 for a choice this order does not offer (its methods,
    its coins, or only the chain and coin it was partly paid with)."""
    if chains.by_network(network) is None:
        raise PaymentIntentError(
            400, "unsupported_chain", f"This platform takes no payments on {network[:80]!r}", param="network"
        )
    if method not in enabled_methods(order):
        raise PaymentIntentError(
            409, "payment_method_unavailable", f"This payment does not offer {method} payment", param="method"
        )
    if currency not in order["accepted_currencies"]:
        accepted = ", ".join(order["accepted_currencies"])
        raise PaymentIntentError(
            409, "unsupported_currency", f"This payment accepts {accepted}, not {currency}", param="currency"
        )
    options = payment_options(chains, order)
    if not any(option.network == network for option in options):
        raise PaymentIntentError(
            409, "unsupported_chain", f"This payment cannot be made on {network[:80]!r}", param="network"
        )
    for option in options:
        if option.network == network and option.asset.symbol == currency:
            return option
    raise PaymentIntentError(
        409, "unsupported_currency", f"{currency} cannot pay this payment on {network}", param="currency"
    )


def _transfer_calldata(to: str, amount: int) -> str:
    return "0x" + _TRANSFER_SELECTOR + to[2:].lower().rjust(64, "0") + format(amount, "064x")


def _authorization(
    option: PaymentOption, to: str, amount: int, order: Mapping[Any, Any], now: datetime
) -> AuthorizationTypedData | None:
    domain = option.chain.domain(option.asset.address)
    if not option.asset.eip3009 or domain is None:
        return None
    valid_before = int(now.timestamp()) + AUTHORIZATION_LIFETIME
    expires = expires_at(order)
    if expires is not None:
        valid_before = min(valid_before, int(expires.timestamp()))
    return AuthorizationTypedData(
        types=TYPED_DATA_TYPES,
        domain=AuthorizationDomain(
            name=domain.name,
            version=domain.version,
            chain_id=domain.chain_id,
            verifying_contract=domain.verifying_contract,
        ),
        message=AuthorizationMessage(
            to=to,
            value=amount,
            valid_after="0",
            valid_before=str(valid_before),
            nonce="0x" + secrets.token_hex(32),
        ),
    )


async def prepare_attempt(
    engine: AsyncEngine,
    keys: DepositKeys,
    chains: Chains,
    order: Mapping[Any, Any],
    *,
    network: str,
    currency: str,
    method: str,
    now: datetime,
) -> CheckoutAttempt:
    """The payment configuration for the buyer's choice (giving the order its deposit address on first
    need). Raises `PaymentIntentError`: 400 for a choice the order or the platform cannot take, 409
    ``payment_intent_unexpected_state`` once the order no longer awaits payment."""
    option = choose_option(chains, order, network, currency, method)
    due = amount_due(order)
    if not awaiting_payment(order, now) or due <= 0:
        status = order["status"]
        if status == "requires_payment":
            status = "expired"
        raise PaymentIntentError(
            409, "payment_intent_unexpected_state", f"This payment is {status}; it can no longer be paid"
        )
    deposit = await assign_deposit_address(engine, keys, order)
    asset, chain = option.asset, option.chain
    wallet = method == "wallet"
    return CheckoutAttempt(
        payment_id=order["id"],
        method=method,
        network=option.network,
        chain_id=chain.chain_id,
        network_name=chain.network.name,
        currency=asset.symbol,
        token_address=asset.address,
        decimals=asset.decimals,
        deposit_address=deposit,
        amount_due=money(due, DECIMALS),
        amount_due_minor=due,
        payment_uri=payment_uri(asset.address, chain.chain_id, deposit, due),
        expires_at=order["expires_at"],
        transaction=WalletTransaction(
            to=asset.address, data=_transfer_calldata(deposit, due), value="0x0", chain_id=hex(chain.chain_id)
        )
        if wallet
        else None,
        authorization=_authorization(option, deposit, due, order, now) if wallet else None,
    )
