"""Redis, Valkey, Redis Cluster and Sentinel stores: every decision is one atomic Lua script.

    from ratekeeper import Limit, Limiter
    from ratekeeper.stores.redis import RedisStore

    store = RedisStore.from_url("redis://127.0.0.1:6379/0")
    limiter = Limiter(Limit("gcra", "10/s", burst=20), store)

Theory of operation
-------------------
* **One script, one round trip.** A check runs ``check.lua`` (see ``stores/lua/``): it reads
  each limit's state, runs the algorithm (a line-by-line Lua mirror of the pure Python
  function), and, only if every limit admits, writes every state with a PEXPIRE taken from
  the algorithm's ``ttl``. It is sent with EVALSHA; a NOSCRIPT answer (server restarted,
  ``SCRIPT FLUSH``, failover) is followed by one EVAL, which also caches the script again.
* **Keys.** ``{prefix}{<key>}:<limit name>:<algorithm tag>``, e.g.
  ``rk:{user42}:gcra-10/s-b20:gcra``: a state means something only to its algorithm, so a
  limit whose algorithm changes under the same name starts fresh, as in memory. The
  braces are a hash tag: every per-key limit of one key lives in one cluster slot, so a
  composite check of them is one script. ``scope="global"`` limits are checked under the
  limiter's global key (``{*global*}``), a slot of their own. ``%`` and ``}`` in keys are
  written ``%25`` and ``%7D`` so a key can never end the tag early.
* **Cross-slot composites** (cluster only; a single server takes any keys in one script):
  the checks are grouped by slot and each group is *reserved* (checked and charged, all or
  nothing, by one script) in a fixed order: per-key groups first, ordered by slot, then the
  global group. If a group rejects, the groups already reserved are refunded (the
  algorithm's ``refund``, ``refund.lua``) and the rest are only looked at, so nothing stays
  charged. Concurrent requests may briefly see a reservation that is later refunded: this
  can reject a request that would have fitted (never admit one that does not). Later groups
  decide at the first group's time, so one ``at`` refunds them all.
* **Time.** By default the scripts read the server's clock (``TIME``), so application
  servers with skewed clocks agree and windows align to the Unix epoch. With
  ``client_clock=True`` the caller's ``now`` is used instead (simulation and tests): then
  a key is kept at least ``min_ttl`` seconds of real time (default 60 s), because the
  client's clock need not run at real speed.
* **Failures.** Connection errors, timeouts and "server not ready" answers (LOADING,
  READONLY, CLUSTERDOWN, MASTERDOWN, TRYAGAIN, OOM, BUSY, NOREPLICAS, an unfollowed
  MOVED/ASK; told apart by redis-py's exception class) raise `StoreUnavailable`; a
  reply the store cannot interpret (corrupt state, a foreign key under the prefix) raises
  `StoreError`. No raw client exception escapes. A `CircuitBreaker` (one per server; one
  per node on a cluster) fails fast after repeated unavailability, so that during an
  outage requests stop paying the timeout, and lets one probe through per cool-down so the
  store recovers without a restart. The limiter's failure policy decides what a failure
  means for the request.
* **Deny cache** (off by default): after a rejection with a known ``retry_after`` the store
  answers the same check locally until the earliest time it could pass, for any cost at
  least as large, without a round trip. See `RedisStore` for the trade.

`RedisStore` (sync) and `AsyncRedisStore` (asyncio) share everything but the I/O: the plans
below are generators that *yield* the calls to make and receive the replies, and each class
only drives them with its own client.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any, Literal, NamedTuple, TypeVar
from urllib.parse import unquote

try:
    import redis
    import redis.asyncio
    import redis.asyncio.cluster
    import redis.asyncio.sentinel
    import redis.cluster
    import redis.exceptions as rex
    import redis.sentinel
    from redis.backoff import NoBackoff
    from redis.crc import key_slot
    from redis.retry import Retry
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"the Redis store needs redis-py ({e}); install it with: pip install 'ratekeeper[redis]' "
        "(or 'ratekeeper[hiredis]' for the faster parser)"
    ) from e

from .._errors import ConfigError, StoreError, StoreUnavailable
from .._types import Decision, Limit
from ..algorithms._common import new_decision
from ..algorithms.leaky_bucket import params as leaky_params
from ._base import Check
from ._lua import ALGORITHM_IDS, ALGORITHM_TAGS, CHECK, ONE, ONE_FAST, REFUND, STATE, Script
from ._url import VALID_FORMS, redact

__all__ = [
    "DEFAULT_PREFIX",
    "DEFAULT_TIMEOUT",
    "AsyncRedisStore",
    "CircuitBreaker",
    "KeyState",
    "RedisStore",
    "RedisStoreStats",
    "split_state_key",
]

log = logging.getLogger("ratekeeper.redis")

#: Key prefix used when none is given.
DEFAULT_PREFIX = "rk:"
#: Seconds a decision may take (socket read and connect timeout of clients built from a URL).
DEFAULT_TIMEOUT = 0.25
#: Minimum key lifetime (real seconds) in client-clock mode; see the module docstring.
CLIENT_CLOCK_MIN_TTL = 60.0

T = TypeVar("T")

_asyncio_timeout: Any = getattr(asyncio, "timeout", None)

# redis-py leaves these untyped; called through Any so mypy --strict accepts them.
_SyncSentinel: Any = redis.sentinel.Sentinel
_AsyncSentinel: Any = redis.asyncio.sentinel.Sentinel

class ClusterDownReply(rex.ResponseError):
    """``-CLUSTERDOWN`` / ``-MASTERDOWN`` from a node of the store's own cluster client.

    redis-py's cluster client sleeps 0.25 s on a `ClusterDownError` and then retries, so
    during a failover a call on a *healthy* primary's slot took 0.51 s although the node
    had answered in a millisecond. Re-raised under this class it is neither slept on nor
    retried: the call fails at once as unavailable, and the breaker and the failure
    policy decide.
    """


def _fail_fast_read(cls: type[Any]) -> type[Any]:
    """`cls` (a redis-py connection class) whose CLUSTERDOWN/MASTERDOWN replies raise
    `ClusterDownReply` instead."""

    def read_response(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return super(sub, self).read_response(*args, **kwargs)
        except rex.ClusterDownError as e:  # MasterDownError too
            code = "MASTERDOWN" if isinstance(e, rex.MasterDownError) else "CLUSTERDOWN"
            raise ClusterDownReply(f"{code} {e}") from None

    sub: type[Any] = type(cls.__name__, (cls,), {"read_response": read_response})
    return sub


_FAIL_FAST: dict[type[Any], type[Any]] = {}


class _FailFastPool(redis.ConnectionPool):
    """The node pools of the store's cluster client (plain or TLS connections alike)."""

    def __init__(self, connection_class: type[Any] = redis.connection.Connection,
                 **kwargs: Any) -> None:
        sub = _FAIL_FAST.get(connection_class)
        if sub is None:
            sub = _FAIL_FAST[connection_class] = _fail_fast_read(connection_class)
        super().__init__(connection_class=sub, **kwargs)


