"""Our contracts besides the token (``contracts/``): their committed build artifacts, their placement
at the canonical addresses on local chains, and the calldata the platform sends them.

- ``X402Permit2`` (Permit2's signature transfer), ``X402UptoPermit2Proxy`` and
  ``X402ExactPermit2Proxy`` (the x402 schemes' Permit2 spenders) have no constructor: their runtime
  code is put at the addresses clients hard-code (:data:`CANONICAL_CONTRACTS`), in the dev chain's
  genesis (:func:`canonical_genesis_accounts`) and on anvil with ``anvil_setCode``
  (:func:`place_canonical_contracts`), so that what a client signs for the canonical contracts (the
  EIP-712 domain names the verifying contract) verifies unchanged on every chain we run.
- ``X402BatchSettlement`` (the escrow of the x402 ``batch-settlement`` scheme) and its deposit
  collectors ``X402ERC3009DepositCollector`` and ``X402Permit2DepositCollector`` are placed the same
  way at the scheme's canonical addresses; their calldata is :mod:`~x402mw.platform.chain.channels`.
- ``X402AuthCaptureEscrow`` and ``X402AuthCaptureEscrowV1_0`` (the x402 ``auth-capture`` scheme's
  escrow, commerce-payments v1.1 and v1.0) and their token collectors ``X402ERC3009PaymentCollector``,
  ``X402Permit2PaymentCollector`` and ``X402OperatorRefundCollector`` sit at both deployments'
  canonical addresses, with ``X402ERC6492Preparer`` (the collectors' neutral sender of ERC-6492
  preparation calls) at :data:`ERC6492_PREPARER_ADDRESS`; the escrow creates its
  ``X402AuthCaptureTokenStore``s itself. Their calldata is :mod:`~x402mw.platform.chain.auth_capture`.
- ``X402SmartWallet`` (an EIP-1271 wallet with one owner key), its CREATE2
  ``X402SmartWalletFactory`` and the deployless ``X402ERC6492Validator`` serve smart-account payers;
  ``X402RevertingWallet``, ``X402GasBurningWallet`` and ``X402BadWalletFactory`` misbehave on purpose,
  for tests of bad input.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

from eth_abi.abi import decode as abi_decode
from eth_abi.abi import encode as abi_encode

from x402mw.evm.auth_capture import DEPLOYMENT_V1_0, DEPLOYMENT_V1_1
from x402mw.evm.batch_settlement import (
    BATCH_SETTLEMENT_ADDRESS,
    ERC3009_DEPOSIT_COLLECTOR_ADDRESS,
    PERMIT2_DEPOSIT_COLLECTOR_ADDRESS,
)
from x402mw.evm.keccak import keccak256
from x402mw.evm.keys import to_checksum_address
from x402mw.platform.chain.relayer import transact
from x402mw.platform.chain.rpc import JsonRpc
from x402mw.platform.chain.transactions import RevertError
from x402mw.protocol.networks import EXACT_PERMIT2_PROXY_ADDRESS, PERMIT2_ADDRESS, UPTO_PERMIT2_PROXY_ADDRESS

ARTIFACTS = frozenset(
    {
        "X402Token",
        "X402Permit2",
        "X402UptoPermit2Proxy",
        "X402ExactPermit2Proxy",
        "X402SmartWallet",
        "X402SmartWalletFactory",
        "X402ERC6492Validator",
        "X402RevertingWallet",
        "X402GasBurningWallet",
        "X402BadWalletFactory",
        "X402BatchSettlement",
        "X402ERC3009DepositCollector",
        "X402Permit2DepositCollector",
        "X402AuthCaptureEscrow",
        "X402AuthCaptureEscrowV1_0",
        "X402AuthCaptureTokenStore",
        "X402ERC3009PaymentCollector",
        "X402Permit2PaymentCollector",
        "X402OperatorRefundCollector",
        "X402ERC6492Preparer",
    }
)

ERC6492_PREPARER_ADDRESS = "0x4020649200000000000000000000000000006492"
"""Where ``X402ERC6492Preparer`` sits on local chains: the neutral sender of the auth-capture payment
collectors' ERC-6492 preparation calls (an address of ours, not a canonical one)."""

