"""Leaky bucket, exactly as nginx's ``limit_req`` (ngx_http_limit_req_module, 1.22).

nginx keeps, per key, ``excess`` in *milli-requests* and the millisecond ``last`` it was
updated, with the rate in milli-requests per second (``10r/s`` is 10000; ``30r/m`` is
30000/60 = 500, integer division). For a request at ``now`` (milliseconds)::

    ms     = now - last            (clamped: < -60000 counts as 1, other negatives as 0)
    excess = excess - rate * ms / 1000 + 1000        (integer arithmetic)
    excess = max(excess, 0)
    reject  if excess > burst * 1000
    delay   = (excess - delay_D * 1000) * 1000 / rate  ms, when excess > D * 1000

A new key is admitted with ``excess = 0`` and no delay. ``excess`` is the queue behind the
request being served, so ``burst=B`` admits B + 1 requests at once; ``nodelay`` serves them
all at once; ``delay=D`` serves the first D excess requests at once and spaces out the rest.
Only admitted requests update the state.

Weighted costs (nginx has none) generalise the "+1000" to "+1000*c" after leaking, with the
level clamped at -1000 first (one request's worth of credit, which is what nginx's clamp of
``excess - leak + 1000`` at 0 amounts to)::

    excess = max(excess - rate * ms / 1000, -1000) + 1000 * c

For ``c = 1`` this is nginx's formula exactly; a drained key and a new key are the same state.
A cost above ``burst + 1`` can never be admitted.

Timeline for ``Limit("leaky-bucket", "1r/s", burst=5)`` (nginx ``burst=5``): seven requests at
t=0: the first is served at once, the next five are admitted with delays 1, 2, 3, 4 and 5 s, the
seventh is rejected.
"""

from __future__ import annotations

import math
from typing import Any

from .._errors import InvalidLimit
from .._rates import Rate
from .._types import Decision, Limit, check_number
from ._common import EPS, Algorithm, LimitRules, MemoryForm, RedisCodec, hash_fields, new_decision

__all__ = ["ALGORITHM", "decide", "limit_params", "params", "refund", "ttl"]

State = tuple[int, int]  # (excess in milli-requests, last update in ms)

_NEVER = 1 << 62  # nodelay: no excess is ever delayed


def limit_params(algorithm: str, rate: Rate, burst: float | None, nodelay: bool, delay: int
                 ) -> tuple[float, float, float]:
    """A `Limit`'s rules, nginx's: `burst` (default 0) counts queued requests, so it is
    whole; the rate must be at least nginx's resolution of one milli-request per second
    (`params` keeps it as an integer); ``delay=D`` is a whole number and excludes
    `nodelay`. The capacity is ``burst + 1``: nginx admits burst+1 requests at once."""
    b = 0.0 if burst is None else check_number("burst", burst, allow_zero=True)
    if not float(b).is_integer():
        raise InvalidLimit(f"{algorithm} burst counts requests; got {burst!r}")
    if rate.per_second * 1000 < 1:
        raise InvalidLimit(
            f"{algorithm} rate {rate} is below nginx's resolution of 1 request "
            "per 1000 seconds; use a faster rate or a window algorithm"
        )
    if isinstance(delay, bool) or not isinstance(delay, int) or delay < 0:
        raise InvalidLimit(f"delay must be a whole number >= 0, got {delay!r}")
    if nodelay and delay:
        raise InvalidLimit("use either nodelay=True or delay=D, not both (as in nginx)")
    capacity = b + 1
    return b, capacity, capacity / rate.per_second


def params(limit: Limit) -> tuple[int, int, int]:
    """(rate in milli-requests per second, burst in milli-requests, delay threshold)."""
    # Every decision needs these; a Limit is immutable, so they are computed once per Limit
    # object (held with it, so an id is never mistaken for a later object's).
    known = _PARAMS.get(id(limit))
    if known is not None and known[0] is limit:
        return known[1]
    rate = int(limit.per_second * 1000 + EPS)
    burst = int((limit.burst or 0) * 1000)
    threshold = _NEVER if limit.nodelay else limit.delay * 1000
    if len(_PARAMS) >= 1024:
        _PARAMS.clear()  # many short-lived limits (tests, reloads): stay bounded
    _PARAMS[id(limit)] = (limit, (rate, burst, threshold))
    return rate, burst, threshold


_PARAMS: dict[int, tuple[Limit, tuple[int, int, int]]] = {}


def _level(state: State | None, now_ms: int, rate: int) -> tuple[int, int]:
    """The leaked level at `now_ms` (>= -1000) and the ms the state would be stamped with."""
    if state is None:
        return -1000, now_ms
    excess, last = state
    ms = now_ms - last
    if ms < -60000:
        ms = 1
    elif ms < 0:
        ms = 0
    level = excess - rate * ms // 1000
    return (level if level > -1000 else -1000), (now_ms if ms else last)


