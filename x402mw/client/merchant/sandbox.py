"""``/sandbox``: test-mode helpers (test keys only; a live key gets 400 ``livemode_not_allowed``)."""

from __future__ import annotations

from decimal import Decimal
from typing import Literal

from x402mw.client.merchant.calls import Call, path
from x402mw.client.merchant.payment_intents import PaymentIntent
from x402mw.client.merchant.resource import APIObject, Mode, Resource, money, operation, present

Scenario = Literal["exact", "underpaid", "overpaid", "late", "wrong_asset"]


class FaucetTransfer(APIObject):
    """Test coins minted to ``address``; ``transaction`` is the mint's transaction hash."""

    object: str = "faucet_transfer"
    network: str
    currency: str
    address: str
    amount: Decimal
    transaction: str


class SandboxPayment(APIObject):
    """A simulated buyer's real transfer on a test network, and the order once the platform saw it."""

    object: str = "sandbox_payment"
    scenario: str
    network: str
    currency: str
    amount: Decimal
    payer: str
    deposit_address: str | None = None
    tx_hash: str
    payment_intent: PaymentIntent


class Sandbox(Resource[Mode]):
    """``client.sandbox``: mint test coins, and pay orders as a buyer would."""

    @operation
    def faucet(
        self,
        *,
        network: str,
        currency: str,
        address: str,
        amount: Decimal | str | int,
        idempotency_key: str | None = None,
    ) -> Call[FaucetTransfer]:
        """Mint ``amount`` (at most 1,000,000) test ``currency`` to ``address`` on ``network``
        (CAIP-2, e.g. ``"eip155:1337"``)."""
        body = present(network=network, currency=currency, address=address, amount=money(amount, "amount"))
        return Call(
            "POST", "/sandbox/faucet", FaucetTransfer.model_validate, body=body, idempotency_key=idempotency_key
        )

    @operation
    def simulate_payment(
        self,
        payment_id: str,
        *,
        scenario: Scenario | None = None,
        network: str | None = None,
        idempotency_key: str | None = None,
    ) -> Call[SandboxPayment]:
        """Pay the order ``payment_id`` from a fresh wallet and answer once the platform has seen the
        payment. ``scenario``: ``exact`` (default), ``underpaid``, ``overpaid``, ``late`` (the order is
        expired first) or ``wrong_asset``; ``network`` defaults to the platform's first test network."""
        body = present(scenario=scenario, network=network)
        return Call(
            "POST",
            path("/sandbox/payment-intents/{}/simulate-payment", payment_id),
            SandboxPayment.model_validate,
            body=body,
            idempotency_key=idempotency_key,
        )
