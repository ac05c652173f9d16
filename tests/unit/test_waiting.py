"""`tests.waiting`: a wait returns the first answer that will do, and one that times out fails with a
message that says what was awaited and where things stood. The failing waits have no time at all
(``timeout=0``): they check once and fail, so nothing here depends on the clock."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.waiting import eventually, eventually_async

pytestmark = pytest.mark.anyio


def _answers(*answers: object) -> Callable[[], Any]:
    """A check that answers ``answers`` in turn (raising those that are exceptions), then the last forever."""
    queue: Iterator[object] = iter(answers)
    last: list[object] = [None]

    def check() -> object:
        last[0] = next(queue, last[0])
        if isinstance(last[0], Exception):
            raise last[0]
        return last[0]

    return check


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_the_first_truthy_answer_is_returned() -> None:
    calls: list[int] = []

    def check() -> list[int]:
        calls.append(len(calls))
        return calls[2:]

    assert eventually(check, what="three calls", interval=0) == [2]
    assert calls == [0, 1, 2]  # asked until the answer would do, and no more


def test_until_decides_which_answer_will_do_and_exceptions_count_as_not_yet() -> None:
    check = _answers({"status": "pending"}, KeyError("status"), {"status": "paid", "id": 7})
    paid = eventually(check, until=lambda order: order["status"] == "paid", what="the order to be paid", interval=0)
    assert paid == {"status": "paid", "id": 7}
    assert eventually(_answers(0, False), until=lambda n: n is False, what="False", interval=0) is False


def test_a_wait_that_times_out_says_what_it_awaited_and_the_last_answer() -> None:
    with pytest.raises(AssertionError) as failed:
        eventually(
            _answers({"status": "pending"}), until=lambda o: o["status"] == "paid", what="a paid order", timeout=0
        )
    assert str(failed.value) == "timed out after 0 s waiting for a paid order\nlast value: {'status': 'pending'}"


def test_a_wait_that_times_out_names_the_last_exception_and_asks_a_lazy_description() -> None:
    log = ["starting"]
    with pytest.raises(AssertionError) as failed:
        eventually(_answers(ConnectionRefusedError("refused")), what=lambda: f"serve to answer; log: {log}", timeout=0)
    assert str(failed.value) == (
        "timed out after 0 s waiting for serve to answer; log: ['starting']\n"
        "last exception: ConnectionRefusedError('refused')"
    )
    with pytest.raises(AssertionError) as failed:
        eventually(lambda: "x" * 5000, until=lambda s: len(s) < 10, what="a short answer", timeout=0)
    assert str(failed.value).endswith("\nlast value: '" + "x" * 1999 + " …")  # the start of a long answer


def test_an_error_that_is_no_exception_is_not_waited_out() -> None:
    def interrupted() -> bool:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        eventually(interrupted, what="nothing", timeout=3600)


async def test_the_async_twin_awaits_a_coroutine_check_or_calls_a_plain_one() -> None:
    calls: list[int] = []

    async def check() -> int:
        calls.append(len(calls))
        return len(calls) if len(calls) == 3 else 0

    assert await eventually_async(check, what="three calls", interval=0) == 3
    assert calls == [0, 1, 2]
    plain = _answers(None, ValueError("not yet"), "ready")
    assert await eventually_async(plain, until=lambda answer: answer == "ready", what="ready", interval=0) == "ready"


async def test_the_async_twin_times_out_with_the_same_message() -> None:
    async def refused() -> None:
        raise ConnectionRefusedError("refused")

    with pytest.raises(AssertionError) as failed:
        await eventually_async(refused, what="the server", timeout=0)
    assert (
        str(failed.value)
        == "timed out after 0 s waiting for the server\nlast exception: ConnectionRefusedError('refused')"
    )
    with pytest.raises(AssertionError) as failed:
        await eventually_async(_answers(1), until=lambda n: n == 2, what="two", timeout=0)
    assert str(failed.value) == "timed out after 0 s waiting for two\nlast value: 1"