def decide(
    state: State | None, now: float, cost: float, limit: Limit
) -> tuple[State | None, Decision]:
    # `_level`, `_drain_ms` and `ttl` written out inline (the same integer operations, in the
    # same order): this is the hot path of every in-memory decision.
    rate, burst, threshold = params(limit)
    now_ms = round(now * 1000)
    if state is None:
        level, stamp = -1000, now_ms
    else:
        excess0, last = state
        ms = now_ms - last
        if ms < -60000:
            ms = 1
        elif ms < 0:
            ms = 0
        level = excess0 - rate * ms // 1000
        if level < -1000:
            level = -1000
        stamp = now_ms if ms else last
    c = round(cost) * 1000
    excess = level + c
    if excess < 0:
        excess = 0
    if excess <= burst:
        delay = 0.0 if excess <= threshold else ((excess - threshold) * 1000 // rate) / 1000
        # until drained to rest
        reset = (stamp + -(-(excess + 1000) * 1000 // rate)) / 1000 - now
        return (excess, stamp), new_decision(
            Decision, (True, (burst - excess) // 1000, 0.0, reset, delay, limit, False)
        )
    remaining = (burst - level) // 1000
    if remaining < 0:
        remaining = 0
    if state is None:
        excess0, last = 0, now_ms
        reset = 0.0
    else:
        reset = (last + -(-(excess0 + 1000) * 1000 // rate)) / 1000 - now  # ttl(state)
        if not reset > 0.0:
            reset = 0.0
    if c - 1000 > burst:
        retry: float | None = None  # even an idle bucket cannot take this cost
    else:
        # Need rate * T // 1000 >= need (T in ms from last); solve for the smallest T.
        wait_ms = -(-(excess0 + c - burst) * 1000 // rate)
        retry = (last + wait_ms - now_ms) / 1000
        if not retry > 0.0:
            retry = 0.0
    return None, new_decision(Decision, (False, remaining, retry, reset, 0.0, limit, False))


def refund(state: State | None, now: float, cost: float, at: float, limit: Limit) -> State | None:
    if state is None:
        return None
    excess, last = state
    excess -= round(cost) * 1000
    return (excess if excess > -1000 else -1000), last


def _drain_ms(excess: int, rate: int) -> int:
    """Whole ms after which ``excess - rate * ms // 1000 <= -1000`` (drained to rest)."""
    return -(-(excess + 1000) * 1000 // rate)


def ttl(state: State, now: float, limit: Limit) -> float:
    """Seconds until the level has leaked to rest, counted in whole ms as `decide` leaks."""
    rate = params(limit)[0]
    excess, last = state
    return (last + _drain_ms(excess, rate)) / 1000 - now


# -- Redis (leaky_bucket.lua) ------------------------------------------------------------------


def lua_params(limit: Limit) -> tuple[str, str, str]:
    """p1 = rate (milli-requests per second), p2 = burst (milli-requests), p3 = the delay
    threshold (milli-requests): `params`, whole numbers."""
    rate, burst, threshold = params(limit)
    return str(rate), str(burst), str(threshold)


def from_redis(kind: str, value: Any) -> State:
    """A hash ``{excess, last}`` (whole numbers: milli-requests, ms)."""
    excess, last = hash_fields(value, kind, "excess", "last")
    return int(float(excess)), int(float(last))


def fast_reject(reply: list[Any], limit: Limit, cost: float) -> tuple[int, float | None, float]:
    """the one-leaky-bucket script answers a rejection on a stored state with ``{excess, last,
    now}`` (as stored; now in whole microseconds on the server's clock): (remaining,
    retry_after, reset_after) of `decide` on that state at that time, which rejects too."""
    if len(reply) != 3:
        raise ValueError("not a rejection of the one-leaky-bucket script")
    now = reply[2]
    now = now / 1e6 if now.__class__ is int else float(now)
    excess, last = float(reply[0]), float(reply[1])
    if not (math.isfinite(excess) and math.isfinite(last) and math.isfinite(now)):
        raise ValueError("not a state")
    _, d = decide((int(excess), int(last)), now, cost, limit)
    if d.allowed:
        raise ValueError("the script rejected what decide admits")
    return d.remaining, d.retry_after, d.reset_after


# -- MemoryStore's compact form -----------------------------------------------------------------


def pack(state: State) -> complex | State:
    """(excess, stamp), two integers, as one complex (exact below 2**53)."""
    excess, stamp = state
    return complex(excess, stamp) if -_EXACT < excess < _EXACT and -_EXACT < stamp < _EXACT \
        else state


def unpack(p: complex | State) -> State:
    if isinstance(p, complex):
        return int(p.real), int(p.imag)
    return p


_EXACT = 2**53


ALGORITHM = Algorithm("leaky-bucket", decide, refund, ttl, LimitRules(
    "nginx limit_req: burst, nodelay, delay=D; can answer 'admit after a delay'",
    limit_params, whole_costs=True), RedisCodec(
    id=3, tag="lb", script="leaky_bucket.lua", params=lua_params, from_redis=from_redis,
    fast_script=True, fast_reject=fast_reject), memory=MemoryForm(pack, unpack))
