"""What the subscription tests share: a platform of their own (dev chain or anvil, SQLite or
PostgreSQL) whose reminder emails go to a real SMTP server (aiosmtpd) and whose webhooks go to a
real receiver, and a `Shop`: a merchant set up to sell subscriptions, with helpers to pay invoices
with real transfers, move test clocks and wait for verified webhooks."""

from __future__ import annotations

import asyncio
import contextlib
import email
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from email.message import EmailMessage
from email.policy import default as default_policy
from pathlib import Path
from typing import Any

import httpx
from aiosmtpd.controller import Controller
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.harness import PlatformHarness, postgres_database, serve_app
from tests.waiting import eventually
from x402mw.client.webhooks import Event, construct_event
from x402mw.evm.keys import address_of, new_private_key
from x402mw.platform.chain.anvil import ANVIL_DEV_KEYS, AnvilProcess, deploy_test_tokens
from x402mw.platform.chain.rpc import HttpJsonRpc
from x402mw.platform.clock import Clock
from x402mw.platform.server import PlatformServer, free_port
from x402mw.platform.services.deposits import authorization_call
from x402mw.platform.settings import ChainSettings, PlatformSettings


class Mailbox:
    """A real SMTP server on loopback (aiosmtpd) keeping what it receives. It can be stopped and started
    again on its port, and held (``gate.clear()``): a message then waits, unanswered, until it is
    released (``gate.set()``)."""

    def __init__(self) -> None:
        self.messages: list[EmailMessage] = []
        self.recipients: list[list[str]] = []  # each message's envelope (RCPT TO), in step with messages
        self.gate = threading.Event()
        self.gate.set()
        self._lock = threading.Lock()
        self.port = free_port()
        self._controller: Controller | None = None

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        while not self.gate.is_set():
            await asyncio.sleep(0.05)
        message = email.message_from_bytes(envelope.content, policy=default_policy)
        assert isinstance(message, EmailMessage)
        with self._lock:
            self.messages.append(message)
            self.recipients.append(list(envelope.rcpt_tos))
        return "250 Message accepted for delivery"

    def start(self) -> Mailbox:
        self._controller = Controller(self, hostname="127.0.0.1", port=self.port)
        self._controller.start()
        return self

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None

    def find(self, to: str, subject_part: str) -> list[EmailMessage]:
        with self._lock:
            return [m for m in self.messages if m["To"] == to and subject_part in str(m["Subject"])]


