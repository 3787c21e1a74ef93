"""Everything about the Redis stores that is not I/O (sans-I/O): keys, argument encoding,
reply parsing, and the plans the sync and async drivers execute."""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
import weakref
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any, NamedTuple, TypedDict, TypeVar

import redis.exceptions as rex
from redis.crc import key_slot

from ..._errors import ConfigError, StoreError, StoreUnavailable
from ..._types import Decision, Limit
from ...algorithms import ALGORITHMS
from ...algorithms._common import RedisCodec, lua_float, new_decision
from .._base import Check
from .._lua import CHECK, ONE, REFUND, STATE, Script
from .._urlforms import redact
from ._breaker import CircuitBreaker
from ._client import (
    _MISUSE,
    _UNAVAILABLE_CODES,
    _UNAVAILABLE_TYPES,
    _check_timeout,
    _client_kwargs,
    _parse_target,
    _Target,
)
from ._deny import _DenyCache

log = logging.getLogger("ratekeeper.redis")

#: Key prefix used when none is given.
DEFAULT_PREFIX = "rk:"
#: Seconds a decision may take (socket read and connect timeout of clients built from a URL).
DEFAULT_TIMEOUT = 0.25
#: Minimum key lifetime (real seconds) in client-clock mode; see the module docstring.
CLIENT_CLOCK_MIN_TTL = 60.0

T = TypeVar("T")

class _Call(NamedTuple):
    """One command a plan wants run: a script (EVALSHA/EVAL) or, with no script, DEL of
    `keys` (PING when there are none); ``command="scan"``: the keys matching ``args[0]``
    on every primary."""

    script: Script | None
    keys: list[str]
    args: list[Any]  # str, or bytes a bound hot path encoded once
    command: str = ""


#: ``new_call(_Call, (script, keys, args, command))``: a `_Call` in one C call, for the hot
#: paths (as `new_decision`: a NamedTuple's own ``__new__`` is Python-level). Every field
#: must be given.
new_call = tuple.__new__

_Plan = Generator[_Call, Any, T]
#: What a driver learned from one call: (True, reply) or (False, the StoreError).
_Outcome = tuple[bool, Any]
_S = TypeVar("_S", bound="_RedisCore")


class StoreOptions(TypedDict, total=False):
    """The options `RedisStore` and `AsyncRedisStore` share (see `RedisStore`)."""

    prefix: str
    client_clock: bool
    min_ttl: float | None
    clock_grace: float
    breaker_failures: int
    breaker_cooldown: float
    deny_cache: bool
    deny_cache_size: int
    on_error: Callable[[StoreError], None] | None
    local_clock: Callable[[], float]


def _advance(plan: _Plan[Any], outcome: _Outcome | None) -> tuple[bool, Any]:
    """Resume `plan` with what its last call gave (None: start it): ``(False, next call)``,
    or ``(True, its result)`` once it returns. Each driver's ``_run`` is a loop over this
    and its own ``_attempt``, the only part that differs (a call, or an await)."""
    try:
        if outcome is None:
            return False, next(plan)
        ok, value = outcome
        return False, plan.send(value) if ok else plan.throw(value)
    except StopIteration as stop:
        return True, stop.value


class RedisStoreStats:
    """Counters of one store (plain ints; under heavy concurrency they are approximate)."""

    __slots__ = (
        "calls", "deny_cache_hits", "errors", "function_loads", "noscript_reloads",
        "pipelined_calls", "pipelines", "short_circuited", "unavailable",
    )  # fmt: skip

    def __init__(self) -> None:
        self.calls = 0  # commands sent (a pipeline counts each command)
        self.pipelines = 0  # pipelines sent by the async store (one round trip each per node)
        self.pipelined_calls = 0  # commands that went in those pipelines
        self.noscript_reloads = 0  # NOSCRIPT answers followed by EVAL
        self.function_loads = 0  # "Function not found" answers followed by FUNCTION LOAD
        self.errors = 0  # failed calls, of any kind
        self.unavailable = 0  # ... of which the store was unavailable
        self.short_circuited = 0  # calls refused by an open circuit breaker (no I/O)
        self.deny_cache_hits = 0  # decisions answered by the deny cache (no I/O)

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__}

    def __repr__(self) -> str:
        return "RedisStoreStats(" + ", ".join(f"{k}={v}" for k, v in self.as_dict().items()) + ")"


class KeyState(NamedTuple):
    """What `RedisStore.inspect` reports for one limit of one key."""

    limit: Limit
    key: str
    redis_key: str
    #: Redis type of the key: "none" (absent), "hash", "string" or "list".
    kind: str
    #: Seconds until the key expires; None when absent (or, wrongly, immortal: see `immortal`).
    ttl: float | None
    immortal: bool
    #: The raw value as stored (hash fields, the string, or the list).
    raw: Any
    #: The state as the Python algorithm would hold it (None when absent).
    state: Any
    #: The decision a request of cost 1 would get now (nothing is charged).
    decision: Decision
    #: The time the state was read at (server clock, or the `now` given).
    now: float


