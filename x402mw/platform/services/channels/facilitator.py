"""The ``batch-settlement`` scheme at the x402 facilitator API (``/x402/verify``, ``/x402/settle``), for
sellers built on another SDK that keep their channels' state themselves: verify a deposit, voucher
or refund payload against the chain (the specification's verification rules), and settle a
``deposit``, a ``claim``, a ``settle`` or a ``refund``. A claim or refund without the receiver
authorizer's signature is signed here when the channels' receiver authorizer is the caller's
(the one ``/x402/supported`` names to a caller presenting its key)."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from x402mw.evm.batch_settlement import (
    BATCH_SETTLEMENT_ADDRESS,
    ZERO_ADDRESS,
    ChannelConfig,
    ChannelDomain,
    VoucherClaim,
    channel_id,
    claim_batch_digest,
    refund_digest,
)
from x402mw.evm.eip712 import sign_digest
from x402mw.evm.keys import address_of
from x402mw.platform.chain.channels import (
    ChannelSnapshot,
    claim_with_signature_calldata,
    multicall_calldata,
    read_channel,
    refund_with_signature_calldata,
    settle_calldata,
)
from x402mw.platform.chain.rpc import RpcError
from x402mw.platform.chain.token import balance_of
from x402mw.platform.chain.transactions import RevertError
from x402mw.platform.services.chains import ChainHandle
from x402mw.platform.services.channels.checks import ChannelRefusal, ChannelTerms, verify_voucher
from x402mw.platform.services.channels.service import ChannelService
from x402mw.platform.services.channels.worker import settled_amount
from x402mw.protocol import channels as wire
from x402mw.protocol.models import PaymentRequirements, SettlementResponse

SETTLE_GAS = 150_000
CLAIM_GAS_BASE = 120_000
CLAIM_GAS_ROW = 60_000


def snapshot_extra(channel: str, snapshot: ChannelSnapshot) -> dict[str, Any]:
    return wire.channel_state(
        channel,
        balance=snapshot.balance,
        total_claimed=snapshot.total_claimed,
        withdraw_requested_at=snapshot.withdraw_requested_at,
        refund_nonce=snapshot.refund_nonce,
        charged=None,
    )


def _config(wire_config: wire.ChannelConfigWire) -> ChannelConfig:
    return ChannelConfig(
        wire_config.payer,
        wire_config.payer_authorizer,
        wire_config.receiver,
        wire_config.receiver_authorizer,
        wire_config.token,
        wire_config.withdraw_delay,
        bytes.fromhex(wire_config.salt[2:]),
    )


class ChannelFacilitator:
    """The facilitator's side of payment channels, for the caller (a merchant) of the API."""

    def __init__(self, service: ChannelService) -> None:
        self.service = service

    def _chain(self, requirements: PaymentRequirements) -> ChainHandle:
        chain = self.service.chains.by_network(requirements.network)
        if chain is None:
            raise ChannelRefusal(wire.NETWORK_MISMATCH, f"network {requirements.network} is not settled here")
        return chain

    def _terms(self, requirements: PaymentRequirements) -> ChannelTerms:
        chain = self._chain(requirements)
        extra = requirements.extra
        authorizer, delay = extra.get("receiverAuthorizer"), extra.get("withdrawDelay")
        if not isinstance(authorizer, str) or authorizer.lower() == ZERO_ADDRESS:
            raise ChannelRefusal(wire.AUTHORIZER_MISMATCH, "the requirements name no receiverAuthorizer")
        if not isinstance(delay, int) or isinstance(delay, bool):
            raise ChannelRefusal(wire.WITHDRAW_DELAY_MISMATCH, "the requirements name no withdrawDelay")
        asset = chain.network.asset_by_address(requirements.asset)
        return ChannelTerms(
            chain=chain,
            token=requirements.asset,
            currency=asset.symbol if asset else "",
            payout_history=frozenset({requirements.pay_to.lower()}),
            receiver_authorizer=authorizer,
            withdraw_delay=delay,
            min_deposit=0,
            domain=ChannelDomain(chain.chain_id),
        )

    async def verify(self, requirements: PaymentRequirements, data: Any) -> tuple[str, dict[str, Any]]:
        """The payer and the channel's on-chain state, or `ChannelRefusal`."""
        payload = _parse(wire.ChannelPaymentPayload, data, wire.VOUCHER_PAYLOAD).payload
        terms = self._terms(requirements)
        verified = verify_voucher(terms, requirements, payload)
        if verified.needs_wallet_check:
            await self.service.check_wallet(terms, verified)
        snapshot = await self._read(terms.chain, verified.channel)
        ceiling = verified.ceiling
        if payload.type == "deposit":
            assert payload.deposit is not None
            held = await balance_of(terms.chain.rpc, verified.config.token, verified.config.payer)
            if held < payload.deposit.amount:
                raise ChannelRefusal(wire.INSUFFICIENT_BALANCE, "the payer holds less than the deposit")
            if ceiling > snapshot.balance + payload.deposit.amount:
                raise ChannelRefusal(
                    wire.CUMULATIVE_EXCEEDS_BALANCE, "the voucher exceeds the balance with the deposit"
                )
            if ceiling < snapshot.total_claimed:
                raise ChannelRefusal(wire.CUMULATIVE_BELOW_CLAIMED, "the voucher is below what was claimed")
        else:
            if snapshot.balance == 0:
                raise ChannelRefusal(wire.CHANNEL_NOT_FOUND, "the channel holds nothing")
            if ceiling > snapshot.balance:
                raise ChannelRefusal(wire.CUMULATIVE_EXCEEDS_BALANCE, "the voucher exceeds the channel's balance")
            below = ceiling < snapshot.total_claimed if payload.type == "refund" else ceiling <= snapshot.total_claimed
            if below:
                raise ChannelRefusal(wire.CUMULATIVE_BELOW_CLAIMED, "the voucher is not above what was claimed")
        return verified.config.payer, snapshot_extra(verified.id, snapshot)

    async def settle(
        self, merchant_id: str, livemode: bool, requirements: PaymentRequirements, data: Any
    ) -> SettlementResponse:
        """Settle a ``deposit``, ``claim``, ``settle`` or ``refund``; `ChannelRefusal` otherwise."""
        inner = data.get("payload") if isinstance(data, dict) else None
        kind = inner.get("type") if isinstance(inner, dict) else None
        network = requirements.network
        if kind == "deposit":
            payer, _extra = await self.verify(requirements, data)
            payload = _parse(wire.ChannelPaymentPayload, data, wire.DEPOSIT_PAYLOAD).payload
            assert payload.deposit is not None
            terms = self._terms(requirements)
            verified = verify_voucher(terms, requirements, payload)
            transaction, snapshot = await self.service.submit_deposit(terms.chain, verified, payload.deposit, 30.0)
            return _response(
                network, transaction, payload.deposit.amount, payer, requirements.asset, verified.id, snapshot
            )
        if kind == "claim":
            claim = _parse(wire.ClaimPayload, inner, wire.CLAIM_PAYLOAD)
            return await self._claim(merchant_id, livemode, requirements, claim)
        if kind == "settle":
            settle = _parse(wire.SettlePayload, inner, wire.SETTLE_PAYLOAD)
            chain = self._chain(requirements)
            transaction = await self._send(chain, settle_calldata(settle.receiver, settle.token), SETTLE_GAS)
            amount = await self._settled(chain, transaction)
            return SettlementResponse(success=True, transaction=transaction, network=network, amount=amount)
        if kind == "refund":
            refund = _parse(wire.RefundSettlePayload, inner, wire.REFUND_PAYLOAD)
            return await self._refund(merchant_id, livemode, requirements, refund)
        raise ChannelRefusal(wire.PAYLOAD_TYPE, "payload.type must be deposit, claim, settle or refund")

    async def _claim(
        self, merchant_id: str, livemode: bool, requirements: PaymentRequirements, claim: wire.ClaimPayload
    ) -> SettlementResponse:
        chain = self._chain(requirements)
        rows = [
            VoucherClaim(
                _config(row.voucher.channel),
                row.voucher.max_claimable_amount,
                bytes.fromhex(row.signature[2:]),
                row.total_claimed,
            )
            for row in claim.claims
        ]
        authorizers = {row.config.receiver_authorizer.lower() for row in rows}
        if len(authorizers) != 1:
            raise ChannelRefusal(wire.CLAIM_PAYLOAD, "every claim row must share one receiverAuthorizer")
        domain = ChannelDomain(chain.chain_id)
        if claim.claim_authorizer_signature is not None:
            signature = bytes.fromhex(claim.claim_authorizer_signature.removeprefix("0x"))
        else:
            key = await self._own_key(merchant_id, livemode, next(iter(authorizers)))
            signature = sign_digest(key, claim_batch_digest(domain, rows))
        data = claim_with_signature_calldata(rows, signature)
        transaction = await self._send(chain, data, CLAIM_GAS_BASE + CLAIM_GAS_ROW * len(rows), wire.CLAIM_PAYLOAD)
        return SettlementResponse(success=True, transaction=transaction, network=requirements.network)

    async def _refund(
        self, merchant_id: str, livemode: bool, requirements: PaymentRequirements, refund: wire.RefundSettlePayload
    ) -> SettlementResponse:
        chain = self._chain(requirements)
        config = _config(refund.channel_config)
        domain = ChannelDomain(chain.chain_id)
        channel = channel_id(domain, config)
        snapshot = await self._read(chain, channel)
        nonce = snapshot.refund_nonce if refund.refund_nonce is None else refund.refund_nonce
        claimed = max([snapshot.total_claimed, *(row.total_claimed for row in refund.claims)])
        left = snapshot.balance - claimed
        amount = left if refund.amount is None else refund.amount
        if left <= 0:
            raise ChannelRefusal(wire.REFUND_NO_BALANCE, "nothing is left in the channel to refund")
        if amount <= 0 or amount > left:
            raise ChannelRefusal(wire.REFUND_AMOUNT_INVALID, f"the refund must be from 1 to {left}")
        key = None
        if refund.refund_authorizer_signature is None or (refund.claims and refund.claim_authorizer_signature is None):
            key = await self._own_key(merchant_id, livemode, config.receiver_authorizer)
        calls = []
        if refund.claims:
            rows = [
                VoucherClaim(config, r.voucher.max_claimable_amount, bytes.fromhex(r.signature[2:]), r.total_claimed)
                for r in refund.claims
            ]
            if refund.claim_authorizer_signature is not None:
                claim_signature = bytes.fromhex(refund.claim_authorizer_signature.removeprefix("0x"))
            else:
                assert key is not None
                claim_signature = sign_digest(key, claim_batch_digest(domain, rows))
            calls.append(claim_with_signature_calldata(rows, claim_signature))
        if refund.refund_authorizer_signature is not None:
            refund_signature = bytes.fromhex(refund.refund_authorizer_signature.removeprefix("0x"))
        else:
            assert key is not None
            refund_signature = sign_digest(key, refund_digest(domain, channel, nonce, amount))
        calls.append(refund_with_signature_calldata(config, amount, nonce, refund_signature))
        data = calls[0] if len(calls) == 1 else multicall_calldata(calls)
        transaction = await self._send(chain, data, 400_000, wire.REFUND_TRANSACTION_FAILED)
        after = await self._read(chain, channel)
        return _response(requirements.network, transaction, amount, config.payer, None, "0x" + channel.hex(), after)

    async def _own_key(self, merchant_id: str, livemode: bool, authorizer: str) -> bytes:
        key = await self.service.authorizers.key(merchant_id, livemode)
        if address_of(key).lower() != authorizer.lower():
            raise ChannelRefusal(
                wire.AUTHORIZER_MISMATCH, "no authorizer signature, and the receiverAuthorizer is not the caller's"
            )
        return key

    async def _read(self, chain: ChainHandle, channel: bytes) -> ChannelSnapshot:
        try:
            return await read_channel(chain.rpc, channel)
        except RpcError as exc:
            raise ChannelRefusal(wire.CHANNEL_STATE_READ_FAILED, f"the channel's state cannot be read: {exc}") from None

    async def _send(self, chain: ChainHandle, data: bytes, gas: int, reason: str = wire.TRANSACTION_REVERTED) -> str:
        try:
            await chain.relayer.simulate(BATCH_SETTLEMENT_ADDRESS, data)
        except (RevertError, RpcError) as exc:
            raise ChannelRefusal(reason, f"the transaction would fail: {exc}") from None
        transaction = await chain.relayer.send(BATCH_SETTLEMENT_ADDRESS, data, gas=gas)
        receipt = await chain.wait_for(transaction, timeout=30.0)
        if receipt.status != 1:
            raise ChannelRefusal(wire.TRANSACTION_REVERTED, f"transaction {transaction} reverted")
        return receipt.transaction_hash

    async def _settled(self, chain: ChainHandle, transaction: str) -> int:
        found = await chain.rpc.request("eth_getTransactionReceipt", [transaction])
        return settled_amount(list(found["logs"]) if found else [])


def _parse(model: Any, data: Any, reason: str) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise ChannelRefusal(reason, f"malformed at {where or 'top level'}: {first['msg']}") from None


def _response(
    network: str,
    transaction: str,
    amount: int,
    payer: str,
    asset: str | None,
    channel: str,
    snapshot: ChannelSnapshot,
) -> SettlementResponse:
    body: dict[str, Any] = {
        "success": True,
        "transaction": transaction,
        "network": network,
        "payer": payer,
        "amount": str(amount),
        "extra": {"channelState": snapshot_extra(channel, snapshot)},
    }
    if asset is not None:
        body["asset"] = asset
    return SettlementResponse.model_validate(body)
