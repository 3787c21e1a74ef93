"""RedisStore against real servers: Redis 7, Valkey 8 and a 3+3 Redis Cluster.

* every shared conformance case, through a `Limiter` on a client-clock `RedisStore`;
* every step table of tests/unit, replayed through Redis (the unit tests' own functions, given
  a Redis `StoreBackend` as their ``backend``);
* the store's contract: key layout, expiry, refund, reset, peek, composite all-or-nothing
  (one script, or reserve-then-refund across cluster slots), garbage replies, NOSCRIPT,
  one round trip per decision, the deny cache, ``inspect``.

No test waits for rate-limit time: decisions are made at explicit instants (client clock).
"""

from __future__ import annotations

import importlib
import inspect
import itertools
import json
import math
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import redis
import redis.cluster

from ratekeeper import (
    GLOBAL_KEY,
    ConfigError,
    InvalidCost,
    InvalidKey,
    Limit,
    Limiter,
    MemoryStore,
    StoreError,
    StoreUnavailable,
)
from ratekeeper.algorithms import get
from ratekeeper.cli import main
from ratekeeper.core import FailurePolicy
from ratekeeper.stores._base import Store
from ratekeeper.stores.redis import KeyState, RedisStore, split_state_key
from ratekeeper.testing import ManualClock
from tests.conformance.test_conformance import (
    CASE_FILES,
    as_output,
    assert_agrees,
    limit_of,
    load,
    simulate_args,
)
from tests.integration.conftest import StoreTarget
from tests.unit import _steps

cases = pytest.mark.parametrize("path", CASE_FILES, ids=[p.stem for p in CASE_FILES])


def fresh_prefix() -> str:
    return f"rk-test-{uuid.uuid4().hex[:8]}:"


# -- conformance cases ---------------------------------------------------------------------


@cases
def test_conformance_case(target: StoreTarget, path: Path) -> None:
    case = load(path)
    limit = limit_of(case)
    store = target.store(client_clock=True, prefix=fresh_prefix())
    clock = ManualClock()
    limiter = Limiter(limit, store, clock=clock, failure="raise")
    memory = MemoryStore()
    outs = []
    for ev in case["events"]:
        clock.set(ev["t"])
        d = limiter.hit(ev["key"], ev.get("cost", 1))
        # ... and exactly the in-memory decision, not just within check.py's tolerance
        assert d == memory.decide_one(limit, ev["key"], limit.check_cost(ev.get("cost", 1)),
                                      float(ev["t"])), ev
        assert not d.degraded
        outs.append(as_output(d))
    assert_agrees(case, outs)


@pytest.mark.parametrize("path", CASE_FILES[:6], ids=[p.stem for p in CASE_FILES[:6]])
def test_simulate_cli_with_store(target: StoreTarget, path: Path, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    """`ratekeeper simulate --store URL` (what check.py runs) on every kind of server."""
    case = load(path)
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(e) + "\n" for e in case["events"]), encoding="utf-8")
    rc = main([*simulate_args(case, trace), "--store", target.url])
    out, err = capsys.readouterr()
    assert rc == 0, err
    outs = [json.loads(line) for line in out.splitlines() if line.strip().startswith("{")]
    assert_agrees(case, outs)


# -- a limit's state is named by its algorithm ----------------------------------------------


def _switching_algorithms_starts_fresh(store: Any, failure: FailurePolicy) -> None:
    """A reload that keeps a limit's name but changes its algorithm: the new limit decides
    on a fresh state at once (normal decisions, not degraded ones), on its own and in a
    composite, and switching back finds the old algorithm's state where it was."""
    clock = ManualClock(10.0)
    other = Limit("fixed-window", "100/h", name="hourly")
    before = Limit("gcra", "2/s", burst=2, name="api")
    after = Limit("token-bucket", "2/s", burst=3, name="api")

    def limiter(limits: Limit | list[Limit]) -> Limiter:
        return Limiter(limits, store, clock=clock, failure=failure)

    old = limiter(before)
    assert [old.hit("k").allowed for _ in range(3)] == [True, True, False]
    assert not limiter([before, other]).hit("k").allowed
    for limits in (after, [after, other]):
        d = limiter(limits).hit("k")
        assert d.allowed and not d.degraded, d
        assert d.limit in (after, other)
    d = limiter(after).hit("k")
    assert d.allowed and not d.degraded and d.remaining == 0, d  # its own bucket of 3
    back = limiter(before).hit("k")
    assert not back.allowed and not back.degraded, back  # gcra's state was kept apart


@pytest.mark.parametrize("deny_cache", [False, True], ids=["", "deny-cache"])
@pytest.mark.parametrize("failure", ["raise", "open"])
def test_changing_a_limits_algorithm_under_its_name_starts_fresh(target: StoreTarget,
                                                                failure: FailurePolicy,
                                                                deny_cache: bool) -> None:
    _switching_algorithms_starts_fresh(
        target.store(client_clock=True, prefix=fresh_prefix(), deny_cache=deny_cache), failure)


