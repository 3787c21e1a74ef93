"""`MemoryStore.bind_hit` specialised per algorithm: the whole decision in one function.

A decision through the generic hot path is a call into the algorithm's pure ``decide`` plus
the store's bookkeeping; here each algorithm's ``decide`` is written out inline, with the
limit's numbers bound once, inside the store's critical section. That saves a Python call,
the limit's attribute reads and a result tuple per decision (about a sixth of its cost).

The rules every builder follows:

* The pure function in ``ratekeeper.algorithms`` stays the reference. Each body below is its
  ``decide`` with the same float operations in the same order, for the cases it takes: a
  str key and a whole cost from 1 to the limit's capacity (everything else goes to
  ``hooks.slow``, the general path, which calls the pure function). Equal results on random
  traces, bit for bit, are tested in tests/unit/test_memory_hot.py.
* State is kept as the store keeps it (the algorithm's compact `MemoryForm`, which the
  store's other paths, refunds, expiry and `MemoryStore.state`, unpack), popped and
  re-inserted so the table stays in LRU order.
* A key is checked only when it is about to be inserted; a state popped is put back whatever
  goes wrong before the decision is stored.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from .._compiled import PURE_PYTHON_ENV, twin
from .._types import Decision, Limit
from ..algorithms._common import EPS, FLOAT_DRIFT, NS_TOLERANCE, new_decision
from ._base import Check, HitHooks

_EXACT = 2**53  # whole numbers below this are exact as floats

__all__ = ["AT", "COMPILED", "DECIDE_ALL", "HOT", "PURE_PYTHON_ENV", "SELECTED"]

Hit = Callable[[str, float], Decision]
Builder = Callable[[Any, Limit, Any, Callable[[Any, float], None], HitHooks], Hit]


class Bound(Protocol):
    """A compiled limit's decisions at a caller's clock (`MemoryStore.decide_one`)."""

    def at(self, key: str, cost: float, now: float) -> Decision | None:
        """The charged decision, or None for what only the general path takes."""


AtBuilder = Callable[[Any, Limit, Any, Callable[[Any, float], None]], Bound]
DecideAll = Callable[[list[Bound], Sequence[Check], float], "list[Decision] | None"]


def _gcra(t: Any, limit: Limit, mutex: Any, after_insert: Callable[[Any, float], None],
          hooks: HitHooks) -> Hit:
    r, b = limit.per_second, limit.capacity
    most = math.floor(b)  # the largest whole cost that can ever be admitted
    b2, quarter = b + 2.0, 0.25 / r  # the drift tolerance's constants (gcra.decide)
    data = t.data
    pop, take, give, wait = data.pop, mutex.take, mutex.give, mutex.wait
    clock, check_key, slow = hooks.clock, hooks.check_key, hooks.slow
    new, decision = new_decision, Decision

    def hit(key: str, cost: float = 1) -> Decision:
        if cost.__class__ is not int or not 0 < cost <= most or key.__class__ is not str:
            return slow(key, cost)  # type: ignore[no-any-return]
        try:
            take()
        except IndexError:
            wait()
        try:
            now = clock()
            old = pop(key, None)
            try:
                if old is None:
                    check_key(key)
                    tat = now
                elif old < now:
                    tat = now
                else:
                    tat = old
                tokens = b - (tat - now) * r
                left = tokens - cost
                if left >= 0.0 or -left / r < NS_TOLERANCE + (
                        # min(b2 * abs(tat) * FLOAT_DRIFT, quarter), without two calls
                        tol if (tol := b2 * (tat if tat >= 0.0 else -tat) * FLOAT_DRIFT)
                        <= quarter else quarter):
                    tat += cost / r
                    data[key] = tat
                    if old is None:
                        after_insert(t, now)
                    return new(decision, (True, (left + EPS).__trunc__() if left > 0.0 else 0, 0.0,
                                   tat - now, 0.0, limit, False))
                if old is not None:
                    data[key] = old
                return new(decision, (False, (tokens + EPS).__trunc__() if tokens > 0.0 else 0,
                               -left / r, tat - now, 0.0, limit, False))
            except BaseException:
                if old is not None and key not in data:
                    data[key] = old  # lose nothing, whatever went wrong
                raise
        finally:
            give(True)

    return hit


def _token_bucket(t: Any, limit: Limit, mutex: Any, after_insert: Callable[[Any, float], None],
                  hooks: HitHooks) -> Hit:
    r, b = limit.per_second, limit.capacity
    most = math.floor(b)
    quarter = 0.25 / r  # the drift tolerance's cap (token_bucket.decide)
    data = t.data
    pop, take, give, wait = data.pop, mutex.take, mutex.give, mutex.wait
    clock, check_key, slow = hooks.clock, hooks.check_key, hooks.slow
    new, decision = new_decision, Decision

    def hit(key: str, cost: float = 1) -> Decision:
        if cost.__class__ is not int or not 0 < cost <= most or key.__class__ is not str:
            return slow(key, cost)  # type: ignore[no-any-return]
        try:
            take()
        except IndexError:
            wait()
        try:
            now = clock()
            old = pop(key, None)
            try:
                behind = 0.0
                if old is None:
                    check_key(key)
                    tokens = b
                else:
                    tokens, last = old.real, old.imag  # its compact form (token_bucket.pack)
                    if now >= last:
                        tokens += (now - last) * r
                        if tokens > b:
                            tokens = b
                    else:  # a clock going backwards refills nothing
                        behind = last - now
                left = tokens - cost
                if left >= 0.0 or -left / r < NS_TOLERANCE + (
                        # min(2.0 * abs(now) * FLOAT_DRIFT, quarter), without two calls
                        tol if (tol := 2.0 * (now if now >= 0.0 else -now) * FLOAT_DRIFT)
                        <= quarter else quarter):
                    data[key] = complex(left, now)
                    if old is None:
                        after_insert(t, now)
                    return new(decision, (True, (left + EPS).__trunc__() if left > 0.0 else 0, 0.0,
                                   (b - left) / r, 0.0, limit, False))
                if old is not None:
                    data[key] = old
                return new(decision, (False, (tokens + EPS).__trunc__() if tokens > 0.0 else 0,
                               behind - left / r, behind + (b - tokens) / r, 0.0, limit, False))
            except BaseException:
                if old is not None and key not in data:
                    data[key] = old
                raise
        finally:
            give(True)

    return hit


def _fixed_window(t: Any, limit: Limit, mutex: Any, after_insert: Callable[[Any, float], None],
                  hooks: HitHooks) -> Hit:
    n, p = limit.capacity, limit.period
    most = math.floor(n)
    fits = n + EPS
    floor = math.floor
    data = t.data
    pop, take, give, wait = data.pop, mutex.take, mutex.give, mutex.wait
    clock, check_key, slow = hooks.clock, hooks.check_key, hooks.slow
    new, decision = new_decision, Decision

    def hit(key: str, cost: float = 1) -> Decision:
        if cost.__class__ is not int or not 0 < cost <= most or key.__class__ is not str:
            return slow(key, cost)  # type: ignore[no-any-return]
        try:
            take()
        except IndexError:
            wait()
        try:
            now = clock()
            old = pop(key, None)
            try:
                k: float = floor(now / p + EPS)  # an int, or the same whole number as a float
                used = 0.0
                if old is None:
                    check_key(key)
                else:
                    if old.__class__ is complex:  # fixed_window.pack's form, read inline
                        # (the window index as a whole float: it compares and computes as
                        # the int unpack gives, and is only ever stored packed again)
                        sk, sused = old.real, old.imag
                    else:
                        sk, sused = old
                    if sk >= k:  # same window, or the clock went back into an earlier one
                        k, used = sk, sused
                reset = (k + 1) * p - now
                if used + cost <= fits:
                    used += cost
                    # fixed_window.pack, inline: exact as a complex below 2**53
                    data[key] = complex(k, used) if -_EXACT < k < _EXACT else (k, used)
                    if old is None:
                        after_insert(t, now)
                    left = n - used
                    return new(decision, (True, (left + EPS).__trunc__() if left > 0 else 0, 0.0,
                                   reset, 0.0, limit, False))
                if old is not None:
                    data[key] = old
                left = n - used
                return new(decision, (False, (left + EPS).__trunc__() if left > 0 else 0, reset,
                               reset if used else 0.0, 0.0, limit, False))
            except BaseException:
                if old is not None and key not in data:
                    data[key] = old
                raise
        finally:
            give(True)

    return hit


#: algorithm name -> the builder of its specialised `MemoryStore.bind_hit`.
HOT: dict[str, Builder] = {
    "gcra": _gcra,
    "token-bucket": _token_bucket,
    "fixed-window": _fixed_window,
}


def _compiled() -> tuple[dict[str, Builder], dict[str, AtBuilder], DecideAll] | None:
    """The compiled twin's builders (`_memory_hot_c`, built at install time where a C compiler
    is there), or None: not built, switched off, or older than its source (`_compiled.twin`)."""
    c = twin(f"{__package__}._memory_hot_c", Path(__file__).with_name("_memory_hot_c.pyx"))
    return None if c is None else (c.HOT, c.AT, c.decide_all)


_BUILT = _compiled()
#: The compiled builders in use (None: the pure ones above run).
COMPILED: dict[str, Builder] | None = None if _BUILT is None else _BUILT[0]
#: algorithm name -> the builder `MemoryStore.bind_hit` uses: compiled where there is one.
SELECTED: dict[str, Builder] = {**HOT, **COMPILED} if COMPILED is not None else HOT
#: algorithm name -> the builder of `MemoryStore.decide_one`'s fast path (compiled only: in
#: pure Python the general path is as fast as a second copy would be).
AT: dict[str, AtBuilder] = {} if _BUILT is None else _BUILT[1]
#: `MemoryStore._decide` of charged checks, on the objects `AT` builds (compiled only).
DECIDE_ALL: DecideAll | None = None if _BUILT is None else _BUILT[2]
