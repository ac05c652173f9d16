"""An agent's wallet: one secp256k1 key that signs x402 payments: EIP-3009 transfer authorizations
(``exact``) and Permit2 witness transfers with their EIP-2612 permit (``upto``).

The key never leaves the object: it is not shown by ``repr`` and never appears in an error message.
The wallet needs no gas money; the seller's facilitator submits the authorization on-chain.
"""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path
from typing import Any

from x402mw.errors import ConfigurationError, PaymentRefusedError
from x402mw.evm.batch_settlement import ChannelDomain, permit2_deposit_digest, voucher_digest
from x402mw.evm.eip712 import TokenDomain, TransferAuthorization, random_nonce, sign_digest, sign_transfer
from x402mw.evm.keccak import keccak256
from x402mw.evm.keys import address_of, is_address, to_checksum_address
from x402mw.evm.permit2 import (
    PERMIT2_ADDRESS,
    UPTO_PERMIT2_PROXY_ADDRESS,
    UptoPermit,
    permit2612_digest,
    upto_permit_digest,
)
from x402mw.evm.receipts import personal_message_digest
from x402mw.protocol.models import (
    Authorization,
    ExactEvmPayload,
    PaymentPayload,
    PaymentRequirements,
    ResourceInfo,
    UptoPaymentPayload,
)
from x402mw.protocol.networks import get_network, parse_caip2

DEFAULT_KEY_VARIABLE = "X402MW_PRIVATE_KEY"
CLOCK_SKEW_SECONDS = 600
"""``validAfter`` lies this far in the past, so that a facilitator whose clock is behind accepts it."""
EIP2612_EXTENSION = "eip2612GasSponsoring"
RECEIVE_WITH_AUTHORIZATION_TYPEHASH = keccak256(
    b"ReceiveWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,"
    b"bytes32 nonce)"
)
MAX_VALIDITY_SECONDS = 3600
"""An authorization is never valid for longer than this, whatever ``maxTimeoutSeconds`` a seller asks."""


def _parse_key(private_key: bytes | bytearray | str) -> bytes:
    if isinstance(private_key, str):
        text = private_key.strip()
        if text[:2] in ("0x", "0X"):
            text = text[2:]
        if len(text) != 64 or any(c not in "0123456789abcdefABCDEF" for c in text):
            raise ConfigurationError("a private key must be 64 hex digits, with or without '0x'")
        key = bytes.fromhex(text)
    elif isinstance(private_key, bytes | bytearray):
        key = bytes(private_key)
    else:
        raise ConfigurationError("a private key must be bytes or a hex string")
    try:
        address_of(key)
    except ValueError as exc:  # the message of keys.py never includes the key
        raise ConfigurationError(f"not a usable private key: {exc}") from None
    return key