@pytest.mark.parametrize("failure", ["raise", "open"])
def test_changing_a_limits_algorithm_under_its_name_starts_fresh_in_memory(
        failure: FailurePolicy) -> None:
    _switching_algorithms_starts_fresh(MemoryStore(), failure)


# -- the unit step tables, through Redis ----------------------------------------------------


UNIT_MODULES = [
    importlib.import_module(f"tests.unit.test_{name}")
    for name in ("token_bucket", "gcra", "leaky_bucket", "fixed_window", "sliding_window_log",
                 "sliding_window_counter")
]


def _unit_step_tests() -> Iterator[Any]:
    """Every unit test function that takes a `backend`, expanded over its other parameters."""
    for module in UNIT_MODULES:
        for name, fn in vars(module).items():
            if not (name.startswith("test_") and callable(fn)):
                continue
            params = inspect.signature(fn).parameters
            if "backend" not in params:
                continue
            expansions: list[list[dict[str, Any]]] = []
            for mark in getattr(fn, "pytestmark", []):
                if mark.name != "parametrize" or mark.args[0] == "backend":
                    continue
                argnames = [a.strip() for a in str(mark.args[0]).split(",")]
                values = mark.args[1]
                expansions.append([
                    dict(zip(argnames, v if len(argnames) > 1 else (v,), strict=True))
                    for v in values
                ])
            for combo in itertools.product(*expansions):
                kwargs = {k: v for part in combo for k, v in part.items()}
                assert set(kwargs) | {"backend"} == set(params), (module.__name__, name)
                label = "-".join(str(v) for v in kwargs.values())
                short = module.__name__.rsplit(".test_", 1)[1]
                # a documented core bug (xfail strict) must fail the same way through Redis
                marks = [m for m in getattr(fn, "pytestmark", []) if m.name == "xfail"]
                yield pytest.param(module, fn, kwargs, marks=marks,
                                   id=f"{short}.{name}" + (f"[{label}]" if label else ""))


STEP_TESTS = list(_unit_step_tests())


def test_step_tables_were_found() -> None:
    assert len(STEP_TESTS) >= 40, len(STEP_TESTS)


@pytest.mark.parametrize(("module", "fn", "kwargs"), STEP_TESTS)
def test_unit_step_table(target: StoreTarget, module: ModuleType, fn: Callable[..., None],
                         kwargs: dict[str, Any]) -> None:
    """The unit test function itself, with a Redis store as its backend (the table runner
    takes the store: one client, a fresh namespace for every runner the test makes)."""
    client = target.store(client_clock=True)._get_client()
    made: list[RedisStore] = []

    def make() -> RedisStore:
        made.append(RedisStore(client, client_clock=True, prefix=fresh_prefix()))
        return made[-1]

    fn(backend=_steps.StoreBackend(target.kind, make), **kwargs)
    assert made and sum(s.stats.calls for s in made) > 0  # decided on the server


# -- the store contract ---------------------------------------------------------------------


def test_is_a_store(target: StoreTarget) -> None:
    store = target.store()
    assert isinstance(store, Store)
    assert store.uses_client_clock is False
    assert store.default_clock is time.time
    assert target.store(client_clock=True).uses_client_clock is True
    assert "prefix='rk:'" in repr(store) and "server clock" in repr(store)


def test_key_layout_and_hash_tags(target: StoreTarget) -> None:
    store = target.store(client_clock=True)
    per_key = Limit("gcra", "10/s", burst=20)
    hourly = Limit("fixed-window", "1000/h")
    glob = Limit("gcra", "100/s", scope="global", name="site")
    limiter = Limiter([per_key, hourly, glob], store, clock=ManualClock(5.0))
    assert limiter.hit("user42").allowed
    assert store.state_key(per_key, "user42") == f"rk:{{user42}}:{per_key.name}:gcra"
    keys = sorted(k.decode() for k in _all_keys(target))
    assert keys == sorted([
        f"rk:{{user42}}:{per_key.name}:gcra",
        f"rk:{{user42}}:{hourly.name}:fw",
        f"rk:{{{GLOBAL_KEY}}}:site:gcra",
    ])
    # the key names the algorithm: every algorithm's tag, and back
    tags = {}
    for algo in ("token-bucket", "gcra", "leaky-bucket", "fixed-window",
                 "sliding-window-log", "sliding-window-counter"):
        rkey = store.state_key(Limit(algo, "1/s", name="a:b"), "k")
        assert split_state_key(rkey) == ("a:b", algo), rkey
        tags[algo] = rkey.rsplit(":", 1)[1]
    assert len(set(tags.values())) == 6, tags
    assert split_state_key(f"rk:{{k}}:{per_key.name}") is None  # a key of an older version
    # a key's limits share one slot; braces and % in keys cannot break the tag
    for key in ("user42", "}x", "a}b", "%7D", "{", "}", "a{b}c"):
        slots = {redis.cluster.key_slot(store.state_key(lim, key).encode())
                 for lim in (per_key, hourly)}
        assert len(slots) == 1, key
    assert store.state_key(per_key, "}x") != store.state_key(per_key, "%7Dx")
    assert store.state_key(per_key, "%7Dx").startswith("rk:{%257Dx}:")


