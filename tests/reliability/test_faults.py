"""Fault tests: the platform as real processes on PostgreSQL and anvil, a fault injected in the middle
of payments, refunds and webhook deliveries, and then the invariants: balances on chain equal the
records, nothing is paid twice, every agent that retries its signature gets its original outcome,
nothing stays in flight.

Mining is paused (`Cluster.pause_mining`) where a transaction must still be in the node's pool when
the fault strikes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from eth_abi.abi import encode as abi_encode

from tests.harness import serve_app
from tests.reliability.cluster import Cluster, Merchant, new_address, threads_joined
from tests.sellers import starlette_app
from tests.waiting import eventually
from x402mw.client import Wallet, X402Auth
from x402mw.evm.keys import address_of, new_private_key
from x402mw.evm.receipts import verify_receipt
from x402mw.platform.chain.admin import transact
from x402mw.protocol import PaymentRequirements

PRICE = 10_000  # 0.01 USDC


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(tmp_path) as made:
        yield made


def _receipt_signer(cluster: Cluster) -> str:
    return str(httpx.get(cluster.url + "/healthz", timeout=10).json()["receiptSigner"])


def _seller(merchant: Merchant, endpoint: str, *, process: int = 0) -> Any:
    app = starlette_app(merchant.api_key, merchant.cluster.serves[process].url + "/v1", endpoint)
    return serve_app(app)


def _pay(url: str, auth: X402Auth, results: dict[str, Any], name: str) -> threading.Thread:
    def run() -> None:
        try:
            with httpx.Client(auth=auth, timeout=120) as client:
                results[name] = client.get(url + "/weather")
        except Exception as exc:  # recorded and asserted on: a test must see what went wrong
            results[name] = exc

    return threading.Thread(target=run, name=f"agent-{name}")


def _assert_paid_once(
    cluster: Cluster, payout: str, agents: dict[str, tuple[Wallet, X402Auth]], results: dict[str, Any]
) -> None:
    signer = _receipt_signer(cluster)
    for name, (wallet, auth) in agents.items():
        response = results[name]
        assert isinstance(response, httpx.Response), f"{name}: {response!r}"
        assert response.status_code == 200, (name, response.status_code, response.text)
        assert len(auth.payments) == 1 and auth.payments[0].verified, name
        assert sum(auth.spent.values()) * 10**6 == PRICE, f"{name} signed more than one payment: {auth.spent}"
        assert cluster.balance(wallet.address) == 1_000_000 - PRICE, name  # charged once
        assert verify_receipt(dict(auth.payments[0].receipt or {}), signer)
    assert cluster.balance(payout) == PRICE * len(agents)
    settled = cluster.sql("SELECT transaction FROM agent_payments WHERE pay_to = %s AND status = 'settled'", payout)
    assert len(settled) == len(agents)
    on_chain = {t["tx"] for t in cluster.transfers() if t["to"].lower() == payout.lower()}
    assert {row[0] for row in settled} == on_chain  # every transfer matches exactly one record
    assert cluster.unfinished_payments() == []


def _agents(cluster: Cluster, count: int) -> dict[str, tuple[Wallet, X402Auth]]:
    agents = {}
    for index in range(count):
        wallet = cluster.agent()
        # patient agents: a retry finds the seller answering pending at once while the platform restarts,
        # which takes longer than the default ten retries a second apart on a loaded machine
        auth = X402Auth(wallet, receipt_signer=_receipt_signer(cluster), retry_seconds=90, pending_retries=80)
        agents[f"a{index}"] = (wallet, auth)
    return agents


def test_settlements_whose_transactions_a_restarted_node_lost_complete(cluster: Cluster) -> None:
    merchant, payout = cluster.merchant(), new_address()
    endpoint = merchant.endpoint(payout)
    agents = _agents(cluster, 4)
    results: dict[str, Any] = {}
    with _seller(merchant, endpoint) as seller:
        cluster.pause_mining()
        threads = [_pay(seller, auth, results, name) for name, (_, auth) in agents.items()]
        with threads_joined(threads):
            cluster.wait_for_pool(len(agents))  # every settlement is out, waiting to be mined
            cluster.restart_node()  # the chain is kept, the pool is lost; the node mines again
    _assert_paid_once(cluster, payout, agents, results)
    mined, pending = cluster.relayer_nonces()
    assert mined == pending  # nothing left waiting behind a gap


def test_an_agent_retrying_after_the_platform_was_killed_mid_settlement_gets_its_original_receipt(
    cluster: Cluster,
) -> None:
    merchant, payout = cluster.merchant(), new_address()
    endpoint = merchant.endpoint(payout)
    agents = _agents(cluster, 2)
    results: dict[str, Any] = {}
    with _seller(merchant, endpoint) as seller:
        cluster.pause_mining()
        threads = [_pay(seller, auth, results, name) for name, (_, auth) in agents.items()]
        with threads_joined(threads):
            cluster.wait_for_pool(len(agents))
            cluster.serves[0].kill()  # mid-settlement: the transfers are out, nothing is released
            cluster.resume_mining()  # they land while the platform is down
            cluster.serves[0].start()
            # The agents' retries (the same signatures) reach the new process.
    _assert_paid_once(cluster, payout, agents, results)


def test_a_payment_retried_after_its_challenge_expired_gets_its_receipt_and_none_is_settled_anew(
    cluster: Cluster,
) -> None:
    merchant, payout = cluster.merchant(), new_address()
    endpoint = merchant.endpoint(payout)
    wallet = cluster.agent()
    with merchant.api() as api:
        terms = api.get(f"/agent/endpoints/{endpoint}").json()["endpoint"]
    accepted = {
        "scheme": "exact",
        "network": terms["network"],
        "amount": str(PRICE),
        "asset": terms["asset"],
        "payTo": payout,
        "maxTimeoutSeconds": 300,
        "extra": {"name": terms["assetName"], "version": terms["assetVersion"]},
    }
    payload = wallet.sign_payment(PaymentRequirements.model_validate(accepted))

    def settle(expires_at: int, wait: float = 20.0) -> dict[str, Any]:
        body = {
            "endpointId": endpoint,
            "challengeId": "ch-expiring",
            "resource": "http://seller.test/weather",
            "expiresAt": expires_at,
            "accepted": accepted,
            "paymentPayload": payload.to_wire(),
            "waitSeconds": wait,
        }
        with merchant.api() as api:
            reply = api.post("/agent/settlements", json=body)
        assert reply.status_code == 200, reply.text
        return dict(reply.json())

    expired = int(time.time()) - 1
    first = settle(expired)  # never made: nothing settles on an expired challenge
    assert (first["status"], first["settlement"]["errorReason"]) == ("failed", "challenge_expired")
    assert cluster.sql("SELECT count(*) FROM agent_payments")[0][0] == 0
    cluster.pause_mining()
    made = settle(int(time.time()) + 60, wait=1.0)  # made in time; still pending when answered
    assert made["status"] == "pending"
    cluster.serves[0].kill()
    cluster.resume_mining()
    cluster.serves[0].start()
    again = settle(expired)  # its challenge has expired since: the retry gets the payment's outcome
    assert again["status"] == "settled", again
    receipt = again["settlement"]["extensions"]["receipt"]
    assert verify_receipt(receipt, _receipt_signer(cluster))
    assert settle(expired)["settlement"]["extensions"]["receipt"] == receipt  # one outcome, forever
    assert cluster.balance(payout) == PRICE


class _DirectSeller:
    """Settles through ``POST /agent/settlements`` as the seller middleware does, with payments
    signed here (for control over their validity)."""

    def __init__(self, cluster: Cluster, merchant: Merchant, endpoint: str, payout: str) -> None:
        self.cluster, self.merchant, self.endpoint, self.payout = cluster, merchant, endpoint, payout
        with merchant.api() as api:
            self.terms = api.get(f"/agent/endpoints/{endpoint}").json()["endpoint"]

    def sign(self, wallet: Wallet, *, valid_for: int = 300) -> dict[str, Any]:
        accepted = {
            "scheme": "exact",
            "network": self.terms["network"],
            "amount": str(PRICE),
            "asset": self.terms["asset"],
            "payTo": self.payout,
            "maxTimeoutSeconds": valid_for,
            "extra": {"name": self.terms["assetName"], "version": self.terms["assetVersion"]},
        }
        payload = wallet.sign_payment(PaymentRequirements.model_validate(accepted))
        return {"accepted": accepted, "paymentPayload": payload.to_wire()}

    def settle(self, signed: dict[str, Any], *, wait: float = 20.0, expires_at: int | None = None) -> dict[str, Any]:
        body = {
            "endpointId": self.endpoint,
            "challengeId": "ch-" + signed["paymentPayload"]["payload"]["authorization"]["nonce"][2:18],
            "resource": "http://seller.test/weather",
            "expiresAt": expires_at or int(time.time()) + 300,
            "waitSeconds": wait,
            **signed,
        }
        with self.merchant.api() as api:
            reply = api.post("/agent/settlements", json=body)
        assert reply.status_code == 200, reply.text
        return dict(reply.json())


def test_a_settlement_whose_transaction_vanished_is_sent_again_while_its_authorization_is_valid(
    cluster: Cluster,
) -> None:
    merchant, payout = cluster.merchant(), new_address()
    seller = _DirectSeller(cluster, merchant, merchant.endpoint(payout), payout)
    wallet = cluster.agent()
    signed = seller.sign(wallet)
    cluster.pause_mining()
    first = seller.settle(signed, wait=1.0)
    assert first["status"] == "pending" and first["settlement"]["transaction"]
    lost = first["settlement"]["transaction"]
    cluster.serves[0].kill()  # the process that held the transaction is gone...
    cluster.restart_node()  # ...and so is the node's copy of it
    cluster.serves[0].start()
    assert not cluster.rpc("eth_getTransactionByHash", lost)
    again = seller.settle(signed, wait=30.0)  # the agent's retry: the same signature
    assert again["status"] == "settled", again
    mined = again["settlement"]["transaction"]
    assert mined != lost and cluster.rpc("eth_getTransactionReceipt", mined)["status"] == "0x1"
    assert cluster.balance(payout) == PRICE and cluster.balance(wallet.address) == 1_000_000 - PRICE
    assert cluster.sql("SELECT status, transaction FROM agent_payments") == [("settled", mined)]


def test_a_settlement_whose_transaction_vanished_is_failed_once_its_authorization_expired(
    cluster: Cluster,
) -> None:
    merchant, payout = cluster.merchant(), new_address()
    seller = _DirectSeller(cluster, merchant, merchant.endpoint(payout), payout)
    wallet = cluster.agent()
    signed = seller.sign(wallet, valid_for=12)
    valid_before = int(signed["paymentPayload"]["payload"]["authorization"]["validBefore"])
    cluster.pause_mining()
    assert seller.settle(signed, wait=1.0)["status"] == "pending"
    cluster.serves[0].kill()
    cluster.restart_node()
    cluster.rpc("evm_setNextBlockTimestamp", valid_before + 1)  # the chain's time passes validBefore
    cluster.rpc("evm_mine")
    cluster.serves[0].start()
    # Nobody retries: the worker finds that it can never settle, and says so.
    eventually(cluster.unfinished_payments, until=lambda left: not left, what="the payment to be finished")
    assert cluster.sql("SELECT status, error_reason FROM agent_payments") == [
        ("failed", "invalid_exact_evm_payload_authorization_valid_before")
    ]
    retried = seller.settle(signed, wait=5.0)  # and the agent's retry gets that final refusal
    assert retried["status"] == "failed"
    assert retried["settlement"]["errorReason"] == "invalid_exact_evm_payload_authorization_valid_before"
    assert cluster.balance(wallet.address) == 1_000_000 and cluster.balance(payout) == 0


def _paid_order(cluster: Cluster, merchant: Merchant, amount: str = "2") -> tuple[str, str]:
    """An order paid by an ordinary transfer to its deposit address; (order id, payer)."""
    buyer_key = new_private_key()
    buyer = address_of(buyer_key)
    cluster.mint(buyer, int(amount) * 10**6)
    cluster.give_gas(buyer)
    with merchant.api() as api:
        reply = api.post(
            "/payment-intents", json={"orderId": f"o-{time.time_ns()}", "amount": amount, "currency": "USDC"}
        )
        assert reply.status_code == 201, reply.text
        order = reply.json()["paymentIntent"]["id"]
    with httpx.Client(base_url=cluster.url + "/checkout/v1", timeout=60) as checkout:
        network = f"eip155:{cluster.anvil.chain_id}"
        attempt = checkout.post(
            f"/payment-intents/{order}/attempts", json={"network": network, "currency": "USDC", "method": "transfer"}
        ).json()
        data = bytes.fromhex("a9059cbb") + abi_encode(
            ["address", "uint256"], [attempt["depositAddress"], int(amount) * 10**6]
        )
        cluster.run(lambda rpc: transact(rpc, buyer_key, cluster.usdc, data, gas=100_000))

        def paid() -> dict[str, Any]:
            status: dict[str, Any] = checkout.post(f"/payment-intents/{order}/transfer-status", json={}).json()
            if status["status"] != "succeeded":
                cluster.rpc("evm_mine")  # its confirmations
            return status

        eventually(paid, until=lambda status: status["status"] == "succeeded", what=f"{order} to be paid")
    swept = "SELECT swept_at FROM payment_intents WHERE id = %s"
    eventually(lambda: cluster.sql(swept, order)[0][0], what=f"{order} to be swept")
    return order, buyer


def _wait_for_refund(merchant: Merchant, refund_id: str, timeout: float = 90.0) -> dict[str, Any]:
    with merchant.api() as api:
        refund: dict[str, Any] = eventually(
            lambda: api.get(f"/refunds/{refund_id}").json()["refund"],
            until=lambda refund: refund["status"] != "processing",
            what=f"refund {refund_id} to be finished",
            timeout=timeout,
        )
    return refund


@pytest.mark.parametrize("fault", ["node_restart", "platform_kill"])
def test_a_refund_survives_a_fault_in_flight_and_moves_money_once(cluster: Cluster, fault: str) -> None:
    merchant = cluster.merchant()
    order, payer = _paid_order(cluster, merchant)
    assert cluster.balance(payer) == 0
    cluster.pause_mining()
    created: dict[str, Any] = {}

    def refund() -> None:
        try:
            with merchant.api() as api:
                created["reply"] = api.post(f"/payment-intents/{order}/refunds", json={"reason": "fault test"})
        except httpx.HTTPError as exc:  # the platform_kill case: its answer is lost with the process
            created["reply"] = exc

    thread = threading.Thread(target=refund)
    with threads_joined([thread]):
        cluster.wait_for_pool(1)  # the refund's transfer is out
        if fault == "node_restart":
            cluster.restart_node()  # lost with the pool; mining resumes
        else:
            cluster.serves[0].kill()  # its sender is gone
            cluster.resume_mining()
            cluster.serves[0].start()
    if fault == "node_restart":
        reply = created["reply"]
        assert reply.status_code == 201, reply.text
        refund_id = reply.json()["refund"]["id"]
    else:
        assert isinstance(created["reply"], httpx.HTTPError)
        refund_id = cluster.sql("SELECT id FROM refunds WHERE payment_intent_id = %s", order)[0][0]
    refund = _wait_for_refund(merchant, refund_id)
    assert refund["status"] == "completed", refund
    assert cluster.balance(payer) == 2_000_000  # all of it, once
    to_payer = [t for t in cluster.transfers() if t["to"].lower() == payer.lower() and int(t["from"], 16)]
    assert len(to_payer) == 1 and to_payer[0]["tx"] == refund["txHash"]
    with merchant.api() as api:
        assert api.get(f"/payment-intents/{order}").json()["paymentIntent"]["status"] == "refunded"
        balances = {b["currency"]: (b["available"], b["reserved"]) for b in api.get("/balances").json()["data"]}
    assert balances["USDC"] == ("0.00", "0.00")


class _SlowReceiver:
    """A merchant's webhook server that holds the first delivery until `release`, then answers 200."""

    def __init__(self) -> None:
        self.received: list[tuple[str, bytes]] = []
        self.holding = threading.Event()
        self.released = threading.Event()

    def app(self) -> Any:
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import Response
        from starlette.routing import Route

        async def hook(request: Request) -> Response:
            import anyio

            self.received.append((request.headers["webhook-id"], await request.body()))
            if len(self.received) == 1:
                self.holding.set()
                while not self.released.is_set():
                    await anyio.sleep(0.05)
            return Response(status_code=200)

        return Starlette(routes=[Route("/hook", hook, methods=["POST"])])


