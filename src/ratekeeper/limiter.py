"""`Limiter` and `AsyncLimiter`: keys and limits in, `Decision` out.

Both share `_LimiterCore`, which holds everything that is not I/O: validating keys and costs,
building the checks of a composite limit, merging per-limit decisions into one, the failure
policy, and the acquire/wait plan. The two classes only differ in how they call the store
(``store.decide`` or ``await store.adecide``) and how they sleep.

Composite limits (per-key and global, or 10/s plus 1000/hour) are decided all-or-nothing by
the store: if any limit rejects, none is charged. The merged decision reports the most
restrictive limit: among rejecting limits the one with the longest `retry_after` (``None``,
never, is longest); when all admit, the one with the fewest `remaining`.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, TypeVar, cast

from ._errors import InvalidKey, InvalidLimit, RateLimitExceeded, StoreError
from ._rates import Rate
from ._types import Decision, Limit
from .stores._base import AsyncStore, Check, Store
from .stores.memory import MemoryStore

__all__ = [
    "GLOBAL_KEY",
    "AsyncLimiter",
    "AsyncReservation",
    "FailurePolicy",
    "Limiter",
    "Reservation",
    "merge_decisions",
]

log = logging.getLogger("ratekeeper")

#: The key under which ``scope="global"`` limits keep their single counter.
GLOBAL_KEY = "*global*"

FailurePolicy = Literal["open", "closed", "local", "raise"]
_POLICIES = ("open", "closed", "local", "raise")

F = TypeVar("F", bound=Callable[..., Any])

#: How long a fail-closed decision tells the caller to wait.
CLOSED_RETRY_AFTER = 1.0


def merge_decisions(decisions: Sequence[Decision]) -> Decision:
    """One decision for a composite check: the most restrictive of the per-limit decisions.

    Among rejections, the one with the longest `retry_after` (``None``, never, is longest);
    when all admit, the one with the fewest `remaining` (its `delay` raised to the longest
    delay of any limit).
    """
    if len(decisions) == 1:
        return decisions[0]
    rejected = [d for d in decisions if not d.allowed]
    if rejected:
        return max(rejected, key=lambda d: math.inf if d.retry_after is None else d.retry_after)
    best = min(decisions, key=lambda d: (d.remaining, -d.reset_after))
    delay = max(d.delay for d in decisions)
    return best if delay == best.delay else best._replace(delay=delay)


class _LimiterCore:
    """Everything about a limiter that is not I/O."""

    def __init__(
        self,
        limits: Limit | Sequence[Limit],
        store: Any,
        clock: Callable[[], float] | None,
        *,
        failure: FailurePolicy = "open",
        fallback_share: float = 1.0,
        on_store_error: Callable[[BaseException], None] | None = None,
        max_key_length: int = 512,
    ) -> None:
        lims = (limits,) if isinstance(limits, Limit) else tuple(limits)
        if not lims:
            raise InvalidLimit("a limiter needs at least one Limit")
        for lim in lims:
            if not isinstance(lim, Limit):
                raise InvalidLimit(f"expected Limit objects, got {lim!r}")
        names = [lim.name for lim in lims]
        if len(set(names)) != len(names):
            raise InvalidLimit(f"limits of one limiter need distinct names, got {names}")
        if failure not in _POLICIES:
            raise InvalidLimit(f"failure must be one of {_POLICIES}, got {failure!r}")
        if not (0 < fallback_share <= 1):
            raise InvalidLimit(f"fallback_share must be in (0, 1], got {fallback_share!r}")
        self.limits: tuple[Limit, ...] = lims
        self.store = store
        self.clock: Callable[[], float] = clock or store.default_clock
        self.failure: FailurePolicy = failure
        self.fallback_share = fallback_share
        self.on_store_error = on_store_error
        self.max_key_length = max_key_length
        self.store_errors = 0  # how many decisions a failure policy had to make
        self._failing = False
        # Fast path: one per-key limit, the common case.
        self._single: Limit | None = lims[0] if len(lims) == 1 and lims[0].scope == "key" else None
        self._fallback: MemoryStore | None = None
        self._fallback_limits: tuple[Limit, ...] = ()

    def __repr__(self) -> str:
        names = ", ".join(lim.name for lim in self.limits)
        return f"{type(self).__name__}([{names}], store={self.store!r}, failure={self.failure!r})"

    # -- input validation ---------------------------------------------------------------

    def _key(self, key: object) -> str:
        if key.__class__ is not str:
            if isinstance(key, str):
                key = str(key)
            else:
                raise InvalidKey(
                    f"a key must be a string, got {type(key).__name__} {key!r:.60}; "
                    "convert it (str(user_id)) or use a key function that returns a string"
                )
        k = key
        if not k:
            raise InvalidKey("a key must not be empty")
        if len(k) > self.max_key_length:
            raise InvalidKey(
                f"key is {len(k)} characters long, over max_key_length={self.max_key_length}: "
                f"{k[:40]!r}...; hash long keys (e.g. hashlib.sha256) or raise max_key_length"
            )
        if not k.isprintable():
            raise InvalidKey(
                f"key {k[:60]!r} contains control or non-printable characters; "
                "encode it first (e.g. key.encode().hex())"
            )
        return k

    def _checks(self, key: str, cost: object) -> list[Check]:
        out: list[Check] = []
        for lim in self.limits:
            c = lim.check_cost(cost)  # type: ignore[arg-type]
            out.append((lim, key if lim.scope == "key" else GLOBAL_KEY, c))
        return out

    def _fast_ok(self, key: object, cost: object) -> bool:
        return (
            self._single is not None
            and cost.__class__ is int
            and cost > 0
            and key.__class__ is str
            and 0 < len(key) <= self.max_key_length
            and key.isprintable()
        )

    # -- failure policy -----------------------------------------------------------------

    def _store_failed(self, exc: BaseException) -> None:
        self.store_errors += 1
        if not self._failing:
            self._failing = True
            log.warning(
                "rate limit store failed (%s); applying failure policy %r",
                exc,
                self.failure,
                exc_info=not isinstance(exc, StoreError),
            )
        if self.on_store_error is not None:
            try:
                self.on_store_error(exc)
            except Exception:  # a broken hook must not break rate limiting
                log.exception("on_store_error hook raised")
        if self.failure == "raise":
            if isinstance(exc, StoreError):
                raise exc
            raise StoreError(f"rate limit store failed: {exc!r}") from exc

    def _store_ok(self) -> None:
        if self._failing:
            self._failing = False
            log.info("rate limit store recovered")

    def _degraded(self, checks: Sequence[Check], now: float) -> Decision:
        """The decision the failure policy makes when the store could not."""
        return self._degraded_charge(checks, now)[0]

    def _degraded_charge(
        self, checks: Sequence[Check], now: float
    ) -> tuple[Decision, MemoryStore | None, list[Check]]:
        """`_degraded`, plus where it charged the request (the local fallback, if any)."""
        if self.failure == "local":
            if self._fallback is None:
                self._fallback = MemoryStore()
                self._fallback_limits = tuple(
                    _share(lim, self.fallback_share) for lim in self.limits
                )
            local = [(self._fallback_limits[i], k, c) for i, (_, k, c) in enumerate(checks)]
            decisions, _ = self._fallback.decide(local, now)
            # Report the configured limits, not their local shares.
            merged = merge_decisions(
                [d._replace(limit=checks[i][0], degraded=True) for i, d in enumerate(decisions)]
            )
            return merged, (self._fallback if merged.allowed else None), local
        lim = checks[0][0]
        if self.failure == "closed":
            d = Decision(False, 0, CLOSED_RETRY_AFTER, CLOSED_RETRY_AFTER, 0.0, lim, True)
        else:
            d = Decision(True, lim.quota, 0.0, 0.0, 0.0, lim, True)
        return d, None, []

    # -- acquire plan -------------------------------------------------------------------

    def _wait_for(self, d: Decision, deadline: float | None) -> float:
        """Seconds to sleep before trying again, or raise when waiting cannot help."""
        if d.retry_after is None:
            raise RateLimitExceeded(d, f"cost can never be admitted by {d.limit!r}: {d!r}")
        wait = max(d.retry_after, 1e-6)
        if deadline is not None and self.clock() + wait > deadline:
            raise RateLimitExceeded(d, f"would have to wait {wait:.3f}s, past the timeout: {d!r}")
        return wait

    def _delay_within(self, r: Reservation, deadline: float | None) -> float:
        """An admitted reservation's queueing delay; refund it and raise if past `deadline`."""
        d = r.decision
        if deadline is not None and self.clock() + d.delay > deadline:
            r.cancel()
            raise RateLimitExceeded(d, f"queueing delay {d.delay:g}s is past the timeout: {d!r}")
        return d.delay

    @staticmethod
    def _deadline(clock: Callable[[], float], timeout: float | None) -> float | None:
        if timeout is None:
            return None
        if not (timeout >= 0):
            raise ValueError(f"timeout must be >= 0 seconds or None, got {timeout!r}")
        return clock() + timeout