class _StoreCluster(redis.cluster.RedisCluster):
    """The cluster client `from_url` builds: it retries (once, after refreshing the
    topology) only what fails at once, a refused or reset connection or a slot not in
    its table yet, never a timeout: so a call takes at most one timeout, not two."""

    # redis-py types it as its own default's tuple; any tuple of classes works
    ERRORS_ALLOW_RETRY = (rex.ConnectionError, rex.SlotNotCoveredError)  # type: ignore[assignment]


#: Client exceptions that mean "the server cannot serve this now", not "bad request".
#: Classified by type: redis-py strips the code of the replies it maps to a class
#: (``-OOM ...`` arrives as `OutOfMemoryError` with the text after "OOM").
_UNAVAILABLE_TYPES: tuple[type[BaseException], ...] = (
    rex.ConnectionError,  # includes BusyLoadingError (LOADING), AuthenticationError,
    rex.TimeoutError,     # MasterNotFoundError
    rex.ClusterDownError,  # CLUSTERDOWN, and MasterDownError (MASTERDOWN)
    rex.TryAgainError,  # TRYAGAIN
    rex.ReadOnlyError,  # READONLY (a replica, or a primary demoted by a failover)
    rex.OutOfMemoryError,  # OOM (maxmemory reached under noeviction)
    rex.AskError,  # ASK and MovedError (MOVED): redirects the client did not follow
    rex.SlotNotCoveredError,
    ClusterDownReply,
    rex.RedisClusterException,  # "cannot connect to any node", topology failures
    OSError,
    asyncio.TimeoutError,
    TimeoutError,
)
#: Reply codes of refusals that redis-py has no class for (the reply keeps its code):
#: a script of another client running too long, and too few replicas for a write.
_UNAVAILABLE_CODES = frozenset({"BUSY", "NOREPLICAS"})


class _Call(NamedTuple):
    """One command a plan wants run: a script (EVALSHA/EVAL) or, with no script, DEL."""

    script: Script | None
    keys: list[str]
    args: list[str]


_Plan = Generator[_Call, Any, T]


# -----------------------------------------------------------------------------------------
# circuit breaker, stats, deny cache
# -----------------------------------------------------------------------------------------


class CircuitBreaker:
    """Stops calling an unavailable server for a while, so requests stop paying its timeout.

    * **closed**: calls go through; `failures` consecutive failures open the breaker.
    * **open**: calls raise `StoreUnavailable` at once, without I/O, for `cooldown` seconds.
    * **half-open**: after the cool-down, one call (the probe) goes through while the others
      still fail fast. If the probe succeeds the breaker closes; if it fails it opens for
      another cool-down. A probe that never reports back is replaced after a cool-down.

    Only unavailability counts as a failure; a server that answers (even with an error)
    is available. ``failures=0`` disables the breaker. Thread-safe; the closed fast path
    takes no lock.
    """

    def __init__(
        self,
        failures: int = 5,
        cooldown: float = 0.25,
        *,
        name: str = "redis",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(failures, bool) or not isinstance(failures, int) or failures < 0:
            raise ConfigError(f"breaker failures must be a whole number >= 0, got {failures!r}")
        if not (isinstance(cooldown, (int, float)) and 0 < cooldown < math.inf):
            raise ConfigError(f"breaker cooldown must be a number of seconds > 0, got {cooldown!r}")
        self.failures = failures
        self.cooldown = float(cooldown)
        self.name = name
        self._clock = clock
        self._lock = threading.Lock()
        self._consecutive = 0
        self._open_until: float | None = None  # None: closed
        self._probe_until: float | None = None  # a probe is out until then
        self.opened = 0  # how many times it opened

    @property
    def state(self) -> Literal["closed", "open", "half-open"]:
        until = self._open_until
        if until is None:
            return "closed"
        return "open" if self._clock() < until else "half-open"

    def __repr__(self) -> str:
        return f"CircuitBreaker({self.name!r}, {self.state}, failures={self._consecutive})"

    def before(self) -> None:
        """Raise `StoreUnavailable` if no call should be made now."""
        if self._open_until is None:
            return
        with self._lock:
            until = self._open_until
            if until is None:
                return
            now = self._clock()
            if now < until:
                raise StoreUnavailable(
                    f"circuit breaker for {self.name} is open after {self._consecutive} "
                    f"consecutive failures; next probe in {until - now:.3f}s"
                )
            if self._probe_until is not None and now < self._probe_until:
                raise StoreUnavailable(
                    f"circuit breaker for {self.name} is half-open and a probe is in flight"
                )
            self._probe_until = now + self.cooldown  # this call is the probe

    def success(self) -> None:
        if self._consecutive == 0 and self._open_until is None:
            return
        with self._lock:
            was_open = self._open_until is not None
            self._consecutive = 0
            self._open_until = None
            self._probe_until = None
        if was_open:
            log.info("circuit breaker for %s closed: the store answers again", self.name)

    def failure(self) -> None:
        if self.failures == 0:
            return
        with self._lock:
            self._consecutive += 1
            now = self._clock()
            if self._open_until is not None:  # a probe (or a call from before) failed
                self._open_until = now + self.cooldown
                self._probe_until = None
                return
            if self._consecutive >= self.failures:
                self._open_until = now + self.cooldown
                self._probe_until = None
                self.opened += 1
                opened = True
            else:
                opened = False
        if opened:
            log.warning(
                "circuit breaker for %s opened after %d consecutive failures; failing fast "
                "for %.3gs", self.name, self._consecutive, self.cooldown,
            )


class RedisStoreStats:
    """Counters of one store (plain ints; under heavy concurrency they are approximate)."""

    __slots__ = (
        "calls", "deny_cache_hits", "errors", "noscript_reloads", "pipelined_calls",
        "pipelines", "short_circuited", "unavailable",
    )  # fmt: skip

    def __init__(self) -> None:
        self.calls = 0  # commands sent (a pipeline counts each command)
        self.pipelines = 0  # pipelines sent by the async store (one round trip each per node)
        self.pipelined_calls = 0  # commands that went in those pipelines
        self.noscript_reloads = 0  # NOSCRIPT answers followed by EVAL
        self.errors = 0  # failed calls, of any kind
        self.unavailable = 0  # ... of which the store was unavailable
        self.short_circuited = 0  # calls refused by an open circuit breaker (no I/O)
        self.deny_cache_hits = 0  # decisions answered by the deny cache (no I/O)

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__}

    def __repr__(self) -> str:
        return "RedisStoreStats(" + ", ".join(f"{k}={v}" for k, v in self.as_dict().items()) + ")"


