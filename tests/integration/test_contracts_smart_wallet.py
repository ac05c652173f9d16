"""Smart-account payers on the dev chain and on anvil: our EIP-1271 wallet and its CREATE2 factory,
the token's bytes-signature overloads asking the wallet, the deployless ERC-6492 validator, and the
wallets and factory that misbehave."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import pytest
from eth_abi.abi import decode as abi_decode
from eth_abi.abi import encode as abi_encode
from eth_account import Account

from tests.chain_fixtures import (
    RECEIVE,
    TRANSFER,
    ChainUnderTest,
    anvil_node,
    anyio_backend,
    authorization_message,
    cancel_message,
    chain,
    new_key,
)
from tests.contract_helpers import (
    UPTO_WITNESS_FIELDS,
    call_error,
    chain_now,
    funded_key,
    permit_message,
    sign_message,
    typed_digest,
    witness_permit_message,
)
from x402mw.evm.keccak import keccak256
from x402mw.platform.chain.admin import transact
from x402mw.platform.chain.contracts import (
    deploy_contract,
    erc6492_is_valid,
    erc6492_wrap,
    smart_wallet_address,
    upto_settle_calldata,
    wallet_deploy_calldata,
    wallet_execute_calldata,
)
from x402mw.platform.chain.rpc import RpcError
from x402mw.platform.chain.token import (
    allowance,
    authorization_state,
    balance_of,
    encode_transfer_with_authorization_bytes,
    transfer_calldata,
)
from x402mw.platform.chain.transactions import RevertError
from x402mw.protocol.networks import PERMIT2_ADDRESS, UPTO_PERMIT2_PROXY_ADDRESS

__all__ = ["anvil_node", "anyio_backend", "chain"]

pytestmark = pytest.mark.anyio

_ERROR = "0x08c379a0"
_DEPLOY_GAS = 500_000


def _address(key: bytes) -> str:
    return str(Account.from_key(key).address)


def _reason(text: str) -> str:
    return _ERROR + abi_encode(["string"], [text]).hex()


@dataclass
class Contracts:
    factory: str
    bad_factory: str
    reverting_wallet: str
    burning_wallet: str
    facilitator_key: bytes

    @property
    def facilitator(self) -> str:
        return _address(self.facilitator_key)


@pytest.fixture(scope="module")
async def contracts(chain: ChainUnderTest) -> Contracts:
    key = chain.minter_key
    return Contracts(
        factory=await deploy_contract(chain.rpc, key, "X402SmartWalletFactory"),
        bad_factory=await deploy_contract(chain.rpc, key, "X402BadWalletFactory"),
        reverting_wallet=await deploy_contract(chain.rpc, key, "X402RevertingWallet"),
        burning_wallet=await deploy_contract(chain.rpc, key, "X402GasBurningWallet"),
        facilitator_key=await funded_key(chain, gas_wei=10**18),
    )


@dataclass
class Authorization:
    """An EIP-3009 TransferWithAuthorization from ``payer`` (a wallet or a key's address)."""

    chain: ChainUnderTest
    payer: str
    to: str
    value: int
    valid_after: int
    valid_before: int
    nonce: bytes

    def message(self, primary_type: str = TRANSFER) -> dict[str, Any]:
        return authorization_message(
            self.payer,
            self.chain.domain(),
            to=self.to,
            value=self.value,
            valid_after=self.valid_after,
            valid_before=self.valid_before,
            nonce=self.nonce,
            primary_type=primary_type,
        )

    def digest(self) -> bytes:
        return typed_digest(self.message())

    def calldata(self, signature: bytes) -> bytes:
        return encode_transfer_with_authorization_bytes(
            from_=self.payer,
            to=self.to,
            value=self.value,
            valid_after=self.valid_after,
            valid_before=self.valid_before,
            nonce=self.nonce,
            signature=signature,
        )


async def _authorization(chain: ChainUnderTest, payer: str, value: int = 250_000) -> Authorization:
    now = await chain_now(chain)
    return Authorization(chain, payer, _address(new_key()), value, 0, now + 600, os.urandom(32))


async def _wallet(chain: ChainUnderTest, contracts: Contracts, *, usdc: int = 0) -> tuple[bytes, str]:
    """A deployed wallet of a new owner key (that has no gas), holding ``usdc``."""
    owner_key = new_key()
    salt = os.urandom(32)
    await transact(
        chain.rpc,
        contracts.facilitator_key,
        contracts.factory,
        wallet_deploy_calldata(_address(owner_key), salt),
        gas=_DEPLOY_GAS,
    )
    wallet = smart_wallet_address(contracts.factory, _address(owner_key), salt)
    if usdc:
        await chain.mint(wallet, usdc)
    return owner_key, wallet


async def test_the_factory_deploys_a_wallet_at_the_address_known_beforehand(
    chain: ChainUnderTest, contracts: Contracts
) -> None:
    owner = _address(new_key())
    salt = os.urandom(32)
    predicted = smart_wallet_address(contracts.factory, owner, salt)
    address_of = keccak256(b"addressOf(address,bytes32)")[:4] + abi_encode(["address", "bytes32"], [owner, salt])
    answer = await chain.rpc.request("eth_call", [{"to": contracts.factory, "data": "0x" + address_of.hex()}, "latest"])
    assert abi_decode(["address"], bytes.fromhex(answer[2:]))[0].lower() == predicted.lower()
    assert await chain.rpc.request("eth_getCode", [predicted, "latest"]) in ("0x", "0x0")
    for _ in range(2):  # the second deploy finds it there and does nothing
        await transact(
            chain.rpc,
            contracts.facilitator_key,
            contracts.factory,
            wallet_deploy_calldata(owner, salt),
            gas=_DEPLOY_GAS,
        )
        owner_call = "0x" + keccak256(b"owner()")[:4].hex()
        answer = await chain.rpc.request("eth_call", [{"to": predicted, "data": owner_call}, "latest"])
        assert abi_decode(["address"], bytes.fromhex(answer[2:]))[0].lower() == owner.lower()


async def test_a_deployed_wallet_pays_by_transfer_with_authorization_bytes(
    chain: ChainUnderTest, contracts: Contracts
) -> None:
    owner_key, wallet = await _wallet(chain, contracts, usdc=1_000_000)
    auth = await _authorization(chain, wallet)
    signature = sign_message(owner_key, auth.message())  # the owner's key signs the token's EIP-712 digest
    receipt = await transact(chain.rpc, contracts.facilitator_key, chain.usdc, auth.calldata(signature), gas=200_000)
    assert receipt.status == 1
    assert await balance_of(chain.rpc, chain.usdc, auth.to) == 250_000
    assert await balance_of(chain.rpc, chain.usdc, wallet) == 750_000
    assert await authorization_state(chain.rpc, chain.usdc, wallet, auth.nonce)
    # The same signature again: the authorization is used.
    assert await call_error(chain.rpc, contracts.facilitator, chain.usdc, auth.calldata(signature)) == _reason(
        "authorization is used or canceled"
    )


async def test_a_signature_the_wallet_refuses_reverts(chain: ChainUnderTest, contracts: Contracts) -> None:
    owner_key, wallet = await _wallet(chain, contracts, usdc=1_000_000)
    auth = await _authorization(chain, wallet)
    refused = _reason("invalid signature")
    stranger = sign_message(new_key(), auth.message())
    assert await call_error(chain.rpc, contracts.facilitator, chain.usdc, auth.calldata(stranger)) == refused
    assert await call_error(chain.rpc, contracts.facilitator, chain.usdc, auth.calldata(b"\x01" * 3)) == refused
    # The (v, r, s) overload recovers a key: the owner's signature does not make it the wallet.
    good = sign_message(owner_key, auth.message())
    vrs = transfer_calldata(_eip3009(auth), good)
    assert await call_error(chain.rpc, contracts.facilitator, chain.usdc, vrs) == refused
    with pytest.raises(RevertError, match="invalid signature"):
        await transact(chain.rpc, contracts.facilitator_key, chain.usdc, auth.calldata(stranger), gas=200_000)
    assert await balance_of(chain.rpc, chain.usdc, wallet) == 1_000_000


def _eip3009(auth: Authorization) -> Any:
    from x402mw.evm.eip712 import TransferAuthorization

    return TransferAuthorization(auth.payer, auth.to, auth.value, auth.valid_after, auth.valid_before, auth.nonce)


@pytest.mark.parametrize("kind", ["reverting", "burning"])
async def test_a_wallet_whose_check_reverts_or_burns_all_gas_is_refused(
    chain: ChainUnderTest, contracts: Contracts, kind: str
) -> None:
    wallet = contracts.reverting_wallet if kind == "reverting" else contracts.burning_wallet
    await chain.mint(wallet, 500_000)
    auth = await _authorization(chain, wallet, 100_000)
    data = auth.calldata(b"\x02" * 65)
    # The token catches the failed isValidSignature and refuses with its own reason, within the 1/64 of
    # the gas the call leaves it.
    answer = await call_error(chain.rpc, contracts.facilitator, chain.usdc, data, gas=400_000)
    assert answer == _reason("invalid signature")
    assert await balance_of(chain.rpc, chain.usdc, wallet) == 500_000


async def test_a_wallet_permits_permit2_and_pays_upto_through_eip1271(
    chain: ChainUnderTest, contracts: Contracts
) -> None:
    """The wallet's owner key signs both the EIP-2612 permit (bytes overload) and the Permit2 witness
    permit; the token and Permit2 ask the wallet through EIP-1271."""
    owner_key, wallet = await _wallet(chain, contracts, usdc=900_000)
    deadline = await chain_now(chain) + 600
    permit = permit_message(chain, owner=wallet, spender=PERMIT2_ADDRESS, value=900_000, nonce=0, deadline=deadline)
    permit_bytes = keccak256(b"permit(address,address,uint256,uint256,bytes)")[:4] + abi_encode(
        ["address", "address", "uint256", "uint256", "bytes"],
        [wallet, PERMIT2_ADDRESS, 900_000, deadline, sign_message(owner_key, permit)],
    )
    await transact(chain.rpc, contracts.facilitator_key, chain.usdc, permit_bytes, gas=150_000)
    assert await allowance(chain.rpc, chain.usdc, wallet, PERMIT2_ADDRESS) == 900_000

    payee, nonce = _address(new_key()), int.from_bytes(os.urandom(32), "big")
    witness = {"to": payee, "facilitator": contracts.facilitator, "validAfter": 0}
    message = witness_permit_message(
        chain.chain_id,
        token=chain.usdc,
        amount=900_000,
        spender=UPTO_PERMIT2_PROXY_ADDRESS,
        nonce=nonce,
        deadline=deadline,
        witness=witness,
        witness_fields=UPTO_WITNESS_FIELDS,
    )

    def settle(signature: bytes) -> bytes:
        return upto_settle_calldata(
            token=chain.usdc,
            ceiling=900_000,
            nonce=nonce,
            deadline=deadline,
            amount=300_000,
            owner=wallet,
            to=payee,
            facilitator=contracts.facilitator,
            valid_after=0,
            signature=signature,
        )

    wrong = sign_message(new_key(), message)
    assert await call_error(chain.rpc, contracts.facilitator, UPTO_PERMIT2_PROXY_ADDRESS, settle(wrong)) == (
        "0x" + keccak256(b"InvalidContractSignature()")[:4].hex()
    )
    await transact(
        chain.rpc, contracts.facilitator_key, UPTO_PERMIT2_PROXY_ADDRESS, settle(sign_message(owner_key, message))
    )
    assert await balance_of(chain.rpc, chain.usdc, payee) == 300_000


async def test_the_owner_executes_calls_through_its_wallet(chain: ChainUnderTest, contracts: Contracts) -> None:
    owner_key, wallet = await _wallet(chain, contracts, usdc=50_000)
    await transact(chain.rpc, chain.minter_key, _address(owner_key), b"", gas=21_000, value=10**17)
    payee = _address(new_key())
    transfer = keccak256(b"transfer(address,uint256)")[:4] + abi_encode(["address", "uint256"], [payee, 20_000])
    await transact(chain.rpc, owner_key, wallet, wallet_execute_calldata(chain.usdc, 0, transfer), gas=150_000)
    assert await balance_of(chain.rpc, chain.usdc, payee) == 20_000
    stranger = await funded_key(chain)
    answer = await call_error(chain.rpc, _address(stranger), wallet, wallet_execute_calldata(chain.usdc, 0, transfer))
    assert answer == _reason("caller is not the owner")


# --- ERC-6492: counterfactual wallets, checked in one eth_call ---------------------------------


async def test_erc6492_accepts_a_counterfactual_wallets_wrapped_signature_without_deploying_it(
    chain: ChainUnderTest, contracts: Contracts
) -> None:
    owner_key, salt = new_key(), os.urandom(32)
    owner = _address(owner_key)
    wallet = smart_wallet_address(contracts.factory, owner, salt)
    auth = await _authorization(chain, wallet)
    inner = sign_message(owner_key, auth.message())
    wrapped = erc6492_wrap(contracts.factory, wallet_deploy_calldata(owner, salt), inner)
    assert await erc6492_is_valid(chain.rpc, wallet, auth.digest(), wrapped)
    assert await chain.rpc.request("eth_getCode", [wallet, "latest"]) in ("0x", "0x0")

    # A wrong signature, a factory that reverts, one that deploys elsewhere and one that deploys nothing.
    stranger = erc6492_wrap(
        contracts.factory, wallet_deploy_calldata(owner, salt), sign_message(new_key(), auth.message())
    )
    assert not await erc6492_is_valid(chain.rpc, wallet, auth.digest(), stranger)
    for function in ("fail", "deploy", "deployNothing"):
        call = keccak256(f"{function}(address,bytes32)".encode())[:4] + abi_encode(
            ["address", "bytes32"], [owner, salt]
        )
        assert not await erc6492_is_valid(
            chain.rpc, wallet, auth.digest(), erc6492_wrap(contracts.bad_factory, call, inner)
        )
    # Another wallet's deployment leaves this one without code.
    other = erc6492_wrap(contracts.factory, wallet_deploy_calldata(owner, os.urandom(32)), inner)
    assert not await erc6492_is_valid(chain.rpc, wallet, auth.digest(), other)
    # A digest of other terms.
    assert not await erc6492_is_valid(chain.rpc, wallet, keccak256(b"other terms"), wrapped)

    # Settling: deploy first (the wrapper's factory call), then the inner signature pays.
    await chain.mint(wallet, 400_000)
    await transact(
        chain.rpc, contracts.facilitator_key, contracts.factory, wallet_deploy_calldata(owner, salt), gas=_DEPLOY_GAS
    )
    assert await erc6492_is_valid(chain.rpc, wallet, auth.digest(), wrapped)  # deployed: the inner signature counts
    await transact(chain.rpc, contracts.facilitator_key, chain.usdc, auth.calldata(inner), gas=200_000)
    assert await balance_of(chain.rpc, chain.usdc, auth.to) == 250_000


async def test_erc6492_checks_keys_deployed_wallets_and_misbehaving_wallets(
    chain: ChainUnderTest, contracts: Contracts
) -> None:
    key = new_key()
    auth = await _authorization(chain, _address(key))
    assert await erc6492_is_valid(chain.rpc, _address(key), auth.digest(), sign_message(key, auth.message()))
    assert not await erc6492_is_valid(chain.rpc, _address(key), auth.digest(), sign_message(new_key(), auth.message()))
    assert not await erc6492_is_valid(chain.rpc, _address(key), auth.digest(), b"\x00" * 64)

    owner_key, wallet = await _wallet(chain, contracts)
    auth = await _authorization(chain, wallet)
    assert await erc6492_is_valid(chain.rpc, wallet, auth.digest(), sign_message(owner_key, auth.message()))
    assert not await erc6492_is_valid(chain.rpc, wallet, auth.digest(), sign_message(new_key(), auth.message()))
    for bad in (contracts.reverting_wallet, contracts.burning_wallet):
        assert not await erc6492_is_valid(chain.rpc, bad, auth.digest(), b"\x01" * 65, gas=500_000)

    # A wrapper that does not decode makes the call revert rather than answer.
    with pytest.raises(RpcError):
        await erc6492_is_valid(chain.rpc, wallet, auth.digest(), b"\x05" * 40 + bytes.fromhex("6492" * 16))


async def test_a_wallet_cancels_and_its_payee_receives_through_eip1271(
    chain: ChainUnderTest, contracts: Contracts
) -> None:
    """The other bytes-signature overloads: cancelAuthorization and receiveWithAuthorization."""
    owner_key, wallet = await _wallet(chain, contracts, usdc=600_000)
    cancelled = await _authorization(chain, wallet)
    cancellation = cancel_message(wallet, chain.domain(), cancelled.nonce)
    cancel = keccak256(b"cancelAuthorization(address,bytes32,bytes)")[:4]
    for signer, reason in ((new_key(), "invalid signature"), (owner_key, None)):
        data = cancel + abi_encode(
            ["address", "bytes32", "bytes"], [wallet, cancelled.nonce, sign_message(signer, cancellation)]
        )
        if reason is not None:
            assert await call_error(chain.rpc, contracts.facilitator, chain.usdc, data) == _reason(reason)
        else:
            await transact(chain.rpc, contracts.facilitator_key, chain.usdc, data)
    assert await authorization_state(chain.rpc, chain.usdc, wallet, cancelled.nonce)
    signature = sign_message(owner_key, cancelled.message())
    assert await call_error(chain.rpc, contracts.facilitator, chain.usdc, cancelled.calldata(signature)) == _reason(
        "authorization is used or canceled"
    )

    payee_key = await funded_key(chain)
    now = await chain_now(chain)
    received = Authorization(chain, wallet, _address(payee_key), 150_000, 0, now + 600, os.urandom(32))
    message = received.message(RECEIVE)
    types = ["address", "address", "uint256", "uint256", "uint256", "bytes32", "bytes"]
    receive = keccak256(f"receiveWithAuthorization({','.join(types)})".encode())[:4] + abi_encode(
        types,
        [wallet, received.to, 150_000, 0, now + 600, received.nonce, sign_message(owner_key, message)],
    )
    assert await call_error(chain.rpc, contracts.facilitator, chain.usdc, receive) == _reason(
        "caller must be the payee"
    )
    await transact(chain.rpc, payee_key, chain.usdc, receive, gas=200_000)
    assert await balance_of(chain.rpc, chain.usdc, received.to) == 150_000