CANONICAL_CONTRACTS: dict[str, str] = {
    PERMIT2_ADDRESS: "X402Permit2",
    UPTO_PERMIT2_PROXY_ADDRESS: "X402UptoPermit2Proxy",
    EXACT_PERMIT2_PROXY_ADDRESS: "X402ExactPermit2Proxy",
    BATCH_SETTLEMENT_ADDRESS: "X402BatchSettlement",
    ERC3009_DEPOSIT_COLLECTOR_ADDRESS: "X402ERC3009DepositCollector",
    PERMIT2_DEPOSIT_COLLECTOR_ADDRESS: "X402Permit2DepositCollector",
    DEPLOYMENT_V1_1.escrow: "X402AuthCaptureEscrow",
    DEPLOYMENT_V1_0.escrow: "X402AuthCaptureEscrowV1_0",
    ERC6492_PREPARER_ADDRESS: "X402ERC6492Preparer",
    **{
        collector: name
        for deployment in (DEPLOYMENT_V1_0, DEPLOYMENT_V1_1)
        for collector, name in (
            (deployment.eip3009_collector, "X402ERC3009PaymentCollector"),
            (deployment.permit2_collector, "X402Permit2PaymentCollector"),
            (deployment.operator_refund_collector, "X402OperatorRefundCollector"),
        )
    },
}
"""Canonical address => the artifact whose runtime code sits there on the dev chain and anvil."""

ERC1271_MAGIC = bytes.fromhex("1626ba7e")
"""What EIP-1271 ``isValidSignature(bytes32,bytes)`` returns for a signature the wallet accepts."""

ERC6492_SUFFIX = bytes.fromhex("64926492" * 8)
"""The 32 bytes that end an ERC-6492 signature of a wallet that may not be deployed yet."""

PERMIT2_WITNESS_STUB = (
    "PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline,"
)
"""Permit2's type string of a witness permit, up to the witness (the proxy's type string follows)."""

UPTO_WITNESS_TYPE_STRING = (
    "Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,address facilitator,"
    "uint256 validAfter)"
)
"""What the upto proxy passes to Permit2 after :data:`PERMIT2_WITNESS_STUB`."""

EXACT_WITNESS_TYPE_STRING = (
    "Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,uint256 validAfter)"
)
"""What the exact proxy passes to Permit2 after :data:`PERMIT2_WITNESS_STUB`."""


def _selector(signature: str) -> bytes:
    return keccak256(signature.encode())[:4]


_PERMIT = "((address,uint256),uint256,uint256)"  # PermitTransferFrom(TokenPermissions, nonce, deadline)
_PERMIT_2612 = "(uint256,uint256,bytes32,bytes32,uint8)"  # EIP2612Permit(value, deadline, r, s, v)
_UPTO_WITNESS = "(address,address,uint256)"
_EXACT_WITNESS = "(address,uint256)"
_UPTO_SETTLE = _selector(f"settle({_PERMIT},uint256,address,{_UPTO_WITNESS},bytes)")
_UPTO_SETTLE_WITH_PERMIT = _selector(
    f"settleWithPermit({_PERMIT_2612},{_PERMIT},uint256,address,{_UPTO_WITNESS},bytes)"
)
_EXACT_SETTLE = _selector(f"settle({_PERMIT},address,{_EXACT_WITNESS},bytes)")
_EXACT_SETTLE_WITH_PERMIT = _selector(f"settleWithPermit({_PERMIT_2612},{_PERMIT},address,{_EXACT_WITNESS},bytes)")
_NONCE_BITMAP = _selector("nonceBitmap(address,uint256)")
_INVALIDATE_NONCES = _selector("invalidateUnorderedNonces(uint256,uint256)")
_WALLET_DEPLOY = _selector("deploy(address,bytes32)")
_WALLET_EXECUTE = _selector("execute(address,uint256,bytes)")


@functools.cache
def load_artifact(name: str) -> dict[str, Any]:
    """The compiled contract ``name`` (``contractName``, ``abi``, ``bytecode``, ``deployedBytecode``,
    ``compiler``), as built by ``contracts/build.sh``; `ValueError` for a name we do not build."""
    if name not in ARTIFACTS:
        raise ValueError(f"no contract artifact named {name!r} (known: {', '.join(sorted(ARTIFACTS))})")
    text = resources.files("x402mw.platform.chain").joinpath(f"{name}.json").read_text(encoding="utf-8")
    artifact: dict[str, Any] = json.loads(text)
    return artifact


def creation_code(name: str) -> bytes:
    """The creation code of ``name`` (constructor arguments, ABI-encoded, go after it)."""
    return bytes.fromhex(load_artifact(name)["bytecode"][2:])


def runtime_code(name: str) -> bytes:
    """The code ``name`` leaves at its address once created."""
    return bytes.fromhex(load_artifact(name)["deployedBytecode"][2:])


def canonical_genesis_accounts() -> dict[bytes, dict[str, Any]]:
    """Genesis-state entries (eth-tester's shape, keyed by the 20-byte address) putting the runtime
    code of :data:`CANONICAL_CONTRACTS` at their addresses."""
    return {
        bytes.fromhex(address[2:]): {"balance": 0, "nonce": 0, "code": runtime_code(name), "storage": {}}
        for address, name in CANONICAL_CONTRACTS.items()
    }


