"""Paying by payment channel (the x402 ``batch-settlement`` scheme): what the agent opens, signs and
remembers per channel.

The agent opts in with a `ChannelPolicy` (``X402Auth(..., channels=ChannelPolicy(max_deposit="5"))``).
On a route that offers ``batch-settlement`` the first payment is a *deposit*: an EIP-3009
``ReceiveWithAuthorization`` to the escrow's deposit collector (a Permit2 witness permit when the
offer says ``assetTransferMethod: permit2``) of the route's ``minDeposit`` (else ten requests' worth),
never more than ``max_deposit``, with the first voucher. Every later request carries one cumulative
voucher (``Voucher(channelId, maxClaimableAmount)``, one signature, no RPC) for what was charged so far
plus this request's price. The channel is the agent's wallet as payer and voucher signer, the
seller's ``payTo``, ``receiverAuthorizer``, token and ``withdrawDelay``, and the policy's ``salt``
(zero unless given): the same wallet finds the same channel again after a restart.

`ChannelBook` keeps each channel's state in memory: its balance as the agent knows it and what was
charged (``chargedCumulativeAmount``), updated from each answer's ``extra.chargedAmount`` (never
copied from the seller's ``channelState``). A seller whose count differs answers with a corrective
402 carrying its last voucher signed by this wallet; the signature is checked before its count is
adopted. A channel that cannot cover the next request is topped up.
"""

from __future__ import annotations

import functools
import secrets
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from x402mw.client.spending import EXACT, parse_cap
from x402mw.client.wallet import CLOCK_SKEW_SECONDS, MAX_VALIDITY_SECONDS, Wallet, token_domain
from x402mw.errors import ConfigurationError, InvalidPaymentError, PaymentRefusedError
from x402mw.evm.batch_settlement import (
    ERC3009_DEPOSIT_COLLECTOR_ADDRESS,
    PERMIT2_DEPOSIT_COLLECTOR_ADDRESS,
    ZERO_ADDRESS,
    ChannelConfig,
    ChannelDomain,
    channel_id,
    erc3009_deposit_nonce,
    voucher_digest,
)
from x402mw.evm.eip712 import InvalidSignatureError, TransferAuthorization, recover_digest_signer
from x402mw.evm.keys import to_checksum_address
from x402mw.protocol.codec import decode_json_header
from x402mw.protocol.models import PaymentRequired, PaymentRequirements, ResourceInfo
from x402mw.protocol.networks import parse_caip2

CHANNEL_BUSY = "invalid_batch_settlement_evm_channel_busy"
"""The seller was paid on this channel by another request at that moment (another process of this
agent): the payment is signed and sent again, as a correction is."""
DEPOSIT_REQUESTS = 10
"""Without a ``minDeposit`` in the offer, a deposit covers this many requests (within the cap)."""
_TERMS_KEPT = 4096
_NEEDS_DEPOSIT = frozenset(
    {
        "invalid_batch_settlement_evm_channel_not_found",
        "invalid_batch_settlement_evm_cumulative_exceeds_balance",
        "invalid_batch_settlement_evm_missing_channel",
    }
)


@dataclass(frozen=True, slots=True)
class ChannelPolicy:
    """An agent's consent to pay ``batch-settlement`` routes through payment channels.

    ``max_deposit`` (token units, like the auth's caps: ``"5"`` is 5 USDC) is the most one deposit
    may lock in a channel; a route asking for more (``minDeposit``) gets ``max_deposit``, and one
    whose single request costs more is not paid by channel. Deposits are the agent's money held in
    escrow, refundable: they do not count in ``spent``; what the seller charges does, within
    ``max_amount`` and ``max_total``. With ``prefer`` (the default) a channel offer is taken before
    the other offers of a 402. ``salt`` (32 bytes) tells apart channels otherwise the same.
    """

    max_deposit: Decimal | str | int
    prefer: bool = True
    salt: bytes = bytes(32)

    def __post_init__(self) -> None:
        problems: list[str] = []
        cap = parse_cap(self.max_deposit, "max_deposit", problems)
        if cap is not None and cap <= 0:
            problems.append("max_deposit must be more than 0")
        if not isinstance(self.salt, bytes) or len(self.salt) != 32:
            problems.append("salt must be 32 bytes")
        if problems:
            raise ConfigurationError(problems)
        object.__setattr__(self, "max_deposit", cap)


