"""Sliding-window counter: Cloudflare's weighted estimate of a sliding window.

Two fixed-window counters, the previous window's ``prev`` and the current one's ``curr``,
estimate the cost admitted in the last period by assuming ``prev`` was spread evenly::

    estimate(t) = prev * (P - elapsed) / P + curr        elapsed = t - current window start

A request of cost ``c`` is admitted iff ``estimate + c <= N``. It needs three numbers of state
(``(k, prev, curr)``) whatever the traffic, and Cloudflare measured it within a few percent
of an exact sliding log on real traffic.

``retry_after`` solves the estimate for the earliest time the request fits: within the current
window if ``curr + c <= N``, else in the next one (where ``prev`` becomes ``curr``), and at
worst at the start of the window after that (where the estimate is 0).
"""

from __future__ import annotations

import math
import struct
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

State = tuple[int, float, float]  # (window index k, prev, curr)


def _roll(state: State | None, now: float, p: float) -> tuple[int, float, float]:
    k = math.floor(now / p + EPS)
    if state is None:
        return k, 0.0, 0.0
    sk, prev, curr = state
    if k == sk:
        return k, prev, curr
    if k == sk + 1:
        return k, curr, 0.0
    if k > sk:
        return k, 0.0, 0.0
    return sk, prev, curr  # clock went back into an earlier window: keep the stored one


def _estimate(k: int, prev: float, curr: float, now: float, p: float) -> float:
    elapsed = now - k * p
    if elapsed < 0:
        elapsed = 0.0
    return prev * (p - elapsed) / p + curr


def decide(
    state: State | None, now: float, cost: float, limit: Limit
) -> tuple[State | None, Decision]:
    n = limit.capacity
    p = limit.period
    k, prev, curr = _roll(state, now, p)
    est = _estimate(k, prev, curr, now, p)
    start = k * p
    if est + cost <= n + EPS:
        curr += cost
        reset = (start + 2 * p if curr else start + p) - now
        return (k, prev, curr), new_decision(
            Decision, (True, floor_remaining(n - est - cost), 0.0, reset, 0.0, limit, False)
        )
    retry: float | None = None
    if cost <= n:
        if curr + cost <= n:
            # prev * (P - e) / P <= N - curr - c  =>  e >= P - (N - curr - c) * P / prev
            e = p - (n - curr - cost) * p / prev
            retry = start + e - now
        else:
            # next window: curr * (P - e) / P + c <= N  =>  e >= P - (N - c) * P / curr
            e = p - (n - cost) * p / curr
            retry = start + p + e - now
        retry = max(retry, 0.0)
    reset = (start + 2 * p if curr else start + p if prev else now) - now
    return None, new_decision(
        Decision, (False, floor_remaining(n - est), retry, reset, 0.0, limit, False)
    )


def refund(state: State | None, now: float, cost: float, at: float, limit: Limit) -> State | None:
    if state is None:
        return None
    k, prev, curr = state
    ak = math.floor(at / limit.period + EPS)
    if ak < k and math.floor(now / limit.period + EPS) < k:
        ak = k  # the clock was (and is) behind the stored window: the cost went to `curr`
    if ak == k:
        curr = max(0.0, curr - cost)
    elif ak == k - 1:
        prev = max(0.0, prev - cost)
    return (k, prev, curr) if (prev > EPS or curr > EPS) else None


def ttl(state: State, now: float, limit: Limit) -> float:
    k, _, curr = state
    p = limit.period
    return (k + (2 if curr else 1)) * p - now


# -- Redis (sliding_window_counter.lua) --------------------------------------------------------


def lua_params(limit: Limit) -> tuple[str, str]:
    """p1 = N (cost per window), p2 = P (the period, seconds)."""
    return lua_float(limit.capacity), lua_float(limit.period)


def from_redis(kind: str, value: Any) -> State:
    """A hash ``{k, prev, curr}`` (the window index, the two windows' costs)."""
    k, prev, curr = hash_fields(value, kind, "k", "prev", "curr")
    return int(float(k)), float(prev), float(curr)


def fast_reject(reply: list[Any], limit: Limit, cost: float) -> tuple[int, float | None, float]:
    """the one-sliding-window-counter script answers a rejection on a stored state with ``{k, prev,
    curr, now}`` (as stored; now in whole microseconds on the server's clock): (remaining,
    retry_after, reset_after) are `decide`'s rejection, the same float operations on the
    same values (its rejection branch, repeated here)."""
    if len(reply) != 4:
        raise ValueError("not a rejection of the one-sliding-window-counter script")
    now = reply[3]
    now = now / 1e6 if now.__class__ is int else float(now)
    sk, sp, sc = float(reply[0]), float(reply[1]), float(reply[2])
    if not (math.isfinite(sk) and math.isfinite(sp) and math.isfinite(sc)):
        raise ValueError("not a state")
    n = limit.capacity
    p = limit.period
    k, prev, curr = _roll((int(sk), sp, sc), now, p)
    est = _estimate(k, prev, curr, now, p)
    start = k * p
    retry: float | None = None
    if cost <= n:
        if curr + cost <= n:
            e = p - (n - curr - cost) * p / prev
            retry = start + e - now
        else:
            e = p - (n - cost) * p / curr
            retry = start + p + e - now
        retry = max(retry, 0.0)
    reset = (start + 2 * p if curr else start + p if prev else now) - now
    return floor_remaining(n - est), retry, reset


# -- MemoryStore's compact form -----------------------------------------------------------------

_PACKED = struct.Struct("<qdd")  # k, prev, curr: one 24-byte bytes object (57 bytes in all)


def pack(state: State) -> bytes | State:
    """(k, prev, curr) as 24 bytes, instead of a tuple of three numbers (140 bytes)."""
    k = state[0]
    return _PACKED.pack(*state) if -2**63 <= k < 2**63 else state


def unpack(p: bytes | State) -> State:
    if isinstance(p, bytes):
        k, prev, curr = _PACKED.unpack(p)
        return k, prev, curr
    return p


ALGORITHM = Algorithm("sliding-window-counter", decide, refund, ttl, LimitRules(
    "Cloudflare's estimate prev*(P-elapsed)/P + curr <= N",
    window_params), RedisCodec(
    id=6, tag="swc", script="sliding_window_counter.lua", params=lua_params,
    from_redis=from_redis, fast_script=True,
    fast_reject=fast_reject), memory=MemoryForm(pack, unpack))