def test_a_webhook_delivery_cut_short_by_a_killed_platform_is_delivered_after_its_restart(
    cluster: Cluster,
) -> None:
    merchant, payout = cluster.merchant(), new_address()
    seller = _DirectSeller(cluster, merchant, merchant.endpoint(payout), payout)
    receiver = _SlowReceiver()
    with serve_app(receiver.app()) as hooks:
        with merchant.api() as api:
            reply = api.post(
                "/webhook-endpoints", json={"url": hooks + "/hook", "enabledEvents": ["agent_payment.settled"]}
            )
            assert reply.status_code == 201, reply.text
        assert seller.settle(seller.sign(cluster.agent()))["status"] == "settled"
        assert receiver.holding.wait(60), "the event was never sent"
        cluster.serves[0].kill()  # mid-delivery: the attempt's outcome is never recorded
        receiver.released.set()
        cluster.serves[0].start()
        eventually(
            lambda: cluster.sql("SELECT status, attempts FROM webhook_deliveries"),
            until=lambda deliveries: [status for status, _ in deliveries] == ["delivered"],
            what="the delivery to be recorded delivered",
            timeout=90,
        )
    assert len(receiver.received) >= 2  # at least once: the cut-short attempt, and the one recorded
    assert len({webhook_id for webhook_id, _ in receiver.received}) == 1  # the same event, by its id


