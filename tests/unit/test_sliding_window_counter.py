"""Sliding-window counter: Cloudflare's estimate ``prev * (P - elapsed) / P + curr <= N``."""

from __future__ import annotations

from ratekeeper import Limit
from ratekeeper.algorithms import sliding_window_counter as swc

from ._steps import Runner, Step, backends, run

t0, t30, t59, t60, t61, t66, t70, t90, t96, t120, t200 = (
    0.0, 30.0, 59.0, 60.0, 61.0, 66.0, 70.0, 90.0, 96.0, 120.0, 200.0
)

L = Limit("sliding-window-counter", "10/m")


@backends
def test_the_estimate_decays(backend: str) -> None:
    run(L, [
        # t, cost, allowed, remaining, retry_after, reset_after
        Step(t0, 10, True, 0, 0.0, 120.0),  # curr = 10: gone from the estimate at t120
        Step(t30, 1, False, 0, 36.0, 90.0),  # next window: 10 * (60 - 6) / 60 + 1 = 10 at t66
        Step(t60, 1, False, 0, 6.0, 60.0),  # prev = 10, curr = 0, elapsed 0
        Step(65.999, 1, False, 0, 0.001),
        Step(t66, 1, True, 0, 0.0, 114.0),  # 10 * 54 / 60 + 0 + 1 = 10
        Step(t90, 4, True, 0, 0.0, 90.0),  # 10 * 30 / 60 + 1 + 4 = 10
        Step(t90, 1, False, 0, 6.0, 90.0),  # curr = 5: 10 * (60 - 36) / 60 + 5 + 1 = 10
        Step(t96, 1, True, 0),
        Step(t200, 1, True, 9, 0.0, 100.0),  # two windows later: fresh
    ], backend)


@backends
def test_retry_in_the_next_window(backend: str) -> None:
    run(L, [
        Step(t0, 6, True, 4),
        Step(t30, 5, False, 4, 40.0),  # curr + c > N: wait until 6 * (60 - e) / 60 <= 5
        Step(t70, 5, True, 0),
    ], backend)


@backends
def test_retry_two_windows_ahead(backend: str) -> None:
    run(L, [
        Step(t0, 1, True, 9),
        Step(t30, 10, False, 9, 90.0),  # N itself fits only once the estimate is 0
        Step(119.999, 10, False),
        Step(t120, 10, True, 0),
    ], backend)


@backends
def test_costs_above_capacity(backend: str) -> None:
    run(L, [
        Step(t0, 11, False, 10, None, 0.0),
        Step(t0, 10.5, False, 10, None, 0.0),
        Step(t0, 10, True, 0),
        Step(t60, 11, False, 0, None),
    ], backend)


@backends
def test_fractional_costs(backend: str) -> None:
    run(Limit("sliding-window-counter", "1/s"), [
        Step(t0, 0.5, True, 0),
        Step(t0, 0.5, True, 0),
        Step(t0, 0.25, False, 0, 1.25),  # prev 1 * (1 - e) <= 0.75 at e = 0.25
        Step(1.25, 0.25, True, 0),
    ], backend)


@backends
def test_clock_going_backwards_keeps_the_stored_window(backend: str) -> None:
    run(L, [
        Step(t61, 1, True, 9, 0.0, 119.0),
        Step(t59, 9, True, 0, 0.0, 121.0),  # counted in window 1 (elapsed clamped at 0)
        Step(t59, 1, False, 0),
        Step(t0, 1, False, 0),
    ], backend)


def test_state_is_three_numbers() -> None:
    r = Runner(L, "pure")
    r.decide(t0, 4)
    assert r.state() == (0, 0.0, 4.0)
    r.decide(t61, 1)
    assert r.state() == (1, 4.0, 1.0)
    r.decide(t200, 1)
    assert r.state() == (3, 0.0, 1.0)


def test_refund() -> None:
    assert swc.refund(None, t61, 1, t61, L) is None
    assert swc.refund((1, 4.0, 2.0), t61, 1, t61, L) == (1, 4.0, 1.0)
    assert swc.refund((1, 4.0, 2.0), t61, 1, t0, L) == (1, 3.0, 2.0)  # charged last window
    assert swc.refund((1, 4.0, 2.0), t61, 5, t0, L) == (1, 0.0, 2.0)
    assert swc.refund((3, 4.0, 2.0), t200, 1, t0, L) == (3, 4.0, 2.0)  # long gone
    assert swc.refund((1, 0.0, 1.0), t61, 1, t61, L) is None
    s1, _ = swc.decide(None, t0, 4, L)
    s1, _ = swc.decide(s1, t61, 1, L)
    s2, _ = swc.decide(s1, t66, 2, L)
    assert swc.refund(s2, t66, 2, t66, L) == s1


def test_refund_after_a_reservation_made_while_the_clock_was_behind() -> None:
    s1, _ = swc.decide(None, t0, 4, L)
    s1, _ = swc.decide(s1, t61, 1, L)  # (1, 4, 1)
    s2, d = swc.decide(s1, t59, 1, L)  # clock behind: charged to window 1's curr
    assert d.allowed and s2 == (1, 4.0, 2.0)
    assert swc.refund(s2, t59, 1, t59, L) == s1


def test_ttl_and_recovered_state() -> None:
    s, _ = swc.decide(None, t0, 1, L)
    assert swc.ttl(s, t0, L) == 120.0
    assert swc.ttl(s, t120, L) == 0.0
    for cost in (1, 10, 11):
        assert swc.decide(s, t120, cost, L) == swc.decide(None, t120, cost, L)
    assert swc.decide(s, 119.999, 10, L)[1] != swc.decide(None, 119.999, 10, L)[1]
    only_prev = swc.refund((1, 4.0, 1.0), t61, 1, t61, L)
    assert only_prev == (1, 4.0, 0.0)
    assert swc.ttl(only_prev, t61, L) == 59.0  # prev leaves the estimate at t120
