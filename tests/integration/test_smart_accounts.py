"""Smart-account payers end to end, on the dev chain and anvil (SQLite): an
``X402SmartWallet`` (EIP-1271), deployed or not yet (ERC-6492), pays a real seller app through
``X402Auth`` and httpx, and a hosted checkout order; the receipt names the wallet; the wallets and
factories that misbehave are refused with ``invalid_signature`` and nothing moves."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import pytest
from eth_abi.abi import encode as abi_encode
from eth_account import Account
from sqlalchemy import insert, select

from tests.harness import Deployment, PlatformHarness
from tests.sellers import asgi_transport, starlette_app
from x402mw.client import Wallet, X402Auth
from x402mw.evm.eip712 import TransferAuthorization, random_nonce, sign_transfer
from x402mw.evm.keccak import keccak256
from x402mw.evm.keys import address_of, new_private_key
from x402mw.evm.receipts import verify_receipt
from x402mw.platform.chain.contracts import (
    ERC6492_SUFFIX,
    creation_code,
    erc6492_wrap,
    smart_wallet_address,
    wallet_deploy_calldata,
)
from x402mw.platform.db import tables
from x402mw.platform.db.models import new_id
from x402mw.platform.services.settlement.recovery import TAKEOVER_AFTER
from x402mw.protocol import decode_payment_required, decode_settlement_response, reasons
from x402mw.protocol.models import ExactEvmPayload, PaymentPayload, PaymentRequirements, ResourceInfo

pytestmark = pytest.mark.anyio


class SmartAccount(Wallet):
    """An ``X402SmartWallet`` paying: its owner's key signs the token's EIP-712 digest with ``from``
    set to the wallet; with ``deployment`` (the factory and its call), the signature is wrapped for
    ERC-6492, as a wallet not deployed yet signs."""

    __slots__ = ("deployment", "owner_key", "wrapper")

    def __init__(
        self, owner_key: bytes, wallet: str, deployment: tuple[str, bytes] | None = None, wrapper: bytes | None = None
    ) -> None:
        super().__init__(owner_key)
        self.owner_key = owner_key
        self.address = wallet
        self.deployment = deployment
        self.wrapper = wrapper

    def sign_payment(
        self, requirements: PaymentRequirements, *, resource: ResourceInfo | None = None, now: int | None = None
    ) -> PaymentPayload:
        payload = super().sign_payment(requirements, resource=resource, now=now)
        signature = bytes.fromhex(payload.payload.signature[2:])
        if self.wrapper is not None:
            signature = self.wrapper
        elif self.deployment is not None:
            signature = erc6492_wrap(self.deployment[0], self.deployment[1], signature)
        body = ExactEvmPayload(signature="0x" + signature.hex(), authorization=payload.payload.authorization)
        return payload.model_copy(update={"payload": body})


@dataclass
class Contracts:
    factory: str
    bad_factory: str
    reverting_wallet: str
    burning_wallet: str


_CONTRACTS: dict[int, Contracts] = {}


def _contracts(harness: PlatformHarness) -> Contracts:
    """The wallet factory and the misbehaving contracts on ``harness``'s chain (deployed once, by
    the platform's relayer: a funded account on every chain the suite runs)."""
    found = _CONTRACTS.get(id(harness))
    if found is None:
        chain = harness.chain

        async def create(name: str) -> str:
            tx = await chain.relayer.send(None, creation_code(name), gas=3_000_000)
            receipt = await chain.wait_for(tx)
            mined = await chain.rpc.request("eth_getTransactionReceipt", [receipt.transaction_hash])
            return str(mined["contractAddress"])

        async def deploy(_platform: Any) -> Contracts:
            return Contracts(
                factory=await create("X402SmartWalletFactory"),
                bad_factory=await create("X402BadWalletFactory"),
                reverting_wallet=await create("X402RevertingWallet"),
                burning_wallet=await create("X402GasBurningWallet"),
            )

        found = _CONTRACTS[id(harness)] = harness.server.call(deploy)
    return found


def _send(harness: PlatformHarness, to: str, data: bytes) -> None:
    async def send(_platform: Any) -> None:
        tx = await harness.chain.relayer.send(to, data, gas=1_000_000)
        assert (await harness.chain.wait_for(tx)).status == 1

    harness.server.call(send)


