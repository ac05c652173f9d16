"""Smart-account payers: an EIP-3009 authorization whose ``from`` is a contract wallet.

The key path stays as it was (`checks.verify_payment`: ``ecrecover`` and a compare). Only
when the signature does not recover to ``from`` (or is not 65 bytes) does a payment come here:

- verification (`verify_contract_signer`): one bounded ``eth_call`` of our deployless ERC-6492
  validator, which asks a deployed wallet's EIP-1271 ``isValidSignature`` and, for a wallet not
  deployed yet whose signature carries the ERC-6492 wrapper, simulates the wrapper's factory call
  first. A wallet that refuses, reverts, burns its gas, or a factory that fails or deploys another
  address: ``invalid_signature``. ``from`` without code and no wrapper is refused without a call
  once its code is known (`CodeCache`);
- settlement (`prepare_payer`): the token's ``bytes signature`` overload gets the wallet's own
  signature (the wrapper taken off); a wallet not deployed yet is deployed first by the relayer, in
  a transaction of its own just before the transfer, once its balance covers the payment. The
  factory call is idempotent (the wallet at ``from`` is what counts), so a retry, a takeover by
  another process, or a transfer refused after the deployment simply finds the wallet there.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import TYPE_CHECKING

import httpx
from eth_abi.abi import decode as abi_decode

from x402mw.evm.eip712 import TransferAuthorization
from x402mw.evm.keys import to_checksum_address
from x402mw.platform.chain.contracts import ERC6492_CHECK_GAS, ERC6492_SUFFIX, erc6492_is_valid
from x402mw.platform.chain.relayer import ChainUnavailable
from x402mw.platform.chain.rpc import RpcError
from x402mw.platform.chain.token import balance_of, transfer_calldata, transfer_calldata_bytes
from x402mw.platform.services.settlement.checks import PaymentRefusal, Verified, WalletDeployment
from x402mw.protocol import reasons

if TYPE_CHECKING:
    from x402mw.platform.services.chains import ChainHandle

logger = logging.getLogger("x402mw.platform.settlement")

KEY_TRANSFER_GAS = 120_000
"""The gas a key's transfer is sent with (it takes 82k)."""

SMART_TRANSFER_GAS = 500_000
"""The gas a smart account's transfer is sent with: the token asks the account's ``isValidSignature``,
which for some accounts (passkeys verified in the EVM, several owners) takes far more than a key's
``ecrecover``; what is not used is not paid."""

DEPLOY_GAS = 1_000_000
"""The gas a counterfactual wallet's deployment may use (our factory's takes 411k)."""

NO_CODE_SECONDS = 30.0
"""How long an address found without code is believed to have none (a wallet may be deployed later)."""


def unwrap_erc6492(signature: bytes) -> tuple[WalletDeployment, bytes] | None:
    """The factory call and the wallet's own signature inside an ERC-6492 signature; None when
    ``signature`` carries no wrapper. `ValueError` for a wrapper that does not decode."""
    if len(signature) < 32 or not signature.endswith(ERC6492_SUFFIX):
        return None
    try:
        factory, calldata, inner = abi_decode(["address", "bytes", "bytes"], signature[:-32])
    except Exception as exc:  # eth_abi raises its own DecodingError family
        raise ValueError(f"the ERC-6492 wrapper does not decode: {exc}") from None
    return WalletDeployment(str(factory), bytes(calldata)), bytes(inner)


class CodeCache:
    """Whether an address has code, per chain: a yes is kept (code does not go away), a no for
    :data:`NO_CODE_SECONDS` only."""

    def __init__(self, *, no_code_seconds: float = NO_CODE_SECONDS, kept: int = 65_536) -> None:
        self._seen: dict[tuple[int, str], float] = {}  # (chain, address) -> when found without code; 0.0: code
        self._no_code_seconds = no_code_seconds
        self._kept = kept

    async def has_code(self, chain: ChainHandle, address: str) -> bool:
        key = (chain.chain_id, address.lower())
        seen = self._seen.get(key)
        now = time.monotonic()
        if seen is not None and (seen == 0.0 or now - seen < self._no_code_seconds):
            return seen == 0.0
        code = await _rpc(chain, "eth_getCode", [address, "latest"])
        found = str(code) not in ("0x", "0x0", "")
        if len(self._seen) >= self._kept:
            self._seen.clear()
        self._seen[key] = 0.0 if found else now
        return found

    def forget(self, chain: ChainHandle, address: str) -> None:
        self._seen.pop((chain.chain_id, address.lower()), None)