def test_a_settlement_the_base_fee_outgrew_is_sent_again_at_the_going_fee(cluster: Cluster) -> None:
    merchant, payout = cluster.merchant(), new_address()
    endpoint = merchant.endpoint(payout)
    agents = _agents(cluster, 1)
    results: dict[str, Any] = {}
    with _seller(merchant, endpoint) as seller:
        cluster.pause_mining()
        threads = [_pay(seller, auth, results, name) for name, (_, auth) in agents.items()]
        with threads_joined(threads):
            cluster.wait_for_pool(1)
            first = cluster.rpc("txpool_content")["pending"]
            sent = next(iter(next(iter(first.values())).values()))["hash"]
            cluster.rpc("anvil_setNextBlockBaseFeePerGas", hex(500 * 10**9))  # priced out
            cluster.rpc("evm_mine")
            cluster.resume_mining()
    _assert_paid_once(cluster, payout, agents, results)
    mined = cluster.sql("SELECT transaction FROM agent_payments")[0][0]
    assert mined != sent and not cluster.rpc("eth_getTransactionReceipt", sent)


def test_dropped_database_connections_cost_retries_never_errors_or_money(cluster: Cluster) -> None:
    merchant, payout = cluster.merchant(), new_address()
    endpoint = merchant.endpoint(payout)
    agents = _agents(cluster, 3)
    statuses: list[int] = []
    orders: dict[str, int] = {}
    stop = threading.Event()

    def create_orders() -> None:
        with merchant.api() as api:
            while not stop.is_set():
                key = f"order-{len(orders)}"
                for _ in range(30):  # a 503 is retried with the same key, as the merchant client does
                    reply = api.post(
                        "/payment-intents",
                        json={"orderId": key, "amount": "1.00", "currency": "USDC"},
                        headers={"Idempotency-Key": key},
                    )
                    statuses.append(reply.status_code)
                    if reply.status_code != 503:
                        break
                    time.sleep(0.2)
                orders[key] = reply.status_code

    results: dict[str, list[Any]] = {name: [] for name in agents}

    def pay(name: str, auth: X402Auth) -> None:
        with httpx.Client(auth=auth, timeout=120) as client:
            for _ in range(4):
                results[name].append(client.get(seller + "/weather").status_code)

    with _seller(merchant, endpoint) as seller:
        workers = [threading.Thread(target=create_orders)]
        workers += [threading.Thread(target=pay, args=(name, auth)) for name, (_, auth) in agents.items()]
        with threads_joined(workers):
            for _ in range(3):
                time.sleep(1.5)
                assert cluster.drop_connections() > 0
            time.sleep(1.0)
            stop.set()
    assert 500 not in statuses and set(statuses) <= {201, 503}, statuses
    assert set(orders.values()) == {201}
    created = cluster.sql("SELECT order_id FROM payment_intents")
    assert sorted(row[0] for row in created) == sorted(orders)  # each order once
    for name, (wallet, auth) in agents.items():
        assert results[name] == [200] * 4, (name, results[name])
        assert len(auth.payments) == 4 and sum(auth.spent.values()) * 10**6 == 4 * PRICE
        assert cluster.balance(wallet.address) == 1_000_000 - 4 * PRICE
    assert cluster.balance(payout) == 12 * PRICE
    assert cluster.sql("SELECT count(*) FROM agent_payments WHERE status = 'settled'") == [(12,)]
    assert cluster.unfinished_payments() == []


