"""Our Permit2, the x402 upto and exact Permit2 proxies at their canonical addresses, and our token's
EIP-2612 permit, on the dev chain and on anvil: what a client signs with the canonical EIP-712 types
(eth-account's typed-data signing, and the x402 Foundation SDK's upto client) settles here."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import pytest
from eth_abi.abi import decode as abi_decode
from eth_account import Account

from tests.chain_fixtures import ChainUnderTest, anvil_node, anyio_backend, chain, new_key
from tests.contract_helpers import (
    EXACT_WITNESS_FIELDS,
    UPTO_WITNESS_FIELDS,
    call_error,
    chain_now,
    error_selector,
    funded_key,
    permit2_domain,
    permit_message,
    permit_transfer_message,
    sign_message,
    witness_permit_message,
)
from x402mw.evm.keccak import keccak256
from x402mw.platform.chain.admin import transact
from x402mw.platform.chain.contracts import (
    CANONICAL_CONTRACTS,
    exact_settle_calldata,
    invalidate_nonces_calldata,
    permit2_nonce_used,
    runtime_code,
    upto_settle_calldata,
)
from x402mw.platform.chain.token import allowance, balance_of, permit_calldata, permit_nonce
from x402mw.platform.chain.transactions import RevertError
from x402mw.protocol.networks import EXACT_PERMIT2_PROXY_ADDRESS, PERMIT2_ADDRESS, UPTO_PERMIT2_PROXY_ADDRESS

__all__ = ["anvil_node", "anyio_backend", "chain"]

pytestmark = pytest.mark.anyio

_MAX = 2**256 - 1


def _address(key: bytes) -> str:
    return str(Account.from_key(key).address)


def _nonce() -> int:
    return int.from_bytes(os.urandom(32), "big")


@dataclass
class Upto:
    """One signed upto permit: the payer's ceiling for ``payee``, settleable by ``facilitator``."""

    chain: ChainUnderTest
    payer_key: bytes
    payee: str
    facilitator: str
    ceiling: int
    nonce: int
    deadline: int
    valid_after: int = 0
    signature: bytes = b""

    @property
    def payer(self) -> str:
        return _address(self.payer_key)

    def message(self) -> dict[str, Any]:
        witness = {"to": self.payee, "facilitator": self.facilitator, "validAfter": self.valid_after}
        return witness_permit_message(
            self.chain.chain_id,
            token=self.chain.usdc,
            amount=self.ceiling,
            spender=UPTO_PERMIT2_PROXY_ADDRESS,
            nonce=self.nonce,
            deadline=self.deadline,
            witness=witness,
            witness_fields=UPTO_WITNESS_FIELDS,
        )

    def sign(self) -> Upto:
        self.signature = sign_message(self.payer_key, self.message())
        return self

    def calldata(self, amount: int, **changes: Any) -> bytes:
        fields: dict[str, Any] = {
            "token": self.chain.usdc,
            "ceiling": self.ceiling,
            "nonce": self.nonce,
            "deadline": self.deadline,
            "amount": amount,
            "owner": self.payer,
            "to": self.payee,
            "facilitator": self.facilitator,
            "valid_after": self.valid_after,
            "signature": self.signature,
        }
        return upto_settle_calldata(**{**fields, **changes})


@pytest.fixture(scope="module")
async def facilitator_key(chain: ChainUnderTest) -> bytes:
    return await funded_key(chain)


async def _approved_payer(chain: ChainUnderTest, usdc: int = 10_000_000) -> bytes:
    """A payer holding ``usdc`` who approved Permit2 for everything (by paying gas itself)."""
    key = await funded_key(chain, usdc=usdc)
    await transact(chain.rpc, key, chain.usdc, _approve(PERMIT2_ADDRESS, _MAX), gas=80_000)
    return key


def _approve(spender: str, value: int) -> bytes:
    from eth_abi.abi import encode as abi_encode

    return keccak256(b"approve(address,uint256)")[:4] + abi_encode(["address", "uint256"], [spender, value])


async def _upto(chain: ChainUnderTest, facilitator_key: bytes, ceiling: int = 1_000_000, **kw: Any) -> Upto:
    payer_key = kw.pop("payer_key", None) or await _approved_payer(chain)
    deadline = kw.pop("deadline", None) or await chain_now(chain) + 3600
    return Upto(chain, payer_key, _address(new_key()), _address(facilitator_key), ceiling, _nonce(), deadline, **kw)


