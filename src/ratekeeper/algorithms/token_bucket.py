"""Token bucket, exactly as Go's ``golang.org/x/time/rate`` ``AllowN(t, n)``.

A bucket holds up to ``b = limit.burst`` tokens and starts full. Tokens refill continuously at
``r = limit.per_second`` per second, capped at ``b``. A request of cost ``c`` at time ``t`` is
admitted iff the bucket holds at least ``c`` tokens then; admitting takes ``c`` tokens.

State: ``(tokens, last)``: the token count at time ``last`` (seconds).

Edge values, as in rate.go:

* ``c > b`` is never admitted (``retry_after`` is ``None``), whatever the state.
* Time going backwards (``now < last``) refills nothing and takes nothing back; an admission
  then stamps the state with the earlier ``now``, as Go does (its ``TestLimiterJumpBackwards``
  passes unchanged). A rejection never writes state, so rejected requests provably change
  nothing (Go 0.3.0 also moved ``last`` back on a rejection; the two agree whenever time is
  monotonic). While the clock is behind, ``retry_after`` counts from ``last``, where refill
  resumes.
* A deficit worth less than one nanosecond of refill is admitted (Go's ``Duration``
  truncation); see `NS_TOLERANCE`.

Timeline for ``Limit("token-bucket", "1/s", burst=3)``: at t=0 three requests pass and the
fourth gets ``retry_after=1.0``; at t=1 one passes; at t=10 the bucket is full again (3).
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
    MemoryForm,
    RedisCodec,
    bucket_params,
    hash_fields,
    lua_float,
    new_decision,
)

State = tuple[float, float]

__all__ = ["ALGORITHM", "decide", "refund", "ttl"]


def _tokens(state: State | None, now: float, limit: Limit) -> tuple[float, float]:
    """Tokens at `now` and the time they refer to (advance(), in rate.go)."""
    b = limit.capacity
    if state is None:
        return b, now
    tokens, last = state
    if now < last:
        # Clock went backwards: count no time as passed, and keep `last` where it was.
        return tokens, last
    tokens += (now - last) * limit.per_second
    return (b if tokens > b else tokens), now


def decide(
    state: State | None, now: float, cost: float, limit: Limit
) -> tuple[State | None, Decision]:
    r = limit.per_second
    b = limit.capacity
    behind = 0.0  # how far the clock is behind the state's `last` (refill resumes there)
    if state is None:
        tokens = b
    else:
        tokens, last = state
        if now >= last:
            tokens += (now - last) * r
            if tokens > b:
                tokens = b
        else:  # a clock going backwards refills nothing
            behind = last - now
    left = tokens - cost
    # Go's nanosecond, widened to the float grid of `now` (an elapsed time between two
    # Unix-time instants is off by up to an ulp of each: 0.24 µs at 1.7e9; `FLOAT_DRIFT`).
    if left >= 0.0 or (-left / r < NS_TOLERANCE + min(2.0 * abs(now) * FLOAT_DRIFT, 0.25 / r)
                       and cost <= b):
        # reset_after: time for the deficit (b - left) to refill. Like Go, the state is
        # stamped `now` even when the clock went backwards.
        rem = (left + EPS).__trunc__() if left > 0.0 else 0
        return (left, now), new_decision(
            Decision, (True, rem, 0.0, (b - left) / r, 0.0, limit, False)
        )
    # retry_after: the deficit (c - tokens) refills at r per second from `last`; never if c
    # exceeds b.
    retry = None if cost > b else behind - left / r
    rem = (tokens + EPS).__trunc__() if tokens > 0.0 else 0
    reset = behind + (b - tokens) / r
    return None, new_decision(Decision, (False, rem, retry, reset, 0.0, limit, False))


def refund(state: State | None, now: float, cost: float, at: float, limit: Limit) -> State | None:
    """Give `cost` tokens back (capped at the capacity). `at` does not matter for a bucket."""
    if state is None:
        return None
    tokens, t = _tokens(state, now, limit)
    tokens += cost
    return None if tokens >= limit.capacity else (tokens, t)


def ttl(state: State, now: float, limit: Limit) -> float:
    """Seconds until the bucket is full again (then the state equals a missing key)."""
    tokens, last = state
    return last + (limit.capacity - tokens) / limit.per_second - now


# -- Redis (token_bucket.lua, and the one-token-bucket script for a single limit) ----------


def lua_params(limit: Limit) -> tuple[str, str]:
    """p1 = r (tokens per second), p2 = b (capacity)."""
    return lua_float(limit.per_second), lua_float(limit.capacity)


def from_redis(kind: str, value: Any) -> State:
    """A hash ``{tokens, last}`` (floats)."""
    tokens, last = hash_fields(value, kind, "tokens", "last")
    return float(tokens), float(last)


def fast_reset(reply: list[Any], limit: Limit) -> float:
    """the one-token-bucket script answers an admission ``{remaining, left}``: reset_after is
    ``(b - left) / r``, the float operations of `decide` (one formatted float less)."""
    if len(reply) != 2:
        raise ValueError("not an admission of the one-token-bucket script")
    return (float(limit.capacity) - float(reply[1])) / float(limit.per_second)


def fast_reject(reply: list[Any], limit: Limit, cost: float) -> tuple[int, float | None, float]:
    """the one-token-bucket script answers a rejection on a stored state with ``{tokens, last,
    now}`` (as stored; now as `gcra.fast_reject`'s): (remaining, retry_after, reset_after)
    are `decide`'s rejection, the same float operations on the same values."""
    if len(reply) != 3:
        raise ValueError("not a rejection of the one-token-bucket script")
    now = reply[2]
    now = now / 1e6 if now.__class__ is int else float(now)
    r, b = limit.per_second, limit.capacity
    tokens, last = float(reply[0]), float(reply[1])
    if not (math.isfinite(tokens) and math.isfinite(last)):
        raise ValueError("not a state")
    behind = 0.0
    if now >= last:
        tokens += (now - last) * r
        if tokens > b:
            tokens = b
    else:
        behind = last - now
    retry = None if cost > b else behind - (tokens - cost) / r
    rem = (tokens + EPS).__trunc__() if tokens > 0.0 else 0
    return rem, retry, behind + (b - tokens) / r


# -- MemoryStore's compact form -----------------------------------------------------------------


def pack(state: State) -> complex:
    """(tokens, last) as one complex: 32 bytes instead of a tuple's 104."""
    return complex(state[0], state[1])


def unpack(p: complex) -> State:
    return p.real, p.imag


ALGORITHM = Algorithm("token-bucket", decide, refund, ttl, LimitRules(
    "Go golang.org/x/time/rate AllowN: capacity `burst`, continuous refill",
    bucket_params), RedisCodec(
    id=1, tag="tb", script="token_bucket.lua", params=lua_params, from_redis=from_redis,
    fast_script=True, fast_reset=fast_reset, fast_reject=fast_reject),
    memory=MemoryForm(pack, unpack))
