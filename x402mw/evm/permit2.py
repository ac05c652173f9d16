"""EIP-712 digests of what an ``upto`` payer signs: the Permit2 ``PermitWitnessTransferFrom`` with the
x402 upto proxy's witness, and the token's EIP-2612 ``Permit`` (the ``eip2612GasSponsoring``
extension). The domain and type strings are the canonical Permit2's, so a signature made for the
real contract verifies against these digests, and a signature made here verifies on any chain.

Both are plain keccak arithmetic: the platform recovers a payer from a digest with
:func:`~x402mw.evm.eip712.recover_digest_signer`, the paying client signs one with
:func:`~x402mw.evm.eip712.sign_digest`.
"""

from __future__ import annotations

from dataclasses import dataclass

from x402mw.evm.eip712 import TokenDomain, address_word, uint256_word
from x402mw.evm.keccak import keccak256

PERMIT2_ADDRESS = "0x000000000022D473030F116dDEE9F6B43aC78BA3"
"""The canonical Permit2 (the verifying contract of every permit signed here)."""
UPTO_PERMIT2_PROXY_ADDRESS = "0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002"
"""The x402 upto proxy: the ``spender`` of an upto permit."""

UPTO_WITNESS_TYPE = "Witness(address to,address facilitator,uint256 validAfter)"
_TOKEN_PERMISSIONS = "TokenPermissions(address token,uint256 amount)"
_DOMAIN_TYPEHASH = keccak256(b"EIP712Domain(string name,uint256 chainId,address verifyingContract)")
_TOKEN_PERMISSIONS_TYPEHASH = keccak256(_TOKEN_PERMISSIONS.encode())
_WITNESS_TYPEHASH = keccak256(UPTO_WITNESS_TYPE.encode())
_PERMIT_WITNESS_TYPEHASH = keccak256(
    (
        "PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline,"
        f"Witness witness){_TOKEN_PERMISSIONS}{UPTO_WITNESS_TYPE}"
    ).encode()
)
_PERMIT_TYPEHASH = keccak256(b"Permit(address owner,address spender,uint256 value,uint256 nonce,uint256 deadline)")
_SEPARATORS: dict[int, bytes] = {}


@dataclass(frozen=True, slots=True)
class UptoPermit:
    """One upto authorization: ``owner`` lets the proxy (``spender``) move at most ``ceiling`` of
    ``token`` to ``to``, sent by ``facilitator`` only, between ``valid_after`` and ``deadline``;
    ``nonce`` is Permit2's unordered nonce (a uint256)."""

    owner: str
    token: str
    ceiling: int
    spender: str
    nonce: int
    deadline: int
    to: str
    facilitator: str
    valid_after: int


def _permit2_separator(chain_id: int) -> bytes:
    found = _SEPARATORS.get(chain_id)
    if found is None:
        found = keccak256(
            _DOMAIN_TYPEHASH
            + keccak256(b"Permit2")
            + uint256_word("chain_id", chain_id)
            + address_word("Permit2", PERMIT2_ADDRESS)
        )
        _SEPARATORS[chain_id] = found
    return found


def upto_permit_digest(chain_id: int, permit: UptoPermit) -> bytes:
    """The digest the owner signs for ``permit`` on chain ``chain_id``; ``ValueError`` for a field
    that cannot be encoded (an address that is not 20 bytes of hex, a number outside uint256)."""
    permitted = keccak256(
        _TOKEN_PERMISSIONS_TYPEHASH + address_word("token", permit.token) + uint256_word("amount", permit.ceiling)
    )
    witness = keccak256(
        _WITNESS_TYPEHASH
        + address_word("witness.to", permit.to)
        + address_word("witness.facilitator", permit.facilitator)
        + uint256_word("witness.validAfter", permit.valid_after)
    )
    struct = keccak256(
        _PERMIT_WITNESS_TYPEHASH
        + permitted
        + address_word("spender", permit.spender)
        + uint256_word("nonce", permit.nonce)
        + uint256_word("deadline", permit.deadline)
        + witness
    )
    return keccak256(b"\x19\x01" + _permit2_separator(chain_id) + struct)


def permit2612_digest(domain: TokenDomain, owner: str, spender: str, value: int, nonce: int, deadline: int) -> bytes:
    """The digest of the token's EIP-2612 ``Permit(owner, spender, value, nonce, deadline)``."""
    struct = keccak256(
        _PERMIT_TYPEHASH
        + address_word("owner", owner)
        + address_word("spender", spender)
        + uint256_word("value", value)
        + uint256_word("nonce", nonce)
        + uint256_word("deadline", deadline)
    )
    return keccak256(domain.digest_prefix + struct)
