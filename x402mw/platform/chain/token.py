"""The EIP-3009 token: its committed build artifact, calldata encoders, and reads and writes over
:class:`~x402mw.platform.chain.rpc.JsonRpc`.

The encoders target the interface real USDC (FiatToken v2) shares with our ``X402Token``, so the
same calldata settles on a local chain and on a public network.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

from eth_abi.abi import decode as abi_decode
from eth_abi.abi import encode as abi_encode

from x402mw.evm.eip712 import TransferAuthorization
from x402mw.evm.keccak import keccak256
from x402mw.evm.keys import to_checksum_address
from x402mw.platform.chain.admin import transact
from x402mw.platform.chain.rpc import JsonRpc
from x402mw.platform.chain.transactions import RevertError


def _selector(signature: str) -> bytes:
    return keccak256(signature.encode())[:4]


_AUTH_ARGS = "address,address,uint256,uint256,uint256,bytes32"
_TRANSFER_VRS = _selector(f"transferWithAuthorization({_AUTH_ARGS},uint8,bytes32,bytes32)")
_RECEIVE_VRS = _selector(f"receiveWithAuthorization({_AUTH_ARGS},uint8,bytes32,bytes32)")
_TRANSFER_BYTES = _selector(f"transferWithAuthorization({_AUTH_ARGS},bytes)")
_PERMIT_VRS = _selector("permit(address,address,uint256,uint256,uint8,bytes32,bytes32)")
_NONCES = _selector("nonces(address)")
_ALLOWANCE = _selector("allowance(address,address)")
_MINT = _selector("mint(address,uint256)")
_BALANCE_OF = _selector("balanceOf(address)")
_NAME = _selector("name()")
_VERSION = _selector("version()")
_AUTHORIZATION_STATE = _selector("authorizationState(address,bytes32)")


@functools.cache
def load_token_artifact() -> dict[str, Any]:
    """The compiled ``X402Token`` (``contractName``, ``abi``, ``bytecode``, ``compiler``), as built by
    ``contracts/build.sh``."""
    text = resources.files("x402mw.platform.chain").joinpath("X402Token.json").read_text(encoding="utf-8")
    artifact: dict[str, Any] = json.loads(text)
    return artifact


def transfer_calldata(auth: TransferAuthorization, signature: bytes) -> bytes:
    """Calldata for ``transferWithAuthorization(..., uint8 v, bytes32 r, bytes32 s)`` of ``auth``;
    ``signature`` is the 65 bytes ``r || s || v``."""
    return _TRANSFER_VRS + _arguments(auth, signature)


def transfer_calldata_bytes(auth: TransferAuthorization, signature: bytes) -> bytes:
    """Calldata for ``transferWithAuthorization(..., bytes signature)`` of ``auth`` (see
    :func:`encode_transfer_with_authorization_bytes`)."""
    return _TRANSFER_BYTES + auth.words + _bytes_tail(bytes(signature))


def encode_transfer_with_authorization(
    *, from_: str, to: str, value: int, valid_after: int, valid_before: int, nonce: bytes, signature: bytes
) -> bytes:
    """`transfer_calldata` from the authorization's fields; ``ValueError`` on one that cannot be encoded."""
    return transfer_calldata(_authorization(from_, to, value, valid_after, valid_before, nonce), signature)


def encode_transfer_with_authorization_bytes(
    *, from_: str, to: str, value: int, valid_after: int, valid_before: int, nonce: bytes, signature: bytes
) -> bytes:
    """Calldata for ``transferWithAuthorization(..., bytes signature)``, the overload a contract wallet
    pays with: the token hands ``signature`` (of any length) to the payer's EIP-1271
    ``isValidSignature`` when the payer has code, and recovers it as ``r || s || v`` otherwise."""
    return transfer_calldata_bytes(_authorization(from_, to, value, valid_after, valid_before, nonce), signature)


def _bytes_tail(data: bytes) -> bytes:
    # The dynamic argument after six static words: its offset (7 words in), length, padded bytes.
    padded = data + b"\x00" * (-len(data) % 32)
    return (7 * 32).to_bytes(32, "big") + len(data).to_bytes(32, "big") + padded


def permit_calldata(*, owner: str, spender: str, value: int, deadline: int, signature: bytes) -> bytes:
    """Calldata for EIP-2612 ``permit(owner, spender, value, deadline, v, r, s)`` (the form every USDC
    version has); ``signature`` is the 65 bytes ``r || s || v``."""
    if len(signature) != 65:
        raise ValueError(f"a signature is 65 bytes (r || s || v), got {len(signature)}")
    v = signature[64] + 27 if signature[64] < 27 else signature[64]
    return _PERMIT_VRS + abi_encode(
        ["address", "address", "uint256", "uint256", "uint8", "bytes32", "bytes32"],
        [owner, spender, value, deadline, v, bytes(signature[:32]), bytes(signature[32:64])],
    )


def encode_receive_with_authorization(
    *, from_: str, to: str, value: int, valid_after: int, valid_before: int, nonce: bytes, signature: bytes
) -> bytes:
    """Calldata for ``receiveWithAuthorization(..., uint8 v, bytes32 r, bytes32 s)`` (sent by ``to``)."""
    auth = _authorization(from_, to, value, valid_after, valid_before, nonce)
    return _RECEIVE_VRS + _arguments(auth, signature)


