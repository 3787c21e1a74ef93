"""Token bucket: step tables at named instants (Go x/time/rate's AllowN semantics).

``Limit("token-bucket", "1/s", burst=3)`` is Go's ``rate.NewLimiter(1, 3)``: a bucket of 3
tokens, full at the start, refilled continuously at 1 per second.
"""

from __future__ import annotations

import pytest

from ratekeeper import Limit
from ratekeeper.algorithms import token_bucket as tb

from ._steps import Runner, Step, backends, run

# Named instants (seconds).
t0 = 0.0
t0_5 = 0.5
t1 = 1.0
t2 = 2.0
t2_5 = 2.5
t3 = 3.0
t3_5 = 3.5
t10 = 10.0

L = Limit("token-bucket", "1/s", burst=3)


INITIAL_BURST = (L, [
    # t, cost, allowed, remaining, retry_after, reset_after
    Step(t0, 1, True, 2, 0.0, 1.0),
    Step(t0, 1, True, 1, 0.0, 2.0),
    Step(t0, 1, True, 0, 0.0, 3.0),
    Step(t0, 1, False, 0, 1.0, 3.0),  # empty: one token takes 1 s
    Step(t0_5, 1, False, 0, 0.5, 2.5),  # half a token
    Step(t1, 1, True, 0, 0.0, 3.0),
    Step(t1, 1, False, 0, 1.0, 3.0),
    Step(t3, 1, True, 1, 0.0, 2.0),  # two tokens refilled
    Step(t3, 1, True, 0, 0.0, 3.0),
    Step(t3, 1, False, 0, 1.0, 3.0),
    Step(t10, 1, True, 2, 0.0, 1.0),  # full again, capped at 3
])

# Go's rate_test.go tables, with its d = 100 ms instants (monotonic ones only).
d = 0.1
g0, g1, g2, g3, g4, g9 = 0.0, 1 * d, 2 * d, 3 * d, 4 * d, 9 * d

GO_BURST1 = (Limit("token-bucket", "10/s", burst=1), [
    Step(g0, 1, True),
    Step(g0, 1, False),
    Step(g0, 1, False),
    Step(g1, 1, True),
    Step(g1, 1, False),
    Step(g1, 1, False),
    Step(g2, 2, False, retry_after=None),  # burst size is 1, so n=2 always fails
    Step(g2, 1, True),
    Step(g2, 1, False),
])

GO_BURST3 = (Limit("token-bucket", "10/s", burst=3), [
    Step(g0, 2, True, 1),
    Step(g0, 2, False, 1, 0.1),
    Step(g0, 1, True, 0),
    Step(g0, 1, False, 0),
    Step(g1, 4, False, 1, None),
    Step(g2, 1, True, 1),
    Step(g3, 1, True, 1),
    Step(g4, 1, True, 1),
    Step(g4, 1, True, 0),
    Step(g4, 1, False),
    Step(g4, 1, False),
    Step(g9, 3, True, 0),
    # Go's {t9, 0, true}: a cost of 0 is an InvalidCost here (see test_limit.py).
])

WEIGHTED = (Limit("token-bucket", "1/s", burst=5), [
    Step(t0, 3, True, 2, 0.0, 3.0),
    Step(t0, 3, False, 2, 1.0, 3.0),  # 2 tokens, needs 3: one more second
    Step(t0, 2, True, 0, 0.0, 5.0),  # a smaller request still fits
    Step(t2, 3, False, 2, 1.0, 3.0),
    Step(t3, 3, True, 0, 0.0, 5.0),
    Step(t3, 0.5, False, 0, 0.5, 5.0),  # fractional costs are fine for a bucket
    Step(t3_5, 0.5, True, 0, 0.0, 5.0),
])

ABOVE_CAPACITY = (L, [
    Step(t0, 4, False, 3, None, 0.0),  # never: retry_after is None, bucket still full
    Step(t0, 3.000001, False, 3, None, 0.0),
    Step(t0, 3, True, 0, 0.0, 3.0),  # the exact capacity is fine
    Step(t0, 4, False, 0, None, 3.0),
    Step(t10, 100, False, 3, None, 0.0),
    Step(t10, 3, True, 0, 0.0, 3.0),
])

# 3 per 2 seconds = 1.5/s: one token every 2/3 s.
FRACTIONAL_RATE = (Limit("token-bucket", "3/2s", burst=1), [
    Step(0.0, 1, True, 0, 0.0, 2 / 3),
    Step(0.0, 1, False, 0, 2 / 3, 2 / 3),
    Step(0.5, 1, False, 0, 0.25 / 1.5, 0.25 / 1.5),
    Step(0.667, 1, True, 0, 0.0, 2 / 3),
])

# Go turns a deficit into a time.Duration (truncated nanoseconds) and admits at 0 ns.
NANOSECOND = (Limit("token-bucket", "1/s", burst=1), [
    Step(t0, 1, True, 0),
    Step(t1 - 2e-9, 1, False, 0),  # 2 ns short: rejected
    Step(t1 - 1e-10, 1, True, 0),  # 0.1 ns short: admitted, as Go does
])

