"""The on-chain call that moves a payment's money (`Transfer`), for either scheme: ``exact`` calls the
token's EIP-3009 ``transferWithAuthorization``; ``upto`` calls the x402 upto proxy, which pulls the
settled amount through Permit2 (with the payer's EIP-2612 permit for Permit2 first, on a first use).

Settlement sends one, recovery sends one again from what the claim kept (`transfer_of`), and both
ask the chain whether the authorization is used (`Transfer.used`): the token's
``authorizationState`` or Permit2's nonce bitmap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from x402mw.evm.eip712 import InvalidSignatureError, TokenDomain, TransferAuthorization, recover_transfer_signer
from x402mw.platform.chain.contracts import EIP2612Permit, permit2_nonce_used, upto_settle_calldata
from x402mw.platform.chain.rpc import JsonRpc
from x402mw.platform.chain.token import authorization_state
from x402mw.platform.services.settlement.checks import WalletDeployment
from x402mw.platform.services.settlement.smart_accounts import (
    KEY_TRANSFER_GAS,
    SMART_TRANSFER_GAS,
    token_calldata,
    unwrap_erc6492,
)
from x402mw.protocol.networks import UPTO_PERMIT2_PROXY_ADDRESS

__all__ = ["Transfer", "exact_transfer", "permit2612_of", "recorded_exact_transfer", "transfer_of", "upto_transfer"]

_UPTO_GAS = 160_000  # measured ~100k
_UPTO_WITH_PERMIT_GAS = 240_000  # the EIP-2612 permit first (~50k more)


@dataclass(frozen=True, slots=True)
class Transfer:
    """A call to ``to`` with ``calldata`` (``gas`` at most), valid until ``valid_until`` (unix seconds).
    ``deployment``: the factory call of a smart account paying by ``auth`` that may not be deployed
    yet (ERC-6492), sent first (`x402mw.platform.services.settlement.smart_accounts.prepare_payer`)."""

    scheme: str
    to: str
    calldata: bytes
    gas: int
    valid_until: int
    payer: str
    nonce: int | bytes  # Permit2's uint256, or EIP-3009's 32 bytes
    asset: str
    auth: TransferAuthorization | None = None
    deployment: WalletDeployment | None = None

    async def used(self, rpc: JsonRpc) -> bool:
        """Whether the chain shows the authorization used (by this transfer or any other)."""
        if self.scheme == "upto":
            assert isinstance(self.nonce, int)
            return await permit2_nonce_used(rpc, self.payer, self.nonce)
        assert isinstance(self.nonce, bytes)
        return await authorization_state(rpc, self.asset, self.payer, self.nonce)


def exact_transfer(
    asset: str,
    auth: TransferAuthorization,
    signature: bytes,
    *,
    smart: bool = False,
    deployment: WalletDeployment | None = None,
) -> Transfer:
    """The token's ``transferWithAuthorization`` of ``auth``: the ``(v, r, s)`` form for a key's
    signature, the ``bytes`` form for a smart account's (`token_calldata`)."""
    calldata = token_calldata(auth, signature, smart=smart)
    gas = SMART_TRANSFER_GAS if smart else KEY_TRANSFER_GAS
    return Transfer(
        "exact", asset, calldata, gas, auth.valid_before, auth.from_address, auth.nonce, asset, auth, deployment
    )


def recorded_exact_transfer(
    asset: str, domain: TokenDomain | None, auth: TransferAuthorization, signature: bytes
) -> Transfer:
    """The `exact_transfer` of a payment recorded with its signature as it was sent (settlement
    sends it again after a takeover): a key's in the ``(v, r, s)`` form, a smart account's in the
    ``bytes`` form (the ERC-6492 wrapper taken off, its factory call the transfer's deployment).
    ``domain``, the token's, tells a key's signature from a smart account's."""
    try:
        key = domain is not None and recover_transfer_signer(domain, auth, signature).lower() == (
            auth.from_address.lower()
        )
    except InvalidSignatureError:
        key = False
    if key:
        return exact_transfer(asset, auth, signature)
    wrapped = unwrap_erc6492(signature)
    if wrapped is None:
        return exact_transfer(asset, auth, signature, smart=True)
    deployment, inner = wrapped
    return exact_transfer(asset, auth, inner, smart=True, deployment=deployment)


def upto_transfer(
    *,
    asset: str,
    payer: str,
    ceiling: int,
    nonce: int,
    deadline: int,
    amount: int,
    to: str,
    facilitator: str,
    valid_after: int,
    signature: bytes,
    permit2612: EIP2612Permit | None,
) -> Transfer:
    calldata = upto_settle_calldata(
        token=asset,
        ceiling=ceiling,
        nonce=nonce,
        deadline=deadline,
        amount=amount,
        owner=payer,
        to=to,
        facilitator=facilitator,
        valid_after=valid_after,
        signature=signature,
        permit2612=permit2612,
    )
    gas = _UPTO_GAS if permit2612 is None else _UPTO_WITH_PERMIT_GAS
    return Transfer("upto", UPTO_PERMIT2_PROXY_ADDRESS, calldata, gas, deadline, payer, nonce, asset)


def permit2612_of(stored: Any) -> EIP2612Permit | None:
    """The EIP-2612 permit as a claim keeps it (``[value, deadline, r, s, v]``, r and s in hex)."""
    if not isinstance(stored, list | tuple) or len(stored) != 5:
        return None
    value, deadline, r, s, v = stored
    return (int(value), int(deadline), bytes.fromhex(str(r)[2:]), bytes.fromhex(str(s)[2:]), int(v))


def transfer_of(row: Any, domain: TokenDomain | None = None) -> Transfer | None:
    """The transfer a claimed ``agent_payments`` row sends, rebuilt from what it keeps (None: a claim
    made before claims kept their signature). ``domain``, the token's, tells a key's ``exact``
    signature from a smart account's (`recorded_exact_transfer`)."""
    if row.signature is None or row.valid_before is None or row.valid_after is None:
        return None
    signature = bytes.fromhex(row.signature[2:])
    if getattr(row, "scheme", "exact") == "upto":
        permit = row.permit or {}
        return upto_transfer(
            asset=row.asset,
            payer=row.payer,
            ceiling=int(row.ceiling_minor or 0),
            nonce=int(row.nonce, 16),
            deadline=row.valid_before,
            amount=row.amount_minor,
            to=row.pay_to,
            facilitator=str(permit.get("facilitator", "")),
            valid_after=row.valid_after,
            signature=signature,
            permit2612=permit2612_of(permit.get("permit2612")),
        )
    nonce = bytes.fromhex(row.nonce[2:])
    auth = TransferAuthorization(row.payer, row.pay_to, row.amount_minor, row.valid_after, row.valid_before, nonce)
    return recorded_exact_transfer(row.asset, domain, auth, signature)
