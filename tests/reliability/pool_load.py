"""Paid requests as fast as the platform settles them, for the relayer pool's test and benchmark:
``concurrency`` sellers' settle calls (``POST /v1/agent/settlements``, as the seller middleware
makes them) spread over every ``serve`` process of a `Cluster`, each with a payment signed here.

A careful seller's client: a 503 (the relayer accounts are all busy, or the process it reached is
gone) or a cut connection is sent again, with the same signature, to the next process, after
``retry_after`` seconds; a pending settlement is asked again until it is final. So every payment
ends settled or with an answer that is not worth trying again (recorded in ``other``).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.reliability.cluster import Cluster, Merchant
from x402mw.client import Wallet
from x402mw.protocol import PaymentRequirements
from x402mw.transport import KeepAliveTransport

PRICE = 10_000  # 0.01 USDC


@dataclass
class LoadResult:
    settled: list[str] = field(default_factory=list)  # the transaction of each payment settled
    busy: int = 0  # 503 answers (sent again)
    cut: int = 0  # connections cut or refused (sent again elsewhere)
    other: list[tuple[int, str]] = field(default_factory=list)  # final answers that were not settled
    seconds: float = 0.0

    @property
    def rate(self) -> float:
        return len(self.settled) / self.seconds if self.seconds else 0.0


class SettleLoad:
    def __init__(self, cluster: Cluster, merchant: Merchant, endpoint: str, payout: str, payers: list[Wallet]) -> None:
        self.cluster, self.merchant, self.endpoint, self.payout, self.payers = (
            cluster,
            merchant,
            endpoint,
            payout,
            payers,
        )
        with merchant.api() as api:
            terms = api.get(f"/agent/endpoints/{endpoint}").json()["endpoint"]
        self.terms = {
            "scheme": "exact",
            "network": terms["network"],
            "amount": str(PRICE),
            "asset": terms["asset"],
            "payTo": payout,
            "maxTimeoutSeconds": 600,
            "extra": {"name": terms["assetName"], "version": terms["assetVersion"]},
        }
        self.accepted = PaymentRequirements.model_validate(self.terms)

    def body(self, payer: Wallet) -> dict[str, Any]:
        payload = payer.sign_payment(self.accepted).to_wire()
        return {
            "endpointId": self.endpoint,
            "challengeId": "ch-" + payload["payload"]["authorization"]["nonce"][2:18],
            "resource": "http://seller.test/weather",
            "expiresAt": int(time.time()) + 600,
            "waitSeconds": 30,
            "accepted": self.terms,
            "paymentPayload": payload,
        }

    async def run(self, seconds: float, concurrency: int, *, retry_after: float = 0.2) -> LoadResult:
        """Pay for ``seconds`` with ``concurrency`` calls at a time; each payment started before the
        end is finished (however long that takes)."""
        result = LoadResult()
        headers = {"Authorization": f"Bearer {self.merchant.api_key}"}
        transport = KeepAliveTransport(max_connections=concurrency, max_idle=concurrency)
        async with httpx.AsyncClient(headers=headers, timeout=120, transport=transport) as client:
            started = time.monotonic()
            deadline = started + seconds

            async def seller(index: int) -> None:
                turn = 0
                while time.monotonic() < deadline:
                    body = self.body(self.payers[(index + turn) % len(self.payers)])
                    turn += 1
                    tries = 0
                    while True:
                        serve = self.cluster.serves[(index + tries) % len(self.cluster.serves)]
                        tries += 1
                        try:
                            reply = await client.post(serve.url + "/v1/agent/settlements", json=body)
                        except httpx.TransportError:
                            result.cut += 1
                            await asyncio.sleep(retry_after)
                            continue
                        if reply.status_code == 503:
                            result.busy += 1
                            await asyncio.sleep(retry_after)
                            continue
                        answer = reply.json() if reply.status_code == 200 else {}
                        if answer.get("status") == "pending":
                            await asyncio.sleep(retry_after)
                            continue
                        if answer.get("status") == "settled":
                            result.settled.append(answer["settlement"]["transaction"])
                        else:
                            result.other.append((reply.status_code, reply.text[:300]))
                        break

            await asyncio.gather(*(seller(index) for index in range(concurrency)))
            result.seconds = time.monotonic() - started
        return result
