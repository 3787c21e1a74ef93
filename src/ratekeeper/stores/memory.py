"""In-memory store: thread-safe, usable from asyncio, bounded like an nginx zone.

Layout: one plain ``dict`` per limit name, mapping a key to that algorithm's state (for GCRA a
single float: the whole per-key cost is a dict entry, the key string and one float). Dicts
keep insertion order, and every decision re-inserts the key it touched, so iteration order is
least-recently-used first: the dict *is* the LRU list, with no per-key overhead beyond it.

Bounds (``max_keys``, per limit, like an nginx zone per ``limit_req_zone``): when a table grows
past it, the store evicts a batch of keys from the least-recently-used end, taking keys whose
state has fully recovered first (forgetting them changes no future decision: a missing key
and a recovered one are the same state) and then the least recently used ones. Evicting a key
that has *not* recovered forgets what it consumed: its next request starts from a fresh
(full) state, so that key may briefly get up to one extra burst. Size ``max_keys`` so that
this only happens under a flood of distinct keys (nginx: "if the zone storage is exhausted,
the least recently used state is removed").

Idle keys expire without a timer thread: every `sweep_every` new keys (default 32), the
decision that inserted the last of them also checks up to `sweep_batch` (default 4096) of the
oldest entries and drops those recovered for at least `sweep_grace` seconds (default 0.25), so
a table shrinks back after traffic moves on
and no single decision pays for more than one batch (a few hundred microseconds). A scan stops
early once it has met a few keys that have not recovered (`_PATIENCE`): the oldest keys
recover first, so behind them there is rarely anything to drop, and a flood of new keys that
are all still in their window costs a handful of checks per batch. A key that has not
recovered never blocks the ones behind it for longer than its limit's window, after which it
has recovered too. With these defaults, 1,000 new keys reclaim up to 126,976 idle ones (31 batches).
The grace keeps a client that returns soon after it recovered (many keys visited in turn, each
every few hundred milliseconds) from being dropped and re-inserted on every visit: forgetting
a recovered key changes no decision, but paying for its insertion again and again is the
dominant cost of such traffic. `sweep()` drops every recovered key at once.

Concurrency: one mutex per store (`_Mutex`, a token in a list: a third of a
``threading.Lock``'s cost per decision), held only while the pure function runs (well under a
microsecond); correct with free-threaded Python. The async methods run the same code without
awaiting anything, so they never block the event loop for longer than that.

Each algorithm's arithmetic runs in one of two forms here: where the install built it, the
compiled twin (`_memory_hot_c.pyx`: every algorithm's ``decide`` in C types with the limit's
numbers bound, for `bind_hit`, `decide_one` and charged composites), proven identical to the
pure functions on random traces, bit for bit (tests/unit/test_memory_hot.py); else, and with
``RATEKEEPER_PURE_PYTHON=1``, the algorithm's pure ``decide`` itself.
"""

from __future__ import annotations

import functools
import itertools
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from .._compiled import twin
from .._errors import InvalidLimit
from .._types import Decision, Limit
from ..algorithms import get as get_algorithm
from ._base import Check, HitHooks

__all__ = ["MemoryStore"]

#: ``(table, limit, mutex, after_insert, hooks) -> hit``: a compiled `MemoryStore.bind_hit`.
Builder = Callable[[Any, Limit, Any, Callable[[Any, float], None], HitHooks],
                   Callable[[str, float], Decision]]


class Bound(Protocol):
    """A compiled limit's decisions at a caller's clock (`MemoryStore.decide_one`)."""

    def at(self, key: str, cost: float, now: float) -> Decision | None:
        """The charged decision, or None for what only the general path takes."""


#: ``(table, limit, mutex, after_insert) -> Bound``: a compiled `MemoryStore.decide_one`.
AtBuilder = Callable[[Any, Limit, Any, Callable[[Any, float], None]], Bound]
#: `MemoryStore._decide` of charged checks, on the objects `AtBuilder`s build.
DecideAll = Callable[[list[Bound], Sequence[Check], float], "list[Decision] | None"]


class _Compiled(NamedTuple):
    """The compiled twin's builders, per algorithm name."""

    hit: dict[str, Builder]
    at: dict[str, AtBuilder]
    decide_all: DecideAll