def _all_keys(target: StoreTarget) -> list[bytes]:
    client = target.admin
    if isinstance(client, redis.cluster.RedisCluster):
        out: list[bytes] = []
        for node in client.get_primaries():
            out += list(client.get_redis_connection(node).scan_iter(count=1000))
        return out
    return list(client.scan_iter(count=1000))


def test_bad_prefix_and_options() -> None:
    with pytest.raises(ConfigError, match="braces"):
        RedisStore.from_url("redis://127.0.0.1:1/0", prefix="rk:{x}:")
    with pytest.raises(ConfigError, match="timeout"):
        RedisStore.from_url("redis://127.0.0.1:1/0", timeout=0)
    with pytest.raises(ConfigError, match="not a Redis URL"):
        RedisStore.from_url("127.0.0.1:6379")
    with pytest.raises(ConfigError, match="scheme"):
        RedisStore.from_url("http://127.0.0.1:6379")
    with pytest.raises(ConfigError, match="master's name"):
        RedisStore.from_url("redis+sentinel://127.0.0.1:26379")
    with pytest.raises(ConfigError, match="unix"):
        RedisStore.from_url("unix:///tmp/x.sock", cluster=True)
    with pytest.raises(ConfigError, match="min_ttl"):
        RedisStore.from_url("redis://127.0.0.1:1/0", min_ttl=-1)
    with pytest.raises(ConfigError, match="asyncio"):
        import redis.asyncio  # noqa: PLC0415

        RedisStore(redis.asyncio.Redis())  # type: ignore[arg-type]
    assert "***" in repr(RedisStore.from_url("redis://user:secret@127.0.0.1:1/0"))
    assert "secret" not in repr(RedisStore.from_url("redis://user:secret@127.0.0.1:1/0"))


def test_every_key_expires_after_the_algorithms_ttl(standalone: StoreTarget) -> None:
    """Server clock: PEXPIRE is ceil(ttl * 1000) of the state just written."""
    store = standalone.store()
    limits = [
        Limit("token-bucket", "10/h", burst=5),
        Limit("gcra", "10/h", burst=5),
        Limit("leaky-bucket", "10r/m", burst=5),
        Limit("fixed-window", "10/h"),
        Limit("sliding-window-log", "10/h"),
        Limit("sliding-window-counter", "10/h"),
    ]
    for lim in limits:
        d = store.decide_one(lim, "k", 2, 0.0)
        assert d.allowed
        pttl = standalone.admin.pttl(store.state_key(lim, "k"))
        (ks,) = store.inspect([lim], "k")
        expected = get(lim.algorithm).ttl(ks.state, ks.now, lim)
        if lim.algorithm == "fixed-window" and expected <= 10:
            continue  # its window (aligned to the hour) ends now: found at 17:59:58 UTC
        assert expected > 10, lim  # long enough to measure against the real clock
        assert abs(pttl / 1000 - expected) < 1.0, (lim, pttl, expected)
        assert ks.ttl is not None and abs(ks.ttl - expected) < 1.0
        assert not ks.immortal


def test_client_clock_keys_live_at_least_min_ttl(standalone: StoreTarget) -> None:
    store = standalone.store(client_clock=True)
    lim = Limit("gcra", "1000/s", burst=1)
    assert store.decide_one(lim, "k", 1, 0.0).allowed  # the algorithm's ttl: 1 ms
    assert standalone.admin.pttl(store.state_key(lim, "k")) > 59_000
    short = standalone.store(client_clock=True, min_ttl=0.5, clock_grace=0, prefix=fresh_prefix())
    assert short.decide_one(lim, "k", 1, 0.0).allowed
    assert 400 < standalone.admin.pttl(short.state_key(lim, "k")) <= 500
    # a caller-supplied time: the expiry gets the clock grace on top of the ttl
    graced = standalone.store(client_clock=True, min_ttl=0.001, clock_grace=2.0,
                              prefix=fresh_prefix())
    hourly = Limit("fixed-window", "10/h")
    assert graced.decide_one(hourly, "k", 1, 3000.0).allowed  # ttl 600 s
    assert 601_000 < standalone.admin.pttl(graced.state_key(hourly, "k")) <= 602_000


