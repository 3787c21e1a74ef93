"""Leaky bucket: step tables at named instants, nginx ``limit_req`` arithmetic.

State is ``(excess, last)`` in integer milli-requests and milliseconds, as nginx keeps it.
``burst=B`` lets B requests queue behind the one being served; without ``nodelay`` the queued
ones are admitted with a `delay`; ``delay=D`` serves the first D excess requests at once.
"""

from __future__ import annotations

from ratekeeper import Limit
from ratekeeper.algorithms import leaky_bucket as lb

from ._steps import Runner, Step, backends, run

t0, t0_5, t1, t1_5, t2, t3 = 0.0, 0.5, 1.0, 1.5, 2.0, 3.0
t100, t101 = 100.0, 101.0

QUEUE = Limit("leaky-bucket", "1r/s", burst=5)  # limit_req zone=z burst=5;


@backends
def test_nginx_queue(backend: str) -> None:
    # The module docstring's timeline: seven requests at t0.
    run(QUEUE, [
        # t, cost, allowed, remaining, retry_after, reset_after, delay
        Step(t0, 1, True, 5, 0.0, 1.0, 0.0),  # served at once
        Step(t0, 1, True, 4, 0.0, 2.0, 1.0),  # queued: 1 s
        Step(t0, 1, True, 3, 0.0, 3.0, 2.0),
        Step(t0, 1, True, 2, 0.0, 4.0, 3.0),
        Step(t0, 1, True, 1, 0.0, 5.0, 4.0),
        Step(t0, 1, True, 0, 0.0, 6.0, 5.0),
        Step(t0, 1, False, 0, 1.0, 6.0, 0.0),  # the queue is full
        Step(t1, 1, True, 0, 0.0, 6.0, 5.0),  # one leaked out
        Step(t1_5, 1, False, 0, 0.5, 5.5, 0.0),
        Step(t2, 1, True, 0, 0.0, 6.0, 5.0),
    ], backend)


@backends
def test_nginx_nodelay(backend: str) -> None:
    run(Limit("leaky-bucket", "1r/s", burst=2, nodelay=True), [
        Step(t0, 1, True, 2, 0.0, 1.0, 0.0),
        Step(t0, 1, True, 1, 0.0, 2.0, 0.0),
        Step(t0, 1, True, 0, 0.0, 3.0, 0.0),  # burst + 1 at once, no delay
        Step(t0, 1, False, 0, 1.0, 3.0),
        Step(t0_5, 1, False, 0, 0.5, 2.5),
        Step(t1, 1, True, 0, 0.0, 3.0, 0.0),
    ], backend)


@backends
def test_nginx_two_stage_delay(backend: str) -> None:
    # limit_req zone=z burst=5 delay=3: the first 3 excess requests pass at once.
    run(Limit("leaky-bucket", "1r/s", burst=5, delay=3), [
        Step(t0, 1, True, 5, delay=0.0),
        Step(t0, 1, True, 4, delay=0.0),
        Step(t0, 1, True, 3, delay=0.0),
        Step(t0, 1, True, 2, delay=0.0),
        Step(t0, 1, True, 1, delay=1.0),
        Step(t0, 1, True, 0, delay=2.0),
        Step(t0, 1, False, 0, 1.0),
    ], backend)


@backends
def test_burst_zero(backend: str) -> None:
    run(Limit("leaky-bucket", "2r/s"), [
        Step(t0, 1, True, 0, 0.0, 0.5, 0.0),
        Step(t0, 1, False, 0, 0.5, 0.5),
        Step(0.499, 1, False, 0, 0.001),
        Step(t0_5, 1, True, 0, 0.0, 0.5, 0.0),
    ], backend)


@backends
def test_integer_arithmetic_of_slow_rates(backend: str) -> None:
    # 30r/m is 500 milli-requests per second (integer division, as nginx).
    run(Limit("leaky-bucket", "30r/m"), [
        Step(t0, 1, True, 0, 0.0, 2.0),
        Step(t1, 1, False, 0, 1.0),
        Step(1.999, 1, False, 0, 0.001),
        Step(t2, 1, True, 0),
    ], backend)


@backends
def test_millisecond_truncation(backend: str) -> None:
    # 3r/s leaks 3000 milli-requests/s: after 333 ms only 999 have leaked (integer math).
    run(Limit("leaky-bucket", "3r/s"), [
        Step(t0, 1, True, 0),
        Step(0.333, 1, False, 0, 0.001),
        Step(0.334, 1, True, 0),
    ], backend)


