"""Sliding-window log: at most N admitted in any window (t - P, t]; only admissions logged."""

from __future__ import annotations

import pytest

from ratekeeper import Limit
from ratekeeper.algorithms import sliding_window_log as swl

from ._steps import Runner, Step, backends, run

t0, t2, t3, t5, t10, t12, t15 = 0.0, 2.0, 3.0, 5.0, 10.0, 12.0, 15.0

L = Limit("sliding-window-log", "3/10s")


@backends
def test_entries_slide_out(backend: str) -> None:
    run(L, [
        # t, cost, allowed, remaining, retry_after, reset_after
        Step(t0, 1, True, 2, 0.0, 10.0),
        Step(t0, 1, True, 1, 0.0, 10.0),
        Step(t2, 1, True, 0, 0.0, 10.0),
        Step(t5, 1, False, 0, 5.0, 7.0),  # the two at t0 leave at t10
        Step(9.999, 1, False, 0, 0.001),
        Step(t10, 1, True, 1, 0.0, 10.0),  # (0, 10] no longer holds t0
        Step(t10, 1, True, 0, 0.0, 10.0),
        Step(t10, 1, False, 0, 2.0, 10.0),  # the one at t2 leaves at t12
        Step(t12, 1, True, 0, 0.0, 10.0),
    ], backend)


@backends
@pytest.mark.parametrize("origin", [0.0, 1_764_547_200.0])  # a fresh clock; Unix time (Redis)
def test_an_entry_leaves_exactly_one_period_after_it_was_logged(backend: str,
                                                                 origin: float) -> None:
    # 16.208 - 2.0 is 14.207999999999998 in floats: the entry at 14.208 must still be gone at
    # 16.208, as it is for a key never seen, and a rejection never says "retry in 0 s".
    one = Limit("sliding-window-log", "1/2s")
    run(one, [
        Step(origin + 14.208, 1, True, 0, 0.0, 2.0),
        Step(origin + 16.207, 1, False, 0, 0.001),
        Step(origin + 16.208, 1, True, 0, 0.0, 2.0),
        Step(origin + 18.207, 1, False, 0, 0.001),
        Step(origin + 18.208, 1, True, 0, 0.0, 2.0),
    ], backend)


@backends
def test_rejections_are_not_recorded(backend: str) -> None:
    steps = [Step(t0, 1, True), Step(t0, 1, True), Step(t0, 1, True)]
    # A client hammering every 0.5 s is not locked out for longer than the window.
    steps += [Step(t / 2, 1, False, 0, 10.0 - t / 2) for t in range(1, 20)]
    steps += [Step(t10, 1, True, 2), Step(t10, 1, True, 1), Step(t10, 1, True, 0)]
    r = run(L, steps, backend)
    assert r.state() == ((t10, 3.0),)  # never more entries than admitted requests


@backends
def test_weighted_costs(backend: str) -> None:
    run(L, [
        Step(t0, 2, True, 1),
        Step(t2, 1, True, 0),
        Step(t3, 2, False, 0, 7.0),  # the 2 at t0 must leave first
        Step(t3, 1, False, 0, 7.0),
        Step(t10, 2, True, 0, 0.0, 10.0),
        Step(t10, 4, False, 0, None),  # more than N: never
        Step(t15, 3, False, 1, 5.0, 5.0),  # the 2 admitted at t10 stay until t20
    ], backend)


@backends
def test_costs_above_capacity(backend: str) -> None:
    run(L, [
        Step(t0, 4, False, 3, None, 0.0),
        Step(t0, 3, True, 0, 0.0, 10.0),
        Step(t5, 4, False, 0, None, 5.0),
    ], backend)


@backends
def test_clock_going_backwards_counts_entries_ahead_of_it(backend: str) -> None:
    run(L, [
        Step(t5, 1, True, 2),
        Step(t2, 1, True, 1),  # the entry at t5 is inside (t - P, t] for t = 2 too
        Step(t2, 1, True, 0),
        Step(t2, 1, False, 0),
    ], backend)


def test_same_instant_requests_share_one_entry() -> None:
    r = Runner(L, "pure")
    for _ in range(3):
        r.decide(t0, 1)
    assert r.state() == ((t0, 3.0),)
    r2 = Runner(L, "pure")
    r2.decide(t0, 1)
    r2.decide(t2, 1)
    r2.decide(t2, 1)
    assert r2.state() == ((t0, 1.0), (t2, 2.0))


def test_refund() -> None:
    s = ((t0, 2.0), (t2, 1.0))
    assert swl.refund(None, t3, 1, t0, L) is None
    assert swl.refund(s, t3, 1, t0, L) == ((t0, 1.0), (t2, 1.0))
    assert swl.refund(s, t3, 2, t0, L) == ((t2, 1.0),)
    assert swl.refund(s, t3, 1, t5, L) == s  # no entry at t5: nothing to give back
    assert swl.refund(((t2, 1.0),), t3, 1, t2, L) is None
    s1, _ = swl.decide(None, t0, 1, L)
    s2, _ = swl.decide(s1, t2, 2, L)
    assert swl.refund(s2, t2, 2, t2, L) == s1
    s3, _ = swl.decide(s1, t0, 2, L)  # merged into the t0 entry
    assert swl.refund(s3, t0, 2, t0, L) == s1


def test_ttl_and_recovered_state() -> None:
    s, _ = swl.decide(None, t0, 1, L)
    s, _ = swl.decide(s, t2, 1, L)
    assert swl.ttl(s, t2, L) == 10.0
    assert swl.ttl(s, t12, L) == 0.0
    for cost in (1, 3, 4):
        assert swl.decide(s, t12, cost, L) == swl.decide(None, t12, cost, L)
    assert swl.decide(s, 11.999, 3, L)[1] != swl.decide(None, 11.999, 3, L)[1]


def test_ttl_after_the_clock_went_backwards() -> None:
    lim = Limit("sliding-window-log", "2/10s")
    s, _ = swl.decide(None, t5, 1, lim)
    s, d = swl.decide(s, t2, 1, lim)  # clock behind: log is ((5, 1), (2, 1))
    assert d.allowed
    assert d.reset_after == pytest.approx(13.0)  # the entry at t5 stays until t15
    assert swl.ttl(s, t12, lim) > 0