def code_at(harness: PlatformHarness, address: str) -> str:
    return str(harness.server.call(lambda p: harness.chain.rpc.request("eth_getCode", [address, "latest"])))


def deployed_wallet(harness: PlatformHarness, api_key: str, *, fund: str = "1") -> SmartAccount:
    """A new owner's wallet, deployed (by the test's minter, not by any payment), holding ``fund`` USDC."""
    contracts = _contracts(harness)
    owner_key = new_private_key()
    salt = os.urandom(32)
    wallet = smart_wallet_address(contracts.factory, address_of(owner_key), salt)
    _send(harness, contracts.factory, wallet_deploy_calldata(address_of(owner_key), salt))
    assert code_at(harness, wallet) not in ("0x", "0x0")
    if fund:
        harness.fund(api_key, wallet, fund)
    return SmartAccount(owner_key, wallet)


def counterfactual_wallet(harness: PlatformHarness, api_key: str, *, fund: str = "1") -> SmartAccount:
    """A new owner's wallet that is not deployed yet (its address holds ``fund`` USDC): it signs
    with the ERC-6492 wrapper naming the factory call that deploys it."""
    contracts = _contracts(harness)
    owner_key = new_private_key()
    salt = os.urandom(32)
    wallet = smart_wallet_address(contracts.factory, address_of(owner_key), salt)
    if fund:
        harness.fund(api_key, wallet, fund)
    deployment = (contracts.factory, wallet_deploy_calldata(address_of(owner_key), salt))
    return SmartAccount(owner_key, wallet, deployment)


async def _pay(app: Any, auth: X402Auth, path: str = "/weather") -> httpx.Response:
    async with httpx.AsyncClient(
        transport=asgi_transport(app), base_url="http://testserver", auth=auth, timeout=60
    ) as client:
        return await client.get(path)


def _paid_ok(harness: PlatformHarness, response: httpx.Response, wallet: str) -> None:
    assert response.status_code == 200, response.text
    settlement = decode_settlement_response(response.headers["PAYMENT-RESPONSE"])
    assert settlement.success and settlement.payer is not None
    assert settlement.payer.lower() == wallet.lower()
    receipt = settlement.receipt or {}
    assert receipt["payer"].lower() == wallet.lower()
    assert verify_receipt(receipt, harness.platform.receipt_address)
    assert response.json()["payer"].lower() == wallet.lower()


async def test_a_deployed_smart_account_pays_a_route(any_chain_platform: PlatformHarness) -> None:
    harness = any_chain_platform
    deployment = await asyncio.to_thread(harness.deploy, fund="")
    wallet = await asyncio.to_thread(deployed_wallet, harness, deployment.api_key)
    app = starlette_app(deployment.api_key, harness.url, deployment.endpoint_id)
    auth = X402Auth(wallet, max_amount="0.05", receipt_signer=harness.platform.receipt_address)
    for _ in range(2):
        _paid_ok(harness, await _pay(app, auth), wallet.address)
    assert await asyncio.to_thread(harness.balance, deployment.payout) == 20_000
    assert await asyncio.to_thread(harness.balance, wallet.address) == 1_000_000 - 20_000
    assert [p.verified for p in auth.payments] == [True, True]


async def test_a_counterfactual_smart_account_is_deployed_by_its_first_payment(
    any_chain_platform: PlatformHarness,
) -> None:
    harness = any_chain_platform
    deployment = await asyncio.to_thread(harness.deploy, fund="")
    wallet = await asyncio.to_thread(counterfactual_wallet, harness, deployment.api_key)
    assert await asyncio.to_thread(code_at, harness, wallet.address) in ("0x", "0x0")
    app = starlette_app(deployment.api_key, harness.url, deployment.endpoint_id)
    auth = X402Auth(wallet, max_amount="0.05", receipt_signer=harness.platform.receipt_address)
    first = await _pay(app, auth)
    _paid_ok(harness, first, wallet.address)
    assert await asyncio.to_thread(code_at, harness, wallet.address) not in ("0x", "0x0")
    # the wallet keeps signing with the wrapper; deployed now, it is asked directly
    _paid_ok(harness, await _pay(app, auth), wallet.address)
    assert await asyncio.to_thread(harness.balance, deployment.payout) == 20_000
    assert await asyncio.to_thread(harness.balance, wallet.address) == 1_000_000 - 20_000
    # the first payment again (its PAYMENT-SIGNATURE as sent): its receipt, nothing charged twice
    sent = first.request.headers["PAYMENT-SIGNATURE"]
    async with httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver") as client:
        again = await client.get("/weather", headers={"PAYMENT-SIGNATURE": sent})
    assert again.status_code == 200, again.text
    assert again.headers["PAYMENT-RESPONSE"] == first.headers["PAYMENT-RESPONSE"]
    assert await asyncio.to_thread(harness.balance, deployment.payout) == 20_000