async def place_canonical_contracts(rpc: JsonRpc) -> None:
    """Put Permit2, the x402 proxies, the batch-settlement and auth-capture escrows and their
    collectors at their canonical addresses with ``anvil_setCode`` (anvil, or any node that has it; never on a real
    network). Storage already there is kept."""
    await rpc.batch(
        [("anvil_setCode", [address, "0x" + runtime_code(name).hex()]) for address, name in CANONICAL_CONTRACTS.items()]
    )


async def deploy_contract(
    rpc: JsonRpc,
    deployer_key: bytes,
    name: str,
    constructor_types: tuple[str, ...] = (),
    constructor_args: tuple[Any, ...] = (),
    *,
    gas: int = 3_000_000,
) -> str:
    """Deploy the contract ``name`` from ``deployer_key`` with the given constructor arguments, wait
    for it, and return its checksum address."""
    code = creation_code(name) + (
        abi_encode(list(constructor_types), list(constructor_args)) if constructor_types else b""
    )
    receipt = await transact(rpc, deployer_key, None, code, gas=gas)
    found = await rpc.request("eth_getTransactionReceipt", [receipt.transaction_hash])
    address = found.get("contractAddress") if found else None
    if not address:
        raise RevertError(f"deploying {name} in {receipt.transaction_hash} created no contract")
    return to_checksum_address(str(address))


# --- smart wallets: EIP-1271 and ERC-6492 -------------------------------------------------------


def wallet_deploy_calldata(owner: str, salt: bytes) -> bytes:
    """Calldata of ``X402SmartWalletFactory.deploy(owner, salt)`` (also the factory call an ERC-6492
    signature of a counterfactual wallet carries)."""
    return _WALLET_DEPLOY + abi_encode(["address", "bytes32"], [owner, _word(salt, "salt")])


def wallet_execute_calldata(target: str, value: int, data: bytes) -> bytes:
    """Calldata of ``X402SmartWallet.execute(target, value, data)`` (sent by the wallet's owner)."""
    return _WALLET_EXECUTE + abi_encode(["address", "uint256", "bytes"], [target, value, data])


def smart_wallet_address(factory: str, owner: str, salt: bytes) -> str:
    """The address ``factory`` (an ``X402SmartWalletFactory``) deploys ``owner``'s wallet of ``salt``
    to, computed locally (the same as its ``addressOf``)."""
    init_code = creation_code("X402SmartWallet") + abi_encode(["address"], [owner])
    preimage = b"\xff" + bytes.fromhex(factory[2:]) + _word(salt, "salt") + keccak256(init_code)
    return to_checksum_address("0x" + keccak256(preimage)[12:].hex())


def erc6492_wrap(factory: str, factory_calldata: bytes, signature: bytes) -> bytes:
    """An ERC-6492 signature: ``abi.encode(factory, factory_calldata, signature)`` + the magic suffix."""
    return abi_encode(["address", "bytes", "bytes"], [factory, factory_calldata, signature]) + ERC6492_SUFFIX


ERC6492_CHECK_GAS = 2_000_000
"""The gas an ERC-6492 check may use: a wallet's deployment and its ``isValidSignature`` fit in it
many times over, and a wallet that burns gas burns no more than this (a node's default is its
whole block gas limit)."""


def erc6492_validation_call(
    signer: str, digest: bytes, signature: bytes, *, gas: int = ERC6492_CHECK_GAS
) -> dict[str, str]:
    """The ``eth_call`` transaction (no ``to``) that runs ``X402ERC6492Validator`` on ``signature``:
    it answers ``0x01`` when ``signature`` is ``signer``'s over ``digest`` (an ERC-6492 wrapper's
    factory call simulated first when ``signer`` has no code), else ``0x00``."""
    args = abi_encode(["address", "bytes32", "bytes"], [signer, _word(digest, "digest"), signature])
    return {"data": "0x" + (creation_code("X402ERC6492Validator") + args).hex(), "gas": hex(gas)}


async def erc6492_is_valid(
    rpc: JsonRpc, signer: str, digest: bytes, signature: bytes, *, gas: int = ERC6492_CHECK_GAS
) -> bool:
    """Whether ``signature`` is ``signer``'s over ``digest`` (ECDSA, EIP-1271, or ERC-6492 for a wallet
    not deployed yet), in one ``eth_call`` that deploys nothing. An ERC-6492 wrapper that cannot be
    decoded, or a check that needs more than ``gas``, makes the call fail:
    :class:`~x402mw.platform.chain.rpc.RpcError`."""
    answer = await rpc.request("eth_call", [erc6492_validation_call(signer, digest, signature, gas=gas), "latest"])
    return str(answer).lower() == "0x01"