@pytest.mark.cluster
def test_cross_slot_later_slots_get_the_clock_grace(redis_cluster: Any,
                                                    cluster_client: Any) -> None:
    """The global slot of a per-key + global check decides at the per-key slot's server
    time: its key lives `clock_grace` longer, the per-key one (server clock) does not."""
    node = redis_cluster.primaries()[0]
    store = RedisStore.from_url(f"redis+cluster://{node.host}:{node.port}", clock_grace=3.0)
    per_key = Limit("fixed-window", "10/h")
    glob = Limit("fixed-window", "10/h", scope="global", name="g")
    try:
        (d1, d2), at = store.decide([(per_key, "k", 1.0), (glob, GLOBAL_KEY, 1.0)], 0.0)
        assert d1.allowed and d2.allowed
        ttl = (math.floor(at / 3600) + 1) * 3600 - at
        p1 = cluster_client.pttl(store.state_key(per_key, "k"))
        p2 = cluster_client.pttl(store.state_key(glob, GLOBAL_KEY))
        assert abs(p1 / 1000 - ttl) < 1.0, (p1, ttl)
        assert abs(p2 / 1000 - (ttl + 3.0)) < 1.0, (p2, ttl)
    finally:
        store.close()


def test_server_clock_windows_align_to_the_unix_epoch(target: StoreTarget) -> None:
    store = target.store()
    lim = Limit("fixed-window", "5/h")
    before = time.time()
    d = store.decide_one(lim, "k", 1, 0.0)  # `now` is ignored on the server clock
    after = time.time()
    state = store.state(lim, "k")
    assert state[0] in {math.floor(before / 3600), math.floor(after / 3600)}
    assert 0 < d.reset_after <= 3600
    # the server's time comes back from decide(), for refunds
    _, at = store.decide([(lim, "k", 1.0)], 0.0)
    assert before - 5 < at < after + 5


def test_rejections_and_peeks_write_nothing(target: StoreTarget) -> None:
    store = target.store(client_clock=True)
    for lim in (Limit("token-bucket", "1/s", burst=2), Limit("sliding-window-log", "2/s"),
                Limit("leaky-bucket", "1r/s", burst=1), Limit("fixed-window", "2/s")):
        assert store.decide([(lim, "k", 1.0)], 0.0, consume=False)[0][0].allowed
        assert store.state(lim, "k") is None  # a peek charges nothing
        while store.decide_one(lim, "k", 1, 0.0).allowed:
            pass
        before = store.state(lim, "k")
        ttl_before = target.admin.pttl(store.state_key(lim, "k"))
        assert not store.decide_one(lim, "k", 1, 0.0).allowed
        assert store.state(lim, "k") == before
        assert target.admin.pttl(store.state_key(lim, "k")) <= ttl_before


def test_refund_and_reset(target: StoreTarget) -> None:
    store = target.store(client_clock=True)
    clock = ManualClock(100.0)
    lim = Limit("sliding-window-log", "3/10s")
    limiter = Limiter(lim, store, clock=clock, failure="raise")
    r1 = limiter.reserve("k", 2)
    assert r1.ok and r1.at == 100.0
    assert store.state(lim, "k") == ((100.0, 2.0),)
    clock.advance(1)
    assert limiter.hit("k").allowed
    assert r1.cancel()
    assert store.state(lim, "k") == ((101.0, 1.0),)
    assert not r1.cancel()  # once
    limiter.reset("k")
    assert store.state(lim, "k") is None
    assert target.admin.exists(store.state_key(lim, "k")) == 0


@pytest.mark.parametrize("algorithm", ["token-bucket", "gcra", "leaky-bucket", "fixed-window",
                                       "sliding-window-log", "sliding-window-counter"])
def test_refund_matches_the_pure_function(target: StoreTarget, algorithm: str) -> None:
    lim = Limit(algorithm, "4/s") if "window" in algorithm else Limit(algorithm, "4/s", burst=4)
    store = target.store(client_clock=True)
    memory = MemoryStore()
    for t in (0.0, 0.1, 0.1, 0.3):
        assert store.decide_one(lim, "k", 1, t) == memory.decide_one(lim, "k", 1, t)
    for now, at in ((0.35, 0.1), (0.4, 0.0), (0.45, 7.0)):
        store.refund([(lim, "k", 1.0)], now, at)
        memory.refund([(lim, "k", 1.0)], now, at)
        assert store.state(lim, "k") == _normal(memory.state(lim, "k"), lim)
    assert store.decide_one(lim, "k", 2, 0.5) == memory.decide_one(lim, "k", 2, 0.5)


def _normal(state: Any, limit: Limit) -> Any:
    """A MemoryStore state as RedisStore.state reports it (log: runs merged, float costs)."""
    if state is None or limit.algorithm != "sliding-window-log":
        return state
    out: list[tuple[float, float]] = []
    for ts, c in state:
        if out and out[-1][0] == ts:
            out[-1] = (ts, out[-1][1] + c)
        else:
            out.append((ts, float(c)))
    return tuple(out)


