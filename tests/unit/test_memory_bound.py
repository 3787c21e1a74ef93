"""A flood of distinct keys must not grow a MemoryStore past its bound (nginx zone semantics).

Memory is measured with tracemalloc and compared with what the same store holds when it is
exactly full, never with a hard-coded number of bytes.
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable, Iterator

import pytest

from ratekeeper import Limit, MemoryStore

FLOOD = 1_000_000


@pytest.fixture
def tracing() -> Iterator[None]:
    gc.collect()
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()


def traced_fill(decide: Callable[[str, float, float], object], start: int, n: int) -> int:
    """Bytes allocated (and still held) while deciding keys start .. start + n - 1."""
    tracemalloc.clear_traces()
    for i in range(start, start + n):
        decide(f"key:{i}", 1, 0.0)
    return tracemalloc.get_traced_memory()[0]


@pytest.mark.slow
@pytest.mark.usefixtures("tracing")
def test_a_million_distinct_keys_stay_within_the_bound() -> None:
    max_keys = 10_000
    lim = Limit("gcra", "1/h", burst=5)  # no key recovers: every eviction is a forced one
    store = MemoryStore(max_keys=max_keys)
    decide = store.bind(lim)
    full = traced_fill(decide, 0, max_keys)  # what a full table costs
    assert store.keys(lim) == max_keys

    # The bulk of the flood, untraced (tracemalloc would make it ten times slower) ...
    tracemalloc.stop()
    for i in range(max_keys, FLOOD - 10 * max_keys):
        decide(f"key:{i}", 1, 0.0)
        if i % 50_000 == 0:
            assert store.keys(lim) <= max_keys
    tracemalloc.start()
    # ... and the last ten table-fulls traced: by the end every key held was allocated while
    # tracing, so the traced total is what the table holds after a million keys.
    tracemalloc.reset_peak()
    after = traced_fill(decide, FLOOD - 10 * max_keys, 10 * max_keys)
    _, peak = tracemalloc.get_traced_memory()

    assert store.keys(lim) <= max_keys
    assert len(store) <= max_keys
    assert store.evicted >= FLOOD - 2 * max_keys
    assert after <= 2 * full, (after, full)  # bounded: an unbounded table would be 100x
    assert peak <= 3 * full, (peak, full)
    assert full / max_keys < 400  # sanity: bytes per key of the measurement itself


@pytest.mark.parametrize("algo", ["token-bucket", "gcra", "leaky-bucket", "fixed-window",
                                  "sliding-window-log", "sliding-window-counter"])
@pytest.mark.usefixtures("tracing")
def test_every_algorithm_stays_within_the_bound(algo: str) -> None:
    max_keys = 500
    lim = (Limit(algo, "1/h", burst=3) if algo in ("token-bucket", "gcra")
           else Limit(algo, "1/1000s", burst=3) if algo == "leaky-bucket" else Limit(algo, "3/h"))
    store = MemoryStore(max_keys=max_keys)
    decide = store.bind(lim)
    full = traced_fill(decide, 0, max_keys)
    tracemalloc.reset_peak()
    after = traced_fill(decide, max_keys, 20 * max_keys)  # 20 times the bound
    _, peak = tracemalloc.get_traced_memory()
    assert store.keys(lim) <= max_keys
    assert after <= 2 * full and peak <= 3 * full, (after, peak, full)


def test_recovered_keys_do_not_pile_up_without_a_bound() -> None:
    # With the default (large) max_keys, idle keys still expire as new ones arrive.
    lim = Limit("token-bucket", "1000/s", burst=1)  # recovers 1 ms after its request
    store = MemoryStore(sweep_every=256)
    decide = store.bind(lim)
    for i in range(50_000):
        decide(f"key:{i}", 1, i / 100)  # 10 ms apart: all but the newest have recovered
    assert store.keys(lim) <= 256
    assert store.expired >= 50_000 - store.keys(lim)