def _share(lim: Limit, share: float) -> Limit:
    """`lim` scaled to a `share` of its rate and burst (the local fallback's part)."""
    if share == 1:
        return lim
    rate = Rate(lim.rate.amount * share, lim.rate.period)  # type: ignore[union-attr]
    burst = lim.burst
    if burst is not None:
        if lim.algorithm == "leaky-bucket":
            burst = float(math.floor(burst * share))  # nginx burst counts whole requests
        else:
            # A bucket smaller than one token would reject every unit request.
            burst = max(min(1.0, burst), burst * share)
    return Limit(
        lim.algorithm,
        rate,
        burst=burst,
        nodelay=lim.nodelay,
        delay=lim.delay,
        name=lim.name,
        scope=lim.scope,
    )


def _refund_failed(decision: Decision, et: type[BaseException], exc: Exception) -> None:
    """Log a refund that failed while a reservation's block was raising `et`.

    The cost stays charged (its key expires as usual); raising here would replace the
    caller's own exception with ours.
    """
    log.warning(
        "could not refund a reservation (%r) while its block raised %s: %s",
        decision,
        et.__name__,
        exc,
        exc_info=not isinstance(exc, StoreError),  # a bug deserves its traceback
    )


class Reservation:
    """An admitted (or rejected) request that can be cancelled, refunding its cost.

    Like x/time/rate's `Reservation`: `ok` says whether it was admitted, `delay` how long to
    wait before acting. `cancel()` gives the cost back to every limit it was charged to (once;
    further calls do nothing). Used as a context manager, it cancels when the block raises;
    if that refund fails (the store is down), the failure is logged and the block's own
    exception propagates unchanged.
    """

    __slots__ = ("_checks", "_done", "_limiter", "_store", "at", "decision")

    def __init__(
        self,
        limiter: Limiter,
        checks: list[Check],
        decision: Decision,
        at: float,
        store: Store | None = None,
    ) -> None:
        self._limiter = limiter
        self._store = limiter.store if store is None else store
        self._checks = checks
        self.decision = decision
        self.at = at
        self._done = not decision.allowed

    @property
    def ok(self) -> bool:
        return self.decision.allowed

    @property
    def delay(self) -> float:
        return self.decision.delay

    def cancel(self) -> bool:
        """Refund the cost if it was charged and not yet refunded; True if refunded."""
        if self._done:
            return False
        self._done = True
        self._store.refund(self._checks, self._limiter.clock(), self.at)
        return True

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: object, tb: object) -> None:
        if et is not None:
            try:
                self.cancel()
            except Exception as e:  # the caller's exception is the one to propagate
                _refund_failed(self.decision, et, e)

    def __repr__(self) -> str:
        return f"Reservation({self.decision!r}, cancelled={self._done and self.ok})"


