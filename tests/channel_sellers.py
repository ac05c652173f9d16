"""A ``batch-settlement`` seller built with the x402 Foundation's Python SDK (``x402`` 2.25.0), for the
tests of our paying client: the SDK's resource server and batch-settlement server scheme (its own
receiver authorizer key) in a FastAPI app, the SDK's facilitator in the same process, sending its
transactions to the chain under test (the dev chain or anvil, our escrow at its canonical address)
through web3.py, and the SDK's channel manager for the seller's claim and settle.

``GET /weather`` costs ``price`` atomic USDC a request (``?charge=N`` charges N of it, through the
SDK's settlement overrides)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from eth_account import Account

from tests.chain_fixtures import ChainUnderTest


def _provider(chain: ChainUnderTest) -> Any:
    """A web3 provider over the chain under test: the dev chain's blocking calls in this thread, or
    anvil's HTTP endpoint."""
    from web3 import Web3
    from web3.providers.base import BaseProvider

    request_sync: Callable[[str, list[Any]], Any] | None = getattr(chain.rpc, "request_sync", None)
    if request_sync is None:
        url: str = chain.rpc.url  # type: ignore[attr-defined]
        return Web3.HTTPProvider(url)

    class DevChainProvider(BaseProvider):
        def make_request(self, method: Any, params: Any) -> Any:
            try:
                return {"jsonrpc": "2.0", "id": 1, "result": request_sync(str(method), list(params))}
            except Exception as exc:  # the RPC's error, as a node answers it
                return {"jsonrpc": "2.0", "id": 1, "error": {"code": -32000, "message": str(exc)}}

        def is_connected(self, show_traceback: bool = False) -> bool:
            return True

    return DevChainProvider()


def facilitator_signer(chain: ChainUnderTest, key: bytes) -> Any:
    """The SDK's ``FacilitatorWeb3Signer`` for ``key`` (which needs gas), on ``chain``. The chains
    under test have no Multicall3: its ``tryAggregate`` is done here, one ``eth_call`` a row."""
    from web3 import Web3
    from web3.exceptions import ContractLogicError
    from web3.middleware import ExtraDataToPOAMiddleware
    from x402.mechanisms.evm.constants import MULTICALL3_ADDRESS
    from x402.mechanisms.evm.signers import FacilitatorWeb3Signer

    class Signer(FacilitatorWeb3Signer):
        def read_contract(self, address: str, abi: Any, function_name: str, *args: Any) -> Any:
            if address.lower() != MULTICALL3_ADDRESS.lower() or function_name != "tryAggregate":
                return super().read_contract(address, abi, function_name, *args)
            rows = []
            for target, data in args[1]:
                try:
                    rows.append((True, bytes(self._w3.eth.call({"to": target, "data": data}))))
                except ContractLogicError as exc:
                    raw = exc.data if isinstance(exc.data, str) else ""
                    rows.append((False, bytes.fromhex(raw.removeprefix("0x"))))
            return rows

    signer = Signer("0x" + key.hex(), "http://127.0.0.1:1", confirmation_timeout_seconds=30)
    w3 = Web3(_provider(chain))
    w3.middleware_onion.inject(ExtraDataToPOAMiddleware, layer=0)
    signer._w3 = w3  # the SDK takes a URL; the dev chain has none
    return signer


@dataclass
class SdkChannelSeller:
    """The SDK seller's parts: ``app`` (FastAPI), ``scheme`` (its channel storage), ``facilitator``,
    and ``manager`` (claim, settle, refund)."""

    app: Any
    scheme: Any
    facilitator: Any
    manager: Any
    receiver: str
    authorizer: str
    network: str
    price: int
    option: Any

    async def claim_and_settle(self) -> dict[str, Any]:
        result: dict[str, Any] = await self.manager.claim_and_settle()
        return result

    async def channel(self, channel_id: str) -> Any:
        """The seller's record of the channel (``charged_cumulative_amount``, ...), or None."""
        found = self.scheme.get_storage().get(channel_id.lower())
        if asyncio.iscoroutine(found):
            found = await found
        return found