# -----------------------------------------------------------------------------------------
# the shared core
# -----------------------------------------------------------------------------------------


def _encode_key(key: str) -> str:
    if "%" in key:
        key = key.replace("%", "%25")
    if "}" in key:
        key = key.replace("}", "%7D")
    return key


def _suffix(limit: Limit) -> str:
    """What follows a state key's hash tag: ``:<limit name>:<algorithm tag>``."""
    return f":{limit.name}:{ALGORITHMS[limit.algorithm].redis.tag}"


def split_state_key(rkey: str) -> tuple[str, str] | None:
    """``(limit name, algorithm)`` of a state key found under a prefix, or None for a key
    this store did not write (e.g. one from before algorithm tags)."""
    name, sep, tag = rkey.rpartition("}:")[2].rpartition(":")
    algorithm = _ALGORITHM_OF_TAG.get(tag)
    return (name, algorithm) if sep and algorithm is not None else None


_ALGORITHM_OF_TAG = {a.redis.tag: name for name, a in ALGORITHMS.items()}


def _glob_escape(text: str) -> str:
    """`text` as a literal in a SCAN MATCH pattern."""
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)


def _str(v: Any) -> str:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return str(v)


def _transport_closed(exc: BaseException) -> bool:
    """Whether `exc` is a write to a transport already closed (a connection the server or
    the network has just reset): uvloop raises ``RuntimeError: unable to perform operation
    on <TCPTransport closed=True ...>`` where asyncio's own transports raise an `OSError`
    (or write nothing). Unavailability, as those are: taken for a server's answer, it was a
    breaker success that reset the failure count in the middle of an outage."""
    return type(exc) is RuntimeError and "closed=True" in str(exc) and "ransport" in str(exc)


def _bad_reply(what: str, reply: Any) -> StoreError:
    text = repr(reply)
    if len(text) > 200:
        text = text[:200] + "..."
    return StoreError(
        f"unexpected reply from Redis to {what}: {text}; is another program writing under "
        "this key prefix, or a proxy rewriting replies? (use a prefix of your own)"
    )


def _float(v: Any, what: str, reply: Any) -> float:
    if isinstance(v, (bytes, str)):
        try:
            x = float(v)
        except ValueError:
            raise _bad_reply(what, reply) from None
        if math.isfinite(x):
            return x
    raise _bad_reply(what, reply)


#: What a bulk string reply arrives as (bytes; str on a client that decodes replies).
_TEXT = (bytes, str)


_fmt = lua_float  # a float as ARGV text that Lua's tonumber reads back exactly


#: Every script call's tag comes from here (`next_tag`): the last ARGV, which the script
#: answers first (`_lua`). A counter, below 2**31 so that Lua's tonumber reads it exactly and
#: Redis answers it as an integer; ``next`` of one is atomic under the GIL, so two threads
#: never send the same tag at once.
_tags = itertools.count(1)
_TAG_MASK = 0x7FFFFFFF


def next_tag() -> int:
    """A tag for one script call (see `untagged`)."""
    return next(_tags) & _TAG_MASK


class ReplyMismatch(rex.ConnectionError):
    """A script's reply that does not carry its call's tag: it is another call's (a proxy
    that answered a command twice shifts every later reply on that connection by one), so
    neither it nor the connection's later replies can be trusted. A ConnectionError: the
    store reports it as `StoreUnavailable` (a breaker failure), and the connection it came
    on is closed."""


def untagged(reply: Any, tag: int) -> Any:
    """The reply of the script call tagged `tag`, taken out of ``{tag, reply}`` (an error
    reply, which carries no tag, as it is); `ReplyMismatch` when it is not that call's."""
    if reply.__class__ is list and len(reply) == 2 and reply[0] == tag:
        return reply[1]
    if isinstance(reply, Exception):
        return reply
    text = repr(reply)
    if len(text) > 200:
        text = text[:200] + "..."
    raise ReplyMismatch(
        f"a script's reply is not its call's (tag {tag} expected): {text}; the connection "
        "it came on is closed. Replies out of step come from something between the client "
        "and Redis (a proxy answering twice); if this repeats, connect without it")


def _shaped(kind: str, raw: list[Any]) -> Any:
    """A key's raw value as the state script read it, shaped by its Redis type: a hash's
    fields as a dict, a string, or a list's elements; all text."""
    values = [_str(v) for v in raw]
    if kind == "hash":
        return dict(zip(values[::2], values[1::2], strict=False))
    if kind == "string":
        return values[0] if values else ""
    return values


