"""The two short loops that run `call_flow`: `SyncRunner` with an ``httpx.Client`` and `AsyncRunner`
with an ``httpx.AsyncClient``. They send requests and sleep; every decision is in the flow."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Generic, TypeVar

import anyio
import httpx

from x402mw.client.merchant.calls import Call, ClientConfig, Flow, Listing, Reply, Send, Sleep, call_flow
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


@dataclass(frozen=True, slots=True)
class _Done(Generic[R]):
    value: R


def _resume(flow: Flow[R], reply: Reply | None) -> Send | Sleep | _Done[R]:
    """The flow's next command once it has ``reply``, or `_Done` with the call's result."""
    try:
        return flow.send(reply)
    except StopIteration as stop:
        return _Done(stop.value)


class SyncRunner:
    def __init__(self, client: httpx.Client, config: ClientConfig) -> None:
        self.client = client
        self.config = config

    def run(self, call: Call[R]) -> R:
        flow = call_flow(call, self.config)
        step = _resume(flow, None)
        while not isinstance(step, _Done):
            if isinstance(step, Sleep):
                time.sleep(step.seconds)
                step = _resume(flow, None)
            else:
                step = _resume(flow, self._send(step))
        return step.value

    def _send(self, command: Send) -> Reply:
        try:
            return self.client.send(_request(self.client, command))
        except httpx.HTTPError as exc:
            return exc

    def listing(self, call: Call[Listing[T]]) -> Page[T]:
        return Page(self.run(call), call, self.run)


class AsyncRunner:
    def __init__(self, client: httpx.AsyncClient, config: ClientConfig) -> None:
        self.client = client
        self.config = config

    async def run(self, call: Call[R]) -> R:
        flow = call_flow(call, self.config)
        step = _resume(flow, None)
        while not isinstance(step, _Done):
            if isinstance(step, Sleep):
                await anyio.sleep(step.seconds)
                step = _resume(flow, None)
            else:
                step = _resume(flow, await self._send(step))
        return step.value

    async def _send(self, command: Send) -> Reply:
        try:
            return await self.client.send(_request(self.client, command))
        except httpx.HTTPError as exc:
            return exc

    def listing(self, call: Call[Listing[T]]) -> AsyncPager[T]:
        return AsyncPager(call, self.run)