async def test_a_counterfactual_wallet_without_the_money_is_not_deployed(dev_platform: PlatformHarness) -> None:
    deployment = await asyncio.to_thread(dev_platform.deploy, fund="")
    wallet = await asyncio.to_thread(counterfactual_wallet, dev_platform, deployment.api_key, fund="")
    app = starlette_app(deployment.api_key, dev_platform.url, deployment.endpoint_id)
    response = await _pay(app, X402Auth(wallet, pending_retries=0))
    assert response.status_code == 402
    assert decode_payment_required(response.headers["PAYMENT-REQUIRED"]).error == reasons.INSUFFICIENT_FUNDS
    assert await asyncio.to_thread(code_at, dev_platform, wallet.address) in ("0x", "0x0")
    # funded later, the same wallet pays (and is deployed then)
    await asyncio.to_thread(dev_platform.fund, deployment.api_key, wallet.address, "1")
    _paid_ok(dev_platform, await _pay(app, X402Auth(wallet)), wallet.address)


def _bad_wallets(harness: PlatformHarness, deployment: Deployment) -> dict[str, SmartAccount]:
    contracts = _contracts(harness)
    good = deployed_wallet(harness, deployment.api_key)
    owner_key = new_private_key()
    salt = os.urandom(32)
    elsewhere = smart_wallet_address(contracts.factory, address_of(owner_key), salt)
    selector = keccak256(b"fail(address,bytes32)")[:4]
    failing = selector + abi_encode(["address", "bytes32"], [address_of(owner_key), salt])
    return {
        # signed by a key that does not own the wallet
        "wallet rejects": SmartAccount(new_private_key(), good.address),
        "isValidSignature reverts": SmartAccount(owner_key, contracts.reverting_wallet),
        "isValidSignature burns its gas": SmartAccount(owner_key, contracts.burning_wallet),
        "factory reverts": SmartAccount(owner_key, elsewhere, (contracts.bad_factory, failing)),
        # the bad factory's deploy puts the wallet at another address than the one that pays
        "factory deploys another address": SmartAccount(
            owner_key, elsewhere, (contracts.bad_factory, wallet_deploy_calldata(address_of(owner_key), salt))
        ),
        "wrapper does not decode": SmartAccount(owner_key, elsewhere, wrapper=b"\x01" * 40 + ERC6492_SUFFIX),
        "no code and no wrapper": SmartAccount(owner_key, elsewhere),
    }


async def test_smart_account_signatures_that_do_not_hold_are_refused_and_nothing_moves(
    dev_platform: PlatformHarness,
) -> None:
    deployment = await asyncio.to_thread(dev_platform.deploy, fund="")
    wallets = await asyncio.to_thread(_bad_wallets, dev_platform, deployment)
    app = starlette_app(deployment.api_key, dev_platform.url, deployment.endpoint_id)
    for case, wallet in wallets.items():
        response = await _pay(app, X402Auth(wallet, pending_retries=0))
        assert response.status_code == 402, (case, response.text)
        required = decode_payment_required(response.headers["PAYMENT-REQUIRED"])
        assert required.error == reasons.INVALID_SIGNATURE, (case, required.error)
        assert "PAYMENT-RESPONSE" in response.headers, case
        assert not decode_settlement_response(response.headers["PAYMENT-RESPONSE"]).success
    elsewhere = wallets["factory deploys another address"].address
    assert await asyncio.to_thread(code_at, dev_platform, elsewhere) in ("0x", "0x0")
    assert await asyncio.to_thread(dev_platform.balance, deployment.payout) == 0
    with deployment.api() as api:
        payments = api.get("/agent/payments").json()["data"]
    assert payments == []  # nothing was claimed: each was refused before the chain


