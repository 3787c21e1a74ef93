"""GCRA: the token bucket's decisions with one timestamp of state.

The generic cell rate algorithm keeps the *theoretical arrival time* ``tat``: the instant at
which the bucket will be full again. With ``r`` tokens per second and capacity ``b``, the
tokens available at ``now`` are::

    tokens(now) = b - max(0, tat - now) * r

so a request of cost ``c`` is admitted iff ``tokens(now) >= c`` (the same test as the token
bucket, with Go's one-nanosecond tolerance), and admitting it moves ``tat`` forward by the time
``c`` tokens take to refill::

    tat' = max(tat, now) + c / r

One float per key is the cheapest state there is: in memory it is a dict of floats, in Redis a
single string key. A missing key is a full bucket, and so is any ``tat <= now``.

Time going backwards makes ``tat - now`` larger, so fewer tokens are available: a backwards
clock can only make GCRA stricter, never looser.
"""

from __future__ import annotations

from .._types import Decision, Limit
from ._common import NS_TOLERANCE, Algorithm, floor_remaining

__all__ = ["ALGORITHM", "decide", "refund", "ttl"]


def decide(tat: float | None, now: float, cost: float, limit: Limit) -> tuple[float | None, Decision]:
    r = limit.per_second
    b = limit.capacity
    if tat is None or tat < now:
        tat = now
    debt = (tat - now) * r  # tokens missing from a full bucket
    tokens = b - debt
    left = tokens - cost
    if cost <= b and (left >= 0 or -left / r < NS_TOLERANCE):
        new_tat = tat + cost / r
        return new_tat, Decision(True, floor_remaining(left), 0.0, new_tat - now, 0.0, limit)
    retry = None if cost > b else -left / r
    return None, Decision(False, floor_remaining(tokens), retry, tat - now, 0.0, limit)


def refund(tat: float | None, now: float, cost: float, at: float, limit: Limit) -> float | None:
    if tat is None:
        return None
    tat -= cost / limit.per_second
    return None if tat <= now else tat


def ttl(tat: float, now: float, limit: Limit) -> float:
    return tat - now


ALGORITHM = Algorithm("gcra", decide, refund, ttl)