class _RedisCore:
    """Everything about the Redis stores that is not I/O."""

    #: A limiter on this store reads the wall clock (client-clock mode must agree across
    #: processes; in server-clock mode the value is ignored).
    default_clock: Callable[[], float] = staticmethod(time.time)

    def __init__(
        self,
        *,
        cluster: bool,
        describe: str,
        prefix: str = DEFAULT_PREFIX,
        client_clock: bool = False,
        min_ttl: float | None = None,
        clock_grace: float = 1.0,
        breaker_failures: int = 5,
        breaker_cooldown: float = 0.25,
        deny_cache: bool = False,
        deny_cache_size: int = 100_000,
        on_error: Callable[[StoreError], None] | None = None,
        local_clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not isinstance(prefix, str) or "{" in prefix or "}" in prefix:
            raise ConfigError(
                f"key prefix must be a string without braces (they would break the hash tag "
                f"that keeps a key's limits in one cluster slot), got {prefix!r}"
            )
        if min_ttl is None:
            min_ttl = CLIENT_CLOCK_MIN_TTL if client_clock else 0.001
        if not (isinstance(min_ttl, (int, float)) and 0 <= min_ttl < math.inf):
            raise ConfigError(f"min_ttl must be a number of seconds >= 0, got {min_ttl!r}")
        if not (isinstance(clock_grace, (int, float)) and 0 <= clock_grace < math.inf):
            raise ConfigError(
                f"clock_grace must be a number of seconds >= 0, got {clock_grace!r}"
            )
        if isinstance(deny_cache_size, bool) or not isinstance(deny_cache_size, int) \
                or deny_cache_size < 1:
            raise ConfigError(
                f"deny_cache_size must be a whole number >= 1, got {deny_cache_size!r}"
            )
        CircuitBreaker(breaker_failures, breaker_cooldown)  # validate now, not on first failure
        self.prefix = prefix
        self.uses_client_clock = bool(client_clock)
        self.cluster = cluster
        self.min_ttl = float(min_ttl)
        self._min_ms = str(max(1, math.ceil(self.min_ttl * 1000)))
        self.clock_grace = float(clock_grace)
        self._grace_ms = str(math.ceil(self.clock_grace * 1000))
        self.breaker_failures = breaker_failures
        self.breaker_cooldown = float(breaker_cooldown)
        self._local_clock = local_clock
        self._breakers: dict[str, CircuitBreaker] = {}
        self._breakers_lock = threading.Lock()
        self._breaker = self._new_breaker("cluster" if cluster else describe)
        self._deny = _DenyCache(deny_cache_size, clock=local_clock) if deny_cache else None
        #: Every decision is one script call (one server, no deny cache): no plan needed.
        self._single_call = not cluster and self._deny is None
        self.on_error = on_error
        self.stats = RedisStoreStats()
        #: The errors counted and handed to `on_error` already (`_misread` skips them).
        self._reported: weakref.WeakSet[StoreError] = weakref.WeakSet()
        self._describe = describe
        self._params: dict[int, tuple[Limit, list[str], list[str], str]] = {}
        self._client: Any = None  # the driver's redis-py client
        #: Scripts with a function (`Script.fn`) go as FCALL of the `LIBRARY`, until the
        #: server turns out to have no functions (or not for us: ACLs). A cluster keeps
        #: EVALSHA: a library would have to be loaded on every primary, new ones included.
        self._fcall = not cluster

    def __repr__(self) -> str:
        clock = "client clock" if self.uses_client_clock else "server clock"
        cache = ", deny cache" if self._deny is not None else ""
        return (f"{type(self).__name__}({self._describe}, prefix={self.prefix!r}, {clock}"
                f"{cache}, breaker={self._breaker.state})")

    # -- keys and arguments ---------------------------------------------------------------

    def state_key(self, limit: Limit, key: str) -> str:
        """The Redis key holding `limit`'s state for `key`:
        ``{prefix}{<key>}:<limit name>:<algorithm tag>`` (the state means something only
        to its algorithm, so a limit that changes algorithm under its name starts fresh)."""
        if "%" in key or "}" in key:
            key = _encode_key(key)
        return f"{self.prefix}{{{key}}}{self._encoded(limit)[3]}"

    def _encoded(self, limit: Limit) -> tuple[Limit, list[str], list[str], str]:
        """`limit` as its algorithm's codec encodes it, cached per Limit object: (limit,
        check.lua's id, p1, p2, p3; one.lua's p1, p2[, p3]; the state key's suffix)."""
        cached = self._params.get(id(limit))
        if cached is not None and cached[0] is limit:
            return cached
        codec: RedisCodec = ALGORITHMS[limit.algorithm].redis
        params = list(codec.params(limit))
        entry = (limit, [str(codec.id), *params, *["0"] * (3 - len(params))], params,
                 _suffix(limit))
        if len(self._params) > 10_000:
            self._params.clear()
        self._params[id(limit)] = entry
        return entry

    def _limit_args(self, limit: Limit) -> list[str]:
        """Algorithm id, p1, p2, p3 of `limit`, as check.lua and refund.lua take them."""
        return self._encoded(limit)[1]

    def _now_arg(self, now: float) -> str:
        return _fmt(now) if self.uses_client_clock else ""

    def _time_args(self, now_arg: str) -> list[str]:
        """ARGV 1, 3, 4 sans the flag: now ("" = server clock), min expiry, grace. A `now`
        given by the caller may be behind other callers' (skew, or a cross-slot check's
        later slots): its keys get `clock_grace` more life, so such callers still find
        them. On the server's own clock no grace is needed."""
        return [now_arg, self._min_ms, self._grace_ms if now_arg else "0"]

    def _limits_args(self, checks: Sequence[Check]) -> list[str]:
        out: list[str] = []
        for limit, _, cost in checks:
            algo_id, p1, p2, p3 = self._limit_args(limit)
            out += (algo_id, repr(cost), p1, p2, p3)
        return out

    def _check_call(self, checks: Sequence[Check], now_arg: str, consume: bool) -> _Call:
        # state_key and _limits_args inlined: this runs on every composite decision
        prefix, params, encoded = self.prefix, self._params, self._encoded
        keys: list[str] = []
        args = [now_arg, "1" if consume else "0", self._min_ms,
                self._grace_ms if now_arg else "0"]
        for limit, key, cost in checks:
            e = params.get(id(limit))
            if e is None or e[0] is not limit:
                e = encoded(limit)
            k = _encode_key(key) if "%" in key or "}" in key else key
            keys.append(f"{prefix}{{{k}}}{e[3]}")  # (one string built, not four)
            algo_id, p1, p2, p3 = e[1]
            args += (algo_id, "1" if cost == 1 else repr(cost), p1, p2, p3)
        return new_call(_Call, (CHECK, keys, args, ""))

    def _refund_call(self, checks: Sequence[Check], now_arg: str, at: float) -> _Call:
        keys = [self.state_key(limit, key) for limit, key, _ in checks]
        n, m, g = self._time_args(now_arg)
        return _Call(REFUND, keys, [n, _fmt(at), m, g, *self._limits_args(checks)])

    def _one_params(self, limit: Limit) -> list[str]:
        """`limit`'s parameters as one.lua and the straight-line scripts take them: the
        codec's p1, p2[, p3], no padding (every argument costs on the hot path)."""
        return self._encoded(limit)[2]

    def _fast_tail(self, now_arg: str) -> list[str]:
        """ARGV[4..6] of the straight-line one-limit scripts (`Script.straight`): min
        expiry, now, grace, with the trailing ones left off that equal the script's
        defaults (1 ms, the server clock, 0 ms)."""
        if now_arg:
            return [self._min_ms, now_arg, self._grace_ms]
        return [] if self._min_ms == "1" else [self._min_ms]

    def _one_call(self, limit: Limit, key: str, cost: float, now: float) -> _Call:
        now_arg = self._now_arg(now)
        script = ONE[limit.algorithm]
        if script.straight:
            return _Call(script, [self.state_key(limit, key)],
                         [repr(cost), *self._one_params(limit), *self._fast_tail(now_arg)])
        n, m, g = self._time_args(now_arg)
        return _Call(script, [self.state_key(limit, key)],
                     [n, repr(cost), m, g, *self._one_params(limit)])

    def _keys(self, checks: Sequence[Check]) -> list[str]:
        return [self.state_key(limit, key) for limit, key, _ in checks]

    def _slot_groups(self, checks: Sequence[Check]) -> list[list[int]]:
        """Indices of `checks` grouped by hash slot, in the fixed reservation order."""
        if not self.cluster or len(checks) < 2:
            return [list(range(len(checks)))]
        groups: dict[int, list[int]] = {}
        global_slots: set[int] = set()
        for i, (limit, key, _) in enumerate(checks):
            slot = key_slot(self.state_key(limit, key).encode())
            groups.setdefault(slot, []).append(i)
            if limit.scope == "global":
                global_slots.add(slot)
        order = sorted(groups, key=lambda s: (s in global_slots, s))
        return [groups[s] for s in order]

    # -- replies ----------------------------------------------------------------------------

    def _parse_check(
        self, reply: Any, checks: Sequence[Check]
    ) -> tuple[list[Decision], float, bool]:
        # type(x), not x.__class__: compiled, type() reads the object's type, where an
        # attribute is looked up (this runs on every composite decision)
        if type(reply) is not list or len(reply) != 2 + 5 * len(checks):
            raise _bad_reply("the check script", reply)
        admitted = reply[1]
        out: list[Decision] = []
        try:
            now = reply[0]  # whole microseconds (server clock), or the caller's text
            now = now / 1e6 if type(now) is int else float(now)
            check = now
            i = 2  # each check's five fields, read in place (no slice of them)
            for limit, _, _ in checks:
                allowed, remaining, retry = reply[i], reply[i + 1], reply[i + 2]
                reset, delay = reply[i + 3], reply[i + 4]
                i += 5
                if allowed not in (0, 1) or type(remaining) is not int or remaining < 0 \
                        or type(reset) not in _TEXT or type(delay) not in _TEXT:
                    break
                retry_after = None if retry is None else float(retry)
                reset_after, wait = float(reset), float(delay)
                check += reset_after + wait + (retry_after or 0.0)
                # one C call, not Decision's Python-level __new__ (see `new_decision`)
                out.append(new_decision(Decision, (allowed == 1, remaining, retry_after,
                                                   reset_after, wait, limit, False)))
            else:
                if admitted in (0, 1) and math.isfinite(check):
                    return out, now, admitted == 1
        except (TypeError, ValueError):
            pass
        raise _bad_reply("the check script", reply)

    @staticmethod
    def _parse_one(reply: Any, limit: Limit, cost: float) -> Decision:
        """A one-limit reply to a request of `cost` as a Decision (`one_parser`, for
        `limit`'s algorithm)."""
        return _PARSE_ONE[limit.algorithm](reply, limit, cost)

    @staticmethod
    def _parse_now(reply: Any) -> float:
        if reply.__class__ is int:  # whole microseconds (server clock)
            return float(reply / 1e6)
        return _float(reply, "the refund script", reply)

    def _parse_state(self, limit: Limit, kind: str, raw: list[Any]) -> Any:
        """A key's raw value as the Python algorithm's state (its codec's `from_redis`)."""
        if kind == "none":
            return None
        try:
            return ALGORITHMS[limit.algorithm].redis.from_redis(kind, _shaped(kind, raw))
        except (KeyError, ValueError, IndexError, TypeError):
            pass
        raise StoreError(
            f"the Redis key for limit {limit.name!r} ({limit.algorithm}) holds a {kind} that is "
            f"not its state: {raw!r:.200}; reset the key or use a different prefix"
        )

    # -- plans: what to call, in order (driven by the sync and async classes) ----------------

    def _decide_plan(self, checks: Sequence[Check], now: float,
                     consume: bool) -> _Plan[tuple[list[Decision], float]]:
        groups = self._slot_groups(checks)
        now_arg = self._now_arg(now)
        if len(groups) == 1:
            reply = yield self._check_call(checks, now_arg, consume)
            decisions, at, _ = self._parse_check(reply, checks)
            return decisions, at
        out: list[Decision | None] = [None] * len(checks)
        reserved: list[list[Check]] = []
        at0: float | None = None
        charging = consume
        try:
            for group in groups:
                sub = [checks[i] for i in group]
                reply = yield self._check_call(sub, now_arg, charging)
                decisions, at, admitted = self._parse_check(reply, sub)
                if at0 is None:
                    at0 = at
                    now_arg = _fmt(at)  # later slots decide at the same instant
                for i, d in zip(group, decisions, strict=True):
                    out[i] = d
                if charging:
                    if admitted:
                        reserved.append(sub)
                    else:
                        charging = False  # roll back now; only look at the rest
                        undo, reserved = reserved, []
                        for r in reversed(undo):
                            try:
                                yield self._refund_call(r, now_arg, at0)
                            except StoreError as e:
                                # The request is rejected either way; what stays charged
                                # only makes the limit stricter until it expires.
                                log.warning("could not roll back a cross-slot reservation "
                                            "of %s: %s", self._keys(r), e)
        except StoreError:
            # A group failed after others were reserved: give those back (best effort)
            # so the failed request charges nothing; the failure policy decides it.
            for r in reversed(reserved):
                try:
                    yield self._refund_call(r, now_arg, at0 if at0 is not None else now)
                except StoreError as e:
                    log.warning("could not roll back a cross-slot reservation of %s: %s",
                                self._keys(r), e)
            raise
        assert at0 is not None
        return [d for d in out if d is not None], at0

    def _refund_plan(self, checks: Sequence[Check], now: float, at: float) -> _Plan[None]:
        now_arg = self._now_arg(now)
        for group in self._slot_groups(checks):
            reply = yield self._refund_call([checks[i] for i in group], now_arg, at)
            self._parse_now(reply)
        return None

    def _reset_plan(self, limits: Sequence[Limit], key: str) -> _Plan[None]:
        checks = [(limit, key, 1.0) for limit in limits]
        for group in self._slot_groups(checks):
            yield _Call(None, [self.state_key(checks[i][0], key) for i in group], [])
        return None

    def _inspect_plan(self, limits: Sequence[Limit], key: str,
                      now: float | None) -> _Plan[list[KeyState]]:
        out: list[KeyState] = []
        for limit in limits:
            rkey = self.state_key(limit, key)
            reply = yield _Call(STATE, [rkey], [])
            if not isinstance(reply, list) or len(reply) < 3:
                raise _bad_reply("the state script", reply)
            kind, pttl, server_now, raw = _str(reply[0]), reply[1], reply[2], list(reply[3:])
            if not isinstance(pttl, int):
                raise _bad_reply("the state script", reply)
            t = _float(server_now, "the state script", reply) if now is None else now
            state = self._parse_state(limit, kind, raw)
            check = [(limit, key, 1.0)]
            now_arg = _fmt(t) if (now is not None or self.uses_client_clock) else ""
            decisions, at, _ = self._parse_check((yield self._check_call(check, now_arg, False)),
                                                 check)
            out.append(KeyState(limit, key, rkey, kind, pttl / 1000 if pttl >= 0 else None,
                                pttl == -1, _shaped(kind, raw), state, decisions[0], at))
        return out

    def _decide_one_plan(self, limit: Limit, key: str, cost: float,
                         now: float) -> _Plan[Decision]:
        deny = self._deny
        t, check = 0.0, [(limit, key, cost)]
        if deny is not None:
            t = self._local_now(now)
            hit = self._cached(check, t)
            if hit is not None:
                return hit[0]
        d = self._parse_one((yield self._one_call(limit, key, cost, now)), limit, cost)
        if deny is not None and not d.allowed:
            self._remember(check, t, [d])
        return d

    def _decide_cached_plan(self, checks: Sequence[Check], now: float,
                            consume: bool) -> _Plan[tuple[list[Decision], float]]:
        """`_decide_plan` behind the deny cache (when it is on; without it, the plan itself:
        no wrapping generator on the composite path)."""
        if self._deny is None and checks:
            return self._decide_plan(checks, now, consume)
        return self._deny_cache_plan(checks, now, consume)

    def _deny_cache_plan(self, checks: Sequence[Check], now: float,
                         consume: bool) -> _Plan[tuple[list[Decision], float]]:
        if not checks:
            return [], now
        t = 0.0
        if self._deny is not None:
            t = self._local_now(now)
            hit = self._cached(checks, t)
            if hit is not None:
                return hit, now
        decisions, at = yield from self._decide_plan(checks, now, consume)
        if self._deny is not None:
            self._remember(checks, t, decisions)
        return decisions, at

    def _refund_all_plan(self, checks: Sequence[Check], now: float, at: float) -> _Plan[None]:
        if checks:
            self._forget((), None, checks)
            yield from self._refund_plan(checks, now, at)

    def _reset_all_plan(self, limits: Sequence[Limit], key: str) -> _Plan[None]:
        if limits:
            self._forget(limits, key)
            yield from self._reset_plan(limits, key)

    def _state_plan(self, limit: Limit, key: str) -> _Plan[Any]:
        reply = yield _Call(STATE, [self.state_key(limit, key)], [])
        if not isinstance(reply, list) or len(reply) < 3:
            raise _bad_reply("the state script", reply)
        return self._parse_state(limit, _str(reply[0]), list(reply[3:]))

    def _scan_plan(self, key: str) -> _Plan[list[tuple[str, str, float | None, Any]]]:
        pattern = _glob_escape(f"{self.prefix}{{{_encode_key(key)}}}:") + "*"
        found = sorted({_str(k) for k in (yield _Call(None, [], [pattern], "scan"))})
        out = []
        for rkey in found:
            reply = yield _Call(STATE, [rkey], [])
            if not isinstance(reply, list) or len(reply) < 3 or not isinstance(reply[1], int):
                raise _bad_reply("the state script", reply)
            kind, pttl = _str(reply[0]), reply[1]
            if kind != "none":
                out.append((rkey, kind, pttl / 1000 if pttl >= 0 else None,
                            _shaped(kind, list(reply[3:]))))
        return out

    def _ping_plan(self) -> _Plan[bool]:
        try:
            return bool((yield _Call(None, [], [])))
        except StoreError:
            return False

    # -- driving a plan: everything around a driver's I/O call ---------------------------------

    def _gate(self, call: _Call) -> tuple[CircuitBreaker, _Outcome | None]:
        """The breaker `call` goes through, and the outcome if it refuses the call."""
        breaker = self._breaker_for(call, self._client)
        try:
            self._short_circuit(breaker)
        except StoreError as e:
            return breaker, (False, e)
        return breaker, None

    def _answered(self, breaker: CircuitBreaker, reply: Any) -> _Outcome:
        breaker.success()
        return True, reply

    def _raised(self, breaker: CircuitBreaker, exc: BaseException) -> _Outcome:
        return False, self._failed(breaker, exc)

    # -- Redis Functions ----------------------------------------------------------------------

    def _fcall_failed(self, exc: Exception) -> bool:
        """Whether an FCALL's error means our library is not there to call (False: it is the
        call's own error, to raise). The library is missing ("Function not found": a new
        server, FUNCTION FLUSH, a restart) -> load it and FCALL again; or the server has no
        functions for us (unknown command, NOPERM) -> EVALSHA from now on."""
        msg = str(exc)
        if isinstance(exc, rex.NoPermissionError) or msg.startswith("unknown command"):
            self._no_functions(msg)
            return True
        return msg.startswith("Function not found")

    def _no_functions(self, why: str) -> None:
        if self._fcall:
            log.info("Redis store %s: no Redis Functions (%s); using EVALSHA", self._describe,
                     why)
        self._fcall = False

    def _loaded(self, exc: Exception | None) -> None:
        """What FUNCTION LOAD of `LIBRARY` answered (None: done)."""
        self.stats.function_loads += 1
        self.stats.calls += 1
        if exc is not None and "already exists" not in str(exc):  # (another client won)
            self._no_functions(str(exc))

    # -- building from a URL -------------------------------------------------------------------

    @classmethod
    def from_url(
        cls: type[_S],
        url: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        connect_timeout: float | None = None,
        cluster: bool | None = None,
        client_options: Mapping[str, Any] | None = None,
        **store_options: Any,
    ) -> _S:
        """A store with its own client, from a URL:

        - ``redis://[[user]:password@]host[:port][/db]``, ``rediss://...`` (TLS),
          ``unix:///path/redis.sock[?db=N]``: one server (Redis or Valkey).
        - ``redis+cluster://host:port`` (``rediss+cluster://`` for TLS), or any
          ``redis://`` URL with ``cluster=True``: a Redis Cluster, discovered from that node.
        - ``redis+sentinel://[user:password@]host:port[,host:port...]/mastername[/db]``: the
          primary a Sentinel deployment names (followed across failovers).

        `timeout` (seconds, default 0.25) bounds each decision: it is the socket read and
        (unless `connect_timeout` is given) connect timeout; the client does not retry,
        except a cluster client, which retries once after refreshing its topology when a
        connection was refused or reset (so a finished failover is followed
        transparently), never after a timeout; MOVED/ASK redirects are followed as usual.
        A CLUSTERDOWN answer (every node gives it while a primary fails over) fails the
        call at once, as unavailable, instead of redis-py's sleep and retry. `client_options` go
        to the redis-py client; other keyword arguments are the store's (see the class:
        `prefix`, `client_clock`, ...). The client is created lazily where redis-py allows
        it (a down server does not stop start-up) and closed by ``close``/``aclose``.
        """
        target = _parse_target(url, cluster)
        timeout = _check_timeout(timeout)
        kw = _client_kwargs(timeout, connect_timeout, client_options)
        return cls._from_target(target, kw, timeout, describe=redact(url), **store_options)

    @classmethod
    def _from_target(cls: type[_S], target: _Target, kw: dict[str, Any], timeout: float,
                     **options: Any) -> _S:
        raise NotImplementedError

    # -- failures ---------------------------------------------------------------------------

    def _new_breaker(self, name: str) -> CircuitBreaker:
        return CircuitBreaker(self.breaker_failures, self.breaker_cooldown, name=name,
                              clock=self._local_clock)

    def _breaker_for(self, call: _Call, client: Any) -> CircuitBreaker:
        """The breaker of the server `call` goes to: one per cluster node, else the store's."""
        if not self.cluster or not call.keys or client is None:
            return self._breaker
        try:
            node = client.get_node_from_key(call.keys[0])
        except Exception:  # topology unknown yet (lazy client): the store-wide breaker
            node = None
        if node is None:
            return self._breaker
        name = str(node.name)
        br = self._breakers.get(name)
        if br is None:
            with self._breakers_lock:
                br = self._breakers.get(name)
                if br is None:
                    br = self._breakers[name] = self._new_breaker(f"cluster node {name}")
        return br

    @property
    def breaker(self) -> CircuitBreaker:
        """The store's circuit breaker (on a cluster: used until the topology is known)."""
        return self._breaker

    @property
    def breakers(self) -> dict[str, CircuitBreaker]:
        """Every breaker: the store's, and on a cluster one per node seen."""
        return {self._breaker.name: self._breaker, **self._breakers}

    def _translate(self, exc: BaseException) -> StoreError:
        """A client exception as `StoreUnavailable` (can't be reached) or `StoreError`."""
        if isinstance(exc, StoreError):
            return exc
        if isinstance(exc, rex.MaxConnectionsError):  # (a ConnectionError: before them)
            return StoreUnavailable(
                f"Redis store {self._describe}: its client's connection pool is full "
                f"({exc}): more calls at once than its max_connections; give the client a "
                "larger pool, or let the store coalesce calls (coalesce=True)")
        if isinstance(exc, _UNAVAILABLE_TYPES) or _transport_closed(exc):
            return StoreUnavailable(f"Redis store {self._describe} unavailable: "
                                    f"{type(exc).__name__}: {exc}")
        msg = str(exc)
        if isinstance(exc, rex.ResponseError):
            code = msg.split(" ", 1)[0]  # the whole code: BUSYKEY is not BUSY
            if code in _UNAVAILABLE_CODES:
                return StoreUnavailable(f"Redis store {self._describe} cannot serve now: {msg}")
            if code in ("RKSTATE", "WRONGTYPE"):
                return StoreError(
                    f"Redis store {self._describe}: {msg.split(' script:', 1)[0]}; reset the key "
                    "(limiter.reset) or use a key prefix no other program writes under"
                )
            return StoreError(f"Redis store {self._describe} answered with an error: {msg}")
        return StoreError(f"Redis client failed: {type(exc).__name__}: {msg}")

    def _failed(self, breaker: CircuitBreaker, exc: BaseException) -> StoreError:
        if isinstance(exc, _MISUSE):  # the program's mistake: the caller's, not the policy's
            raise exc
        err = self._translate(exc)
        self.stats.errors += 1
        if isinstance(err, StoreUnavailable):
            self.stats.unavailable += 1
            if not isinstance(exc, rex.MaxConnectionsError):  # (the server is not at fault)
                breaker.failure()
        else:
            breaker.success()  # it answered: reachable
        log.debug("Redis store call failed: %s", err)
        self._reported.add(err)
        self._tell(err)
        return err

    def _misread(self, err: StoreError) -> None:
        """Count `err`, raised reading a reply the server gave (the call itself went well),
        in `stats.errors` and hand it to `on_error`, as `_failed` does a call's errors;
        unless it is one of those (thrown back into a plan, which raised it on)."""
        if err not in self._reported:
            self.stats.errors += 1
            self._reported.add(err)
            self._tell(err)

    def _tell(self, err: StoreError) -> None:
        if self.on_error is not None:
            try:
                self.on_error(err)
            except Exception:  # a broken hook must not break rate limiting
                log.exception("on_error hook raised")

    def _short_circuit(self, breaker: CircuitBreaker) -> None:
        try:
            breaker.before()
        except StoreUnavailable as e:
            self.stats.short_circuited += 1
            self._reported.add(e)
            self._tell(e)
            raise

    # -- deny cache -------------------------------------------------------------------------

    def _local_now(self, now: float) -> float:
        """The deny cache's time: the caller's clock, or (server clock) the local one."""
        assert self._deny is not None
        return now if self.uses_client_clock else self._deny.clock()

    def _cached(self, checks: Sequence[Check], t: float) -> list[Decision] | None:
        assert self._deny is not None
        ck = tuple((limit.name, limit.algorithm, key) for limit, key, _ in checks)
        hit = self._deny.get(ck, tuple(c for _, _, c in checks), t)
        if hit is not None:
            self.stats.deny_cache_hits += 1
        return hit

    def _remember(self, checks: Sequence[Check], t: float, decisions: list[Decision]) -> None:
        assert self._deny is not None
        if not all(d.allowed for d in decisions):
            ck = tuple((limit.name, limit.algorithm, key) for limit, key, _ in checks)
            self._deny.put(ck, tuple(float(c) for _, _, c in checks), t, decisions)

    def _forget(self, limits: Sequence[Limit], key: str | None,
                checks: Sequence[Check] = ()) -> None:
        if self._deny is not None:
            pairs = {(lim.name, lim.algorithm, key) for lim in limits if key is not None}
            pairs |= {(lim.name, lim.algorithm, k) for lim, k, _ in checks}
            self._deny.forget(pairs)


# -----------------------------------------------------------------------------------------
# one-limit replies
# -----------------------------------------------------------------------------------------


def one_parser(codec: RedisCodec) -> Callable[[Any, Limit, float], Decision]:
    """The parser of one algorithm's one-limit replies, ``(reply, limit, cost) ->
    Decision``: the hot path, validated field by field like `_RedisCore._parse_check`.

    one.lua answers ``{allowed, remaining, retry_after, reset_after, delay}``. A
    straight-line script answers an admission (retry_after and delay 0) with
    ``{remaining, ...}``: what reset_after is computed from (the codec's `fast_reset`, the
    same float operations as the script's and the Python algorithm's), which saves the
    server formatting one float; with a `fast_reject`, a rejection with ``{<state>, now}``,
    the state it was decided on (text), from which the rest is computed the same way
    (two floats formatted less); other rejections are one.lua's shape.
    """
    fast_reset, fast_reject = codec.fast_reset, codec.fast_reject

    def parse(reply: Any, limit: Limit, cost: float) -> Decision:
        if reply.__class__ is not list:
            raise _bad_reply("the check script", reply)
        n = len(reply)
        if 1 < n < 5:
            first, x = reply[0], reply[1]
            if first.__class__ is int:
                if fast_reset is not None and first >= 0 and x.__class__ in _TEXT:
                    try:
                        reset_after = fast_reset(reply, limit)
                    except (TypeError, ValueError):
                        pass
                    else:
                        if math.isfinite(reset_after):
                            return new_decision(Decision, (True, first, 0.0, reset_after, 0.0,
                                                           limit, False))
            elif fast_reject is not None and first.__class__ in _TEXT:
                try:
                    remaining, retry_after, reset_after = fast_reject(reply, limit, cost)
                except (TypeError, ValueError, ArithmeticError):
                    pass
                else:
                    if math.isfinite(reset_after + (retry_after or 0.0)):
                        return new_decision(Decision, (False, remaining, retry_after,
                                                       reset_after, 0.0, limit, False))
        elif n == 5:
            allowed, remaining, retry, reset, delay = reply
            if allowed in (0, 1) and remaining.__class__ is int and remaining >= 0:
                try:
                    retry_after = None if retry is None else float(retry)
                    reset_after, wait = float(reset), float(delay)
                except (TypeError, ValueError):
                    pass
                else:
                    if math.isfinite(reset_after + wait + (retry_after or 0.0)):
                        return new_decision(Decision, (allowed == 1, remaining, retry_after,
                                                       reset_after, wait, limit, False))
        raise _bad_reply("the check script", reply)

    return parse


#: Each algorithm's one-limit reply parser, by `Limit.algorithm`.
_PARSE_ONE = {name: one_parser(a.redis) for name, a in ALGORITHMS.items()}
