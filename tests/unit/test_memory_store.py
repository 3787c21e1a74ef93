"""MemoryStore: bounded like an nginx zone, LRU with recovered keys evicted first, idle expiry,
and correct under concurrency (threads and asyncio tasks on one key)."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable, Iterator

import pytest

from ratekeeper import AsyncLimiter, InvalidLimit, Limit, Limiter, MemoryStore
from ratekeeper.testing import ManualClock

ALGOS = ["token-bucket", "gcra", "leaky-bucket", "fixed-window", "sliding-window-log",
         "sliding-window-counter"]

NEVER_RECOVERS = Limit("token-bucket", "1/h", burst=5)  # within these tests' time spans


# -- construction and inspection -------------------------------------------------------------

@pytest.mark.parametrize("max_keys", [0, -1, True, 1.5, "10", None])
def test_max_keys_is_validated(max_keys: object) -> None:
    with pytest.raises(InvalidLimit) as e:
        MemoryStore(max_keys=max_keys)  # type: ignore[arg-type]
    assert repr(max_keys) in str(e.value)


def test_inspection() -> None:
    store = MemoryStore(max_keys=10)
    lim = Limit("gcra", "1/s", burst=2, name="api")
    assert len(store) == 0 and store.keys(lim) == 0 and store.state(lim, "a") is None
    store.decide_one(lim, "a", 1, 0.0)
    store.decide_one(lim, "b", 1, 0.0)
    assert len(store) == 2 and store.keys(lim) == 2
    assert store.state(lim, "a") == 1.0
    assert "max_keys=10" in repr(store) and "'api': 2" in repr(store)


def test_reset_and_clear() -> None:
    store = MemoryStore()
    a = Limit("gcra", "1/s", burst=1, name="a")
    b = Limit("gcra", "1/s", burst=1, name="b")
    limiter = Limiter([a, b], store, clock=ManualClock())
    single = Limiter(a, store, clock=ManualClock())
    limiter.hit("k")
    store.reset([a], "k")
    assert store.state(a, "k") is None and store.state(b, "k") == 1.0
    store.reset([a, b], "missing")
    single.hit("k")
    store.clear()
    assert len(store) == 0
    # Limiters bound to the store before clear() still work and see the cleared state.
    assert single.hit("k").allowed and not single.hit("k").allowed
    assert store.state(a, "k") == 1.0


def test_a_reloaded_limit_keeps_its_state() -> None:
    store = MemoryStore()
    old = Limit("gcra", "1/s", burst=1, name="api")
    new = Limit("gcra", "1/s", burst=3, name="api")  # same name, a bigger burst
    assert store.decide_one(old, "k", 1, 0.0).allowed
    assert not store.decide_one(old, "k", 1, 0.0).allowed
    d = store.decide_one(new, "k", 1, 0.0)  # tat = 1 read against burst 3: 2 tokens left
    assert d.allowed and d.remaining == 1
    other = Limit("fixed-window", "1/s", name="api")  # another algorithm: starts afresh
    assert store.decide_one(other, "k", 1, 0.0).remaining == 0
    assert store.state(other, "k") == (0, 1.0)


def test_a_reload_to_another_algorithm_keeps_hit_and_peek_consistent() -> None:
    store = MemoryStore()
    clock = ManualClock()
    old = Limiter(Limit("gcra", "1/s", burst=1, name="api"), store, clock=clock)
    new = Limiter(Limit("fixed-window", "1/s", name="api"), store, clock=clock)
    assert new.hit("k").allowed and not new.hit("k").allowed
    old.peek("k")  # an in-flight request on the old policy
    assert not new.peek("k").allowed  # peek agrees with hit
    new.reset("k")
    assert new.hit("k").allowed  # and reset reaches the state hit() uses


def test_a_failing_decision_loses_nothing() -> None:
    store = MemoryStore()
    lim = Limit("token-bucket", "1/s", burst=3)
    store.decide_one(lim, "k", 1, 0.0)
    before = store.state(lim, "k")
    with pytest.raises(TypeError):
        store.decide_one(lim, "k", "x", 0.0)  # type: ignore[arg-type]
    assert store.state(lim, "k") == before


def test_peek_and_rejected_composites_write_nothing() -> None:
    store = MemoryStore()
    a = Limit("token-bucket", "1/s", burst=1, name="a")
    b = Limit("token-bucket", "1/s", burst=2, name="b")
    ds, at = store.decide([(a, "k", 1.0), (b, "k", 1.0)], 5.0, consume=False)
    assert at == 5.0 and all(d.allowed for d in ds) and len(store) == 0
    store.decide([(a, "k", 1.0), (b, "k", 1.0)], 5.0)
    ds, _ = store.decide([(a, "k", 1.0), (b, "k", 1.0)], 5.0)
    assert [d.allowed for d in ds] == [False, True]
    assert store.state(b, "k") == (1.0, 5.0)  # not charged


# -- bounds and eviction ---------------------------------------------------------------------

@pytest.mark.parametrize("max_keys", [2, 10, 100, 1000])
def test_max_keys_is_never_exceeded(max_keys: int) -> None:
    store = MemoryStore(max_keys=max_keys)
    decide = store.bind(NEVER_RECOVERS)
    high = 0
    for i in range(max_keys * 10):
        assert decide(f"k{i}", 1, 0.0).allowed
        high = max(high, store.keys(NEVER_RECOVERS))
    assert high <= max_keys
    assert store.evicted >= max_keys * 9 and store.expired == 0


def test_the_bound_is_per_limit() -> None:
    store = MemoryStore(max_keys=50)
    a = Limit("gcra", "1/h", burst=5, name="a")
    b = Limit("gcra", "1/h", burst=5, name="b")
    limiter = Limiter([a, b], store, clock=ManualClock())
    for i in range(500):
        limiter.hit(f"k{i}")
        assert store.keys(a) <= 50 and store.keys(b) <= 50


def test_recovered_keys_are_evicted_before_unrecovered_ones() -> None:
    lim = Limit("token-bucket", "1/s", burst=10)
    store = MemoryStore(max_keys=100, sweep_every=10**9)  # eviction alone, no expiry sweeps
    store.decide_one(lim, "busy0", 10, 0.0)  # empty bucket: recovers at t = 10
    store.decide_one(lim, "busy1", 10, 0.0)
    store.decide_one(lim, "idle2", 1, 0.0)  # recovers at t = 1
    store.decide_one(lim, "idle3", 1, 0.0)
    for i in range(4, 100):
        store.decide_one(lim, f"k{i}", 10, 5.0)
    assert store.keys(lim) == 100
    store.decide_one(lim, "new", 10, 5.0)  # one too many at t = 5
    assert store.keys(lim) <= 100
    assert store.state(lim, "idle2") is None and store.state(lim, "idle3") is None
    assert store.state(lim, "busy0") is not None and store.state(lim, "busy1") is not None
    assert store.evicted == 0 and store.expired == 2
    # Nothing recovered at the LRU end any more: the least recently used go.
    store.decide_one(lim, "newer", 10, 5.0)  # back at 100 keys
    assert store.state(lim, "busy0") is not None
    store.decide_one(lim, "newest", 10, 5.0)
    assert store.state(lim, "busy0") is None and store.state(lim, "busy1") is None
    assert store.state(lim, "newest") is not None and store.evicted == 2
    assert store.keys(lim) == 99


def test_a_hot_key_survives_a_flood_of_distinct_keys() -> None:
    store = MemoryStore(max_keys=1000)
    clock = ManualClock()
    limiter = Limiter(NEVER_RECOVERS, store, clock=clock)
    limiter.hit("cold")
    admitted_hot = 0
    for i in range(20_000):
        assert limiter.hit(f"flood{i}").allowed
        if i % 100 == 0:
            admitted_hot += limiter.hit("hot").allowed
    # 200 hits on "hot": only its burst of 5 passed, so its state was never forgotten.
    assert admitted_hot == 5
    assert store.state(NEVER_RECOVERS, "hot") is not None
    assert store.state(NEVER_RECOVERS, "cold") is None  # least recently used: evicted
    assert store.keys(NEVER_RECOVERS) <= 1000


def test_rejections_also_refresh_a_keys_recency() -> None:
    lim = Limit("token-bucket", "1/h", burst=1)
    store = MemoryStore(max_keys=10)
    decide = store.bind(lim)
    decide("hot", 1, 0.0)
    for i in range(100):
        decide(f"k{i}", 1, 0.0)
        assert not decide("hot", 1, 0.0).allowed  # still remembered: still rejected


def test_max_keys_one_keeps_the_most_recent_key() -> None:
    store = MemoryStore(max_keys=1)
    store.decide_one(NEVER_RECOVERS, "a", 1, 0.0)
    store.decide_one(NEVER_RECOVERS, "b", 1, 0.0)
    assert store.state(NEVER_RECOVERS, "b") == (4.0, 0.0)


# -- expiry ----------------------------------------------------------------------------------

def test_sweep_drops_recovered_keys_only() -> None:
    lim = Limit("token-bucket", "1/s", burst=2)
    store = MemoryStore()
    for i in range(10):
        store.decide_one(lim, f"short{i}", 1, 0.0)  # recovered at t = 1
        store.decide_one(lim, f"long{i}", 2, 0.0)  # recovered at t = 2
    assert store.sweep(0.5) == 0
    assert store.sweep(1.0) == 10
    assert store.keys(lim) == 10 and store.expired == 10
    assert all(store.state(lim, f"long{i}") is not None for i in range(10))
    assert store.sweep(2.0) == 10 and len(store) == 0


def test_sweep_defaults_to_the_store_clock() -> None:
    lim = Limit("token-bucket", "1/s", burst=1)
    store = MemoryStore()
    store.decide_one(lim, "k", 1, -1e9)  # long ago on the monotonic scale
    assert store.sweep() == 1


@pytest.mark.parametrize("algo", ALGOS)
def test_sweep_for_every_algorithm(algo: str) -> None:
    lim = (Limit(algo, "2/s", burst=2) if algo in ("token-bucket", "gcra")
           else Limit(algo, "2r/s", burst=1) if algo == "leaky-bucket" else Limit(algo, "2/s"))
    store = MemoryStore()
    store.decide_one(lim, "k", 1, 0.0)
    assert store.sweep(0.0) == 0
    assert store.sweep(0.25) == 0
    assert store.sweep(10.0) == 1


def test_idle_keys_expire_as_new_keys_arrive() -> None:
    lim = Limit("token-bucket", "1/s", burst=1)
    store = MemoryStore(sweep_every=10)
    for i in range(10):
        store.decide_one(lim, f"old{i}", 1, 0.0)
    for i in range(10):
        store.decide_one(lim, f"new{i}", 1, 100.0)
    assert store.keys(lim) == 10 and store.expired == 10
    assert store.state(lim, "old0") is None and store.state(lim, "new9") is not None


# -- concurrency -----------------------------------------------------------------------------

THREADS = 16


@pytest.fixture
def tight_switching() -> Iterator[None]:
    """Make the interpreter switch threads as often as it can, to shake out races."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def concurrent_limit(algo: str) -> Limit:
    if algo in ("token-bucket", "gcra"):
        return Limit(algo, "10/s", burst=50)
    if algo == "leaky-bucket":
        return Limit(algo, "10r/s", burst=49, nodelay=True)
    return Limit(algo, "50/s")


