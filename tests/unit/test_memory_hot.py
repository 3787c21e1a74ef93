"""The memory store decides exactly as the pure algorithms, in both of its forms.

Where the install built it, `_memory_hot_c` (the compiled twin) decides: each algorithm's
``decide`` in C types with the limit's numbers bound; the pure function stays the reference.
Without it (or with ``RATEKEEPER_PURE_PYTHON=1``) the store calls the pure ``decide`` itself.
On random traces (keys, costs in and out of the compiled path's range, instants going
forwards and backwards, long idle gaps, Unix-time magnitudes, a clock that returns ints)
every decision and every stored state must equal, bit for bit, what the pure function gives
on the same state.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import subprocess
import sys
import threading
import warnings
from collections.abc import Iterator

import pytest

from ratekeeper import InvalidKey, Limit, Limiter, MemoryStore
from ratekeeper._compiled import PURE_PYTHON_ENV
from ratekeeper.algorithms import get as get_algorithm
from ratekeeper.stores import memory
from ratekeeper.stores.memory import _Mutex

RATES = ["1/s", "3/s", "10/s", "7/2s", "100/s", "5/minute", "0.5/s"]
ALGORITHMS = ["fixed-window", "gcra", "leaky-bucket", "sliding-window-counter",
              "sliding-window-log", "token-bucket"]


def _require_compiled() -> memory._Compiled:
    if memory.COMPILED is None:
        if os.environ.get("CI"):  # CI builds it (RATEKEEPER_REQUIRE_EXTENSIONS in .ci/run)
            pytest.fail("the compiled twin (_memory_hot_c) is not built")
        pytest.skip("the compiled twin (_memory_hot_c) is not built here")
    return memory.COMPILED


#: (form, algorithm): the compiled twin for every algorithm, and the pure path.
CASES = [("compiled", a) for a in ALGORITHMS] + [("pure", a) for a in ALGORITHMS]


@pytest.fixture
def implementation(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Makes `MemoryStore.bind_hit` use one form for this test; its algorithm is returned."""
    name, algorithm = request.param
    if name == "compiled":
        _require_compiled()
    else:
        monkeypatch.setattr(memory, "COMPILED", None)
    return f"{name}:{algorithm}"

class _Clock:
    """A clock the trace sets directly (forwards and backwards)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _limit(algorithm: str, rng: random.Random) -> Limit:
    rate = rng.choice(RATES)
    if algorithm in ("gcra", "token-bucket"):
        return Limit(algorithm, rate, burst=rng.choice([None, 1, 2, 2.5, 5, 20]))
    if algorithm == "leaky-bucket":
        burst = rng.choice([None, 0, 1, 3, 10])
        shape = rng.choice([{}, {"nodelay": True}, {"delay": 2}])
        if shape.get("delay") and not burst:
            shape = {}
        return Limit(algorithm, rate, burst=burst, **shape)  # type: ignore[arg-type]
    return Limit(algorithm, rate)


def _on_hot_path(implementation: str, key: str, cost: float, limit: Limit,
                 int_clock: bool) -> bool:
    """Whether `Limiter.hit` takes the store's bound path (else the limiter's general path,
    which hands the store its cost as a float: a sliding log then logs 1.0, not 1)."""
    if key.__class__ is not str:
        return False
    if implementation.startswith("pure:"):  # any positive int cost, at any clock
        return cost.__class__ is int and cost > 0
    if int_clock:
        return False
    most = min(math.floor(limit.capacity), 2**53)
    if cost.__class__ is int:
        return 0 < cost <= most
    return cost.__class__ is float and 0 < cost <= most and cost.is_integer()


def _kept(algorithm: str, state: object) -> object:
    """`state` as MemoryStore gives it back: through its algorithm's compact form."""
    form = get_algorithm(algorithm).memory
    return state if state is None or form is None else form.unpack(form.pack(state))


class _Key(str):
    """A str subclass: the hot paths leave it to the general path."""


def _steps(rng: random.Random, limit: Limit, n: int) -> Iterator[tuple[float, str, float]]:
    most = max(1, int(limit.capacity))
    for _ in range(n):
        dt = rng.choice([0.0, 0.0, 1e-9, 0.001, 0.05, 0.3, 1.0, 2.5, 61.0, -0.2, -1.5,
                         0.0005, 0.0015, -61.0, 3e6 if rng.random() < 0.05 else 0.1])
        key = rng.choice(["a", "b", "c", "a", "b", "c", _Key("a")])
        yield dt, key, rng.choice([1, 1, 1, 2, most, most + 1, 2**70 if rng.random() < 0.1 else 1,
                                   0.5 if rng.random() < 0.1 else 1, 1.0, float(most)])