def test_composite_is_all_or_nothing(target: StoreTarget) -> None:
    """Per-key + global: a rejection by either charges neither (one script on a single
    server; reserve-then-refund across slots on the cluster)."""
    store = target.store(client_clock=True)
    per_key = Limit("fixed-window", "2/h")
    glob = Limit("fixed-window", "3/h", scope="global", name="all")
    clock = ManualClock(10.0)
    limiter = Limiter([per_key, glob], store, clock=clock, failure="raise")
    assert limiter.hit("a").allowed and limiter.hit("a").allowed
    d = limiter.hit("a")  # per-key full
    assert not d.allowed and d.limit == per_key
    assert store.state(glob, GLOBAL_KEY) == (0, 2.0)  # the global was not charged
    assert limiter.hit("b").allowed
    d = limiter.hit("c")  # global full
    assert not d.allowed and d.limit == glob
    assert store.state(per_key, "c") is None  # the per-key reservation was refunded
    assert store.state(glob, GLOBAL_KEY) == (0, 3.0)
    # a composite peek looks at every limit and charges none
    decisions, _ = store.decide([(per_key, "d", 1.0), (glob, GLOBAL_KEY, 1.0)], 10.0, False)
    assert [x.allowed for x in decisions] == [True, False]
    assert store.state(per_key, "d") is None


def test_composite_of_one_key_is_one_script(target: StoreTarget) -> None:
    """Several per-key limits of one key share a slot: one call, even on a cluster."""
    store = target.store(client_clock=True)
    limits = [Limit("gcra", "10/s", burst=50), Limit("fixed-window", "100/h"),
              Limit("sliding-window-log", "50/m")]
    checks = [(lim, "k", 1.0) for lim in limits]
    store.decide(checks, 0.0)  # warm up (script load)
    calls = store.stats.calls
    reads = target.reads()
    for i in range(20):
        decisions, at = store.decide(checks, i / 100)
        assert all(x.allowed for x in decisions) and at == i / 100
    assert store.stats.calls - calls == 20
    assert target.reads() - reads == 20 + (3 if target.is_cluster else 1)


COMPOSITE_TRACE = [("a", 1), ("a", 2), ("b}c%", 1), ("a", 1), ("b}c%", 3), ("d", 1),
                   ("a", 1), ("e", 2), ("a", 1), ("b}c%", 1), ("f", 1), ("a", 5)]


@pytest.mark.parametrize("algorithm", ["token-bucket", "gcra", "leaky-bucket", "fixed-window",
                                       "sliding-window-log", "sliding-window-counter"])
def test_composite_hit_decides_as_the_memory_store(target: StoreTarget, algorithm: str) -> None:
    """A composite limiter's `hit` (`RedisStore.bind_all`, its bound hot path) answers every
    request of a trace exactly as the same limiter on a `MemoryStore`: the merged decision,
    the per-key state under the key's encoded name, whole costs above one, and one call per
    decision."""
    per_key = Limit(algorithm, "4/s") if "window" in algorithm \
        else Limit(algorithm, "4/s", burst=4)
    glob = Limit("sliding-window-counter", "9/s", name="all", scope="global")
    store = target.store(client_clock=True, prefix=fresh_prefix())
    clock = ManualClock(100.0)
    redis_lim = Limiter([per_key, glob], store, clock=clock, failure="raise")
    memory_lim = Limiter([per_key, glob], MemoryStore(), clock=clock, failure="raise")
    calls = store.stats.calls - store.stats.noscript_reloads
    for i, (key, cost) in enumerate(COMPOSITE_TRACE):
        clock.set(100.0 + i * 0.07)
        assert redis_lim.hit(key, cost) == memory_lim.hit(key, cost), (i, key, cost)
    if not target.is_cluster:  # (a cluster's cross-slot composite is a reserve and a refund)
        stats = store.stats
        assert stats.calls - stats.noscript_reloads - calls == len(COMPOSITE_TRACE)
    assert store.state(per_key, "b}c%") is not None


def test_composite_hit_on_the_server_clock(target: StoreTarget) -> None:
    """The bound composite path on the server's clock (its arguments encoded once for a
    unit cost): each limit counts down, a cost of 2 takes two, a full limit rejects both."""
    store = target.store(prefix=fresh_prefix())
    per_key = Limit("gcra", "1/h", burst=4)
    glob = Limit("fixed-window", "1000/h", name="w", scope="global")
    limiter = Limiter([per_key, glob], store, failure="raise")
    got = [limiter.hit("k") for _ in range(3)] + [limiter.hit("k", 2), limiter.hit("k")]
    assert [(d.allowed, d.remaining, d.limit.name) for d in got] == [
        (True, 3, per_key.name), (True, 2, per_key.name), (True, 1, per_key.name),
        (False, 1, per_key.name), (True, 0, per_key.name)]
    assert store.state(glob, GLOBAL_KEY)[1] == 4.0  # the rejected cost of 2 charged neither


