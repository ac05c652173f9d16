"""Helpers for the tests of the auth-capture escrow (``X402AuthCaptureEscrow``, v1.1, and
``X402AuthCaptureEscrowV1_0``) and its token collectors: a payment with its keys on a chain, the
payer's EIP-3009 and Permit2 authorizations for the collectors, sending the operator's and the
payer's calls, revert checks, the escrow's events. The ``operator_key`` fixture is module-scoped:
import it with ``chain``."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

import pytest

from tests.chain_fixtures import RECEIVE, ChainUnderTest, authorization_message, new_key
from tests.channel_helpers import MAX_UINT, address_of_key, approve_calldata
from tests.contract_helpers import call_error, chain_now, error_selector, funded_key, permit_transfer_message
from tests.contract_helpers import sign_message as sign_typed
from x402mw.evm.auth_capture import (
    DEPLOYMENT_V1_1,
    DEPLOYMENTS,
    AuthCaptureDeployment,
    PaymentInfo,
    payment_info_hash,
    signature_nonce,
)
from x402mw.evm.permit2 import PERMIT2_ADDRESS
from x402mw.platform.chain.auth_capture import (
    EscrowEvent,
    PaymentState,
    authorize_calldata,
    decode_events,
    read_payment_state,
)
from x402mw.platform.chain.relayer import transact
from x402mw.platform.chain.transactions import TxReceipt

GAS = 1_000_000
PRE_APPROVAL = 600
"""Seconds from now to a test payment's ``preApprovalExpiry``; its authorization and refund expiries follow."""
AUTHORIZATION = 3_600
REFUND = 7_200


@pytest.fixture(scope="module")
async def operator_key(chain: ChainUnderTest) -> bytes:
    """The operator of the module's payments: gas, USDC for refunds, and the operator refund
    collectors of both deployments approved."""
    key = await funded_key(chain, usdc=100_000_000)
    for deployment in DEPLOYMENTS:
        data = approve_calldata(deployment.operator_refund_collector, MAX_UINT)
        await transact(chain.rpc, key, chain.usdc, data, gas=80_000)
    return key