def sdk_channel_seller(
    chain: ChainUnderTest,
    *,
    relayer_key: bytes,
    receiver: str,
    authorizer_key: bytes,
    price: int = 1_000,
    min_deposit: int | None = None,
    asset_transfer_method: str | None = None,
) -> SdkChannelSeller:
    """A FastAPI app selling ``GET /weather`` for ``price`` by batch-settlement, paid into channels
    to ``receiver`` whose receiver authorizer is ``authorizer_key``; ``relayer_key`` (with gas)
    sends the facilitator's transactions."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
    from x402 import x402Facilitator, x402ResourceServer
    from x402.http.middleware.fastapi import payment_middleware, set_settlement_overrides
    from x402.http.types import PaymentOption, RouteConfig
    from x402.mechanisms.evm.batch_settlement.authorizer_signer import LocalAuthorizerSigner
    from x402.mechanisms.evm.batch_settlement.facilitator.scheme import BatchSettlementEvmFacilitator
    from x402.mechanisms.evm.batch_settlement.server.channel_manager import BatchSettlementChannelManager
    from x402.mechanisms.evm.batch_settlement.server.channel_manager_common import ChannelManagerConfig
    from x402.mechanisms.evm.batch_settlement.server.scheme import (
        BatchSettlementEvmScheme,
        BatchSettlementEvmSchemeServerConfig,
    )
    from x402.schemas import AssetAmount

    network = f"eip155:{chain.chain_id}"
    facilitator = x402Facilitator()
    facilitator.register([network], BatchSettlementEvmFacilitator(facilitator_signer(chain, relayer_key)))
    authorizer = LocalAuthorizerSigner(Account.from_key(authorizer_key))
    scheme = BatchSettlementEvmScheme(
        receiver, BatchSettlementEvmSchemeServerConfig(receiver_authorizer_signer=authorizer)
    )
    server = x402ResourceServer(facilitator)
    server.register(network, scheme)
    extra: dict[str, Any] = {"name": "USD Coin", "version": "2"}
    if min_deposit is not None:
        extra["minDeposit"] = str(min_deposit)
    if asset_transfer_method is not None:
        extra["assetTransferMethod"] = asset_transfer_method
    option = PaymentOption(
        scheme="batch-settlement",
        pay_to=receiver,
        price=AssetAmount(amount=str(price), asset=chain.usdc, extra=extra),
        network=network,
        max_timeout_seconds=3600,
    )
    routes = {"GET /weather": RouteConfig(accepts=[option], description="Weather")}
    app = FastAPI()
    gate = payment_middleware(routes, server)

    @app.middleware("http")
    async def x402_gate(request: Request, call_next: Any) -> Any:
        return await gate(request, call_next)

    async def weather(request: Request) -> JSONResponse:
        response = JSONResponse({"weather": "sunny"})
        charge = request.query_params.get("charge")
        if charge is not None:
            set_settlement_overrides(response, {"amount": charge})
        return response

    app.router.add_route("/weather", weather, methods=["GET"])  # a Starlette endpoint: takes the request

    manager = BatchSettlementChannelManager(
        ChannelManagerConfig(
            scheme=scheme, facilitator=facilitator, receiver=receiver, token=chain.usdc, network=network
        )
    )
    return SdkChannelSeller(app, scheme, facilitator, manager, receiver, authorizer.address, network, price, option)


class SdkToolSession:
    """An MCP session's ``call_tool`` in this process, answered by the SDK's paid tool wrapper
    (``x402.mcp.server_async.create_payment_wrapper``) around a ``forecast`` tool, selling through
    ``seller``'s scheme (the same channels as its HTTP route) and facilitator."""

    def __init__(self, seller: SdkChannelSeller) -> None:
        from x402 import x402ResourceServer
        from x402.mcp.server_async import PaymentWrapperConfig, create_payment_wrapper
        from x402.schemas import ResourceConfig, ResourceInfo

        server = x402ResourceServer(seller.facilitator)
        server.register(seller.network, seller.scheme)
        server.initialize()
        option = seller.option
        accepts = server.build_payment_requirements(
            ResourceConfig(
                scheme="batch-settlement",
                pay_to=option.pay_to,
                price=option.price,
                network=option.network,
                max_timeout_seconds=option.max_timeout_seconds,
            )
        )
        paid = create_payment_wrapper(
            server, PaymentWrapperConfig(accepts=accepts, resource=ResourceInfo(url="mcp://tool/forecast"))
        )

        async def forecast(args: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
            return {"content": [{"type": "text", "text": f"Sunny in {args.get('city')}"}]}

        self._tool = paid(forecast)
        self.calls = 0

    async def call_tool(self, name: str, arguments: Any = None, *, meta: Any = None, **_: Any) -> Any:
        from mcp.types import CallToolResult

        self.calls += 1
        result = await self._tool(arguments or {}, {"_meta": meta or {}, "toolName": name})
        return CallToolResult.model_validate(
            {
                "content": result.content,
                "isError": result.is_error,
                "structuredContent": result.structured_content,
                "_meta": result.meta or None,
            }
        )
