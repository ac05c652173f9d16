"""Agent payments, for every scheme: the one entry point of the agent settlement API.

`Payments.settle` chooses by the scheme of the terms accepted: an ``exact`` payment is settled (or,
for a paid MCP tool, held: `SettleRequest.hold`) by `SettlementService`; an ``upto`` payment is
authorized, held for the usage its handler reports, by `UptoSettlement`. A held payment of either
scheme is then captured or released by its id (`Holds`).
"""

from __future__ import annotations

from datetime import timedelta

from x402mw.platform.services.settlement.holds import Holds
from x402mw.platform.services.settlement.outcomes import SettleOutcome, SettleRequest
from x402mw.platform.services.settlement.service import SettlementService
from x402mw.platform.services.settlement.upto import AUTHORIZE_LEASE, UptoSettlement


class Payments:
    """Settlement by scheme, and the holds of both, on one `SettlementService`."""

    def __init__(self, service: SettlementService, *, lease: timedelta = AUTHORIZE_LEASE) -> None:
        self.service = service
        self.holds = Holds(service)
        self.upto = UptoSettlement(service, self.holds, lease=lease)

    async def settle(self, request: SettleRequest) -> SettleOutcome:
        """Settle one payment of the settlement API: ``exact``, settled (``held`` with
        ``request.hold``); ``upto``, ``authorized`` (held for its capture). `IdentifierConflict` as
        `SettlementService.settle` raises it."""
        if request.accepted.scheme == "upto":
            return await self.upto.authorize(request)
        return await self.service.settle(request)