async def test_the_facilitator_api_verifies_and_settles_a_smart_accounts_payment(
    dev_platform: PlatformHarness,
) -> None:
    deployment = await asyncio.to_thread(dev_platform.deploy, fund="")
    wallet = await asyncio.to_thread(counterfactual_wallet, dev_platform, deployment.api_key)
    app = starlette_app(deployment.api_key, dev_platform.url, deployment.endpoint_id)
    async with httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver") as client:
        offer = await client.get("/weather")
    required = decode_payment_required(offer.headers["PAYMENT-REQUIRED"])
    requirements = required.accepts[0]
    payload = wallet.sign_payment(requirements, resource=required.resource)
    body = {
        "x402Version": 2,
        "paymentPayload": payload.to_wire(),
        "paymentRequirements": requirements.to_wire(),
    }
    bad = SmartAccount(new_private_key(), wallet.address, wallet.deployment).sign_payment(requirements)
    with deployment.api() as api:
        verified = api.post("/x402/verify", json=body)
        refused = api.post("/x402/verify", json=body | {"paymentPayload": bad.to_wire()})
        settled = api.post("/x402/settle", json=body)
    assert verified.status_code == 200, verified.text
    assert verified.json()["isValid"] is True and verified.json()["payer"].lower() == wallet.address.lower()
    assert refused.json()["isValid"] is False and refused.json()["invalidReason"] == reasons.INVALID_SIGNATURE
    assert settled.status_code == 200, settled.text
    assert settled.json()["success"] is True and settled.json()["payer"].lower() == wallet.address.lower()
    assert await asyncio.to_thread(dev_platform.balance, deployment.payout) == 10_000


def _checkout(harness: PlatformHarness) -> httpx.Client:
    return httpx.Client(base_url=harness.url.removesuffix("/v1") + "/checkout/v1", timeout=60)


def _pay_order(
    harness: PlatformHarness, api_key: str, wallet: SmartAccount
) -> tuple[httpx.Response, dict[str, Any], str]:
    """A hosted checkout order paid with the wallet's signed authorization (what the page posts):
    the answer, the body posted and the order's id."""
    with httpx.Client(base_url=harness.url, headers={"Authorization": f"Bearer {api_key}"}, timeout=60) as api:
        created = api.post(
            "/payment-intents", json={"orderId": f"o-{os.urandom(8).hex()}", "amount": "0.25", "currency": "USDC"}
        )
    assert created.status_code == 201, created.text
    order = created.json()["paymentIntent"]
    with _checkout(harness) as checkout:
        attempt = checkout.post(
            f"/payment-intents/{order['id']}/attempts",
            json={"network": harness.network, "currency": "USDC", "method": "wallet"},
        )
        assert attempt.status_code == 200, attempt.text
        typed = attempt.json()["authorization"]
        message = {**typed["message"], "from": wallet.address}
        signature = bytes(
            Account.sign_typed_data(wallet.owner_key, full_message={**typed, "message": message}).signature
        )
        if wallet.deployment is not None:
            signature = erc6492_wrap(wallet.deployment[0], wallet.deployment[1], signature)
        body = {
            "network": harness.network,
            "currency": "USDC",
            "authorization": message,
            "signature": "0x" + signature.hex(),
        }
        reply = checkout.post(f"/payment-intents/{order['id']}/authorizations", json=body)
    return reply, body, str(order["id"])