class Wallet:
    """A private key that pays x402 offers.

    >>> wallet = Wallet("0x" + "11" * 32)
    >>> wallet
    Wallet(address='0x19E7E376E7C213B7E7e7e46cc70A5dD086DAff2A')

    Raises `ConfigurationError` for a key that is not 32 bytes (or 64 hex digits) on the curve.
    """

    __slots__ = ("_key", "address")

    def __init__(self, private_key: bytes | str) -> None:
        self._key = _parse_key(private_key)
        self.address: str = address_of(self._key)

    def __repr__(self) -> str:
        return f"Wallet(address={self.address!r})"

    def __reduce__(
        self,
    ) -> str | tuple[Any, ...]:  # keep the key out of pickles, and so out of caches and queues
        raise TypeError("a Wallet cannot be pickled; load it from its file or environment variable")

    def sign_upto(
        self,
        requirements: PaymentRequirements,
        *,
        resource: ResourceInfo | None = None,
        permit_nonce: int | None = None,
        now: int | None = None,
    ) -> UptoPaymentPayload:
        """Sign an ``upto`` payment: a Permit2 ``PermitWitnessTransferFrom`` letting the x402 upto
        proxy move at most ``amount`` (the ceiling) of ``asset`` to ``payTo``, settled by
        ``extra.facilitatorAddress`` only, valid like `sign_payment`'s authorizations, with a random
        Permit2 nonce. With ``permit_nonce`` (the wallet's EIP-2612 nonce in the token), it also signs
        the token's ``permit`` for Permit2 to spend the ceiling (the ``eip2612GasSponsoring``
        extension): a wallet without a Permit2 allowance, and without gas, pays that way."""
        return _sign_upto(self._key, self.address, requirements, resource, permit_nonce, now)

    def sign_voucher(self, domain: ChannelDomain, channel: bytes, max_claimable_amount: int) -> str:
        """Sign a ``batch-settlement`` voucher: ``Voucher(channelId, maxClaimableAmount)`` under the
        escrow's EIP-712 ``domain`` (the seller may claim up to that cumulative amount)."""
        return "0x" + sign_digest(self._key, voucher_digest(domain, channel, max_claimable_amount)).hex()

    def sign_receive_authorization(self, domain: TokenDomain, authorization: TransferAuthorization) -> str:
        """Sign an EIP-3009 ``ReceiveWithAuthorization`` (a channel deposit: only its payee, the
        deposit collector, can submit it)."""
        digest = keccak256(domain.digest_prefix + keccak256(RECEIVE_WITH_AUTHORIZATION_TYPEHASH + authorization.words))
        return "0x" + sign_digest(self._key, digest).hex()

    def sign_deposit_permit(
        self, chain_id: int, *, token: str, amount: int, nonce: int, deadline: int, channel: bytes
    ) -> str:
        """Sign a Permit2 deposit into ``channel``: a witness permit letting the Permit2 deposit
        collector move ``amount`` of ``token`` into that channel only."""
        digest = permit2_deposit_digest(
            chain_id, token=token, amount=amount, nonce=nonce, deadline=deadline, channel=channel
        )
        return "0x" + sign_digest(self._key, digest).hex()

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Wallet:
        """Read a hex key (``0x`` optional, surrounding whitespace ignored) from a file."""
        try:
            text = Path(path).read_text(encoding="ascii")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not a text file"
            raise ConfigurationError(f"cannot read the private key file {os.fspath(path)!r}: {reason}") from None
        return cls(text)

    @classmethod
    def from_env(cls, var: str = DEFAULT_KEY_VARIABLE) -> Wallet:
        """Read a hex key from the environment variable ``var``."""
        value = os.environ.get(var)
        if not value:
            raise ConfigurationError(f"the environment variable {var} holding the private key is not set")
        return cls(value)

    def sign_message(self, text: str) -> str:
        """Sign ``text`` as ``personal_sign`` does (EIP-191): ``0x`` and 65 bytes of hex."""
        return "0x" + sign_digest(self._key, personal_message_digest(text.encode())).hex()

    def sign_payment(
        self,
        requirements: PaymentRequirements,
        *,
        resource: ResourceInfo | None = None,
        now: int | None = None,
    ) -> PaymentPayload:
        """Sign an EIP-3009 ``TransferWithAuthorization`` that pays ``requirements`` exactly.

        The authorization moves ``amount`` of ``asset`` to ``payTo``, is valid from ``now - 600``
        (clock skew) until ``now + maxTimeoutSeconds`` (at most `MAX_VALIDITY_SECONDS`) and uses a
        random nonce. The EIP-712 domain is ``extra.name``/``extra.version`` (or, when a seller leaves
        them out, the token's entry in the network table), the chain id that of the CAIP-2 network and
        the verifying contract the asset. The v2 payload echoes ``requirements`` unchanged as
        ``accepted``, every ``extra`` member included: sellers seal their terms there.

        This signs whatever it is given; caps and filters are `X402Auth`'s job. Raises
        `PaymentRefusedError` (reason ``unsupported_requirements``) for terms it cannot sign.
        """
        domain = token_domain(requirements)
        current = int(time.time()) if now is None else now
        validity = min(max(requirements.max_timeout_seconds, 1), MAX_VALIDITY_SECONDS)
        try:
            pay_to = to_checksum_address(requirements.pay_to)
        except ValueError:
            raise _unsupported(f"payTo {requirements.pay_to!r} is not an address") from None
        transfer = TransferAuthorization(
            from_address=self.address,
            to=pay_to,
            value=requirements.amount,
            valid_after=max(current - CLOCK_SKEW_SECONDS, 0),
            valid_before=current + validity,
            nonce=random_nonce(),
        )
        signature = sign_transfer(self._key, domain, transfer)
        authorization = Authorization.model_validate(
            {
                "from": transfer.from_address,
                "to": transfer.to,
                "value": transfer.value,
                "validAfter": transfer.valid_after,
                "validBefore": transfer.valid_before,
                "nonce": "0x" + transfer.nonce.hex(),
            }
        )
        return PaymentPayload(
            x402Version=2,
            resource=resource,
            accepted=requirements,
            payload=ExactEvmPayload(signature="0x" + signature.hex(), authorization=authorization),
        )


