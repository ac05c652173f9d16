"""Metered (``upto``) sellers and agents for the tests: a metered agent endpoint, a Starlette app
charging what the request asks it to, and the x402 Foundation SDK's upto agent, whose signer reads
the chain through the platform (its Permit2 allowance and EIP-2612 nonce)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from eth_abi.abi import encode as abi_encode
from eth_account import Account
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.harness import Deployment, PlatformHarness
from x402mw.adapters.starlette import PaymentMiddleware, paid
from x402mw.evm.keccak import keccak256
from x402mw.platform.chain.admin import transact
from x402mw.platform.chain.token import allowance, permit_nonce
from x402mw.protocol.networks import PERMIT2_ADDRESS


def metered_deployment(
    harness: PlatformHarness,
    *,
    ceiling: int = 50_000,
    fund: str = "100",
    resource_url: str = "http://testserver/generate",
) -> Deployment:
    """A merchant with a metered endpoint (``ceiling`` atomic units a request at most) and an
    agent holding ``fund`` USDC and no gas."""
    deployment = harness.deploy(fund=fund)
    with deployment.api() as api:
        reply = api.post(
            "/agent/endpoints",
            json={
                "name": "Generate",
                "resourceUrl": resource_url,
                "chainId": harness.chain.chain_id,
                "currency": "USDC",
                "payoutAddress": deployment.payout,
                "pricingMode": "metered",
                "maxAmountMinor": str(ceiling),
            },
        )
        assert reply.status_code == 201, reply.text
    deployment.endpoint = reply.json()["endpoint"]
    return deployment


def metered_app(
    api_key: str,
    platform_url: str,
    endpoint_id: str,
    *,
    before: Callable[[Request], Awaitable[None]] | None = None,
    **options: Any,
) -> Starlette:
    """``GET /generate?use=N`` charges N atomic units (``fail=1``: then the handler raises);
    ``before`` is awaited in the handler first."""

    @paid(endpoint_id)
    async def generate(request: Request) -> JSONResponse:
        payment = request.state.x402
        if before is not None:
            await before(request)
        total = payment.charge(int(request.query_params.get("use", "0")))
        if request.query_params.get("fail"):
            raise RuntimeError("the handler failed")
        return JSONResponse({"charged": total, "ceiling": payment.ceiling})

    return Starlette(
        routes=[Route("/generate", generate)],
        middleware=[Middleware(PaymentMiddleware, api_key=api_key, platform_url=platform_url, **options)],
    )


class ChainReadingSigner:
    """The SDK's ``ClientEvmSignerWithReadContract`` over an eth-account key, reading the Permit2
    allowance and the EIP-2612 nonce from the platform's chain."""

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
        rpc = self._harness.chain.rpc
        if function_name == "allowance":
            return self._harness.server.call(lambda _p: allowance(rpc, address, args[0], args[1]))
        if function_name == "nonces":
            return self._harness.server.call(lambda _p: permit_nonce(rpc, address, args[0]))
        raise AssertionError(f"unexpected read {function_name}")


def sdk_upto_agent(harness: PlatformHarness, key: bytes, inner: httpx.AsyncBaseTransport) -> httpx.AsyncClient:
    """An httpx client paying with the Foundation SDK's upto scheme (EIP-2612 permit when needed)."""
    from x402 import x402Client
    from x402.http.clients.httpx import x402AsyncTransport
    from x402.mechanisms.evm.upto import UptoEvmScheme

    client = x402Client()
    client.register("eip155:*", UptoEvmScheme(ChainReadingSigner(harness, key)))  # type: ignore[arg-type]
    client.set_spend_controls(
        {"allowed_assets": [{"network": harness.network, "asset": harness.usdc, "max_amount_per_payment": "100000"}]}
    )
    return httpx.AsyncClient(transport=x402AsyncTransport(client, inner), base_url="http://testserver", timeout=60)


def approve_permit2(harness: PlatformHarness, key: bytes) -> None:
    """Give ``key`` some gas (from the relayer) and have it approve Permit2 for all its USDC."""
    rpc, relayer = harness.chain.rpc, harness.chain.relayer
    owner = str(Account.from_key(key).address)

    async def approve(_platform: Any) -> None:
        sent = await relayer.send(owner, b"", gas=21_000, value=10**17)
        await relayer.wait_for_receipt(sent)
        data = keccak256(b"approve(address,uint256)")[:4] + abi_encode(
            ["address", "uint256"], [PERMIT2_ADDRESS, 2**256 - 1]
        )
        await transact(rpc, key, harness.usdc, data, gas=80_000)

    harness.server.call(approve)