class AsyncReservation:
    """`Reservation` for `AsyncLimiter`: ``await r.cancel()``; ``async with`` cancels on error."""

    __slots__ = ("_checks", "_done", "_limiter", "_store", "at", "decision")

    def __init__(
        self,
        limiter: AsyncLimiter,
        checks: list[Check],
        decision: Decision,
        at: float,
        store: AsyncStore | None = None,
    ) -> None:
        self._limiter = limiter
        self._store = limiter.store if store is None else store
        self._checks = checks
        self.decision = decision
        self.at = at
        self._done = not decision.allowed

    @property
    def ok(self) -> bool:
        return self.decision.allowed

    @property
    def delay(self) -> float:
        return self.decision.delay

    async def cancel(self) -> bool:
        if self._done:
            return False
        self._done = True
        await self._store.arefund(self._checks, self._limiter.clock(), self.at)
        return True

    async def __aenter__(self) -> AsyncReservation:
        return self

    async def __aexit__(self, et: type[BaseException] | None, ev: object, tb: object) -> None:
        if et is not None:
            try:
                await self.cancel()
            except Exception as e:  # the caller's exception is the one to propagate
                _refund_failed(self.decision, et, e)


class Limiter(_LimiterCore):
    """Rate limits for synchronous code.

    >>> from ratekeeper import Limit, Limiter
    >>> from ratekeeper.testing import ManualClock
    >>> limiter = Limiter(Limit("token-bucket", "1/s", burst=2), clock=ManualClock())
    >>> [limiter.hit("alice").allowed for _ in range(3)]
    [True, True, False]

    `store` defaults to a new `MemoryStore`. `clock` (seconds) defaults to the store's
    (monotonic for memory). `failure` is what happens when the store is unavailable:
    ``"open"`` admits (the default, as Envoy does), ``"closed"`` rejects (login and other
    security limits), ``"local"`` decides on an in-process `MemoryStore` holding
    `fallback_share` of each limit, ``"raise"`` raises `StoreError`.
    """

    def __init__(
        self,
        limits: Limit | Sequence[Limit],
        store: Store | None = None,
        *,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        failure: FailurePolicy = "open",
        fallback_share: float = 1.0,
        on_store_error: Callable[[BaseException], None] | None = None,
        max_key_length: int = 512,
    ) -> None:
        store = MemoryStore() if store is None else store
        if not isinstance(store, Store):
            raise TypeError(f"{store!r} is not a synchronous store; use AsyncLimiter with it")
        super().__init__(
            limits,
            store,
            clock,
            failure=failure,
            fallback_share=fallback_share,
            on_store_error=on_store_error,
            max_key_length=max_key_length,
        )
        self._sleep = sleep
        if self._single is not None:
            if isinstance(store, MemoryStore):
                # In-process: the store runs the whole hot path (it cannot fail, so there is
                # no failure policy to apply).
                fast = store.bind_hit(self._single, self.clock, self._key, self._hit)
            else:
                fast = self._bind_hit(self._single)
            self.hit = fast  # type: ignore[method-assign, assignment]

    def _bind_hit(self, single: Limit) -> Callable[[str, float], Decision]:
        """The hot path, bound once: one key-scoped limit, an int cost, a plain str key.

        Anything else (float costs, odd keys) takes the general path, which validates fully.
        """
        decide: Callable[[str, float, float], Decision] = self.store.bind(single)
        clock = self.clock
        # A store on its own clock (Redis TIME) ignores `now`: do not read ours for it.
        if getattr(self.store, "uses_client_clock", True) is False:
            clock = float  # float() == 0.0, a placeholder
        max_len = self.max_key_length
        slow = self._hit

        def hit(key: str, cost: float = 1) -> Decision:
            if (
                cost.__class__ is int
                and cost > 0
                and key.__class__ is str
                and 0 < len(key) <= max_len
                and key.isprintable()
            ):
                try:
                    d = decide(key, cost, clock())
                except StoreError as e:
                    return self._fail(e, key, cost)
                if self._failing:
                    self._store_ok()
                return d
            return slow(key, cost)

        hit.__doc__ = Limiter.hit.__doc__
        return hit

    async def _asleep(self, seconds: float) -> None:
        """Sleep in a coroutine: `asyncio.sleep`, unless a sleep function was injected."""
        if self._sleep is time.sleep:
            await asyncio.sleep(seconds)
        else:
            self._sleep(seconds)  # an injected sleep (ManualClock.sleep) does not block

    def hit(self, key: str, cost: float = 1) -> Decision:
        """Check `key` and, if every limit admits `cost`, charge it. Returns the `Decision`."""
        return self._hit(key, cost)

    def _hit(self, key: object, cost: object) -> Decision:
        checks = self._checks(self._key(key), cost)
        now = self.clock()
        try:
            if len(checks) == 1:
                lim, k, c = checks[0]
                d: Decision = self.store.decide_one(lim, k, c, now)
            else:
                d = merge_decisions(self.store.decide(checks, now, True)[0])
        except StoreError as e:
            self._store_failed(e)
            return self._degraded(checks, now)
        self._store_ok()
        return d

    def _fail(self, e: StoreError, key: str, cost: float) -> Decision:
        self._store_failed(e)
        return self._degraded(self._checks(key, cost), self.clock())

    def peek(self, key: str, cost: float = 1) -> Decision:
        """The decision `hit` would make now, without charging anything."""
        checks = self._checks(self._key(key), cost)
        now = self.clock()
        try:
            decisions, _ = self.store.decide(checks, now, False)
        except StoreError as e:
            self._store_failed(e)
            return self._degraded(checks, now)
        self._store_ok()
        return merge_decisions(decisions)

    def reset(self, key: str) -> None:
        """Forget `key`'s state in every per-key limit (global limits are left alone)."""
        k = self._key(key)
        self.store.reset([lim for lim in self.limits if lim.scope == "key"], k)

    def reserve(self, key: str, cost: float = 1) -> Reservation:
        """Like `hit`, but returns a `Reservation` whose `cancel()` refunds the cost."""
        checks = self._checks(self._key(key), cost)
        now = self.clock()
        try:
            decisions, at = self.store.decide(checks, now, True)
        except StoreError as e:
            self._store_failed(e)
            d, charged, local = self._degraded_charge(checks, now)
            r = Reservation(self, local, d, now, charged)
            r._done = charged is None  # nothing was charged anywhere: nothing to refund
            return r
        self._store_ok()
        return Reservation(self, checks, merge_decisions(decisions), at)

    def acquire(self, key: str, cost: float = 1, timeout: float | None = None) -> Decision:
        """Block until `cost` is admitted (like Go's ``WaitN`` or Guava's ``acquire``).

        Sleeps for the decision's `retry_after` between attempts and for its `delay` once
        admitted. Raises `RateLimitExceeded` at once when the cost can never be admitted or
        when admission would come after `timeout` seconds.
        """
        deadline = self._deadline(self.clock, timeout)
        while True:
            r = self.reserve(key, cost)
            d = r.decision
            if d.allowed:
                if d.delay > 0:
                    self._sleep(self._delay_within(r, deadline))
                return d
            self._sleep(self._wait_for(d, deadline))

    def limit(
        self,
        key: str | Callable[..., str] | None = None,
        cost: float | Callable[..., float] = 1,
        *,
        wait: bool = False,
        timeout: float | None = None,
    ) -> Callable[[F], F]:
        """Decorate a function (sync or async) so each call is rate limited.

        `key` is a fixed string or a function of the call's arguments (default: the
        function's qualified name, i.e. one limit for all callers). Without `wait`, a
        rejected call raises `RateLimitExceeded`; with ``wait=True`` the call waits like
        `acquire` (``await asyncio.sleep`` for coroutine functions, or the injected `sleep`),
        up to `timeout`. A call admitted with a queueing `delay` (leaky bucket) runs after it.
        """

        def decorate(fn: F) -> F:
            key_of = _key_function(key, fn)
            cost_of = _cost_function(cost)
            if inspect.iscoroutinefunction(fn):

                @functools.wraps(fn)
                async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                    k, c = key_of(*args, **kwargs), cost_of(*args, **kwargs)
                    deadline = self._deadline(self.clock, timeout)
                    while True:
                        r = self.reserve(k, c)
                        d = r.decision
                        if d.allowed:
                            if d.delay > 0:
                                await self._asleep(self._delay_within(r, deadline))
                            return await fn(*args, **kwargs)
                        if not wait:
                            raise RateLimitExceeded(d)
                        await self._asleep(self._wait_for(d, deadline))

                return cast(F, async_wrapper)

            @functools.wraps(fn)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                k, c = key_of(*args, **kwargs), cost_of(*args, **kwargs)
                if wait:
                    self.acquire(k, c, timeout)
                else:
                    d = self.hit(k, c)
                    if not d.allowed:
                        raise RateLimitExceeded(d)
                    if d.delay > 0:
                        self._sleep(d.delay)  # admitted behind others: wait its turn
                return fn(*args, **kwargs)

            return cast(F, wrapper)

        return decorate


