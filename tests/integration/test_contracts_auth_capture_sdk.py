"""What the x402 Foundation's TypeScript SDK (``@x402/evm`` 2.27.0, its ``auth-capture`` client, run by
node) signs is accepted unchanged by our auth-capture escrows and collectors, on the dev chain and
anvil: EIP-3009 and Permit2 payloads, for the v1.1 deployment (the SDK's default) and the v1.0 one,
unbound and with the salt bound to a receiver authorizer; each is authorized and captured."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.auth_capture_helpers import GAS, operator_key
from tests.chain_fixtures import ChainUnderTest, anvil_node, anyio_backend, chain, new_key
from tests.channel_helpers import MAX_UINT, address_of_key, approve_calldata
from tests.contract_helpers import chain_now, funded_key
from x402mw.evm.auth_capture import (
    DEPLOYMENT_V1_0,
    DEPLOYMENT_V1_1,
    ZERO_ADDRESS,
    AuthCaptureDeployment,
    PaymentInfo,
    bound_salt,
    deployment_for,
    payment_info_hash,
    signature_nonce,
)
from x402mw.evm.permit2 import PERMIT2_ADDRESS
from x402mw.platform.chain.auth_capture import (
    PaymentState,
    authorize_calldata,
    capture_calldata,
    read_payment_state,
)
from x402mw.platform.chain.relayer import transact
from x402mw.platform.chain.token import balance_of

__all__ = ["anvil_node", "anyio_backend", "chain", "operator_key"]

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / ".tools"  # where `make test` installs the TypeScript SDK
SCRIPT = ROOT / "tests" / "interop" / "auth_capture_payloads.mjs"
AMOUNT = 250_000


def _sdk_payloads(payer_key: bytes, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    assert (TOOLS / "node_modules" / "@x402" / "evm").is_dir(), "run `make test`: it installs the TypeScript SDK"
    env = dict(os.environ, AC_KEY="0x" + payer_key.hex(), AC_CASES=json.dumps(cases))
    done = subprocess.run(
        ["node", "--input-type=module"],
        input=SCRIPT.read_text(),
        cwd=TOOLS,  # where node resolves the SDK's packages from
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    payloads: list[dict[str, Any]] = json.loads(done.stdout)
    return payloads


async def test_what_the_typescript_sdk_signs_is_authorized_and_captured(
    chain: ChainUnderTest, operator_key: bytes
) -> None:
    payer_key = await funded_key(chain, usdc=10 * AMOUNT)
    payer = address_of_key(payer_key)
    await transact(chain.rpc, payer_key, chain.usdc, approve_calldata(PERMIT2_ADDRESS, MAX_UINT), gas=80_000)
    receiver, fee_recipient, receiver_authorizer = (address_of_key(new_key()) for _ in range(3))
    # The SDK dates the pre-approval from the wall clock; the dev chain's clock may be ahead of it.
    now = max(await chain_now(chain), int(time.time()))
    capture_deadline, refund_deadline = now + 7_200, now + 14_400

    def requirements(method: str, escrow: str | None, authorizer: str | None) -> dict[str, Any]:
        extra: dict[str, Any] = {
            "name": "USD Coin",
            "version": "2",
            "captureAuthorizer": address_of_key(operator_key),
            "feeRecipient": fee_recipient,
            "captureDeadline": capture_deadline,
            "refundDeadline": refund_deadline,
            "minFeeBps": 100,
            "maxFeeBps": 100,
            "assetTransferMethod": method,
        }
        if escrow:
            extra["authCaptureEscrow"] = escrow
        if authorizer:
            extra["receiverAuthorizer"] = authorizer
        return {
            "scheme": "auth-capture",
            "network": f"eip155:{chain.chain_id}",
            "asset": chain.usdc,
            "amount": str(AMOUNT),
            "payTo": receiver,
            "maxTimeoutSeconds": 3_600,
            "extra": extra,
        }

    cases = [
        requirements("eip3009", None, None),
        requirements("permit2", None, None),
        requirements("eip3009", DEPLOYMENT_V1_0.escrow, None),
        requirements("permit2", DEPLOYMENT_V1_0.escrow, None),
        requirements("eip3009", DEPLOYMENT_V1_1.escrow, receiver_authorizer),
    ]
    payloads = _sdk_payloads(payer_key, cases)
    for case, payload in zip(cases, payloads, strict=True):
        deployment = deployment_for(case["extra"].get("authCaptureEscrow"))
        assert deployment is not None
        await _authorize_and_capture(chain, operator_key, payer, case, payload, deployment)
    assert await balance_of(chain.rpc, chain.usdc, payer) == 5 * AMOUNT
    assert await balance_of(chain.rpc, chain.usdc, receiver) == 5 * (AMOUNT - AMOUNT // 100)
    assert await balance_of(chain.rpc, chain.usdc, fee_recipient) == 5 * (AMOUNT // 100)


async def _authorize_and_capture(
    chain: ChainUnderTest,
    operator_key: bytes,
    payer: str,
    requirements: dict[str, Any],
    payload: dict[str, Any],
    deployment: AuthCaptureDeployment,
) -> None:
    """Rebuild the payment from the requirements and the SDK's payload as a facilitator does, check
    the SDK's nonce and payee against ours, then authorize it in our escrow and capture it all."""
    extra = requirements["extra"]
    salt = int(payload["salt"], 16)
    if extra.get("receiverAuthorizer"):
        assert salt == bound_salt(extra["receiverAuthorizer"], ZERO_ADDRESS, int(payload["saltNonce"], 16))
    else:
        assert "saltNonce" not in payload
    if "permit2Authorization" in payload:
        permit = payload["permit2Authorization"]
        pre_approval, collector = int(permit["deadline"]), deployment.permit2_collector
        assert permit["spender"] == collector and int(permit["permitted"]["amount"]) == AMOUNT
        nonce = int(permit["nonce"]).to_bytes(32, "big")
    else:
        authorization = payload["authorization"]
        pre_approval, collector = int(authorization["validBefore"]), deployment.eip3009_collector
        assert authorization["to"] == collector and int(authorization["value"]) == AMOUNT
        nonce = bytes.fromhex(authorization["nonce"][2:])
    info = PaymentInfo(
        operator=extra["captureAuthorizer"],
        payer=payer,
        receiver=requirements["payTo"],
        token=requirements["asset"],
        max_amount=int(requirements["amount"]),
        pre_approval_expiry=pre_approval,
        authorization_expiry=extra["captureDeadline"],
        refund_expiry=extra["refundDeadline"],
        min_fee_bps=extra["minFeeBps"],
        max_fee_bps=extra["maxFeeBps"],
        fee_receiver=extra["feeRecipient"],
        salt=salt,
    )
    assert nonce == signature_nonce(chain.chain_id, info, deployment.escrow)
    signature = bytes.fromhex(payload["signature"][2:])
    escrow = deployment.escrow
    data = authorize_calldata(info, AMOUNT, collector, signature)
    await transact(chain.rpc, operator_key, escrow, data, gas=GAS)
    fee = 100 if deployment.fee_in_bps else AMOUNT // 100
    data = capture_calldata(info, AMOUNT, fee, info.fee_receiver, deployment=deployment)
    await transact(chain.rpc, operator_key, escrow, data, gas=GAS)
    payment_hash = payment_info_hash(chain.chain_id, info, escrow)
    assert await read_payment_state(chain.rpc, payment_hash, escrow=escrow) == PaymentState(True, 0, AMOUNT)