def _authorization(
    from_: str, to: str, value: int, valid_after: int, valid_before: int, nonce: bytes
) -> TransferAuthorization:
    if not isinstance(nonce, bytes | bytearray) or len(nonce) != 32:
        raise ValueError(f"an authorization nonce is 32 bytes, got {nonce!r:.80}")
    return TransferAuthorization(from_, to, value, valid_after, valid_before, bytes(nonce))


def _arguments(auth: TransferAuthorization, signature: bytes) -> bytes:
    # Every argument is a static 32-byte word, so the ABI encoding is their concatenation: the
    # authorization's six words (made when it was built) and v, r, s. By hand, as this runs once per
    # settlement (eth_abi's encoder took ~90 µs; a test holds the two equal).
    if len(signature) != 65:
        raise ValueError(f"a signature is 65 bytes (r || s || v), got {len(signature)}")
    v = signature[64]
    if v < 27:
        v += 27
    return auth.words + v.to_bytes(32, "big") + bytes(signature[:64])


def mint_calldata(to: str, amount: int) -> bytes:
    return _MINT + abi_encode(["address", "uint256"], [to, amount])


async def deploy_token(
    rpc: JsonRpc, deployer_key: bytes, *, name: str, symbol: str, version: str = "2", decimals: int = 6
) -> str:
    """Deploy an ``X402Token`` whose minter is ``deployer_key``; return its checksum address."""
    artifact = load_token_artifact()
    code = bytes.fromhex(artifact["bytecode"][2:])
    args = abi_encode(["string", "string", "string", "uint8"], [name, symbol, version, decimals])
    receipt = await transact(rpc, deployer_key, None, code + args, gas=3_000_000)
    found = await rpc.request("eth_getTransactionReceipt", [receipt.transaction_hash])
    address = found.get("contractAddress") if found else None
    if not address:
        raise RevertError(f"deploying {symbol} in {receipt.transaction_hash} created no contract")
    return to_checksum_address(str(address))


async def mint(rpc: JsonRpc, minter_key: bytes, token: str, to: str, amount: int) -> str:
    """Mint ``amount`` atomic units of ``token`` to ``to`` and wait for it; return the transaction hash."""
    receipt = await transact(rpc, minter_key, token, mint_calldata(to, amount), gas=100_000)
    return receipt.transaction_hash


async def balance_of(rpc: JsonRpc, token: str, owner: str) -> int:
    result = await _call(rpc, token, _BALANCE_OF + abi_encode(["address"], [owner]))
    return int(abi_decode(["uint256"], result)[0])


async def allowance(rpc: JsonRpc, token: str, owner: str, spender: str) -> int:
    result = await _call(rpc, token, _ALLOWANCE + abi_encode(["address", "address"], [owner, spender]))
    return int(abi_decode(["uint256"], result)[0])


async def permit_nonce(rpc: JsonRpc, token: str, owner: str) -> int:
    """``owner``'s next EIP-2612 permit nonce (``nonces(owner)``)."""
    result = await _call(rpc, token, _NONCES + abi_encode(["address"], [owner]))
    return int(abi_decode(["uint256"], result)[0])


async def read_domain(rpc: JsonRpc, token: str) -> tuple[str, str]:
    """The token's EIP-712 domain ``(name(), version())``, read in one round trip."""
    calls = [("eth_call", [{"to": token, "data": "0x" + selector.hex()}, "latest"]) for selector in (_NAME, _VERSION)]
    name, version = await rpc.batch(calls)
    return str(abi_decode(["string"], _bytes(name))[0]), str(abi_decode(["string"], _bytes(version))[0])


async def authorization_state(rpc: JsonRpc, token: str, authorizer: str, nonce: bytes) -> bool:
    """Whether ``authorizer``'s authorization ``nonce`` was used or canceled."""
    result = await _call(rpc, token, _AUTHORIZATION_STATE + abi_encode(["address", "bytes32"], [authorizer, nonce]))
    return bool(abi_decode(["bool"], result)[0])


AUTHORIZATION_USED = "0x" + keccak256(b"AuthorizationUsed(address,bytes32)").hex()
"""The topic of EIP-3009's ``AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)``."""


async def find_authorization_use(
    rpc: JsonRpc, token: str, authorizer: str, nonce: bytes, *, blocks: int = 10_000
) -> str | None:
    """The hash of the transaction that used ``authorizer``'s authorization ``nonce`` on ``token``,
    looked for in the last ``blocks`` blocks (what most providers serve in one ``eth_getLogs``);
    None when it is not there."""
    head = int(await rpc.request("eth_blockNumber", []), 16)
    query = {
        "address": token,
        "fromBlock": hex(max(0, head - blocks)),
        "toBlock": hex(head),
        "topics": [AUTHORIZATION_USED, "0x" + "00" * 12 + authorizer[2:].lower(), "0x" + nonce.hex()],
    }
    for log in await rpc.request("eth_getLogs", [query]) or []:
        if not log.get("removed"):
            return str(log["transactionHash"])
    return None


async def _call(rpc: JsonRpc, token: str, data: bytes) -> bytes:
    return _bytes(await rpc.request("eth_call", [{"to": token, "data": "0x" + data.hex()}, "latest"]))


def _bytes(result: Any) -> bytes:
    return bytes.fromhex(str(result)[2:])
