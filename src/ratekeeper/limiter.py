"""`Limiter` and `AsyncLimiter`: keys and limits in, `Decision` out.

Both are thin drivers of the decision core (`ratekeeper.core`): `_Driver` builds the plans
(validation, checks, composite merge, failure policy, reservations, waits) and each class
only executes them, `Limiter` with `core.run` and `AsyncLimiter` with `core.arun`. The hot
path of a single per-key limit is bound once by the store (`Store.bind_hit`).

Composite limits (per-key and global, or 10/s plus 1000/hour) are decided all-or-nothing:
if any limit rejects, none is charged. The merged decision reports the most restrictive
limit: among rejecting limits the one with the longest `retry_after` (``None``, never, is
longest); when all admit, the one with the fewest `remaining`.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, ClassVar, Generic, TypeVar, cast

from . import core
from ._errors import RateLimitExceeded, StoreError
from ._types import GLOBAL_KEY, Decision, Limit
from .core import (
    CLOSED_RETRY_AFTER,
    Failure,
    FailurePolicy,
    Limits,
    Op,
    Plan,
    Ticket,
    arun,
    merge_decisions,
    run,
)
from .stores._base import AsyncStore, HitHooks, Store, abind_fallible_hit, bind_fallible_hit
from .stores.memory import MemoryStore

__all__ = [
    "CLOSED_RETRY_AFTER",
    "GLOBAL_KEY",
    "AsyncLimiter",
    "AsyncReservation",
    "FailurePolicy",
    "Limiter",
    "Reservation",
    "merge_decisions",
]

log = logging.getLogger("ratekeeper")

F = TypeVar("F", bound=Callable[..., Any])
S = TypeVar("S")


class _Driver(Generic[S]):
    """Everything `Limiter` and `AsyncLimiter` share: construction, state and the plans.

    A subclass names the store protocol it drives (`_protocol`), its default sleep, and how
    it binds the one-limit hot path (`_bind_hit`).
    """

    _protocol: ClassVar[type]
    _wrong_store: ClassVar[str]

    def __init__(
        self,
        limits: Limit | Sequence[Limit],
        store: S | None = None,
        *,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], Any] | None = None,
        failure: FailurePolicy = "open",
        fallback_share: float = 1.0,
        on_store_error: Callable[[BaseException], None] | None = None,
        max_key_length: int = core.MAX_KEY_LENGTH,
    ) -> None:
        the_store: Any = MemoryStore() if store is None else store
        if not isinstance(the_store, self._protocol):
            raise TypeError(f"{the_store!r} is not {self._wrong_store}")
        the_store = cast(Any, the_store)
        self._limits = Limits(limits, max_key_length)
        self._failure = Failure(failure, fallback_share, on_error=on_store_error)
        self.limits: tuple[Limit, ...] = self._limits.all
        self.store: S = the_store
        self.clock: Callable[[], float] = clock or the_store.default_clock
        self.max_key_length = max_key_length
        self._waits = core.Waits(self.clock)
        self._sleep: Callable[[float], Any] = self._default_sleep() if sleep is None else sleep
        single = self._limits.single
        if single is not None:  # the hot path, bound once (see stores._base)
            self.hit = self._bind_hit(single)
        else:
            composite = self._bind_composite()
            if composite is not None:
                self.hit = composite

    @staticmethod
    def _default_sleep() -> Callable[[float], Any]:
        raise NotImplementedError

    def _bind_hit(self, single: Limit) -> Callable[[str, float], Any]:
        raise NotImplementedError

    def _bind_composite(self) -> Callable[[str, float], Any] | None:
        return None

    @property
    def failure(self) -> FailurePolicy:
        return self._failure.policy

    @property
    def fallback_share(self) -> float:
        return self._failure.share

    @property
    def on_store_error(self) -> Callable[[BaseException], None] | None:
        return self._failure.on_error

    @property
    def store_errors(self) -> int:
        """How many decisions a failure policy had to make."""
        return self._failure.errors

    def __repr__(self) -> str:
        names = ", ".join(lim.name for lim in self.limits)
        return f"{type(self).__name__}([{names}], store={self.store!r}, failure={self.failure!r})"

    def _hooks(self, slow: Callable[[str, float], Any]) -> HitHooks:
        return core.hit_hooks(self._limits, self.clock, self._failure, slow)

    # -- plans ---------------------------------------------------------------------------

    def _hit_plan(self, key: object, cost: object) -> Plan[Decision]:
        return core.hit(self.store, self._limits.checks(key, cost), self.clock(), self._failure)

    def _peek_plan(self, key: object, cost: object) -> Plan[Decision]:
        return core.hit(self.store, self._limits.checks(key, cost), self.clock(), self._failure,
                        consume=False)

    def _reset_plan(self, key: object) -> Plan[None]:
        yield Op(self.store, "reset", (self._limits.per_key, self._limits.key(key)))

    def _reserve_plan(self, key: object, cost: object) -> Plan[tuple[Decision, Ticket | None]]:
        checks = self._limits.checks(key, cost)
        decisions, ticket = yield from core.decide(self.store, checks, self.clock(),
                                                   self._failure)
        return merge_decisions(decisions), ticket

    def _acquire_plan(self, key: object, cost: object, timeout: float | None,
                      sleep: Callable[[float], Any]) -> Plan[Decision]:
        deadline = self._waits.deadline(timeout)
        while True:
            d, ticket = yield from self._reserve_plan(key, cost)
            if d.allowed:
                if d.delay > 0:
                    if not self._waits.delay_fits(d, deadline):
                        if ticket is not None:
                            yield from core.refund(ticket, self.clock())
                        raise RateLimitExceeded(
                            d, f"queueing delay {d.delay:g}s is past the timeout: {d!r}")
                    yield Op(sleep, "sleep", (d.delay,))
                return d
            yield Op(sleep, "sleep", (self._waits.retry_wait(d, deadline),))

    def _admit_plan(self, key: object, cost: object, wait: bool, timeout: float | None,
                    sleep: Callable[[float], Any]) -> Plan[Decision]:
        """A decorated call's admission: wait like `acquire`, or raise when rejected."""
        if wait:
            return (yield from self._acquire_plan(key, cost, timeout, sleep))
        d = yield from self._hit_plan(key, cost)
        if not d.allowed:
            raise RateLimitExceeded(d)
        if d.delay > 0:
            yield Op(sleep, "sleep", (d.delay,))  # admitted behind others: wait its turn
        return d