@dataclass(eq=False, slots=True)
class ChannelState:
    """One channel as this agent knows it: ``balance`` (deposited, less refunds) and ``charged``
    (the cumulative amount the seller charged) in atomic units; ``busy`` while a request pays by it."""

    id: str
    config: ChannelConfig
    network: str
    balance: int = 0
    charged: int = 0
    deposited: int = 0
    busy: bool = False

    @property
    def remaining(self) -> int:
        return self.balance - self.charged


@dataclass(frozen=True, slots=True)
class ChannelCharge:
    """What a channel payment did: the request's ``charged`` amount, the ``deposit`` it made (0 for a
    voucher) with its ``transaction``, and the channel after it."""

    channel_id: str
    charged: int
    deposit: int
    transaction: str
    balance: int
    charged_total: int


@dataclass(frozen=True, slots=True)
class ChannelRefund:
    """A cooperative refund: ``amount`` returned to the payer by ``transaction``; ``balance`` left."""

    channel_id: str
    amount: int
    transaction: str
    balance: int


@dataclass(eq=False, slots=True)
class RefundOrder:
    """A request's ask for its channel's cooperative refund (``amount`` None: all that is unspent);
    the flow sets ``result``."""

    amount: int | None
    result: ChannelRefund | None = None


@dataclass(eq=False, slots=True)
class Pending:
    """A channel payment signed and not answered yet."""

    state: ChannelState
    requirements: PaymentRequirements
    payload: dict[str, Any]
    kind: str  # deposit, voucher or refund
    ceiling: int  # the voucher's maxClaimableAmount
    deposit: int = 0
    refund: RefundOrder | None = None
    outcome: ChannelCharge | None = field(default=None)


@functools.lru_cache(maxsize=64)
def _domain(chain_id: int) -> ChannelDomain:
    # a domain separator is three keccaks; an agent pays on a few chains only
    return ChannelDomain(chain_id)