def test_composite_hit_checks_keys_and_costs_like_the_general_path(
        standalone: StoreTarget) -> None:
    """What the bound composite path does not take goes the general way: bad keys and costs
    get the core's errors, a fractional cost is decided."""
    store = standalone.store(client_clock=True, prefix=fresh_prefix())
    limiter = Limiter([Limit("gcra", "10/s", burst=10), Limit("fixed-window", "99/s",
                                                              name="w", scope="global")],
                      store, clock=ManualClock(5.0), failure="raise")
    with pytest.raises(InvalidKey):
        limiter.hit("")
    with pytest.raises(InvalidCost):
        limiter.hit("k", 0)
    with pytest.raises(InvalidCost):
        limiter.hit("k", "1")  # type: ignore[arg-type]
    assert limiter.hit("k", 1.5).remaining == 8
    with pytest.raises(InvalidCost):
        limiter.hit("k", True)  # a bool is no cost, though an int


def test_composite_hit_on_a_dead_server_follows_the_failure_policy(
        server_factory: Callable[..., Any]) -> None:
    server = server_factory("redis")
    store = RedisStore.from_url(server.url, timeout=0.5, breaker_failures=0)
    try:
        limits = [Limit("gcra", "10/s", burst=10), Limit("fixed-window", "99/s", name="w",
                                                          scope="global")]
        closed = Limiter(limits, store, failure="closed")
        assert closed.hit("k").allowed
        server.stop()
        d = closed.hit("k")
        assert not d.allowed and d.degraded
        assert Limiter(limits, store, failure="open").hit("k").degraded
        assert closed.store_errors == 1
    finally:
        store.close()


def test_cross_slot_composite_rolls_back_every_algorithm(target: StoreTarget) -> None:
    """After a rejected composite, every limit decides as if nothing had been charged.

    (On a cluster the per-key reservation is refunded. The refunded state is equivalent,
    not always bit-identical: a token bucket refilled to full is forgotten, a leaky bucket
    keeps the stamp of the reservation.)"""
    store = target.store(client_clock=True)
    memory = MemoryStore()
    per_key = [Limit(a, "5/s") if "window" in a else Limit(a, "5/s", burst=5)
               for a in ("token-bucket", "gcra", "leaky-bucket", "fixed-window",
                         "sliding-window-log", "sliding-window-counter")]
    glob = Limit("gcra", "2/h", burst=2, scope="global", name="tight")
    checks = [*[(lim, "u", 1.0) for lim in per_key], (glob, GLOBAL_KEY, 1.0)]
    for t in (0.0, 0.2, 0.3, 0.45, 0.7, 1.5, 1.55):
        got, _ = store.decide(checks, t)
        want, _ = memory.decide(checks, t)
        assert got == want, t
        for lim, key, _c in checks:  # what each limit alone would say now
            assert store.decide([(lim, key, 1.0)], t, False) == memory.decide(
                [(lim, key, 1.0)], t, False), (t, lim)
    assert [d.allowed for d in got] == [True] * 6 + [False]


# -- replies, scripts, round trips ----------------------------------------------------------


def test_garbage_state_is_a_store_error(target: StoreTarget) -> None:
    store = target.store(client_clock=True)
    gcra = Limit("gcra", "1/s")
    tb = Limit("token-bucket", "1/s")
    target.admin.set(store.state_key(gcra, "k"), "not a number", px=60_000)
    with pytest.raises(StoreError, match="corrupt rate-limit state") as e:
        store.decide_one(gcra, "k", 1, 0.0)
    assert not isinstance(e.value, StoreUnavailable)
    target.admin.set(store.state_key(tb, "k"), "a string", px=60_000)
    with pytest.raises(StoreError, match="WRONGTYPE") as e:
        store.decide_one(tb, "k", 1, 0.0)
    assert not isinstance(e.value, StoreUnavailable)
    with pytest.raises(StoreError, match="not its state"):
        store.state(tb, "k")
    # the limiter applies its policy to such errors; the breaker stays closed (it answered)
    assert store.breaker.state == "closed"
    assert Limiter(gcra, store, failure="closed").hit("k").degraded