class _Reservation:
    """What `Reservation` and `AsyncReservation` share (all but how they refund)."""

    __slots__ = ("_done", "_limiter", "_ticket", "decision")

    def __init__(self, limiter: _Driver[Any], decision: Decision, ticket: Ticket | None) -> None:
        self._limiter = limiter
        self._ticket = ticket
        self.decision = decision
        self._done = ticket is None  # nothing was charged anywhere: nothing to refund

    @property
    def ok(self) -> bool:
        return self.decision.allowed

    @property
    def delay(self) -> float:
        return self.decision.delay

    @property
    def at(self) -> float | None:
        """The store's time of the charge (None when nothing was charged)."""
        return None if self._ticket is None else self._ticket.at

    def _refund_plan(self) -> Plan[bool]:
        if self._done or self._ticket is None:
            return False
        self._done = True
        yield from core.refund(self._ticket, self._limiter.clock())
        return True

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.decision!r}, cancelled={self._done and self.ok})"


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


class Reservation(_Reservation):
    """An admitted (or rejected) request that can be cancelled, refunding its cost.

    Like x/time/rate's `Reservation`: `ok` says whether it was admitted, `delay` how long to
    wait before acting. `cancel()` gives the cost back to every limit it was charged to (once;
    further calls do nothing). Used as a context manager, it cancels when the block raises;
    if that refund fails (the store is down), the failure is logged and the block's own
    exception propagates unchanged.
    """

    __slots__ = ()

    def cancel(self) -> bool:
        """Refund the cost if it was charged and not yet refunded; True if refunded."""
        return run(self._refund_plan())

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: object, tb: object) -> None:
        if et is not None:
            try:
                self.cancel()
            except Exception as e:  # the caller's exception is the one to propagate
                _refund_failed(self.decision, et, e)


