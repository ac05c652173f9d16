"""The auth-capture calldata and events of x402mw.platform.chain.auth_capture against the compiled
ABIs of our escrows (both deployments) and collectors, and the hashes of x402mw.evm.auth_capture
against eth_abi's encoding."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from eth_abi.abi import encode as abi_encode

from x402mw.evm.auth_capture import (
    DEPLOYMENT_V1_0,
    DEPLOYMENT_V1_1,
    PAYMENT_INFO_TYPEHASH,
    SALT_BINDING_TYPEHASH,
    ZERO_ADDRESS,
    AuthCaptureDeployment,
    PaymentInfo,
    bound_salt,
    deployment_for,
    fee_amount_bounds,
    payment_info_hash,
    signature_nonce,
)
from x402mw.evm.keccak import keccak256
from x402mw.platform.chain import auth_capture as calls
from x402mw.platform.chain.contracts import CANONICAL_CONTRACTS, load_artifact

_INFO = PaymentInfo(
    operator="0x" + "11" * 20,
    payer="0x" + "22" * 20,
    receiver="0x" + "33" * 20,
    token="0x" + "44" * 20,
    max_amount=1_000_000,
    pre_approval_expiry=1_000,
    authorization_expiry=2_000,
    refund_expiry=3_000,
    min_fee_bps=10,
    max_fee_bps=250,
    fee_receiver="0x" + "55" * 20,
    salt=2**255 + 7,
)


def _canonical_type(entry: dict[str, Any]) -> str:
    if entry["type"].startswith("tuple"):
        return "(" + ",".join(_canonical_type(c) for c in entry["components"]) + ")" + str(entry["type"][5:])
    return str(entry["type"])


def _signature(item: dict[str, Any]) -> str:
    return f"{item['name']}({','.join(_canonical_type(i) for i in item['inputs'])})"


def _abi(address: str) -> list[dict[str, Any]]:
    abi: list[dict[str, Any]] = load_artifact(CANONICAL_CONTRACTS[address])["abi"]
    return abi


@pytest.mark.parametrize("deployment", [DEPLOYMENT_V1_0, DEPLOYMENT_V1_1], ids=lambda d: d.version)
def test_the_calldata_is_the_escrows_abi(deployment: AuthCaptureDeployment) -> None:
    functions = {
        keccak256(_signature(item).encode())[:4]: item["name"]
        for item in _abi(deployment.escrow)
        if item["type"] == "function"
    }
    encoded = {
        "authorize": calls.authorize_calldata(_INFO, 5, _INFO.token, b"\x01"),
        "charge": calls.charge_calldata(_INFO, 5, _INFO.token, b"", 1, _INFO.fee_receiver, deployment=deployment),
        "capture": calls.capture_calldata(_INFO, 5, 1, _INFO.fee_receiver, deployment=deployment),
        "void": calls.void_calldata(_INFO),
        "reclaim": calls.reclaim_calldata(_INFO),
        "refund": calls.refund_calldata(_INFO, 5, _INFO.token),
    }
    for name, data in encoded.items():
        assert functions[data[:4]] == name
    abi_events = {
        item["name"]: keccak256(_signature(item).encode())
        for item in _abi(deployment.escrow)
        if item["type"] == "event"
    }
    assert abi_events == dict(calls.events(deployment))


def test_the_collectors_have_the_commerce_payments_interface() -> None:
    for deployment in (DEPLOYMENT_V1_0, DEPLOYMENT_V1_1):
        for collector in (
            deployment.eip3009_collector,
            deployment.permit2_collector,
            deployment.operator_refund_collector,
        ):
            names = {_signature(item) for item in _abi(collector) if item["type"] == "function"}
            assert f"collectTokens({calls.PAYMENT_INFO},address,uint256,bytes)" in names
            assert {"collectorType()", "authCaptureEscrow()"} <= names


def test_the_hashes_are_abi_encodings_of_the_struct() -> None:
    types = ["bytes32", *calls.PAYMENT_INFO[1:-1].split(",")]
    struct = keccak256(abi_encode(types, [PAYMENT_INFO_TYPEHASH, *_INFO.abi_tuple()]))
    assert _INFO.struct_hash() == struct
    expected = keccak256(abi_encode(["uint256", "address", "bytes32"], [8453, DEPLOYMENT_V1_1.escrow, struct]))
    assert payment_info_hash(8453, _INFO) == expected
    assert signature_nonce(8453, _INFO) == payment_info_hash(8453, _INFO.with_payer(ZERO_ADDRESS))
    assert signature_nonce(8453, _INFO, DEPLOYMENT_V1_0.escrow) != signature_nonce(8453, _INFO)
    salt = bound_salt(_INFO.operator, ZERO_ADDRESS, 9)
    preimage = abi_encode(
        ["bytes32", "address", "address", "uint256"], [SALT_BINDING_TYPEHASH, _INFO.operator, ZERO_ADDRESS, 9]
    )
    assert salt == int.from_bytes(keccak256(preimage), "big")
    assert fee_amount_bounds(_INFO, 999) == (0, 24)


def test_a_field_out_of_its_type_is_refused() -> None:
    for field, value in (("max_amount", 2**120), ("refund_expiry", -1), ("min_fee_bps", 2**16), ("salt", 2**256)):
        changes: dict[str, Any] = {field: value}
        with pytest.raises(ValueError, match=field):
            replace(_INFO, **changes).struct_hash()
    with pytest.raises(ValueError, match="operator"):
        replace(_INFO, operator="0x1234").struct_hash()


def test_the_deployment_of_an_escrow_address() -> None:
    assert deployment_for(None) is DEPLOYMENT_V1_1
    assert deployment_for("") is DEPLOYMENT_V1_1
    assert deployment_for(DEPLOYMENT_V1_0.escrow.lower()) is DEPLOYMENT_V1_0
    assert deployment_for(DEPLOYMENT_V1_1.escrow.upper().replace("0X", "0x")) is DEPLOYMENT_V1_1
    assert deployment_for("0x" + "00" * 20) is None