def test_a_garbage_reply_is_a_store_error(standalone: StoreTarget) -> None:
    """A reply of the wrong shape (here: a script with our SHA that returns junk, as a
    misbehaving proxy might) raises StoreError, never a raw exception."""
    from ratekeeper.stores import _lua  # noqa: PLC0415

    client = standalone.admin
    store = standalone.store(client_clock=True)
    lim = Limit("gcra", "1/s")
    for junk in ("return 'hello'", "return {1, 2, 3}", "return {'x', 1, 1, 1, 'a', 'b', 'c'}",
                 "return {'1', 1, 7, 0, false, '0', '0'}",
                 "return {'1', 1, 1, -1, false, '0', '0'}",
                 "return {'1', 1, 1, 0, false, 'inf', '0'}",
                 "return {'1', 1, 1, 0, 'x', '0', '0'}",
                 # one.lua's shape: {allowed, remaining, retry_after, reset_after, delay}
                 "return {2, 0, false, '0', '0'}", "return {1, -1, false, '0', '0'}",
                 "return {1, 0, false, 'nan', '0'}", "return {1, 0, 'x', '0', '0'}",
                 "return {1, '0', false, '0', '0'}", "return {1, 0, false, '0'}",
                 # the one-gcra script's admission: {remaining, tat, now}
                 "return {-1, '2', 3}", "return {1, 'x', 3}", "return {1, 'inf', 3}",
                 "return {1, '2', 'x'}", "return {'1', '2', 3}", "return {1, '2'}",
                 # its rejection: {tat, now}
                 "return {'x', 3}", "return {'inf', 3}", "return {'2', 'x'}",
                 "return {'2', 'inf'}", "return {'2'}", "return {'inf', 3}", "return {'-inf', 3}"):
        # What a real server sends back for such a script, through the store's parsers.
        reply = client.eval(junk, 0)
        with pytest.raises(StoreError, match="unexpected reply"):
            store._parse_one(reply, lim, 1.0)
        with pytest.raises(StoreError, match="unexpected reply"):
            store._parse_check(reply, [(lim, "k", 1.0)])
    for junk in ("return {'x', '1', '1', 3}", "return {'1', '1', 'inf', 3}",
                 "return {'1', '1', '1', 'x'}", "return {'1', '1', '1'}"):
        with pytest.raises(StoreError, match="unexpected reply"):
            store._parse_one(client.eval(junk, 0), Limit("sliding-window-counter", "1/s"), 1.0)
    # the one-token-bucket and one-fixed-window scripts' rejections: {<two fields>, now}
    for junk in ("return {'x', '1', 3}", "return {'1', 'nan', 3}", "return {'1', '1', 'x'}",
                 "return {'1', '1'}", "return {'1', '1', 3, 4}", "return {'inf', '1', 3}"):
        for other in (Limit("token-bucket", "1/s"), Limit("fixed-window", "1/s")):
            with pytest.raises(StoreError, match="unexpected reply"):
                store._parse_one(client.eval(junk, 0), other, 1.0)
    assert _lua.CHECK.sha != _lua.REFUND.sha


def test_noscript_reloads_transparently(target: StoreTarget) -> None:
    store = target.store(client_clock=True)
    lim = Limit("token-bucket", "10/s", burst=10)
    assert store.decide_one(lim, "k", 1, 0.0).allowed
    before = store.stats.noscript_reloads
    for server in target.servers:
        if server.running:
            with server.admin() as c:
                c.script_flush()
    d = store.decide_one(lim, "k", 1, 0.0)
    assert d.allowed and d.remaining == 8
    assert store.stats.noscript_reloads == before + 1
    assert store.decide_one(lim, "k", 1, 0.0).remaining == 7
    assert store.stats.noscript_reloads == before + 1


def test_exactly_one_round_trip_per_decision(target: StoreTarget) -> None:
    """Steady state: each decision is one EVALSHA, one socket read on the server."""
    store = target.store()  # server clock
    lim = Limit("gcra", "1000/s", burst=100)
    limiter = Limiter(lim, store)
    for i in range(10):
        limiter.hit(f"warm{i}")  # load the script, open connections
    reads = target.reads()
    calls = store.stats.calls
    n = 200
    for i in range(n):
        limiter.hit(f"user{i % 17}")
    # one read per decision (+1 on each primary for the INFO that measured `reads`)
    extra = target.reads() - reads - n
    assert extra == (3 if target.is_cluster else 1), extra
    assert store.stats.calls - calls == n
    assert store.stats.noscript_reloads <= (3 if target.is_cluster else 1)


# -- deny cache ----------------------------------------------------------------------------


def test_deny_cache_answers_locally_until_the_retry(standalone: StoreTarget) -> None:
    store = standalone.store(client_clock=True, deny_cache=True)
    lim = Limit("token-bucket", "1/s", burst=3)
    for _ in range(3):
        assert store.decide_one(lim, "k", 1, 0.0).allowed
    d = store.decide_one(lim, "k", 2, 0.0)  # needs 2 tokens: retry after 2 s
    assert not d.allowed and d.retry_after == 2.0
    reads, hits = standalone.reads(), store.stats.deny_cache_hits
    for t in (0.0, 0.5, 1.5, 1.999):
        c = store.decide_one(lim, "k", 2, t)
        assert not c.allowed and c.retry_after == pytest.approx(2.0 - t)
        c = store.decide_one(lim, "k", 5, t)  # a larger cost can only wait longer
        assert not c.allowed
    assert store.stats.deny_cache_hits - hits == 8
    assert standalone.reads() - reads == 1  # the INFO only: no round trip
    # a smaller cost may pass: asked of the store
    assert store.decide_one(lim, "k", 1, 1.5).allowed
    assert not store.decide_one(lim, "k", 2, 2.5).allowed  # after the retry: asked again
    assert store.decide_one(lim, "k", 2, 3.0).allowed
    assert store.stats.deny_cache_hits - hits == 8


