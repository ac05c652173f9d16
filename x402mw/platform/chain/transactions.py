"""What the relayer sends and what comes back: fees, signed EIP-1559 transactions, receipts and
reverts.

>>> signer = TransactionSigner(key, chain_id=31337)  # doctest: +SKIP
>>> tx = await signer.sign(7, token, calldata, gas=120_000, value=0, fees=Fees(2 * 10**9, 10**9))  # doctest: +SKIP
>>> tx.hash, tx.raw  # doctest: +SKIP
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

import rlp
from eth_abi.abi import decode as abi_decode
from eth_abi.exceptions import DecodingError

from x402mw.evm.keccak import keccak256
from x402mw.platform.chain.rpc import RpcError
from x402mw.platform.chain.signers import LocalSigner, Signer

logger = logging.getLogger(__name__)

_ERROR_SELECTOR = "08c379a0"  # Error(string)


@dataclass(frozen=True, slots=True)
class Fees:
    """EIP-1559 fees in wei per gas: the most a transaction pays (``max_fee``) and the tip within it."""

    max_fee: int
    priority_fee: int

    def below(self, going: Fees) -> bool:
        """Whether a transaction paying these fees is priced under ``going`` ones (and may wait)."""
        return self.max_fee < going.max_fee or self.priority_fee < going.priority_fee

    def replacing(self, going: Fees) -> Fees:
        """Fees for a transaction that replaces one paying these: a node takes a replacement only
        for at least 10 % more of both fees (geth and anvil alike), and it should pay the going
        fees too."""
        return Fees(
            max(going.max_fee, self.max_fee * 9 // 8 + 1),
            max(going.priority_fee, self.priority_fee * 9 // 8 + 1),
        )


@dataclass(frozen=True, slots=True)
class SignedTransaction:
    nonce: int
    raw: str  # 0x-prefixed hex, what eth_sendRawTransaction takes
    hash: str  # 0x-prefixed, lower case
    fees: Fees


class TransactionSigner:
    """Signs EIP-1559 transactions of one account through its `Signer`: a key here (``bytes``, a
    `LocalSigner`: coincurve directly, byte-identical to eth-account's ``sign_transaction``, both
    RFC 6979 and low s, at a tenth of the cost) or a remote signer. Signing with a local key never
    waits on anything."""

    def __init__(self, signer: bytes | Signer, *, chain_id: int) -> None:
        self.signer: Signer = LocalSigner(signer) if isinstance(signer, bytes) else signer
        self.chain_id = chain_id

    def __repr__(self) -> str:
        return f"TransactionSigner(chain_id={self.chain_id}, signer={self.signer!r})"

    @property
    def address(self) -> str:
        return self.signer.address

    async def sign(
        self, nonce: int, to: str | None, data: bytes, *, gas: int, value: int, fees: Fees
    ) -> SignedTransaction:
        """``to=None`` creates a contract. `~x402mw.platform.chain.signers.SignerUnavailable` when
        the signer cannot sign now. With a local key it does not wait: no other task runs meanwhile."""
        signer = self.signer
        if isinstance(signer, LocalSigner):
            return self.sign_now(nonce, to, data, gas=gas, value=value, fees=fees)
        fields = self._fields(nonce, to, data, gas, value, fees)
        return _signed(fields, await signer.sign(b"\x02" + rlp.encode(fields)), fees)

    def sign_now(
        self, nonce: int, to: str | None, data: bytes, *, gas: int, value: int, fees: Fees
    ) -> SignedTransaction:
        """`sign` with a local key (a remote signer's key is not here: ``TypeError``)."""
        if not isinstance(self.signer, LocalSigner):
            raise TypeError(f"{self.signer!r} signs remotely: await sign()")
        fields = self._fields(nonce, to, data, gas, value, fees)
        return _signed(fields, self.signer.sign_digest(keccak256(b"\x02" + rlp.encode(fields))), fees)

    def _fields(self, nonce: int, to: str | None, data: bytes, gas: int, value: int, fees: Fees) -> list[Any]:
        return [
            self.chain_id,
            nonce,
            fees.priority_fee,
            fees.max_fee,
            gas,
            bytes.fromhex(to[2:]) if to is not None else b"",
            value,
            data,
            [],
        ]


def _signed(fields: list[Any], signature: bytes, fees: Fees) -> SignedTransaction:
    r, s, y_parity = signature[:32], signature[32:64], signature[64]
    raw = b"\x02" + rlp.encode([*fields, y_parity, int.from_bytes(r, "big"), int.from_bytes(s, "big")])
    return SignedTransaction(fields[1], "0x" + raw.hex(), "0x" + keccak256(raw).hex(), fees)


@dataclass(frozen=True)
class TxReceipt:
    transaction_hash: str
    status: int
    block_number: int
    block_hash: str
    gas_used: int

    @classmethod
    def from_json(cls, receipt: dict[str, Any]) -> TxReceipt:
        return cls(
            transaction_hash=str(receipt["transactionHash"]).lower(),
            status=int(receipt["status"], 16),
            block_number=int(receipt["blockNumber"], 16),
            block_hash=str(receipt["blockHash"]),
            gas_used=int(receipt["gasUsed"], 16),
        )


class RevertError(Exception):
    """A transaction or call reverted; ``reason`` is the decoded ``Error(string)`` or the node's text."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


async def simulated(simulation: Awaitable[Any]) -> None:
    """Wait for a simulation (`Relayer.simulate_soon`); :class:`RevertError` with the decoded
    reason if the call would revert."""
    try:
        await simulation
    except RpcError as exc:
        reason = revert_reason(exc)
        if reason is None:
            raise
        raise RevertError(reason) from None


def revert_reason(error: RpcError) -> str | None:
    """The revert reason in a node's error answer to ``eth_call``/``eth_estimateGas``, or ``None``
    when the error is not a revert."""
    data: Any = error.data
    if isinstance(data, dict):
        data = data.get("data")
    if isinstance(data, str) and data[2:10].lower() == _ERROR_SELECTOR:
        try:
            return str(abi_decode(["string"], bytes.fromhex(data[10:]))[0])
        except (ValueError, DecodingError):
            # A malformed Error(string) payload: the node's own message below still names the revert.
            logger.debug("undecodable revert data %s", data[:200])
    if error.code == 3 or "revert" in error.message.lower():
        return error.message.removeprefix("execution reverted").lstrip(": ") or "execution reverted"
    return None