def run_threads(work: Callable[[int], None]) -> None:
    errors: list[BaseException] = []

    def target(i: int) -> None:
        try:
            work(i)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=target, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors


def sequential_admitted(limit: Limit, times: list[float], per_instant: int) -> list[int]:
    clock = ManualClock()
    limiter = Limiter(limit, MemoryStore(), clock=clock)
    out = []
    for t in times:
        clock.set(t)
        out.append(sum(limiter.hit("one-key").allowed for _ in range(per_instant)))
    return out


@pytest.mark.usefixtures("tight_switching")
@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("cost_type", [int, float])  # the bound fast path and the general path
def test_threads_on_one_key_admit_exactly_what_a_sequential_run_would(
    algo: str, cost_type: type
) -> None:
    limit = concurrent_limit(algo)
    clock = ManualClock()
    limiter = Limiter(limit, MemoryStore(), clock=clock)
    per_thread = 20
    times = [0.0, 0.0, 0.7, 1.5, 1.5, 4.0]
    expected = sequential_admitted(limit, times, THREADS * per_thread)
    start = threading.Barrier(THREADS + 1)
    done = threading.Barrier(THREADS + 1)
    counts = [[0] * len(times) for _ in range(THREADS)]

    def work(i: int) -> None:
        for phase in range(len(times)):
            start.wait()
            for _ in range(per_thread):
                counts[i][phase] += limiter.hit("one-key", cost_type(1)).allowed
            done.wait()

    def main() -> None:
        for t in times:
            clock.set(t)  # time advances deterministically, between phases
            start.wait()
            done.wait()

    driver = threading.Thread(target=main)
    driver.start()
    run_threads(work)
    driver.join(timeout=60)
    got = [sum(c[p] for c in counts) for p in range(len(times))]
    assert got == expected
    assert expected[0] == 50  # the whole burst at t = 0, and not one more


