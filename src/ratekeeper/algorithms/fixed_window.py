"""Fixed window: at most N (cost units) per window ``[kP, (k+1)P)``.

State: ``(k, used)``: the window index and the cost admitted in it. Windows are aligned to
multiples of the period on the clock's scale (a Redis store on the server clock aligns them
to the Unix epoch). A request of cost ``c`` is admitted iff ``used + c <= N``; when rejected,
``retry_after`` is the time to the next window's start (``None`` if ``c > N``).

The classic weakness, shown in the docs: up to 2N can pass around a window boundary
(N at the end of one window, N at the start of the next).

Time going backwards into an earlier window keeps counting in the stored (later) window.
"""

from __future__ import annotations

import math
from typing import Any

from .._types import Decision, Limit
from ._common import (
    EPS,
    Algorithm,
    LimitRules,
    MemoryForm,
    RedisCodec,
    floor_remaining,
    hash_fields,
    lua_float,
    new_decision,
    window_params,
)

__all__ = ["ALGORITHM", "decide", "refund", "ttl"]

State = tuple[int, float]


def _window(now: float, period: float) -> int:
    return math.floor(now / period + EPS)


def decide(
    state: State | None, now: float, cost: float, limit: Limit
) -> tuple[State | None, Decision]:
    n = limit.capacity
    p = limit.period
    k = _window(now, p)
    used = 0.0
    if state is not None:
        sk, sused = state
        if sk >= k:  # same window, or the clock went back into an earlier one
            k, used = sk, sused
    reset = (k + 1) * p - now
    if used + cost <= n + EPS:
        used += cost
        return (k, used), new_decision(
            Decision, (True, floor_remaining(n - used), 0.0, reset, 0.0, limit, False)
        )
    retry = None if cost > n else reset
    return None, new_decision(
        Decision,
        (False, floor_remaining(n - used), retry, reset if used else 0.0, 0.0, limit, False),
    )


def refund(state: State | None, now: float, cost: float, at: float, limit: Limit) -> State | None:
    if state is None:
        return None
    k, used = state
    ak = _window(at, limit.period)
    if ak < k and _window(now, limit.period) < k:
        ak = k  # the clock was (and is) behind the stored window: the cost went there
    if ak != k:
        return state  # admitted in an earlier window: that quota has already reset
    used -= cost
    return (k, used) if used > EPS else None


def ttl(state: State, now: float, limit: Limit) -> float:
    return (state[0] + 1) * limit.period - now


# -- Redis (fixed_window.lua) ------------------------------------------------------------------


def lua_params(limit: Limit) -> tuple[str, str]:
    """p1 = N (cost per window), p2 = P (the period, seconds)."""
    return lua_float(limit.capacity), lua_float(limit.period)


def from_redis(kind: str, value: Any) -> State:
    """A hash ``{k, used}`` (the window index, the cost admitted in it)."""
    k, used = hash_fields(value, kind, "k", "used")
    return int(float(k)), float(used)


def fast_reject(reply: list[Any], limit: Limit, cost: float) -> tuple[int, float | None, float]:
    """the one-fixed-window script answers a rejection on a stored state with ``{k, used, now}``
    (as stored; now as `gcra.fast_reject`'s): (remaining, retry_after, reset_after) are
    `decide`'s rejection, the same float operations on the same values."""
    if len(reply) != 3:
        raise ValueError("not a rejection of the one-fixed-window script")
    now = reply[2]
    now = now / 1e6 if now.__class__ is int else float(now)
    n, p = limit.capacity, limit.period
    k, used = _window(now, p), 0.0
    sk, sused = float(reply[0]), float(reply[1])
    if not (math.isfinite(sk) and math.isfinite(sused)):
        raise ValueError("not a state")
    if sk >= k:
        k, used = int(sk), sused
    reset = (k + 1) * p - now
    return floor_remaining(n - used), None if cost > n else reset, reset if used else 0.0


# -- MemoryStore's compact form -----------------------------------------------------------------


def pack(state: State) -> complex | State:
    """(k, used) as one complex (k, a whole number below 2**53, is exact as a float)."""
    k, used = state
    return complex(k, used) if -_EXACT < k < _EXACT else state


def unpack(p: complex | State) -> State:
    if isinstance(p, complex):
        return int(p.real), p.imag
    return p


_EXACT = 2**53


ALGORITHM = Algorithm("fixed-window", decide, refund, ttl, LimitRules(
    "at most N per window [kP, (k+1)P)",
    window_params), RedisCodec(
    id=4, tag="fw", script="fixed_window.lua", params=lua_params, from_redis=from_redis,
    fast_script=True, fast_reject=fast_reject), memory=MemoryForm(pack, unpack))
