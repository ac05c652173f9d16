"""The two short loops that run `call_flow`: `SyncRunner` with an ``httpx.Client`` and `AsyncRunner`
with an ``httpx.AsyncClient``. They send requests and sleep; every decision is in the flow."""

from __future__ import annotations

import time
from typing import TypeVar

import anyio
import httpx

from x402mw.client.merchant.calls import Call, ClientConfig, Listing, Reply, Send, call_flow
from x402mw.client.merchant.pages import AsyncPager, Page

R = TypeVar("R")
T = TypeVar("T")


def _request(client: httpx.Client | httpx.AsyncClient, command: Send) -> httpx.Request:
    """The request a `Send` command asks for, built by the client that will send it."""
    return client.build_request(
        command.method,
        command.url,
        params=command.params,
        headers=command.headers,
        content=command.content,
        timeout=command.timeout,
    )


class SyncRunner:
    def __init__(self, client: httpx.Client, config: ClientConfig) -> None:
        self.client = client
        self.config = config

    def run(self, call: Call[R]) -> R:
        flow = call_flow(call, self.config)
        reply: Reply | None = None
        while True:
            try:
                command = flow.send(reply)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            if isinstance(command, Send):
                try:
                    reply = self.client.send(_request(self.client, command))
                except httpx.HTTPError as exc:
                    reply = exc
            else:
                time.sleep(command.seconds)
                reply = None

    def listing(self, call: Call[Listing[T]]) -> Page[T]:
        return Page(self.run(call), call, self.run)


class AsyncRunner:
    def __init__(self, client: httpx.AsyncClient, config: ClientConfig) -> None:
        self.client = client
        self.config = config

    async def run(self, call: Call[R]) -> R:
        flow = call_flow(call, self.config)
        reply: Reply | None = None
        while True:
            try:
                command = flow.send(reply)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            if isinstance(command, Send):
                try:
                    reply = await self.client.send(_request(self.client, command))
                except httpx.HTTPError as exc:
                    reply = exc
            else:
                await anyio.sleep(command.seconds)
                reply = None

    def listing(self, call: Call[Listing[T]]) -> AsyncPager[T]:
        return AsyncPager(call, self.run)
