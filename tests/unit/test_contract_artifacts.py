"""The committed contract artifacts and the calldata encoders of x402mw.platform.chain.contracts and
.token, checked against the compiled ABIs and the x402 Foundation SDK's ABIs and type definitions."""

from __future__ import annotations

import os
from typing import Any

import pytest
from eth_abi.abi import encode as abi_encode
from x402.mechanisms.evm import constants as sdk

from x402mw.evm.keccak import keccak256
from x402mw.platform.chain.contracts import (
    ARTIFACTS,
    CANONICAL_CONTRACTS,
    ERC6492_SUFFIX,
    EXACT_WITNESS_TYPE_STRING,
    UPTO_WITNESS_TYPE_STRING,
    creation_code,
    erc6492_wrap,
    exact_settle_calldata,
    load_artifact,
    runtime_code,
    upto_settle_calldata,
)
from x402mw.platform.chain.token import encode_transfer_with_authorization_bytes, permit_calldata
from x402mw.protocol.networks import EXACT_PERMIT2_PROXY_ADDRESS, PERMIT2_ADDRESS, UPTO_PERMIT2_PROXY_ADDRESS

_A, _B, _C, _D = ("0x" + f"{n:02x}" * 20 for n in (0x11, 0x22, 0x33, 0x44))


def _canonical_type(entry: dict[str, Any]) -> str:
    if entry["type"].startswith("tuple"):
        return "(" + ",".join(_canonical_type(c) for c in entry["components"]) + ")" + entry["type"][5:]
    return str(entry["type"])


def _selectors(abi: list[dict[str, Any]], name: str) -> set[bytes]:
    return {
        keccak256(f"{name}({','.join(_canonical_type(i) for i in item['inputs'])})".encode())[:4]
        for item in abi
        if item.get("type") == "function" and item["name"] == name
    }


def test_the_canonical_addresses_are_the_sdks() -> None:
    assert PERMIT2_ADDRESS == sdk.PERMIT2_ADDRESS
    assert UPTO_PERMIT2_PROXY_ADDRESS == sdk.X402_UPTO_PERMIT2_PROXY_ADDRESS
    assert EXACT_PERMIT2_PROXY_ADDRESS == sdk.X402_EXACT_PERMIT2_PROXY_ADDRESS


@pytest.mark.parametrize("name", sorted(set(CANONICAL_CONTRACTS.values())))
def test_code_placed_without_a_constructor_needs_none(name: str) -> None:
    # No constructor (nothing would run it) and no immutables (their slots would stay zero): the
    # runtime code then appears as it is in the creation code.
    artifact = load_artifact(name)
    assert not [item for item in artifact["abi"] if item["type"] == "constructor"]
    assert runtime_code(name) in creation_code(name)


def test_every_artifact_loads_and_others_are_refused() -> None:
    for name in ARTIFACTS:
        assert load_artifact(name)["contractName"] == name
        assert runtime_code(name)
    with pytest.raises(ValueError, match="no contract artifact"):
        load_artifact("../X402Token")


def test_the_proxies_speak_the_sdks_abi() -> None:
    upto = load_artifact("X402UptoPermit2Proxy")["abi"]
    exact = load_artifact("X402ExactPermit2Proxy")["abi"]
    assert _selectors(upto, "settle") == _selectors(sdk.X402_UPTO_PERMIT2_PROXY_ABI, "settle")
    assert _selectors(upto, "settleWithPermit") == _selectors(
        sdk.X402_UPTO_PERMIT2_PROXY_SETTLE_WITH_PERMIT_ABI, "settleWithPermit"
    )
    assert _selectors(exact, "settle") == _selectors(sdk.X402_EXACT_PERMIT2_PROXY_ABI, "settle")
    assert _selectors(exact, "settleWithPermit") == _selectors(
        sdk.X402_EXACT_PERMIT2_PROXY_SETTLE_WITH_PERMIT_ABI, "settleWithPermit"
    )
    kw: dict[str, Any] = {"token": _A, "nonce": 5, "deadline": 6, "owner": _B, "to": _C, "valid_after": 0}
    signature = os.urandom(65)
    permit2612 = (7, 8, b"\x01" * 32, b"\x02" * 32, 27)
    for with_permit in (None, permit2612):
        data = upto_settle_calldata(
            ceiling=10, amount=9, facilitator=_D, signature=signature, permit2612=with_permit, **kw
        )
        name = "settle" if with_permit is None else "settleWithPermit"
        assert data[:4] in _selectors(upto, name)
        data = exact_settle_calldata(amount=10, signature=signature, permit2612=with_permit, **kw)
        assert data[:4] in _selectors(exact, name)


def _witness_type_string(types: dict[str, list[dict[str, str]]]) -> str:
    def one(name: str) -> str:
        return f"{name}({','.join(f['type'] + ' ' + f['name'] for f in types[name])})"

    return "Witness witness)" + one("TokenPermissions") + one("Witness")


def test_the_witness_type_strings_follow_the_sdks_types() -> None:
    assert _witness_type_string(sdk.UPTO_PERMIT2_WITNESS_TYPES) == UPTO_WITNESS_TYPE_STRING
    assert _witness_type_string(sdk.PERMIT2_WITNESS_TYPES) == EXACT_WITNESS_TYPE_STRING


def test_the_bytes_signature_transfer_is_abi_encoded() -> None:
    nonce = os.urandom(32)
    for length in (0, 1, 65, 200):
        signature = os.urandom(length)
        data = encode_transfer_with_authorization_bytes(
            from_=_A, to=_B, value=3, valid_after=4, valid_before=5, nonce=nonce, signature=signature
        )
        types = ["address", "address", "uint256", "uint256", "uint256", "bytes32", "bytes"]
        selector = keccak256(f"transferWithAuthorization({','.join(types)})".encode())[:4]
        assert data == selector + abi_encode(types, [_A, _B, 3, 4, 5, nonce, signature])


def test_a_permit_takes_a_65_byte_signature() -> None:
    data = permit_calldata(owner=_A, spender=_B, value=1, deadline=2, signature=b"\x01" * 64 + b"\x00")
    assert data[-96:-64] == (27).to_bytes(32, "big")
    with pytest.raises(ValueError, match="65 bytes"):
        permit_calldata(owner=_A, spender=_B, value=1, deadline=2, signature=b"\x01" * 64)


def test_an_erc6492_wrapper_ends_with_the_magic_suffix() -> None:
    wrapped = erc6492_wrap(_A, b"\x01\x02", b"\x03" * 65)
    assert wrapped.endswith(ERC6492_SUFFIX) and len(ERC6492_SUFFIX) == 32