def _sign_upto(
    key: bytes,
    address: str,
    requirements: PaymentRequirements,
    resource: ResourceInfo | None,
    permit_nonce: int | None,
    now: int | None,
) -> UptoPaymentPayload:
    facilitator = requirements.extra.get("facilitatorAddress")
    if not isinstance(facilitator, str) or not is_address(facilitator):
        raise _unsupported("an upto offer must name its facilitator (extra.facilitatorAddress)")
    try:
        chain_id = parse_caip2(requirements.network)
        pay_to, token = to_checksum_address(requirements.pay_to), to_checksum_address(requirements.asset)
    except ValueError as exc:
        raise _unsupported(f"cannot sign for this offer: {exc}") from None
    current = int(time.time()) if now is None else now
    validity = min(max(requirements.max_timeout_seconds, 1), MAX_VALIDITY_SECONDS)
    permit = UptoPermit(
        owner=address,
        token=token,
        ceiling=requirements.amount,
        spender=UPTO_PERMIT2_PROXY_ADDRESS,
        nonce=int.from_bytes(random_nonce(), "big"),
        deadline=current + validity,
        to=pay_to,
        facilitator=to_checksum_address(facilitator),
        valid_after=max(current - CLOCK_SKEW_SECONDS, 0),
    )
    signature = sign_digest(key, upto_permit_digest(chain_id, permit))
    authorization = {
        "from": address,
        "permitted": {"token": token, "amount": str(permit.ceiling)},
        "spender": permit.spender,
        "nonce": str(permit.nonce),
        "deadline": str(permit.deadline),
        "witness": {"to": pay_to, "facilitator": permit.facilitator, "validAfter": str(permit.valid_after)},
    }
    extensions = None
    if permit_nonce is not None:  # the gasless first use: Permit2 may spend the ceiling
        digest = permit2612_digest(
            token_domain(requirements), address, PERMIT2_ADDRESS, permit.ceiling, permit_nonce, permit.deadline
        )
        info = {
            "from": address,
            "asset": token,
            "spender": PERMIT2_ADDRESS,
            "amount": str(permit.ceiling),
            "nonce": str(permit_nonce),
            "deadline": str(permit.deadline),
            "signature": "0x" + sign_digest(key, digest).hex(),
            "version": "1",
        }
        extensions = {EIP2612_EXTENSION: {"info": info}}
    return UptoPaymentPayload.model_validate(
        {
            "x402Version": 2,
            "resource": resource.to_wire() if resource else None,
            "accepted": requirements.to_wire(),
            "payload": {"signature": "0x" + signature.hex(), "permit2Authorization": authorization},
            "extensions": extensions,
        }
    )


def token_domain(requirements: PaymentRequirements) -> TokenDomain:
    """The EIP-712 domain of an offer's token (what an ``exact`` payment, or an ``upto`` payment's
    EIP-2612 permit, is signed for); `PaymentRefusedError` when it cannot be known."""
    if requirements.scheme not in ("exact", "upto", "batch-settlement"):
        raise _unsupported(
            f"scheme {requirements.scheme!r} is not supported (only 'exact', 'upto' and 'batch-settlement')"
        )
    try:
        chain_id = parse_caip2(requirements.network)
    except ValueError:
        raise _unsupported(f"network {requirements.network!r} is not an EVM network") from None
    name, version = requirements.extra.get("name"), requirements.extra.get("version")
    if not isinstance(name, str) or not isinstance(version, str):
        network = get_network(chain_id)
        known = network.asset_by_address(requirements.asset) if network else None
        if known is None:
            raise _unsupported(
                f"the offer names no EIP-712 domain (extra.name, extra.version) for asset "
                f"{requirements.asset} on {requirements.network}"
            )
        name, version = known.eip712_name, known.eip712_version
    try:
        return _domain(name, version, chain_id, requirements.asset)
    except ValueError as exc:
        raise _unsupported(f"cannot sign for asset {requirements.asset!r}: {exc}") from None


@functools.lru_cache(maxsize=256)
def _domain(name: str, version: str, chain_id: int, asset: str) -> TokenDomain:
    # An agent pays the same few tokens again and again; a domain separator costs three keccaks.
    return TokenDomain(name, version, chain_id, asset)


def _unsupported(message: str) -> PaymentRefusedError:
    return PaymentRefusedError(message, reason="unsupported_requirements")
