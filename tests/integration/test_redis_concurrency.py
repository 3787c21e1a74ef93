"""Exactness under concurrency: many processes and threads on one key, real servers.

* 4 processes x 8 threads hammer one key for 2 s on the server clock. What was admitted is
  bounded by what the algorithm allows for the attempts actually made, at the times they
  were decided (the server's): never more than ``burst + rate * span`` (zero
  over-admission), and exactly what the pure algorithm admits when the same attempts are
  replayed in time order (no lost token). How many attempts a loaded machine manages to
  make changes nothing in the verdict: no throughput is required.
* The same for a composite (per-key + global) limit across cluster slots, where the global
  slot decides at the first slot's time, so concurrent requests reach it slightly out of
  order: within one in-flight request per worker of the replay.
* A composite check under contention is all-or-nothing: per-key and global counters end up
  exactly equal to what was admitted (no reservation leaks, no lost refund).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from ratekeeper import GLOBAL_KEY, Limit, Limiter, MemoryStore
from ratekeeper.testing import ManualClock
from tests.integration.conftest import StoreTarget

ROOT = Path(__file__).resolve().parents[2]
PROCESSES, THREADS, DURATION = 4, 8, 2.0


def hammer(url: str, limits: list[dict[str, Any]]) -> tuple[list[tuple[float, bool]], str]:
    prefix = f"rk-hammer-{uuid.uuid4().hex[:8]}:"
    spec = {"url": url, "prefix": prefix, "limits": limits, "key": "hot", "threads": THREADS,
            "start": time.time() + 2.0, "duration": DURATION}
    procs = [
        subprocess.Popen([sys.executable, "-m", "tests.integration._hammer", json.dumps(spec)],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(PROCESSES)
    ]
    results: list[tuple[float, bool]] = []
    for p in procs:
        out, err = p.communicate(timeout=30)
        assert p.returncode == 0, err
        results += [(float(at), bool(ok)) for at, ok in json.loads(out)]
    return results, prefix


def bounds(results: list[tuple[float, bool]], rate: float, burst: float) -> tuple[int, float]:
    """(admitted, the most a token bucket could admit over the span the decisions cover)."""
    ats = [at for at, _ in results]
    admitted = sum(ok for _, ok in results)
    return admitted, burst + rate * (max(ats) - min(ats))


def replayed(results: list[tuple[float, bool]], limits: list[dict[str, Any]]) -> int:
    """What the pure algorithms admit for the same attempts at the same times, decided one
    at a time in time order (the in-memory store: the same functions as the scripts)."""
    store = MemoryStore()
    checks = [(lim, "hot" if lim.scope == "key" else GLOBAL_KEY, 1.0)
              for lim in (Limit(**kw) for kw in limits)]
    admitted = 0
    for at in sorted(at for at, _ in results):
        decisions, _ = store.decide(checks, at)
        admitted += all(d.allowed for d in decisions)
    return admitted


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["redis", "valkey"])
def test_processes_and_threads_on_one_key(kind: str, standalone_of: Any) -> None:
    target: StoreTarget = standalone_of(kind)
    rate, burst = 100.0, 100.0
    limits = [{"algorithm": "token-bucket", "rate": "100/s", "burst": burst}]
    results, _ = hammer(target.url, limits)
    admitted, most = bounds(results, rate, burst)
    assert admitted <= most + 1e-6, (admitted, most)
    # one script per decision, serialized by the server at the time it returns: the
    # replay is exact (+-1 for two decisions in the same microsecond, which share a `now`)
    assert abs(admitted - replayed(results, limits)) <= 1, (admitted, len(results))


@pytest.mark.slow
@pytest.mark.cluster
def test_processes_and_threads_on_a_cross_slot_composite(redis_cluster: Any,
                                                        cluster_client: Any) -> None:
    """Per-key + global on a cluster: two slots, reserve then refund. The global limit binds."""
    node = redis_cluster.primaries()[0]
    url = f"redis+cluster://{node.host}:{node.port}"
    per_key = {"algorithm": "token-bucket", "rate": "1000/s", "burst": 1000.0}
    glob = {"algorithm": "gcra", "rate": "50/s", "burst": 50.0, "scope": "global",
            "name": "site"}
    results, _ = hammer(url, [per_key, glob])
    admitted, most = bounds(results, 50.0, 50.0)
    assert admitted <= most + 1e-6, (admitted, most)
    # the global slot decides at the per-key slot's time: a request that reaches it after
    # a later-stamped one sees its tokens as not yet refilled (a rejection the replay
    # would admit, never an admission it would not: the upper bound above). At most one
    # request per worker is in flight between the two slots.
    replay = replayed(results, [per_key, glob])
    assert replay - PROCESSES * THREADS <= admitted <= replay, (admitted, replay)


def test_composite_under_contention_is_all_or_nothing(target: StoreTarget) -> None:
    """16 threads, 8 keys, per-key 30 and global 100 per window: the counters end exactly
    at what was admitted, and the global limit is filled exactly."""
    store = target.store(client_clock=True, prefix=f"rk-aon-{uuid.uuid4().hex[:8]}:")
    per_key = Limit("fixed-window", "30/h")
    glob = Limit("fixed-window", "100/h", scope="global", name="all")
    limiter = Limiter([per_key, glob], store, clock=ManualClock(10.0), failure="raise")
    keys = [f"u{i}" for i in range(8)]
    admitted = {k: 0 for k in keys}
    lock = threading.Lock()
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for j in range(40):
                k = keys[(i + j) % len(keys)]
                if limiter.hit(k).allowed:
                    with lock:
                        admitted[k] += 1
        except BaseException as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sum(admitted.values()) == 100
    assert store.state(glob, GLOBAL_KEY) == (0, 100.0)
    for k in keys:
        assert admitted[k] <= 30
        state = store.state(per_key, k)
        assert (state[1] if state else 0) == admitted[k], k


@pytest.fixture
def standalone_of(request: pytest.FixtureRequest) -> Any:
    def get(kind: str) -> StoreTarget:
        server = request.getfixturevalue(f"{kind}_server")
        with server.admin() as c:
            c.flushall()
        return StoreTarget(kind, server.url, server.admin(), [server])

    return get
