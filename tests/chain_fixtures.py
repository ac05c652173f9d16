"""Fixtures for tests of the chain layer: the dev chain and an anvil node, each with USDC and EURC
deployed and a started relayer. Import the fixtures into a test module (``from tests.chain_fixtures
import anyio_backend, chain``); they are module-scoped, so a module gets one chain of each kind."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from eth_account import Account

from x402mw.platform.chain.anvil import ANVIL_DEV_KEYS, AnvilProcess, deploy_test_tokens
from x402mw.platform.chain.devchain import start_dev_chain
from x402mw.platform.chain.relayer import Relayer
from x402mw.platform.chain.rpc import HttpJsonRpc, JsonRpc
from x402mw.platform.chain.token import mint

TRANSFER = "TransferWithAuthorization"
RECEIVE = "ReceiveWithAuthorization"
AUTH_FIELDS = [
    {"name": "from", "type": "address"},
    {"name": "to", "type": "address"},
    {"name": "value", "type": "uint256"},
    {"name": "validAfter", "type": "uint256"},
    {"name": "validBefore", "type": "uint256"},
    {"name": "nonce", "type": "bytes32"},
]
DOMAIN_FIELDS = [
    {"name": "name", "type": "string"},
    {"name": "version", "type": "string"},
    {"name": "chainId", "type": "uint256"},
    {"name": "verifyingContract", "type": "address"},
]


@dataclass
class ChainUnderTest:
    kind: str
    rpc: JsonRpc
    chain_id: int
    tokens: dict[str, str]
    minter_key: bytes
    relayer: Relayer
    relayer_key: bytes

    @property
    def usdc(self) -> str:
        return self.tokens["USDC"]

    async def mint(self, to: str, amount: int, token: str | None = None) -> None:
        await mint(self.rpc, self.minter_key, token or self.usdc, to, amount)

    def domain(self, token: str | None = None) -> dict[str, object]:
        token = token or self.usdc
        name = "USD Coin" if token == self.usdc else "EURC"
        return {"name": name, "version": "2", "chainId": self.chain_id, "verifyingContract": token}


def authorization_message(
    payer: str,
    domain: dict[str, object],
    *,
    to: str,
    value: int,
    valid_after: int,
    valid_before: int,
    nonce: bytes,
    primary_type: str = TRANSFER,
) -> dict[str, Any]:
    """The full EIP-712 message of an EIP-3009 authorization from ``payer`` (the canonical types)."""
    return {
        "types": {"EIP712Domain": DOMAIN_FIELDS, primary_type: AUTH_FIELDS},
        "primaryType": primary_type,
        "domain": domain,
        "message": {
            "from": payer,
            "to": to,
            "value": value,
            "validAfter": valid_after,
            "validBefore": valid_before,
            "nonce": nonce,
        },
    }


def sign_authorization(
    key: bytes,
    domain: dict[str, object],
    *,
    to: str,
    value: int,
    valid_after: int,
    valid_before: int,
    nonce: bytes,
    primary_type: str = TRANSFER,
) -> bytes:
    """A 65-byte ``r || s || v`` EIP-3009 signature made by eth-account's EIP-712 signing."""
    message = authorization_message(
        Account.from_key(key).address,
        domain,
        to=to,
        value=value,
        valid_after=valid_after,
        valid_before=valid_before,
        nonce=nonce,
        primary_type=primary_type,
    )
    return bytes(Account.sign_typed_data(key, full_message=message).signature)


def cancel_message(authorizer: str, domain: dict[str, object], nonce: bytes) -> dict[str, Any]:
    """The full EIP-712 message of an EIP-3009 ``CancelAuthorization``."""
    return {
        "types": {
            "EIP712Domain": DOMAIN_FIELDS,
            "CancelAuthorization": [{"name": "authorizer", "type": "address"}, {"name": "nonce", "type": "bytes32"}],
        },
        "primaryType": "CancelAuthorization",
        "domain": domain,
        "message": {"authorizer": authorizer, "nonce": nonce},
    }


def sign_cancel(key: bytes, domain: dict[str, object], nonce: bytes) -> bytes:
    message = cancel_message(Account.from_key(key).address, domain, nonce)
    return bytes(Account.sign_typed_data(key, full_message=message).signature)


def new_key() -> bytes:
    return os.urandom(32)


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def anvil_node() -> Iterator[AnvilProcess]:
    with AnvilProcess() as node:
        yield node


@pytest.fixture(scope="module", params=["dev", pytest.param("anvil", marks=pytest.mark.anvil)])
async def chain(request: pytest.FixtureRequest, anyio_backend: str) -> AsyncIterator[ChainUnderTest]:
    """A chain with USDC/EURC and a started relayer whose account has gas."""
    if request.param == "dev":
        relayer_key = new_key()
        dev = await start_dev_chain(relayer_address=Account.from_key(relayer_key).address)
        relayer = Relayer(dev.rpc, relayer_key, chain_id=dev.chain_id)
        await relayer.start()
        yield ChainUnderTest("dev", dev.rpc, dev.chain_id, dev.tokens, dev.rpc.dev_keys[0], relayer, relayer_key)
        await relayer.aclose()
        await dev.aclose()
        return
    node: AnvilProcess = request.getfixturevalue("anvil_node")
    rpc = HttpJsonRpc(node.url)
    tokens = await deploy_test_tokens(rpc, ANVIL_DEV_KEYS[0])
    relayer = Relayer(rpc, ANVIL_DEV_KEYS[1], chain_id=node.chain_id)
    await relayer.start()
    yield ChainUnderTest("anvil", rpc, node.chain_id, tokens, ANVIL_DEV_KEYS[0], relayer, ANVIL_DEV_KEYS[1])
    await relayer.aclose()
    await rpc.aclose()
