"""`MeteredPayment`, what a metered route's handler reports usage to, and the upto digests and wire
models (checked against eth-account's EIP-712 and the Foundation SDK's payload shape)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from eth_account import Account
from eth_account.messages import encode_typed_data

from tests.contract_helpers import UPTO_WITNESS_FIELDS, witness_permit_message
from x402mw.client import Wallet
from x402mw.evm.eip712 import recover_digest_signer
from x402mw.evm.permit2 import UPTO_PERMIT2_PROXY_ADDRESS, UptoPermit, upto_permit_digest
from x402mw.protocol.codec import decode_any_payment_payload, encode_header
from x402mw.protocol.models import PaymentRequirements, UptoPaymentPayload
from x402mw.seller.metering import MeteredPayment, UsageError

PAY_TO = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"
FACILITATOR = "0x857b06519E91e3A54538791bDbb0E22373e36b66"
USDC = "0x036CbD53842c5426634e7929541eC2318f3dCF7e"


def _payment(ceiling: int = 10_000) -> MeteredPayment:
    return MeteredPayment(ceiling, "0x" + "1" * 40, "eip155:84532", USDC, PAY_TO, 6, "USDC", "c1", "e1")


def test_charges_add_up_in_atomic_units_or_prices() -> None:
    payment = _payment()
    assert payment.charge(100) == 100
    assert payment.charge("$0.0002") == 300
    assert payment.charge(Decimal("0.000001")) == 301
    assert payment.charge(0) == 301
    assert (payment.charged, payment.amount) == (301, 301)


@pytest.mark.parametrize("usage", [-1, 1.5, True, "0.0000001", "-0.01", "ten", None, Decimal("0.0000005")])
def test_a_usage_that_cannot_be_charged_is_refused(usage: Any) -> None:
    payment = _payment()
    with pytest.raises(UsageError):
        payment.charge(usage)
    assert payment.charged == 0


def test_usage_above_the_ceiling_settles_the_ceiling_and_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    payment = _payment(ceiling=500)
    payment.charge(700)
    assert payment.close() == 500
    assert "above its ceiling 500" in caplog.text


def test_usage_after_the_response_started_is_refused() -> None:
    payment = _payment()
    payment.charge(5)
    assert payment.close() == 5
    with pytest.raises(UsageError, match="settled when the response started"):
        payment.charge(1)
    assert payment.charged == 5


def _offer() -> PaymentRequirements:
    return PaymentRequirements.model_validate(
        {
            "scheme": "upto",
            "network": "eip155:84532",
            "amount": "5000000",
            "asset": USDC,
            "payTo": PAY_TO,
            "maxTimeoutSeconds": 300,
            "extra": {"name": "USDC", "version": "2", "facilitatorAddress": FACILITATOR},
        }
    )


def test_the_upto_digest_is_eip712_of_the_canonical_permit2_types() -> None:
    key = bytes(range(1, 33))
    payload = Wallet(key).sign_upto(_offer(), permit_nonce=3)
    auth = payload.payload.permit2_authorization
    message = witness_permit_message(
        84532,
        token=USDC,
        amount=5_000_000,
        spender=UPTO_PERMIT2_PROXY_ADDRESS,
        nonce=auth.nonce,
        deadline=auth.deadline,
        witness={"to": PAY_TO, "facilitator": FACILITATOR, "validAfter": auth.witness.valid_after},
        witness_fields=UPTO_WITNESS_FIELDS,
    )
    assert message["domain"]["verifyingContract"] == "0x000000000022D473030F116dDEE9F6B43aC78BA3"  # canonical
    theirs = Account.sign_message(encode_typed_data(full_message=message), key)
    assert "0x" + bytes(theirs.signature).hex() == payload.payload.signature
    permit = UptoPermit(
        Wallet(key).address,
        USDC,
        5_000_000,
        UPTO_PERMIT2_PROXY_ADDRESS,
        auth.nonce,
        auth.deadline,
        PAY_TO,
        FACILITATOR,
        auth.witness.valid_after,
    )
    signer = recover_digest_signer(upto_permit_digest(84532, permit), bytes(theirs.signature))
    assert signer == Wallet(key).address
    info = (payload.extensions or {})["eip2612GasSponsoring"]["info"]
    assert (info["nonce"], info["amount"], info["spender"]) == (
        "3",
        "5000000",
        "0x000000000022D473030F116dDEE9F6B43aC78BA3",
    )


@pytest.mark.parametrize("nonce", ["123456789", "0x75bcd15"])
def test_a_foundation_payload_decodes_with_a_decimal_or_hex_nonce(nonce: str) -> None:
    wire = {
        "x402Version": 2,
        "accepted": _offer().to_wire(),
        "payload": {
            "signature": "0x" + "ab" * 65,
            "permit2Authorization": {
                "permitted": {"token": USDC, "amount": "5000000"},
                "from": PAY_TO,
                "spender": UPTO_PERMIT2_PROXY_ADDRESS,
                "nonce": nonce,
                "deadline": "1740672154",
                "witness": {"to": PAY_TO, "facilitator": FACILITATOR, "validAfter": "0"},
            },
        },
    }
    decoded = decode_any_payment_payload(encode_header(UptoPaymentPayload.model_validate(wire)))
    assert isinstance(decoded, UptoPaymentPayload)
    assert decoded.payload.permit2_authorization.nonce == 123456789


@pytest.mark.parametrize("with_permit", [False, True])
@pytest.mark.parametrize("signature_length", [64, 65, 97])
def test_the_upto_calldata_is_eth_abis_encoding(with_permit: bool, signature_length: int) -> None:
    import os

    from eth_abi.abi import encode as abi_encode

    from x402mw.evm.keccak import keccak256
    from x402mw.platform.chain.contracts import upto_settle_calldata

    permit2612 = (5_000_000, 1_900_000_000, os.urandom(32), os.urandom(32), 27) if with_permit else None
    fields = {
        "token": USDC, "ceiling": 5_000_000, "nonce": 2**255 + 7, "deadline": 1_900_000_000, "amount": 1234,
        "owner": PAY_TO, "to": PAY_TO, "facilitator": FACILITATOR, "valid_after": 0,
        "signature": os.urandom(signature_length),
    }  # fmt: skip
    types = ["((address,uint256),uint256,uint256)", "uint256", "address", "(address,address,uint256)", "bytes"]
    values = [
        ((USDC, 5_000_000), 2**255 + 7, 1_900_000_000),
        1234,
        PAY_TO,
        (PAY_TO, FACILITATOR, 0),
        fields["signature"],
    ]
    if permit2612 is not None:
        types, values = ["(uint256,uint256,bytes32,bytes32,uint8)", *types], [permit2612, *values]
        name = "settleWithPermit"
    else:
        name = "settle"
    selector = keccak256(f"{name}({','.join(types)})".encode())[:4]
    assert upto_settle_calldata(**fields, permit2612=permit2612) == selector + abi_encode(types, values)