class AsyncReservation(_Reservation):
    """`Reservation` for `AsyncLimiter`: ``await r.cancel()``; ``async with`` cancels on error."""

    __slots__ = ()

    async def cancel(self) -> bool:
        return await arun(self._refund_plan())

    async def __aenter__(self) -> AsyncReservation:
        return self

    async def __aexit__(self, et: type[BaseException] | None, ev: object, tb: object) -> None:
        if et is not None:
            try:
                await self.cancel()
            except Exception as e:  # the caller's exception is the one to propagate
                _refund_failed(self.decision, et, e)


class Limiter(_Driver[Store]):
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

    _protocol = Store
    _wrong_store = "a synchronous store; use AsyncLimiter with it"
    @staticmethod
    def _default_sleep() -> Callable[[float], None]:
        return time.sleep

    def _bind_hit(self, single: Limit) -> Callable[[str, float], Decision]:
        hooks, bind_hit = self._hooks(self._slow_hit), getattr(self.store, "bind_hit", None)
        if bind_hit is not None:
            return bind_hit(single, hooks)  # type: ignore[no-any-return]
        return bind_fallible_hit(self.store.bind(single), hooks, self.store.uses_client_clock)

    def _bind_composite(self) -> Callable[[str, float], Decision] | None:
        """The hot path of several limits on a store that binds them (`RedisStore.bind_all`):
        the key and cost checked inline as `bind_fallible_hit` does, one store call, the
        decisions merged; anything else goes the general way (`core.hit`)."""
        bind_all = getattr(self.store, "bind_all", None)
        if bind_all is None:
            return None
        decide_all = bind_all(self._limits.all)
        hooks = self._hooks(self._slow_hit)
        clock: Callable[[], float] = self.clock if self.store.uses_client_clock else float
        max_len, failure, failed, slow = hooks.max_key_length, hooks.failure, hooks.failed, \
            hooks.slow

        def hit(key: str, cost: float = 1) -> Decision:
            if (cost.__class__ is int and cost > 0 and key.__class__ is str
                    and 0 < len(key) <= max_len and key.isprintable()):
                try:
                    decisions = decide_all(key, cost, clock())
                except StoreError as e:
                    return failed(e, key, cost)
                if failure.failing:
                    failure.recovered()
                return merge_decisions(decisions)
            return slow(key, cost)  # type: ignore[no-any-return]

        return hit

    def _slow_hit(self, key: str, cost: float) -> Decision:
        return run(self._hit_plan(key, cost))

    def hit(self, key: str, cost: float = 1) -> Decision:
        """Check `key` and, if every limit admits `cost`, charge it. Returns the `Decision`."""
        return run(self._hit_plan(key, cost))

    def peek(self, key: str, cost: float = 1) -> Decision:
        """The decision `hit` would make now, without charging anything."""
        return run(self._peek_plan(key, cost))

    def reset(self, key: str) -> None:
        """Forget `key`'s state in every per-key limit (global limits are left alone)."""
        run(self._reset_plan(key))

    def reserve(self, key: str, cost: float = 1) -> Reservation:
        """Like `hit`, but returns a `Reservation` whose `cancel()` refunds the cost."""
        return Reservation(self, *run(self._reserve_plan(key, cost)))

    def acquire(self, key: str, cost: float = 1, timeout: float | None = None) -> Decision:
        """Block until `cost` is admitted (like Go's ``WaitN`` or Guava's ``acquire``).

        Sleeps for the decision's `retry_after` between attempts and for its `delay` once
        admitted. Raises `RateLimitExceeded` at once when the cost can never be admitted or
        when admission would come after `timeout` seconds.
        """
        return run(self._acquire_plan(key, cost, timeout, self._sleep))

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
        # A coroutine function must not block its loop: it awaits asyncio.sleep, unless a
        # sleep was injected (ManualClock.sleep does not block).
        asleep = asyncio.sleep if self._sleep is time.sleep else self._sleep
        return _decorator(self, key, cost, wait=wait, timeout=timeout, sleep=self._sleep,
                          asleep=asleep)


