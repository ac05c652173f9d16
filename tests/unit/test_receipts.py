"""EIP-191 signed settlement receipts, checked against eth-account's personal_sign."""

from __future__ import annotations

import os

os.environ.setdefault("ETH_HASH_BACKEND", "pysha3")

import json
from typing import Any

import pytest
from eth_account import Account
from eth_account.messages import encode_defunct
from hypothesis import given, settings
from hypothesis import strategies as st

from x402mw.evm.keys import address_of, new_private_key
from x402mw.evm.receipts import (
    RECEIPT_FIELDS,
    receipt_message,
    recover_receipt_signer,
    sign_receipt,
    verify_receipt,
)

SECP256K1_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
KEY = new_private_key()
SIGNER = address_of(KEY)
FIELDS = {
    "challengeId": "ch_01HZX",
    "endpointId": "ep_42",
    "network": "eip155:8453",
    "asset": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
    "amount": "10000",
    "payer": "0x" + "ab" * 20,
    "payTo": "0x" + "cd" * 20,
    "transaction": "0x" + "ef" * 32,
    "settledAt": "2025-01-02T03:04:05Z",
    "scheme": "upto",  # an upto receipt: amount charged, of at most maxAmount
    "maxAmount": "50000",
}

receipt_fields = st.dictionaries(st.sampled_from(RECEIPT_FIELDS), st.text(max_size=80))


def test_sign_and_verify_round_trip() -> None:
    receipt = sign_receipt(FIELDS, KEY)
    assert {k: receipt[k] for k in FIELDS} == FIELDS
    assert receipt["signer"] == SIGNER
    assert receipt["signature"].startswith("0x")
    assert len(bytes.fromhex(receipt["signature"][2:])) == 65
    assert recover_receipt_signer(receipt) == SIGNER
    assert verify_receipt(receipt, SIGNER)
    assert verify_receipt(receipt, SIGNER.lower())
    assert verify_receipt(receipt, "0x" + SIGNER[2:].upper())
    assert not verify_receipt(receipt, address_of(new_private_key()))


@settings(max_examples=100, deadline=None)
@given(receipt_fields, st.integers(min_value=1, max_value=SECP256K1_N - 1))
def test_eth_account_personal_sign_agrees(fields: dict[str, str], secret: int) -> None:
    key = secret.to_bytes(32, "big")
    receipt = sign_receipt(fields, key)
    signature = bytes.fromhex(receipt["signature"][2:])
    message = encode_defunct(primitive=receipt_message(fields))
    assert Account.recover_message(message, signature=signature) == Account.from_key(key).address
    assert bytes(Account.sign_message(message, key).signature) == signature
    assert recover_receipt_signer(receipt) == Account.from_key(key).address
    assert verify_receipt(receipt, Account.from_key(key).address)


def test_the_message_is_canonical_json() -> None:
    message = receipt_message({"payer": "0xAB", "amount": "5", "network": "eip155:1", "asset": "€"})
    assert message == b'{"amount":"5","asset":"\\u20ac","network":"eip155:1","payer":"0xAB"}'
    assert json.loads(message) == {"payer": "0xAB", "amount": "5", "network": "eip155:1", "asset": "€"}
    assert receipt_message(dict(reversed(list(FIELDS.items())))) == receipt_message(FIELDS)
    # eth-account's text form of the same message recovers the same signer.
    receipt = sign_receipt(FIELDS, KEY)
    text = encode_defunct(text=receipt_message(FIELDS).decode("ascii"))
    assert Account.recover_message(text, signature=bytes.fromhex(receipt["signature"][2:])) == SIGNER


@pytest.mark.parametrize(
    "fields",
    [FIELDS | {"extra": "x"}, {"signer": SIGNER}, FIELDS | {"amount": 10000}, {"network": None}],
)
def test_unknown_keys_and_non_strings_are_refused(fields: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        receipt_message(fields)
    with pytest.raises(ValueError):
        sign_receipt(fields, KEY)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(RECEIPT_FIELDS), st.text(max_size=20))
def test_a_changed_field_fails(name: str, suffix: str) -> None:
    receipt = sign_receipt(FIELDS, KEY)
    changed = receipt | {name: receipt[name] + (suffix or "0")}
    assert not verify_receipt(changed, SIGNER)


@pytest.mark.parametrize("name", RECEIPT_FIELDS)
def test_a_removed_or_added_field_fails(name: str) -> None:
    receipt = sign_receipt(FIELDS, KEY)
    assert not verify_receipt({k: v for k, v in receipt.items() if k != name}, SIGNER)
    partial = sign_receipt({k: v for k, v in FIELDS.items() if k != name}, KEY)
    assert verify_receipt(partial, SIGNER)
    assert not verify_receipt(partial | {name: FIELDS[name]}, SIGNER)


def test_a_claimed_signer_must_be_the_recovered_one() -> None:
    receipt = sign_receipt(FIELDS, KEY)
    other = address_of(new_private_key())
    assert not verify_receipt(receipt | {"signer": other}, SIGNER)
    assert verify_receipt(receipt | {"signer": SIGNER.lower()}, SIGNER)
    assert verify_receipt({k: v for k, v in receipt.items() if k != "signer"}, SIGNER)


def _with_signature(signature: object) -> dict[str, Any]:
    return sign_receipt(FIELDS, KEY) | {"signature": signature}


def _high_s(signature_hex: str) -> str:
    raw = bytes.fromhex(signature_hex[2:])
    s = int.from_bytes(raw[32:64], "big")
    return "0x" + (raw[:32] + (SECP256K1_N - s).to_bytes(32, "big") + bytes((55 - raw[64],))).hex()


@pytest.mark.parametrize(
    "receipt",
    [
        _with_signature("0x"),
        _with_signature("0x1234"),
        _with_signature("not hex"),
        _with_signature("0x" + "zz" * 65),
        _with_signature(sign_receipt(FIELDS, KEY)["signature"][2:]),
        _with_signature(sign_receipt(FIELDS, KEY)["signature"] + "00"),
        _with_signature(sign_receipt(FIELDS, KEY)["signature"][:-2] + "1d"),
        _with_signature(_high_s(sign_receipt(FIELDS, KEY)["signature"])),
        _with_signature(None),
        _with_signature(12),
        {k: v for k, v in sign_receipt(FIELDS, KEY).items() if k != "signature"},
        sign_receipt(FIELDS, KEY) | {"signer": 7},
        sign_receipt(FIELDS, KEY) | {"amount": 10000},
        {},
        None,
        "receipt",
        [("signature", "0x")],
    ],
)
def test_malformed_receipts_verify_false_without_raising(receipt: Any) -> None:
    assert verify_receipt(receipt, SIGNER) is False


@pytest.mark.parametrize("expected", [None, 42, "", "not an address"])
def test_a_malformed_expected_signer_verifies_false(expected: Any) -> None:
    assert verify_receipt(sign_receipt(FIELDS, KEY), expected) is False


def test_a_bad_key_is_refused_without_echoing_it() -> None:
    with pytest.raises(ValueError) as raised:
        sign_receipt(FIELDS, b"\x01" * 31)
    assert ("01" * 31) not in str(raised.value)