def _compiled() -> _Compiled | None:
    """The compiled twin (`_memory_hot_c`, built at install time where a C compiler is
    there), or None: not built, switched off, or older than its source (`_compiled.twin`)."""
    c = twin(f"{__package__}._memory_hot_c", Path(__file__).with_name("_memory_hot_c.pyx"))
    return None if c is None else _Compiled(c.HOT, c.AT, c.decide_all)


#: The compiled twin in use; None: every decision goes through the pure ``decide``.
COMPILED = _compiled()

#: An expiry scan stops after this many keys that have not recovered (see the module docstring).
_PATIENCE = 16


class _Mutex:
    """Mutual exclusion from one token in a list, for the store's state.

    Why it is correct: the list starts with one token; `list.pop` and `list.append` are
    atomic (under the GIL, and under free-threading, where each list has its own lock); a
    thread enters only after its ``pop()`` returned the token, and gives it back with
    ``append`` when it leaves (in a ``finally``). Tokens are never made or dropped anywhere
    else, so at most one thread is ever inside. A thread that finds the list empty waits in
    `wait`: one waiter at a time polls for the token, yielding the GIL between polls, the
    others sleep on a real lock. Not reentrant (nothing inside takes it again).

    Why not ``threading.Lock``: its ``acquire()`` parses keyword arguments on every call;
    ``pop()`` + ``append()`` cost a third of ``acquire()`` + ``release()`` per decision.
    """

    __slots__ = ("_waiting", "give", "take")

    def __init__(self) -> None:
        tokens = [True]
        self.take: Callable[[], object] = tokens.pop
        self.give: Callable[[bool], None] = tokens.append
        self._waiting = threading.Lock()

    def wait(self) -> None:
        """Block until this thread holds the token (called after a ``take()`` failed)."""
        with self._waiting:
            while True:
                try:
                    self.take()
                    return
                except IndexError:
                    time.sleep(0)  # let the holder run

    def __enter__(self) -> None:
        try:
            self.take()
        except IndexError:
            self.wait()

    def __exit__(self, *exc: object) -> None:
        self.give(True)


class _Table:
    """State of one limit: key -> algorithm state, in least-recently-used-first order.

    A state is kept in its algorithm's compact form (`MemoryForm`: one ``complex`` instead of
    a tuple of two floats, 72 bytes less per key), and `decide`, `refund` and `ttl` here are
    the pure functions on that form; `unpack` gives the algorithm's own state back."""

    __slots__ = ("data", "decide", "inserts", "limit", "refund", "ttl", "unpack")

    def __init__(self, limit: Limit) -> None:
        algo = get_algorithm(limit.algorithm)
        self.limit = limit
        form = algo.memory
        if form is None:
            self.decide, self.refund, self.ttl = algo.decide, algo.refund, algo.ttl
            self.unpack: Callable[[Any], Any] = _same
        else:
            self.decide, self.refund, self.ttl = _on_packed(algo.decide, algo.refund, algo.ttl,
                                                            form.pack, form.unpack)
            self.unpack = form.unpack
        self.data: dict[str, Any] = {}
        self.inserts = 0


def _same(state: Any) -> Any:
    return state


def _on_packed(decide: Any, refund: Any, ttl: Any, pack: Callable[[Any], Any],
               unpack: Callable[[Any], Any]) -> tuple[Any, Any, Any]:
    """An algorithm's pure functions on states kept packed."""

    def packed_decide(state: Any, now: float, cost: float, limit: Limit
                      ) -> tuple[Any, Decision]:
        new, d = decide(None if state is None else unpack(state), now, cost, limit)
        return (None if new is None else pack(new)), d

    def packed_refund(state: Any, now: float, cost: float, at: float, limit: Limit) -> Any:
        new = refund(None if state is None else unpack(state), now, cost, at, limit)
        return None if new is None else pack(new)

    def packed_ttl(state: Any, now: float, limit: Limit) -> float:
        return ttl(unpack(state), now, limit)  # type: ignore[no-any-return]

    return packed_decide, packed_refund, packed_ttl


