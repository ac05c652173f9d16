"""The soak's load, run as a process of its own (``python -m tests.reliability.load CONFIG OUT``):
agents paying a seller per request, buyers creating and paying orders by transfer, and refunds of
some of those orders, all at a bounded rate, until ``seconds`` have passed; then it writes what it
did to ``OUT`` (JSON) for the test to hold against the chain and the database.

It runs against whatever happens to the platform meanwhile: every request that fails for a reason
that is not its own (a 503, a connection cut by a killed process, a pending settlement) is sent
again with the same signature or the same ``Idempotency-Key``, as a careful client does.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from eth_abi.abi import encode as abi_encode
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.harness import serve_app
from tests.sellers import starlette_app
from tests.waiting import eventually
from x402mw.client import Wallet, X402Auth
from x402mw.evm.keys import address_of
from x402mw.platform.chain.admin import transact
from x402mw.platform.chain.rpc import HttpJsonRpc

_RETRYABLE = (httpx.TransportError,)


STRAGGLER_SECONDS = 150  # how long after the run a thread may still wait for its last answer


class Load:
    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.deadline = time.monotonic() + float(config["seconds"])
        self.lock = threading.Lock()
        self.payments: list[dict[str, Any]] = []  # one per paid request attempted
        self.orders: list[dict[str, Any]] = []
        self.refunds: list[dict[str, Any]] = []
        self.events: list[str] = []  # webhook-id of every delivery received
        self.errors: list[str] = []

    def record(self, kind: list[dict[str, Any]], item: dict[str, Any]) -> None:
        with self.lock:
            kind.append(item)

    def running(self) -> bool:
        return time.monotonic() < self.deadline

    # -- agents -----------------------------------------------------------------------------------

    def agent(self, index: int, sellers: list[str]) -> None:
        config = self.config
        wallet = Wallet(bytes.fromhex(config["agents"][index]))
        auth = X402Auth(wallet, receipt_signer=config["receipt_signer"], retry_seconds=60, pending_retries=60)
        with httpx.Client(auth=auth, timeout=120) as client:
            turn = 0
            while self.running():
                url = sellers[(index + turn) % len(sellers)] + "/weather"
                turn += 1
                status: int | str
                try:
                    response = client.get(url)
                    status = response.status_code
                    if status != 200:
                        print(
                            f"agent {index}: {status} {response.headers.get('payment-response')} {response.text[:300]}",
                            flush=True,
                        )
                except _RETRYABLE as exc:
                    status = type(exc).__name__  # the next request sends the same signature again
                except Exception as exc:
                    status = f"{type(exc).__name__}: {exc}"
                self.record(self.payments, {"agent": wallet.address, "status": status})
                with self.lock:  # kept as it goes: an agent still waiting after the run is left behind
                    self.spent_by_agent[wallet.address] = str(sum(auth.spent.values()))
                    self.paid_by_agent[wallet.address] = [p.transaction for p in auth.payments]
                time.sleep(0.05)

    spent_by_agent: dict[str, str] = {}
    paid_by_agent: dict[str, list[str]] = {}

    # -- orders and refunds -----------------------------------------------------------------------

    def _call(
        self, client: httpx.Client, method: str, path: str, *, key: str | None = None, **kwargs: Any
    ) -> httpx.Response:
        """A merchant API call, sent again (with the same idempotency key) while the platform cannot
        take it: a 503, or a connection cut by a process that stopped."""
        headers = {"Idempotency-Key": key} if key else {}
        for attempt in range(200):
            try:
                reply = client.request(method, path, headers=headers, **kwargs)
            except _RETRYABLE:
                time.sleep(min(0.2 * (attempt + 1), 2.0))
                continue
            if reply.status_code not in (409, 503) or (reply.status_code == 409 and "idempotency" not in reply.text):
                return reply
            time.sleep(min(0.2 * (attempt + 1), 2.0))
        raise RuntimeError(f"{method} {path} never went through")

    def buyer(self, index: int) -> None:
        config = self.config
        key = bytes.fromhex(config["buyers"][index])
        api = httpx.Client(
            base_url=config["platforms"][index % len(config["platforms"])] + "/v1",
            headers={"Authorization": f"Bearer {config['api_key']}"},
            timeout=60,
        )
        checkout = httpx.Client(
            base_url=config["platforms"][index % len(config["platforms"])] + "/checkout/v1", timeout=60
        )
        number = 0
        with api, checkout:
            while self.running():
                number += 1
                order_key = f"b{index}-o{number}"
                created = self._call(
                    api,
                    "POST",
                    "/payment-intents",
                    key=order_key,
                    json={"orderId": order_key, "amount": "1", "currency": "USDC"},
                )
                if created.status_code != 201:
                    self.errors.append(f"create {order_key}: {created.status_code} {created.text[:200]}")
                    continue
                order = created.json()["paymentIntent"]["id"]
                attempt = self._call(
                    checkout,
                    "POST",
                    f"/payment-intents/{order}/attempts",
                    json={"network": config["network"], "currency": "USDC", "method": "transfer"},
                )
                if attempt.status_code != 200:
                    self.errors.append(f"attempt {order}: {attempt.status_code} {attempt.text[:200]}")
                    continue
                deposit = attempt.json()["depositAddress"]
                data = bytes.fromhex("a9059cbb") + abi_encode(["address", "uint256"], [deposit, 1_000_000])
                try:
                    tx = asyncio.run(_transact(config["rpc"], key, config["usdc"], data))
                except Exception as exc:  # the node restarting: this buyer pays the next order
                    self.errors.append(f"transfer {order}: {exc}")
                    self.record(self.orders, {"id": order, "orderId": order_key, "paid": None})
                    continue
                self.record(self.orders, {"id": order, "orderId": order_key, "paid": tx})
                status = ""
                deadline = time.monotonic() + 60
                while status != "succeeded" and time.monotonic() < deadline:
                    reply = self._call(checkout, "POST", f"/payment-intents/{order}/transfer-status", json={})
                    status = reply.json().get("status", "") if reply.status_code == 200 else ""
                    time.sleep(0.3)
                if status == "succeeded" and number % 2 == 0:  # every other order is refunded
                    refund = self._call(
                        api, "POST", f"/payment-intents/{order}/refunds", key=f"r-{order_key}", json={"reason": "soak"}
                    )
                    self.record(self.refunds, {"order": order, "status": refund.status_code, "body": refund.text[:300]})

    # -- webhooks ---------------------------------------------------------------------------------

    def receiver(self) -> Starlette:
        async def hook(request: Request) -> Response:
            body = await request.body()
            self.events.append(request.headers["webhook-id"])
            await asyncio.sleep(float(self.config.get("hook_delay", 0.3)))  # deliveries take a while
            return Response(status_code=200, content=body[:0])

        return Starlette(routes=[Route("/hook", hook, methods=["POST"])])

    def run(self) -> dict[str, Any]:
        config = self.config
        with contextlib.ExitStack() as stack:
            sellers = [
                stack.enter_context(serve_app(starlette_app(config["api_key"], platform + "/v1", config["endpoint"])))
                for platform in config["platforms"]
            ]
            hooks = stack.enter_context(serve_app(self.receiver()))
            Path(config["hook_url_file"]).write_text(hooks + "/hook")
            # the test registers the webhook endpoint, then says go
            eventually(Path(config["go_file"]).exists, what="the test's go", timeout=120)
            threads = [
                threading.Thread(target=self.agent, args=(i, sellers), name=f"agent-{i}", daemon=True)
                for i in range(len(config["agents"]))
            ]
            threads += [
                threading.Thread(target=self.buyer, args=(i,), name=f"buyer-{i}", daemon=True)
                for i in range(len(config["buyers"]))
            ]
            for thread in threads:
                thread.start()
            # Each thread ends with the run, once its request in hand is answered. One that is still
            # waiting well past the run is reported with where it waits, and left behind (its request
            # has no outcome for the invariants to count): the run's records are what is checked.
            for thread in threads:
                thread.join(max(0.0, self.deadline + STRAGGLER_SECONDS - time.monotonic()))
            stragglers = [thread.name for thread in threads if thread.is_alive()]
            if stragglers:
                print(f"load: still waiting {STRAGGLER_SECONDS} s after the run: {stragglers}", flush=True)
                faulthandler.dump_traceback(all_threads=True)
            # keep receiving deliveries until the test has seen every event delivered (it waits up to
            # 300 s for that after the run; past twice that, it is gone, and this process ends too)
            eventually(Path(config["done_file"]).exists, what="the test's done", timeout=600, interval=0.1)
        return {
            "payments": self.payments,
            "orders": self.orders,
            "refunds": self.refunds,
            "events": self.events,
            "errors": self.errors,
            "spent": self.spent_by_agent,
            "paid": self.paid_by_agent,
        }


async def _transact(rpc_url: str, key: bytes, token: str, data: bytes) -> str:
    rpc = HttpJsonRpc(rpc_url)
    try:
        return (await transact(rpc, key, token, data, gas=100_000)).transaction_hash
    finally:
        await rpc.aclose()


def main() -> None:
    config = json.loads(Path(sys.argv[1]).read_text())
    result = Load(config).run()
    result["agents"] = [address_of(bytes.fromhex(k)) for k in config["agents"]]
    Path(sys.argv[2]).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