def test_while_the_chain_is_down_new_work_is_refused_fast_and_nothing_is_recorded(cluster: Cluster) -> None:
    merchant, payout = cluster.merchant(), new_address()
    seller = _DirectSeller(cluster, merchant, merchant.endpoint(payout), payout)
    order, _ = _paid_order(cluster, merchant)
    wallet = cluster.agent()
    signed = seller.sign(wallet)
    cluster.anvil.stop()
    with merchant.api() as api:
        body = {"endpointId": seller.endpoint, "challengeId": "ch-down", "expiresAt": int(time.time()) + 300, **signed}
        for _ in range(2):  # the first finds the node gone; the second is refused before trying
            reply = api.post("/agent/settlements", json=body)
            assert reply.status_code == 503, reply.text
            assert reply.json()["error"]["code"] == "chain_unavailable" and reply.headers["retry-after"] == "2"
        assert cluster.sql("SELECT count(*) FROM agent_payments") == [(0,)]  # nothing recorded, nothing failed
        refund = api.post(f"/payment-intents/{order}/refunds", json={})
        assert refund.status_code == 503 and refund.json()["error"]["code"] == "chain_unavailable", refund.text
        assert cluster.sql("SELECT count(*) FROM refunds") == [(0,)]
        balances = {b["currency"]: (b["available"], b["reserved"]) for b in api.get("/balances").json()["data"]}
        assert balances["USDC"] == ("2.00", "0.00")  # nothing reserved
        ready = httpx.get(cluster.url + "/readyz", timeout=10)
        assert ready.status_code == 503 and ready.json()["chains"] == {
            f"eip155:{cluster.anvil.chain_id}": "unavailable"
        }
        cluster.anvil.start()  # back, with its chain
        eventually(
            lambda: httpx.get(cluster.url + "/readyz", timeout=10),
            until=lambda ready: ready.status_code == 200,
            what="the platform to be ready again",
        )
    settled = seller.settle(signed)  # the same signature, once the chain is back
    assert settled["status"] == "settled", settled
    assert cluster.balance(payout) == PRICE and cluster.balance(wallet.address) == 1_000_000 - PRICE