class AsyncLimiter(_Driver[AsyncStore]):
    """Rate limits for asyncio code: the same API as `Limiter`, with coroutines.

    Works with any `AsyncStore` (`MemoryStore`, the async Redis store).
    """

    _protocol = AsyncStore
    _wrong_store = "an asyncio store; use Limiter with it"
    @staticmethod
    def _default_sleep() -> Callable[[float], Awaitable[None]]:
        return asyncio.sleep

    def _bind_hit(self, single: Limit) -> Callable[[str, float], Awaitable[Decision]]:
        hooks, abind_hit = self._hooks(self._slow_hit), getattr(self.store, "abind_hit", None)
        if abind_hit is not None:
            return abind_hit(single, hooks)  # type: ignore[no-any-return]
        abind = getattr(self.store, "abind", None)  # optional: `bind`'s asyncio form
        decide = abind(single) if abind is not None \
            else functools.partial(self.store.adecide_one, single)
        return abind_fallible_hit(decide, hooks, self.store.uses_client_clock)

    async def _slow_hit(self, key: str, cost: float) -> Decision:
        return await arun(self._hit_plan(key, cost))

    async def hit(self, key: str, cost: float = 1) -> Decision:
        """Check `key` and, if every limit admits `cost`, charge it."""
        return await arun(self._hit_plan(key, cost))

    async def peek(self, key: str, cost: float = 1) -> Decision:
        """The decision `hit` would make now, without charging anything."""
        return await arun(self._peek_plan(key, cost))

    async def reset(self, key: str) -> None:
        """Forget `key`'s state in every per-key limit (global limits are left alone)."""
        await arun(self._reset_plan(key))

    async def reserve(self, key: str, cost: float = 1) -> AsyncReservation:
        """Like `hit`, but returns an `AsyncReservation` whose `cancel()` refunds the cost."""
        return AsyncReservation(self, *await arun(self._reserve_plan(key, cost)))

    async def acquire(self, key: str, cost: float = 1, timeout: float | None = None) -> Decision:
        """Wait until `cost` is admitted; see `Limiter.acquire`."""
        return await arun(self._acquire_plan(key, cost, timeout, self._sleep))

    def limit(
        self,
        key: str | Callable[..., str] | None = None,
        cost: float | Callable[..., float] = 1,
        *,
        wait: bool = False,
        timeout: float | None = None,
    ) -> Callable[[F], F]:
        """Decorate a coroutine function; see `Limiter.limit`."""
        return _decorator(self, key, cost, wait=wait, timeout=timeout, sleep=None,
                          asleep=self._sleep)


def _decorator(
    limiter: _Driver[Any],
    key: str | Callable[..., str] | None,
    cost: float | Callable[..., float],
    *,
    wait: bool,
    timeout: float | None,
    sleep: Callable[[float], Any] | None,
    asleep: Callable[[float], Any],
) -> Callable[[F], F]:
    """The `limit` decorator of both limiters: the admission plan, then the call."""

    def decorate(fn: F) -> F:
        key_of = _key_function(key, fn)
        cost_of = _cost_function(cost)
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                k, c = key_of(*args, **kwargs), cost_of(*args, **kwargs)
                await arun(limiter._admit_plan(k, c, wait, timeout, asleep))
                return await fn(*args, **kwargs)

            return cast(F, async_wrapper)
        if sleep is None:  # AsyncLimiter: coroutine functions only
            raise TypeError(
                f"AsyncLimiter.limit decorates coroutine functions; {fn!r} is not one "
                "(use Limiter.limit for synchronous functions)"
            )

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            k, c = key_of(*args, **kwargs), cost_of(*args, **kwargs)
            run(limiter._admit_plan(k, c, wait, timeout, sleep))
            return fn(*args, **kwargs)

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
