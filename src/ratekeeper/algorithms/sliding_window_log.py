"""Sliding-window log: at most N (cost units) admitted in any window ``(t - P, t]``.

State: a tuple of ``(timestamp, cost)`` entries of *admitted* requests, oldest first. An entry
at ``ts`` is live while ``ts > now - P`` and expires at ``now = ts + P`` exactly (instants
within `TIME_EPS` of that count as that instant, so a request one period after the last one
is admitted however the decimals round). Rejected requests are never logged (the
chapter's pitfall: logging them would keep a hammering client locked out forever and grow
memory without bound), so the log never holds more than N entries (costs are whole numbers
>= 1), and requests at the same instant share one entry.

``retry_after`` for a rejected request is when enough admitted cost has slid out: entry ``i``
leaves the window at ``ts_i + P``, so it is the earliest ``ts_i + P - now`` after which the
remaining entries plus ``c`` fit in N.
"""

from __future__ import annotations

from typing import Any

from .._types import Decision, Limit
from ._common import (
    EPS,
    TIME_EPS,
    Algorithm,
    LimitRules,
    MemoryForm,
    RedisCodec,
    floor_remaining,
    lua_float,
    new_decision,
    window_params,
)

__all__ = ["ALGORITHM", "decide", "refund", "ttl"]

State = tuple[tuple[float, float], ...]


def _live(state: State | None, now: float, period: float) -> State:
    if not state:
        return ()
    cutoff = now - period + TIME_EPS  # ts + P <= now (within TIME_EPS): expired
    i = 0
    for i, (ts, _) in enumerate(state):
        if ts > cutoff:
            return state[i:] if i else state
    return ()


def decide(
    state: State | None, now: float, cost: float, limit: Limit
) -> tuple[State | None, Decision]:
    n = limit.capacity
    p = limit.period
    log = _live(state, now, p)
    used = sum([c for _, c in log])  # a list, not a generator: the log holds up to N entries
    if used + cost <= n + EPS:
        if log and log[-1][0] >= now:
            # Same instant, or a clock behind the newest entry: log it with that entry, so the
            # log stays in time order (and the cost stays logged at least as long).
            new = (*log[:-1], (log[-1][0], log[-1][1] + cost))
        else:
            new = (*log, (now, cost))
        return new, new_decision(
            Decision,
            (True, floor_remaining(n - used - cost), 0.0, new[-1][0] + p - now, 0.0, limit, False),
        )
    retry: float | None = None
    if cost <= n:
        freed = 0.0
        for ts, c in log:
            freed += c
            if used - freed + cost <= n + EPS:
                retry = ts + p - now
                break
    reset = log[-1][0] + p - now if log else 0.0
    return None, new_decision(
        Decision, (False, floor_remaining(n - used), retry, reset, 0.0, limit, False)
    )


def refund(state: State | None, now: float, cost: float, at: float, limit: Limit) -> State | None:
    """Remove `cost` from the entry logged at `at` (or, if it is gone, nothing)."""
    if not state:
        return None
    out = []
    for ts, c in state:
        left = c
        if ts == at and cost > 0:
            take = min(c, cost)
            left -= take
            cost -= take
        if left > EPS:
            out.append((ts, left))
    return tuple(out) or None


def ttl(state: State, now: float, limit: Limit) -> float:
    return state[-1][0] + limit.period - now if state else 0.0


# -- Redis (sliding_window_log.lua) ------------------------------------------------------------


def lua_params(limit: Limit) -> tuple[str, str]:
    """p1 = N (cost per window), p2 = P (the window, seconds)."""
    return lua_float(limit.capacity), lua_float(limit.period)


def from_redis(kind: str, value: Any) -> State:
    """A list of admitted timestamps, one element per unit of cost: a run of one instant is
    one ``(ts, cost)`` entry."""
    if kind != "list":
        raise ValueError(f"a {kind}, not a list")
    entries: list[tuple[float, float]] = []
    for v in value:
        ts = float(v)
        if entries and entries[-1][0] == ts:
            entries[-1] = (ts, entries[-1][1] + 1.0)
        else:
            entries.append((ts, 1.0))
    return tuple(entries)


# -- MemoryStore's compact form -----------------------------------------------------------------


def pack(state: State) -> complex | State:
    """A log of one entry, the usual idle key, as one complex (ts, cost): 32 bytes instead of
    the 128 of a tuple holding a tuple. Longer logs stay as they are (the compiled path scans
    their tuples fastest). Costs are whole (`whole_costs`): one comes back as a float."""
    if len(state) == 1:
        return complex(state[0][0], state[0][1])
    return state


def unpack(p: complex | State) -> State:
    if isinstance(p, complex):
        return ((p.real, p.imag),)
    return p


ALGORITHM = Algorithm("sliding-window-log", decide, refund, ttl, LimitRules(
    "at most N in any window (t-P, t]; logs admitted requests only",
    window_params, whole_costs=True), RedisCodec(
    id=5, tag="swl", script="sliding_window_log.lua", params=lua_params,
    from_redis=from_redis), memory=MemoryForm(pack, unpack))