async def test_permit2_and_the_proxies_sit_at_their_canonical_addresses(chain: ChainUnderTest) -> None:
    for address, name in CANONICAL_CONTRACTS.items():
        code = await chain.rpc.request("eth_getCode", [address, "latest"])
        assert bytes.fromhex(str(code)[2:]) == runtime_code(name), name
    # The domain separator is computed at run time from the chain id and the address the code sits at.
    answer = await chain.rpc.request("eth_call", [{"to": PERMIT2_ADDRESS, "data": "0x3644e515"}, "latest"])
    domain_type = b"EIP712Domain(string name,uint256 chainId,address verifyingContract)"
    from eth_abi.abi import encode as abi_encode

    expected = keccak256(
        abi_encode(
            ["bytes32", "bytes32", "uint256", "address"],
            [keccak256(domain_type), keccak256(b"Permit2"), chain.chain_id, PERMIT2_ADDRESS],
        )
    )
    assert bytes.fromhex(str(answer)[2:]) == expected
    assert permit2_domain(chain.chain_id)["verifyingContract"] == PERMIT2_ADDRESS


async def test_an_eip2612_permit_sets_an_allowance_once_and_not_after_its_deadline(
    chain: ChainUnderTest, facilitator_key: bytes
) -> None:
    owner_key = await funded_key(chain, gas_wei=0, usdc=5_000_000)
    owner = _address(owner_key)
    assert await permit_nonce(chain.rpc, chain.usdc, owner) == 0
    deadline = await chain_now(chain) + 600
    message = permit_message(chain, owner=owner, spender=PERMIT2_ADDRESS, value=3_000_000, nonce=0, deadline=deadline)
    data = permit_calldata(
        owner=owner,
        spender=PERMIT2_ADDRESS,
        value=3_000_000,
        deadline=deadline,
        signature=sign_message(owner_key, message),
    )
    # Anyone may submit it (here the facilitator, paying the gas the owner has not got).
    await transact(chain.rpc, facilitator_key, chain.usdc, data, gas=100_000)
    assert await allowance(chain.rpc, chain.usdc, owner, PERMIT2_ADDRESS) == 3_000_000
    assert await permit_nonce(chain.rpc, chain.usdc, owner) == 1

    with pytest.raises(RevertError, match="invalid signature"):  # its nonce is spent
        await transact(chain.rpc, facilitator_key, chain.usdc, data, gas=100_000)

    late = await chain_now(chain) - 1
    message = permit_message(chain, owner=owner, spender=PERMIT2_ADDRESS, value=1, nonce=1, deadline=late)
    expired = permit_calldata(
        owner=owner, spender=PERMIT2_ADDRESS, value=1, deadline=late, signature=sign_message(owner_key, message)
    )
    with pytest.raises(RevertError, match="permit is expired"):
        await transact(chain.rpc, facilitator_key, chain.usdc, expired, gas=100_000)
    # Another key's signature of the owner's permit is refused.
    message = permit_message(chain, owner=owner, spender=PERMIT2_ADDRESS, value=1, nonce=1, deadline=deadline)
    forged = permit_calldata(
        owner=owner, spender=PERMIT2_ADDRESS, value=1, deadline=deadline, signature=sign_message(new_key(), message)
    )
    with pytest.raises(RevertError, match="invalid signature"):
        await transact(chain.rpc, facilitator_key, chain.usdc, forged, gas=100_000)
    assert await allowance(chain.rpc, chain.usdc, owner, PERMIT2_ADDRESS) == 3_000_000


@pytest.mark.parametrize("share", ["part", "all"])
async def test_the_facilitator_settles_part_or_all_of_the_ceiling(
    chain: ChainUnderTest, facilitator_key: bytes, share: str
) -> None:
    upto = (await _upto(chain, facilitator_key, ceiling=1_000_000)).sign()
    amount = 1_000_000 if share == "all" else 123_457
    before = await balance_of(chain.rpc, chain.usdc, upto.payer)
    assert not await permit2_nonce_used(chain.rpc, upto.payer, upto.nonce)
    receipt = await transact(chain.rpc, facilitator_key, UPTO_PERMIT2_PROXY_ADDRESS, upto.calldata(amount), gas=200_000)
    assert receipt.status == 1
    assert await balance_of(chain.rpc, chain.usdc, upto.payee) == amount
    assert await balance_of(chain.rpc, chain.usdc, upto.payer) == before - amount
    assert await balance_of(chain.rpc, chain.usdc, UPTO_PERMIT2_PROXY_ADDRESS) == 0
    assert await permit2_nonce_used(chain.rpc, upto.payer, upto.nonce)


