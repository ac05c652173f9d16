"""`Coalescer`: concurrent writes share flushes, each caller gets its own result, a bad item fails alone."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from x402mw.platform.batching import Coalescer, unreachable


class Ledger:
    """A flush target that keeps what it wrote and refuses negative numbers, all or nothing."""

    def __init__(self) -> None:
        self.flushes: list[list[int]] = []
        self.written: list[int] = []

    async def flush(self, items: list[int]) -> list[int]:
        await asyncio.sleep(0.001)  # a round trip
        self.flushes.append(items)
        if any(item < 0 for item in items):
            raise ValueError(f"negative in {items}")
        self.written.extend(items)
        return [item * 10 for item in items]


def test_a_lone_call_is_flushed_at_once_alone() -> None:
    ledger = Ledger()

    async def main() -> int:
        return await Coalescer(ledger.flush).submit(7)

    assert asyncio.run(main()) == 70
    assert ledger.flushes == [[7]]


def test_concurrent_calls_share_flushes_and_each_gets_its_own_result() -> None:
    ledger = Ledger()

    async def main() -> list[int]:
        coalescer = Coalescer(ledger.flush)
        return await asyncio.gather(*(coalescer.submit(n) for n in range(100)))

    assert asyncio.run(main()) == [n * 10 for n in range(100)]
    assert sorted(ledger.written) == list(range(100))
    assert len(ledger.flushes) <= 2  # the first caller alone, then everyone who queued meanwhile


def test_batches_are_capped() -> None:
    ledger = Ledger()

    async def main() -> None:
        coalescer = Coalescer(ledger.flush, max_batch=16)
        await asyncio.gather(*(coalescer.submit(n) for n in range(100)))

    asyncio.run(main())
    assert max(len(batch) for batch in ledger.flushes) == 16
    assert sorted(ledger.written) == list(range(100))


def test_a_bad_item_fails_its_own_caller_only() -> None:
    ledger = Ledger()

    async def main() -> list[int | BaseException]:
        coalescer = Coalescer(ledger.flush)
        return await asyncio.gather(*(coalescer.submit(n) for n in (1, 2, -3, 4, 5)), return_exceptions=True)

    results = asyncio.run(main())
    assert results[:2] == [10, 20] and results[3:] == [40, 50]
    assert isinstance(results[2], ValueError)
    assert sorted(ledger.written) == [1, 2, 4, 5]  # each written once, the bad one never


def test_a_flush_answering_the_wrong_count_is_an_error_not_a_wrong_answer() -> None:
    async def short(items: list[int]) -> list[int]:
        return items[:-1]

    async def main() -> None:
        await Coalescer(short).submit(1)

    with pytest.raises(RuntimeError, match="0 results for 1 items"):
        asyncio.run(main())


def test_callers_are_released_when_the_flushing_task_is_cancelled() -> None:
    async def never(items: list[int]) -> list[int]:
        await asyncio.sleep(3600)
        return items

    async def main() -> list[int | BaseException]:
        coalescer = Coalescer(never)
        calls = [asyncio.ensure_future(coalescer.submit(n)) for n in range(3)]
        await asyncio.sleep(0.01)
        assert len(coalescer._drains) == 1
        next(iter(coalescer._drains)).cancel()
        return await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 5)

    results = asyncio.run(main())
    assert all(isinstance(result, asyncio.CancelledError) for result in results)


def test_an_unreachable_database_fails_the_batch_at_once_without_retrying_each_item() -> None:
    flushes: list[list[int]] = []

    async def down(items: list[int]) -> list[int]:
        flushes.append(items)
        await asyncio.sleep(0.01)  # a connect attempt that fails
        raise ConnectionRefusedError("no database")

    async def main() -> list[int | BaseException]:
        coalescer = Coalescer(down)
        return await asyncio.gather(*(coalescer.submit(n) for n in range(50)), return_exceptions=True)

    results = asyncio.run(main())
    assert all(isinstance(result, ConnectionRefusedError) for result in results)
    assert len(flushes) <= 2  # the lone first call and the batch behind it, not one try per item


def test_what_counts_as_unreachable() -> None:
    from sqlalchemy import exc

    assert unreachable(ConnectionRefusedError()) and unreachable(TimeoutError())
    assert unreachable(exc.TimeoutError("QueuePool limit reached"))
    assert unreachable(exc.OperationalError("SELECT 1", {}, OSError("connection reset")))
    assert unreachable(httpx.ConnectError("refused")) and unreachable(httpx.ReadTimeout("slow node"))
    assert not unreachable(exc.IntegrityError("INSERT", {}, ValueError("duplicate key")))
    assert not unreachable(ValueError("a bad value"))


def test_a_database_lost_while_a_batch_is_split_fails_the_rest_at_once() -> None:
    flushes: list[list[int]] = []
    down = False

    async def flaky(items: list[int]) -> list[int]:
        nonlocal down
        flushes.append(items)
        await asyncio.sleep(0.001)
        if down:
            raise ConnectionRefusedError("gone")
        if len(items) > 1 and -1 in items:
            raise ValueError("a bad item")
        if items == [-1]:
            down = True  # the database goes away right after refusing the bad item
            raise ValueError("a bad item")
        return items

    async def main() -> list[int | BaseException]:
        coalescer = Coalescer(flaky)
        return await asyncio.gather(*(coalescer.submit(n) for n in (0, -1, 2, 3, 4, 5)), return_exceptions=True)

    results = asyncio.run(main())
    assert results[0] == 0 and isinstance(results[1], ValueError)
    assert all(isinstance(r, ConnectionRefusedError) for r in results[2:])
    assert flushes == [[0, -1, 2, 3, 4, 5], [0], [-1], [2]]  # then no try per remaining item


def test_enqueue_queues_at_once_and_items_of_one_turn_share_a_flush() -> None:
    ledger = Ledger()

    async def main() -> list[int]:
        coalescer: Coalescer[int, int] = Coalescer(ledger.flush)
        futures = [coalescer.enqueue(n) for n in range(5)]  # no await between them
        dropped = coalescer.enqueue(99)
        dropped.cancel()  # a caller that gave up: the others still get their results
        return list(await asyncio.gather(*futures))

    assert asyncio.run(main()) == [0, 10, 20, 30, 40]
    assert ledger.flushes == [[0, 1, 2, 3, 4, 99]]


@pytest.mark.parametrize("flushes", [1, 2, 3])
def test_at_most_flushes_batches_are_written_at_once(flushes: int) -> None:
    running = peak = 0
    release = asyncio.Event()
    batches: list[list[int]] = []

    async def slow(items: list[int]) -> list[int]:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        batches.append(items)
        await release.wait()
        running -= 1
        return items

    async def main() -> list[int]:
        coalescer: Coalescer[int, int] = Coalescer(slow, flushes=flushes)
        calls = []
        for n in range(6):  # one per turn of the loop: each may start a flush while slots are free
            calls.append(asyncio.ensure_future(coalescer.submit(n)))
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        await asyncio.sleep(0.01)
        assert running == flushes  # the free slots filled; the rest wait in the queue
        release.set()
        return list(await asyncio.gather(*calls))

    assert asyncio.run(main()) == list(range(6))
    assert peak == flushes
    assert sorted(n for batch in batches for n in batch) == list(range(6))
    assert len(batches) == flushes + 1  # what queued behind the running flushes went together
