"""GCRA: the token bucket's decisions with one timestamp of state (the theoretical arrival time).

Every monotonic token-bucket table must pass unchanged; a clock going backwards can only make
GCRA stricter (its documented behaviour, unlike the token bucket, which pauses refill).
"""

from __future__ import annotations

import pytest

from ratekeeper import Limit
from ratekeeper.algorithms import gcra

from ._steps import Runner, Step, backends, run
from .test_token_bucket import SHARED_TABLES

t0, t0_5, t1, t2, t3, t10 = 0.0, 0.5, 1.0, 2.0, 3.0, 10.0

L = Limit("gcra", "1/s", burst=3)


def as_gcra(limit: Limit) -> Limit:
    return Limit("gcra", limit.rate, burst=limit.burst)


@backends
@pytest.mark.parametrize("table", SHARED_TABLES)
def test_token_bucket_tables(table: str, backend: str) -> None:
    limit, steps = SHARED_TABLES[table]
    run(as_gcra(limit), steps, backend)


@backends
def test_state_is_one_timestamp(backend: str) -> None:
    r = run(L, [
        Step(t0, 1, True, 2, 0.0, 1.0),
        Step(t0, 2, True, 0, 0.0, 3.0),
        Step(t0, 1, False, 0, 1.0, 3.0),
    ], backend)
    assert r.state() == 3.0  # the bucket is full again at t = 3


@backends
def test_clock_going_backwards_is_stricter(backend: str) -> None:
    run(L, [
        Step(t0, 1, True, 2),
        Step(t0, 1, True, 1),
        Step(t0, 1, True, 0),  # tat = 3
        Step(t2, 1, True, 1, 0.0, 2.0),  # 3 - (3 - 2) = 2 tokens; tat = 4
        Step(t1, 1, False, 0, 1.0, 3.0),  # back to t1: 3 - (4 - 1) = 0 tokens
        Step(t0, 1, False, 0, 2.0, 4.0),
        Step(t2, 1, True, 0, 0.0, 3.0),  # retry_after from t1 was honest
        Step(t2, 1, False, 0, 1.0, 3.0),
    ], backend)


@backends
def test_retry_after_is_honest_when_the_clock_is_behind(backend: str) -> None:
    r = Runner(L, backend)
    for t in (t0, t0, t0, t2):
        assert r.decide(t, 1).allowed
    d = r.decide(t1, 1)
    assert not d.allowed and d.retry_after is not None
    assert r.decide(t1 + d.retry_after, 1).allowed


def test_refund() -> None:
    assert gcra.refund(None, t0, 1, t0, L) is None
    assert gcra.refund(3.0, t0, 1, t0, L) == 2.0
    assert gcra.refund(3.0, t0, 3, t0, L) is None  # full again: forget the key
    assert gcra.refund(3.0, t2, 1, t0, L) is None  # tat 2 <= now 2: full
    assert gcra.refund(5.0, t2, 1, t0, L) == 4.0
    half = Limit("gcra", "2/s", burst=4)
    assert gcra.refund(2.0, t0, 1, t0, half) == 1.5


def test_refund_restores_exactly() -> None:
    before, _ = gcra.decide(None, t0, 1, L)
    new, _ = gcra.decide(before, t0, 2, L)
    assert gcra.refund(new, t0, 2, t0, L) == before


def test_ttl_and_recovered_state() -> None:
    s, _ = gcra.decide(None, t0, 2, L)
    assert gcra.ttl(s, t0, L) == 2.0
    assert gcra.ttl(s, t2, L) == 0.0
    for cost in (1, 2, 3, 4):
        assert gcra.decide(s, t2, cost, L) == gcra.decide(None, t2, cost, L)
    assert gcra.decide(s, t2 - 0.001, 3, L)[1] != gcra.decide(None, t2 - 0.001, 3, L)[1]


def test_cost_above_capacity() -> None:
    new, d = gcra.decide(None, t0, 4, L)
    assert new is None and not d.allowed and d.retry_after is None and d.remaining == 3
    new, d = gcra.decide(100.0, t0, 4, L)  # even deep in debt: never, not "later"
    assert new is None and d.retry_after is None


@backends
@pytest.mark.parametrize("rate, burst", [("5/s", 10), ("10/s", 1000), ("3/s", 7),
                                    ("1/3s", 4), ("1000/s", 50)])
@pytest.mark.parametrize("start", [0.0, 1_700_000_000.0, 1_796_122_535.554])
def test_a_full_bucket_admits_exactly_its_burst_at_unix_time(
        rate: str, burst: int, start: float, backend: str) -> None:
    """At Unix-time magnitudes (a Redis server's clock, a replayed log) each admission's
    ``tat + c/r`` rounds to the float grid (0.24 µs at 1.7e9) and the error adds up over a
    burst; GCRA must still admit exactly what the token bucket admits: the whole burst, and
    again once it has refilled, not one request less."""
    lim = Limit("gcra", rate, burst=burst)
    tb = Limit("token-bucket", rate, burst=burst)
    g, t = Runner(lim, backend), Runner(tb, backend)
    refill = burst / lim.per_second
    for rnd in range(3):
        now = start + rnd * refill
        got_g = [g.decide(now, 1.0, "k").allowed for _ in range(burst + 1)]
        got_t = [t.decide(now, 1.0, "k").allowed for _ in range(burst + 1)]
        assert got_g == got_t == [True] * burst + [False], (rnd, got_g.count(True))
