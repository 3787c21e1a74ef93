"""The asyncio Redis store's round-trip timeout (`_store._Deadlines`): one event-loop timer
for every round trip in flight, with ``asyncio.timeout``'s semantics (TimeoutError at the
deadline; an outside cancellation stays a cancellation; the task's cancel count restored).
The store's own fault tests (tests/integration/test_redis_faults.py) run it against a
stopped server."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest

from ratekeeper.stores.redis._store import _Deadlines


async def _never(loop: asyncio.AbstractEventLoop) -> None:
    await loop.create_future()  # no reply, ever


async def test_a_round_trip_past_its_deadline_raises_timeout_error() -> None:
    loop = asyncio.get_running_loop()
    deadlines = _Deadlines()
    start = loop.time()
    with pytest.raises(asyncio.TimeoutError, match=r"no reply within 0\.02 s"):
        await deadlines.bound(_never(loop), 0.02)
    assert loop.time() - start >= 0.02  # not before its deadline
    assert deadlines._inflight == {}
    if sys.version_info >= (3, 11):
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0  # as if never cancelled
    assert await deadlines.bound(asyncio.sleep(0, "next"), 0.02) == "next"


async def test_answers_in_time_pass_through_and_errors_stay_theirs() -> None:
    deadlines = _Deadlines()

    async def fails() -> None:
        raise ConnectionError("refused")

    assert await deadlines.bound(asyncio.sleep(0, 7), 1.0) == 7
    with pytest.raises(ConnectionError, match="refused"):
        await deadlines.bound(fails(), 1.0)


async def test_a_cancellation_from_outside_stays_a_cancellation() -> None:
    loop = asyncio.get_running_loop()
    deadlines = _Deadlines()
    task = asyncio.ensure_future(deadlines.bound(_never(loop), 10.0))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert deadlines._inflight == {}


async def test_only_the_round_trips_past_their_deadline_time_out() -> None:
    loop = asyncio.get_running_loop()
    deadlines = _Deadlines()
    slow = asyncio.ensure_future(deadlines.bound(_never(loop), 0.02))
    fast = [asyncio.ensure_future(deadlines.bound(asyncio.sleep(0.001, i), 5.0))
            for i in range(20)]
    later = asyncio.ensure_future(deadlines.bound(asyncio.sleep(0.05, "late"), 5.0))
    assert await asyncio.gather(*fast) == list(range(20))
    with pytest.raises(asyncio.TimeoutError):
        await slow
    assert await later == "late"  # its deadline is 5 s away: the 0.02 s one took only its own


async def test_many_round_trips_share_one_timer() -> None:
    loop = asyncio.get_running_loop()
    deadlines = _Deadlines()
    scheduled: list[float] = []
    call_at = loop.call_at

    def counting_call_at(when: float, callback: Any, *args: Any) -> asyncio.TimerHandle:
        scheduled.append(when)
        return call_at(when, callback, *args)

    loop.call_at = counting_call_at  # type: ignore[method-assign]
    try:
        for i in range(500):
            assert await deadlines.bound(asyncio.sleep(0, i), 30.0) == i
        await asyncio.gather(*(deadlines.bound(asyncio.sleep(0, i), 30.0) for i in range(500)))
    finally:
        del loop.call_at  # type: ignore[method-assign]
    # asyncio.timeout would have scheduled (and cancelled) 1,000 timers.
    assert len(scheduled) == 1, len(scheduled)


def test_a_store_used_on_a_second_loop_still_times_out() -> None:
    deadlines = _Deadlines()

    async def quick() -> int:
        return await deadlines.bound(asyncio.sleep(0, 1), 0.001)  # leaves a timer on loop 1

    async def stuck() -> None:
        loop = asyncio.get_running_loop()
        await asyncio.wait_for(deadlines.bound(_never(loop), 0.02), 5.0)

    assert asyncio.run(quick()) == 1
    with pytest.raises(asyncio.TimeoutError, match="no reply within"):
        asyncio.run(stuck())


async def test_the_timer_is_set_again_for_a_round_trip_that_started_after_it() -> None:
    loop = asyncio.get_running_loop()
    deadlines = _Deadlines()
    assert await deadlines.bound(asyncio.sleep(0.001, 1), 0.03) == 1  # the timer: +0.03 s
    with pytest.raises(asyncio.TimeoutError, match="no reply within"):
        # due after that timer: when it fires it finds nothing due and must be set again
        await asyncio.wait_for(deadlines.bound(_never(loop), 0.05), 5.0)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="3.10 cannot tell the two apart")
async def test_a_cancellation_from_outside_at_the_deadline_stays_a_cancellation() -> None:
    loop = asyncio.get_running_loop()
    deadlines = _Deadlines()
    task = asyncio.ensure_future(deadlines.bound(_never(loop), 0.02))
    await asyncio.sleep(0)
    assert deadlines._timer is not None
    loop.call_at(deadlines._timer.when(), task.cancel)  # after the deadline's, same moment
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.skipif(sys.version_info < (3, 11), reason="Task.cancelling is 3.11+")
async def test_a_round_trip_that_swallows_the_cancellation_leaves_the_task_uncancelled() -> None:
    loop = asyncio.get_running_loop()
    deadlines = _Deadlines()

    async def swallows() -> str:
        try:
            await loop.create_future()
        except asyncio.CancelledError:
            return "swallowed"
        return "answered"

    assert await deadlines.bound(swallows(), 0.02) == "swallowed"
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    assert await asyncio.sleep(0.001, "on") == "on"  # not cancelled at its next await


def test_a_round_trip_left_on_a_closed_loop_does_not_stop_the_next_loops() -> None:
    deadlines = _Deadlines()
    old = asyncio.new_event_loop()
    stuck = old.create_task(deadlines.bound(_never(old), 0.01))
    old.run_until_complete(asyncio.sleep(0))  # in flight when its loop closes
    old.close()

    async def next_loop() -> None:
        loop = asyncio.get_running_loop()
        await asyncio.wait_for(deadlines.bound(_never(loop), 0.02), 5.0)

    with pytest.raises(asyncio.TimeoutError, match="no reply within"):
        asyncio.run(next_loop())
    assert not stuck.done()