def _atomic(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 39:
        return int(value)
    return None


class ChannelBook:
    """The channels of one wallet, and the signing of their payments. Thread-safe."""

    def __init__(self, wallet: Wallet, policy: ChannelPolicy) -> None:
        self.wallet = wallet
        self.policy = policy
        self._channels: dict[str, ChannelState] = {}
        self._by_terms: dict[tuple[object, ...], ChannelState] = {}  # the offer's terms => its channel
        self._seeds: dict[str, ChannelCharge] = {}  # restored, for channels not met yet
        self._lock = threading.Lock()

    def __iter__(self) -> Iterator[ChannelState]:
        with self._lock:
            return iter(list(self._channels.values()))

    def max_deposit_atomic(self, decimals: int) -> int:
        cap = self.policy.max_deposit
        assert isinstance(cap, Decimal)
        return int(cap.scaleb(decimals, context=EXACT))

    def config_for(self, entry: PaymentRequirements) -> ChannelConfig:
        return ChannelConfig(
            self.wallet.address,
            ZERO_ADDRESS,
            to_checksum_address(entry.pay_to),
            to_checksum_address(str(entry.extra["receiverAuthorizer"])),
            to_checksum_address(entry.asset),
            int(entry.extra["withdrawDelay"]),
            self.policy.salt,
        )

    def state_for(self, entry: PaymentRequirements) -> ChannelState:
        """The channel paying ``entry`` (new, knowing nothing, the first time)."""
        extra = entry.extra
        terms = (entry.network, entry.pay_to, str(extra["receiverAuthorizer"]), entry.asset, extra["withdrawDelay"])
        with self._lock:
            state = self._by_terms.get(terms)
        if state is not None:
            return state
        config = self.config_for(entry)
        identity = "0x" + channel_id(_domain(parse_caip2(entry.network)), config).hex()
        with self._lock:
            state = self._channels.get(identity)
            if state is None:
                state = self._channels[identity] = ChannelState(identity, config, entry.network)
                seed = self._seeds.pop(identity, None)
                if seed is not None:
                    state.balance, state.charged = seed.balance, seed.charged_total
            if len(self._by_terms) < _TERMS_KEPT:
                self._by_terms[terms] = state
            return state

    def restore(self, charges: Iterable[ChannelCharge | None]) -> None:
        """Start from what this agent recorded of its channels (the ``channel`` of the
        `PaymentRecord` s its ``on_payment`` kept), in the order they were made: the next payment
        into each is a voucher from there, without the corrective 402 a restarted agent otherwise
        gets first. A record that is stale costs that 402, no more."""
        with self._lock:
            for charge in charges:
                if charge is None:  # a record of a payment made otherwise
                    continue
                identity = charge.channel_id.lower()
                state = self._channels.get(identity)
                if state is None:
                    self._seeds[identity] = charge
                elif not state.busy:
                    state.balance, state.charged = charge.balance, charge.charged_total

    def get(self, identity: str) -> ChannelState | None:
        with self._lock:
            return self._channels.get(identity.lower())

    def claim(self, state: ChannelState) -> bool:
        """Take ``state`` for one request (vouchers of a channel are signed one after another)."""
        with self._lock:
            if state.busy:
                return False
            state.busy = True
            return True

    def release(self, state: ChannelState) -> None:
        with self._lock:
            state.busy = False

    def sign(
        self,
        entry: PaymentRequirements,
        resource: ResourceInfo | None,
        decimals: int,
        state: ChannelState,
        refund: RefundOrder | None = None,
    ) -> Pending:
        """The payload paying ``entry`` from ``state`` (claimed by the caller): a voucher when the
        channel covers the request, else a deposit (the first, or a top-up); a zero-charge refund
        voucher for ``refund``. `PaymentRefusedError` (``over_cap``) when a top-up big enough
        would pass the deposit cap."""
        chain_id = parse_caip2(entry.network)
        domain = _domain(chain_id)
        channel = bytes.fromhex(state.id[2:])
        wire_config = {
            "payer": state.config.payer,
            "payerAuthorizer": state.config.payer_authorizer,
            "receiver": state.config.receiver,
            "receiverAuthorizer": state.config.receiver_authorizer,
            "token": state.config.token,
            "withdrawDelay": state.config.withdraw_delay,
            "salt": "0x" + state.config.salt.hex(),
        }
        ceiling = state.charged if refund is not None else state.charged + entry.amount
        voucher = {
            "channelId": state.id,
            "maxClaimableAmount": str(ceiling),
            "signature": self.wallet.sign_voucher(domain, channel, ceiling),
        }
        body: dict[str, Any] = {"type": "voucher", "channelConfig": wire_config, "voucher": voucher}
        kind, deposit = "voucher", 0
        if refund is not None:
            kind = body["type"] = "refund"
            if refund.amount is not None:
                body["amount"] = str(refund.amount)
        elif ceiling > state.balance:
            kind = body["type"] = "deposit"
            deposit = self._deposit_size(entry, decimals, ceiling - state.balance)
            body["deposit"] = {"amount": str(deposit), "authorization": self._authorize(entry, state, deposit)}
        payload = {
            "x402Version": 2,
            "accepted": entry.to_wire(),
            "payload": body,
        }
        if resource is not None:
            payload["resource"] = resource.to_wire()
        return Pending(state, entry, payload, kind, ceiling, deposit, refund)

    def _deposit_size(self, entry: PaymentRequirements, decimals: int, needed: int) -> int:
        cap = self.max_deposit_atomic(decimals)
        announced = _atomic(entry.extra.get("minDeposit"))
        target = announced if announced is not None and announced >= entry.amount else entry.amount * DEPOSIT_REQUESTS
        if needed > cap:
            raise PaymentRefusedError(
                f"the channel needs a deposit of {needed} atomic units, over the deposit cap (max_deposit)",
                reason="over_cap",
                payer=self.wallet.address,
            )
        return max(needed, min(target, cap))

    def _authorize(self, entry: PaymentRequirements, state: ChannelState, amount: int) -> dict[str, Any]:
        now = int(time.time())
        valid_before = now + min(max(entry.max_timeout_seconds, 60), MAX_VALIDITY_SECONDS)
        channel = bytes.fromhex(state.id[2:])
        if entry.extra.get("assetTransferMethod") == "permit2":
            nonce = int.from_bytes(secrets.token_bytes(32), "big")
            signature = self.wallet.sign_deposit_permit(
                parse_caip2(entry.network),
                token=state.config.token,
                amount=amount,
                nonce=nonce,
                deadline=valid_before,
                channel=channel,
            )
            permit = {
                "from": state.config.payer,
                "permitted": {"token": state.config.token, "amount": str(amount)},
                "spender": PERMIT2_DEPOSIT_COLLECTOR_ADDRESS,
                "nonce": str(nonce),
                "deadline": str(valid_before),
                "witness": {"channelId": state.id},
                "signature": signature,
            }
            return {"permit2Authorization": permit}
        salt = int.from_bytes(secrets.token_bytes(32), "big")
        valid_after = max(now - CLOCK_SKEW_SECONDS, 0)
        authorization = TransferAuthorization(
            from_address=state.config.payer,
            to=ERC3009_DEPOSIT_COLLECTOR_ADDRESS,
            value=amount,
            valid_after=valid_after,
            valid_before=valid_before,
            nonce=erc3009_deposit_nonce(channel, salt),
        )
        signature = self.wallet.sign_receive_authorization(token_domain(entry), authorization)
        return {
            "erc3009Authorization": {
                "validAfter": str(valid_after),
                "validBefore": str(valid_before),
                "salt": "0x" + salt.to_bytes(32, "big").hex(),
                "signature": signature,
            }
        }

    def settled(self, pending: Pending, settlement: Mapping[str, Any]) -> bool:
        """Apply a successful answer's settlement to the channel; False when it is not one."""
        if settlement.get("success") is not True:
            return False
        state, extra = pending.state, settlement.get("extra")
        extra = extra if isinstance(extra, Mapping) else {}
        transaction = str(settlement.get("transaction") or "")
        if pending.refund is not None:
            refunded = _atomic(settlement.get("amount")) or 0
            with self._lock:
                state.balance = max(state.balance - refunded, state.charged)
                pending.refund.result = ChannelRefund(state.id, refunded, transaction, state.balance)
            return True
        charged = _atomic(extra.get("chargedAmount"))
        charged = 0 if charged is None else charged
        channel_state = extra.get("channelState")
        reported = _atomic(channel_state.get("chargedCumulativeAmount")) if isinstance(channel_state, Mapping) else None
        with self._lock:
            if pending.kind == "deposit" and transaction:
                state.balance += pending.deposit
                state.deposited += pending.deposit
            # The seller's answer is not trusted: a charge over the price, or a count that is not
            # ours plus this charge, leaves the local count alone (a corrective 402 resyncs it).
            if charged <= pending.requirements.amount and reported in (None, state.charged + charged):
                state.charged += charged
            else:
                charged = 0
            pending.outcome = ChannelCharge(
                state.id, charged, pending.deposit if transaction else 0, transaction, state.balance, state.charged
            )
        return True

    def correct(self, state: ChannelState, required: PaymentRequired, kind: str = "voucher") -> bool:
        """Adopt a corrective 402's count for the channel when its voucher proof is this wallet's
        signature (True: sign again); False when the 402 is no correction of this channel. A 402
        saying the seller knows no funded channel makes the next payment a deposit."""
        for entry in required.accepts:
            extra = entry.extra
            channel_state, voucher_state = extra.get("channelState"), extra.get("voucherState")
            if not isinstance(channel_state, Mapping) or not isinstance(voucher_state, Mapping):
                continue
            if str(channel_state.get("channelId", "")).lower() != state.id:
                continue
            charged = _atomic(channel_state.get("chargedCumulativeAmount"))
            signed = _atomic(voucher_state.get("signedMaxClaimable"))
            balance = _atomic(channel_state.get("balance"))
            signature = voucher_state.get("signature")
            if charged is None or signed is None or balance is None or not isinstance(signature, str):
                return False
            if charged > signed or not self._signed_by_us(entry, state, signed, signature):
                return False
            with self._lock:
                state.charged, state.balance = charged, balance
            return True
        if required.error == CHANNEL_BUSY:
            return True
        if required.error in _NEEDS_DEPOSIT:
            with self._lock:  # the seller knows no funded channel: deposit again
                state.balance = state.charged
            return kind != "deposit"
        return False

    def _signed_by_us(self, entry: PaymentRequirements, state: ChannelState, amount: int, signature: str) -> bool:
        digest = voucher_digest(_domain(parse_caip2(entry.network)), bytes.fromhex(state.id[2:]), amount)
        try:
            raw = bytes.fromhex(signature.removeprefix("0x"))
            return recover_digest_signer(digest, raw).lower() == self.wallet.address.lower()
        except (ValueError, InvalidSignatureError):
            return False


def settlement_data(header: str | None) -> Mapping[str, Any] | None:
    """The ``PAYMENT-RESPONSE`` of a channel payment as JSON (its ``amount`` may be ``""``)."""
    if header is None:
        return None
    try:
        data = decode_json_header(header)
    except InvalidPaymentError:
        return None
    return data if isinstance(data, Mapping) else None


def offered_terms(entry: PaymentRequirements) -> PaymentRequirements:
    """``entry`` without the corrective members (``channelState``, ``voucherState``) of its
    ``extra``: what a payment echoes as ``accepted``."""
    if "channelState" not in entry.extra and "voucherState" not in entry.extra:
        return entry
    extra = {k: v for k, v in entry.extra.items() if k not in ("channelState", "voucherState")}
    return entry.model_copy(update={"extra": extra})
