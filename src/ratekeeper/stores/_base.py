"""What a store is: a place that keeps algorithm state and applies the algorithms atomically.

A store never does rate-limit math of its own: it runs the pure functions of
`ratekeeper.algorithms` (or, for Redis, Lua scripts that mirror them) on its state.

A *check* is ``(limit, key, cost)``. `decide` applies several checks all-or-nothing: every
limit is evaluated on its current state; if all admit (and `consume` is true) all are charged,
otherwise none is. It returns one `Decision` per check and the time it decided at (a Redis
store on the server clock reports the server's time), which `refund` needs later.

Stores raise `StoreUnavailable` when they cannot answer in time; the limiter's failure
policy decides what happens then. Any other store error is a `StoreError`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from .._types import Decision, Limit

__all__ = ["AsyncStore", "Check", "Store"]

Check = tuple[Limit, str, float]


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

        The limiter calls it once and keeps the result, so a store can do per-limit work
        (table lookup, argument encoding) once instead of on every decision.
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
