"""GCRA: the token bucket's decisions with one timestamp of state.

The generic cell rate algorithm keeps the *theoretical arrival time* ``tat``: the instant at
which the bucket will be full again. With ``r`` tokens per second and capacity ``b``, the
tokens available at ``now`` are::

    tokens(now) = b - max(0, tat - now) * r

so a request of cost ``c`` is admitted iff ``tokens(now) >= c`` (the same test as the token
bucket, with Go's one-nanosecond tolerance, widened by the float rounding that adding to a
Unix-time ``tat`` accumulates over a burst: see `FLOAT_DRIFT`), and admitting it moves ``tat``
forward by the time ``c`` tokens take to refill::

    tat' = max(tat, now) + c / r

One float per key is the cheapest state there is: in memory it is a dict of floats, in Redis a
single string key. A missing key is a full bucket, and so is any ``tat <= now``.

Time going backwards makes ``tat - now`` larger, so fewer tokens are available: a backwards
clock can only make GCRA stricter, never looser.
"""

from __future__ import annotations

import math
from typing import Any

from .._types import Decision, Limit
from ._common import (
    EPS,
    FLOAT_DRIFT,
    NS_TOLERANCE,
    Algorithm,
    LimitRules,
    RedisCodec,
    bucket_params,
    lua_float,
    new_decision,
)

__all__ = ["ALGORITHM", "decide", "refund", "ttl"]


def decide(
    tat: float | None, now: float, cost: float, limit: Limit
) -> tuple[float | None, Decision]:
    # Float-only comparisons (0.0, not 0) and `__trunc__` instead of `int()`: this is the
    # hot path of every in-memory decision, and CPython specialises float-float operations.
    r = limit.per_second
    b = limit.capacity
    if tat is None or tat < now:
        tat = now
    tokens = b - (tat - now) * r  # a full bucket minus the debt not yet refilled
    left = tokens - cost
    if left >= 0.0 or (-left / r < NS_TOLERANCE + min((b + 2.0) * abs(tat) * FLOAT_DRIFT,
                                                      0.25 / r) and cost <= b):
        tat += cost / r
        rem = (left + EPS).__trunc__() if left > 0.0 else 0
        return tat, new_decision(Decision, (True, rem, 0.0, tat - now, 0.0, limit, False))
    retry = None if cost > b else -left / r
    rem = (tokens + EPS).__trunc__() if tokens > 0.0 else 0
    return None, new_decision(Decision, (False, rem, retry, tat - now, 0.0, limit, False))


def refund(tat: float | None, now: float, cost: float, at: float, limit: Limit) -> float | None:
    if tat is None:
        return None
    tat -= cost / limit.per_second
    return None if tat <= now else tat


def ttl(tat: float, now: float, limit: Limit) -> float:
    return tat - now


# -- Redis (gcra.lua, and the one-gcra script for a single limit) -------------------------


def lua_params(limit: Limit) -> tuple[str, str]:
    """p1 = r (tokens per second), p2 = b (capacity)."""
    return lua_float(limit.per_second), lua_float(limit.capacity)


def from_redis(kind: str, value: Any) -> float:
    """A string: tat (seconds)."""
    if kind != "string":
        raise ValueError(f"a {kind}, not a string")
    return float(value)


def fast_reset(reply: list[Any], limit: Limit) -> float:
    """the one-gcra script answers an admission ``{remaining, tat, now}``: reset_after is
    ``tat - now``, the float operation of `decide` (one formatted float less); `now` is the
    caller's text, or the server's TIME as whole microseconds (an integer)."""
    if len(reply) != 3:
        raise ValueError("not an admission of the one-gcra script")
    now = reply[2]
    return float(reply[1]) - (now / 1e6 if now.__class__ is int else float(now))


def fast_reject(reply: list[Any], limit: Limit, cost: float) -> tuple[int, float | None, float]:
    """the one-gcra script answers a rejection on a stored tat with ``{tat, now}`` (as stored, and
    as `fast_reset`'s now): (remaining, retry_after, reset_after) are `decide`'s rejection,
    the same float operations on the same values."""
    if len(reply) != 2:
        raise ValueError("not a rejection of the one-gcra script")
    now = reply[1]
    now = now / 1e6 if now.__class__ is int else float(now)
    tat = float(reply[0])
    if not math.isfinite(tat):
        raise ValueError("not a state")
    if tat < now:
        tat = now
    tokens = limit.capacity - (tat - now) * limit.per_second
    retry = None if cost > limit.capacity else -(tokens - cost) / limit.per_second
    rem = (tokens + EPS).__trunc__() if tokens > 0.0 else 0
    return rem, retry, tat - now


ALGORITHM = Algorithm("gcra", decide, refund, ttl, LimitRules(
    "the token bucket's decisions with one timestamp of state (GCRA)",
    bucket_params), RedisCodec(
    id=2, tag="gcra", script="gcra.lua", params=lua_params, from_redis=from_redis,
    fast_script=True, fast_reset=fast_reset, fast_reject=fast_reject))
