"""The memory store's specialised hot paths decide exactly as the pure algorithms.

`ratekeeper.stores._memory_hot` writes each algorithm's ``decide`` out inline with the
limit's numbers bound; the pure function stays the reference. On random traces (keys, costs
in and out of the fast path's range, instants going forwards and backwards) every decision
and every stored state must equal, bit for bit, what the pure function gives on the same
state.
"""

from __future__ import annotations

import random
import sys
import threading
from collections.abc import Iterator

import pytest

from ratekeeper import Limit, Limiter, MemoryStore
from ratekeeper.algorithms import get as get_algorithm
from ratekeeper.stores import _memory_hot
from ratekeeper.stores.memory import _Mutex

RATES = ["1/s", "3/s", "10/s", "7/2s", "100/s", "5/minute", "0.5/s"]


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
    return Limit(algorithm, rate)


def _steps(rng: random.Random, limit: Limit, n: int) -> Iterator[tuple[float, str, int]]:
    most = max(1, int(limit.capacity))
    for _ in range(n):
        dt = rng.choice([0.0, 0.0, 1e-9, 0.001, 0.05, 0.3, 1.0, 2.5, 61.0, -0.2, -1.5])
        yield dt, rng.choice(["a", "b", "c"]), rng.choice([1, 1, 1, 2, most, most + 1])


@pytest.mark.parametrize("algorithm", sorted(_memory_hot.HOT))
@pytest.mark.parametrize("seed", range(40))
def test_hot_path_equals_the_pure_function_on_random_traces(algorithm: str, seed: int) -> None:
    rng = random.Random(f"{algorithm}-{seed}")
    limit = _limit(algorithm, rng)
    clock = _Clock()
    store = MemoryStore()
    limiter = Limiter(limit, store, clock=clock)
    # the specialised function is the one taking the calls
    assert limiter.hit.__qualname__ == f"{_memory_hot.HOT[algorithm].__name__}.<locals>.hit"
    decide = get_algorithm(algorithm).decide
    model: dict[str, object] = {}
    for dt, key, cost in _steps(rng, limit, 300):
        clock.now += dt
        got = limiter.hit(key, cost)
        new, want = decide(model.get(key), clock.now, cost, limit)
        if new is not None:
            model[key] = new
        assert tuple(got) == tuple(want), (key, cost, clock.now)
        assert type(got) is type(want)
        assert [type(v) for v in got] == [type(v) for v in want]
        assert store.state(limit, key) == model.get(key)


@pytest.mark.parametrize("algorithm", sorted(_memory_hot.HOT))
def test_hot_path_rejects_a_bad_new_key_and_keeps_state_of_known_ones(algorithm: str) -> None:
    limit = _limit(algorithm, random.Random(1))
    clock = _Clock()
    store = MemoryStore()
    limiter = Limiter(limit, store, clock=clock)
    limiter.hit("good")
    before = store.state(limit, "good")
    with pytest.raises(Exception, match="key"):
        limiter.hit("bad\n")
    assert store.state(limit, "bad\n") is None
    assert store.state(limit, "good") == before
    assert len(store) == 1


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
