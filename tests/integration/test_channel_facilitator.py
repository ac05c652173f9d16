"""The facilitator API (``/x402/verify``, ``/x402/settle``, ``/x402/supported``) speaks
``batch-settlement`` to sellers that keep their channels themselves: payloads the x402 Foundation
SDK's client builds are verified and deposited; the seller's claim (signed here with its receiver
authorizer), settle and refund go on chain."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import httpx
import pytest
from eth_account import Account

from tests.harness import PlatformHarness
from x402mw.evm.batch_settlement import ZERO_ADDRESS
from x402mw.protocol import channels as wire

pytestmark = pytest.mark.anyio


async def test_a_seller_keeping_its_own_channels_settles_through_the_facilitator(dev_platform: PlatformHarness) -> None:
    from x402.mechanisms.evm.batch_settlement.client.eip3009 import create_batch_settlement_eip3009_deposit_payload
    from x402.mechanisms.evm.batch_settlement.client.voucher import sign_voucher
    from x402.mechanisms.evm.batch_settlement.types import ChannelConfig as SdkConfig
    from x402.mechanisms.evm.signers import EthAccountSigner
    from x402.schemas import PaymentRequirements

    harness = dev_platform
    deployment = await asyncio.to_thread(harness.deploy)
    headers = {"Authorization": f"Bearer {deployment.api_key}"}
    async with httpx.AsyncClient(base_url=harness.url, headers=headers, timeout=60) as api:
        supported = (await api.get("/x402/supported")).json()
        async with httpx.AsyncClient(base_url=harness.url) as public:
            anonymous = (await public.get("/x402/supported")).json()
        (kind,) = [k for k in supported["kinds"] if k["scheme"] == "batch-settlement"]
        authorizer = kind["extra"]["receiverAuthorizer"]
        assert all("receiverAuthorizer" not in k["extra"] for k in anonymous["kinds"])

        requirements: dict[str, Any] = {
            "scheme": "batch-settlement",
            "network": harness.network,
            "amount": "1000",
            "asset": harness.usdc,
            "payTo": deployment.payout,
            "maxTimeoutSeconds": 3600,
            "extra": {"receiverAuthorizer": authorizer, "withdrawDelay": 900, "name": "USD Coin", "version": "2"},
        }
        payer = str(deployment.agent.address)
        signer = EthAccountSigner(Account.from_key(deployment.agent_key))
        config = SdkConfig(
            payer, ZERO_ADDRESS, deployment.payout, authorizer, harness.usdc, 900, "0x" + os.urandom(32).hex()
        )
        sdk_requirements = PaymentRequirements.model_validate(requirements)
        deposit = create_batch_settlement_eip3009_deposit_payload(signer, sdk_requirements, config, 10_000, 1_000)

        def body(payload: dict[str, Any]) -> dict[str, Any]:
            return {
                "x402Version": 2,
                "paymentPayload": {"x402Version": 2, "accepted": requirements, "payload": payload},
                "paymentRequirements": requirements,
            }

        verified = (await api.post("/x402/verify", json=body(deposit.to_dict()))).json()
        assert verified["isValid"] is True and verified["payer"].lower() == payer.lower()
        deposited = (await api.post("/x402/settle", json=body(deposit.to_dict()))).json()
        assert deposited["success"] is True and deposited["amount"] == "10000", deposited
        channel = deposited["extra"]["channelState"]["channelId"]
        assert deposited["extra"]["channelState"]["balance"] == "10000"
        again = (await api.post("/x402/settle", json=body(deposit.to_dict()))).json()
        assert again["success"] is False and again["errorReason"] == wire.DEPOSIT_REUSED

        voucher = sign_voucher(signer, channel, 3_000, harness.network)
        voucher_payload = {"type": "voucher", "channelConfig": config.to_dict(), "voucher": voucher.to_dict()}
        checked = (await api.post("/x402/verify", json=body(voucher_payload))).json()
        assert checked["isValid"] is True and checked["extra"]["balance"] == "10000"
        too_much = sign_voucher(signer, channel, 20_000, harness.network)
        over = {"type": "voucher", "channelConfig": config.to_dict(), "voucher": too_much.to_dict()}
        refused = (await api.post("/x402/verify", json=body(over))).json()
        assert refused == {"isValid": False, "invalidReason": wire.CUMULATIVE_EXCEEDS_BALANCE}

        claim = {
            "type": "claim",
            "claims": [
                {
                    "voucher": {"channel": config.to_dict(), "maxClaimableAmount": "3000"},
                    "signature": voucher.signature,
                    "totalClaimed": "2500",
                }
            ],
        }
        claimed = (await api.post("/x402/settle", json=body(claim))).json()
        assert claimed["success"] is True and claimed["transaction"], claimed
        settle = {"type": "settle", "receiver": deployment.payout, "token": harness.usdc}
        settled = (await api.post("/x402/settle", json=body(settle))).json()
        assert settled["success"] is True and settled["amount"] == "2500", settled
        refund = {"type": "refund", "channelConfig": config.to_dict(), "voucher": voucher.to_dict(), "amount": "1500"}
        refunded = (await api.post("/x402/settle", json=body(refund))).json()
        assert refunded["success"] is True and refunded["amount"] == "1500", refunded
        assert refunded["extra"]["channelState"]["balance"] == "8500"
        assert refunded["extra"]["channelState"]["refundNonce"] == "1"
    assert await asyncio.to_thread(harness.balance, deployment.payout) == 2_500
