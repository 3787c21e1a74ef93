"""Fixed window: at most N per window [kP, (k+1)P), windows aligned to t = 0."""

from __future__ import annotations

from ratekeeper import Limit
from ratekeeper.algorithms import fixed_window as fw

from ._steps import Runner, Step, backends, run

t0, t10, t20, t59, t60, t61, t120 = 0.0, 10.0, 20.0, 59.0, 60.0, 61.0, 120.0

L = Limit("fixed-window", "3/m")


@backends
def test_one_window_then_the_next(backend: str) -> None:
    run(L, [
        # t, cost, allowed, remaining, retry_after, reset_after
        Step(t0, 1, True, 2, 0.0, 60.0),
        Step(t0, 1, True, 1, 0.0, 60.0),
        Step(t10, 1, True, 0, 0.0, 50.0),
        Step(t10, 1, False, 0, 50.0, 50.0),  # until the next window starts
        Step(59.999, 1, False, 0, 0.001, 0.001),
        Step(t60, 1, True, 2, 0.0, 60.0),
        Step(t60, 1, True, 1, 0.0, 60.0),
        Step(t60, 1, True, 0, 0.0, 60.0),
        Step(t60, 1, False, 0, 60.0, 60.0),
    ], backend)


@backends
def test_twice_the_limit_around_a_boundary(backend: str) -> None:
    # The documented weakness: N at the end of one window and N at the start of the next.
    run(L, [
        Step(t59, 1, True, 2),
        Step(t59, 1, True, 1),
        Step(t59, 1, True, 0),
        Step(t59, 1, False, 0, 1.0),
        Step(t60, 1, True, 2),
        Step(t60, 1, True, 1),
        Step(t60, 1, True, 0),
        Step(t60, 1, False, 0, 60.0),
    ], backend)


@backends
def test_weighted_and_fractional_costs(backend: str) -> None:
    run(L, [
        Step(t0, 2, True, 1, 0.0, 60.0),
        Step(t0, 2, False, 1, 60.0, 60.0),  # does not fit: next window
        Step(t0, 1, True, 0, 0.0, 60.0),  # a smaller one does
        Step(t60, 0.5, True, 2),
        Step(t60, 0.5, True, 2),
        Step(t60, 0.5, True, 1),
        Step(t60, 1.5, True, 0),
        Step(t60, 0.5, False, 0, 60.0),
    ], backend)


@backends
def test_costs_above_capacity(backend: str) -> None:
    run(L, [
        Step(t0, 4, False, 3, None, 0.0),  # never; nothing used, nothing to reset
        Step(t0, 3.5, False, 3, None, 0.0),
        Step(t0, 3, True, 0, 0.0, 60.0),
        Step(t10, 4, False, 0, None, 50.0),
    ], backend)


@backends
def test_clock_going_backwards_keeps_counting_in_the_later_window(backend: str) -> None:
    run(L, [
        Step(t61, 1, True, 2, 0.0, 59.0),
        Step(t59, 1, True, 1, 0.0, 61.0),  # back into window 0: still window 1's quota
        Step(t59, 1, True, 0, 0.0, 61.0),
        Step(t59, 1, False, 0, 61.0, 61.0),
        Step(t0, 1, False, 0, 120.0, 120.0),
        Step(t120, 1, True, 2, 0.0, 60.0),
    ], backend)


@backends
def test_window_index_survives_float_division(backend: str) -> None:
    # 0.3 / 0.1 == 2.9999999999999996: t = 0.3 must still start window 3.
    run(Limit("fixed-window", "1/100ms"), [
        Step(0.2, 1, True, 0, 0.0, 0.1),
        Step(0.25, 1, False, 0, 0.05, 0.05),
        Step(0.3, 1, True, 0, 0.0, 0.1),
        Step(0.3, 1, False, 0, 0.1),
    ], backend)


def test_state_is_window_and_used() -> None:
    r = Runner(L, "pure")
    r.decide(t10, 2)
    assert r.state() == (0, 2.0)
    r.decide(t61, 1)
    assert r.state() == (1, 1.0)


def test_refund() -> None:
    assert fw.refund(None, t10, 1, t10, L) is None
    assert fw.refund((0, 2.0), t20, 1, t10, L) == (0, 1.0)
    assert fw.refund((0, 1.0), t20, 1, t10, L) is None  # nothing used: forget the key
    assert fw.refund((1, 2.0), t61, 1, t10, L) == (1, 2.0)  # that window already reset
    s1, _ = fw.decide(None, t10, 1, L)
    s2, _ = fw.decide(s1, t10, 2, L)
    assert fw.refund(s2, t10, 2, t10, L) == s1


def test_refund_after_a_reservation_made_while_the_clock_was_behind() -> None:
    s1, _ = fw.decide(None, t61, 1, L)  # window 1
    s2, d = fw.decide(s1, t59, 1, L)  # clock behind: charged to window 1
    assert d.allowed and s2 == (1, 2.0)
    assert fw.refund(s2, t59, 1, t59, L) == s1


def test_ttl_and_recovered_state() -> None:
    s, _ = fw.decide(None, t10, 1, L)
    assert fw.ttl(s, t10, L) == 50.0
    assert fw.ttl(s, t60, L) == 0.0
    for cost in (1, 3, 4):
        assert fw.decide(s, t60, cost, L) == fw.decide(None, t60, cost, L)
    assert fw.decide(s, 59.999, 3, L)[1] != fw.decide(None, 59.999, 3, L)[1]
