"""The dev chain kept in its state file against the same chain in memory.

(1) Settlements per second: ``count`` EIP-3009 ``transferWithAuthorization`` transfers (signed
beforehand) sent by our relayer, ``concurrency`` at a time, each awaited to its receipt, as the
platform settles them. Ours: the chain kept in a state file, committing every sealed block.
Baseline, in the same run: the same chain in memory. Also printed: the cost per sealed block
(elapsed time over blocks made).

(2) A restart with a long history: the kept chain after (1) plus ``history`` more transfers is
stopped and started again (open the file, check it, top up nothing), and its oldest transfer's
receipt is looked up. Baseline: the time that history took to make, which is the least that
replaying a journal of its transactions at start would take.

    .venv/bin/python -m bench.bench_devchain [count] [concurrency] [history]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

from x402mw.evm.eip712 import TokenDomain, TransferAuthorization, random_nonce, sign_transfer
from x402mw.evm.keys import address_of, new_private_key
from x402mw.platform.chain.devchain import DevChain, start_dev_chain
from x402mw.platform.chain.devstate import DevChainState
from x402mw.platform.chain.relayer import Relayer
from x402mw.platform.chain.token import encode_transfer_with_authorization


def _calls(chain: DevChain, payers: list[bytes], count: int) -> list[bytes]:
    token = chain.tokens["USDC"]
    domain = TokenDomain("USD Coin", "2", chain.chain_id, token)
    now = int(time.time())
    payee = address_of(new_private_key())
    calls = []  # valid for long: py-evm's block timestamps run ahead of the clock (>= 1 s per block)
    for index in range(count):
        key = payers[index % len(payers)]
        auth = TransferAuthorization(address_of(key), payee, 1, now - 60, now + 30 * 86400, random_nonce())
        calls.append(
            encode_transfer_with_authorization(
                from_=auth.from_address,
                to=auth.to,
                value=1,
                valid_after=auth.valid_after,
                valid_before=auth.valid_before,
                nonce=auth.nonce,
                signature=sign_transfer(key, domain, auth),
            )
        )
    return calls


async def _settle(
    chain: DevChain, relayer: Relayer, calls: list[bytes], concurrency: int
) -> tuple[float, float, int, str]:
    """Settle every call; return the seconds it took, the CPU seconds this process spent meanwhile
    (the chain runs in it), the blocks made and the first hash."""
    token = chain.tokens["USDC"]
    queue = list(reversed(calls))
    hashes: list[str] = []

    async def agent() -> None:
        while queue:
            tx_hash = await relayer.send(token, queue.pop())
            hashes.append(tx_hash)
            receipt = await relayer.wait_for_receipt(tx_hash)
            assert receipt.status == 1

    first = int(await chain.rpc.request("eth_blockNumber", []), 16)
    started, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(agent() for _ in range(concurrency)))
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    last = int(await chain.rpc.request("eth_blockNumber", []), 16)
    return elapsed, cpu, last - first, hashes[0]


async def _start(state_dir: Path | None, relayer_key: bytes, payers: list[bytes]) -> tuple[DevChain, Relayer]:
    state = DevChainState.open(state_dir) if state_dir is not None else None
    chain = await start_dev_chain(
        relayer_address=address_of(relayer_key),
        fund_addresses=[address_of(key) for key in payers],
        state=state,
    )
    relayer = Relayer(chain.rpc, relayer_key, chain_id=chain.chain_id)
    await relayer.start()
    return chain, relayer


async def _run(count: int, concurrency: int, history: int) -> None:
    relayer_key = new_private_key()
    payers = [new_private_key() for _ in range(8)]
    results = {}
    with tempfile.TemporaryDirectory(prefix="x402mw-bench-devchain-") as tmp:
        state_dir = Path(tmp) / "devchain"
        # The kept chain first: whatever warms up in this process then favours the baseline.
        for label, directory in (("kept", state_dir), ("in memory", None)):
            chain, relayer = await _start(directory, relayer_key, payers)
            calls = _calls(chain, payers, count)
            elapsed, cpu, blocks, first = await _settle(chain, relayer, calls, concurrency)
            results[label] = (elapsed, cpu)
            print(
                f"  {label:>9}: {count / elapsed:7.1f} settlements/s, {1000 * cpu / count:.2f} ms CPU per "
                f"settlement; {blocks} blocks, {1000 * elapsed / max(blocks, 1):.2f} ms per block"
            )
            if label == "kept":
                built, oldest = elapsed, first
                if history:
                    built += (await _settle(chain, relayer, _calls(chain, payers, history), concurrency))[0]
            await relayer.aclose()
            await chain.aclose()
        (memory, memory_cpu), (kept, kept_cpu) = results["in memory"], results["kept"]
        print(f"  kept / in memory: settlements/s {memory / kept:.2f}, CPU per settlement {kept_cpu / memory_cpu:.2f}")

        size = sum(path.stat().st_size for path in state_dir.iterdir())
        started = time.perf_counter()
        state = DevChainState.open(state_dir)
        chain = await start_dev_chain(
            relayer_address=address_of(relayer_key), fund_addresses=[address_of(k) for k in payers], state=state
        )
        opened = time.perf_counter() - started
        head = int(await chain.rpc.request("eth_blockNumber", []), 16)
        looked = time.perf_counter()
        receipt = await chain.rpc.request("eth_getTransactionReceipt", [oldest])
        lookup = time.perf_counter() - looked
        assert receipt is not None and receipt["status"] == "0x1"
        await chain.aclose()
        print(
            f"  restart with {count + history} transfers ({head} blocks, {size / 1e6:.1f} MB): "
            f"{1000 * opened:.0f} ms to start, oldest receipt in {1000 * lookup:.1f} ms; "
            f"making that history took {built:.1f} s (a replay's floor): ratio {built / opened:.0f}x"
        )


def run(count: int = 1000, concurrency: int = 16, history: int = 2000) -> None:
    print(f"bench_devchain: {count} transfers, {concurrency} at a time; restart after {count + history}")
    asyncio.run(_run(count, concurrency, history))


if __name__ == "__main__":
    run(*(int(arg) for arg in sys.argv[1:4]))