#: A state's identity in the deny cache: (limit name, algorithm, key).
_Ident = tuple[str, str, str]


class _DenyCache:
    """Rejections remembered until the earliest time the same check could pass.

    Keyed by the checks' ``(limit name, algorithm, key)``: the state's identity, as in its
    Redis key. An entry made at local time ``t0``
    answers a later check at ``t`` with costs each >= the cached ones while
    ``t < t0 + min(retry_after of the rejecting limits)``: until then every limit that
    rejected still rejects (a larger cost can only wait longer), so the whole check is
    rejected. Entries with a ``None`` retry (cost above capacity) are not cached.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._data: dict[tuple[_Ident, ...], tuple[float, float, tuple[float, ...],
                                                                list[Decision]]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._data)

    def get(self, ck: tuple[_Ident, ...], costs: tuple[float, ...],
            t: float) -> list[Decision] | None:
        entry = self._data.get(ck)
        if entry is None:
            return None
        until, t0, cached, decisions = entry
        if not t < until:
            with self._lock:
                if self._data.get(ck) is entry:
                    del self._data[ck]
            return None
        if t < t0 or any(c < cc for c, cc in zip(costs, cached, strict=True)):
            return None
        elapsed = t - t0
        return [
            d if d.allowed else d._replace(
                retry_after=None if d.retry_after is None else d.retry_after - elapsed,
                reset_after=max(0.0, d.reset_after - elapsed),
            )
            for d in decisions
        ]

    def put(self, ck: tuple[_Ident, ...], costs: tuple[float, ...], t0: float,
            decisions: list[Decision]) -> None:
        waits = [d.retry_after for d in decisions if not d.allowed]
        if not waits or any(w is None for w in waits):
            return
        wait = min(w for w in waits if w is not None)
        if not wait > 0:
            return
        with self._lock:
            data = self._data
            data.pop(ck, None)
            while len(data) >= self.size:
                del data[next(iter(data))]  # oldest first
            data[ck] = (t0 + wait, t0, costs, decisions)

    def forget(self, pairs: set[_Ident]) -> None:
        """Drop every entry that involves one of `pairs` (after a refund or reset)."""
        with self._lock:
            for ck in [ck for ck in self._data if any(p in pairs for p in ck)]:
                del self._data[ck]

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


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
    return f":{limit.name}:{ALGORITHM_TAGS[limit.algorithm]}"


def split_state_key(rkey: str) -> tuple[str, str] | None:
    """``(limit name, algorithm)`` of a state key found under a prefix, or None for a key
    this store did not write (e.g. one from before algorithm tags)."""
    name, sep, tag = rkey.rpartition("}:")[2].rpartition(":")
    algorithm = _ALGORITHM_OF_TAG.get(tag)
    return (name, algorithm) if sep and algorithm is not None else None


_ALGORITHM_OF_TAG = {tag: algo for algo, tag in ALGORITHM_TAGS.items()}


def _glob_escape(text: str) -> str:
    """`text` as a literal in a SCAN MATCH pattern."""
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)


def _str(v: Any) -> str:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return str(v)


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


def _fmt(x: float) -> str:
    """A float as ARGV text that Lua's tonumber reads back exactly (Python's repr)."""
    return repr(float(x))


class _RedisCore:
    """Everything about the Redis stores that is not I/O."""

    #: A limiter on this store reads the wall clock (client-clock mode must agree across
    #: processes; in server-clock mode the value is ignored).
    default_clock: Callable[[], float] = staticmethod(time.time)

    def __init__(
        self,
        *,
        prefix: str,
        client_clock: bool,
        cluster: bool,
        min_ttl: float | None,
        clock_grace: float,
        breaker_failures: int,
        breaker_cooldown: float,
        deny_cache: bool,
        deny_cache_size: int,
        on_error: Callable[[StoreError], None] | None,
        describe: str,
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
        self._breakers: dict[str, CircuitBreaker] = {}
        self._breakers_lock = threading.Lock()
        self._breaker = self._new_breaker("cluster" if cluster else describe)
        self._deny = _DenyCache(deny_cache_size) if deny_cache else None
        self.on_error = on_error
        self.stats = RedisStoreStats()
        self._describe = describe
        self._params: dict[int, tuple[Limit, list[str]]] = {}

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
        return f"{self.prefix}{{{_encode_key(key)}}}{_suffix(limit)}"

    def _limit_args(self, limit: Limit) -> list[str]:
        """Algorithm id, p1, p2, p3 of `limit` (see the Lua files), cached per Limit object."""
        cached = self._params.get(id(limit))
        if cached is not None and cached[0] is limit:
            return cached[1]
        algo = limit.algorithm
        if algo in ("token-bucket", "gcra"):
            p = [_fmt(limit.per_second), _fmt(limit.capacity), "0"]
        elif algo == "leaky-bucket":
            rate, burst, threshold = leaky_params(limit)
            p = [str(rate), str(burst), str(threshold)]
        else:
            p = [_fmt(limit.capacity), _fmt(limit.period), "0"]
        args = [str(ALGORITHM_IDS[algo]), *p]
        if len(self._params) > 10_000:
            self._params.clear()
        self._params[id(limit)] = (limit, args)
        return args

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
        keys = [self.state_key(limit, key) for limit, key, _ in checks]
        n, m, g = self._time_args(now_arg)
        return _Call(CHECK, keys, [n, "1" if consume else "0", m, g,
                                   *self._limits_args(checks)])

    def _refund_call(self, checks: Sequence[Check], now_arg: str, at: float) -> _Call:
        keys = [self.state_key(limit, key) for limit, key, _ in checks]
        n, m, g = self._time_args(now_arg)
        return _Call(REFUND, keys, [n, _fmt(at), m, g, *self._limits_args(checks)])

    def _one_params(self, limit: Limit) -> list[str]:
        """`limit`'s parameters as one.lua takes them: p1, p2, and p3 for a leaky bucket
        (the only algorithm that uses it)."""
        _, p1, p2, p3 = self._limit_args(limit)
        return [p1, p2, p3] if limit.algorithm == "leaky-bucket" else [p1, p2]

    def _fast_tail(self, now_arg: str) -> list[str]:
        """ARGV[4..6] of the straight-line one-limit scripts (one_gcra.lua,
        one_token_bucket.lua): min expiry, now, grace, with the trailing ones left off that
        equal the script's defaults (1 ms, the server clock, 0 ms)."""
        if now_arg:
            return [self._min_ms, now_arg, self._grace_ms]
        return [] if self._min_ms == "1" else [self._min_ms]

    def _one_call(self, limit: Limit, key: str, cost: float, now: float) -> _Call:
        now_arg = self._now_arg(now)
        if limit.algorithm in ONE_FAST:
            return _Call(ONE[limit.algorithm], [self.state_key(limit, key)],
                         [repr(cost), *self._one_params(limit), *self._fast_tail(now_arg)])
        n, m, g = self._time_args(now_arg)
        return _Call(ONE[limit.algorithm], [self.state_key(limit, key)],
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
        n = len(checks)
        if not isinstance(reply, list) or len(reply) != 2 + 5 * n:
            raise _bad_reply("the check script", reply)
        now = _float(reply[0], "the check script", reply)
        admitted = reply[1]
        if admitted not in (0, 1):
            raise _bad_reply("the check script", reply)
        out: list[Decision] = []
        for i in range(n):
            allowed, remaining, retry, reset, delay = reply[2 + 5 * i: 7 + 5 * i]
            if allowed not in (0, 1) or not isinstance(remaining, int) or remaining < 0:
                raise _bad_reply("the check script", reply)
            out.append(Decision(
                allowed == 1,
                remaining,
                None if retry is None else _float(retry, "the check script", reply),
                _float(reset, "the check script", reply),
                _float(delay, "the check script", reply),
                checks[i][0],
            ))
        return out, now, admitted == 1

    @staticmethod
    def _parse_one(reply: Any, limit: Limit) -> Decision:
        # The hot path: a one-limit reply, validated field by field like _parse_check.
        # one.lua's reply: {allowed, remaining, retry_after, reset_after, delay}. The
        # straight-line scripts answer an admission (retry_after and delay 0) with what
        # reset_after is computed from, the same float operations as the script's (and the
        # Python algorithm's), which saves the server formatting one float:
        # one_gcra.lua {remaining, tat, now} (reset = tat - now; now an int = microseconds),
        # one_token_bucket.lua {remaining, left} (reset = (b - left) / r).
        if reply.__class__ is not list:
            raise _bad_reply("the check script", reply)
        n = len(reply)
        if 1 < n < 4:
            remaining, x = reply[0], reply[1]
            if remaining.__class__ is int and remaining >= 0 and x.__class__ in _TEXT:
                try:
                    if n == 3 and limit.algorithm == "gcra":
                        now = reply[2]
                        reset_after = float(x) - (
                            now / 1e6 if now.__class__ is int else float(now))
                    elif n == 2 and limit.algorithm == "token-bucket":
                        reset_after = ((float(limit.capacity) - float(x))
                                       / float(limit.per_second))
                    else:
                        raise ValueError
                except (TypeError, ValueError):
                    pass
                else:
                    if math.isfinite(reset_after):
                        return new_decision(Decision, (True, remaining, 0.0, reset_after, 0.0,
                                                       limit, False))
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

    @staticmethod
    def _parse_now(reply: Any) -> float:
        return _float(reply, "the refund script", reply)

    def _parse_state(self, limit: Limit, kind: str, raw: list[Any]) -> Any:
        """A key's raw value as the Python algorithm's state (see each Lua file's layout)."""
        algo = limit.algorithm
        if kind == "none":
            return None
        try:
            if kind == "string" and algo == "gcra":
                return float(raw[0])
            if kind == "list" and algo == "sliding-window-log":
                entries: list[tuple[float, float]] = []
                for v in raw:
                    ts = float(v)
                    if entries and entries[-1][0] == ts:
                        entries[-1] = (ts, entries[-1][1] + 1.0)
                    else:
                        entries.append((ts, 1.0))
                return tuple(entries)
            if kind == "hash":
                fields = {_str(raw[i]): _str(raw[i + 1]) for i in range(0, len(raw), 2)}
                if algo == "token-bucket":
                    return (float(fields["tokens"]), float(fields["last"]))
                if algo == "leaky-bucket":
                    return (int(float(fields["excess"])), int(float(fields["last"])))
                if algo == "fixed-window":
                    return (int(float(fields["k"])), float(fields["used"]))
                if algo == "sliding-window-counter":
                    return (int(float(fields["k"])), float(fields["prev"]), float(fields["curr"]))
        except (KeyError, ValueError, IndexError):
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
            shown: Any
            if kind == "hash":
                shown = {_str(raw[i]): _str(raw[i + 1]) for i in range(0, len(raw), 2)}
            elif kind == "string":
                shown = _str(raw[0])
            else:
                shown = [_str(v) for v in raw]
            out.append(KeyState(limit, key, rkey, kind, pttl / 1000 if pttl >= 0 else None,
                                pttl == -1, shown, state, decisions[0], at))
        return out

    # -- failures ---------------------------------------------------------------------------

    def _new_breaker(self, name: str) -> CircuitBreaker:
        return CircuitBreaker(self.breaker_failures, self.breaker_cooldown, name=name)

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
        if isinstance(exc, _UNAVAILABLE_TYPES):
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
        err = self._translate(exc)
        self.stats.errors += 1
        if isinstance(err, StoreUnavailable):
            self.stats.unavailable += 1
            breaker.failure()
        else:
            breaker.success()  # it answered: reachable
        log.debug("Redis store call failed: %s", err)
        if self.on_error is not None:
            try:
                self.on_error(err)
            except Exception:  # a broken hook must not break rate limiting
                log.exception("on_error hook raised")
        return err

    def _short_circuit(self, breaker: CircuitBreaker) -> None:
        try:
            breaker.before()
        except StoreUnavailable as e:
            self.stats.short_circuited += 1
            if self.on_error is not None:
                try:
                    self.on_error(e)
                except Exception:
                    log.exception("on_error hook raised")
            raise

    # -- deny cache -------------------------------------------------------------------------

    def _local_now(self, now: float) -> float:
        return now if self.uses_client_clock else time.monotonic()

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
# building clients from URLs
# -----------------------------------------------------------------------------------------


class _Target(NamedTuple):
    kind: Literal["standalone", "cluster", "sentinel"]
    url: str  # for standalone / cluster: a URL redis-py understands
    sentinels: list[tuple[str, int]]
    service: str
    db: int
    username: str | None
    password: str | None
    ssl: bool


def _parse_target(url: str, cluster: bool | None) -> _Target:
    if not isinstance(url, str) or "://" not in url:
        raise ConfigError(
            f"not a Redis URL: {url!r}; use redis://host:port/db, rediss://..., unix:///path, "
            "redis+cluster://host:port or redis+sentinel://host:port/mastername"
        )
    scheme, rest = url.split("://", 1)
    scheme = scheme.lower()
    if scheme in ("redis+cluster", "rediss+cluster"):
        if cluster is False:
            raise ConfigError(f"{url!r} names a cluster but cluster=False was given")
        return _Target("cluster", scheme.split("+")[0] + "://" + rest, [], "", 0, None, None,
                       scheme.startswith("rediss"))
    if scheme in ("redis+sentinel", "rediss+sentinel"):
        userinfo, _, hostpart = rest.rpartition("@")
        username = password = None
        if userinfo:
            user, _, pw = userinfo.partition(":")
            username, password = unquote(user) or None, unquote(pw) or None
        hostpart = hostpart.split("?", 1)[0]
        hosts, _, path = hostpart.partition("/")
        parts = [p for p in path.split("/") if p]
        if not parts:
            raise ConfigError(
                f"a sentinel URL needs the master's name: redis+sentinel://host:port/mymaster, "
                f"got {url!r}"
            )
        try:
            db = int(parts[1]) if len(parts) > 1 else 0
            sentinels = []
            for h in hosts.split(","):
                host, _, port = h.rpartition(":") if ":" in h else (h, "", "26379")
                sentinels.append((host.strip("[]"), int(port)))
        except ValueError:
            raise ConfigError(
                f"cannot parse sentinel URL {url!r}: ports and the db are numbers"
            ) from None
        return _Target("sentinel", url, sentinels, unquote(parts[0]), db, username, password,
                       scheme.startswith("rediss"))
    if scheme not in ("redis", "rediss", "unix"):
        raise ConfigError(
            f"unsupported URL scheme {scheme!r} in {redact(url)!r}; use {VALID_FORMS}")
    if cluster:
        if scheme == "unix":
            raise ConfigError("Redis Cluster does not work over unix sockets")
        return _Target("cluster", url, [], "", 0, None, None, scheme == "rediss")
    return _Target("standalone", url, [], "", 0, None, None, scheme == "rediss")




def _client_kwargs(timeout: float, connect_timeout: float | None,
                   options: Mapping[str, Any] | None) -> dict[str, Any]:
    kw: dict[str, Any] = {
        "socket_timeout": timeout,
        "socket_connect_timeout": connect_timeout if connect_timeout is not None else timeout,
    }
    kw.update(options or {})
    return kw


def _check_timeout(timeout: Any) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) \
            or not 0 < timeout < math.inf:
        raise ConfigError(f"timeout must be a number of seconds > 0, got {timeout!r}")
    return float(timeout)


