"""MemoryStore reclaims idle keys without a timer thread: the traffic that still arrives (new
keys) pays for sweeping, in bounded steps.

Bounds here are counts of work done (keys hit, entries dropped), never timings: a ManualClock
jumps past every window, then new keys arrive and the live entries are counted.
"""

from __future__ import annotations

import pytest

from ratekeeper import InvalidLimit, Limit, Limiter, MemoryStore
from ratekeeper.testing import ManualClock

IDLE = 20_000
LATE = 1_000


def short_limit(algo: str) -> Limit:
    """10 per second, every algorithm: each recovers within a second of its last request."""
    if algo in ("token-bucket", "gcra"):
        return Limit(algo, "10/s", burst=10)
    if algo == "leaky-bucket":
        return Limit(algo, "10r/s", burst=9, nodelay=True)
    return Limit(algo, "10/s")


ALGOS = ["token-bucket", "gcra", "leaky-bucket", "fixed-window", "sliding-window-log",
         "sliding-window-counter"]


@pytest.mark.parametrize("algo", ALGOS)
def test_idle_keys_are_reclaimed_by_a_thousand_new_keys(algo: str) -> None:
    lim = short_limit(algo)
    store, clock = MemoryStore(), ManualClock()
    limiter = Limiter(lim, store, clock=clock)
    for i in range(IDLE):
        limiter.hit(f"idle:{i}")
    assert store.keys(lim) == IDLE
    clock.advance(2.5)  # idle past their window
    for i in range(LATE):
        limiter.hit(f"late:{i}")
    # At least 90 % of the idle keys are gone; the late ones are all still there.
    assert store.keys(lim) - LATE <= IDLE // 10
    assert store.expired >= IDLE - IDLE // 10
    assert all(store.state(lim, f"late:{i}") is not None for i in range(LATE))


def test_no_single_decision_drops_more_than_one_batch() -> None:
    lim = short_limit("gcra")
    store, clock = MemoryStore(), ManualClock()
    limiter = Limiter(lim, store, clock=clock)
    for i in range(IDLE):
        limiter.hit(f"idle:{i}")
    clock.advance(2.5)
    most = 0
    for i in range(LATE):
        before = store.expired
        limiter.hit(f"late:{i}")
        most = max(most, store.expired - before)
    assert 0 < most <= store.sweep_batch


def test_keys_that_have_not_recovered_are_kept() -> None:
    lim = Limit("gcra", "1/h", burst=10)  # recovers an hour after its request
    store, clock = MemoryStore(), ManualClock()
    limiter = Limiter(lim, store, clock=clock)
    for i in range(IDLE):
        limiter.hit(f"busy:{i}")
    clock.advance(60)
    for i in range(LATE):
        limiter.hit(f"late:{i}")
    assert store.keys(lim) == IDLE + LATE and store.expired == 0 and store.evicted == 0


def test_an_unrecovered_key_at_the_old_end_does_not_block_reclaim() -> None:
    lim = Limit("token-bucket", "1/s", burst=100)
    store, clock = MemoryStore(), ManualClock()
    limiter = Limiter(lim, store, clock=clock)
    limiter.hit("heavy", 100)  # empty bucket: recovers at t = 100
    for i in range(IDLE):
        limiter.hit(f"idle:{i}")  # recover at t = 1
    clock.advance(2.5)
    for i in range(LATE):
        limiter.hit(f"late:{i}")
    assert store.state(lim, "heavy") is not None
    assert store.keys(lim) - LATE - 1 <= IDLE // 10


@pytest.mark.parametrize("grace,churns", [(0.25, False), (0.0, True)])
def test_keys_revisited_soon_after_they_recover_are_not_dropped(grace: float,
                                                                churns: bool) -> None:
    # Many clients in turn, each back 0.2 s after its last request, by which time its state
    # has recovered (10/s, one request): within the grace none is dropped and re-inserted.
    lim = short_limit("gcra")
    store, clock = MemoryStore(sweep_grace=grace), ManualClock()
    limiter = Limiter(lim, store, clock=clock)
    keys = [f"rr:{i}" for i in range(2_000)]
    for _ in range(5):
        for k in keys:
            limiter.hit(k)
            clock.advance(0.2 / len(keys))
    assert (store.expired > 0) is churns  # without a grace: dropped, then inserted again
    if not churns:
        assert store.keys(lim) == len(keys)


@pytest.mark.parametrize("grace", [-1, float("nan"), float("inf"), "1", True])
def test_sweep_grace_is_validated(grace: object) -> None:
    with pytest.raises(InvalidLimit, match="sweep_grace"):
        MemoryStore(sweep_grace=grace)  # type: ignore[arg-type]
