"""Channel (``batch-settlement``) sellers and agents for the tests: an endpoint taking payment
channels, a Starlette app selling through it, the x402 Foundation SDK's batch-settlement agent, and
what a payer signs by hand (deposits, vouchers) for the refusal tests."""

from __future__ import annotations

import os
from typing import Any

import anyio
import httpx
from eth_account import Account
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.harness import Deployment, PlatformHarness
from x402mw.adapters.starlette import PaymentMiddleware, paid
from x402mw.evm.batch_settlement import (
    ERC3009_DEPOSIT_COLLECTOR_ADDRESS,
    ZERO_ADDRESS,
    ChannelConfig,
    ChannelDomain,
    channel_id,
    erc3009_deposit_nonce,
    voucher_digest,
)
from x402mw.evm.eip712 import sign_digest


def channel_deployment(
    harness: PlatformHarness,
    *,
    price: int = 1_000,
    metered: bool = False,
    fund: str = "100",
    only: bool = False,
    min_deposit: int | None = None,
) -> Deployment:
    """A merchant whose endpoint takes payment channels (beside ``exact``, or ``upto`` when
    ``metered``), ``price`` atomic units a request (a ceiling when metered), and a funded agent."""
    deployment = harness.deploy(fund=fund)
    channel: dict[str, Any] = {"withdrawDelaySeconds": 900, "only": only}
    if min_deposit is not None:
        channel["minDepositMinor"] = str(min_deposit)
    pricing: dict[str, Any] = (
        {"pricingMode": "metered", "maxAmountMinor": str(price)} if metered else {"amountMinor": str(price)}
    )
    with deployment.api() as api:
        reply = api.post(
            "/agent/endpoints",
            json={
                "name": "Channel",
                "resourceUrl": "http://testserver/work",
                "chainId": harness.chain.chain_id,
                "currency": "USDC",
                "payoutAddress": deployment.payout,
                "channel": channel,
                **pricing,
            },
        )
        assert reply.status_code == 201, reply.text
    deployment.endpoint = reply.json()["endpoint"]
    return deployment


def channel_app(api_key: str, platform_url: str, endpoint_id: str) -> Starlette:
    """``GET /work`` (``use=N``: a metered request charges N; ``fail=1``: the handler answers 500;
    ``slow=1``: it takes 0.2 s)."""

    @paid(endpoint_id)
    async def work(request: Request) -> JSONResponse:
        payment = request.state.x402
        if request.query_params.get("slow"):
            await anyio.sleep(0.2)  # a handler that takes a while: requests on one channel overlap
        use = request.query_params.get("use")
        if use is not None:
            payment.charge(int(use))
        if request.query_params.get("fail"):
            return JSONResponse({"error": "the handler failed"}, status_code=500)  # not charged
        return JSONResponse({"ok": True})

    return Starlette(
        routes=[Route("/work", work)],
        middleware=[Middleware(PaymentMiddleware, api_key=api_key, platform_url=platform_url)],
    )


class ChannelReadingSigner:
    """The SDK's ``ClientEvmSignerWithReadContract`` over an eth-account key, reading a channel's
    ``channels(channelId)`` from the platform's chain (what its client recovers its state from)."""

    def __init__(self, harness: PlatformHarness, key: bytes) -> None:
        from x402.mechanisms.evm.signers import EthAccountSigner

        self._signer = EthAccountSigner(Account.from_key(key))
        self._harness = harness

    @property
    def address(self) -> str:
        return str(self._signer.address)

    def sign_typed_data(self, *args: Any, **kwargs: Any) -> bytes:
        return bytes(self._signer.sign_typed_data(*args, **kwargs))

    def read_contract(self, address: str, abi: Any, function_name: str, *args: Any) -> Any:
        from x402mw.platform.chain.channels import read_channel

        assert function_name == "channels", function_name
        channel = bytes.fromhex(str(args[0]).removeprefix("0x")) if isinstance(args[0], str) else bytes(args[0])
        state = self._harness.server.call(lambda _p: read_channel(self._harness.chain.rpc, channel))
        return (state.balance, state.total_claimed)


def sdk_channel_agent(
    harness: PlatformHarness, key: bytes, inner: httpx.AsyncBaseTransport, *, reads: bool = False, **options: Any
) -> tuple[httpx.AsyncClient, Any]:
    """An httpx client paying with the Foundation SDK's batch-settlement scheme; and the scheme.
    ``reads``: its signer reads the chain (a client recovering its channel's state)."""
    from x402 import x402Client
    from x402.http.clients.httpx import x402AsyncTransport
    from x402.mechanisms.evm.batch_settlement.client import BatchSettlementEvmScheme
    from x402.mechanisms.evm.batch_settlement.client.config import BatchSettlementEvmSchemeOptions

    signer: Any = ChannelReadingSigner(harness, key) if reads else Account.from_key(key)
    options.setdefault("salt", "0x" + os.urandom(32).hex())
    scheme = BatchSettlementEvmScheme(signer, BatchSettlementEvmSchemeOptions(**options))
    client = x402Client()
    client.register("eip155:*", scheme)
    client.set_spend_controls(
        {"allowed_assets": [{"network": harness.network, "asset": harness.usdc, "max_amount_per_payment": "100000"}]}
    )
    transport = x402AsyncTransport(client, inner)
    return httpx.AsyncClient(transport=transport, base_url="http://testserver", timeout=60), scheme


