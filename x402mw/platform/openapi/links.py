"""The OpenAPI document's payment links (``/v1/payment-links``): request models, their field notes,
and the operations (see `x402mw.platform.openapi.document` and `x402mw.platform.api.payment_links`)."""

from __future__ import annotations

from pydantic import BaseModel

from x402mw.platform.api.payment_links import PaymentLinkCreate, PaymentLinkUpdate
from x402mw.platform.http.fields import amount_schema
from x402mw.platform.objects.payments import PaymentLinkEnvelope, PaymentLinkList
from x402mw.platform.openapi.operations import LIST_PARAMS, UUID, operation
from x402mw.platform.openapi.schemas import Schema
from x402mw.platform.services.payment_intents import ORDER_AMOUNTS

__all__ = ["BODY_MODELS", "FIELD_NOTES", "LINK_ID", "PROPERTY_OVERRIDES", "TAGS", "operations"]

TAG = "Payment links"
TAGS = [(TAG, "Reusable priced links: each buyer who opens one gets a payment intent of their own.")]
BODY_MODELS: list[type[BaseModel]] = [PaymentLinkCreate, PaymentLinkUpdate]
FIELD_NOTES: dict[str, dict[str, str]] = {
    "PaymentLinkCreate": {
        "name": "what the link sells, shown to the merchant (1–200 characters)",
        "amount": "decimal amount, as for payment intents; answered as sent",
        "currency": "the primary coin",
        "acceptedCurrencies": "coins offered at checkout; must include `currency`; default `[currency]`",
        "paymentMethods": "what checkout offers each buyer's order",
        "successUrl": "where buyers return after paying",
        "cancelUrl": "where buyers return after cancelling",
        "metadata": "copied to each buyer's payment intent (not `fixed_transfer_customer_id`)",
        "slug": "adds `{checkout_url_base}/paylink/<slug>.<merchant id>`: 1–64 lower-case letters, digits and "
        "inner hyphens, not a UUID, unique among the merchant's links (409 `slug_taken`)",
    },
    "PaymentLinkUpdate": {
        "name": "a new name",
        "active": "false: the link opens no new orders (orders already opened stay payable)",
    },
}
PROPERTY_OVERRIDES: dict[str, dict[str, Schema]] = {"PaymentLinkCreate": {"amount": amount_schema(ORDER_AMOUNTS)}}
LINK_ID: Schema = {
    "name": "link_id",
    "in": "path",
    "required": True,
    "description": "id of a payment link (a UUID); any other value answers 404 `resource_missing`, as an "
    "unknown id does",
    "schema": UUID,
}


def operations() -> list[tuple[str, str, Schema]]:
    one = "/v1/payment-links/{link_id}"
    found = [
        operation(
            "POST",
            "/v1/payment-links",
            "createPaymentLink",
            TAG,
            "Create a payment link",
            "Hand `checkoutUrl` (or `slugUrl`) to buyers. 409 `slug_taken` when another of your links has "
            "the slug; 400 `currency_unavailable` when no chain of the platform carries a coin.",
            PaymentLinkEnvelope,
            status=201,
            body="PaymentLinkCreate",
            errors=(409,),
        ),
        operation(
            "GET",
            "/v1/payment-links",
            "listPaymentLinks",
            TAG,
            "List payment links",
            "Newest first.",
            PaymentLinkList,
            query=LIST_PARAMS,
            errors=(400, 404),
        ),
        operation("GET", one, "retrievePaymentLink", TAG, "Retrieve a payment link", "", PaymentLinkEnvelope),
        operation(
            "PATCH",
            one,
            "updatePaymentLink",
            TAG,
            "Update a payment link",
            "Rename it, or deactivate it (`active: false`): its page then says it is no longer active and "
            "opening it answers 409 `payment_link_inactive`.",
            PaymentLinkEnvelope,
            body="PaymentLinkUpdate",
        ),
    ]
    for _method, path, item in found:
        if "{link_id}" in path:
            item["parameters"] = [*item.get("parameters", []), LINK_ID]
            item["responses"].setdefault("404", {"$ref": "#/components/responses/NotFound"})
            item["responses"].setdefault("400", {"$ref": "#/components/responses/BadRequest"})
            item["responses"] = dict(sorted(item["responses"].items()))
    return found
