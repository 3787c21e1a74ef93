"""`Limiter` and `AsyncLimiter`: hit, peek, reset, reservations, acquire, decorators, composite
limits, key validation and the failure policies. Time is a `ManualClock`; nothing sleeps."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from ratekeeper import (
    GLOBAL_KEY,
    AsyncLimiter,
    AsyncStore,
    Decision,
    InvalidCost,
    InvalidKey,
    InvalidLimit,
    Limit,
    Limiter,
    MemoryStore,
    RateLimitExceeded,
    Store,
    StoreError,
    StoreUnavailable,
)
from ratekeeper.stores import Check
from ratekeeper.testing import ManualClock

ALGOS = ["token-bucket", "gcra", "leaky-bucket", "fixed-window", "sliding-window-log",
         "sliding-window-counter"]

TB = Limit("token-bucket", "1/s", burst=3)


def make(limits: Limit | Sequence[Limit] = TB, **kw: Any) -> tuple[Limiter, MemoryStore,
                                                                   ManualClock]:
    clock = ManualClock()
    store = kw.pop("store", None) or MemoryStore()
    return Limiter(limits, store, clock=clock, sleep=clock.sleep, **kw), store, clock


def amake(limits: Limit | Sequence[Limit] = TB, **kw: Any) -> tuple[AsyncLimiter, MemoryStore,
                                                                    ManualClock]:
    clock = ManualClock()
    store = kw.pop("store", None) or MemoryStore()
    return AsyncLimiter(limits, store, clock=clock, sleep=clock.asleep, **kw), store, clock


def some_limit(algo: str) -> Limit:
    if algo == "leaky-bucket":
        return Limit(algo, "1r/s", burst=2)
    if algo in ("token-bucket", "gcra"):
        return Limit(algo, "1/s", burst=3)
    return Limit(algo, "3/10s")


# -- construction ----------------------------------------------------------------------------

def test_defaults() -> None:
    lim = Limiter(TB)
    assert isinstance(lim.store, MemoryStore)
    assert lim.clock is time.monotonic
    assert lim.failure == "open"
    assert lim.limits == (TB,)
    assert "token-bucket-1/s-b3" in repr(lim) and "failure='open'" in repr(lim)


def test_doc_example() -> None:
    limiter = Limiter(Limit("token-bucket", "1/s", burst=2), clock=ManualClock())
    assert [limiter.hit("alice").allowed for _ in range(3)] == [True, True, False]


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        (([],), {}, "at least one"),
        ((["10/s"],), {}, "expected Limit"),
        (([TB, Limit("gcra", "1/s", name=TB.name)],), {}, "distinct names"),
        ((TB,), {"failure": "maybe"}, "failure must be one of"),
        ((TB,), {"fallback_share": 0}, "fallback_share"),
        ((TB,), {"fallback_share": 1.5}, "fallback_share"),
        ((TB,), {"fallback_share": math.nan}, "fallback_share"),
    ],
)
def test_invalid_construction(args: tuple[Any, ...], kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidLimit, match=match):
        Limiter(*args, **kwargs)
    with pytest.raises(InvalidLimit, match=match):
        AsyncLimiter(*args, **kwargs)


class AsyncOnly:
    default_clock = staticmethod(time.monotonic)
    uses_client_clock = True

    async def adecide_one(self, *a: Any) -> Decision: raise NotImplementedError
    async def adecide(self, *a: Any) -> Any: raise NotImplementedError
    async def arefund(self, *a: Any) -> None: raise NotImplementedError
    async def areset(self, *a: Any) -> None: raise NotImplementedError


def test_store_kind_is_checked() -> None:
    with pytest.raises(TypeError, match="AsyncLimiter"):
        Limiter(TB, AsyncOnly())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Limiter"):
        AsyncLimiter(TB, object())  # type: ignore[arg-type]
    assert isinstance(MemoryStore(), Store) and isinstance(MemoryStore(), AsyncStore)


# -- hit / peek / reset ----------------------------------------------------------------------

def test_hit_charges_and_peek_does_not() -> None:
    limiter, store, clock = make()
    for _ in range(5):
        d = limiter.peek("a")
        assert d.allowed and d.remaining == 2
    assert store.state(TB, "a") is None
    assert limiter.peek("a", 3).remaining == 0
    assert not limiter.peek("a", 4).allowed and limiter.peek("a", 4).retry_after is None
    assert [limiter.hit("a").allowed for _ in range(4)] == [True, True, True, False]
    d = limiter.peek("a")
    assert not d.allowed and d.retry_after == 1.0
    clock.advance(1)
    assert limiter.peek("a") == limiter.hit("a")


def test_fractional_costs_take_the_general_path() -> None:
    limiter, _, _ = make()
    assert limiter.hit("a", 2.5).remaining == 0
    assert limiter.hit("a", 0.5).allowed
    assert not limiter.hit("a", 0.5).allowed


def test_reset_forgets_a_key() -> None:
    limiter, store, _ = make()
    for _ in range(3):
        limiter.hit("a")
        limiter.hit("b")
    assert not limiter.hit("a").allowed
    limiter.reset("a")
    assert store.state(TB, "a") is None
    assert limiter.hit("a").remaining == 2
    assert not limiter.hit("b").allowed  # other keys untouched
    limiter.reset("never-seen")


def test_reset_leaves_global_limits_alone() -> None:
    per_key = Limit("token-bucket", "1/s", burst=1, name="per-key")
    glob = Limit("token-bucket", "1/s", burst=5, name="global", scope="global")
    limiter, store, _ = make([per_key, glob])
    limiter.hit("a")
    limiter.reset("a")
    assert store.state(per_key, "a") is None
    assert store.state(glob, GLOBAL_KEY) == (4.0, 0.0)


# -- reservations ----------------------------------------------------------------------------

@pytest.mark.parametrize("algo", ALGOS)
def test_cancel_restores_the_state_exactly(algo: str) -> None:
    lim = some_limit(algo)
    limiter, store, _ = make(lim)
    limiter.hit("a")
    before = store.state(lim, "a")
    r = limiter.reserve("a")
    assert r.ok and store.state(lim, "a") != before
    assert r.cancel() is True
    assert store.state(lim, "a") == before
    assert r.cancel() is False  # a second cancel is a no-op
    assert store.state(lim, "a") == before


@pytest.mark.parametrize("algo", ALGOS)
def test_cancel_on_a_fresh_key_is_as_if_never_seen(algo: str) -> None:
    lim = some_limit(algo)
    limiter, _, clock = make(lim)
    fresh, _, fresh_clock = make(lim)
    r = limiter.reserve("a", 2)
    assert r.ok
    r.cancel()
    for t in (0.0, 0.0, 0.0, 0.5, 1.0, 1.0):
        clock.set(t)
        fresh_clock.set(t)
        assert limiter.hit("a") == fresh.hit("a")


def test_cancel_later_gives_back_the_tokens() -> None:
    lim = Limit("token-bucket", "10/s", burst=2)
    limiter, _, clock = make(lim)
    r = limiter.reserve("a", 2)
    assert r.ok and r.at == 0.0
    clock.set(0.05)
    assert not limiter.peek("a", 2).allowed
    r.cancel()
    assert limiter.hit("a", 2).allowed  # 0.5 refilled + 2 back, capped at 2


def test_cancel_of_a_rejected_reservation_refunds_nothing() -> None:
    limiter, store, _ = make()
    for _ in range(3):
        limiter.hit("a")
    before = store.state(TB, "a")
    r = limiter.reserve("a")
    assert not r.ok and r.decision.retry_after == 1.0
    assert r.cancel() is False
    assert store.state(TB, "a") == before


def test_reservation_context_manager() -> None:
    limiter, store, _ = make()
    with limiter.reserve("a") as r:
        assert r.ok
    assert store.state(TB, "a") == (2.0, 0.0)  # kept: no exception
    with pytest.raises(ZeroDivisionError), limiter.reserve("a"):
        1 / 0  # noqa: B018
    assert store.state(TB, "a") == (2.0, 0.0)  # refunded
    assert "Reservation(" in repr(r)


def test_reservation_exposes_delay() -> None:
    limiter, _, _ = make(Limit("leaky-bucket", "1r/s", burst=2))
    assert limiter.reserve("a").delay == 0.0
    r = limiter.reserve("a")
    assert r.ok and r.delay == 1.0


def test_composite_cancel_refunds_every_limit() -> None:
    a = Limit("gcra", "1/s", burst=2, name="a")
    b = Limit("fixed-window", "5/m", name="b")
    limiter, store, _ = make([a, b])
    limiter.hit("k")
    before = (store.state(a, "k"), store.state(b, "k"))
    r = limiter.reserve("k")
    assert r.ok
    r.cancel()
    assert (store.state(a, "k"), store.state(b, "k")) == before


# -- acquire ---------------------------------------------------------------------------------

def test_acquire_waits_retry_after() -> None:
    limiter, _, clock = make(Limit("token-bucket", "1/s", burst=1))
    assert limiter.acquire("a").allowed and clock.slept == []
    d = limiter.acquire("a")
    assert d.allowed and clock.slept == [1.0] and clock.now == 1.0
    d = limiter.acquire("a", 1)
    assert clock.slept == [1.0, 1.0] and clock.now == 2.0


def test_acquire_sleeps_the_leaky_bucket_delay() -> None:
    limiter, _, clock = make(Limit("leaky-bucket", "2r/s", burst=3))
    limiter.acquire("a")
    assert clock.slept == []
    d = limiter.acquire("a")
    assert d.allowed and d.delay == 0.5 and clock.slept == [0.5]


def test_acquire_fails_at_once_for_an_impossible_cost() -> None:
    limiter, store, clock = make()
    with pytest.raises(RateLimitExceeded) as e:
        limiter.acquire("a", 4)
    assert clock.slept == [] and clock.now == 0.0
    assert e.value.decision.retry_after is None  # type: ignore[attr-defined]
    assert "never" in str(e.value)
    assert store.state(TB, "a") is None


def test_acquire_respects_the_timeout() -> None:
    limiter, store, clock = make(Limit("token-bucket", "1/s", burst=1))
    limiter.hit("a")
    with pytest.raises(RateLimitExceeded, match="timeout") as e:
        limiter.acquire("a", timeout=0.5)
    assert clock.slept == [] and clock.now == 0.0  # did not wait at all
    assert e.value.decision.retry_after == 1.0  # type: ignore[attr-defined]
    with pytest.raises(RateLimitExceeded):
        limiter.acquire("a", timeout=0)
    assert store.state(limiter.limits[0], "a") == (0.0, 0.0)  # giving up charged nothing
    assert limiter.acquire("a", timeout=1.0).allowed  # exactly reachable
    assert clock.slept == [1.0]


@pytest.mark.parametrize("timeout", [-1, -0.001, math.nan])
def test_acquire_rejects_a_bad_timeout(timeout: float) -> None:
    limiter, _, _ = make()
    with pytest.raises(ValueError, match="timeout"):
        limiter.acquire("a", timeout=timeout)


def test_acquire_on_composite_waits_for_the_slowest() -> None:
    fast = Limit("token-bucket", "10/s", burst=1, name="fast")
    slow = Limit("token-bucket", "1/s", burst=1, name="slow")
    limiter, _, clock = make([fast, slow])
    limiter.acquire("a")
    d = limiter.acquire("a")
    assert clock.slept == [1.0] and d.allowed


def test_acquire_timeout_covers_the_queueing_delay() -> None:
    limiter, _, clock = make(Limit("leaky-bucket", "1r/s", burst=5))
    limiter.acquire("a", timeout=0.5)
    with pytest.raises(RateLimitExceeded):
        limiter.acquire("a", timeout=0.5)
    assert sum(clock.slept) <= 0.5


# -- decorators ------------------------------------------------------------------------------

def test_decorator_default_key_is_the_function() -> None:
    limiter, store, _ = make(Limit("token-bucket", "1/s", burst=2))
    calls: list[int] = []

    @limiter.limit()
    def work(x: int) -> int:
        """Docs."""
        calls.append(x)
        return x * 2

    assert work(1) == 2 and work(2) == 4
    with pytest.raises(RateLimitExceeded) as e:
        work(3)
    assert calls == [1, 2]  # a rejected call does not run
    assert e.value.decision.retry_after == 1.0  # type: ignore[attr-defined]
    assert work.__name__ == "work" and work.__doc__ == "Docs."
    key = f"{__name__}.test_decorator_default_key_is_the_function.<locals>.work"
    assert store.state(limiter.limits[0], key) is not None


def test_decorator_key_and_cost_functions() -> None:
    limiter, _, _ = make(Limit("token-bucket", "1/s", burst=3))

    @limiter.limit(key=lambda user, n: f"user:{user}", cost=lambda user, n: n)
    def fetch(user: str, n: int) -> str:
        return user

    assert fetch("alice", 2) == "alice"
    with pytest.raises(RateLimitExceeded):
        fetch("alice", 2)
    assert fetch("bob", 3) == "bob"  # another key
    assert fetch("alice", 1) == "alice"


def test_decorator_fixed_key_and_cost() -> None:
    limiter, _, _ = make(Limit("token-bucket", "1/s", burst=3))

    @limiter.limit("shared", cost=2)
    def a() -> int:
        return 1

    @limiter.limit("shared")
    def b() -> int:
        return 2

    assert a() == 1
    assert b() == 2
    with pytest.raises(RateLimitExceeded):
        b()


def test_decorator_wait() -> None:
    limiter, _, clock = make(Limit("token-bucket", "1/s", burst=1))

    @limiter.limit("k", wait=True)
    def go() -> float:
        return clock.now

    assert go() == 0.0
    assert go() == 1.0 and clock.slept == [1.0]


def test_decorator_wait_with_timeout() -> None:
    limiter, _, clock = make(Limit("token-bucket", "1/s", burst=1))

    @limiter.limit("k", wait=True, timeout=0.5)
    def go() -> None:
        return None

    go()
    with pytest.raises(RateLimitExceeded):
        go()
    assert clock.slept == []


def test_decorator_invalid_cost_and_key() -> None:
    limiter, store, _ = make()

    @limiter.limit(key=lambda k: k)
    def f(k: object) -> None:
        return None

    with pytest.raises(InvalidKey):
        f(42)
    with pytest.raises(InvalidKey):
        f("")

    @limiter.limit("k", cost=0)
    def g() -> None:
        return None

    with pytest.raises(InvalidCost):
        g()
    assert len(store) == 0


def test_decorator_honours_the_queueing_delay() -> None:
    limiter, _, clock = make(Limit("leaky-bucket", "1r/s", burst=2))

    @limiter.limit("k")
    def go() -> float:
        return clock.now

    assert go() == 0.0
    assert go() == 1.0  # admitted with delay=1.0: runs after it


async def test_async_decorator_honours_the_queueing_delay() -> None:
    limiter, _, clock = amake(Limit("leaky-bucket", "1r/s", burst=2))

    @limiter.limit("k")
    async def go() -> float:
        return clock.now

    assert await go() == 0.0
    assert await go() == 1.0  # admitted with delay=1.0: runs after it


async def test_sync_limiter_decorates_coroutine_functions() -> None:
    limiter, _, _ = make(Limit("token-bucket", "1/s", burst=1))

    @limiter.limit("k")
    async def go(x: int) -> int:
        return x

    assert asyncio.iscoroutinefunction(go)
    assert await go(5) == 5
    with pytest.raises(RateLimitExceeded):
        await go(6)


async def test_sync_limiter_coroutine_wait_uses_the_injected_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limiter, _, clock = make(Limit("token-bucket", "1/s", burst=1))
    real_sleeps: list[float] = []

    async def no_wall_clock_sleep(seconds: float) -> None:
        real_sleeps.append(seconds)
        raise AssertionError(f"slept {seconds} s on the wall clock")

    @limiter.limit("k", wait=True)
    async def go() -> float:
        return clock.now

    assert await go() == 0.0
    monkeypatch.setattr(asyncio, "sleep", no_wall_clock_sleep)
    assert await go() == 1.0
    assert clock.slept == [1.0] and real_sleeps == []


# -- composite limits ------------------------------------------------------------------------

def test_per_key_and_global() -> None:
    per_key = Limit("token-bucket", "1/s", burst=2, name="per-key")
    glob = Limit("token-bucket", "1/s", burst=3, name="all", scope="global")
    limiter, store, _ = make([per_key, glob])
    assert limiter.hit("a").allowed
    assert limiter.hit("a").allowed
    d = limiter.hit("a")
    assert not d.allowed and d.limit == per_key
    assert limiter.hit("b").allowed  # the global has one left
    d = limiter.hit("b")
    assert not d.allowed and d.limit == glob and d.retry_after == 1.0
    assert store.state(per_key, "b") == (1.0, 0.0)  # not charged by the rejection
    assert store.state(glob, GLOBAL_KEY) == (0.0, 0.0)


def test_rate_plus_quota_reports_the_most_restrictive() -> None:
    per_second = Limit("token-bucket", "10/s", name="per-second")
    per_hour = Limit("sliding-window-log", "20/h", name="per-hour")
    limiter, store, clock = make([per_second, per_hour])
    for i in range(10):
        d = limiter.hit("k")
        assert d.allowed and d.limit == per_second and d.remaining == 9 - i
    d = limiter.hit("k")
    assert not d.allowed and d.limit == per_second and d.retry_after == pytest.approx(0.1)
    assert store.state(per_hour, "k") == ((0.0, 10.0),)  # the hour limit was not charged
    clock.set(1.0)
    for _ in range(10):
        assert limiter.hit("k").allowed
    assert limiter.hit("k").limit == per_hour  # both reject: the hour's wait is longer
    clock.set(2.0)
    before = store.state(per_second, "k")
    d = limiter.hit("k")
    assert not d.allowed and d.limit == per_hour and d.retry_after == pytest.approx(3598.0)
    assert store.state(per_second, "k") == before
    assert limiter.peek("k").limit == per_hour


def test_merged_decision_when_all_admit() -> None:
    a = Limit("token-bucket", "1/s", burst=5, name="a")
    b = Limit("leaky-bucket", "1r/s", burst=5, name="b")
    limiter, _, _ = make([a, b])
    limiter.hit("k")
    d = limiter.hit("k")
    assert d.allowed and d.remaining == 3 and d.limit == a
    assert d.delay == 1.0  # the leaky bucket's queueing delay still applies


def test_merged_decision_never_is_longest() -> None:
    a = Limit("token-bucket", "1/s", burst=5, name="a")
    b = Limit("token-bucket", "1/s", burst=2, name="b")
    limiter, _, _ = make([a, b])
    limiter.hit("k", 2)
    d = limiter.hit("k", 3)  # a: 3 tokens, fits; b: 3 > 2 can never fit
    assert not d.allowed and d.retry_after is None and d.limit == b


def test_composite_cost_validated_against_every_limit() -> None:
    a = Limit("token-bucket", "1/s", burst=5, name="a")
    b = Limit("sliding-window-log", "5/s", name="b")
    limiter, store, _ = make([a, b])
    with pytest.raises(InvalidCost, match="whole"):
        limiter.hit("k", 1.5)
    assert len(store) == 0


# -- keys ------------------------------------------------------------------------------------

BAD_KEYS: list[tuple[object, str]] = [
    ("", "empty"),
    ("x" * 513, "513 characters"),
    ("a\nb", "non-printable"),
    ("a\x00b", "non-printable"),
    ("tab\there", "non-printable"),
    ("zero\u200bwidth", "non-printable"),
    (42, "got int 42"),
    (None, "got NoneType"),
    (b"key", "got bytes"),
    (["k"], "got list"),
    (4.2, "got float"),
]


@pytest.mark.parametrize(("key", "match"), BAD_KEYS)
def test_invalid_keys_lose_nothing(key: object, match: str) -> None:
    limiter, store, _ = make()
    limiter.hit("a")
    before = store.state(TB, "a")
    ops: list[Callable[[], object]] = [
        lambda: limiter.hit(key),  # type: ignore[arg-type]
        lambda: limiter.hit(key, 1.0),  # type: ignore[arg-type]
        lambda: limiter.peek(key),  # type: ignore[arg-type]
        lambda: limiter.reserve(key),  # type: ignore[arg-type]
        lambda: limiter.acquire(key),  # type: ignore[arg-type]
        lambda: limiter.reset(key),  # type: ignore[arg-type]
    ]
    for op in ops:
        with pytest.raises(InvalidKey, match=match):
            op()
    assert len(store) == 1 and store.state(TB, "a") == before


def test_key_errors_say_how_to_fix_them() -> None:
    limiter, _, _ = make()
    with pytest.raises(InvalidKey, match="hashlib"):
        limiter.hit("x" * 600)
    with pytest.raises(InvalidKey, match=r"str\(user_id\)"):
        limiter.hit(7)  # type: ignore[arg-type]
    with pytest.raises(InvalidKey, match="encode"):
        limiter.hit("\x1b[31m")


def test_max_key_length() -> None:
    limiter, _, _ = make(max_key_length=8)
    assert limiter.hit("x" * 8).allowed
    with pytest.raises(InvalidKey, match="max_key_length=8"):
        limiter.hit("x" * 9)
    limiter, _, _ = make()
    assert limiter.hit("k" * 512).allowed
    assert limiter.hit("ключ üñí 🙂 spaces ok").allowed


def test_str_subclass_keys_are_the_same_key() -> None:
    class Key(str):
        pass

    limiter, store, _ = make(Limit("token-bucket", "1/s", burst=1))
    assert limiter.hit(Key("a")).allowed
    assert not limiter.hit("a").allowed
    assert store.keys(limiter.limits[0]) == 1


@pytest.mark.parametrize("algo", [
    "token-bucket",
    "gcra",
    "leaky-bucket",
    "fixed-window",
    "sliding-window-log",
    "sliding-window-counter",
])
def test_huge_int_costs(algo: str) -> None:
    lim = some_limit(algo)
    limiter, store, _ = make(lim)
    for cost in (10**20, 10**400):
        try:
            d = limiter.hit("a", cost)
        except InvalidCost:
            continue
        assert not d.allowed and d.retry_after is None
    assert store.state(lim, "a") is None


@pytest.mark.parametrize("cost", [0, -1, math.nan, math.inf, True, "1", None])
def test_invalid_costs_lose_nothing(cost: object) -> None:
    limiter, store, _ = make()
    limiter.hit("a")
    before = store.state(TB, "a")
    with pytest.raises(InvalidCost):
        limiter.hit("a", cost)  # type: ignore[arg-type]
    with pytest.raises(InvalidCost):
        limiter.reserve("a", cost)  # type: ignore[arg-type]
    assert store.state(TB, "a") == before


# -- failure policies ------------------------------------------------------------------------

class FlakyStore:
    """A tiny Store whose every call raises `StoreUnavailable` while ``down`` is true.

    It tests the limiter's policy logic, not a store: when up, it delegates to a MemoryStore.
    """

    default_clock = staticmethod(time.monotonic)
    uses_client_clock = True

    def __init__(self, error: BaseException | None = None) -> None:
        self.inner = MemoryStore()
        self.down = True
        self.error = error or StoreUnavailable("connection refused (test)")
        self.calls = 0

    def _check(self) -> None:
        self.calls += 1
        if self.down:
            raise self.error

    def bind(self, limit: Limit) -> Callable[[str, float, float], Decision]:
        def decide(key: str, cost: float, now: float) -> Decision:
            self._check()
            return self.inner.decide_one(limit, key, cost, now)

        return decide

    def decide_one(self, limit: Limit, key: str, cost: float, now: float) -> Decision:
        self._check()
        return self.inner.decide_one(limit, key, cost, now)

    def decide(self, checks: Sequence[Check], now: float,
               consume: bool = True) -> tuple[list[Decision], float]:
        self._check()
        return self.inner.decide(checks, now, consume)

    def refund(self, checks: Sequence[Check], now: float, at: float) -> None:
        self._check()
        self.inner.refund(checks, now, at)

    def reset(self, limits: Sequence[Limit], key: str) -> None:
        self._check()
        self.inner.reset(limits, key)

    async def adecide_one(self, limit: Limit, key: str, cost: float, now: float) -> Decision:
        return self.decide_one(limit, key, cost, now)

    async def adecide(self, checks: Sequence[Check], now: float,
                      consume: bool = True) -> tuple[list[Decision], float]:
        return self.decide(checks, now, consume)

    async def arefund(self, checks: Sequence[Check], now: float, at: float) -> None:
        self.refund(checks, now, at)

    async def areset(self, limits: Sequence[Limit], key: str) -> None:
        self.reset(limits, key)


def test_flaky_store_is_a_store() -> None:
    assert isinstance(FlakyStore(), Store) and isinstance(FlakyStore(), AsyncStore)


@pytest.mark.parametrize("cost", [1, 1.0])  # the bound fast path and the general path
def test_fail_open(cost: float, caplog: pytest.LogCaptureFixture) -> None:
    store = FlakyStore()
    limiter, _, _ = make(store=store)
    with caplog.at_level(logging.WARNING, logger="ratekeeper"):
        for _ in range(5):
            d = limiter.hit("a", cost)
            assert d.allowed and d.degraded and d.remaining == 3 and d.limit == TB
    assert limiter.store_errors == 5
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # logged once per outage, not per request
    assert "'open'" in warnings[0].getMessage()
    store.down = False
    with caplog.at_level(logging.INFO, logger="ratekeeper"):
        d = limiter.hit("a", cost)
    assert d.allowed and not d.degraded and d.remaining == 2
    assert any("recovered" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("cost", [1, 1.0])
def test_fail_closed(cost: float) -> None:
    limiter, _, _ = make(store=FlakyStore(), failure="closed")
    d = limiter.hit("a", cost)
    assert not d.allowed and d.degraded and d.retry_after == 1.0 and d.limit == TB
    assert not limiter.peek("a").allowed


@pytest.mark.parametrize("cost", [1, 1.0])
def test_fail_local_uses_a_share_of_each_limit(cost: float) -> None:
    lim = Limit("token-bucket", "4/s", burst=4)
    limiter, _, clock = make(lim, store=FlakyStore(), failure="local", fallback_share=0.5)
    got = [limiter.hit("a", cost) for _ in range(3)]
    assert [d.allowed for d in got] == [True, True, False]  # half of burst 4
    assert all(d.degraded and d.limit == lim for d in got)
    assert got[2].retry_after == pytest.approx(0.5)  # half of 4/s
    clock.advance(0.5)
    assert limiter.hit("a", cost).allowed
    assert limiter.hit("b", cost).allowed  # keys are still separate


def test_fail_local_share_is_never_looser_than_the_limit() -> None:
    lim = Limit("leaky-bucket", "10r/s")  # nginx burst=0: one request at a time
    limiter, _, _ = make(lim, store=FlakyStore(), failure="local", fallback_share=0.5)
    assert limiter.hit("a").allowed
    assert not limiter.hit("a").allowed


def test_fail_local_composite() -> None:
    a = Limit("token-bucket", "1/s", burst=2, name="a")
    b = Limit("fixed-window", "3/m", name="b", scope="global")
    limiter, _, _ = make([a, b], store=FlakyStore(), failure="local")
    assert limiter.hit("x").allowed and limiter.hit("x").allowed
    d = limiter.hit("x")
    assert not d.allowed and d.limit == a and d.degraded
    assert limiter.hit("y").allowed
    d = limiter.hit("y")
    assert not d.allowed and d.limit == b  # the global share is spent


@pytest.mark.parametrize("cost", [1, 1.0])
def test_fail_raise(cost: float) -> None:
    store = FlakyStore()
    limiter, _, _ = make(store=store, failure="raise")
    with pytest.raises(StoreUnavailable) as e:
        limiter.hit("a", cost)
    assert e.value is store.error
    with pytest.raises(StoreError):
        limiter.peek("a")
    with pytest.raises(StoreError):
        limiter.reserve("a")
    store.down = False
    assert limiter.hit("a", cost).allowed


def test_reserve_under_failure_is_degraded_and_not_cancellable() -> None:
    store = FlakyStore()
    limiter, _, _ = make(store=store)
    r = limiter.reserve("a")
    assert r.ok and r.decision.degraded
    store.down = False
    assert r.cancel() is False
    assert store.inner.state(TB, "a") is None


def test_local_reservation_cancel_refunds_the_fallback() -> None:
    lim = Limit("token-bucket", "1/s", burst=1)
    limiter, _, _ = make(lim, store=FlakyStore(), failure="local")
    r = limiter.reserve("a")
    assert r.ok
    assert r.cancel() is True
    assert limiter.hit("a").allowed


def test_on_store_error_hook() -> None:
    seen: list[BaseException] = []
    store = FlakyStore()
    limiter, _, _ = make(store=store, on_store_error=seen.append)
    limiter.hit("a")
    limiter.hit("a", 2.0)
    assert seen == [store.error, store.error]

    def broken(exc: BaseException) -> None:
        raise RuntimeError("hook bug")

    limiter, _, _ = make(store=FlakyStore(), on_store_error=broken)
    assert limiter.hit("a").degraded  # a broken hook does not break rate limiting


def test_other_exceptions_are_not_a_failure_policy_matter() -> None:
    limiter, _, _ = make(store=FlakyStore(RuntimeError("bug in a store")))
    with pytest.raises(RuntimeError, match="bug in a store"):
        limiter.hit("a")
    assert limiter.store_errors == 0


# -- AsyncLimiter ----------------------------------------------------------------------------

async def test_async_hit_peek_reset() -> None:
    limiter, store, clock = amake()
    assert (await limiter.peek("a")).remaining == 2
    assert store.state(TB, "a") is None
    assert [(await limiter.hit("a")).allowed for _ in range(4)] == [True, True, True, False]
    d = await limiter.hit("a", 1.0)
    assert not d.allowed and d.retry_after == 1.0
    await limiter.reset("a")
    assert (await limiter.hit("a")).remaining == 2
    clock.advance(1)
    assert (await limiter.peek("a")) == (await limiter.hit("a"))


async def test_async_reservations() -> None:
    limiter, store, _ = amake()
    await limiter.hit("a")
    before = store.state(TB, "a")
    r = await limiter.reserve("a", 2)
    assert r.ok and r.delay == 0.0
    assert await r.cancel() is True
    assert store.state(TB, "a") == before
    assert await r.cancel() is False
    with pytest.raises(KeyError):
        async with await limiter.reserve("a"):
            raise KeyError("boom")
    assert store.state(TB, "a") == before
    async with await limiter.reserve("a") as r2:
        assert r2.ok
    assert store.state(TB, "a") != before
    rejected = await limiter.reserve("a", 4)
    assert not rejected.ok and await rejected.cancel() is False


async def test_async_acquire() -> None:
    limiter, _, clock = amake(Limit("token-bucket", "1/s", burst=1))
    await limiter.acquire("a")
    assert (await limiter.acquire("a")).allowed
    assert clock.slept == [1.0]
    with pytest.raises(RateLimitExceeded):
        await limiter.acquire("a", 2)
    with pytest.raises(RateLimitExceeded):
        await limiter.acquire("a", timeout=0.5)
    assert clock.slept == [1.0]
    leaky, _, lclock = amake(Limit("leaky-bucket", "4r/s", burst=2))
    await leaky.acquire("a")
    await leaky.acquire("a")
    assert lclock.slept == [0.25]


async def test_async_decorator() -> None:
    limiter, _, clock = amake(Limit("token-bucket", "1/s", burst=2))
    calls: list[str] = []

    @limiter.limit(key=lambda user: user, cost=lambda user: 1)
    async def fetch(user: str) -> str:
        calls.append(user)
        return user

    assert await fetch("a") == "a" and await fetch("a") == "a"
    with pytest.raises(RateLimitExceeded):
        await fetch("a")
    assert calls == ["a", "a"] and await fetch("b") == "b"

    @limiter.limit("w", wait=True)
    async def waiting() -> float:
        return clock.now

    for _ in range(2):
        await waiting()
    assert await waiting() == 1.0 and clock.slept == [1.0]

    with pytest.raises(TypeError, match="coroutine"):
        limiter.limit()(lambda: None)


async def test_async_composite_and_keys() -> None:
    per_key = Limit("token-bucket", "1/s", burst=2, name="per-key")
    glob = Limit("token-bucket", "1/s", burst=3, name="all", scope="global")
    limiter, store, _ = amake([per_key, glob])
    assert (await limiter.hit("a")).allowed and (await limiter.hit("b")).allowed
    assert (await limiter.hit("c")).allowed
    d = await limiter.hit("d")
    assert not d.allowed and d.limit == glob
    assert store.state(per_key, "d") is None
    for key, _ in BAD_KEYS:
        with pytest.raises(InvalidKey):
            await limiter.hit(key)  # type: ignore[arg-type]
    assert store.keys(per_key) == 3


async def test_async_failure_policies() -> None:
    for failure, allowed in (("open", True), ("closed", False)):
        limiter, _, _ = amake(store=FlakyStore(), failure=failure)
        d = await limiter.hit("a")
        assert d.allowed is allowed and d.degraded
        assert (await limiter.peek("a")).degraded
        r = await limiter.reserve("a")
        assert r.decision.degraded and await r.cancel() is False
    limiter, _, _ = amake(store=FlakyStore(), failure="raise")
    with pytest.raises(StoreUnavailable):
        await limiter.hit("a")
    limiter, _, _ = amake(Limit("token-bucket", "2/s", burst=2), store=FlakyStore(),
                          failure="local", fallback_share=0.5)
    assert (await limiter.hit("a")).allowed and not (await limiter.hit("a")).allowed
