"""Shared definitions for the algorithm modules.

Rules every algorithm follows (the "theory of operation"):

* An algorithm is three pure functions of ``(state, now, cost, limit)``; nothing here reads a
  clock, touches a lock or does I/O. Stores keep the state and call these functions.
* ``decide(state, now, cost, limit) -> (new_state, Decision)``. ``state`` is ``None`` for a key
  never seen (or forgotten: every algorithm treats a fully recovered state and a missing one
  alike, which is what makes expiry and eviction of recovered keys free). ``new_state`` is
  ``None`` when the request is rejected: a rejected request never changes state, so it never
  consumes quota. A store commits ``new_state`` only if it wants the request charged (a
  `peek` or a composite check that another limit rejected simply drops it).
* ``refund(state, now, cost, at, limit) -> state | None`` gives back `cost` that was admitted
  at time `at` (a cancelled reservation, or a rollback); ``None`` means "forget the key".
* ``ttl(state, now, limit) -> seconds`` until the state is equivalent to a missing key. Stores
  use it for key expiry (Redis PEXPIRE) and to evict recovered keys first.
* `now` is in seconds on any monotonic scale; window algorithms align windows to multiples
  of the period on that scale (t = 0 is the epoch).
* An algorithm is one module, ``<name>.py``, with its Lua twin ``<name>.lua`` beside it
  (the same arithmetic for the Redis store, line by line), and it ends with
  ``ALGORITHM = Algorithm(name, decide, refund, ttl, LimitRules(...), RedisCodec(...))``:
  everything a `Limit` and a store need to know about it, so neither switches on algorithm
  names. The registry (``ALGORITHMS`` in ``__init__``) lists every module's record and
  registers its `LimitRules` with the values (`ratekeeper._types.register`).
* The parameter rules two or more algorithms share are written once, here: `bucket_params`
  (token bucket, GCRA) and `window_params` (the three windows).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from .._errors import InvalidLimit
from .._rates import Rate
from .._types import Decision, Limit, LimitRules, check_number

__all__ = ["EPS", "FLOAT_DRIFT", "NS_TOLERANCE", "TIME_EPS", "Algorithm", "LimitRules",
           "MemoryForm",
           "RedisCodec", "bucket_params", "floor_remaining", "hash_fields", "lua_float",
           "new_decision", "no_delay", "window_params"]

#: Whole-unit rounding guard: ``floor(x + EPS)`` so 2.9999999999999996 counts as 3.
EPS = 1e-9

#: Two instants less than this many seconds apart are the same instant, when a boundary is
#: tested (a log entry's expiry ``ts + P``, a window's end ``(k + 1) * P``). Float subtraction
#: of the decimal instants people write is off by a few ulps (``16.208 - 2.0`` is
#: ``14.207999999999998``), and on the Redis server's Unix clock (``TIME``: whole
#: microseconds) an ulp is 0.24 µs. Half a microsecond is above both and below the
#: resolution of any clock a store reads, so it never merges two instants a clock can tell
#: apart.
TIME_EPS = 5e-7

#: Go's x/time/rate turns a token deficit into a wait with ``time.Duration`` (nanoseconds,
#: truncated), and admits when that wait is 0. A deficit worth less than 1 ns of refill is
#: therefore admitted; we keep exactly that tolerance, which also absorbs float noise.
NS_TOLERANCE = 1e-9

#: The relative size of a float's last digit (2**-52). Instants on a Unix-time clock (a Redis
#: server's, a replayed log's: 1.7e9 s, where one ulp is 0.24 µs) are only that exact, so
#: a refill deficit below that grid is float noise, admitted like Go's nanosecond: the token
#: bucket allows ``2 * |now| * FLOAT_DRIFT`` seconds (an elapsed time is off by an ulp of
#: each end), GCRA ``(b + 2) * |tat| * FLOAT_DRIFT`` (its ``tat`` grows by ``c / r`` with
#: every admission, each addition rounded: over a burst of ``b`` about ``b`` ulps, enough to
#: refuse the last request of an exactly refilled burst). Both at most a quarter of one
#: request's refill time; near 0 (a monotonic clock, a trace from 0) it is Go's tolerance.
FLOAT_DRIFT = 2.220446049250313e-16

#: ``new_decision(Decision, (allowed, remaining, retry_after, reset_after, delay, limit, False))``
#: builds a Decision with one C call: `Decision(...)` goes through a Python-level ``__new__``
#: that costs more than the whole GCRA computation. Every field must be given.
new_decision = tuple.__new__

Decide = Callable[[Any, float, float, Limit], "tuple[Any, Decision]"]
Refund = Callable[[Any, float, float, float, Limit], Any]
Ttl = Callable[[Any, float, Limit], float]


class RedisCodec(NamedTuple):
    """How one algorithm's arguments and state cross into its Lua script and back.

    The Redis store reads these instead of switching on algorithm names; each field is
    the algorithm's own, next to its math (``<name>.lua`` states the same layout at its top).
    """

    #: The algorithm's id in check.lua/refund.lua's ARGV; its Lua file registers ``ALGOS[id]``.
    id: int
    #: The short name that ends its state's Redis key (``{prefix}{<key>}:<limit name>:<tag>``),
    #: so a limit that changes algorithm under its name starts on a key of its own.
    tag: str
    #: Its Lua file, beside the module (``<name>.lua``): the functions check.lua, refund.lua
    #: and one.lua call.
    script: str
    #: ``params(limit) -> (p1, p2[, p3])``: the limit's parameters as ARGV text, exactly as
    #: its Lua file reads them (one.lua takes these; check.lua pads them to three).
    params: Callable[[Limit], tuple[str, ...]]
    #: ``from_redis(kind, value) -> state``: a key's raw value (its Redis type, "hash",
    #: "string" or "list", and the hash's fields as a dict, the string, or the list's
    #: elements, all text) as the Python state `decide` takes. Raises ValueError (or
    #: KeyError) for a value that is not this algorithm's state.
    from_redis: Callable[[str, Any], Any]
    #: Whether it has a straight-line single-limit script (faster than one.lua), which
    #: stores/_lua.py assembles around its Lua file's self-contained ``decide``; tests prove
    #: it decides exactly as the general script.
    fast_script: bool = False
    #: With `fast_script`, optionally: ``fast_reset(reply, limit) -> reset_after`` of its short
    #: admission reply (``{remaining, ...}``); None: the script answers one.lua's five values.
    #: Raises ValueError (or TypeError) for any other shape.
    fast_reset: Callable[[list[Any], Limit], float] | None = None
    #: With `fast_script`, optionally: ``fast_reject(reply, limit, cost) -> (remaining,
    #: retry_after, reset_after)`` of its short rejection reply (``{<state>, now}``: the
    #: state the script decided on, so that it formats no float); None: one.lua's five
    #: values. Raises ValueError (or TypeError) for any other shape.
    fast_reject: Callable[[list[Any], Limit, float], tuple[int, float | None, float]] | None = \
        None


class MemoryForm(NamedTuple):
    """How `MemoryStore` keeps a state in fewer bytes: ``unpack(pack(state))`` gives back a
    state that every pure function decides on exactly as on `state` (the same numbers; an
    int may come back as the float of the same value). A million keys of two floats each
    cost 72 bytes less each as one ``complex`` than as a tuple."""

    pack: Callable[[Any], Any]
    unpack: Callable[[Any], Any]


class Algorithm(NamedTuple):
    """One algorithm, looked up by name: its three pure functions, what a `Limit` of it
    accepts (its `LimitRules`), its Redis codec and (if it has one) its compact in-memory
    form."""

    name: str
    decide: Decide
    refund: Refund
    ttl: Ttl
    rules: LimitRules
    redis: RedisCodec
    memory: MemoryForm | None = None

    @property
    def reference(self) -> str:
        """What it follows, in one line (``ratekeeper.ALGORITHMS[name]``)."""
        return self.rules.description


# -- parameter rules (LimitRules.params) shared by several algorithms -------------------------


def no_delay(algorithm: str, nodelay: bool, delay: int) -> None:
    """nodelay and delay are nginx's queueing options: the leaky bucket's only."""
    if nodelay or delay:
        raise InvalidLimit(f"nodelay/delay apply to 'leaky-bucket' only, not {algorithm!r}")


def bucket_params(algorithm: str, rate: Rate, burst: float | None, nodelay: bool, delay: int
                  ) -> tuple[float, float, float]:
    """Token bucket and GCRA: `burst` (default: the rate's amount, as Go's
    ``rate.NewLimiter(r, b)`` is usually given) is the capacity, any number above 0; the
    window is the time an empty bucket takes to fill."""
    b = rate.amount if burst is None else check_number("burst", burst)
    no_delay(algorithm, nodelay, delay)
    return b, b, b / rate.per_second


def window_params(algorithm: str, rate: Rate, burst: float | None, nodelay: bool, delay: int
                  ) -> tuple[None, float, float]:
    """The windows: at most the rate's amount per period, so no burst; window = period."""
    if burst is not None:
        raise InvalidLimit(
            f"{algorithm!r} takes no burst: its capacity is the rate's amount "
            f"({rate.amount:g} per {rate.period:g}s)"
        )
    no_delay(algorithm, nodelay, delay)
    return None, float(rate.amount), rate.period


def floor_remaining(x: float) -> int:
    """Whole units left, never negative."""
    if x <= 0:
        return 0
    return int(x + EPS)


def lua_float(x: float) -> str:
    """A float as ARGV text that Lua's tonumber reads back exactly (Python's repr)."""
    return repr(float(x))


def hash_fields(value: Any, kind: str, *names: str) -> list[str]:
    """The fields `names` of a hash state (`from_redis`'s value), or ValueError."""
    if kind != "hash":
        raise ValueError(f"a {kind}, not a hash")
    return [value[n] for n in names]