#: Monotonic tables: the token bucket and GCRA must both pass every one of them.
SHARED_TABLES = {
    "initial-burst": INITIAL_BURST,
    "go-burst1": GO_BURST1,
    "go-burst3": GO_BURST3,
    "weighted": WEIGHTED,
    "above-capacity": ABOVE_CAPACITY,
    "fractional-rate": FRACTIONAL_RATE,
    "nanosecond": NANOSECOND,
}


@backends
@pytest.mark.parametrize("table", SHARED_TABLES)
def test_tables(table: str, backend: str) -> None:
    limit, steps = SHARED_TABLES[table]
    run(limit, steps, backend)


@backends
def test_clock_going_backwards_refills_nothing_and_unrefills_nothing(backend: str) -> None:
    run(L, [
        Step(t0, 1, True, 2),
        Step(t0, 1, True, 1),
        Step(t0, 1, True, 0),
        Step(t2, 1, True, 1),  # two tokens refilled at t2, one taken
        Step(t1, 1, True, 0),  # back to t1: the token is still there
        Step(t1, 1, False, 0),
        Step(t0, 1, False, 0),  # a rejection writes nothing: `last` stays at t1
        Step(t2_5, 1, True, 0),  # as in Go, refill resumed from the admission at t1: 1.5
        Step(t3, 1, True, 0),  # 0.5 + 0.5
    ], backend)


@backends
def test_go_limiter_jump_backwards(backend: str) -> None:
    run(Limit("token-bucket", "10/s", burst=3), [
        Step(g1, 1, True),  # start at t1
        Step(g0, 1, True),  # jump back to t0, two tokens remain
        Step(g0, 1, True),
        Step(g0, 1, False),
        Step(g0, 1, False),
        Step(g1, 1, True),  # got a token
        Step(g1, 1, False),
        Step(g1, 1, False),
        Step(g2, 1, True),  # got another token
        Step(g2, 1, False),
        Step(g2, 1, False),
    ], backend)


@backends
def test_retry_after_is_honest_when_the_clock_is_behind(backend: str) -> None:
    r = Runner(L, backend)
    for t in (t0, t0, t0, t2):
        assert r.decide(t, 1).allowed
    r.decide(t1, 1)  # back to t1: the last token
    d = r.decide(t1, 1)
    assert not d.allowed and d.retry_after is not None
    assert r.decide(t1 + d.retry_after, 1).allowed


# -- refund ----------------------------------------------------------------------------------

def test_refund() -> None:
    assert tb.refund(None, t0, 1, t0, L) is None
    assert tb.refund((1.0, t0), t0, 2, t0, L) is None  # full again: forget the key
    assert tb.refund((0.0, t0), t0, 1, t0, L) == (1.0, t0)
    assert tb.refund((0.0, t0), t0_5, 1, t0, L) == (1.5, t0_5)  # refill counted first
    assert tb.refund((0.0, t0), t10, 1, t0, L) is None  # capped
    assert tb.refund((0.0, t2), t1, 1, t1, L) == (1.0, t2)  # clock behind: no refill


def test_refund_restores_exactly() -> None:
    before, _ = tb.decide(None, t0, 1, L)
    new, _ = tb.decide(before, t0, 2, L)
    assert tb.refund(new, t0, 2, t0, L) == before


# -- ttl: zero exactly when the state equals a fresh one -------------------------------------

def test_ttl() -> None:
    s, _ = tb.decide(None, t0, 1, L)
    assert tb.ttl(s, t0, L) == 1.0
    assert tb.ttl(s, t0_5, L) == 0.5
    assert tb.ttl(s, t1, L) == 0.0
    s, _ = tb.decide(None, t0, 3, L)
    assert tb.ttl(s, t0, L) == 3.0
    assert tb.ttl((3.0, t2), t1, L) == 1.0  # a full bucket stamped in the future


@pytest.mark.parametrize("cost", [1, 2, 3, 4, 0.5])
def test_recovered_state_decides_like_a_missing_key(cost: float) -> None:
    s, _ = tb.decide(None, t0, 2, L)
    at = t0 + tb.ttl(s, t0, L)
    assert at == t2
    s_new, d_state = tb.decide(s, at, cost, L)
    none_new, d_none = tb.decide(None, at, cost, L)
    assert d_state == d_none
    assert s_new == none_new
    # Just before, it is not yet a fresh bucket.
    before = at - 0.001
    assert tb.ttl(s, before, L) > 0
    assert tb.decide(s, before, 3, L)[1] != tb.decide(None, before, 3, L)[1]


def test_rejection_returns_no_state() -> None:
    s, _ = tb.decide(None, t0, 3, L)
    new, dec = tb.decide(s, t0, 1, L)
    assert new is None and not dec.allowed
    assert s == (0.0, t0)
    new, dec = tb.decide(None, t0, 4, L)
    assert new is None and dec.retry_after is None