@pytest.mark.parametrize("implementation", CASES, indirect=True, ids="-".join)
@pytest.mark.parametrize("seed", range(40))
def test_hot_path_equals_the_pure_function_on_random_traces(implementation: str,
                                                            seed: int) -> None:
    algorithm = implementation.split(":")[1]
    rng = random.Random(f"{algorithm}-{seed}")
    limit = _limit(algorithm, rng)
    clock = _Clock()
    clock.now = rng.choice([1000.0, 1000.0, 1.7e9 + rng.random(), 0.25])
    int_clock = rng.random() < 0.2  # a clock returning ints goes to the general path
    store = MemoryStore()
    limiter = Limiter(limit, store, clock=(lambda: int(clock.now)) if int_clock else clock)
    # the form under test is the one taking the calls
    hit = limiter.hit
    if implementation.startswith("compiled:"):
        assert type(hit.__self__).__module__ == "ratekeeper.stores._memory_hot_c"
    else:
        assert hit.__qualname__ == "MemoryStore.bind_hit.<locals>.hit"
    decide = get_algorithm(algorithm).decide
    model: dict[str, object] = {}
    for dt, key, cost in _steps(rng, limit, 300):
        clock.now += dt
        now: float = int(clock.now) if int_clock else clock.now
        try:
            got = hit(key, cost)
        except Exception as e:  # a cost too large for the general path: the same error
            with pytest.raises(type(e)):
                limiter.peek(key, cost)
            continue
        given = cost if _on_hot_path(implementation, key, cost, limit, int_clock) \
            else float(cost)
        new, want = decide(model.get(key), now, given, limit)
        if new is not None:
            model[key] = _kept(algorithm, new)  # what the store keeps: its compact form
        assert tuple(got) == tuple(want), (key, cost, now)
        assert type(got) is type(want)
        assert [type(v) for v in got] == [type(v) for v in want]
        # repr: equal values of other types (an int cost logged as 1.0) would compare equal
        assert repr(store.state(limit, key)) == repr(_kept(algorithm, model.get(key)))


@pytest.mark.parametrize("implementation", CASES, indirect=True, ids="-".join)
def test_hot_path_rejects_a_bad_new_key_and_keeps_state_of_known_ones(implementation: str
                                                                      ) -> None:
    algorithm = implementation.split(":")[1]
    limit = _limit(algorithm, random.Random(1))
    clock = _Clock()
    store = MemoryStore()
    limiter = Limiter(limit, store, clock=clock)
    limiter.hit("good")
    before = store.state(limit, "good")
    for bad, why in [("bad\n", "non-printable"), ("", "empty"),
                     ("k" * (limiter.max_key_length + 1), "max_key_length")]:
        with pytest.raises(InvalidKey, match=why):
            limiter.hit(bad)
        assert store.state(limit, bad) is None
    limiter.hit("k" * limiter.max_key_length)  # the longest key allowed
    assert store.state(limit, "good") == before
    assert len(store) == 2


