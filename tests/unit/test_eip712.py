"""EIP-712 / EIP-3009 digests, signatures and recovery, checked against eth-account on random inputs."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os

os.environ.setdefault("ETH_HASH_BACKEND", "pysha3")

from typing import Any

import pytest
from eth_abi.abi import encode as abi_encode
from eth_account import Account
from eth_account.messages import _hash_eip191_message, encode_typed_data
from eth_utils.address import is_address as eth_utils_is_address
from eth_utils.address import is_checksum_address
from eth_utils.address import to_checksum_address as eth_utils_to_checksum_address
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from x402mw.evm.eip712 import (
    TRANSFER_WITH_AUTHORIZATION_TYPEHASH,
    InvalidSignatureError,
    TokenDomain,
    TransferAuthorization,
    random_nonce,
    recover_digest_signer,
    recover_transfer_signer,
    sign_digest,
    sign_transfer,
    transfer_digest,
)
from x402mw.evm.keccak import keccak256
from x402mw.evm.keys import address_of, is_address, new_private_key, to_checksum_address

SECP256K1_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
UINT256_MAX = 2**256 - 1
USDC_BASE = TokenDomain("USD Coin", "2", 8453, "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913")

TYPES = {
    "EIP712Domain": [
        {"name": "name", "type": "string"},
        {"name": "version", "type": "string"},
        {"name": "chainId", "type": "uint256"},
        {"name": "verifyingContract", "type": "address"},
    ],
    "TransferWithAuthorization": [
        {"name": "from", "type": "address"},
        {"name": "to", "type": "address"},
        {"name": "value", "type": "uint256"},
        {"name": "validAfter", "type": "uint256"},
        {"name": "validBefore", "type": "uint256"},
        {"name": "nonce", "type": "bytes32"},
    ],
}


def full_message(domain: TokenDomain, auth: TransferAuthorization) -> dict[str, Any]:
    return {
        "types": TYPES,
        "primaryType": "TransferWithAuthorization",
        "domain": {
            "name": domain.name,
            "version": domain.version,
            "chainId": domain.chain_id,
            "verifyingContract": domain.verifying_contract,
        },
        "message": {
            "from": auth.from_address,
            "to": auth.to,
            "value": auth.value,
            "validAfter": auth.valid_after,
            "validBefore": auth.valid_before,
            "nonce": auth.nonce,
        },
    }


def eth_account_digest(domain: TokenDomain, auth: TransferAuthorization) -> bytes:
    return bytes(_hash_eip191_message(encode_typed_data(full_message=full_message(domain, auth))))


private_keys = st.integers(min_value=1, max_value=SECP256K1_N - 1).map(lambda k: k.to_bytes(32, "big"))
raw_addresses = st.binary(min_size=20, max_size=20).map(lambda b: "0x" + b.hex())
addresses = st.one_of(raw_addresses, raw_addresses.map(eth_utils_to_checksum_address))
uint256 = st.one_of(st.integers(min_value=0, max_value=UINT256_MAX), st.sampled_from([0, 1, 2**255, UINT256_MAX]))
times = st.integers(min_value=0, max_value=2**64)
text = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=40)
domains = st.builds(
    TokenDomain,
    name=st.one_of(text, st.sampled_from(["USD Coin", "EURC", "USDC"])),
    version=st.one_of(text, st.sampled_from(["1", "2"])),
    chain_id=st.one_of(st.sampled_from([1, 8453, 84532, 137, 42161, 10, 43114]), uint256),
    verifying_contract=addresses,
)


@st.composite
def signed_cases(draw: st.DrawFn) -> tuple[bytes, TokenDomain, TransferAuthorization]:
    key = draw(private_keys)
    auth = TransferAuthorization(
        from_address=draw(st.sampled_from([address_of(key), address_of(key).lower()])),
        to=draw(addresses),
        value=draw(uint256),
        valid_after=draw(times),
        valid_before=draw(times),
        nonce=draw(st.binary(min_size=32, max_size=32)),
    )
    return key, draw(domains), auth


checked = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@checked
@given(signed_cases())
def test_digest_equals_eth_account(case: tuple[bytes, TokenDomain, TransferAuthorization]) -> None:
    _, domain, auth = case
    assert transfer_digest(domain, auth) == eth_account_digest(domain, auth)


@checked
@given(signed_cases())
def test_our_signature_is_eth_accounts_and_recovers_there(
    case: tuple[bytes, TokenDomain, TransferAuthorization],
) -> None:
    key, domain, auth = case
    signature = sign_transfer(key, domain, auth)
    expected = Account.from_key(key).address
    assert len(signature) == 65
    assert signature[64] in (27, 28)
    assert int.from_bytes(signature[32:64], "big") <= SECP256K1_N // 2
    # Both sides sign deterministically (RFC 6979) with low s, so the bytes are identical.
    assert signature == bytes(Account.sign_typed_data(key, full_message=full_message(domain, auth)).signature)
    signable = encode_typed_data(full_message=full_message(domain, auth))
    assert Account.recover_message(signable, signature=signature) == expected
    assert Account._recover_hash(transfer_digest(domain, auth), signature=signature) == expected
    assert recover_transfer_signer(domain, auth, signature) == expected


@checked
@given(signed_cases())
def test_eth_account_signature_recovers_with_ours(
    case: tuple[bytes, TokenDomain, TransferAuthorization],
) -> None:
    key, domain, auth = case
    signed = Account.sign_typed_data(key, full_message=full_message(domain, auth))
    recovered = recover_transfer_signer(domain, auth, bytes(signed.signature))
    assert recovered == Account.from_key(key).address
    assert recovered.lower() == auth.from_address.lower()


@checked
@given(signed_cases(), st.data())
def test_a_tampered_field_recovers_someone_else(
    case: tuple[bytes, TokenDomain, TransferAuthorization], data: st.DataObject
) -> None:
    key, domain, auth = case
    signature = sign_transfer(key, domain, auth)
    field = data.draw(
        st.sampled_from(
            [
                "from_address",
                "to",
                "value",
                "valid_after",
                "valid_before",
                "nonce",
                "name",
                "version",
                "chain_id",
                "verifying_contract",
            ]
        )
    )
    changes: dict[str, Any] = {
        "from_address": "0x" + format(int(auth.from_address, 16) ^ 1, "040x"),
        "to": "0x" + format(int(auth.to, 16) ^ (1 << 159), "040x"),
        "value": auth.value ^ 1,
        "valid_after": auth.valid_after + 1,
        "valid_before": auth.valid_before ^ (1 << 70),
        "nonce": bytes([auth.nonce[0] ^ 0x80]) + auth.nonce[1:],
        "name": domain.name + "x",
        "version": domain.version + "1",
        "chain_id": domain.chain_id ^ 1,
        "verifying_contract": "0x" + format(int(domain.verifying_contract, 16) ^ 2, "040x"),
    }
    if field in ("name", "version", "chain_id", "verifying_contract"):
        domain = dataclasses.replace(domain, **{field: changes[field]})
    else:
        auth = dataclasses.replace(auth, **{field: changes[field]})
    try:
        recovered = recover_transfer_signer(domain, auth, signature)
    except InvalidSignatureError:
        return  # no key at all recovers from it: also a refusal
    assert recovered != address_of(key)


@checked
@given(signed_cases())
def test_v_may_be_0_or_1(case: tuple[bytes, TokenDomain, TransferAuthorization]) -> None:
    key, domain, auth = case
    signature = sign_transfer(key, domain, auth)
    raw_v = signature[:64] + bytes((signature[64] - 27,))
    assert recover_transfer_signer(domain, auth, raw_v) == address_of(key)


@checked
@given(signed_cases())
def test_high_s_is_refused(case: tuple[bytes, TokenDomain, TransferAuthorization]) -> None:
    key, domain, auth = case
    signature = sign_transfer(key, domain, auth)
    s = int.from_bytes(signature[32:64], "big")
    # (r, n - s) with the other recovery id is the malleable twin: valid ECDSA, forbidden by EIP-2.
    twin = signature[:32] + (SECP256K1_N - s).to_bytes(32, "big") + bytes((55 - signature[64],))
    assert Account._recover_hash(transfer_digest(domain, auth), signature=signature) == address_of(key)
    with pytest.raises(InvalidSignatureError, match="EIP-2"):
        recover_transfer_signer(domain, auth, twin)


def _signed() -> tuple[bytes, TransferAuthorization, bytes]:
    key = new_private_key()
    auth = TransferAuthorization(address_of(key), "0x" + "22" * 20, 10_000, 0, 2**40, random_nonce())
    return key, auth, sign_transfer(key, USDC_BASE, auth)


@pytest.mark.parametrize("length", [0, 1, 32, 64, 66, 130])
def test_wrong_lengths_are_refused(length: int) -> None:
    _, auth, signature = _signed()
    bad = (signature * 3)[:length]
    with pytest.raises(InvalidSignatureError, match="65 bytes"):
        recover_transfer_signer(USDC_BASE, auth, bad)


@pytest.mark.parametrize("v", [2, 3, 26, 29, 35, 255])
def test_other_v_values_are_refused(v: int) -> None:
    _, auth, signature = _signed()
    with pytest.raises(InvalidSignatureError, match="v must be"):
        recover_transfer_signer(USDC_BASE, auth, signature[:64] + bytes((v,)))


@pytest.mark.parametrize(
    ("r", "s"),
    [(0, 1), (1, 0), (SECP256K1_N, 1), (2**256 - 1, 1), (1, SECP256K1_N // 2 + 1), (1, SECP256K1_N)],
)
def test_out_of_range_r_and_s_are_refused(r: int, s: int) -> None:
    _, auth, _ = _signed()
    signature = r.to_bytes(32, "big") + s.to_bytes(32, "big") + b"\x1b"
    with pytest.raises(InvalidSignatureError):
        recover_transfer_signer(USDC_BASE, auth, signature)


def test_an_r_that_is_no_curve_point_is_refused() -> None:
    digest = keccak256(b"anything")
    # x = 5 has no point on secp256k1 (5**3 + 7 is not a square mod p), so nothing recovers.
    signature = (5).to_bytes(32, "big") + (1).to_bytes(32, "big") + b"\x1b"
    with pytest.raises(InvalidSignatureError, match="recovers"):
        recover_digest_signer(digest, signature)


def test_recover_digest_signer_is_the_generic_form() -> None:
    key, auth, signature = _signed()
    assert recover_digest_signer(transfer_digest(USDC_BASE, auth), signature) == address_of(key)
    with pytest.raises(ValueError, match="32 bytes"):
        recover_digest_signer(b"short", signature)


def test_the_domain_separator_is_precomputed_and_not_part_of_equality() -> None:
    same = TokenDomain("USD Coin", "2", 8453, "0x833589fcd6edb6e08f4c7c32d4f71b54bda02913")
    assert same.separator == USDC_BASE.separator
    assert len(USDC_BASE.separator) == 32
    assert "separator" not in repr(USDC_BASE)
    assert TokenDomain("USD Coin", "1", 8453, USDC_BASE.verifying_contract).separator != USDC_BASE.separator


@pytest.mark.parametrize(
    "changes",
    [
        {"value": -1},
        {"value": 2**256},
        {"value": True},
        {"valid_after": -5},
        {"valid_before": 2**256},
        {"nonce": b"\x00" * 31},
        {"nonce": "00" * 32},
        {"from_address": "0x" + "11" * 19},
        {"to": "11" * 21},
        {"to": "0x" + "zz" * 20},
        {"to": "0x" + "1 " * 20},
        {"to": "0x" + "11" * 18 + " 11 "},  # hex digits and white space, 40 characters in all
        {"to": "0x" + "\u0661" * 40},  # digits, but not ASCII ones
    ],
)
def test_unencodable_authorizations_are_refused(changes: dict[str, Any]) -> None:
    fields: dict[str, Any] = {
        "from_address": "0x" + "11" * 20,
        "to": "0x" + "22" * 20,
        "value": 1,
        "valid_after": 0,
        "valid_before": 1,
        "nonce": bytes(32),
    }
    with pytest.raises(ValueError):
        TransferAuthorization(**(fields | changes))


def test_an_authorization_encodes_its_fields_once_as_abi_words() -> None:
    auth = TransferAuthorization("0X" + "AB" * 20, "0x" + "cd" * 20, 7, 1, 2, bytes(range(32)))
    assert auth.words == abi_encode(
        ["address", "address", "uint256", "uint256", "uint256", "bytes32"],
        ["0x" + "ab" * 20, "0x" + "cd" * 20, 7, 1, 2, bytes(range(32))],
    )
    assert auth.struct_hash() == keccak256(TRANSFER_WITH_AUTHORIZATION_TYPEHASH + auth.words)


@pytest.mark.parametrize(
    "changes", [{"chain_id": -1}, {"chain_id": 2**256}, {"verifying_contract": "0x1234"}, {"name": None}]
)
def test_unencodable_domains_are_refused(changes: dict[str, Any]) -> None:
    fields: dict[str, Any] = {
        "name": "USD Coin",
        "version": "2",
        "chain_id": 1,
        "verifying_contract": "0x" + "11" * 20,
    }
    with pytest.raises(ValueError):
        TokenDomain(**(fields | changes))


def test_random_nonce_is_32_fresh_bytes() -> None:
    nonces = {random_nonce() for _ in range(64)}
    assert len(nonces) == 64
    assert all(len(nonce) == 32 for nonce in nonces)


@checked
@given(raw_addresses, st.sampled_from(["lower", "upper", "checksum"]))
def test_checksum_addresses_match_eth_utils(address: str, case: str) -> None:
    spelled = {
        "lower": address,
        "upper": "0x" + address[2:].upper(),
        "checksum": eth_utils_to_checksum_address(address),
    }
    value = spelled[case]
    assert to_checksum_address(value) == eth_utils_to_checksum_address(address)
    assert is_address(value)
    assert eth_utils_is_address(value)


@checked
@given(raw_addresses)
def test_a_mixed_case_address_with_a_wrong_checksum_is_not_an_address(address: str) -> None:
    checksummed = eth_utils_to_checksum_address(address)
    letters = [i for i, c in enumerate(checksummed) if i > 1 and c.isalpha()]
    if len(letters) < 2:
        return  # fewer than two letters: no mixed-case misspelling exists
    i = letters[0]
    wrong = checksummed[:i] + checksummed[i].swapcase() + checksummed[i + 1 :]
    if wrong[2:] in (wrong[2:].lower(), wrong[2:].upper()):
        return  # the swap made it single-case, which is valid without a checksum
    assert not is_address(wrong)
    assert not is_checksum_address(wrong)
    assert to_checksum_address(wrong) == checksummed  # the converter normalises any case


@pytest.mark.parametrize(
    "value",
    [
        None,
        1,
        b"0x" + b"11" * 20,
        "",
        "0x",
        "11" * 20,
        "0x" + "11" * 19,
        "0x" + "11" * 21,
        "0x" + "g1" * 20,
        " 0x" + "11" * 20,
        "0x" + "11" * 19 + " 1",
        "0x+1" + "11" * 19,
    ],
)
def test_malformed_addresses(value: object) -> None:
    assert not is_address(value)
    with pytest.raises(ValueError):
        to_checksum_address(value)  # type: ignore[arg-type]


@checked
@given(private_keys)
def test_address_of_matches_eth_account(key: bytes) -> None:
    assert address_of(key) == Account.from_key(key).address


@pytest.mark.parametrize("key", [b"", bytes(31), bytes(32), SECP256K1_N.to_bytes(32, "big"), b"\xff" * 32, bytes(33)])
def test_address_of_refuses_invalid_keys_without_echoing_them(key: bytes) -> None:
    with pytest.raises(ValueError) as raised:
        address_of(key)
    assert key.hex() not in str(raised.value) or not key


def test_new_private_keys_are_valid_and_distinct() -> None:
    keys = {new_private_key() for _ in range(32)}
    assert len(keys) == 32
    for key in keys:
        assert len(key) == 32
        assert address_of(key) == Account.from_key(key).address


def test_recovered_addresses_stay_right_as_the_address_memo_fills_and_clears(monkeypatch: pytest.MonkeyPatch) -> None:
    from x402mw.evm import eip712

    monkeypatch.setattr(eip712, "_ADDRESSES", {})
    monkeypatch.setattr(eip712, "_ADDRESSES_KEPT", 3)
    keys = [new_private_key() for _ in range(5)]
    for round_ in range(3):  # the memo holds at most 3 of the 5 keys: it fills, clears and refills
        for index, key in enumerate(keys):
            digest = keccak256(b"round %d key %d" % (round_, index))
            signature = sign_digest(key, digest)
            assert recover_digest_signer(digest, signature) == address_of(key)
            assert recover_digest_signer(digest, signature) == Account._recover_hash(digest, signature=signature)
            assert len(eip712._ADDRESSES) <= 3


def test_threads_recovering_at_once_each_get_their_own_signer() -> None:
    # libsecp256k1 runs without the GIL: each thread must have its own in and out structures
    keys = [new_private_key() for _ in range(8)]
    cases = [(keccak256(b"%d" % n), keys[n % 8]) for n in range(800)]
    signed = [(digest, sign_digest(key, digest), address_of(key)) for digest, key in cases]

    def recover_all(offset: int) -> list[bool]:
        mine = signed[offset:] + signed[:offset]
        return [recover_digest_signer(digest, signature) == signer for digest, signature, signer in mine]

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(recover_all, range(0, 800, 100)))
    assert all(all(found) for found in results)