@pytest.mark.parametrize("kind", ["deployed", "counterfactual"])
def test_a_smart_account_pays_a_hosted_checkout_order(any_chain_platform: PlatformHarness, kind: str) -> None:
    harness = any_chain_platform
    _, api_key, _ = harness.merchant()
    make = deployed_wallet if kind == "deployed" else counterfactual_wallet
    wallet = make(harness, api_key, fund="0.25")
    reply, body, order_id = _pay_order(harness, api_key, wallet)
    assert reply.status_code == 200, reply.text
    paid = reply.json()
    assert (paid["status"], paid["amountReceived"], paid["amountDue"]) == ("succeeded", "0.25", "0")
    assert harness.balance(wallet.address) == 0
    assert code_at(harness, wallet.address) not in ("0x", "0x0")
    with httpx.Client(base_url=harness.url, headers={"Authorization": f"Bearer {api_key}"}, timeout=60) as api:
        seen = api.get(f"/payment-intents/{order_id}").json()["paymentIntent"]
    assert (seen["status"], seen["payer"].lower()) == ("succeeded", wallet.address.lower())
    # the same authorization again: the order as it is, nothing moves twice
    with _checkout(harness) as checkout:
        again = checkout.post(f"/payment-intents/{order_id}/authorizations", json=body)
    assert again.status_code == 200, again.text
    assert (again.json()["status"], again.json()["txHash"]) == ("succeeded", paid["txHash"])


def test_a_checkout_authorization_the_wallet_rejects_is_refused(dev_platform: PlatformHarness) -> None:
    _, api_key, _ = dev_platform.merchant()
    wallet = deployed_wallet(dev_platform, api_key, fund="0.25")
    impostor = SmartAccount(new_private_key(), wallet.address)
    reply, _, _ = _pay_order(dev_platform, api_key, impostor)
    assert reply.status_code == 409, reply.text
    assert reply.json()["error"]["code"] == "authorization_signature_invalid"
    assert reply.json()["error"]["param"] == "signature"
    assert dev_platform.balance(wallet.address) == 250_000


@pytest.mark.parametrize("deployed_before", [False, True])
def test_recovery_deploys_a_counterfactual_account_its_stopped_process_left(
    dev_platform: PlatformHarness, deployed_before: bool
) -> None:
    # A process that claimed a counterfactual account's payment stopped before its transfer (before
    # or after the account's deployment): the payment is taken over, the account deployed if it is
    # not, and the authorization settled once.
    harness = dev_platform
    merchant_id, api_key, _ = harness.merchant()
    wallet = counterfactual_wallet(harness, api_key, fund="1")
    assert wallet.deployment is not None
    if deployed_before:
        _send(harness, wallet.deployment[0], wallet.deployment[1])
    pay_to = address_of(new_private_key())
    domain = harness.chain.domain(harness.usdc)
    assert domain is not None
    now = int(time.time())
    auth = TransferAuthorization(wallet.address, pay_to, 1000, 0, now + 600, random_nonce())
    signature = erc6492_wrap(*wallet.deployment, sign_transfer(wallet.owner_key, domain, auth))
    row = {
        "id": new_id(),
        "merchant_id": merchant_id,
        "endpoint_id": None,
        "challenge_id": None,
        "livemode": False,
        "chain_id": harness.chain.chain_id,
        "asset": harness.usdc,
        "currency": "USDC",
        "payer": wallet.address,
        "nonce": "0x" + auth.nonce.hex(),
        "pay_to": pay_to,
        "amount_minor": 1000,
        "payload_hash": random_nonce().hex(),
        "resource": "https://seller.example/weather",
        "release_policy": "included",
        "status": "claimed",
        "created_at": harness.platform.clock.now() - TAKEOVER_AFTER - timedelta(seconds=5),
        "signature": "0x" + signature.hex(),
        "valid_after": 0,
        "valid_before": auth.valid_before,
    }

    async def recover(platform: Any) -> dict[str, Any]:
        async with platform.engine.begin() as conn:
            await conn.execute(insert(tables.agent_payments), [row])
        for _ in range(3):  # sends it, then finds it used and releases it
            await platform.settlement.recovery.finish_left()
        async with platform.engine.connect() as conn:
            found = await conn.execute(select(tables.agent_payments).where(tables.agent_payments.c.id == row["id"]))
            return dict(found.mappings().one())

    after = harness.server.call(recover)
    assert after["status"] == "settled", after
    assert after["receipt"]["payer"].lower() == wallet.address.lower()
    assert code_at(harness, wallet.address) not in ("0x", "0x0")
    assert harness.balance(pay_to) == 1000
    assert harness.balance(wallet.address) == 1_000_000 - 1000