def test_mutex_admits_one_thread_at_a_time() -> None:
    # A read-modify-write of a shared counter with a thread switch forced in between: any
    # two threads inside at once would lose an increment.
    mutex = _Mutex()
    counter = [0]
    rounds, threads = 2000, 8

    def work() -> None:
        for _ in range(rounds):
            with mutex:
                v = counter[0]
                sys.getswitchinterval()  # a call: a point where the GIL may switch
                counter[0] = v + 1

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        ts = [threading.Thread(target=work) for _ in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert counter[0] == rounds * threads


@pytest.mark.parametrize("implementation", [c for c in CASES if c[1] in ("gcra", "token-bucket")],
                         indirect=True, ids="-".join)
@pytest.mark.parametrize("rate,burst", [("10/s", 10), ("7/2s", 5), ("100/s", 100)])
def test_hot_path_admits_exactly_the_burst_at_unix_time(implementation: str, rate: str,
                                                        burst: int) -> None:
    # Found by the random traces above: the hot paths lacked the pure functions' float-drift
    # tolerance, so at Unix-time magnitudes a full bucket admitted one request less.
    algorithm = implementation.split(":")[1]
    limit = Limit(algorithm, rate, burst=burst)
    clock = _Clock()
    clock.now = 1_764_590_400.123
    limiter = Limiter(limit, MemoryStore(), clock=clock)
    for _ in range(3):
        got = [bool(limiter.hit("k")) for _ in range(burst + 1)]
        assert got == [True] * burst + [False], got.count(True)
        clock.now += burst / limit.per_second


def test_the_compiled_hot_path_is_not_used_when_switched_off_or_stale(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _require_compiled()  # fails under CI, skips elsewhere
    from ratekeeper.stores import _memory_hot_c  # noqa: PLC0415  (absent where not built)

    assert memory._compiled() is not None
    monkeypatch.setenv(PURE_PYTHON_ENV, "1")
    assert memory._compiled() is None
    monkeypatch.delenv(PURE_PYTHON_ENV)
    monkeypatch.setattr(_memory_hot_c, "SOURCE_SHA256", "0" * 64)  # built from another source
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert memory._compiled() is None
    assert "older _memory_hot_c.pyx" in str(caught[0].message)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("seed", range(20))
def test_decide_one_at_a_callers_clock_equals_the_pure_function(algorithm: str,
                                                                seed: int) -> None:
    # MemoryStore.decide_one (the middleware's, the service's and replay's call) takes the
    # compiled path at the caller's own `now` where it is built.
    _require_compiled()
    rng = random.Random(f"at-{algorithm}-{seed}")
    limit = _limit(algorithm, rng)
    store = MemoryStore()
    now: float = rng.choice([1000.0, 1.7e9 + rng.random(), 0.25])
    decide = get_algorithm(algorithm).decide
    model: dict[str, object] = {}
    for dt, key, cost in _steps(rng, limit, 300):
        now += dt
        if cost > 2**60:
            continue  # the core refuses such costs before a store sees them
        got = store.decide_one(limit, key, cost, now)
        new, want = decide(model.get(key), now, cost, limit)
        if new is not None:
            model[key] = _kept(algorithm, new)  # what the store keeps: its compact form
        assert tuple(got) == tuple(want), (key, cost, now)
        assert [type(v) for v in got] == [type(v) for v in want]
        # repr: equal values of other types (an int cost logged as 1.0) would compare equal
        assert repr(store.state(limit, key)) == repr(_kept(algorithm, model.get(key)))
    assert store._at[id(limit)][1] is not None  # the compiled path took these calls


@pytest.mark.parametrize("seed", range(60))
def test_several_checks_decide_as_the_general_path(seed: int) -> None:
    # MemoryStore.decide of several charged checks (a per-key limit with a global one, the
    # service's and the middleware's composites) takes the compiled all-or-nothing call
    # where it is built; the store's general path (`_decide`) is the reference.
    _require_compiled()
    rng = random.Random(f"all-{seed}")
    limits = [_limit(rng.choice(ALGORITHMS), rng) for _ in range(rng.choice([2, 2, 3]))]
    limits = [dataclasses.replace(lim, name=f"l{i}") for i, lim in enumerate(limits)]
    fast, ref = MemoryStore(), MemoryStore()
    now: float = rng.choice([1000.0, 1.7e9 + rng.random()])
    for step in range(200):
        now += rng.choice([0.0, 0.001, 0.05, 0.3, 1.0, -0.2, 2.5])
        key = rng.choice(["a", "b", "c"])
        cost = rng.choice([1, 1, 2, 1.0, 3])
        checks = [(lim, key if rng.random() < 0.8 else "global", cost) for lim in limits]
        got, _ = fast.decide(checks, now)
        want, _ = ref._decide(checks, now, True)
        assert [tuple(d) for d in got] == [tuple(d) for d in want], (step, checks)
        assert [[type(v) for v in d] for d in got] == [[type(v) for v in d] for d in want]
        for lim in limits:
            for k in ("a", "b", "c", "global"):
                assert repr(fast.state(lim, k)) == repr(ref.state(lim, k)), (step, lim, k)
    assert all(fast._at[id(lim)][1] is not None for lim in limits)  # the compiled call ran


INF, NAN = float("inf"), float("nan")


@pytest.mark.parametrize("limit,steps", [
    # a complex state read as C's double complex: NaN tokens after an infinite or NaN clock
    (Limit("token-bucket", "10/s", burst=5), [(1.0, 1), (INF, 1), (2.0, 1), (1e6, 1)]),
    (Limit("token-bucket", "10/s", burst=5), [(1.0, 1), (NAN, 1), (2.0, 1)]),
    (Limit("sliding-window-log", "10/s"), [(-0.0, 1), (0.0, 1)]),  # and a lost -0.0
    # _live's "ts > cutoff" for a NaN instant
    (Limit("sliding-window-log", "2/s"), [(NAN, 1), (1.0, 1), (2.0, 1), (1000.0, 1)]),
    (Limit("sliding-window-log", "10/s"), [(1.0, 1), (NAN, 1)]),
    # a log's sum of int costs past 2**53 (exact in Python, rounded in doubles)
    (Limit("sliding-window-log", "9007199254740992/s"), [(0.0, 1), (0.5, 1), (1.2, 2**53)]),
    (Limit("sliding-window-log", "18014398509481984/10s"),
     [(0.0, 1), (5.0, 2**53), (11.0, 1), (12.0, 2**53)]),
    # leaky-bucket: an int past 2**53 divided by 1000 (rounded once in Python)
    (Limit("leaky-bucket", "1r/s"), [(9007199254740.021, 1), (0.0, 1)]),
    # leaky-bucket: a delay= past 64 bits
    (Limit("leaky-bucket", "10r/s", burst=3, delay=10**16), [(1.0, 1), (1.05, 1)]),
], ids=["tb-inf-clock", "tb-nan-clock", "log-minus-zero", "log-nan-head", "log-nan-tail",
        "log-sum-2**53", "log-sum-2**54", "leaky-past-2**53", "leaky-huge-delay"])
def test_edge_traces_found_by_review_decide_as_the_pure_function(limit: Limit,
                                                                 steps: list[tuple[float, int]]
                                                                 ) -> None:
    # Each of these once decided differently on the compiled path (a review's counterexamples).
    _require_compiled()
    store = MemoryStore()
    decide = get_algorithm(limit.algorithm).decide
    model: object = None
    for now, cost in steps:
        got = store.decide_one(limit, "k", cost, now)
        new, want = decide(model, now, cost, limit)
        if new is not None:
            model = _kept(limit.algorithm, new)
        assert repr(tuple(got)) == repr(tuple(want)), (now, cost)
        assert [type(v) for v in got] == [type(v) for v in want]
        assert repr(store.state(limit, "k")) == repr(model), (now, cost)


def test_several_checks_given_as_lists_take_the_general_path() -> None:
    # The compiled composite read each check as a tuple without looking (a crash on lists).
    _require_compiled()
    g, f = Limit("gcra", "10/s", burst=5), Limit("fixed-window", "10/s")
    got, _ = MemoryStore().decide([[g, "k", 1], [f, "k", 1]], 1.0)  # type: ignore[list-item]
    want, _ = MemoryStore()._decide([(g, "k", 1), (f, "k", 1)], 1.0, True)
    assert [tuple(d) for d in got] == [tuple(d) for d in want]


def test_the_compiled_path_sweeps_on_the_tables_count_of_inserts() -> None:
    # One count for every path (it kept its own, so sweeps, and states, came at other times).
    _require_compiled()
    lim = Limit("gcra", "10/s", burst=5)
    fast, ref = MemoryStore(sweep_every=2, sweep_grace=0), MemoryStore(sweep_every=2,
                                                                        sweep_grace=0)
    for store, one in ((fast, fast.decide_one), (ref, None)):
        for key, cost, now in [("a", 0.5, 0.0), ("b", 1, 100.0), ("c", 1, 100.5)]:
            if one is not None:
                one(lim, key, cost, now)
            else:
                store._decide([(lim, key, cost)], now, True)
    assert [repr(fast.state(lim, k)) for k in "abc"] == [repr(ref.state(lim, k)) for k in "abc"]


def test_pure_python_binds_the_algorithms_own_decide() -> None:
    # One pure form: with the compiled twin switched off, a limiter's bound hit is the store's
    # general path around the algorithm's `decide` (there is no second, hand-inlined copy).
    code = ("from ratekeeper import Limit, Limiter, MemoryStore\n"
            "for a in ('gcra', 'token-bucket', 'fixed-window'):\n"
            "    print(Limiter(Limit(a, '10/s'), MemoryStore()).hit.__qualname__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, PURE_PYTHON_ENV: "1"}).stdout
    assert out.split() == ["MemoryStore.bind_hit.<locals>.hit"] * 3
