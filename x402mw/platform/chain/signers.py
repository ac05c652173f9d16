"""Who signs for an account: the one interface (`Signer`) through which the relayer (its sends,
its healing) and the receiver authorizers sign, with two kinds behind it:

- `LocalSigner`: a key in this process (coincurve); signing never waits, so a relayer on a local
  key sends exactly as before;
- `RemoteSigner`: a key that never enters this process, held by a remote signer that speaks the
  Ethereum remote-signing API as web3signer serves it in its eth1 mode (an HSM or a KMS behind it):
  ``POST {url}/api/v1/eth1/sign/{identifier}`` with ``{"data": "0x…"}`` answers the signature of
  ``keccak256(data)`` (``r || s || v``, hex), ``identifier`` being the account's public key, which
  ``GET {url}/api/v1/eth1/publicKeys`` lists; ``GET {url}/upcheck`` says it is up.

A remote signer's every signature is checked here against the account's address before it is used.
When it cannot be reached, or signs for another key, `SignerUnavailable` says so (the relayer
raises `~x402mw.platform.chain.relayer.RelayerSignerUnavailable`, a ``ChainUnavailable``: nothing
was sent, and a settlement stays pending until the signer is back).

>>> signer = RemoteSigner("http://127.0.0.1:9000", "0xAbc…")  # doctest: +SKIP
>>> signature = await signer.sign(b"\\x02" + unsigned_transaction)  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Protocol
from urllib.parse import urlsplit

import httpx
from coincurve import PrivateKey, PublicKey

from x402mw.evm.keccak import keccak256
from x402mw.evm.keys import address_of, to_checksum_address


class SignerUnavailable(Exception):
    """The signer cannot sign now (unreachable, refusing, or signing for another key); nothing was signed."""


class Signer(Protocol):
    """Signs for one account (``address``)."""

    @property
    def address(self) -> str: ...

    async def sign(self, message: bytes) -> bytes:
        """The 65-byte recoverable signature ``r || s || y`` (``y`` 0 or 1) of ``keccak256(message)``."""
        ...

    async def check(self) -> str:
        """Whether it can sign now: what it found, for an operator; `SignerUnavailable` if it cannot."""
        ...

    async def aclose(self) -> None: ...


class LocalSigner:
    """A key held in this process."""

    def __init__(self, private_key: bytes) -> None:
        self._key = PrivateKey(private_key)
        self._address = address_of(private_key)

    def __repr__(self) -> str:
        return f"LocalSigner(address={self._address!r}, key=<hidden>)"

    @property
    def address(self) -> str:
        return self._address

    async def sign(self, message: bytes) -> bytes:
        return self.sign_digest(keccak256(message))

    def sign_digest(self, digest: bytes) -> bytes:
        """The recoverable signature of a 32-byte digest, at once."""
        return bytes(self._key.sign_recoverable(digest, hasher=None))

    async def check(self) -> str:
        return "a key in this process"

    async def aclose(self) -> None:
        return None


def _address_of_public_key(public_key: bytes) -> str:
    return to_checksum_address("0x" + keccak256(public_key[-64:])[-20:].hex())


class RemoteSigner:
    """An account whose key a web3signer-compatible remote signer at ``url`` holds (see the
    module's docstring). ``timeout``: seconds a signature may take. ``transport``: httpx's, for
    tests and proxies."""

    def __init__(
        self,
        url: str,
        address: str,
        *,
        timeout: float = 5.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._url = url.rstrip("/")
        parts = urlsplit(self._url)
        self._shown = f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")
        self._address = address
        self._identifier: str | None = None
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout, connect=min(timeout, 3.0)), transport=transport, trust_env=False
        )

    def __repr__(self) -> str:
        return f"RemoteSigner(url={self._shown!r}, address={self._address!r})"

    @property
    def address(self) -> str:
        return self._address

    @property
    def shown_url(self) -> str:
        """Its URL without credentials, path or query: what logs and ``/readyz`` show."""
        return self._shown

    async def sign(self, message: bytes) -> bytes:
        identifier = self._identifier or await self._find_identifier()
        answer = await self._call("POST", f"/api/v1/eth1/sign/{identifier}", json={"data": "0x" + message.hex()})
        text = answer.text.strip().strip('"')
        try:
            raw = bytes.fromhex(text.removeprefix("0x"))
        except ValueError:
            raise SignerUnavailable(f"the remote signer at {self._shown} answered no signature") from None
        if len(raw) != 65:
            raise SignerUnavailable(f"the remote signer at {self._shown} answered {len(raw)} bytes, not a signature")
        y = raw[64] - 27 if raw[64] >= 27 else raw[64]
        if y not in (0, 1):
            raise SignerUnavailable(f"the remote signer at {self._shown} answered a signature without a recovery id")
        signature = raw[:64] + bytes([y])
        try:
            signer = PublicKey.from_signature_and_message(signature, keccak256(message), hasher=None)
        except ValueError:
            raise SignerUnavailable(f"the remote signer at {self._shown} answered an invalid signature") from None
        if _address_of_public_key(signer.format(compressed=False)).lower() != self._address.lower():
            self._identifier = None  # its keys may have changed: look again next time
            raise SignerUnavailable(
                f"the remote signer at {self._shown} signed with a key that is not {self._address}'s"
            )
        return signature

    async def check(self) -> str:
        await self._call("GET", "/upcheck")
        identifier = await self._find_identifier()
        return f"the remote signer at {self._shown} is up and holds {self._address}'s key ({identifier[:10]}…)"

    async def _find_identifier(self) -> str:
        answer = await self._call("GET", "/api/v1/eth1/publicKeys")
        try:
            keys = answer.json()
        except ValueError:
            keys = None
        if not isinstance(keys, list):
            raise SignerUnavailable(f"the remote signer at {self._shown} answered no list of public keys")
        for key in keys:
            if not isinstance(key, str):
                continue
            try:
                public = bytes.fromhex(key.removeprefix("0x"))
            except ValueError:
                continue
            if len(public) in (64, 65) and _address_of_public_key(public).lower() == self._address.lower():
                self._identifier = key
                return key
        raise SignerUnavailable(f"the remote signer at {self._shown} holds no key of {self._address}")

    async def _call(self, method: str, path: str, json: object = None) -> httpx.Response:
        try:
            answer = await self._client.request(method, self._url + path, json=json)
        except httpx.HTTPError as exc:
            raise SignerUnavailable(
                f"the remote signer at {self._shown} cannot be reached: {type(exc).__name__}"
            ) from exc
        if answer.status_code != 200:
            raise SignerUnavailable(
                f"the remote signer at {self._shown} answered {answer.status_code} to {method} {path}"
            )
        return answer

    async def aclose(self) -> None:
        await self._client.aclose()
