"""A long-lived task stops when it is cancelled, even when what it waits for comes in the same tick.

On Python 3.11 ``asyncio.wait_for(awaitable, timeout)`` swallows a cancellation that arrives while
its awaitable has just completed: it returns the awaitable's result and the task goes on as if never
cancelled. A loop that waits that way (for a wake-up event, with a timeout) then outlives the
``task.cancel(); await task`` of its owner's ``aclose``, and the process hangs on its way out: a
``serve`` that starts the platform once and closes it before serving never got to serve. The
platform waits with ``asyncio.timeout`` instead, which lets an outside cancellation through.
"""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest

import x402mw
from x402mw.platform.chain.devchain import DevChainRpc
from x402mw.platform.chain.receipts import ReceiptPoller

_PACKAGE = Path(x402mw.__file__).parent


@pytest.mark.anyio
async def test_a_receipt_poller_woken_as_it_is_closed_stops() -> None:
    rpc = DevChainRpc()
    poller = ReceiptPoller(rpc)
    try:
        waiting = asyncio.ensure_future(poller.wait(["0x" + "ab" * 32], timeout=30))
        for _ in range(20):  # the poller looks once, finds nothing, and waits to be woken
            await asyncio.sleep(0.01)
        task = poller._task
        assert task is not None and not task.done()
        poller._wake.set()  # a new wait comes in...
        task.cancel()  # ...in the tick its owner closes it
        await asyncio.wait({task}, timeout=5)
        assert task.done(), "the poller went on polling after it was cancelled"
        waiting.cancel()
    finally:
        await poller.aclose()
        await rpc.aclose()


def test_no_module_waits_with_asyncio_wait_for() -> None:
    found = []
    for path in sorted(_PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "wait_for"
                and isinstance(node.value, ast.Name)
                and node.value.id == "asyncio"
            ):
                found.append(f"{path.relative_to(_PACKAGE.parent)}:{node.lineno}")
    assert not found, f"asyncio.wait_for can swallow a cancellation (use asyncio.timeout): {found}"