class AsyncLimiter(_LimiterCore):
    """Rate limits for asyncio code: the same API as `Limiter`, with coroutines.

    Works with any `AsyncStore` (`MemoryStore`, the async Redis store).
    """

    def __init__(
        self,
        limits: Limit | Sequence[Limit],
        store: AsyncStore | None = None,
        *,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        failure: FailurePolicy = "open",
        fallback_share: float = 1.0,
        on_store_error: Callable[[BaseException], None] | None = None,
        max_key_length: int = 512,
    ) -> None:
        store = MemoryStore() if store is None else store
        if not isinstance(store, AsyncStore):
            raise TypeError(f"{store!r} is not an asyncio store; use Limiter with it")
        super().__init__(
            limits,
            store,
            clock,
            failure=failure,
            fallback_share=fallback_share,
            on_store_error=on_store_error,
            max_key_length=max_key_length,
        )
        self._sleep = sleep

    async def hit(self, key: str, cost: float = 1) -> Decision:
        """Check `key` and, if every limit admits `cost`, charge it."""
        if self._fast_ok(key, cost):
            checks: list[Check] = [(cast(Limit, self._single), key, cost)]
        else:
            checks = self._checks(self._key(key), cost)
        now = self.clock()
        try:
            if len(checks) == 1:
                lim, k, c = checks[0]
                d: Decision = await self.store.adecide_one(lim, k, c, now)
            else:
                d = merge_decisions((await self.store.adecide(checks, now, True))[0])
        except StoreError as e:
            self._store_failed(e)
            return self._degraded(checks, now)
        self._store_ok()
        return d

    async def peek(self, key: str, cost: float = 1) -> Decision:
        checks = self._checks(self._key(key), cost)
        now = self.clock()
        try:
            decisions, _ = await self.store.adecide(checks, now, False)
        except StoreError as e:
            self._store_failed(e)
            return self._degraded(checks, now)
        self._store_ok()
        return merge_decisions(decisions)

    async def reset(self, key: str) -> None:
        k = self._key(key)
        await self.store.areset([lim for lim in self.limits if lim.scope == "key"], k)

    async def reserve(self, key: str, cost: float = 1) -> AsyncReservation:
        checks = self._checks(self._key(key), cost)
        now = self.clock()
        try:
            decisions, at = await self.store.adecide(checks, now, True)
        except StoreError as e:
            self._store_failed(e)
            d, charged, local = self._degraded_charge(checks, now)
            r = AsyncReservation(self, local, d, now, charged)
            r._done = charged is None  # nothing was charged anywhere: nothing to refund
            return r
        self._store_ok()
        return AsyncReservation(self, checks, merge_decisions(decisions), at)

    async def acquire(self, key: str, cost: float = 1, timeout: float | None = None) -> Decision:
        """Wait until `cost` is admitted; see `Limiter.acquire`."""
        deadline = self._deadline(self.clock, timeout)
        while True:
            r = await self.reserve(key, cost)
            d = r.decision
            if d.allowed:
                if d.delay > 0 and deadline is not None and self.clock() + d.delay > deadline:
                    await r.cancel()
                    raise RateLimitExceeded(d, f"queueing delay {d.delay:g}s is past the timeout")
                if d.delay > 0:
                    await self._sleep(d.delay)
                return d
            await self._sleep(self._wait_for(d, deadline))

    def limit(
        self,
        key: str | Callable[..., str] | None = None,
        cost: float | Callable[..., float] = 1,
        *,
        wait: bool = False,
        timeout: float | None = None,
    ) -> Callable[[F], F]:
        """Decorate a coroutine function; see `Limiter.limit`."""

        def decorate(fn: F) -> F:
            if not inspect.iscoroutinefunction(fn):
                raise TypeError(
                    f"AsyncLimiter.limit decorates coroutine functions; {fn!r} is not one "
                    "(use Limiter.limit for synchronous functions)"
                )
            key_of = _key_function(key, fn)
            cost_of = _cost_function(cost)

            @functools.wraps(fn)
            async def wrapper(*args: Any, **kwargs: Any) -> Any:
                k, c = key_of(*args, **kwargs), cost_of(*args, **kwargs)
                if wait:
                    await self.acquire(k, c, timeout)
                else:
                    d = await self.hit(k, c)
                    if not d.allowed:
                        raise RateLimitExceeded(d)
                    if d.delay > 0:
                        await self._sleep(d.delay)  # admitted behind others: wait its turn
                return await fn(*args, **kwargs)

            return cast(F, wrapper)

        return decorate


def _key_function(
    key: str | Callable[..., str] | None, fn: Callable[..., Any]
) -> Callable[..., str]:
    if key is None:
        name = f"{fn.__module__}.{fn.__qualname__}"
        return lambda *a, **k: name
    if isinstance(key, str):
        fixed = key
        return lambda *a, **k: fixed
    return key


def _cost_function(cost: float | Callable[..., float]) -> Callable[..., float]:
    if callable(cost):
        return cost
    fixed = cost
    return lambda *a, **k: fixed
