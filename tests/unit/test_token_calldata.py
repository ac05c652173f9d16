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


def test_a_recorded_payment_is_sent_again_in_the_form_its_signer_needs() -> None:
    # What settlement sends again after a takeover, from the signature as it was recorded: a key's
    # in the (v, r, s) form, a smart account's in the bytes form, an ERC-6492 one unwrapped, with the
    # factory call that deploys the account first.
    from x402mw.evm.eip712 import TokenDomain, TransferAuthorization, random_nonce, sign_transfer
    from x402mw.evm.keys import address_of, new_private_key
    from x402mw.platform.chain.contracts import erc6492_wrap, wallet_deploy_calldata
    from x402mw.platform.chain.token import transfer_calldata, transfer_calldata_bytes
    from x402mw.platform.services.settlement.smart_accounts import SMART_TRANSFER_GAS, unwrap_erc6492
    from x402mw.platform.services.settlement.transfers import recorded_exact_transfer

    domain = TokenDomain("USD Coin", "2", 8453, "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913")
    key = new_private_key()
    by_key = TransferAuthorization(address_of(key), "0x" + "22" * 20, 10_000, 0, 2**40, random_nonce())
    signature = sign_transfer(key, domain, by_key)
    usdc = domain.verifying_contract
    sent = recorded_exact_transfer(usdc, domain, by_key, signature)
    assert (sent.scheme, sent.to, sent.calldata, sent.gas, sent.deployment) == (
        "exact",
        usdc,
        transfer_calldata(by_key, signature),
        120_000,
        None,
    )
    wallet = "0x" + "33" * 20  # the owner key signs for the wallet: the signature recovers to the owner
    by_wallet = TransferAuthorization(wallet, "0x" + "22" * 20, 10_000, 0, 2**40, random_nonce())
    inner = sign_transfer(key, domain, by_wallet)
    smart = recorded_exact_transfer(usdc, domain, by_wallet, inner)
    assert (smart.calldata, smart.gas, smart.deployment) == (
        transfer_calldata_bytes(by_wallet, inner),
        SMART_TRANSFER_GAS,
        None,
    )
    factory = "0x" + "44" * 20
    deploy = wallet_deploy_calldata(address_of(key), b"\x01" * 32)
    wrapped = recorded_exact_transfer(usdc, domain, by_wallet, erc6492_wrap(factory, deploy, inner))
    deployment = wrapped.deployment
    assert wrapped.calldata == transfer_calldata_bytes(by_wallet, inner)
    assert deployment is not None and (deployment.factory.lower(), deployment.calldata) == (factory, deploy)
    assert unwrap_erc6492(inner) is None
    with pytest.raises(ValueError, match="does not decode"):
        unwrap_erc6492(b"\x01" * 40 + bytes.fromhex("64926492" * 8))