@pytest.mark.usefixtures("tight_switching")
def test_threads_on_a_composite_never_over_admit() -> None:
    per_key = Limit("gcra", "1/s", burst=5, name="per-key")
    glob = Limit("gcra", "1/s", burst=40, name="global", scope="global")
    store = MemoryStore()
    limiter = Limiter([per_key, glob], store, clock=ManualClock())
    admitted = [0] * THREADS

    def work(i: int) -> None:
        for _ in range(20):
            admitted[i] += limiter.hit(f"user{i % 8}").allowed

    run_threads(work)
    assert sum(admitted) == 40  # 8 users x 5 = 40 = the global burst
    for u in range(8):
        assert admitted[u] + admitted[u + 8] == 5
    assert store.state(glob, "*global*") == 40.0


@pytest.mark.usefixtures("tight_switching")
def test_threads_with_reservations_refund_exactly() -> None:
    lim = Limit("token-bucket", "1/s", burst=100)
    store = MemoryStore()
    limiter = Limiter(lim, store, clock=ManualClock())

    def work(i: int) -> None:
        for _ in range(50):
            r = limiter.reserve("k")
            if r.ok:
                r.cancel()

    run_threads(work)
    assert store.state(lim, "k") is None  # every token came back: a full bucket


@pytest.mark.parametrize("algo", ALGOS)
async def test_asyncio_tasks_on_one_key(algo: str) -> None:
    limit = concurrent_limit(algo)
    clock = ManualClock()
    limiter = AsyncLimiter(limit, MemoryStore(), clock=clock, sleep=clock.asleep)
    expected = sequential_admitted(limit, [0.0], 16 * 10)[0]

    async def task() -> int:
        n = 0
        for _ in range(10):
            n += (await limiter.hit("one-key")).allowed
            await asyncio.sleep(0)  # interleave with the other tasks
        return n

    got = await asyncio.gather(*(task() for _ in range(16)))
    assert sum(got) == expected == 50
