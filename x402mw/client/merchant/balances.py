"""``/balances``: the merchant's money per network and currency."""

from __future__ import annotations

from decimal import Decimal

from x402mw.client.merchant.calls import Call, Listing
from x402mw.client.merchant.resource import APIObject, Mode, Resource, listing_of, paginated


class Balance(APIObject):
    """``available`` can be refunded or paid out; ``reserved`` is held by refunds in progress."""

    object: str = "balance"
    network: str
    chain_id: int
    currency: str
    available: Decimal
    reserved: Decimal
    livemode: bool


class Balances(Resource[Mode]):
    """``client.balances``: one balance per (network, currency) the merchant has been paid in."""

    @paginated
    def list(self) -> Call[Listing[Balance]]:
        return Call("GET", "/balances", listing_of(Balance))