async def test_more_than_the_ceiling_is_refused(chain: ChainUnderTest, facilitator_key: bytes) -> None:
    upto = (await _upto(chain, facilitator_key, ceiling=500_000)).sign()
    data = upto.calldata(500_001)
    assert await call_error(chain.rpc, upto.facilitator, UPTO_PERMIT2_PROXY_ADDRESS, data) == error_selector(
        "AmountExceedsPermitted()"
    )
    # A ceiling raised in the calldata breaks the signature (the payer signed 500,000).
    raised = upto.calldata(500_001, ceiling=600_000)
    assert await call_error(chain.rpc, upto.facilitator, UPTO_PERMIT2_PROXY_ADDRESS, raised) == error_selector(
        "InvalidSigner()"
    )
    with pytest.raises(RevertError, match="custom error"):
        await transact(chain.rpc, facilitator_key, UPTO_PERMIT2_PROXY_ADDRESS, data, gas=200_000)
    assert await balance_of(chain.rpc, chain.usdc, upto.payee) == 0
    assert not await permit2_nonce_used(chain.rpc, upto.payer, upto.nonce)


async def test_a_permit2_nonce_settles_once(chain: ChainUnderTest, facilitator_key: bytes) -> None:
    upto = (await _upto(chain, facilitator_key)).sign()
    await transact(chain.rpc, facilitator_key, UPTO_PERMIT2_PROXY_ADDRESS, upto.calldata(1_000), gas=200_000)
    assert await call_error(
        chain.rpc, upto.facilitator, UPTO_PERMIT2_PROXY_ADDRESS, upto.calldata(1_000)
    ) == error_selector("InvalidNonce()")
    # Another permit that reuses the nonce, signed anew, is refused as well.
    again = Upto(chain, upto.payer_key, upto.payee, upto.facilitator, 2_000, upto.nonce, upto.deadline).sign()
    assert await call_error(chain.rpc, again.facilitator, UPTO_PERMIT2_PROXY_ADDRESS, again.calldata(5)) == (
        error_selector("InvalidNonce()")
    )
    assert await balance_of(chain.rpc, chain.usdc, upto.payee) == 1_000


async def test_only_the_facilitator_named_in_the_witness_may_settle(
    chain: ChainUnderTest, facilitator_key: bytes
) -> None:
    """x402-foundation/x402 #2501: a watcher who copies the permit from a request (or the mempool)
    could otherwise settle it first for 1 unit and spend the nonce."""
    upto = (await _upto(chain, facilitator_key)).sign()
    attacker_key = await funded_key(chain)
    attacker = _address(attacker_key)
    assert await call_error(chain.rpc, attacker, UPTO_PERMIT2_PROXY_ADDRESS, upto.calldata(1)) == error_selector(
        "UnauthorizedFacilitator()"
    )
    # Naming itself the facilitator breaks the payer's signature.
    claimed = upto.calldata(1, facilitator=attacker)
    assert await call_error(chain.rpc, attacker, UPTO_PERMIT2_PROXY_ADDRESS, claimed) == error_selector(
        "InvalidSigner()"
    )
    with pytest.raises(RevertError, match="custom error"):
        await transact(chain.rpc, attacker_key, UPTO_PERMIT2_PROXY_ADDRESS, upto.calldata(1), gas=200_000)
    assert not await permit2_nonce_used(chain.rpc, upto.payer, upto.nonce)
    await transact(chain.rpc, facilitator_key, UPTO_PERMIT2_PROXY_ADDRESS, upto.calldata(700_000), gas=200_000)
    assert await balance_of(chain.rpc, chain.usdc, upto.payee) == 700_000


async def test_the_witness_binds_the_payee_and_the_time_window(chain: ChainUnderTest, facilitator_key: bytes) -> None:
    upto = (await _upto(chain, facilitator_key)).sign()
    elsewhere = upto.calldata(10, to=_address(new_key()))
    assert await call_error(chain.rpc, upto.facilitator, UPTO_PERMIT2_PROXY_ADDRESS, elsewhere) == error_selector(
        "InvalidSigner()"
    )
    assert await call_error(
        chain.rpc, upto.facilitator, UPTO_PERMIT2_PROXY_ADDRESS, upto.calldata(0)
    ) == error_selector("InvalidAmount()")

    now = await chain_now(chain)
    expired = (await _upto(chain, facilitator_key, payer_key=upto.payer_key, deadline=now - 1)).sign()
    answer = await call_error(chain.rpc, upto.facilitator, UPTO_PERMIT2_PROXY_ADDRESS, expired.calldata(10))
    assert answer[:10] == error_selector("SignatureExpired(uint256)")
    assert abi_decode(["uint256"], bytes.fromhex(answer[10:]))[0] == now - 1

    early = (await _upto(chain, facilitator_key, payer_key=upto.payer_key, valid_after=now + 3600)).sign()
    assert await call_error(
        chain.rpc, upto.facilitator, UPTO_PERMIT2_PROXY_ADDRESS, early.calldata(10)
    ) == error_selector("PaymentTooEarly()")