# --- Permit2 and the x402 proxies ---------------------------------------------------------------


EIP2612Permit = tuple[int, int, bytes, bytes, int]
"""The proxies' ``EIP2612Permit`` struct: ``(value, deadline, r, s, v)``."""


def upto_settle_calldata(
    *,
    token: str,
    ceiling: int,
    nonce: int,
    deadline: int,
    amount: int,
    owner: str,
    to: str,
    facilitator: str,
    valid_after: int,
    signature: bytes,
    permit2612: EIP2612Permit | None = None,
) -> bytes:
    """Calldata of ``X402UptoPermit2Proxy.settle(permit, amount, owner, witness, signature)``, or of
    ``settleWithPermit`` with ``permit2612`` first: transfer ``amount`` (at most ``ceiling``, the
    signed ``permitted.amount``) of ``token`` from ``owner`` to ``to``; only ``facilitator`` may send it."""
    # Every argument but the signature is static: the words are laid out by hand (eth_abi takes
    # ~200 µs for this, on the settlement's hot path); a unit test holds it to eth_abi's encoding.
    words = [
        _address(token),
        _uint(ceiling),
        _uint(nonce),
        _uint(deadline),
        _uint(amount),
        _address(owner),
        _address(to),
        _address(facilitator),
        _uint(valid_after),
    ]
    selector = _UPTO_SETTLE
    if permit2612 is not None:
        value, permit_deadline, r, s, v = permit2612
        words = [_uint(value), _uint(permit_deadline), _word(r, "r"), _word(s, "s"), _uint(v), *words]
        selector = _UPTO_SETTLE_WITH_PERMIT
    padding = b"\0" * (-len(signature) % 32)
    head = b"".join(words) + _uint(32 * (len(words) + 1))
    return selector + head + _uint(len(signature)) + bytes(signature) + padding


def _uint(value: int) -> bytes:
    if type(value) is not int or not 0 <= value < 2**256:
        raise ValueError(f"a uint256 is an int in [0, 2**256), got {value!r:.80}")
    return value.to_bytes(32, "big")


def _address(value: str) -> bytes:
    raw = bytes.fromhex(value[2:]) if isinstance(value, str) and value[:2] in ("0x", "0X") else b""
    if len(raw) != 20:
        raise ValueError(f"an address is 0x and 40 hex digits, got {value!r:.80}")
    return bytes(12) + raw


def exact_settle_calldata(
    *,
    token: str,
    amount: int,
    nonce: int,
    deadline: int,
    owner: str,
    to: str,
    valid_after: int,
    signature: bytes,
    permit2612: EIP2612Permit | None = None,
) -> bytes:
    """Calldata of ``X402ExactPermit2Proxy.settle(permit, owner, witness, signature)`` (or
    ``settleWithPermit`` with ``permit2612``): transfer exactly ``amount`` of ``token`` to ``to``."""
    permit = ((token, amount), nonce, deadline)
    tail_types = [_PERMIT, "address", _EXACT_WITNESS, "bytes"]
    tail = [permit, owner, (to, valid_after), signature]
    if permit2612 is None:
        return _EXACT_SETTLE + abi_encode(tail_types, tail)
    return _EXACT_SETTLE_WITH_PERMIT + abi_encode([_PERMIT_2612, *tail_types], [permit2612, *tail])


def invalidate_nonces_calldata(word_position: int, mask: int) -> bytes:
    """Calldata of Permit2's ``invalidateUnorderedNonces(wordPos, mask)`` (sent by the owner)."""
    return _INVALIDATE_NONCES + abi_encode(["uint256", "uint256"], [word_position, mask])


async def permit2_nonce_used(rpc: JsonRpc, owner: str, nonce: int) -> bool:
    """Whether ``owner``'s Permit2 nonce ``nonce`` is used (or invalidated), read from ``nonceBitmap``."""
    data = _NONCE_BITMAP + abi_encode(["address", "uint256"], [owner, nonce >> 8])
    answer = await rpc.request("eth_call", [{"to": PERMIT2_ADDRESS, "data": "0x" + data.hex()}, "latest"])
    bitmap = int(abi_decode(["uint256"], bytes.fromhex(str(answer)[2:]))[0])
    return bool(bitmap >> (nonce & 0xFF) & 1)


def _word(value: bytes, what: str) -> bytes:
    if not isinstance(value, bytes | bytearray) or len(value) != 32:
        raise ValueError(f"a {what} is 32 bytes, got {value!r:.80}")
    return bytes(value)