class Inbox:
    """A real webhook receiver: every POST to ``/hooks/<name>`` is kept, raw, for `construct_event`,
    with the time it arrived (by ``clock``: the platform's, when a test moves it)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.deliveries: dict[str, list[tuple[bytes, list[tuple[str, str]], float]]] = {}
        self._lock = threading.Lock()
        self._clock = clock
        self.url = ""

    async def _receive(self, request: Request) -> Response:
        body = await request.body()
        arrived = (body, list(request.headers.items()), self._clock())
        with self._lock:
            self.deliveries.setdefault(request.path_params["name"], []).append(arrived)
        return Response(status_code=200)

    @contextlib.contextmanager
    def serving(self) -> Iterator[Inbox]:
        app = Starlette(routes=[Route("/hooks/{name}", self._receive, methods=["POST"])])
        with serve_app(app) as url:
            self.url = url
            yield self

    def events(self, name: str, secret: str) -> list[Event]:
        """The verified events delivered to ``/hooks/<name>`` (each verified with ``secret`` as it
        arrived), once each."""
        with self._lock:
            raw = list(self.deliveries.get(name, []))
        found: dict[str, Event] = {}
        for body, headers, arrived in raw:
            event = construct_event(body, headers, secret, now=arrived)
            found.setdefault(event.id, event)
        return list(found.values())


@dataclass
class SubscriptionPlatform:
    harness: PlatformHarness
    inbox: Inbox
    mailbox: Mailbox | None
    clients: list[httpx.Client] = field(default_factory=list)  # the shops', closed with the platform

    def shop(self, name: str = "Acme Streaming") -> Shop:
        merchant_id, key, _ = self.harness.merchant(name)
        api = httpx.Client(base_url=self.harness.url, headers={"Authorization": f"Bearer {key}"}, timeout=120)
        self.clients.append(api)
        hook = f"m{uuid.uuid4().hex}"
        reply = api.post("/webhook-endpoints", json={"url": f"{self.inbox.url}/hooks/{hook}", "enabledEvents": ["*"]})
        assert reply.status_code == 201, reply.text
        secret = reply.json()["webhookEndpoint"]["secret"]
        return Shop(self, merchant_id, key, api, hook, secret)


@dataclass
class Shop:
    """A merchant selling subscriptions, with its API client and its webhooks."""

    platform: SubscriptionPlatform
    merchant_id: str
    key: str
    api: httpx.Client
    hook: str
    secret: str
    seen: set[str] = field(default_factory=set)

    @property
    def harness(self) -> PlatformHarness:
        return self.platform.harness

    def ok(self, reply: httpx.Response, status: int = 200) -> dict[str, Any]:
        assert reply.status_code == status, reply.text
        answer: dict[str, Any] = reply.json()
        return answer

    def plan(self, **fields: Any) -> dict[str, Any]:
        body = {"name": "Pro", "amount": "9.99", "currency": "USDC", "interval": "monthly", **fields}
        plan: dict[str, Any] = self.ok(self.api.post("/subscription-plans", json=body), 201)["plan"]
        return plan

    def clock(self, at: str) -> str:
        clock_id: str = self.ok(self.api.post("/test-clocks", json={"frozenTime": at}), 201)["testClock"]["id"]
        return clock_id

    def advance(self, clock_id: str, at: str) -> dict[str, Any]:
        clock: dict[str, Any] = self.ok(self.api.post(f"/test-clocks/{clock_id}/advance", json={"frozenTime": at}))[
            "testClock"
        ]
        return clock

    def open(self, plan: dict[str, Any], customer: str, *, status: int = 201, **fields: Any) -> dict[str, Any]:
        body = {"planId": plan["id"], "merchantCustomerId": customer, **fields}
        return self.ok(self.api.post("/subscriptions", json=body), status)

    def subscription(self, sub_id: str) -> dict[str, Any]:
        sub: dict[str, Any] = self.ok(self.api.get(f"/subscriptions/{sub_id}"))["subscription"]
        return sub

    def invoices(self, sub_id: str) -> list[dict[str, Any]]:
        data: list[dict[str, Any]] = self.ok(self.api.get(f"/subscriptions/{sub_id}/invoices", params={"limit": 100}))[
            "data"
        ]
        return data

    def order(self, order_id: str) -> dict[str, Any]:
        order: dict[str, Any] = self.ok(self.api.get(f"/payment-intents/{order_id}"))["paymentIntent"]
        return order

    def pay(self, order_id: str) -> dict[str, Any]:
        """Pay the order as a buyer would: the sandbox funds a fresh wallet, which transfers the amount
        to the order's deposit address on the chain; answers once the platform has seen it."""
        paid: dict[str, Any] = self.ok(self.api.post(f"/sandbox/payment-intents/{order_id}/simulate-payment", json={}))
        return paid

    def deposit_address(self, order_id: str) -> str:
        """The order's deposit address, as the hosted checkout's transfer attempt gives it."""
        origin = self.harness.url.removesuffix("/v1")
        body = {"network": self.harness.network, "currency": "USDC", "method": "transfer"}
        reply = httpx.post(f"{origin}/checkout/v1/payment-intents/{order_id}/attempts", json=body, timeout=60)
        assert reply.status_code == 200, reply.text
        address: str = reply.json()["depositAddress"]
        return address

    def transfer(self, to: str, amount: Decimal, buyer: bytes | None = None) -> str:
        """A buyer's own EIP-3009 transfer of ``amount`` USDC to ``to`` (the relayer submits it), from
        ``buyer``'s key (a new wallet by default), funded with exactly ``amount`` first; its hash."""
        harness = self.harness
        buyer = buyer or new_private_key()
        harness.fund(self.key, address_of(buyer), str(amount))
        chain = harness.chain
        data, _, _ = authorization_call(chain, harness.usdc, buyer, to, int(amount * 10**6), secrets.token_bytes(32))

        async def send(_platform: Any) -> str:
            tx = await chain.relayer.send(harness.usdc, data)
            await chain.wait_for(tx)
            return tx

        return harness.server.call(send)

    def events(self) -> list[Event]:
        return self.platform.inbox.events(self.hook, self.secret)

    def event(self, kind: str, sub_id: str) -> Event:
        """The first ``subscription.<kind>`` webhook about ``sub_id`` not yet taken, verified with
        `construct_event`; waits for the worker to deliver it."""

        def found() -> Event | None:
            for event in self.events():
                if event.type != f"subscription.{kind}" or event.id in self.seen:
                    continue
                if event.data["subscription"]["id"] == sub_id:
                    self.seen.add(event.id)
                    return event
            return None

        return eventually(found, what=f"subscription.{kind} of {sub_id}")

    def kinds(self, sub_id: str) -> list[str]:
        """The subscription events delivered about ``sub_id`` so far, oldest first."""
        found = [
            e for e in self.events() if e.type.startswith("subscription.") and e.data["subscription"]["id"] == sub_id
        ]
        return [e.type for e in sorted(found, key=lambda e: (e.created_at, e.id))]


