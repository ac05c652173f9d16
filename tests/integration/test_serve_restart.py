"""``x402mw platform serve`` on the embedded defaults, stopped or killed and started again: the dev
chain comes back with everything the platform recorded on it, and where it cannot, ``serve`` says
so and exits instead of pairing the records with a new chain."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import sqlite3
from pathlib import Path
from typing import Any

import httpx

from tests.harness import Serve, serving
from tests.sellers import asgi_transport, starlette_app
from x402mw.client import Wallet, X402Auth
from x402mw.evm.keys import address_of, new_private_key
from x402mw.platform.chain.devchain import DEV_CHAIN_ID, DevChainRpc
from x402mw.platform.chain.devstate import DevChainState
from x402mw.platform.chain.token import balance_of
from x402mw.protocol import decode_settlement_response

NETWORK = f"eip155:{DEV_CHAIN_ID}"
STOPPED = (0, -signal.SIGTERM)  # uvicorn shuts down cleanly on SIGTERM, then exits by the same signal


def _merchant(serve: Serve) -> tuple[str, str]:
    """A merchant and test key made with the CLI, and an agent endpoint at 0.01 USDC; (key, endpoint id)."""
    merchant = serve.cli("merchants", "create", "--name", "Restart Co")
    key = serve.cli("keys", "create", "--merchant", merchant["id"])["key"]
    with _api(serve, key) as api:
        reply = api.post(
            "/agent/endpoints",
            json={
                "name": "Weather",
                "resourceUrl": "http://testserver/weather",
                "chainId": DEV_CHAIN_ID,
                "currency": "USDC",
                "payoutAddress": address_of(new_private_key()),
                "pricingMode": "fixed",
                "amountMinor": "10000",
            },
        )
        assert reply.status_code == 201, reply.text
        return key, reply.json()["endpoint"]["id"]


def _api(serve: Serve, key: str) -> httpx.Client:
    return httpx.Client(base_url=serve.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def _fund(serve: Serve, key: str, address: str, amount: str) -> str:
    with _api(serve, key) as api:
        reply = api.post(
            "/sandbox/faucet", json={"network": NETWORK, "currency": "USDC", "address": address, "amount": amount}
        )
        assert reply.status_code == 200, reply.text
        return str(reply.json()["transaction"])


async def _pay(serve: Serve, key: str, endpoint: str, agent: Wallet) -> httpx.Response:
    app = starlette_app(key, serve.url, endpoint)
    async with httpx.AsyncClient(
        transport=asgi_transport(app), base_url="http://testserver", auth=X402Auth(agent, max_amount="0.05"), timeout=60
    ) as client:
        return await client.get("/weather")


def _paid_tx(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    return decode_settlement_response(response.headers["PAYMENT-RESPONSE"]).transaction


def _on_chain(data_dir: Path, hashes: list[str], holders: list[str]) -> tuple[list[Any], list[int]]:
    """With serve stopped: the receipts of ``hashes`` and the USDC of ``holders`` on the kept chain."""

    async def read() -> tuple[list[Any], list[int]]:
        state = DevChainState.open(data_dir / "devchain")
        assert state.identity is not None
        rpc = DevChainRpc(state.backend(), state=state)
        try:
            receipts = [await rpc.request("eth_getTransactionReceipt", [h]) for h in hashes]
            usdc = state.identity.tokens["USDC"]
            return receipts, [await balance_of(rpc, usdc, holder) for holder in holders]
        finally:
            await rpc.aclose()

    return asyncio.run(read())


def _rows(data_dir: Path, query: str) -> list[Any]:
    with contextlib.closing(sqlite3.connect(data_dir / "platform.sqlite3")) as db:
        return db.execute(query).fetchall()


def test_a_restarted_serve_keeps_balances_orders_and_receipts(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    agent = Wallet(new_private_key())
    with serving(data_dir) as serve:
        key, endpoint = _merchant(serve)
        hashes = [_fund(serve, key, agent.address, "1")]
        hashes += [_paid_tx(asyncio.run(_pay(serve, key, endpoint, agent))) for _ in range(2)]
        with _api(serve, key) as api:
            order = api.post("/payment-intents", json={"orderId": "o-1", "amount": "2.50", "currency": "USDC"})
            assert order.status_code == 201, order.text
            order_id = order.json()["paymentIntent"]["id"]
            paid = api.post(f"/sandbox/payment-intents/{order_id}/simulate-payment", json={"scenario": "exact"})
            assert paid.status_code == 200, paid.text
            hashes.append(paid.json()["txHash"])
            balances = api.get("/balances").json()
        assert serve.stop() in STOPPED

        serve.start()
        with _api(serve, key) as api:
            assert api.get(f"/payment-intents/{order_id}").json()["paymentIntent"]["status"] == "succeeded"
            assert api.get("/balances").json() == balances
        # The agent still holds its test coins: a payment right after the restart goes through.
        hashes.append(_paid_tx(asyncio.run(_pay(serve, key, endpoint, agent))))
        assert serve.stop() in STOPPED

    receipts, [left] = _on_chain(data_dir, hashes, [agent.address])
    assert [r and r["status"] for r in receipts] == ["0x1"] * 5
    assert left == 1_000_000 - 3 * 10_000
    recorded = {tx for (tx,) in _rows(data_dir, "SELECT \"transaction\" FROM agent_payments WHERE status = 'settled'")}
    assert recorded == set(hashes[1:3] + hashes[4:])


def test_serve_killed_in_a_burst_of_payments_keeps_every_settled_transaction(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    agents = [Wallet(new_private_key()) for _ in range(6)]
    answered: list[str] = []
    with serving(data_dir) as serve:
        key, endpoint = _merchant(serve)
        for agent in agents:
            _fund(serve, key, agent.address, "1")

        async def burst() -> None:
            async def agent_loop(agent: Wallet) -> None:
                for _ in range(20):
                    try:
                        response = await _pay(serve, key, endpoint, agent)
                    except httpx.HTTPError:
                        return
                    if response.status_code != 200:
                        return
                    answered.append(_paid_tx(response))
                    if len(answered) == 12 and serve.process is not None:
                        serve.process.send_signal(signal.SIGKILL)  # in the middle of the others' payments

            await asyncio.gather(*(agent_loop(agent) for agent in agents))

        asyncio.run(burst())
        assert serve.process is not None and serve.process.wait(timeout=30) == -signal.SIGKILL
        serve.process = None

        serve.start()
        # An agent of the burst still holds what it did not spend, and pays again.
        after = _paid_tx(asyncio.run(_pay(serve, key, endpoint, agents[0])))
        assert serve.stop() in STOPPED

    settled = {tx for (tx,) in _rows(data_dir, "SELECT \"transaction\" FROM agent_payments WHERE status = 'settled'")}
    assert len(answered) >= 12 and after in settled
    # Every transfer an agent was answered for, or the platform recorded settled, is on the chain that
    # came back (the platform records some settlements after answering: those it finishes later).
    expected = sorted(settled | set(answered))
    receipts, _ = _on_chain(data_dir, expected, [])
    missing = [tx for tx, receipt in zip(expected, receipts, strict=True) if not receipt or receipt["status"] != "0x1"]
    assert missing == []


def test_serve_refuses_records_whose_chain_is_missing_or_damaged(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with serving(data_dir) as serve:
        key, _ = _merchant(serve)
        _fund(serve, key, address_of(new_private_key()), "1")
        assert serve.stop() in STOPPED
    kept = tmp_path / "kept"
    shutil.move(data_dir / "devchain", kept)

    refused = serve.refusal()
    assert refused.returncode == 1
    assert "Error: the database's records belong to the dev chain with genesis 0x" in refused.stderr
    assert f"{data_dir / 'devchain'} is not there" in refused.stderr
    assert "Traceback" not in refused.stderr + refused.stdout
    assert not (data_dir / "devchain").exists()

    shutil.copytree(kept, data_dir / "devchain")
    state = data_dir / "devchain" / DevChainState.FILENAME
    damaged = bytearray(state.read_bytes())
    damaged[len(damaged) // 3] ^= 0x55
    state.write_bytes(bytes(damaged))
    refused = serve.refusal()
    assert refused.returncode == 1
    assert f"Error: the dev chain's state {state} is damaged" in refused.stderr
    assert "Traceback" not in refused.stderr + refused.stdout

    shutil.rmtree(data_dir / "devchain")
    shutil.copytree(kept, data_dir / "devchain")
    serve.start()  # the state put back: serve starts as it was
    assert serve.stop() in STOPPED