def test_deny_cache_is_forgotten_on_refund_and_reset(standalone: StoreTarget) -> None:
    store = standalone.store(client_clock=True, deny_cache=True)
    lim = Limit("fixed-window", "2/h")
    limiter = Limiter(lim, store, clock=ManualClock(1.0), failure="raise")
    r = limiter.reserve("k", 2)
    assert not limiter.hit("k").allowed
    assert not limiter.hit("k").allowed  # from the cache
    hits = store.stats.deny_cache_hits
    assert hits >= 1
    assert r.cancel()
    assert limiter.hit("k").allowed  # the refund dropped the cache entry
    assert limiter.hit("k").allowed
    assert not limiter.hit("k").allowed
    limiter.reset("k")
    assert limiter.hit("k").allowed


def test_deny_cache_with_composites(target: StoreTarget) -> None:
    store = target.store(client_clock=True, deny_cache=True)
    per_key = Limit("fixed-window", "1/m")
    glob = Limit("gcra", "100/s", scope="global", name="g")
    limiter = Limiter([per_key, glob], store, clock=ManualClock(0.0), failure="raise")
    assert limiter.hit("a").allowed
    calls = store.stats.calls
    for _ in range(5):
        d = limiter.hit("a")
        assert not d.allowed and d.limit == per_key and d.retry_after == 60.0
    assert store.stats.calls - calls <= (3 if target.is_cluster else 1)
    assert limiter.hit("b").allowed


def test_deny_cache_never_caches_never(standalone: StoreTarget) -> None:
    store = standalone.store(client_clock=True, deny_cache=True)
    lim = Limit("token-bucket", "1/s", burst=3)
    for _ in range(3):
        assert store.decide_one(lim, "k", 5, 0.0).retry_after is None
    assert store.stats.deny_cache_hits == 0


# -- inspection -----------------------------------------------------------------------------


def test_inspect(target: StoreTarget) -> None:
    store = target.store(client_clock=True)
    lim = Limit("token-bucket", "1/s", burst=5)
    other = Limit("fixed-window", "10/m")
    limiter = Limiter([lim, other], store, clock=ManualClock(3.0))
    limiter.hit("k", 2)
    ks = store.inspect([lim, other], "k", now=3.0)
    assert [type(k) for k in ks] == [KeyState, KeyState]
    assert ks[0].kind == "hash" and ks[0].state == (3.0, 3.0)
    assert ks[0].raw == {"tokens": "3", "last": "3"}
    assert ks[0].decision.remaining == 2 and ks[0].decision.allowed
    assert ks[1].state == (0, 2.0) and ks[1].decision.remaining == 7
    assert ks[0].ttl is not None and ks[0].ttl > 59
    missing = store.inspect([lim], "nobody", now=3.0)[0]
    assert missing.kind == "none" and missing.state is None and missing.ttl is None
    assert missing.decision.remaining == 4  # the request it would charge included
    assert store.state(lim, "k") == (3.0, 3.0)  # inspecting charged nothing


def test_inspect_cli(target: StoreTarget, capsys: pytest.CaptureFixture[str]) -> None:
    store = target.store(client_clock=True, prefix="rk:")
    lim = Limit("gcra", "10/s", burst=20, name="api")
    Limiter(lim, store, clock=ManualClock(100.0)).hit("user7", 5)
    rc = main(["inspect", "user7", "--store", target.url, "--limit", "gcra 10/s burst=20 name=api",
               "--now", "100", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    (row,) = json.loads(out)
    assert row["limit"] == "api" and row["redis_key"] == "rk:{user7}:api:gcra"
    assert row["state"] == 100.5 and row["remaining"] == 14 and row["ttl"] > 0
    rc = main(["inspect", "user7", "--store", target.url])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "rk:{user7}:api:gcra" in out and "string" in out and "limit api (gcra)" in out
    rc = main(["inspect", "user7", "--store", target.url, "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    (row,) = json.loads(out)
    assert (row["redis_key"], row["limit"], row["algorithm"]) == ("rk:{user7}:api:gcra", "api",
                                                                  "gcra")
    rc = main(["inspect", "nobody", "--store", target.url])
    out, err = capsys.readouterr()
    assert rc == 0 and "no state" in out
    rc = main(["inspect", "user7", "--store", target.url, "--limit", "bogus 1/s"])
    _, err = capsys.readouterr()
    assert rc == 2 and "unknown algorithm" in err


def test_ping_and_close(target: StoreTarget) -> None:
    store = target.store()
    assert store.ping()
    store.close()
    lim = Limit("gcra", "1/s")
    assert store.decide_one(lim, "k", 1, 0.0).allowed  # reconnects
    assert RedisStore.from_url("redis://127.0.0.1:1/0", timeout=0.05).ping() is False
