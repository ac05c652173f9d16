"""Sign-in-with-x checks: whose signature a message bears, that its nonce is spent once (in every
process, through the database), and that the signer paid for the endpoint within the window.
A used nonce is kept until ``keep_until``, its message's expiry (the message's ``expirationTime``,
bounded by ``issuedAt`` + 5 minutes: `x402mw.seller.sign_in.nonce_kept_until`), then pruned.

The seller's middleware has already checked the message's domain, URI, chain and times against its
own configured origin; this is what only the platform can tell. Signatures of keys (EIP-191) are
recovered here; a smart account's (EIP-1271, or ERC-6492 before deployment) go to
``SignInService.smart_account_verifier``: the platform sets `chain_verifier`, the same deployless
ERC-6492 validator ``eth_call`` that checks smart-account payments.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import httpx
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.evm.eip712 import recover_digest_signer
from x402mw.evm.receipts import personal_message_digest
from x402mw.platform.chain.contracts import erc6492_is_valid
from x402mw.platform.chain.relayer import ChainUnavailable
from x402mw.platform.chain.rpc import RpcError
from x402mw.platform.db import tables
from x402mw.platform.db.models import AgentPayment

__all__ = ["SignInOutcome", "SignInService", "SmartAccountVerifier", "chain_verifier"]

SmartAccountVerifier = Callable[[int, str, bytes, bytes], Awaitable[bool]]
"""``(chain id, address, EIP-191 digest, signature) -> valid``: EIP-1271 / ERC-6492 verification."""

if TYPE_CHECKING:
    from x402mw.platform.services.chains import Chains

logger = logging.getLogger("x402mw.platform.sign_ins")
_PRUNE_BATCH = 500


def chain_verifier(chains: Chains) -> SmartAccountVerifier:
    """EIP-1271 / ERC-6492 verification on the endpoint's chain, in one ``eth_call`` that deploys
    nothing; a chain that cannot be asked refuses."""

    async def verify(chain_id: int, address: str, digest: bytes, signature: bytes) -> bool:
        chain = chains.get(chain_id)
        if chain is None:
            return False
        try:
            return await erc6492_is_valid(chain.rpc, address, digest, signature)
        except (RpcError, ChainUnavailable, httpx.HTTPError, ValueError):
            logger.warning("a smart account's sign-in could not be checked on chain %d", chain_id, exc_info=True)
            return False

    return verify


@dataclass(frozen=True, slots=True)
class SignInOutcome:
    """``payment`` is the signer's latest settled payment for the endpoint when signed in; otherwise
    ``reason`` (an x402 sign-in-with-x code) and ``message`` say why not."""

    payment: AgentPayment | None
    reason: str = ""
    message: str = ""


class SignInService:
    def __init__(self, engine: AsyncEngine, smart_account_verifier: SmartAccountVerifier | None = None) -> None:
        self.engine = engine
        self.smart_account_verifier = smart_account_verifier

    async def sign_in(
        self,
        *,
        merchant_id: str,
        livemode: bool,
        endpoint_id: str,
        chain_id: int,
        address: str,
        message: str,
        signature: bytes,
        nonce: str,
        keep_until: datetime,
        window_seconds: int | None,
        now: datetime,
    ) -> SignInOutcome:
        if not await self._signed_by(chain_id, address, message.encode(), signature):
            return SignInOutcome(None, "invalid_siwx_signature", "the sign-in message is not signed by its address")
        key = hashlib.sha256(f"{merchant_id}\n{nonce}".encode()).hexdigest()
        nonces = tables.sign_in_nonces
        try:
            async with self.engine.begin() as conn:
                await conn.execute(nonces.insert().values(nonce=key, expires_at=keep_until))
        except IntegrityError:
            return SignInOutcome(None, "invalid_siwx_nonce", "this sign-in message was used already: sign a new one")
        await self._prune(now)
        payments = tables.agent_payments
        conditions = [
            payments.c.merchant_id == merchant_id,
            payments.c.livemode == livemode,
            payments.c.endpoint_id == endpoint_id,
            func.lower(payments.c.payer) == address.lower(),
            payments.c.status == "settled",
        ]
        if window_seconds is not None:
            conditions.append(payments.c.settled_at >= now - timedelta(seconds=window_seconds))
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(select(payments).where(*conditions).order_by(payments.c.settled_at.desc()).limit(1))
            ).first()
        if row is None:
            within = "" if window_seconds is None else f" in the last {window_seconds} seconds"
            return SignInOutcome(
                None, "siwx_payment_not_found", f"this address has no settled payment for this resource{within}"
            )
        return SignInOutcome(AgentPayment.model_validate(dict(row._mapping)))

    async def _signed_by(self, chain_id: int, address: str, message: bytes, signature: bytes) -> bool:
        digest = personal_message_digest(message)
        if len(signature) == 65:
            try:
                if recover_digest_signer(digest, signature).lower() == address.lower():
                    return True
            except ValueError:
                pass
        verifier: Any = self.smart_account_verifier
        if verifier is None:  # EIP-1271 / ERC-6492 sign-in waits for the platform's smart-account checks
            return False
        return bool(await verifier(chain_id, address, digest, signature))

    async def _prune(self, now: datetime) -> None:
        """Delete some nonces past their keeping time (their messages have expired)."""
        nonces = tables.sign_in_nonces
        async with self.engine.begin() as conn:
            stale = select(nonces.c.nonce).where(nonces.c.expires_at < now).limit(_PRUNE_BATCH)
            await conn.execute(nonces.delete().where(nonces.c.nonce.in_(stale.scalar_subquery())))