async def test_an_owner_can_invalidate_its_unused_nonces(chain: ChainUnderTest, facilitator_key: bytes) -> None:
    upto = (await _upto(chain, facilitator_key)).sign()
    await transact(
        chain.rpc,
        upto.payer_key,
        PERMIT2_ADDRESS,
        invalidate_nonces_calldata(upto.nonce >> 8, 1 << (upto.nonce & 0xFF)),
    )
    assert await permit2_nonce_used(chain.rpc, upto.payer, upto.nonce)
    assert await call_error(
        chain.rpc, upto.facilitator, UPTO_PERMIT2_PROXY_ADDRESS, upto.calldata(1)
    ) == error_selector("InvalidNonce()")


async def test_a_payer_without_an_allowance_is_refused_then_settles_with_a_sponsored_permit(
    chain: ChainUnderTest, facilitator_key: bytes
) -> None:
    """The eip2612GasSponsoring path: a payer with tokens and no gas signs an EIP-2612 permit for
    Permit2 next to its upto permit; the facilitator submits both in one settleWithPermit."""
    payer_key = await funded_key(chain, gas_wei=0, usdc=2_000_000)
    upto = (await _upto(chain, facilitator_key, ceiling=1_500_000, payer_key=payer_key)).sign()
    assert await call_error(chain.rpc, upto.facilitator, UPTO_PERMIT2_PROXY_ADDRESS, upto.calldata(10)) == (
        "0x08c379a0" + _error_string("TRANSFER_FROM_FAILED")
    )
    message = permit_message(
        chain, owner=upto.payer, spender=PERMIT2_ADDRESS, value=upto.ceiling, nonce=0, deadline=upto.deadline
    )
    permit_signature = sign_message(payer_key, message)
    permit2612 = (upto.ceiling, upto.deadline, permit_signature[:32], permit_signature[32:64], permit_signature[64])
    mismatched = (upto.ceiling - 1, *permit2612[1:])
    assert await call_error(
        chain.rpc, upto.facilitator, UPTO_PERMIT2_PROXY_ADDRESS, upto.calldata(10, permit2612=mismatched)
    ) == error_selector("Permit2612AmountMismatch()")

    data = upto.calldata(400_000, permit2612=permit2612)
    await transact(chain.rpc, facilitator_key, UPTO_PERMIT2_PROXY_ADDRESS, data, gas=300_000)
    assert await balance_of(chain.rpc, chain.usdc, upto.payee) == 400_000
    assert await allowance(chain.rpc, chain.usdc, upto.payer, PERMIT2_ADDRESS) == 1_100_000


def _error_string(reason: str) -> str:
    from eth_abi.abi import encode as abi_encode

    return abi_encode(["string"], [reason]).hex()


async def test_the_exact_proxy_settles_the_permitted_amount_for_any_sender(
    chain: ChainUnderTest, facilitator_key: bytes
) -> None:
    payer_key = await _approved_payer(chain)
    payee = _address(new_key())
    nonce, deadline = _nonce(), await chain_now(chain) + 600
    message = witness_permit_message(
        chain.chain_id,
        token=chain.usdc,
        amount=250_000,
        spender=EXACT_PERMIT2_PROXY_ADDRESS,
        nonce=nonce,
        deadline=deadline,
        witness={"to": payee, "validAfter": 0},
        witness_fields=EXACT_WITNESS_FIELDS,
    )
    fields: dict[str, Any] = {
        "token": chain.usdc,
        "amount": 250_000,
        "nonce": nonce,
        "deadline": deadline,
        "owner": _address(payer_key),
        "to": payee,
        "valid_after": 0,
        "signature": sign_message(payer_key, message),
    }
    other = await funded_key(chain)
    assert await call_error(
        chain.rpc, _address(other), EXACT_PERMIT2_PROXY_ADDRESS, exact_settle_calldata(**{**fields, "amount": 250_001})
    ) == error_selector("InvalidSigner()")
    await transact(chain.rpc, other, EXACT_PERMIT2_PROXY_ADDRESS, exact_settle_calldata(**fields), gas=200_000)
    assert await balance_of(chain.rpc, chain.usdc, payee) == 250_000