def iso_day(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


@contextlib.contextmanager
def subscription_platform(
    workdir: Path,
    database: str,
    *,
    chain: str = "dev",
    smtp: bool = True,
    run_worker: bool = True,
    clock: Clock | None = None,
) -> Iterator[SubscriptionPlatform]:
    """A platform of the tests' own on ``database`` and ``chain`` (``dev`` or ``anvil``), sending its
    webhooks to a receiver and, with ``smtp``, its emails to an SMTP server of their own; on
    ``clock`` when given (the platform's one clock)."""
    with contextlib.ExitStack() as stack:
        inbox = stack.enter_context(Inbox(time.time if clock is None else clock.time).serving())
        mailbox = Mailbox().start() if smtp else None
        if mailbox is not None:
            stack.callback(mailbox.stop)
        url = stack.enter_context(postgres_database()) if database == "postgresql" else None
        on_anvil: dict[str, Any] = {}
        if chain == "anvil":
            anvil = stack.enter_context(AnvilProcess())
            tokens = _deploy(anvil.url)
            on_anvil = {
                "chains": [ChainSettings(rpc_url=anvil.url, tokens=tokens, minter_key=ANVIL_DEV_KEYS[0].hex())],
                "relayer_key": ANVIL_DEV_KEYS[1].hex(),
            }
        settings = PlatformSettings(
            database_url=url or f"sqlite:///{workdir / 'platform.sqlite3'}",
            data_dir=workdir,
            run_worker=run_worker,
            database_pool_size=4,
            webhooks_allow_private=True,
            smtp_host="127.0.0.1" if mailbox else None,
            smtp_port=mailbox.port if mailbox else 587,
            smtp_security="none",
            **on_anvil,
        )
        server = stack.enter_context(PlatformServer(settings, clock=clock))
        platform = SubscriptionPlatform(PlatformHarness(server), inbox, mailbox)
        try:
            yield platform
        finally:
            for client in platform.clients:
                client.close()


def _deploy(url: str) -> dict[str, str]:

    async def deploy() -> dict[str, str]:
        rpc = HttpJsonRpc(url)
        try:
            return await deploy_test_tokens(rpc, ANVIL_DEV_KEYS[0])
        finally:
            await rpc.aclose()

    return asyncio.run(deploy())