@dataclass
class Payment:
    """One payment on ``chain``: its terms, the payer's key (with gas and USDC), the operator's key
    and the deployment whose escrow it goes through."""

    chain: ChainUnderTest
    info: PaymentInfo
    payer_key: bytes
    operator_key: bytes
    deployment: AuthCaptureDeployment = DEPLOYMENT_V1_1

    @property
    def escrow(self) -> str:
        return self.deployment.escrow

    @property
    def hash(self) -> bytes:
        return payment_info_hash(self.chain.chain_id, self.info, self.escrow)

    @property
    def nonce(self) -> bytes:
        return signature_nonce(self.chain.chain_id, self.info, self.escrow)

    def changed(self, **changes: Any) -> Payment:
        """The same payment with other terms."""
        return replace(self, info=replace(self.info, **changes))

    async def state(self) -> PaymentState:
        return await read_payment_state(self.chain.rpc, self.hash, escrow=self.escrow)

    def eip3009_signature(self, *, nonce: bytes | None = None, to: str | None = None) -> bytes:
        """The payer's ``ReceiveWithAuthorization`` of ``maxAmount`` to the EIP-3009 collector, valid
        until ``preApprovalExpiry``, with the payment's nonce: the collector data."""
        message = authorization_message(
            self.info.payer,
            self.chain.domain(self.info.token),
            to=to or self.deployment.eip3009_collector,
            value=self.info.max_amount,
            valid_after=0,
            valid_before=self.info.pre_approval_expiry,
            nonce=nonce or self.nonce,
            primary_type=RECEIVE,
        )
        return sign_typed(self.payer_key, message)

    def permit2_signature(self) -> bytes:
        """The payer's Permit2 ``PermitTransferFrom`` of ``maxAmount`` to the Permit2 collector, with
        the payment's nonce as a uint256 and ``preApprovalExpiry`` as deadline."""
        message = permit_transfer_message(
            self.chain.chain_id,
            token=self.info.token,
            amount=self.info.max_amount,
            spender=self.deployment.permit2_collector,
            nonce=int.from_bytes(self.nonce, "big"),
            deadline=self.info.pre_approval_expiry,
        )
        return sign_typed(self.payer_key, message)

    def authorize_data(self, amount: int | None = None) -> bytes:
        """``authorize`` of ``amount`` (default the whole ``maxAmount``) through the EIP-3009 collector."""
        amount = self.info.max_amount if amount is None else amount
        return authorize_calldata(self.info, amount, self.deployment.eip3009_collector, self.eip3009_signature())

    async def send(self, data: bytes, *, key: bytes | None = None) -> TxReceipt:
        """Send ``data`` to the escrow from ``key`` (default the operator)."""
        return await transact(self.chain.rpc, key or self.operator_key, self.escrow, data, gas=GAS)

    async def refused(self, data: bytes, error: str, *, key: bytes | None = None) -> None:
        """Calling the escrow with ``data`` from ``key`` (default the operator) reverts with the custom
        error of signature ``error`` (e.g. ``ZeroAuthorization(bytes32)``), whatever its arguments."""
        sender = address_of_key(key or self.operator_key)
        answer = await call_error(self.chain.rpc, sender, self.escrow, data)
        assert answer[:10] == error_selector(error), (answer, error)

    async def events(self, receipt: TxReceipt, *, stores: bool = False) -> list[EscrowEvent]:
        """The escrow's events in ``receipt`` (``TokenStoreCreated`` only with ``stores``)."""
        found = await self.chain.rpc.request("eth_getTransactionReceipt", [receipt.transaction_hash])
        events = decode_events(found["logs"], deployment=self.deployment)
        return [e for e in events if stores or e.name != "TokenStoreCreated"]


async def new_payment(
    chain: ChainUnderTest,
    operator_key: bytes,
    *,
    max_amount: int = 1_000_000,
    payer_usdc: int | None = None,
    deployment: AuthCaptureDeployment = DEPLOYMENT_V1_1,
    min_fee_bps: int = 0,
    max_fee_bps: int = 100,
    fee_receiver: str | None = None,
    permit2: bool = False,
    **expiries: int,
) -> Payment:
    """A payment of a new payer (funded with ``payer_usdc``, default ``max_amount``; Permit2 approved
    when ``permit2``) to a new receiver, its expiries ``pre_approval_expiry``,
    ``authorization_expiry`` and ``refund_expiry`` (absolute, each defaulting to now plus
    :data:`PRE_APPROVAL`, :data:`AUTHORIZATION`, :data:`REFUND`)."""
    payer_key = await funded_key(chain, usdc=max_amount if payer_usdc is None else payer_usdc)
    if permit2:
        await transact(chain.rpc, payer_key, chain.usdc, approve_calldata(PERMIT2_ADDRESS, MAX_UINT), gas=80_000)
    now = await chain_now(chain)
    info = PaymentInfo(
        operator=address_of_key(operator_key),
        payer=address_of_key(payer_key),
        receiver=address_of_key(new_key()),
        token=chain.usdc,
        max_amount=max_amount,
        pre_approval_expiry=expiries.get("pre_approval_expiry", now + PRE_APPROVAL),
        authorization_expiry=expiries.get("authorization_expiry", now + AUTHORIZATION),
        refund_expiry=expiries.get("refund_expiry", now + REFUND),
        min_fee_bps=min_fee_bps,
        max_fee_bps=max_fee_bps,
        fee_receiver=address_of_key(new_key()) if fee_receiver is None else fee_receiver,
        salt=int.from_bytes(os.urandom(32), "big"),
    )
    return Payment(chain, info, payer_key, operator_key, deployment)