def _describe_client(client: Any) -> str:
    try:
        if isinstance(client, (redis.cluster.RedisCluster, redis.asyncio.cluster.RedisCluster)):
            nodes = client.get_nodes() if hasattr(client, "get_nodes") else []
            first = nodes[0].name if nodes else "?"
            return f"cluster {first}"
        kw = client.connection_pool.connection_kwargs
        if "path" in kw:
            return f"unix://{kw['path']}"
        if "service_name" in getattr(client.connection_pool, "__dict__", {}):
            return f"sentinel master {client.connection_pool.service_name}"
        return f"redis://{kw.get('host', '?')}:{kw.get('port', '?')}/{kw.get('db', 0)}"
    except Exception:
        return type(client).__name__


# -----------------------------------------------------------------------------------------
# the synchronous store
# -----------------------------------------------------------------------------------------


class RedisStore(_RedisCore):
    """Limiter state in Redis, Valkey, a Redis Cluster or a Sentinel-managed primary (sync).

    Build it from a URL (see `from_url`) or from a client you configured::

        RedisStore(redis.Redis(host=..., socket_timeout=0.25, retry=Retry(NoBackoff(), 0)))
        RedisStore(redis.cluster.RedisCluster(host=..., socket_timeout=0.25))

    The per-decision timeout is the client's ``socket_timeout`` (`from_url` sets it to
    `timeout`, 0.25 s by default) times its retries: give a client you build yourself a small
    timeout and no retries, or a dead store can hold a request for seconds.

    Options (keyword-only):

    - `prefix`: prepended to every key (default ``"rk:"``); no braces.
    - `client_clock`: decide on the caller's ``now`` instead of the server's ``TIME``
      (simulation, tests). Default False: app servers with skewed clocks agree.
    - `min_ttl`: keys live at least this long (seconds of real time). Default 1 ms on the
      server clock (the expiry is the algorithm's exact recovery time), 60 s on a client clock.
    - `clock_grace`: seconds added to the expiry of keys written at a time the caller
      supplied (client clock; the later slots of a cross-slot composite, which decide at
      the first slot's server time), default 1 s. A key must outlive its state for every
      caller: one whose clock runs up to this much behind still finds it, instead of a
      missing key (a full bucket) it would over-admit on.
    - `breaker_failures`, `breaker_cooldown`: the `CircuitBreaker` (5 consecutive
      unavailable calls open it for 0.25 s, then one call probes; 0 disables it).
    - `deny_cache`: answer checks that cannot pass yet locally (off by default). After a
      rejection, the same check with costs at least as large is rejected without a round
      trip until the earliest time it could pass. The trade: its `remaining` is the one of
      the cached rejection (it may have grown since), and a `refund` or `reset` made by
      *another* process is not seen until the cached wait is over, so such a request can
      be rejected for up to that wait after it could have passed. Never admits more.
    - `deny_cache_size`: entries kept (oldest dropped first; default 100 000).
    - `on_error`: called with every `StoreError` / `StoreUnavailable` the store raises
      (including fail-fast ones from an open breaker); `stats` counts them too.
    """

    def __init__(
        self,
        client: redis.Redis | redis.cluster.RedisCluster | None,
        *,
        prefix: str = DEFAULT_PREFIX,
        client_clock: bool = False,
        min_ttl: float | None = None,
        clock_grace: float = 1.0,
        breaker_failures: int = 5,
        breaker_cooldown: float = 0.25,
        deny_cache: bool = False,
        deny_cache_size: int = 100_000,
        on_error: Callable[[StoreError], None] | None = None,
        _connect: Callable[[], redis.cluster.RedisCluster] | None = None,
        _describe: str | None = None,
        _owns_client: bool = False,
    ) -> None:
        if client is None and _connect is None:
            raise ConfigError("RedisStore needs a client (or use RedisStore.from_url)")
        if client is not None and isinstance(
            client, (redis.asyncio.Redis, redis.asyncio.cluster.RedisCluster)
        ):
            raise ConfigError(f"{client!r} is an asyncio client; use AsyncRedisStore with it")
        cluster = _connect is not None or isinstance(client, redis.cluster.RedisCluster)
        super().__init__(
            prefix=prefix, client_clock=client_clock, cluster=cluster, min_ttl=min_ttl,
            clock_grace=clock_grace, breaker_failures=breaker_failures,
            breaker_cooldown=breaker_cooldown,
            deny_cache=deny_cache, deny_cache_size=deny_cache_size, on_error=on_error,
            describe=_describe or _describe_client(client),
        )
        self._client: Any = client
        self._connect = _connect
        self._connect_lock = threading.Lock()
        self._owns_client = _owns_client

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        client_clock: bool = False,
        timeout: float = DEFAULT_TIMEOUT,
        connect_timeout: float | None = None,
        cluster: bool | None = None,
        client_options: Mapping[str, Any] | None = None,
        **store_options: Any,
    ) -> RedisStore:
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
        to the redis-py client; other keyword arguments are the store's (see the class).
        The client is created lazily (a down server does not stop start-up) and closed by
        `close`.
        """
        target = _parse_target(url, cluster)
        kw = _client_kwargs(_check_timeout(timeout), connect_timeout, client_options)
        describe = redact(url)
        if target.kind == "cluster":
            kw.setdefault("retry", Retry(NoBackoff(), 1))
            curl = target.url

            def connect() -> redis.cluster.RedisCluster:
                return _StoreCluster.from_url(curl, connection_pool_class=_FailFastPool, **kw)

            return cls(None, prefix=prefix, client_clock=client_clock, _connect=connect,
                       _describe=describe, _owns_client=True, **store_options)
        kw.setdefault("retry", Retry(NoBackoff(), 0))
        client: redis.Redis
        if target.kind == "sentinel":
            sentinel: Any = _SyncSentinel(
                target.sentinels,
                sentinel_kwargs={k: v for k, v in kw.items() if k.startswith("socket_")},
                **({"ssl": True} if target.ssl else {}),
                **{k: v for k, v in kw.items() if k != "retry"},
            )
            client = sentinel.master_for(
                target.service, db=target.db, username=target.username,
                password=target.password, retry=kw["retry"],
            )
        else:
            client = redis.Redis.from_url(target.url, **kw)
        return cls(client, prefix=prefix, client_clock=client_clock, _describe=describe,
                   _owns_client=True, **store_options)

    # -- I/O ------------------------------------------------------------------------------

    @property
    def client(self) -> Any:
        """The redis-py client (None until a lazily built cluster client first connects)."""
        return self._client

    def _get_client(self) -> Any:
        client = self._client
        if client is None:
            with self._connect_lock:
                client = self._client
                if client is None:
                    assert self._connect is not None
                    client = self._client = self._connect()
        return client

    def _execute(self, call: _Call) -> Any:
        breaker = self._breaker_for(call, self._client)
        self._short_circuit(breaker)
        stats = self.stats
        try:
            client = self._get_client()
            stats.calls += 1
            script = call.script
            if script is None:
                reply = client.delete(*call.keys) if call.keys else client.ping()
            else:
                try:
                    reply = client.evalsha(script.sha, len(call.keys), *call.keys, *call.args)
                except rex.NoScriptError:
                    stats.noscript_reloads += 1
                    stats.calls += 1
                    reply = client.eval(script.text, len(call.keys), *call.keys, *call.args)
        except Exception as e:
            raise self._failed(breaker, e) from e
        breaker.success()
        return reply

    def _run(self, plan: _Plan[T]) -> T:
        try:
            call = next(plan)
            while True:
                try:
                    reply = self._execute(call)
                except StoreError as e:
                    call = plan.throw(e)
                else:
                    call = plan.send(reply)
        except StopIteration as stop:
            result: T = stop.value
            return result

    # -- the Store protocol -----------------------------------------------------------------

    def bind(self, limit: Limit) -> Callable[[str, float, float], Decision]:
        """``decide_one`` for one fixed limit, ``(key, cost, now) -> Decision``: the hot path.

        Everything that does not depend on the call is computed once here: the script, the
        key's prefix and suffix, and the limit's arguments, already encoded (redis-py sends
        bytes as they are). On a single server the call goes straight to the client's
        EVALSHA (NOSCRIPT: EVAL, once), with the breaker consulted only through one
        attribute read while it is closed; a cluster, or the deny cache, takes the general
        path (`decide_one`).
        """
        params = tuple(a.encode() for a in self._one_params(limit))
        script = ONE[limit.algorithm]
        sha, text = script.sha, script.text
        head, tail = self.prefix + "{", "}" + _suffix(limit)
        client_clock = self.uses_client_clock
        min_ms = self._min_ms.encode()
        grace_ms = (self._grace_ms if client_clock else "0").encode()
        server_now, one = b"", b"1"
        # The straight-line scripts take (cost, p1, p2[, min, now, grace]); on the server's
        # clock everything after the cost is fixed: `rest`, the defaults left off.
        fast = limit.algorithm in ONE_FAST
        rest = params + tuple(a.encode() for a in self._fast_tail(""))
        parse, stats, breaker = self._parse_one, self.stats, self._breaker
        decide_one, failed, short_circuit = self.decide_one, self._failed, self._short_circuit
        noscript = rex.NoScriptError

        def decide_bound(key: str, cost: float, now: float) -> Decision:
            client = self._client
            if self._deny is not None or self.cluster or client is None:
                return decide_one(limit, key, cost, now)
            if "%" in key or "}" in key:
                key = _encode_key(key)
            c = one if cost == 1 else repr(cost)
            if fast:
                args = ((head + key + tail, c, *params, min_ms, repr(float(now)), grace_ms)
                        if client_clock else (head + key + tail, c, *rest))
            else:
                args = (head + key + tail, repr(float(now)) if client_clock else server_now,
                        c, min_ms, grace_ms, *params)
            if breaker._open_until is not None:
                short_circuit(breaker)  # raises while open, or lets this call probe
            try:
                stats.calls += 1
                try:
                    # what client.evalsha() does, less two Python frames
                    reply = client.execute_command("EVALSHA", sha, 1, *args)
                except noscript:
                    stats.noscript_reloads += 1
                    stats.calls += 1
                    reply = client.eval(text, 1, *args)
            except Exception as e:
                raise failed(breaker, e) from e
            if breaker._consecutive or breaker._open_until is not None:
                breaker.success()
            return parse(reply, limit)

        return decide_bound

    def decide_one(self, limit: Limit, key: str, cost: float, now: float) -> Decision:
        deny = self._deny
        t, check = 0.0, [(limit, key, cost)]
        if deny is not None:
            t = self._local_now(now)
            hit = self._cached(check, t)
            if hit is not None:
                return hit[0]
        d = self._parse_one(self._execute(self._one_call(limit, key, cost, now)), limit)
        if deny is not None and not d.allowed:
            self._remember(check, t, [d])
        return d

    def decide(self, checks: Sequence[Check], now: float,
               consume: bool = True) -> tuple[list[Decision], float]:
        if not checks:
            return [], now
        t = 0.0
        if self._deny is not None:
            t = self._local_now(now)
            hit = self._cached(checks, t)
            if hit is not None:
                return hit, now
        decisions, at = self._run(self._decide_plan(checks, now, consume))
        if self._deny is not None:
            self._remember(checks, t, decisions)
        return decisions, at

    def refund(self, checks: Sequence[Check], now: float, at: float) -> None:
        if checks:
            self._forget((), None, checks)
            self._run(self._refund_plan(checks, now, at))

    def reset(self, limits: Sequence[Limit], key: str) -> None:
        if limits:
            self._forget(limits, key)
            self._run(self._reset_plan(limits, key))

    # -- inspection ---------------------------------------------------------------------------

    def inspect(
        self, limits: Sequence[Limit], key: str, now: float | None = None
    ) -> list[KeyState]:
        """State, TTL and remaining quota of `key` for each of `limits` (charges nothing).

        `now` decides on that time (a client-clock namespace, e.g. a simulation's);
        by default the server's clock is used.
        """
        return self._run(self._inspect_plan(limits, key, now))

    def scan(self, key: str) -> list[tuple[str, str, float | None, Any]]:
        """``(redis key, type, ttl seconds, raw value)`` of every state kept for `key` under
        this prefix, whatever the limit (SCAN over every primary; for inspection only)."""
        pattern = _glob_escape(f"{self.prefix}{{{_encode_key(key)}}}:") + "*"
        try:
            found = sorted({_str(k) for k in self._get_client().scan_iter(match=pattern,
                                                                             count=1000)})
        except Exception as e:
            raise self._failed(self._breaker, e) from e

        def plan() -> _Plan[list[tuple[str, str, float | None, Any]]]:
            out = []
            for rkey in found:
                reply = yield _Call(STATE, [rkey], [])
                if not isinstance(reply, list) or len(reply) < 3 or not isinstance(reply[1], int):
                    raise _bad_reply("the state script", reply)
                kind, pttl, raw = _str(reply[0]), reply[1], [_str(v) for v in reply[3:]]
                shown: Any = raw
                if kind == "hash":
                    shown = dict(zip(raw[::2], raw[1::2], strict=True))
                elif kind == "string":
                    shown = raw[0]
                if kind != "none":
                    out.append((rkey, kind, pttl / 1000 if pttl >= 0 else None, shown))
            return out

        return self._run(plan())

    def state(self, limit: Limit, key: str) -> Any:
        """The raw algorithm state of `key`, shaped as the Python algorithm holds it (or None)."""
        checks = [(limit, key, 1.0)]

        def plan() -> _Plan[Any]:
            reply = yield _Call(STATE, [self.state_key(limit, key)], [])
            if not isinstance(reply, list) or len(reply) < 3:
                raise _bad_reply("the state script", reply)
            return self._parse_state(checks[0][0], _str(reply[0]), list(reply[3:]))

        return self._run(plan())

    def ping(self) -> bool:
        """True if the server answers PING now (through the circuit breaker; never raises)."""
        try:
            return bool(self._execute(_Call(None, [], [])))
        except StoreError:
            return False

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the client if this store created it (`from_url`)."""
        client = self._client
        if self._owns_client and client is not None:
            client.close()
            if self._connect is not None:
                self._client = None  # a later call connects again

    def __enter__(self) -> RedisStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -----------------------------------------------------------------------------------------
# the asyncio store
# -----------------------------------------------------------------------------------------


class AsyncRedisStore(_RedisCore):
    """`RedisStore` for asyncio (``redis.asyncio`` clients): the same options, plus:

    - `coalesce` (default True): checks issued concurrently, i.e. in the same event-loop
      iteration, go to the server as one pipeline (one round trip per server for all of
      them; each is still its own atomic script). A lone check is a single EVALSHA.
    - `timeout`: a hard bound (seconds) on each round trip, enforced with asyncio whatever
      the client's socket timeouts (`from_url` sets it to its `timeout`; None: only the
      client's timeouts apply).
    """

    def __init__(
        self,
        client: redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster,
        *,
        prefix: str = DEFAULT_PREFIX,
        client_clock: bool = False,
        min_ttl: float | None = None,
        clock_grace: float = 1.0,
        breaker_failures: int = 5,
        breaker_cooldown: float = 0.25,
        deny_cache: bool = False,
        deny_cache_size: int = 100_000,
        on_error: Callable[[StoreError], None] | None = None,
        coalesce: bool = True,
        timeout: float | None = None,
        _describe: str | None = None,
        _owns_client: bool = False,
    ) -> None:
        if not isinstance(client, (redis.asyncio.Redis, redis.asyncio.cluster.RedisCluster)):
            raise ConfigError(
                f"{client!r} is not a redis.asyncio client; use RedisStore for synchronous ones"
            )
        super().__init__(
            prefix=prefix, client_clock=client_clock,
            cluster=isinstance(client, redis.asyncio.cluster.RedisCluster), min_ttl=min_ttl,
            clock_grace=clock_grace, breaker_failures=breaker_failures,
            breaker_cooldown=breaker_cooldown,
            deny_cache=deny_cache, deny_cache_size=deny_cache_size, on_error=on_error,
            describe=_describe or _describe_client(client),
        )
        self._client: Any = client
        self._owns_client = _owns_client
        self.coalesce = coalesce
        self.timeout = None if timeout is None else _check_timeout(timeout)
        self._batch: list[tuple[_Call, asyncio.Future[Any]]] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        client_clock: bool = False,
        timeout: float = DEFAULT_TIMEOUT,
        connect_timeout: float | None = None,
        cluster: bool | None = None,
        client_options: Mapping[str, Any] | None = None,
        **store_options: Any,
    ) -> AsyncRedisStore:
        """As `RedisStore.from_url`, with ``redis.asyncio`` clients."""
        target = _parse_target(url, cluster)
        timeout = _check_timeout(timeout)
        kw = _client_kwargs(timeout, connect_timeout, client_options)
        describe = redact(url)
        store_options.setdefault("timeout", timeout)
        client: redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster
        if target.kind == "cluster":
            kw.setdefault("retry", Retry(NoBackoff(), 1))
            client = redis.asyncio.cluster.RedisCluster.from_url(target.url, **kw)
        elif target.kind == "sentinel":
            kw.setdefault("retry", Retry(NoBackoff(), 0))
            sentinel: Any = _AsyncSentinel(
                target.sentinels,
                sentinel_kwargs={k: v for k, v in kw.items() if k.startswith("socket_")},
                **({"ssl": True} if target.ssl else {}),
                **{k: v for k, v in kw.items() if k != "retry"},
            )
            client = sentinel.master_for(
                target.service, db=target.db, username=target.username,
                password=target.password, retry=kw["retry"],
            )
        else:
            kw.setdefault("retry", Retry(NoBackoff(), 0))
            client = redis.asyncio.Redis.from_url(target.url, **kw)
        return cls(client, prefix=prefix, client_clock=client_clock, _describe=describe,
                   _owns_client=True, **store_options)

    @property
    def client(self) -> Any:
        return self._client

    # -- I/O ------------------------------------------------------------------------------

    async def _execute(self, call: _Call) -> Any:
        breaker = self._breaker_for(call, self._client)
        self._short_circuit(breaker)
        try:
            if self.coalesce and call.script is not None:
                reply = await self._submit(call)
            else:
                reply = await self._bounded(self._send_one(call))
        except Exception as e:
            raise self._failed(breaker, e) from e
        breaker.success()
        return reply

    async def _bounded(self, aw: Any) -> Any:
        if self.timeout is None:
            return await aw
        if _asyncio_timeout is not None:  # 3.11+: no task per call, unlike wait_for
            async with _asyncio_timeout(self.timeout):
                return await aw
        return await asyncio.wait_for(aw, self.timeout)

    async def _send_one(self, call: _Call) -> Any:
        client = self._client
        self.stats.calls += 1
        script = call.script
        if script is None:
            return await (client.delete(*call.keys) if call.keys else client.ping())
        try:
            return await client.evalsha(script.sha, len(call.keys), *call.keys, *call.args)
        except rex.NoScriptError:
            self.stats.noscript_reloads += 1
            self.stats.calls += 1
            return await client.eval(script.text, len(call.keys), *call.keys, *call.args)

    async def _submit(self, call: _Call) -> Any:
        """Queue `call` for this loop iteration's batch and wait for its reply."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        if self._batch is None:
            self._batch = []
            loop.call_soon(self._flush)
        self._batch.append((call, fut))
        return await fut

    def _flush(self) -> None:
        batch, self._batch = self._batch, None
        if not batch:
            return
        task = asyncio.get_running_loop().create_task(self._send_batch(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send_batch(self, batch: list[tuple[_Call, asyncio.Future[Any]]]) -> None:
        try:
            if len(batch) == 1:
                results = [await self._bounded(self._send_one(batch[0][0]))]
            else:
                results = await self._bounded(self._pipeline([c for c, _ in batch]))
        except BaseException as e:  # every waiter gets the failure
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(e if isinstance(e, Exception) else StoreUnavailable(repr(e)))
            if not isinstance(e, Exception):
                raise
            return
        for (_, fut), r in zip(batch, results, strict=True):
            if fut.done():
                continue
            if isinstance(r, Exception):
                fut.set_exception(r)
            else:
                fut.set_result(r)

    async def _pipeline(self, calls: list[_Call]) -> list[Any]:
        """Send `calls` as one non-transactional pipeline; NOSCRIPT ones again with EVAL."""
        stats = self.stats
        stats.pipelines += 1
        stats.pipelined_calls += len(calls)
        stats.calls += len(calls)
        pipe = self._client.pipeline(transaction=False)
        for call in calls:
            assert call.script is not None
            # execute_command: redis-py blocks the evalsha *method* on cluster pipelines,
            # but routes EVALSHA by its keys correctly.
            pipe.execute_command("EVALSHA", call.script.sha, len(call.keys), *call.keys,
                                 *call.args)
        results: list[Any] = list(await pipe.execute(raise_on_error=False))
        redo = [i for i, r in enumerate(results) if isinstance(r, rex.NoScriptError)]
        if redo:
            stats.noscript_reloads += len(redo)
            stats.calls += len(redo)
            pipe = self._client.pipeline(transaction=False)
            for i in redo:
                call = calls[i]
                assert call.script is not None
                pipe.execute_command("EVAL", call.script.text, len(call.keys), *call.keys,
                                     *call.args)
            for i, r in zip(redo, await pipe.execute(raise_on_error=False), strict=True):
                results[i] = r
        return results

    async def _run(self, plan: _Plan[T]) -> T:
        try:
            call = next(plan)
            while True:
                try:
                    reply = await self._execute(call)
                except StoreError as e:
                    call = plan.throw(e)
                else:
                    call = plan.send(reply)
        except StopIteration as stop:
            result: T = stop.value
            return result

    # -- the AsyncStore protocol -------------------------------------------------------------

    async def adecide_one(self, limit: Limit, key: str, cost: float, now: float) -> Decision:
        deny = self._deny
        t, check = 0.0, [(limit, key, cost)]
        if deny is not None:
            t = self._local_now(now)
            hit = self._cached(check, t)
            if hit is not None:
                return hit[0]
        d = self._parse_one(await self._execute(self._one_call(limit, key, cost, now)), limit)
        if deny is not None and not d.allowed:
            self._remember(check, t, [d])
        return d

    async def adecide(self, checks: Sequence[Check], now: float,
                      consume: bool = True) -> tuple[list[Decision], float]:
        if not checks:
            return [], now
        t = 0.0
        if self._deny is not None:
            t = self._local_now(now)
            hit = self._cached(checks, t)
            if hit is not None:
                return hit, now
        decisions, at = await self._run(self._decide_plan(checks, now, consume))
        if self._deny is not None:
            self._remember(checks, t, decisions)
        return decisions, at

    async def arefund(self, checks: Sequence[Check], now: float, at: float) -> None:
        if checks:
            self._forget((), None, checks)
            await self._run(self._refund_plan(checks, now, at))

    async def areset(self, limits: Sequence[Limit], key: str) -> None:
        if limits:
            self._forget(limits, key)
            await self._run(self._reset_plan(limits, key))

    async def ainspect(self, limits: Sequence[Limit], key: str,
                       now: float | None = None) -> list[KeyState]:
        """See `RedisStore.inspect`."""
        return await self._run(self._inspect_plan(limits, key, now))

    async def aping(self) -> bool:
        """See `RedisStore.ping`."""
        try:
            return bool(await self._execute(_Call(None, [], [])))
        except StoreError:
            return False

    async def astate(self, limit: Limit, key: str) -> Any:
        """See `RedisStore.state`."""

        def plan() -> _Plan[Any]:
            reply = yield _Call(STATE, [self.state_key(limit, key)], [])
            if not isinstance(reply, list) or len(reply) < 3:
                raise _bad_reply("the state script", reply)
            return self._parse_state(limit, _str(reply[0]), list(reply[3:]))

        return await self._run(plan())

    # -- lifecycle ------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the client if this store created it (`from_url`)."""
        for task in list(self._tasks):
            task.cancel()
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> AsyncRedisStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
