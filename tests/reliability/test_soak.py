"""The soak: two ``serve`` and two ``worker`` processes on PostgreSQL and anvil, a bounded load from a
process of its own (`tests.reliability.load`: agents paying, orders created, paid and refunded)
for ``X402MW_SOAK_SECONDS`` (default 120), one fault of each kind injected meanwhile, and then the
invariants, read from the chain's own logs: every transfer matches exactly one record, no
authorization or refund moved money twice, every event was delivered at least once, and every
object is in a final or explainable state.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.reliability.cluster import Cluster, Merchant, new_address
from tests.waiting import eventually
from x402mw.evm.keys import address_of, new_private_key
from x402mw.platform.chain.token import authorization_state, find_authorization_use

SOAK_SECONDS = float(os.environ.get("X402MW_SOAK_SECONDS", "120"))
PRICE = 10_000
AGENT_FUNDS = 100_000_000
ZERO = "0x" + "00" * 20


def _wait(what: str, ready: Callable[[], bool], timeout: float) -> None:
    """Wait for the moment a fault is meant for; one that does not come is reported, and the fault
    injected all the same (the soak's invariants must hold either way)."""
    try:
        eventually(ready, what=what, timeout=timeout)
    except AssertionError as missed:
        print(f"fault: {missed}")


def _refund(merchant: Merchant, order: str) -> None:
    try:
        with merchant.api() as api:
            api.post(f"/payment-intents/{order}/refunds", json={"reason": "soak fault"})
    except httpx.HTTPError:
        pass  # its answer dies with the process: the refund itself is recorded, and finished by others


def _faults(cluster: Cluster, merchant: Merchant) -> list[tuple[str, Callable[[], None]]]:
    def node_restart() -> None:
        cluster.pause_mining()
        _wait("a transaction in the pool", lambda: cluster.pool_size() > 0, 10)
        cluster.restart_node()  # the pool is lost; automining again

    def kill_serve_mid_settlement() -> None:
        cluster.pause_mining()
        _wait("a settlement in flight", lambda: bool(cluster.unfinished_payments()), 15)
        cluster.serves[1].kill()
        cluster.resume_mining()
        time.sleep(1)
        cluster.serves[1].start()

    def kill_serve_mid_refund() -> None:
        # An order the load does not refund itself (it refunds every other one): refunded here, with
        # its transfer held in the pool while the process sending it is killed.
        unrefunded = (
            "SELECT id FROM payment_intents WHERE status = 'succeeded' AND order_id ~ '[13579]$' "
            "AND id NOT IN (SELECT payment_intent_id FROM refunds) LIMIT 1"
        )
        _wait("an order to refund", lambda: bool(cluster.sql(unrefunded)), 30)
        order = cluster.sql(unrefunded)[0][0]
        cluster.pause_mining()
        sent = "SELECT 1 FROM refunds WHERE payment_intent_id = %s AND tx_hash IS NOT NULL"
        refund = threading.Thread(target=_refund, args=(merchant, order))
        refund.start()
        _wait("the refund's transfer", lambda: bool(cluster.sql(sent, order)), 30)
        cluster.serves[0].kill()
        refund.join(30)
        cluster.resume_mining()
        time.sleep(1)
        cluster.serves[0].start()

    def kill_worker_mid_delivery() -> None:
        in_flight = "SELECT 1 FROM webhook_deliveries WHERE status = 'pending' AND locked_until > now()"
        _wait("a delivery in flight", lambda: bool(cluster.sql(in_flight)), 30)
        cluster.workers[0].kill()
        time.sleep(1)
        cluster.workers[0].start(wait=False)

    def stuck_at_a_low_fee() -> None:
        cluster.pause_mining()
        _wait("a transaction in the pool", lambda: cluster.pool_size() > 0, 10)
        cluster.rpc("anvil_setNextBlockBaseFeePerGas", hex(500 * 10**9))
        cluster.rpc("evm_mine")
        cluster.resume_mining()

    def database_connections_dropped() -> None:
        cluster.drop_connections()

    return [
        ("node restarted with transactions in its pool", node_restart),
        ("serve killed mid-settlement", kill_serve_mid_settlement),
        ("serve killed mid-refund", kill_serve_mid_refund),
        ("worker killed mid-delivery", kill_worker_mid_delivery),
        ("transaction stuck below the going fee", stuck_at_a_low_fee),
        ("PostgreSQL connections dropped", database_connections_dropped),
    ]


@pytest.mark.soak
def test_soak_with_one_fault_of_each_kind(tmp_path: Path) -> None:
    with Cluster(tmp_path, serve_count=2, worker_count=2) as cluster:
        merchant, payout = cluster.merchant("Soak"), new_address()
        endpoint = merchant.endpoint(payout)
        agents = [new_private_key() for _ in range(4)]
        buyers = [new_private_key() for _ in range(2)]
        for key in agents:
            cluster.mint(address_of(key), AGENT_FUNDS)
        for key in buyers:
            cluster.mint(address_of(key), 1_000_000_000)
            cluster.give_gas(address_of(key))
        files = {name: tmp_path / name for name in ("hook_url", "go", "done", "config.json", "out.json")}
        config = {
            "seconds": SOAK_SECONDS,
            "platforms": [serve.url for serve in cluster.serves],
            "api_key": merchant.api_key,
            "endpoint": endpoint,
            "agents": [key.hex() for key in agents],
            "buyers": [key.hex() for key in buyers],
            "receipt_signer": httpx.get(cluster.url + "/healthz", timeout=10).json()["receiptSigner"],
            "network": f"eip155:{cluster.anvil.chain_id}",
            "usdc": cluster.usdc,
            "rpc": cluster.anvil.url,
            "hook_url_file": str(files["hook_url"]),
            "go_file": str(files["go"]),
            "done_file": str(files["done"]),
        }
        files["config.json"].write_text(json.dumps(config))
        log = (tmp_path / "load.log").open("wb")
        load = subprocess.Popen(
            [sys.executable, "-m", "tests.reliability.load", str(files["config.json"]), str(files["out.json"])],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            eventually(files["hook_url"].exists, what="the load to start")
            with merchant.api() as api:
                hook = api.post(
                    "/webhook-endpoints", json={"url": files["hook_url"].read_text(), "enabledEvents": ["*"]}
                )
                assert hook.status_code == 201, hook.text
            started = time.monotonic()
            files["go"].touch()
            injected = []
            faults = _faults(cluster, merchant)
            for index, (name, inject) in enumerate(faults):
                time.sleep(max(0.0, started + (index + 1) * SOAK_SECONDS / (len(faults) + 2) - time.monotonic()))
                inject()
                injected.append(name)
            time.sleep(max(0.0, started + SOAK_SECONDS - time.monotonic()))
            eventually(
                lambda: _in_flight(cluster),
                until=lambda left: left == {},
                what="everything in flight to finish",
                timeout=180,
            )
            eventually(lambda: _undelivered(cluster), until=lambda n: n == 0, what="every event delivered", timeout=120)
            files["done"].touch()
            load.wait(timeout=180)
        finally:
            if load.poll() is None:
                load.kill()
            log.close()
        assert load.returncode == 0, (tmp_path / "load.log").read_text()[-3000:]
        out = json.loads(files["out.json"].read_text())
        summary = _check_invariants(cluster, payout, out)
        summary["faults injected"] = len(injected)
        print("soak:", json.dumps(summary))
        assert injected == [name for name, _ in faults]


def _explain_transaction(cluster: Cluster, tx: str) -> str:
    """What the chain and the records say of a transaction on one side of a mismatch only."""
    found = {
        "records": cluster.sql(
            "SELECT id, status, payer, nonce, block_number, created_at, settled_at, error_reason FROM agent_payments "
            "WHERE transaction = %s",
            tx,
        ),
        "receipt": cluster.rpc("eth_getTransactionReceipt", tx),
        "transaction": cluster.rpc("eth_getTransactionByHash", tx),
    }
    receipt = found["receipt"]
    if receipt:
        block = cluster.rpc("eth_getBlockByNumber", receipt["blockNumber"], False)
        found["block"] = block and {"hash": block["hash"], "transactions": block["transactions"]}
        found["receipt"] = {key: receipt[key] for key in ("status", "blockNumber", "blockHash", "from", "to")}
        found["logs"] = [log["topics"][0][:10] for log in receipt["logs"]]
    transaction = found["transaction"]
    if transaction:
        found["transaction"] = {key: transaction.get(key) for key in ("nonce", "from", "to", "blockNumber")}
        found["transaction"]["selector"] = transaction["input"][:10]
    for row in found["records"]:
        nonce = bytes.fromhex(row[3][2:])
        found[f"authorization {row[0]}"] = {
            "used": cluster.run(
                lambda rpc, payer=row[2], nonce=nonce: authorization_state(rpc, cluster.usdc, payer, nonce)
            ),
            "by": cluster.run(
                lambda rpc, payer=row[2], nonce=nonce: find_authorization_use(rpc, cluster.usdc, payer, nonce)
            ),
        }
    head = cluster.rpc("eth_blockNumber")
    return f"{tx} (head {int(head, 16)}): {found}"


def _in_flight(cluster: Cluster) -> dict[str, int]:
    counts = {
        "payments": len(cluster.unfinished_payments()),
        "refunds": len(cluster.sql("SELECT 1 FROM refunds WHERE status = 'processing'")),
    }
    return {name: count for name, count in counts.items() if count}


def _undelivered(cluster: Cluster) -> int:
    pending = cluster.sql("SELECT count(*) FROM events WHERE fanned_out_at IS NULL")[0][0]
    return int(pending + cluster.sql("SELECT count(*) FROM webhook_deliveries WHERE status <> 'delivered'")[0][0])


def _check_invariants(cluster: Cluster, payout: str, out: dict[str, Any]) -> dict[str, Any]:
    mismatches: list[str] = []
    transfers = cluster.transfers()
    # Agent payments: every transfer to the payout address is exactly one settled record, and back.
    paid_in = Counter(t["tx"] for t in transfers if t["to"].lower() == payout.lower())
    settled = cluster.sql("SELECT transaction, payer, amount_minor FROM agent_payments WHERE status = 'settled'")
    records = Counter(row[0] for row in settled)
    if paid_in != records:
        mismatches.append(f"agent transfers {dict(paid_in - records)} / records {dict(records - paid_in)}")
        for tx in (records - paid_in) + (paid_in - records):
            mismatches.append(_explain_transaction(cluster, tx))
    if any(row[2] != PRICE for row in settled):
        mismatches.append("a settled record of another amount")
    failed = cluster.sql("SELECT error_reason FROM agent_payments WHERE status = 'failed'")
    if any(reason is None for (reason,) in failed):
        mismatches.append("a failed payment without a reason")
    # No agent charged twice: what left each agent's wallet is what its records and receipts say.
    for agent in out["agents"]:
        out_of_wallet = [t for t in transfers if t["from"].lower() == agent.lower()]
        mine = [row for row in settled if row[1].lower() == agent.lower()]
        if len(out_of_wallet) != len(mine):
            balance = cluster.balance(agent)
            mismatches.append(
                f"{agent}: {len(out_of_wallet)} transfers, {len(mine)} settled records; its balance says "
                f"{(AGENT_FUNDS - balance) / PRICE} payments left it"
            )
        received = set(out["paid"].get(agent, []))
        if not received <= {row[0] for row in mine} or len(mine) - len(received) > 1:
            mismatches.append(f"{agent}: {len(received)} receipts for {len(mine)} settled payments")
    # Refunds: each completed refund is one transfer to its destination, and no order twice.
    refunds = cluster.sql("SELECT payment_intent_id, status, tx_hash, destination, amount_minor FROM refunds")
    completed = [row for row in refunds if row[1] == "completed"]
    by_order = Counter(row[0] for row in completed)
    if any(count > 1 for count in by_order.values()):
        mismatches.append("an order refunded twice")
    for _, _, tx, destination, amount in completed:
        moved = [t for t in transfers if t["tx"] == tx and t["to"].lower() == destination.lower()]
        if len(moved) != 1 or moved[0]["value"] != amount:
            mismatches.append(f"refund {tx}: {moved}")
    for buyer in {row[3].lower() for row in completed}:
        refunded_to = [
            t for t in transfers if t["to"].lower() == buyer and int(t["from"], 16) and t["from"].lower() != buyer
        ]
        if len(refunded_to) != sum(1 for row in completed if row[3].lower() == buyer):
            mismatches.append(f"{buyer}: {len(refunded_to)} transfers in, refunds say otherwise")
    # Orders: every order a buyer paid is credited once (succeeded or refunded).
    statuses = dict(cluster.sql("SELECT id, status FROM payment_intents"))
    for order in out["orders"]:
        if order["paid"] and statuses.get(order["id"]) not in ("succeeded", "refunded"):
            mismatches.append(f"order {order['id']} paid by {order['paid']} is {statuses.get(order['id'])}")
    unexplained = {s for s in statuses.values()} - {"succeeded", "refunded", "requires_payment"}
    if unexplained:
        mismatches.append(f"orders in {unexplained}")
    # Events: every one delivered at least once.
    events = {row[0] for row in cluster.sql("SELECT id FROM events")}
    delivered = set(out["events"])
    if not events <= delivered:
        mismatches.append(f"{len(events - delivered)} events never delivered")
    codes = Counter(str(p["status"]) for p in out["payments"])
    summary = {
        "paid requests": codes.get("200", 0),
        "agent payments settled": len(settled),
        "agent payments failed": len(failed),
        "orders": len(out["orders"]),
        "orders paid": sum(1 for o in out["orders"] if o["paid"]),
        "refunds completed": len(completed),
        "events delivered": len(events),
        "answers": dict(codes),
        "mismatches": len(mismatches),
    }
    for mismatch in mismatches:  # whole: the assertion's message is cut short
        print("soak mismatch:", mismatch)
    assert mismatches == [], (mismatches, summary)
    return summary