async def test_a_spender_pulls_with_a_plain_permit_transfer(chain: ChainUnderTest) -> None:
    """permitTransferFrom without a witness: the signed spender is whoever calls Permit2."""
    from eth_abi.abi import encode as abi_encode

    payer_key = await _approved_payer(chain)
    spender_key = await funded_key(chain)
    payee = _address(new_key())
    nonce, deadline = _nonce(), await chain_now(chain) + 600
    message = permit_transfer_message(
        chain.chain_id, token=chain.usdc, amount=90_000, spender=_address(spender_key), nonce=nonce, deadline=deadline
    )
    selector = keccak256(b"permitTransferFrom(((address,uint256),uint256,uint256),(address,uint256),address,bytes)")[:4]
    data = selector + abi_encode(
        ["((address,uint256),uint256,uint256)", "(address,uint256)", "address", "bytes"],
        [
            ((chain.usdc, 90_000), nonce, deadline),
            (payee, 60_000),
            _address(payer_key),
            sign_message(payer_key, message),
        ],
    )
    # Another caller is not the signed spender: the hash differs, so the signer does not match.
    other = _address(await funded_key(chain))  # the dev chain charges eth_call's gas to the sender
    assert await call_error(chain.rpc, other, PERMIT2_ADDRESS, data) == error_selector("InvalidSigner()")
    await transact(chain.rpc, spender_key, PERMIT2_ADDRESS, data, gas=150_000)
    assert await balance_of(chain.rpc, chain.usdc, payee) == 60_000


async def test_the_foundation_sdk_upto_client_signature_settles_on_our_contracts(
    chain: ChainUnderTest, facilitator_key: bytes
) -> None:
    """The strongest interop check: the x402 Foundation's Python SDK (``x402`` 2.25.0) builds and
    signs the upto payload for the canonical Permit2 and proxy; it settles here unchanged."""
    from x402.mechanisms.evm.upto.client import UptoEvmScheme
    from x402.schemas import PaymentRequirements

    payer_key = await _approved_payer(chain)
    payee = _address(new_key())
    requirements = PaymentRequirements(
        scheme="upto",
        network=f"eip155:{chain.chain_id}",
        asset=chain.usdc,
        amount="800000",
        pay_to=payee,
        max_timeout_seconds=600,
        extra={"name": "USD Coin", "version": "2", "facilitatorAddress": _address(facilitator_key)},
    )
    payload = UptoEvmScheme(Account.from_key(payer_key)).create_payment_payload(requirements)
    auth = payload["permit2Authorization"]
    assert auth["spender"] == UPTO_PERMIT2_PROXY_ADDRESS
    data = upto_settle_calldata(
        token=auth["permitted"]["token"],
        ceiling=int(auth["permitted"]["amount"]),
        nonce=int(auth["nonce"]),
        deadline=int(auth["deadline"]),
        amount=654_321,
        owner=auth["from"],
        to=auth["witness"]["to"],
        facilitator=auth["witness"]["facilitator"],
        valid_after=int(auth["witness"]["validAfter"]),
        signature=bytes.fromhex(payload["signature"][2:]),
    )
    await transact(chain.rpc, facilitator_key, UPTO_PERMIT2_PROXY_ADDRESS, data, gas=200_000)
    assert await balance_of(chain.rpc, chain.usdc, payee) == 654_321


class _ReadingSigner:
    """The SDK's ``ClientEvmSignerWithReadContract`` over an eth-account key, answering its two reads
    (the Permit2 allowance and the permit nonce) with values read from the chain beforehand."""

    def __init__(self, key: bytes, reads: dict[str, int]) -> None:
        from x402.mechanisms.evm.signers import EthAccountSigner

        self._signer = EthAccountSigner(Account.from_key(key))
        self._reads = reads

    @property
    def address(self) -> str:
        return str(self._signer.address)

    def sign_typed_data(self, domain: Any, types: Any, primary_type: str, message: dict[str, Any]) -> bytes:
        return bytes(self._signer.sign_typed_data(domain, types, primary_type, message))

    def read_contract(self, address: str, abi: list[dict[str, Any]], function_name: str, *args: Any) -> Any:
        return self._reads[function_name]


