"""What a store is: a place that keeps algorithm state and applies the algorithms atomically.

A store never does rate-limit math of its own: it runs the pure functions of
`ratekeeper.algorithms` (or, for Redis, Lua scripts that mirror them) on its state.

A *check* is ``(limit, key, cost)``. `decide` applies several checks all-or-nothing: every
limit is evaluated on its current state; if all admit (and `consume` is true) all are charged,
otherwise none is. It returns one `Decision` per check and the time it decided at (a Redis
store on the server clock reports the server's time), which `refund` needs later.

Stores raise `StoreUnavailable` when they cannot answer in time; the limiter's failure
policy decides what happens then. Any other store error is a `StoreError`.

The hot path. A limiter with one per-key limit binds ``hit`` once: by default from the
store's `bind` (`bind_fallible_hit`; asyncio: from the optional ``abind(limit)``, else
``adecide_one``, `abind_fallible_hit`),
which checks keys inline and hands a `StoreError` to the failure policy. A store that can do
better offers an optional ``bind_hit(limit, hooks)`` (and ``abind_hit``) returning the whole
``(key, cost=1) -> Decision`` function: `MemoryStore` runs it under its lock and checks a
key only when it first stores it. `HitHooks` is what the core gives such a function.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

from .._errors import StoreError
from .._types import Decision, Limit

__all__ = ["AsyncStore", "Check", "FailureState", "HitHooks", "Store", "abind_fallible_hit",
           "bind_fallible_hit"]

Check = tuple[Limit, str, float]


class FailureState(Protocol):
    """What a bound hot path reads of the core's failure policy."""

    failing: bool

    def recovered(self) -> None: ...


class HitHooks(NamedTuple):
    """What a store's bound hot path (`Store.bind_hit`) gets from the decision core.

    - `clock`: the limiter's clock (a store on its own clock may ignore it);
    - `check_key(key)`: raises `InvalidKey` for a key that cannot be stored; a store may
      call it only before it first stores a key (a key it holds passed it then);
    - `max_key_length`: for stores that check every key inline instead;
    - `failure`: ``failing`` is true after a store error until `recovered()` is called;
    - `failed(exc, key, cost)`: the failure policy's decision after `exc` (may raise);
    - `slow(key, cost)`: the general path, for what the hot path does not take (a cost
      that is not a positive int, a key that is not a plain str).
    """

    clock: Callable[[], float]
    check_key: Callable[[str], object]
    max_key_length: int
    failure: FailureState
    failed: Callable[[StoreError, str, float], Decision]
    slow: Callable[[str, float], Any]  # a Decision (sync), an awaitable of one (asyncio)


def bind_fallible_hit(decide: Callable[[str, float, float], Decision], hooks: HitHooks,
                      uses_client_clock: bool) -> Callable[[str, float], Decision]:
    """`Store.bind_hit` for a store that can fail, from its bound ``(key, cost, now)``
    decision: keys are checked inline, a `StoreError` goes to the failure policy."""
    clock: Callable[[], float] = hooks.clock if uses_client_clock else float  # float() is 0.0
    max_len, failure, failed, slow = hooks.max_key_length, hooks.failure, hooks.failed, \
        hooks.slow

    def hit(key: str, cost: float = 1) -> Decision:
        if (cost.__class__ is int and cost > 0 and key.__class__ is str
                and 0 < len(key) <= max_len and key.isprintable()):
            try:
                d = decide(key, cost, clock())
            except StoreError as e:
                return failed(e, key, cost)
            if failure.failing:
                failure.recovered()
            return d
        return slow(key, cost)  # type: ignore[no-any-return]

    return hit


def abind_fallible_hit(decide: Callable[[str, float, float], Awaitable[Decision]],
                       hooks: HitHooks, uses_client_clock: bool
                       ) -> Callable[[str, float], Awaitable[Decision]]:
    """`bind_fallible_hit` for an asyncio store; `hooks.slow` returns an awaitable here."""
    clock: Callable[[], float] = hooks.clock if uses_client_clock else float
    max_len, failure, failed, slow = hooks.max_key_length, hooks.failure, hooks.failed, \
        hooks.slow

    async def hit(key: str, cost: float = 1) -> Decision:
        if (cost.__class__ is int and cost > 0 and key.__class__ is str
                and 0 < len(key) <= max_len and key.isprintable()):
            try:
                d = await decide(key, cost, clock())
            except StoreError as e:
                return failed(e, key, cost)
            if failure.failing:
                failure.recovered()
            return d
        return await slow(key, cost)  # type: ignore[no-any-return]

    return hit


@runtime_checkable
class Store(Protocol):
    """A store usable from synchronous code."""

    #: The clock a limiter uses with this store when none is given (memory: monotonic;
    #: Redis in client-clock mode: wall clock, so that processes agree).
    default_clock: Callable[[], float]
    #: False when the store reads its own clock (Redis `TIME`) and ignores `now`.
    uses_client_clock: bool

    def bind(self, limit: Limit) -> Callable[[str, float, float], Decision]:
        """``decide_one`` for one fixed limit: ``(key, cost, now) -> Decision``.

        Callers keep the result, so a store can do per-limit work (table lookup, argument
        encoding) once instead of on every decision.
        """
        ...

    def decide_one(self, limit: Limit, key: str, cost: float, now: float) -> Decision: ...

    def decide(
        self, checks: Sequence[Check], now: float, consume: bool = True
    ) -> tuple[list[Decision], float]: ...

    def refund(self, checks: Sequence[Check], now: float, at: float) -> None: ...

    def reset(self, limits: Sequence[Limit], key: str) -> None: ...


@runtime_checkable
class AsyncStore(Protocol):
    """A store usable from asyncio code (method names prefixed with ``a``)."""

    default_clock: Callable[[], float]
    uses_client_clock: bool

    async def adecide_one(self, limit: Limit, key: str, cost: float, now: float) -> Decision: ...

    async def adecide(
        self, checks: Sequence[Check], now: float, consume: bool = True
    ) -> tuple[list[Decision], float]: ...

    async def arefund(self, checks: Sequence[Check], now: float, at: float) -> None: ...

    async def areset(self, limits: Sequence[Limit], key: str) -> None: ...