async def verify_contract_signer(chain: ChainHandle, verified: Verified, codes: CodeCache) -> Verified:
    """Check a signature that did not recover to ``from`` as a smart account's (EIP-1271, or
    ERC-6492 for a wallet not deployed yet); the `Verified` to settle with, naming the wallet as
    the payer. `PaymentRefusal` (``invalid_signature``) when the wallet does not accept it;
    `ChainUnavailable` when the chain cannot be asked."""
    payer = verified.auth.from_address
    try:
        wrapped = unwrap_erc6492(verified.signature)
    except ValueError as exc:
        raise PaymentRefusal(reasons.INVALID_SIGNATURE, str(exc)) from None
    deployed = await codes.has_code(chain, payer)
    if not deployed and wrapped is None:
        raise PaymentRefusal(reasons.INVALID_SIGNATURE, "the signature is not by the authorization's 'from'")
    if verified.digest is None:  # pragma: no cover - verify_payment sets it on this path
        raise PaymentRefusal(reasons.INVALID_SIGNATURE, "the signature is not by the authorization's 'from'")
    try:
        valid = await erc6492_is_valid(chain.rpc, payer, verified.digest, verified.signature, gas=ERC6492_CHECK_GAS)
    except RpcError as exc:  # the node answered: the validator reverted (a wrapper it cannot use) or ran out of gas
        raise PaymentRefusal(
            reasons.INVALID_SIGNATURE, f"the smart account's signature cannot be checked: {exc}"
        ) from None
    except (httpx.TransportError, OSError, TimeoutError) as exc:
        raise ChainUnavailable(str(exc)) from exc
    if not valid:
        message = (
            "the smart account does not accept this signature"
            if deployed
            else "the ERC-6492 signature does not deploy a wallet at 'from' that accepts it"
        )
        raise PaymentRefusal(reasons.INVALID_SIGNATURE, message)
    inner = verified.signature if wrapped is None else wrapped[1]
    deployment = None if deployed or wrapped is None else wrapped[0]
    return replace(verified, payer=to_checksum_address(payer), token_signature=inner, deployment=deployment)


def token_calldata(auth: TransferAuthorization, signature: bytes, *, smart: bool) -> bytes:
    """The token call settling ``auth``: the ``(v, r, s)`` form for a key's 65 bytes (the cheapest),
    the ``bytes signature`` form (EIP-1271) for a smart account's signature."""
    return transfer_calldata_bytes(auth, signature) if smart else transfer_calldata(auth, signature)


async def prepare_payer(
    chain: ChainHandle, token: str, auth: TransferAuthorization, deployment: WalletDeployment, codes: CodeCache
) -> None:
    """Deploy the wallet at ``auth.from_address`` with ``deployment`` unless it is there already;
    `PaymentRefusal` when its balance cannot cover ``auth`` (nothing is deployed then) or when the factory
    leaves no code at ``from``."""
    payer = auth.from_address
    codes.forget(chain, payer)
    if await codes.has_code(chain, payer):
        return
    await check_balance(chain, token, auth)
    tx = await chain.relayer.send(
        deployment.factory, deployment.calldata, gas=DEPLOY_GAS, valid_until=auth.valid_before
    )
    receipt = await chain.wait_for(tx)
    codes.forget(chain, payer)
    if not await codes.has_code(chain, payer):
        logger.warning("deploying wallet %s in %s (status %d) left no code there", payer, tx, receipt.status)
        raise PaymentRefusal(reasons.INVALID_SIGNATURE, "the ERC-6492 factory call does not deploy a wallet at 'from'")
    logger.info("deployed smart account %s in %s before its first payment", payer, receipt.transaction_hash)


async def check_balance(chain: ChainHandle, token: str, auth: TransferAuthorization) -> None:
    """`PaymentRefusal` (``insufficient_funds``) when ``from``'s balance of ``token`` is below ``auth.value``."""
    try:
        balance = await balance_of(chain.rpc, token, auth.from_address)
    except (httpx.TransportError, OSError, TimeoutError) as exc:
        raise ChainUnavailable(str(exc)) from exc
    if balance < auth.value:
        raise PaymentRefusal(reasons.INSUFFICIENT_FUNDS, "the smart account's balance does not cover the payment")


async def _rpc(chain: ChainHandle, method: str, params: list[object]) -> object:
    try:
        return await chain.rpc.request(method, params)
    except (httpx.TransportError, OSError, TimeoutError) as exc:
        raise ChainUnavailable(str(exc)) from exc