@backends
def test_weighted_costs(backend: str) -> None:
    run(Limit("leaky-bucket", "1r/s", burst=4), [
        Step(t0, 3, True, 2, 0.0, 3.0, 2.0),  # three requests' worth: waits for two
        Step(t0, 3, False, 2, 1.0, 3.0),
        Step(t0, 2, True, 0, 0.0, 5.0, 4.0),
        Step(t0, 6, False, 0, None),  # more than burst + 1: never
        Step(t0, 5, True, 0, 0.0, 5.0, 4.0, key="b"),  # exactly burst + 1 on an idle key
        Step(t0, 6, False, 5, None, 0.0, key="c"),  # an idle key could take 5
        Step(t1, 1, True, 0, 0.0, 5.0, 4.0),
    ], backend)


@backends
def test_clock_going_backwards(backend: str) -> None:
    run(Limit("leaky-bucket", "1r/s", burst=1, nodelay=True), [
        Step(t0, 1, True, 1),
        Step(t0, 1, True, 0),
        Step(t0, 1, False, 0, 1.0),
        Step(t2, 1, True, 1),  # drained: stamped t2
        Step(t1, 1, True, 0),  # back to t1: nothing leaks (nginx: ms < 0 counts as 0)
        Step(t1, 1, False, 0, 2.0),  # leaking resumes from t2
        Step(t3, 1, True, 0),
    ], backend)


@backends
def test_clock_jumping_far_backwards(backend: str) -> None:
    # nginx counts a jump of more than 60 s backwards as 1 ms forward and re-stamps the key.
    r = run(Limit("leaky-bucket", "1r/s", burst=1, nodelay=True), [
        Step(t100, 1, True, 1),
        Step(t0, 1, True, 0),  # 1 ms "passed": excess 1000 - 1 ... = 999
        Step(t0, 1, False, 0, 0.999),
        Step(t1, 1, True, 0),
    ], backend)
    assert r.state() == (999, 1000)


def test_state_is_nginx_milli_requests() -> None:
    r = Runner(QUEUE, "pure")
    r.decide(t0, 1)
    assert r.state() == (0, 0)
    r.decide(t0, 1)
    assert r.state() == (1000, 0)
    r.decide(t0_5, 1)
    assert r.state() == (1500, 500)
    assert lb.params(QUEUE) == (1000, 5000, 0)
    assert lb.params(Limit("leaky-bucket", "30r/m", burst=2, delay=1)) == (500, 2000, 1000)
    assert lb.params(Limit("leaky-bucket", "10r/s", nodelay=True))[2] > 10**15


def test_refund() -> None:
    assert lb.refund(None, t0, 1, t0, QUEUE) is None
    assert lb.refund((2000, 0), t0, 1, t0, QUEUE) == (1000, 0)
    assert lb.refund((2000, 0), t0, 5, t0, QUEUE) == (-1000, 0)  # clamped at rest
    s1, _ = lb.decide(None, t0, 1, QUEUE)
    s2, _ = lb.decide(s1, t0, 2, QUEUE)
    assert lb.refund(s2, t0, 2, t0, QUEUE) == s1


def test_ttl_and_recovered_state() -> None:
    lim = Limit("leaky-bucket", "1r/s", burst=2)
    s, _ = lb.decide(None, t0, 1, lim)
    assert lb.ttl(s, t0, lim) == 1.0
    s, _ = lb.decide(s, t0, 1, lim)
    assert lb.ttl(s, t0, lim) == 2.0
    assert lb.ttl(s, t2, lim) == 0.0
    for cost in (1, 2, 3, 4):
        assert lb.decide(s, t2, cost, lim)[1] == lb.decide(None, t2, cost, lim)[1]
    assert lb.decide(s, 1.999, 3, lim)[1] != lb.decide(None, 1.999, 3, lim)[1]


def test_ttl_is_conservative_for_rates_that_do_not_divide_a_second() -> None:
    lim = Limit("leaky-bucket", "3r/s")
    s, _ = lb.decide(None, t0, 1, lim)
    now = 0.3334  # rounds to 333 ms: only 999 milli-requests have leaked
    if lb.ttl(s, now, lim) <= 0:
        assert lb.decide(s, now, 1, lim)[1] == lb.decide(None, now, 1, lim)[1]
