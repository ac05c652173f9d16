"""The OpenAPI document's money resources: payment intents, refunds, balances and the sandbox's
simulated payments (request models, their field notes, and operations; see `x402mw.platform.openapi.document`)."""

from __future__ import annotations

from pydantic import BaseModel

from x402mw.platform.api.payment_intents import PaymentIntentCreate
from x402mw.platform.api.refunds import RefundCreate
from x402mw.platform.api.sandbox import SimulatePaymentBody
from x402mw.platform.http.fields import amount_schema
from x402mw.platform.objects.payments import (
    BalanceList,
    PaymentIntentEnvelope,
    PaymentIntentList,
    RefundEnvelope,
    RefundList,
    SandboxPayment,
)
from x402mw.platform.openapi.operations import LIST_PARAMS, UUID, operation, query
from x402mw.platform.openapi.schemas import TEXT, Schema
from x402mw.platform.services.payment_intents import ORDER_AMOUNTS

__all__ = ["BODY_MODELS", "FIELD_NOTES", "PROPERTY_OVERRIDES", "operations"]

BODY_MODELS: list[type[BaseModel]] = [PaymentIntentCreate, RefundCreate, SimulatePaymentBody]
FIELD_NOTES: dict[str, dict[str, str]] = {
    "PaymentIntentCreate": {
        "orderId": "the order's id in the merchant's system, 1–200 characters, unique per merchant and mode",
        "amount": 'decimal amount, greater than 0, at most 6 decimals and 1,000,000,000; a string such as `"12.50"` '
        "is recommended, JSON numbers are read exactly (never as floats)",
        "currency": "the primary coin",
        "acceptedCurrencies": "coins offered at checkout; must include `currency`; default `[currency]`",
        "customer": "the buyer",
        "customerEmail": "legacy form of `customer.email`; must agree with it when both are sent",
        "customerName": "legacy form of `customer.name`; must agree with it when both are sent",
        "successUrl": "absolute http(s) URL the buyer returns to after paying, at most 2048 characters",
        "cancelUrl": "absolute http(s) URL the buyer returns to after cancelling, at most 2048 characters",
        "metadata": "at most 50 string values, keys at most 40 and values at most 500 characters. "
        "`fixed_transfer_customer_id` reuses one deposit address for that customer's orders "
        "(`409 fixed_transfer_active_payment` while another open order holds it)",
        "paymentMethods": "what checkout offers; default wallet and transfer, transfer panel closed",
        "expiresAt": "ISO 8601 timestamp with a timezone, in the future; the order expires then",
    },
    "CustomerIn": {
        "email": "exactly one email address (`local@domain.example`; no list, group or display name), "
        "at most 320 characters",
        "name": "at most 200 characters",
    },
    "PaymentMethodsIn": {
        "wallet": "offer payment from a browser wallet (default true)",
        "transfer": "offer a transfer to a dedicated deposit address (default true)",
        "transferDefaultOpen": "open the transfer panel first (default false; needs `transfer`)",
    },
    "RefundCreate": {"reason": "why the order is refunded, at most 500 characters; shown in the refund"},
    "SimulatePaymentBody": {
        "scenario": "`exact` (default), `underpaid` (half), `overpaid` (10 % more), `late` (the order is "
        "expired first) or `wrong_asset` (a coin the order does not accept)",
        "network": "a test network of this platform; default: the first one",
    },
}
PROPERTY_OVERRIDES: dict[str, dict[str, Schema]] = {
    "PaymentIntentCreate": {"amount": amount_schema(ORDER_AMOUNTS)},
}


def operations() -> list[tuple[str, str, Schema]]:
    return [*_payment_intent_operations(), *_refund_operations()]


def _payment_intent_operations() -> list[tuple[str, str, Schema]]:
    tag = "Payment intents"
    return [
        operation(
            "POST",
            "/v1/payment-intents",
            "createPaymentIntent",
            tag,
            "Create a payment intent",
            "Starts in `requires_payment`; send the buyer to `checkoutUrl`. 409 `order_id_conflict` when "
            "the merchant already has `orderId` in this mode; 409 `fixed_transfer_active_payment` when "
            "another open order holds `metadata.fixed_transfer_customer_id`. 400 `currency_unavailable` "
            "(`param` `currency` or `acceptedCurrencies`) when no chain of the platform carries a coin for "
            "the key's mode: the message names the coins that can be taken.",
            PaymentIntentEnvelope,
            status=201,
            body="PaymentIntentCreate",
        ),
        operation(
            "GET",
            "/v1/payment-intents",
            "listPaymentIntents",
            tag,
            "List payment intents",
            "Newest first; with `orderId`, the merchant's order with that id (a list of at most one).",
            PaymentIntentList,
            query=[
                *LIST_PARAMS,
                query("orderId", "only the order with this id", TEXT | {"minLength": 1, "maxLength": 200}),
            ],
            errors=(400, 404),
        ),
        operation(
            "GET",
            "/v1/payment-intents/{payment_id}",
            "retrievePaymentIntent",
            tag,
            "Retrieve a payment intent",
            "",
            PaymentIntentEnvelope,
            errors=(404,),
        ),
        operation(
            "POST",
            "/v1/payment-intents/{payment_id}/cancel",
            "cancelPaymentIntent",
            tag,
            "Cancel a payment intent",
            "Only from `requires_payment` (otherwise 409 `payment_intent_unexpected_state`); writes "
            "`payment_intent.canceled` and releases a fixed transfer address.",
            PaymentIntentEnvelope,
            errors=(404, 409),
        ),
    ]


def _refund_operations() -> list[tuple[str, str, Schema]]:
    refunds = "Refunds"
    return [
        operation(
            "POST",
            "/v1/payment-intents/{payment_id}/refunds",
            "createRefund",
            refunds,
            "Refund a payment intent",
            "Refunds everything the order received to the wallet that paid it, from the treasury through "
            "the relayer. Reserves the amount from the available balance atomically (422 "
            "`insufficient_balance`), then answers `processing` or, once the transfer has its "
            "confirmations, `completed`. 409 `payment_intent_unexpected_state` unless the order "
            "`succeeded`; 409 `payment_intent_already_refunded` while another refund is live.",
            RefundEnvelope,
            status=201,
            body="RefundCreate",
            errors=(404, 409, 422),
        ),
        operation(
            "GET",
            "/v1/refunds",
            "listRefunds",
            refunds,
            "List refunds",
            "Newest first; with `paymentId`, the refunds of that payment intent.",
            RefundList,
            query=[
                *LIST_PARAMS,
                query("paymentId", "only this order's refunds", UUID),
            ],
            errors=(400, 404),
        ),
        operation(
            "GET",
            "/v1/refunds/{refund_id}",
            "retrieveRefund",
            refunds,
            "Retrieve a refund",
            "",
            RefundEnvelope,
            errors=(404,),
        ),
        operation(
            "GET",
            "/v1/balances",
            "listBalances",
            "Balances",
            "List balances",
            "One per chain and coin the merchant has been paid in.",
            BalanceList,
        ),
        operation(
            "POST",
            "/v1/sandbox/payment-intents/{payment_id}/simulate-payment",
            "sandboxSimulatePayment",
            "Sandbox",
            "Simulate a payment",
            "Test keys only. Sends a real transfer from a fresh wallet to the order's deposit address on a "
            "test chain and answers once the platform has seen it. 409 `payment_intent_unexpected_state` "
            "unless the order awaits payment.",
            SandboxPayment,
            body="SimulatePaymentBody",
            errors=(404, 409),
        ),
    ]
