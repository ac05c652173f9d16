"""Helpers for the tests of our contracts (Permit2, the x402 proxies, smart wallets): EIP-712 signing
with eth-account of the canonical type strings, revert data of a call, and small chain chores."""

from __future__ import annotations

from typing import Any

from eth_account import Account
from eth_account.messages import encode_typed_data

from tests.chain_fixtures import DOMAIN_FIELDS, ChainUnderTest, new_key
from x402mw.evm.keccak import keccak256
from x402mw.platform.chain.admin import transact
from x402mw.platform.chain.rpc import RpcError
from x402mw.protocol.networks import PERMIT2_ADDRESS

_TOKEN_PERMISSIONS = [{"name": "token", "type": "address"}, {"name": "amount", "type": "uint256"}]
_PERMIT_TRANSFER = [
    {"name": "permitted", "type": "TokenPermissions"},
    {"name": "spender", "type": "address"},
    {"name": "nonce", "type": "uint256"},
    {"name": "deadline", "type": "uint256"},
]
_WITNESS_PERMIT = [*_PERMIT_TRANSFER, {"name": "witness", "type": "Witness"}]
UPTO_WITNESS_FIELDS = [
    {"name": "to", "type": "address"},
    {"name": "facilitator", "type": "address"},
    {"name": "validAfter", "type": "uint256"},
]
EXACT_WITNESS_FIELDS = [{"name": "to", "type": "address"}, {"name": "validAfter", "type": "uint256"}]
_PERMIT2_DOMAIN = [
    {"name": "name", "type": "string"},
    {"name": "chainId", "type": "uint256"},
    {"name": "verifyingContract", "type": "address"},
]
_PERMIT = [
    {"name": "owner", "type": "address"},
    {"name": "spender", "type": "address"},
    {"name": "value", "type": "uint256"},
    {"name": "nonce", "type": "uint256"},
    {"name": "deadline", "type": "uint256"},
]


def error_selector(signature: str) -> str:
    """``"0x…"`` revert data of a custom error without arguments, e.g. ``InvalidNonce()``."""
    return "0x" + keccak256(signature.encode())[:4].hex()


def permit2_domain(chain_id: int) -> dict[str, Any]:
    return {"name": "Permit2", "chainId": chain_id, "verifyingContract": PERMIT2_ADDRESS}


def witness_permit_message(
    chain_id: int,
    *,
    token: str,
    amount: int,
    spender: str,
    nonce: int,
    deadline: int,
    witness: dict[str, Any],
    witness_fields: list[dict[str, str]],
) -> dict[str, Any]:
    """The full EIP-712 message of a Permit2 ``PermitWitnessTransferFrom`` (the canonical types)."""
    return {
        "types": {
            "EIP712Domain": _PERMIT2_DOMAIN,
            "PermitWitnessTransferFrom": _WITNESS_PERMIT,
            "TokenPermissions": _TOKEN_PERMISSIONS,
            "Witness": witness_fields,
        },
        "primaryType": "PermitWitnessTransferFrom",
        "domain": permit2_domain(chain_id),
        "message": {
            "permitted": {"token": token, "amount": amount},
            "spender": spender,
            "nonce": nonce,
            "deadline": deadline,
            "witness": witness,
        },
    }


def permit_transfer_message(
    chain_id: int, *, token: str, amount: int, spender: str, nonce: int, deadline: int
) -> dict[str, Any]:
    """The full EIP-712 message of a Permit2 ``PermitTransferFrom`` (no witness: the signed spender
    is whoever calls Permit2)."""
    return {
        "types": {
            "EIP712Domain": _PERMIT2_DOMAIN,
            "PermitTransferFrom": _PERMIT_TRANSFER,
            "TokenPermissions": _TOKEN_PERMISSIONS,
        },
        "primaryType": "PermitTransferFrom",
        "domain": permit2_domain(chain_id),
        "message": {
            "permitted": {"token": token, "amount": amount},
            "spender": spender,
            "nonce": nonce,
            "deadline": deadline,
        },
    }


def sign_message(key: bytes, message: dict[str, Any]) -> bytes:
    return bytes(Account.sign_typed_data(key, full_message=message).signature)


def typed_digest(message: dict[str, Any]) -> bytes:
    """The EIP-712 digest of ``message`` (what an EIP-1271 wallet is asked about)."""
    signable = encode_typed_data(full_message=message)
    return keccak256(b"\x19" + signable.version + signable.header + signable.body)


def permit_message(
    chain: ChainUnderTest, *, owner: str, spender: str, value: int, nonce: int, deadline: int
) -> dict[str, Any]:
    """The EIP-2612 ``Permit`` of the chain's USDC."""
    return {
        "types": {"EIP712Domain": DOMAIN_FIELDS, "Permit": _PERMIT},
        "primaryType": "Permit",
        "domain": chain.domain(),
        "message": {"owner": owner, "spender": spender, "value": value, "nonce": nonce, "deadline": deadline},
    }


async def call_error(rpc: Any, sender: str, to: str, data: bytes, *, gas: int | None = None) -> str:
    """The revert data (``"0x…"``) of calling ``to`` with ``data`` from ``sender`` (with at most
    ``gas``); fails the test if the call succeeds."""
    call = {"from": sender, "to": to, "data": "0x" + data.hex()}
    if gas is not None:
        call["gas"] = hex(gas)
    try:
        await rpc.request("eth_call", [call, "latest"])
    except RpcError as exc:
        assert isinstance(exc.data, str), exc
        return exc.data
    raise AssertionError(f"the call to {to} did not revert")


async def chain_now(chain: ChainUnderTest) -> int:
    """The latest block's timestamp (the dev chain's runs ahead of the wall clock)."""
    block = await chain.rpc.request("eth_getBlockByNumber", ["latest", False])
    return int(block["timestamp"], 16)


async def funded_key(chain: ChainUnderTest, *, gas_wei: int = 10**17, usdc: int = 0) -> bytes:
    """A new key with ``gas_wei`` of the native coin and ``usdc`` atomic USDC."""
    key = new_key()
    address = Account.from_key(key).address
    if gas_wei:
        await transact(chain.rpc, chain.minter_key, address, b"", gas=21_000, value=gas_wei)
    if usdc:
        await chain.mint(address, usdc)
    return key