class HandPayer:
    """A payer signing channel payloads by hand, for ``offer`` (a 402's batch-settlement entry)."""

    def __init__(self, key: bytes, offer: dict[str, Any], chain_id: int, *, salt: bytes | None = None) -> None:
        self.key = key
        self.offer = offer
        self.domain = ChannelDomain(chain_id)
        self.config = ChannelConfig(
            str(Account.from_key(key).address),
            ZERO_ADDRESS,
            offer["payTo"],
            offer["extra"]["receiverAuthorizer"],
            offer["asset"],
            int(offer["extra"]["withdrawDelay"]),
            salt or os.urandom(32),
        )

    @property
    def channel(self) -> bytes:
        return channel_id(self.domain, self.config)

    def config_wire(self) -> dict[str, Any]:
        c = self.config
        return {
            "payer": c.payer,
            "payerAuthorizer": c.payer_authorizer,
            "receiver": c.receiver,
            "receiverAuthorizer": c.receiver_authorizer,
            "token": c.token,
            "withdrawDelay": c.withdraw_delay,
            "salt": "0x" + c.salt.hex(),
        }

    def voucher(self, ceiling: int, *, key: bytes | None = None, channel: bytes | None = None) -> dict[str, Any]:
        target = channel or self.channel
        signature = sign_digest(key or self.key, voucher_digest(self.domain, target, ceiling))
        return {
            "channelId": "0x" + target.hex(),
            "maxClaimableAmount": str(ceiling),
            "signature": "0x" + signature.hex(),
        }

    def deposit(self, amount: int, token_domain: Any, valid_before: int, *, salt: int | None = None) -> dict[str, Any]:
        """An EIP-3009 deposit authorization of ``amount`` into the channel."""
        from tests.chain_fixtures import RECEIVE, authorization_message

        salt = salt if salt is not None else int.from_bytes(os.urandom(32), "big")
        message = authorization_message(
            self.config.payer,
            token_domain,
            to=ERC3009_DEPOSIT_COLLECTOR_ADDRESS,
            value=amount,
            valid_after=0,
            valid_before=valid_before,
            nonce=erc3009_deposit_nonce(self.channel, salt),
            primary_type=RECEIVE,
        )
        signature = bytes(Account.sign_typed_data(self.key, full_message=message).signature)
        return {
            "amount": str(amount),
            "authorization": {
                "erc3009Authorization": {
                    "validAfter": "0",
                    "validBefore": str(valid_before),
                    "salt": "0x" + salt.to_bytes(32, "big").hex(),
                    "signature": "0x" + signature.hex(),
                }
            },
        }

    def payload(self, kind: str, voucher: dict[str, Any], **more: Any) -> dict[str, Any]:
        return {
            "x402Version": 2,
            "accepted": self.offer,
            "payload": {"type": kind, "channelConfig": self.config_wire(), "voucher": voucher, **more},
        }


async def channel_row(platform: Any, channel: bytes) -> Any:
    """The platform's record of ``channel`` (``payment_channels``)."""
    from x402mw.platform.services.channels import store

    return await store.load(platform.engine, "0x" + channel.hex())


async def open_channel(harness: PlatformHarness, client: httpx.AsyncClient, key: bytes, path: str) -> HandPayer:
    """Open a channel on the seller ``client`` serves at ``path`` (its 402 offers channels) with a
    deposit of five times its price and a first voucher for its price, paid by ``key``: the payer."""
    import base64
    import json

    from x402mw.protocol.codec import encode_header

    unpaid = await client.get(path)
    required = json.loads(base64.b64decode(unpaid.headers["PAYMENT-REQUIRED"]))
    (offer,) = [o for o in required["accepts"] if o["scheme"] == "batch-settlement"]
    payer = HandPayer(key, offer, harness.chain.chain_id)
    domain = {"name": offer["extra"]["name"], "version": "2", "chainId": harness.chain.chain_id}
    domain["verifyingContract"] = offer["asset"]
    deposit = payer.deposit(5 * int(offer["amount"]), domain, harness.head_time() + 3600)
    payload = payer.payload("deposit", payer.voucher(int(offer["amount"])), deposit=deposit)
    paid = await client.get(path, headers={"PAYMENT-SIGNATURE": encode_header(payload)})
    assert paid.status_code == 200, paid.text
    return payer