async def test_the_foundation_sdk_gasless_first_use_settles_with_its_eip2612_permit(
    chain: ChainUnderTest, facilitator_key: bytes
) -> None:
    """The SDK's upto client with the eip2612GasSponsoring extension, for a payer with no Permit2
    allowance and no gas: its EIP-2612 permit for Permit2 and its upto permit settle together."""
    from x402.extensions.eip2612_gas_sponsoring import EIP2612_GAS_SPONSORING_KEY
    from x402.mechanisms.evm.upto.client import UptoEvmScheme
    from x402.schemas import PaymentRequirements

    payer_key = await funded_key(chain, gas_wei=0, usdc=3_000_000)
    payer = _address(payer_key)
    reads = {
        "allowance": await allowance(chain.rpc, chain.usdc, payer, PERMIT2_ADDRESS),
        "nonces": await permit_nonce(chain.rpc, chain.usdc, payer),
    }
    assert reads == {"allowance": 0, "nonces": 0}
    payee = _address(new_key())
    requirements = PaymentRequirements(
        scheme="upto",
        network=f"eip155:{chain.chain_id}",
        asset=chain.usdc,
        amount="2000000",
        pay_to=payee,
        max_timeout_seconds=600,
        extra={"name": "USD Coin", "version": "2", "facilitatorAddress": _address(facilitator_key)},
    )
    scheme = UptoEvmScheme(_ReadingSigner(payer_key, reads))  # type: ignore[arg-type]
    payload = scheme.create_payment_payload(requirements, extensions={EIP2612_GAS_SPONSORING_KEY: {}})
    info = payload["__extensions"][EIP2612_GAS_SPONSORING_KEY]["info"]
    assert info["spender"] == PERMIT2_ADDRESS
    permit_signature = bytes.fromhex(info["signature"][2:])
    auth = payload["permit2Authorization"]
    data = upto_settle_calldata(
        token=auth["permitted"]["token"],
        ceiling=int(auth["permitted"]["amount"]),
        nonce=int(auth["nonce"]),
        deadline=int(auth["deadline"]),
        amount=1_234_567,
        owner=auth["from"],
        to=auth["witness"]["to"],
        facilitator=auth["witness"]["facilitator"],
        valid_after=int(auth["witness"]["validAfter"]),
        signature=bytes.fromhex(payload["signature"][2:]),
        permit2612=(
            int(info["amount"]),
            int(info["deadline"]),
            permit_signature[:32],
            permit_signature[32:64],
            permit_signature[64],
        ),
    )
    await transact(chain.rpc, facilitator_key, UPTO_PERMIT2_PROXY_ADDRESS, data, gas=300_000)
    assert await balance_of(chain.rpc, chain.usdc, payee) == 1_234_567
    assert await permit_nonce(chain.rpc, chain.usdc, payer) == 1


async def test_the_foundation_sdk_exact_permit2_signature_settles_on_our_exact_proxy(
    chain: ChainUnderTest, facilitator_key: bytes
) -> None:
    """The SDK's exact client with ``assetTransferMethod: "permit2"`` signs for the canonical exact
    proxy; it settles here unchanged, for exactly the signed amount."""
    from x402.mechanisms.evm.exact.client import ExactEvmScheme
    from x402.schemas import PaymentRequirements

    payer_key = await _approved_payer(chain)
    payee = _address(new_key())
    requirements = PaymentRequirements(
        scheme="exact",
        network=f"eip155:{chain.chain_id}",
        asset=chain.usdc,
        amount="310000",
        pay_to=payee,
        max_timeout_seconds=600,
        extra={"name": "USD Coin", "version": "2", "assetTransferMethod": "permit2"},
    )
    payload = ExactEvmScheme(Account.from_key(payer_key)).create_payment_payload(requirements)
    auth = payload["permit2Authorization"]
    assert auth["spender"] == EXACT_PERMIT2_PROXY_ADDRESS
    data = exact_settle_calldata(
        token=auth["permitted"]["token"],
        amount=int(auth["permitted"]["amount"]),
        nonce=int(auth["nonce"]),
        deadline=int(auth["deadline"]),
        owner=auth["from"],
        to=auth["witness"]["to"],
        valid_after=int(auth["witness"]["validAfter"]),
        signature=bytes.fromhex(payload["signature"][2:]),
    )
    await transact(chain.rpc, facilitator_key, EXACT_PERMIT2_PROXY_ADDRESS, data, gas=200_000)
    assert await balance_of(chain.rpc, chain.usdc, payee) == 310_000
