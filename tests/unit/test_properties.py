"""Property-based tests (hypothesis) of the invariants every algorithm promises.

Traces are on a millisecond grid (as the conformance cases are); reference models of the
window algorithms use exact integer / `Fraction` arithmetic, straight from the definitions in
the conformance README.

Each test draws one `case` (a limit with its trace) so that an input found once can be pinned
with ``@example``: CI must never pass only because a lucky seed missed it. The pinned inputs
sit on the boundaries a random trace rarely hits (an instant exactly one period after an
admission, whose decimal seconds do not subtract exactly in floats).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from fractions import Fraction
from typing import Any

from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from ratekeeper import Decision, Limit, Limiter, MemoryStore, Rate
from ratekeeper.algorithms import get
from ratekeeper.testing import ManualClock

SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
FEW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

ALGOS = ["token-bucket", "gcra", "leaky-bucket", "fixed-window", "sliding-window-log",
         "sliding-window-counter"]
PERIODS = [1, 2, 3, 5, 10, 60]
DIVISORS_OF_1000 = [1, 2, 4, 5, 8, 10, 20, 25, 40, 50]

Event = tuple[int, str, int]  # (t in ms, key, cost)


# -- strategies ------------------------------------------------------------------------------

@st.composite
def limits(draw: st.DrawFn, algorithm: str | list[str] | None = None, *,
           exact_ms: bool = False) -> Limit:
    algo = algorithm if isinstance(algorithm, str) else draw(st.sampled_from(algorithm or ALGOS))
    if algo in ("token-bucket", "gcra"):
        rate = Rate(draw(st.integers(1, 20)), float(draw(st.sampled_from(PERIODS))))
        return Limit(algo, rate, burst=draw(st.integers(1, 10)))
    if algo == "leaky-bucket":
        per_s = draw(st.sampled_from(DIVISORS_OF_1000) if exact_ms else st.integers(1, 30))
        mode = draw(st.sampled_from(["delay", "nodelay", "D"]))
        burst = draw(st.integers(0, 5))
        return Limit(algo, Rate(per_s, 1.0), burst=burst, nodelay=mode == "nodelay",
                     delay=draw(st.integers(1, 3)) if mode == "D" else 0)
    return Limit(algo, Rate(draw(st.integers(1, 10)), float(draw(st.sampled_from(PERIODS)))))


@st.composite
def traces(draw: st.DrawFn, max_cost: int, *, keys: int = 2, backwards: bool = False,
           n: int = 60) -> list[Event]:
    """Events ``(t_ms, key, cost)``; bursts at one instant are common, gaps up to 3 s."""
    steps = draw(st.lists(
        st.tuples(
            st.one_of(st.just(0), st.integers(0, 300), st.integers(0, 3000),
                      st.integers(-2000, 0) if backwards else st.just(0)),
            st.sampled_from("abc"[:keys]),
            st.integers(1, max_cost),
        ),
        min_size=1, max_size=n,
    ))
    out, t = [], 10_000  # start away from 0 so a backwards clock stays positive
    for dt, key, cost in steps:
        t += dt
        out.append((t, key, cost))
    return out


def max_cost(limit: Limit) -> int:
    return int(limit.capacity) + 2


Case = tuple[Limit, list[Event]]


@st.composite
def cases(draw: st.DrawFn, algorithm: str | list[str] | None = None, *, keys: int = 2,
          backwards: bool = False, n: int = 60, exact_ms: bool = False,
          unit_costs: bool = False) -> Case:
    """A limit and a trace for it (costs up to just above the limit's capacity)."""
    limit = draw(limits(algorithm, exact_ms=exact_ms))
    cost = 1 if unit_costs else max_cost(limit)
    return limit, draw(traces(cost, keys=keys, backwards=backwards, n=n))


#: One admission, then a request exactly one period later: ``16.208 - 2.0`` is
#: ``14.207999999999998`` in floats, so a log that compares naively still holds the entry.
LOG_EXACT_PERIOD: Case = (Limit("sliding-window-log", "1/2s"), [(14208, "a", 1), (16208, "a", 1)])


def secs(ms: int) -> float:
    return ms / 1000


def replay(limit: Limit, events: list[Event]) -> list[tuple[Event, Any, Decision, Any]]:
    """(event, state before, decision, state after) for each event, through the pure function."""
    algo = get(limit.algorithm)
    states: dict[str, Any] = {}
    out = []
    for ev in events:
        t, key, cost = ev
        before = states.get(key)
        new, d = algo.decide(before, secs(t), float(cost), limit)
        if d.allowed:
            states[key] = new
        else:
            assert new is None
        out.append((ev, before, d, states.get(key)))
    return out


def assert_same(a: Decision, b: Decision) -> None:
    """Equal decisions, up to float noise (1 ns) in the times."""
    assert (a.allowed, a.remaining, a.limit, a.degraded) == (b.allowed, b.remaining, b.limit,
                                                             b.degraded), (a, b)
    for x, y in ((a.retry_after, b.retry_after), (a.reset_after, b.reset_after),
                 (a.delay, b.delay)):
        assert (x is None and y is None) or (
            x is not None and y is not None and abs(x - y) < 1e-9), (a, b)


# -- token bucket / GCRA ---------------------------------------------------------------------

@SETTINGS
@given(cases(["token-bucket", "gcra"], keys=1))
def test_bucket_admits_at_most_burst_plus_rate_times_t(case: Case) -> None:
    limit, events = case
    admitted = [(secs(t), c) for (t, _, c), _, d, _ in replay(limit, events) if d.allowed]
    b, r = limit.capacity, limit.per_second
    for i, (ti, _) in enumerate(admitted):
        total = 0.0
        for tj, cj in admitted[i:]:
            total += cj
            assert total <= b + r * (tj - ti) + 1e-6, (ti, tj, total)


@SETTINGS
@given(cases("token-bucket", keys=3))
def test_token_bucket_and_gcra_make_identical_decisions(case: Case) -> None:
    tb_limit, events = case
    gcra_limit = Limit("gcra", tb_limit.rate, burst=tb_limit.burst)
    pairs = zip(replay(tb_limit, events), replay(gcra_limit, events), strict=True)
    for (ev, _, a, _), (_, _, b, _) in pairs:
        assert (a.allowed, a.remaining) == (b.allowed, b.remaining), ev
        if a.retry_after is None or b.retry_after is None:
            assert a.retry_after is b.retry_after is None, ev
        else:
            assert abs(a.retry_after - b.retry_after) < 1e-6, ev
        assert abs(a.reset_after - b.reset_after) < 1e-6, ev


# -- windows: the definitions, exactly -------------------------------------------------------

@SETTINGS
@given(cases("fixed-window"))
@example((Limit("fixed-window", "2/3s"), [(11999, "a", 2), (12000, "a", 2), (14999, "a", 1)]))
def test_fixed_window_is_its_definition(case: Case) -> None:
    limit, events = case
    n, p_ms = int(limit.capacity), int(limit.period * 1000)
    used: dict[tuple[str, int], int] = defaultdict(int)
    for (t, key, cost), _, d, _ in replay(limit, events):
        k = t // p_ms
        want = used[key, k] + cost <= n
        assert d.allowed is want, (t, key, cost)
        if want:
            used[key, k] += cost
        assert used[key, k] <= n  # never more than N in a window


@SETTINGS
@given(cases("sliding-window-log"))
@example(LOG_EXACT_PERIOD)
@example((Limit("sliding-window-log", "3/5s"), [(10109, "a", 2), (10110, "a", 1), (15109, "a", 3),
                                                (15110, "a", 1)]))
def test_sliding_log_is_its_definition(case: Case) -> None:
    limit, events = case
    n, p_ms = int(limit.capacity), int(limit.period * 1000)
    log: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for (t, key, cost), _, d, after in replay(limit, events):
        in_window = sum(c for ts, c in log[key] if t - p_ms < ts <= t)
        want = in_window + cost <= n
        assert d.allowed is want, (t, key, cost)
        if want:
            log[key].append((t, cost))
            # never more than N in any (t - P, t]
            assert sum(c for ts, c in log[key] if t - p_ms < ts <= t) <= n
        # memory per key is bounded by the limit: at most N entries
        assert after is None or len(after) <= n


@SETTINGS
@given(cases("sliding-window-counter"))
@example((Limit("sliding-window-counter", "4/3s"), [(11999, "a", 4), (12000, "a", 1),
                                                    (13500, "a", 2), (14999, "a", 3)]))
def test_sliding_counter_is_cloudflares_estimate(case: Case) -> None:
    limit, events = case
    n, p_ms = int(limit.capacity), int(limit.period * 1000)
    per_window: dict[tuple[str, int], int] = defaultdict(int)
    admitted: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for (t, key, cost), _, d, _ in replay(limit, events):
        k = t // p_ms
        prev, curr = per_window[key, k - 1], per_window[key, k]
        elapsed = t - k * p_ms
        estimate = Fraction(prev * (p_ms - elapsed), p_ms) + curr
        want = estimate + cost <= n
        assert d.allowed is want, (t, key, cost, estimate)
        if want:
            per_window[key, k] += cost
            admitted[key].append((t, cost))
        assert per_window[key, k] <= n  # never more than N in an aligned window
        if per_window[key, k - 1] == 0:  # prev = 0: no sliding window ending here exceeds N
            assert sum(c for ts, c in admitted[key] if t - p_ms < ts <= t) <= n


# -- leaky bucket ----------------------------------------------------------------------------

@SETTINGS
@given(cases("leaky-bucket", keys=1, unit_costs=True))
def test_leaky_bucket_never_has_more_than_burst_plus_one_outstanding(case: Case) -> None:
    limit, events = case
    r, b = limit.per_second, int(limit.burst or 0)
    admitted = [(secs(t), d.delay) for (t, _, _), _, d, _ in replay(limit, events) if d.allowed]
    for i, (ti, _) in enumerate(admitted):
        # In any interval, at most burst + 1 + rate * T are admitted.
        for j, (tj, _) in enumerate(admitted[i:], 1):
            assert j <= b + 1 + r * (tj - ti) + 1e-9, (ti, tj, j)
        # At admission, fewer than burst + 1 admitted requests are still waiting to be served.
        waiting = sum(1 for tj, dj in admitted[:i] if tj + dj > ti + 1e-3)
        assert waiting <= b
    if not limit.nodelay and limit.delay == 0:
        # Queued requests are served 1/r apart (nginx: delay = excess / rate, floored to ms).
        served = [t + dl for t, dl in admitted]
        for s0, s1 in itertools.pairwise(served):
            assert s1 - s0 >= 1 / r - 0.002, (s0, s1)


# -- every algorithm -------------------------------------------------------------------------

@SETTINGS
@given(cases(backwards=True))
def test_rejected_requests_never_change_state(case: Case) -> None:
    limit, events = case
    clock = ManualClock()
    store = MemoryStore()
    limiter = Limiter(limit, store, clock=clock)
    for t, key, cost in events:
        clock.set(secs(t))
        before = store.state(limit, key)
        d = limiter.hit(key, cost)
        if not d.allowed:
            assert store.state(limit, key) == before
        # a read-only peek never changes anything either
        after = store.state(limit, key)
        limiter.peek(key, cost)
        assert store.state(limit, key) == after


@SETTINGS
@given(cases(keys=1))
@example(LOG_EXACT_PERIOD)
def test_retry_after_is_when_the_same_request_succeeds(case: Case) -> None:
    limit, events = case
    algo = get(limit.algorithm)
    for (t, _, cost), before, d, _ in replay(limit, events):
        if d.allowed:
            continue
        now = secs(t)
        if d.retry_after is None:
            assert cost > limit.capacity
            assert not algo.decide(before, now + 1e6, float(cost), limit)[1].allowed
            continue
        assert cost <= limit.capacity and d.retry_after > 0
        assert algo.decide(before, now + d.retry_after + 1e-9, float(cost), limit)[1].allowed
        if d.retry_after > 0.002:  # and not (much) earlier
            assert not algo.decide(before, now + d.retry_after - 0.002, float(cost),
                                   limit)[1].allowed


@SETTINGS
@given(cases(keys=1))
@example(LOG_EXACT_PERIOD)
def test_remaining_is_how_many_unit_requests_fit_now(case: Case) -> None:
    limit, events = case
    algo = get(limit.algorithm)
    for (t, _, _), before, d, after in replay(limit, events):
        state = after if d.allowed else before
        now = secs(t)
        for _ in range(d.remaining):
            state, e = algo.decide(state, now, 1.0, limit)
            assert e.allowed, (t, d)
        assert not algo.decide(state, now, 1.0, limit)[1].allowed, (t, d)


@SETTINGS
@given(cases(keys=1))
def test_reset_after_agrees_with_ttl(case: Case) -> None:
    limit, events = case
    algo = get(limit.algorithm)
    for (t, _, _), _, d, after in replay(limit, events):
        if d.allowed:
            assert abs(d.reset_after - algo.ttl(after, secs(t), limit)) < 1e-6


@SETTINGS
@given(cases(keys=1), st.integers(0, 2000), st.integers(1, 12))
@example((LOG_EXACT_PERIOD[0], LOG_EXACT_PERIOD[1][:1]), 0, 1)  # found by a fresh database
def test_a_recovered_state_decides_like_a_missing_key(case: Case, extra: int,
                                                      unit_cost: int) -> None:
    # any rate (not only exact ms): ttl counts whole ms as decide leaks
    limit, events = case
    algo = get(limit.algorithm)
    cost = float(min(unit_cost, max_cost(limit)))
    (t, _, _), _, _, state = replay(limit, events)[-1]
    assume(state is not None)
    now = secs(t)
    ttl = max(0.0, algo.ttl(state, now, limit))
    at_ms = -(-round((now + ttl) * 1e6) // 1000) + extra  # first ms instant >= now + ttl
    at = secs(at_ms)
    if algo.ttl(state, at, limit) <= 0:
        s1, d1 = algo.decide(state, at, cost, limit)
        s2, d2 = algo.decide(None, at, cost, limit)
        assert_same(d1, d2)
        # ... and what follows is the same too (states may differ by float noise only)
        if d1.allowed:
            for c in (1.0, cost):
                assert_same(algo.decide(s1, at, c, limit)[1], algo.decide(s2, at, c, limit)[1])


#: Clock origins: a monotonic clock shortly after boot, and the Unix time a Redis server's
#: ``TIME`` gives (an ulp there is 0.24 µs).
ORIGINS_US = [10_000_000, 1_764_547_200_000_000]


@st.composite
def microsecond_cases(draw: st.DrawFn) -> tuple[Limit, list[tuple[int, float]]]:
    """A limit (fractional periods too) and ``(t in µs, cost)`` events from either origin.

    Steps favour the boundaries: a whole period, half of one, the limit's window, 1 µs.
    """
    algo = draw(st.sampled_from(ALGOS))
    amount = draw(st.integers(1, 50))
    if algo == "leaky-bucket":
        limit = Limit(algo, Rate(amount, 1.0), burst=draw(st.integers(0, 5)),
                      nodelay=draw(st.booleans()))
    else:
        period = draw(st.sampled_from([0.1, 0.3, 1.0, 2.0, 3.0, 7.0, 60.0, 3600.0]))
        burst = draw(st.integers(1, 10)) if algo in ("token-bucket", "gcra") else None
        limit = Limit(algo, Rate(amount, period), burst=burst)
    whole = algo in ("leaky-bucket", "sliding-window-log")
    cost = st.integers(1, max_cost(limit)).map(float) if whole else st.one_of(
        st.integers(1, max_cost(limit)).map(float), st.floats(0.1, limit.capacity + 2))
    p_us, w_us = round(limit.period * 1e6), round(limit.window * 1e6)
    step = st.one_of(st.just(0), st.integers(-2_000_000, 3_000_000),
                     st.sampled_from([p_us, p_us // 2, w_us, 1, 1000]))
    t = draw(st.sampled_from(ORIGINS_US)) + draw(st.integers(0, 10**10))
    events = []
    for dt, c in draw(st.lists(st.tuples(step, cost), min_size=1, max_size=40)):
        t += dt
        events.append((t, c))
    return limit, events


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(microsecond_cases())
@example((Limit("sliding-window-log", "2/m"), [(10_109_000, 1.0), (70_109_000, 2.0)]))
@example((Limit("sliding-window-log", "1/2s"), [(1_764_547_214_208_000, 1.0),
                                                (1_764_547_216_208_000, 1.0)]))
def test_a_rejection_always_names_a_positive_wait(
        case: tuple[Limit, list[tuple[int, float]]]) -> None:
    """``allowed=False`` with ``retry_after == 0`` would tell a client to retry at once into
    the same rejection: every rejection waits > 0 (or never, ``None``), on any clock."""
    limit, events = case
    algo = get(limit.algorithm)
    state = None
    for t_us, cost in events:
        new, d = algo.decide(state, t_us / 1e6, cost, limit)
        if d.allowed:
            state = new
        else:
            assert d.retry_after is None or d.retry_after > 0, (t_us, cost, d, state)


# -- composite limits through the Limiter ----------------------------------------------------

def snapshot(store: MemoryStore, limits_: list[Limit], keys: str) -> dict[tuple[str, str], Any]:
    return {(lim.name, k): store.state(lim, k) for lim in limits_ for k in [*keys, "*global*"]}


@FEW
@given(st.data())
def test_composite_checks_never_charge_a_limit_when_they_reject(data: st.DataObject) -> None:
    a = data.draw(limits())
    b = data.draw(limits())
    scope = data.draw(st.sampled_from(["key", "global"]))
    b = Limit(b.algorithm, b.rate, burst=b.burst, nodelay=b.nodelay, delay=b.delay,
              name="second", scope=scope)
    a = Limit(a.algorithm, a.rate, burst=a.burst, nodelay=a.nodelay, delay=a.delay, name="first")
    clock = ManualClock()
    store = MemoryStore()
    limiter = Limiter([a, b], store, clock=clock)
    events = data.draw(traces(max(max_cost(a), max_cost(b)), keys=3, n=40))
    use_reserve = data.draw(st.booleans())
    for t, key, cost in events:
        clock.set(secs(t))
        before = snapshot(store, [a, b], "abc")
        d = limiter.reserve(key, cost).decision if use_reserve else limiter.hit(key, cost)
        after = snapshot(store, [a, b], "abc")
        if not d.allowed:
            assert after == before, (t, key, cost, d)
        else:
            # Charged to both, and to nothing else.
            changed = {k for k in before if before[k] != after[k]}
            gkey = key if scope == "key" else "*global*"
            assert changed == {("first", key), ("second", gkey)}
        # The merged decision is the most restrictive one.
        pa = get(a.algorithm).decide(before[("first", key)], secs(t), float(cost), a)[1]
        pb_key = key if scope == "key" else "*global*"
        pb = get(b.algorithm).decide(before[("second", pb_key)], secs(t), float(cost), b)[1]
        assert d.allowed is (pa.allowed and pb.allowed)
        if d.allowed:
            assert d.remaining == min(pa.remaining, pb.remaining)
            assert d.delay == max(pa.delay, pb.delay)
        elif not pa.allowed and not pb.allowed:
            inf = float("inf")
            worst = max(inf if x.retry_after is None else x.retry_after for x in (pa, pb))
            assert (inf if d.retry_after is None else d.retry_after) == worst
        else:
            assert d == (pa if not pa.allowed else pb)