class MemoryStore:
    """Keeps limiter state in this process. See the module docstring for the bounds."""

    default_clock: Callable[[], float] = staticmethod(time.monotonic)
    uses_client_clock = True

    def __init__(self, max_keys: int = 1_000_000, *, sweep_every: int = 32,
                 sweep_batch: int = 4096, sweep_grace: float = 0.25) -> None:
        if isinstance(max_keys, bool) or not isinstance(max_keys, int) or max_keys < 1:
            raise InvalidLimit(f"max_keys must be a whole number >= 1, got {max_keys!r}")
        if isinstance(sweep_grace, bool) or not isinstance(sweep_grace, (int, float)) \
                or not 0 <= sweep_grace < float("inf"):
            raise InvalidLimit(f"sweep_grace must be a number of seconds >= 0, got "
                               f"{sweep_grace!r}")
        self.max_keys = max_keys
        self.sweep_every = max(1, sweep_every)
        self.sweep_batch = max(1, sweep_batch)
        self.sweep_grace = float(sweep_grace)
        # Evict in batches: scanning from the LRU end walks over slots freed by earlier
        # deletions until the dict compacts, so one scan per batch keeps eviction O(1)
        # amortised instead of O(n) per key.
        self._batch = min(4096, max_keys // 64)
        # Keyed by (name, algorithm): a reload that keeps a limit's name but changes its
        # algorithm gets a table of its own (the old state means nothing to the new algorithm),
        # while limiters still holding the old limit keep working on theirs.
        self._tables: dict[tuple[str, str], _Table] = {}
        self._at: dict[int, tuple[Limit, Bound | None]] = {}
        self._lock = _Mutex()
        self.evicted = 0  # keys dropped before they had recovered (see module docstring)
        self.expired = 0  # recovered keys dropped

    def __repr__(self) -> str:
        sizes = {name: len(t.data) for (name, _), t in self._tables.items()}
        return f"MemoryStore(max_keys={self.max_keys}, keys={sizes}, evicted={self.evicted})"

    # -- table management ----------------------------------------------------------

    def _table(self, limit: Limit) -> _Table:
        ident = (limit.name, limit.algorithm)
        t = self._tables.get(ident)
        if t is not None and (t.limit is limit or t.limit == limit):
            return t
        with self._lock:
            t = self._tables.get(ident)
            if t is None:
                t = self._tables[ident] = _Table(limit)
            elif t.limit != limit:
                # Same name and algorithm, new parameters (a reloaded policy): keep the state,
                # which every algorithm reads against the new parameters.
                t = self._tables[ident] = _copy_table(t, limit)
        return t

    def __len__(self) -> int:
        return sum(len(t.data) for t in self._tables.values())

    def keys(self, limit: Limit) -> int:
        """Number of keys held for `limit`."""
        t = self._tables.get((limit.name, limit.algorithm))
        return len(t.data) if t else 0

    def state(self, limit: Limit, key: str) -> Any:
        """The algorithm state of `key` (``None`` if absent), for inspection and tests (as
        the algorithm's functions take it: unpacked from the store's compact form)."""
        t = self._tables.get((limit.name, limit.algorithm))
        state = None if t is None else t.data.get(key)
        return None if state is None else t.unpack(state)  # type: ignore[union-attr]

    # -- eviction and expiry (called with the lock held) -----------------------------

    def _after_insert(self, t: _Table, now: float) -> None:
        t.inserts += 1
        self._housekeep(t, now, t.inserts % self.sweep_every == 0)

    def _housekeep(self, t: _Table, now: float, sweep: bool) -> None:
        """After an insert: back under the bound, or (every `sweep_every` inserts, which the
        caller counts) an expiry sweep."""
        data = t.data
        if len(data) > self.max_keys:
            # Evict a batch below the bound, but never the key just inserted (the MRU end).
            self._evict(t, now, min(len(data) - self.max_keys + self._batch, len(data) - 1))
        elif sweep:
            self._expire_oldest(t, now, self.sweep_batch)

    def _evict(self, t: _Table, now: float, need: int) -> None:
        data, ttl, limit = t.data, t.ttl, t.limit
        scan = list(itertools.islice(data.items(), need * 2))
        recovered = [k for k, s in scan if ttl(s, now, limit) <= 0]
        for k in recovered[:need]:
            del data[k]
        self.expired += min(need, len(recovered))
        short = need - len(recovered)
        if short > 0:
            gone = set(recovered)
            for k, _ in scan:
                if short <= 0:
                    break
                if k not in gone:
                    del data[k]
                    short -= 1
                    self.evicted += 1

    def _expire_oldest(self, t: _Table, now: float, n: int) -> None:
        data, ttl, limit = t.data, t.ttl, t.limit
        dead = []
        alive = 0
        grace = -self.sweep_grace  # ttl is minus the time since the state recovered
        for k, s in itertools.islice(data.items(), n):
            if ttl(s, now, limit) <= grace:
                dead.append(k)
            else:
                alive += 1
                if alive == _PATIENCE:
                    break  # younger keys behind these have not recovered either, as a rule
        for k in dead:
            del data[k]
        self.expired += len(dead)

    def sweep(self, now: float | None = None) -> int:
        """Drop every key whose state has fully recovered; returns how many."""
        now = self.default_clock() if now is None else now
        n = 0
        with self._lock:
            for t in self._tables.values():
                dead = [k for k, s in t.data.items() if t.ttl(s, now, t.limit) <= 0]
                for k in dead:
                    del t.data[k]
                n += len(dead)
        self.expired += n
        return n

    # -- the Store protocol ----------------------------------------------------------

    def bind(self, limit: Limit) -> Callable[[str, float, float], Decision]:
        """``(key, cost, now) -> Decision`` charging `limit` (the `Store` protocol's fast path).

        A `Limiter` on this store uses `bind_hit` instead, which also reads the clock and
        validates new keys under the same lock; this form serves callers with their own `now`.
        """
        return functools.partial(self.decide_one, limit)

    def decide_one(self, limit: Limit, key: str, cost: float, now: float) -> Decision:
        """One charged check at `now` (the core's call for a single limit: the middleware,
        the service, replay). Where the compiled hot path is built, it decides; anything it
        does not take, and everything in pure Python, goes through `decide`."""
        bound = self._bound(limit)
        if bound is not None:
            d = bound.at(key, cost, now)
            if d is not None:
                return d
        return self._decide(((limit, key, cost),), now, True)[0][0]

    def _bound(self, limit: Limit) -> Bound | None:
        """`limit`'s compiled decisions at a caller's clock (None: pure Python decides)."""
        got = self._at.get(id(limit))
        # Keyed by id, holding the limit: an id is never mistaken for a later object's.
        if got is None or got[0] is not limit:
            got = self._bind_at(limit)
        return got[1]

    def _bind_at(self, limit: Limit) -> tuple[Limit, Bound | None]:
        build = None if COMPILED is None else COMPILED.at.get(limit.algorithm)
        at = None if build is None else build(self._table(limit), limit, self._lock,
                                              self._after_insert)
        if len(self._at) >= 1024:
            self._at.clear()  # many short-lived limits (tests, reloads): stay bounded
        self._at[id(limit)] = bound = (limit, at)
        return bound

    def bind_hit(self, limit: Limit, hooks: HitHooks) -> Callable[[str, float], Decision]:
        """`Limiter.hit` for one limit on this store: the whole hot path in one function.

        A key is validated (``hooks.check_key`` raises `InvalidKey`) only when it is about to
        be inserted: a key already in the table passed that check when it was inserted, so
        the common case, a returning client, pays nothing for validation. Anything but a
        positive int cost and a str key goes to ``hooks.slow``, the limiter's general path.
        This store cannot fail, so it never calls ``hooks.failed``.
        """
        t = self._table(limit)
        compiled = None if COMPILED is None else COMPILED.hit.get(limit.algorithm)
        if compiled is not None:
            return compiled(t, limit, self._lock, self._after_insert, hooks)
        # The pure path: the algorithm's own `decide` under the lock.
        data, decide, mutex = t.data, t.decide, self._lock
        pop, take, give, wait = data.pop, mutex.take, mutex.give, mutex.wait
        after_insert = self._after_insert
        clock, check_key, slow = hooks.clock, hooks.check_key, hooks.slow

        def hit(key: str, cost: float = 1) -> Decision:
            if cost.__class__ is not int or cost <= 0 or key.__class__ is not str:
                return slow(key, cost)  # type: ignore[no-any-return]
            try:
                take()
            except IndexError:
                wait()
            try:
                state = pop(key, None)
                if state is None:
                    check_key(key)
                now = clock()
                try:
                    new, decision = decide(state, now, cost, limit)
                except BaseException:
                    if state is not None:
                        data[key] = state  # lose nothing, whatever went wrong
                    if isinstance(sys.exc_info()[1], OverflowError):
                        decision = None  # an int cost too large for a float: see below
                    else:
                        raise
                else:
                    if new is not None:
                        data[key] = new
                        if state is None:
                            after_insert(t, now)
                    elif state is not None:
                        data[key] = state
            finally:
                give(True)
            if decision is None:
                return slow(key, cost)  # type: ignore[no-any-return]  # says what is wrong
            return decision

        return hit

    def abind_hit(self, limit: Limit, hooks: HitHooks
                  ) -> Callable[[str, float], Awaitable[Decision]]:
        """`bind_hit` for `AsyncLimiter` (nothing here awaits: the lock is held for well
        under a microsecond)."""
        sync = self.bind_hit(limit, hooks._replace(slow=_take_the_slow_path))

        async def hit(key: str, cost: float = 1) -> Decision:
            d = sync(key, cost)
            if d is _SLOW:
                return await hooks.slow(key, cost)  # type: ignore[no-any-return]
            return d

        return hit

    def decide(
        self, checks: Sequence[Check], now: float, consume: bool = True
    ) -> tuple[list[Decision], float]:
        if consume:
            if len(checks) == 1:  # one charged check: `decide_one`'s fast path
                limit, key, cost = checks[0]
                return [self.decide_one(limit, key, cost, now)], now
            if COMPILED is not None:  # several: the compiled all-or-nothing call
                bound = []
                for limit, _, _ in checks:
                    b = self._bound(limit)
                    if b is None:
                        break
                    bound.append(b)
                else:
                    decisions = COMPILED.decide_all(bound, checks, now)
                    if decisions is not None:
                        return decisions, now
        return self._decide(checks, now, consume)

    def _decide(
        self, checks: Sequence[Check], now: float, consume: bool
    ) -> tuple[list[Decision], float]:
        tables = [self._table(limit) for limit, _, _ in checks]
        with self._lock:
            results = []
            allowed = True
            for t, (limit, key, cost) in zip(tables, checks, strict=True):
                new, decision = t.decide(t.data.get(key), now, cost, limit)
                results.append((new, decision))
                allowed = allowed and decision.allowed
            if consume:
                for t, (_, key, _), (new, _) in zip(tables, checks, results, strict=True):
                    # pop + re-insert moves the key to the most-recently-used end, for a
                    # rejected attempt too: a client still knocking is not idle.
                    old = t.data.pop(key, None)
                    if allowed:
                        t.data[key] = new
                        if old is None:
                            self._after_insert(t, now)
                    elif old is not None:
                        t.data[key] = old
        return [d for _, d in results], now

    def refund(self, checks: Sequence[Check], now: float, at: float) -> None:
        tables = [self._table(limit) for limit, _, _ in checks]
        with self._lock:
            for t, (limit, key, cost) in zip(tables, checks, strict=True):
                state = t.data.get(key)
                if state is None:
                    continue
                new = t.refund(state, now, cost, at, limit)
                if new is None:
                    del t.data[key]
                else:
                    t.data[key] = new

    def reset(self, limits: Sequence[Limit], key: str) -> None:
        with self._lock:
            for limit in limits:
                t = self._tables.get((limit.name, limit.algorithm))
                if t is not None:
                    t.data.pop(key, None)

    def clear(self) -> None:
        """Forget every key of every limit."""
        with self._lock:
            for t in self._tables.values():
                t.data.clear()  # in place: bound functions hold these dicts

    # -- the AsyncStore protocol: same code, nothing to await ---------------------------

    async def adecide_one(self, limit: Limit, key: str, cost: float, now: float) -> Decision:
        return self.decide_one(limit, key, cost, now)

    async def adecide(
        self, checks: Sequence[Check], now: float, consume: bool = True
    ) -> tuple[list[Decision], float]:
        return self.decide(checks, now, consume)

    async def arefund(self, checks: Sequence[Check], now: float, at: float) -> None:
        self.refund(checks, now, at)

    async def areset(self, limits: Sequence[Limit], key: str) -> None:
        self.reset(limits, key)


#: What `abind_hit`'s synchronous half answers for "take the general (awaited) path".
_SLOW: Any = Decision(False, 0, None, 0.0, 0.0)


def _take_the_slow_path(key: str, cost: float) -> Decision:
    return _SLOW  # type: ignore[no-any-return]


def _copy_table(old: _Table, limit: Limit) -> _Table:
    new = _Table(limit)
    new.data = old.data
    new.inserts = old.inserts
    return new
