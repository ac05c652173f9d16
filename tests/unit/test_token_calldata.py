"""The calldata of EIP-3009 transfers, encoded by hand, equals eth_abi's on random inputs."""

from __future__ import annotations

import pytest
from eth_abi.abi import encode as abi_encode
from hypothesis import given
from hypothesis import strategies as st

from x402mw.evm.keccak import keccak256
from x402mw.platform.chain.token import encode_receive_with_authorization, encode_transfer_with_authorization

ADDRESSES = st.binary(min_size=20, max_size=20).map(lambda raw: "0x" + raw.hex())
UINT256 = st.integers(min_value=0, max_value=2**256 - 1)
WORDS = st.binary(min_size=32, max_size=32)
TYPES = ["address", "address", "uint256", "uint256", "uint256", "bytes32", "uint8", "bytes32", "bytes32"]


@given(ADDRESSES, ADDRESSES, UINT256, UINT256, UINT256, WORDS, WORDS, WORDS, st.sampled_from([0, 1, 27, 28]))
def test_the_calldata_is_eth_abis(
    payer: str, to: str, value: int, after: int, before: int, nonce: bytes, r: bytes, s: bytes, v: int
) -> None:
    fields = {"from_": payer, "to": to, "value": value, "valid_after": after, "valid_before": before}
    arguments = [payer, to, value, after, before, nonce, v if v >= 27 else v + 27, r, s]
    expected = abi_encode(TYPES, arguments)
    signature = r + s + bytes((v,))
    transfer = encode_transfer_with_authorization(**fields, nonce=nonce, signature=signature)
    receive = encode_receive_with_authorization(**fields, nonce=nonce, signature=signature)
    head = "address,address,uint256,uint256,uint256,bytes32,uint8,bytes32,bytes32"
    assert transfer == keccak256(f"transferWithAuthorization({head})".encode())[:4] + expected
    assert receive == keccak256(f"receiveWithAuthorization({head})".encode())[:4] + expected


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"from_": "0x1234"}, "from_address must be"),
        ({"to": "not an address"}, "to must be"),
        ({"value": -1}, "value must be"),
        ({"value": 2**256}, "value must be"),
        ({"valid_before": True}, "valid_before must be"),
        ({"nonce": b"\x00" * 31}, "nonce is 32 bytes"),
        ({"signature": b"\x00" * 64}, "signature is 65 bytes"),
    ],
)
def test_unencodable_arguments_are_refused(change: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {
        "from_": "0x" + "11" * 20,
        "to": "0x" + "22" * 20,
        "value": 1,
        "valid_after": 0,
        "valid_before": 2**32,
        "nonce": b"\x00" * 32,
        "signature": b"\x01" * 64 + b"\x1b",
    }
    with pytest.raises(ValueError, match=message):
        encode_transfer_with_authorization(**{**arguments, **change})  # type: ignore[arg-type]
