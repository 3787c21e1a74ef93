"""The two drivers: `RedisStore` (sync) and `AsyncRedisStore` (asyncio).

Everything that is not an I/O call lives in `_core._RedisCore`: the plans (what to call,
in order, and what the replies mean), the deny cache, the breakers, the error handling
around a call. A driver only sends a `_Call` (``_send``), wraps that in ``_attempt`` and
loops a plan over it in ``_run``; the sync store adds its bound hot path (`RedisStore.bind`),
the async one coalesces concurrent calls into pipelines.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import socket
import sys
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
import redis.exceptions as rex

from ..._errors import ConfigError, StoreError, StoreUnavailable
from ..._memo import Memo
from ..._types import GLOBAL_KEY, Decision, Limit
from .._base import Check
from .._lua import CHECK, LIBRARY, ONE, Script
from ._client import (
    LoopInUse,
    _check_timeout,
    _describe_client,
    _Target,
    async_client,
    sync_client,
)
from ._core import (
    _PARSE_ONE,
    KeyState,
    ReplyMismatch,
    T,
    _advance,
    _Call,
    _encode_key,
    _fmt,
    _Outcome,
    _Plan,
    _RedisCore,
    _suffix,
    new_call,
    next_tag,
    untagged,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ._core import StoreOptions


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
    - `local_clock`: the clock (seconds, monotonic) the breakers' cool-downs and, on the
      server clock, the deny cache read; default `time.monotonic` (tests: a `ManualClock`).
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
        _connect: Callable[[], redis.cluster.RedisCluster] | None = None,
        _describe: str | None = None,
        _owns_client: bool = False,
        **options: Unpack[StoreOptions],
    ) -> None:
        if client is None and _connect is None:
            raise ConfigError("RedisStore needs a client (or use RedisStore.from_url)")
        if client is not None and isinstance(
            client, (redis.asyncio.Redis, redis.asyncio.cluster.RedisCluster)
        ):
            raise ConfigError(f"{client!r} is an asyncio client; use AsyncRedisStore with it")
        super().__init__(
            cluster=_connect is not None or isinstance(client, redis.cluster.RedisCluster),
            describe=_describe or _describe_client(client), **options)
        self._client = client
        self._connect = _connect
        self._connect_lock = threading.Lock()
        self._owns_client = _owns_client

    @classmethod
    def _from_target(cls, target: _Target, kw: dict[str, Any], timeout: float,
                     **options: Any) -> RedisStore:
        client, connect = sync_client(target, kw)
        return cls(client, _connect=connect, _describe=options.pop("describe"),
                   _owns_client=True, **options)

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

    def _send(self, call: _Call) -> Any:
        client, stats, script = self._get_client(), self.stats, call.script
        if call.command == "scan":
            return list(client.scan_iter(match=call.args[0], count=1000))
        stats.calls += 1
        if script is None:
            return client.delete(*call.keys) if call.keys else client.ping()
        return self._eval(client, script, len(call.keys), (*call.keys, *call.args))

    def _eval(self, client: Any, script: Script, n: int, keys_args: Sequence[Any]) -> Any:
        """Run `script` on `n` keys (`keys_args`: the keys, then the arguments): FCALL of its
        library function when it has one and the server has functions (FUNCTION LOAD
        first when the library is missing), else EVALSHA (EVAL after NOSCRIPT). The call
        is tagged and its reply's tag checked (`_untag`)."""
        tag = next_tag()
        return self._untag(client, self._evaluate(client, script, n, (*keys_args, tag)), tag)

    @staticmethod
    def _untag(client: Any, reply: Any, tag: int) -> Any:
        """`untagged`; on a reply that is another call's, the client's idle connections are
        closed first (the one it came on is among them: redis-py gave it back to its pool
        as the reply was read), so that no later call reads the replies out of step."""
        try:
            return untagged(reply, tag)
        except ReplyMismatch:
            pool = getattr(client, "connection_pool", None)
            if pool is not None:
                pool.disconnect(inuse_connections=False)
            else:  # a cluster client: a pool per node
                client.disconnect_connection_pools()
            raise

    def _evaluate(self, client: Any, script: Script, n: int, keys_args: Sequence[Any]) -> Any:
        """`_eval`'s call, `keys_args` ending with its tag."""
        stats = self.stats
        if script.fn and self._fcall:
            try:
                return client.execute_command("FCALL", script.fn, n, *keys_args)
            except rex.ResponseError as e:
                if not self._fcall_failed(e):
                    raise
            if self._fcall:
                try:
                    client.execute_command("FUNCTION", "LOAD", LIBRARY)
                except rex.ResponseError as e:
                    self._loaded(e)
                else:
                    self._loaded(None)
            stats.calls += 1
            if self._fcall:
                return client.execute_command("FCALL", script.fn, n, *keys_args)
        try:
            return client.execute_command("EVALSHA", script.sha, n, *keys_args)
        except rex.NoScriptError:
            stats.noscript_reloads += 1
            stats.calls += 1
            return client.eval(script.text, n, *keys_args)

    def _attempt(self, call: _Call) -> _Outcome:
        breaker, refused = self._gate(call)
        try:
            return refused or self._answered(breaker, self._send(call))
        except Exception as e:
            return self._raised(breaker, e)

    def _run(self, plan: _Plan[T]) -> T:
        try:
            done, x = _advance(plan, None)
            while not done:
                done, x = _advance(plan, self._attempt(x))
        except StoreError as e:  # (a reply the plan could not read, or a call's, reported)
            self._misread(e)
            raise
        return x  # type: ignore[no-any-return]

    # -- the Store protocol -----------------------------------------------------------------

    def bind(self, limit: Limit) -> Callable[[str, float, float], Decision]:
        """``decide_one`` for one fixed limit, ``(key, cost, now) -> Decision``: the hot path.

        Everything that does not depend on the call is computed once here: the script, the
        key's prefix and suffix, and the limit's arguments, already encoded (redis-py sends
        bytes as they are). On a single server the call goes straight to the client's
        EVALSHA (NOSCRIPT: EVAL, once; FCALL for a script with a library function), with
        the breaker consulted only through one attribute read (`CircuitBreaker.clean`)
        while nothing is wrong; a cluster, or the deny cache, takes the general path
        (`decide_one`).
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
        fast = script.straight
        rest = params + tuple(a.encode() for a in self._fast_tail(""))
        parse, stats, breaker = _PARSE_ONE[limit.algorithm], self.stats, self._breaker
        decide_one, failed, short_circuit = self.decide_one, self._failed, self._short_circuit
        noscript, run, untag = rex.NoScriptError, self._eval, self._untag
        # a script with a library function (`Script.fn`): FCALL while the server has them
        functions = bool(script.fn)

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
            if not breaker.clean:
                short_circuit(breaker)  # raises while open, or lets this call probe
            try:
                stats.calls += 1
                if functions:
                    reply = run(client, script, 1, args)
                else:
                    tag = next_tag()  # (as `_eval` tags its calls)
                    try:
                        # what client.evalsha() does, less two Python frames
                        reply = client.execute_command("EVALSHA", sha, 1, *args, tag)
                    except noscript:
                        stats.noscript_reloads += 1
                        stats.calls += 1
                        reply = client.eval(text, 1, *args, tag)
                    reply = untag(client, reply, tag)
            except Exception as e:
                raise failed(breaker, e) from e
            if not breaker.clean:
                breaker.success()
            try:
                return parse(reply, limit, cost)
            except StoreError as e:
                self._misread(e)
                raise

        return decide_bound

    def decide_one(self, limit: Limit, key: str, cost: float, now: float) -> Decision:
        return self._run(self._decide_one_plan(limit, key, cost, now))

    def bind_all(self, limits: Sequence[Limit]) -> Callable[[str, float, float], list[Decision]]:
        """`decide` of `limits` for one request, all-or-nothing and charged, as
        ``(key, cost, now) -> decisions`` (a ``scope="global"`` limit decides on
        `GLOBAL_KEY`): a composite limiter's hot path. On one server without a deny cache
        it is `decide`'s single check.lua call with every key's text and every argument
        but the key and the cost built once; otherwise `decide` itself."""
        lims = tuple(limits)
        prefix = self.prefix
        # per limit: the state key's text before and after the key (global: the whole key)
        parts = [(prefix + "{", "}" + self._encoded(lim)[3]) if lim.scope == "key"
                 else (self.state_key(lim, GLOBAL_KEY), None) for lim in lims]
        shape = [(lim, "", 1.0) for lim in lims]  # what _parse_check reads of the checks
        n = len(lims)
        per_limit = [self._limit_args(lim) for lim in lims]

        def limit_args(cost_text: str) -> list[str]:
            out: list[str] = []
            for algo_id, p1, p2, p3 in per_limit:
                out += (algo_id, cost_text, p1, p2, p3)
            return out

        unit = limit_args("1")
        # on the server's clock, a unit cost's whole ARGV is fixed: encoded once
        server_unit = [a.encode() for a in ["", "1", self._min_ms, "0", *unit]]
        client_clock, grace = self.uses_client_clock, self._grace_ms
        stats, breaker = self.stats, self._breaker
        decide, parse, failed, run = self.decide, self._parse_check, self._failed, self._eval

        def decide_all(key: str, cost: float, now: float) -> list[Decision]:
            client = self._client
            if not self._single_call or client is None:
                return decide([(lim, key if lim.scope == "key" else GLOBAL_KEY, float(cost))
                               for lim in lims], now, True)[0]
            if "%" in key or "}" in key:
                key = _encode_key(key)
            keys: list[Any] = [head + key + tail if tail is not None else head
                               for head, tail in parts]
            if cost == 1 and not client_clock:
                keys += server_unit
            else:
                keys += [_fmt(now), "1", self._min_ms, grace] if client_clock \
                    else ["", "1", self._min_ms, "0"]
                keys += unit if cost == 1 else limit_args(repr(float(cost)))
            if not breaker.clean:
                self._short_circuit(breaker)
            try:
                stats.calls += 1
                reply = run(client, CHECK, n, keys)  # the keys, then the arguments
            except Exception as e:
                raise failed(breaker, e) from e
            if not breaker.clean:
                breaker.success()
            try:
                return parse(reply, shape)[0]
            except StoreError as e:
                self._misread(e)
                raise

        return decide_all

    def decide(self, checks: Sequence[Check], now: float,
               consume: bool = True) -> tuple[list[Decision], float]:
        client = self._client
        if self._single_call and checks and client is not None:
            # One server, no deny cache: any composite is one check.lua call (the plan's
            # first case, without driving a plan: a composite's hot path), sent as `bind`'s
            # is, with the breaker read through `clean` while nothing is wrong.
            call = self._check_call(checks, _fmt(now) if self.uses_client_clock else "",
                                    consume)
            breaker = self._breaker
            if not breaker.clean:
                self._short_circuit(breaker)
            stats = self.stats
            try:
                stats.calls += 1
                reply = self._eval(client, CHECK, len(call.keys), (*call.keys, *call.args))
            except Exception as e:
                raise self._failed(breaker, e) from e
            if not breaker.clean:
                breaker.success()
            try:
                decisions, at, _ = self._parse_check(reply, checks)
            except StoreError as e:
                self._misread(e)
                raise
            return decisions, at
        return self._run(self._decide_cached_plan(checks, now, consume))

    def refund(self, checks: Sequence[Check], now: float, at: float) -> None:
        self._run(self._refund_all_plan(checks, now, at))

    def reset(self, limits: Sequence[Limit], key: str) -> None:
        self._run(self._reset_all_plan(limits, key))

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
        return self._run(self._scan_plan(key))

    def state(self, limit: Limit, key: str) -> Any:
        """The raw algorithm state of `key`, shaped as the Python algorithm holds it (or None)."""
        return self._run(self._state_plan(limit, key))

    def ping(self) -> bool:
        """True if the server answers PING now (through the circuit breaker; never raises)."""
        return self._run(self._ping_plan())

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


def _no_reply(timeout: float | None) -> asyncio.TimeoutError:
    """The error of a round trip past its deadline, `timeout` seconds after it was sent."""
    return asyncio.TimeoutError(f"no reply within {timeout:g} s")


class _Deadlines:
    """Bounds every round trip of an asyncio store to `timeout` seconds with one event-loop
    timer for all of them, where ``asyncio.timeout`` schedules and cancels one per round
    trip (about a third of a decision's own CPU on Redis). A round trip past its deadline
    has its task cancelled, and raises ``TimeoutError`` -- unless the task was also
    cancelled from outside, whose ``CancelledError`` goes on (as ``asyncio.timeout``; on
    Python 3.10, which cannot tell the two apart, an outside cancellation in the same step
    as the deadline becomes the ``TimeoutError``, as ``asyncio.wait_for`` does there)."""

    __slots__ = ("_expired", "_inflight", "_last", "_loop", "_next", "_ordered", "_timer")

    def __init__(self) -> None:
        #: token -> (deadline on the loop's clock, the task making the round trip).
        self._inflight: dict[int, tuple[float, asyncio.Task[Any]]] = {}
        self._expired: set[int] = set()
        #: The one timer, due at the soonest deadline, and the loop it is on.
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._next = 0
        #: Deadlines came in increasing order (one timeout for all: the usual case), so
        #: `_expire` can stop at the first one not yet due; and the latest of them.
        self._ordered = True
        self._last = -math.inf

    async def bound(self, aw: Awaitable[T], timeout: float) -> T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)  # (without `loop`, it looks the loop up again)
        if task is None:  # not in a task (a bare coroutine driven by hand): nothing to cancel
            return await asyncio.wait_for(aw, timeout)
        if loop is not self._loop:  # a new loop: a closed one's round trips are gone with it
            self._inflight = {t: v for t, v in self._inflight.items()
                              if v[1].get_loop() is loop}
            # (the old loop's timer, if it ever fires, finds it is not the loop: `_expire`)
            self._timer, self._loop, self._ordered = None, loop, False
        self._next = token = self._next + 1
        deadline = loop.time() + timeout
        cancelling = 0
        if sys.version_info >= (3, 11):
            cancelling = task.cancelling()
        self._inflight[token] = (deadline, task)
        if deadline < self._last:
            self._ordered = False
        self._last = deadline
        timer = self._timer
        if timer is None or deadline < timer.when():
            if timer is not None:
                timer.cancel()
            self._timer = loop.call_at(deadline, self._expire, loop)
        try:
            return await aw
        except asyncio.CancelledError:
            if token not in self._expired:
                raise
            self._expired.discard(token)
            if sys.version_info >= (3, 11) and task.uncancel() > cancelling:
                raise  # cancelled from outside too
            raise _no_reply(timeout) from None
        finally:
            self._inflight.pop(token, None)
            if not self._inflight:  # nothing in flight: any order starts afresh
                self._ordered, self._last = True, -math.inf
            if token in self._expired:  # cancelled, but the round trip swallowed it
                self._expired.discard(token)
                if sys.version_info >= (3, 11):  # (Task.cancelling/uncancel are 3.11+)
                    task.uncancel()

    def _expire(self, loop: asyncio.AbstractEventLoop) -> None:
        if loop is not self._loop:
            return
        self._timer = None
        now = loop.time()
        soonest = None
        due = []
        for token, (deadline, task) in self._inflight.items():
            if deadline <= now:
                due.append((token, task))
            elif self._ordered:  # the rest are later still
                soonest = deadline
                break
            elif soonest is None or deadline < soonest:
                soonest = deadline
        if not self._ordered and len(due) == len(self._inflight):
            self._ordered = True  # every out-of-order deadline is gone
        for token, task in due:
            del self._inflight[token]
            self._expired.add(token)
            task.cancel()
        if soonest is not None:
            self._timer = loop.call_at(soonest, self._expire, loop)


#: The bytes `_Wire`'s packed script calls hold at most (`Memo`): 10,000 composite calls of
#: short keys fit (~1-3 KB each); calls as large as the limits allow (a 53 KB key) are a few
#: hundred, or not remembered, instead of 10,000 of them holding a gigabyte (issue 28).
PACKED_MEMO_BYTES = 32 << 20


class _Wire:
    """An asyncio store's own connections to its one server, for every command it sends
    when the store made its client (`from_url`; not a cluster's): a round trip is
    one write of the packed commands, then their replies read in order, on a connection
    taken from the client's pool and kept between round trips (at most `keep` idle).

    redis-py's per-command path -- the pool's lock, checks and bookkeeping on every command,
    its retry wrapper, its observability hooks -- costs more than the decision it carries:
    ~120k instructions a round trip of the ~460k a bare served gRPC + Redis call costs
    (callgrind). These connections stay the pool's (counted in use, closed with it) and
    connect, authenticate and read replies as redis-py does; an idle one is checked before
    it is used again (data or end of stream waiting: a new socket), as redis-py 8's pool no
    longer checks its own with maintenance notifications on (RESP3, its default): a pooled
    connection idle across a server restart fails its next command, so the store sends
    everything here. The store's client has no retries (`async_client`); given retry or
    health-check options (`client_options`), the store uses redis-py's commands instead,
    which apply them (`from_url`)."""

    __slots__ = ("_describe", "_idle", "_loop", "_packed", "_pool", "_waiting", "keep")

    def __init__(self, pool: Any, keep: int = 16, *, remember: bool = True,
                 describe: str = "redis") -> None:
        self._pool = pool
        self._describe = describe
        self._idle: list[Any] = []
        #: Round trips waiting for a connection while the pool has none left to give (its
        #: ``max_connections`` in use): each is handed the next one a round trip is done with.
        self._waiting: deque[asyncio.Future[Any]] = deque()
        #: The loop the idle connections' sockets are on.
        self._loop: asyncio.AbstractEventLoop | None = None
        self.keep = keep
        #: Script calls as packed, by their arguments (`exchange`), when `remember`.
        self._packed: Memo[tuple[Any, ...], bytes] | None = \
            Memo(10_000, PACKED_MEMO_BYTES) if remember else None

    async def exchange(self, commands: Sequence[tuple[Any, ...]], remember: bool = False,
                       tags: Sequence[int] | None = None) -> list[Any]:
        """The replies to `commands`, in order; an error reply is its `ResponseError`.
        `remember`: the commands are script calls (str and bytes arguments but the key
        count), packed once per arguments (a decision on the server's clock sends the same
        ones again for the same keys; hiredis formats each argument's length with sprintf:
        ~24k instructions a composite call, of which the lookup leaves ~1k). `tags`: the
        commands are script calls, each sent with its tag and its reply checked (`untagged`:
        a reply out of step closes the connection and raises `ReplyMismatch`)."""
        conn = await self._take()
        try:
            await self.checked(conn)
            packed = self.pack(conn, commands, remember, tags)
            await conn.send_packed_command(packed, check_health=False)
            replies: list[Any] = []
            for _ in commands:
                try:
                    replies.append(await conn.read_response())
                except rex.ResponseError as e:  # the script's error; the next reply follows
                    replies.append(e)
            if tags is not None:
                replies = [untagged(r, t) for r, t in zip(replies, tags, strict=True)]
        except BaseException:
            # Replies may be left unread (redis-py has already closed the socket if a read
            # or a write failed, or was cancelled): a new socket next time.
            await _close_quietly(conn)
            self._idle_again(conn)
            raise
        if self._handed_over(conn):
            pass
        elif len(self._idle) < self.keep:
            self._idle.append(conn)
        else:
            await self._pool.release(conn)
        return replies

    @staticmethod
    async def checked(conn: Any) -> None:
        """Close `conn` if it cannot be used again as it is (it connects again as it sends):
        data or its end waiting (a server restarted while it was idle), or marked to move."""
        if conn.is_connected:  # (one that is not connects as it sends)
            check = getattr(conn, "can_read", None) or conn.can_read_destructive
            try:
                stale = await check()
            except (rex.ConnectionError, OSError):
                stale = True
            # (redis-py 8 marks connections to move on a maintenance notification; its
            # pool drops them as they are released, and these are not)
            moving = getattr(conn, "should_reconnect", None)
            if stale or (moving is not None and moving()):
                await _close_quietly(conn)

    def pack(self, conn: Any, commands: Sequence[tuple[Any, ...]], remember: bool,
             tags: Sequence[int] | None = None) -> list[bytes]:
        """`commands` as `conn` sends them (`exchange`'s `remember` and `tags`; remembered
        commands are script calls, and have tags)."""
        packed: list[bytes] = []
        memo = self._packed if remember else None
        for i, args in enumerate(commands):
            if memo is None:
                packed += conn.pack_command(*args) if tags is None \
                    else conn.pack_command(*args, tags[i])
                continue
            assert tags is not None
            wire = memo.get(args)
            if wire is None:
                # remembered without its tag, which differs on every call: packed with an
                # empty last argument (b"$0\r\n\r\n") in its place, cut off
                wire = b"".join(conn.pack_command(*args, b""))[:-6]
                # (what it holds: the bytes packed, the arguments they were packed from,
                # about as long, and each object's own size)
                memo.put(args, wire, 2 * len(wire) + 80 * len(args) + 100)
            tag = b"%d" % tags[i]
            packed += (wire, b"$%d\r\n%s\r\n" % (len(tag), tag))
        return packed

    async def one(self, command: tuple[Any, ...]) -> Any:
        """The reply to one command; an error reply raises its `ResponseError`."""
        return _raised((await self.exchange([command]))[0])

    def _idle_again(self, conn: Any) -> None:
        """Take back `conn`, closed (a `_Pipe`'s, when it breaks): opened when next used."""
        if not self._handed_over(conn):
            self._idle.append(conn)

    def _handed_over(self, conn: Any) -> bool:
        """Whether `conn`, done with, went to a round trip waiting for one (`_take`)."""
        waiting = self._waiting
        while waiting:
            fut = waiting.popleft()
            if not fut.done():
                fut.set_result(conn)
                return True
        return False

    async def adopt(self, loop: asyncio.AbstractEventLoop) -> None:
        """Use `loop` from now on. Another loop's sockets are no use on it (one loop at a
        time: that one is closed, as `asyncio.run` leaves it, and closing them fails but
        forgets them): the pool gets their connections back, to connect again on this one."""
        self.refuse_other_loop(loop)
        old, self._loop, self._idle = self._idle, loop, []
        self._waiting.clear()  # (the closed loop's: gone with it)
        for conn in old:
            await _close_quietly(conn)
            await self._pool.release(conn)

    def refuse_other_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Raise `LoopInUse` if the loop these connections are on is not `loop` and is
        running still (another thread's): an asyncio store is one loop's at a time. Used
        from two at once, each switch left a pipe and a connection behind, until every call
        failed as unavailable without saying why."""
        mine = self._loop
        if mine is not None and mine is not loop and mine.is_running():
            raise LoopInUse(
                f"AsyncRedisStore {self._describe} was called on event loop {loop!r} while "
                f"the loop it runs on, {mine!r}, is running too (two threads, each with its "
                "own asyncio.run?): an asyncio store belongs to one event loop at a time; "
                "make one store per event loop (one per thread)")

    async def _take(self) -> Any:
        """An idle connection of this loop's, or a new one from the pool; while the pool has
        every connection it may make in use, the next one a round trip is done with (within
        the caller's deadline: `AsyncRedisStore._bounded`). redis-py's asyncio pool raises
        `MaxConnectionsError` instead of waiting: without coalescing, the 101st concurrent
        call on a healthy server failed as unavailable, and five opened the breaker."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            await self.adopt(loop)
        if self._idle:
            return self._idle.pop()
        try:
            return await self._pool.get_connection()
        except rex.MaxConnectionsError:
            pass
        fut: asyncio.Future[Any] = loop.create_future()
        self._waiting.append(fut)
        try:
            return await fut
        except BaseException:  # (cancelled: past its deadline, or its caller gone)
            if fut.done() and not fut.cancelled():  # handed one as it was cancelled
                self._idle_again(fut.result())
            raise


class _Pipe:
    """One of `_Wire`'s connections, on which an asyncio store pipelines its coalesced
    script calls: each loop iteration's batch is written as it is flushed, with no task,
    connection check-out or deadline of its own, and one reader task hands the replies, in
    order, to their callers' futures (an error reply to the store, which sends it again if
    it was NOSCRIPT or a missing library, or raises it).

    grpc.aio hands the service one call per loop iteration, so its batches are of one call:
    a task, a connection taken and a deadline per call cost more than the decision: a
    served gRPC + Redis decision took 494k instructions with them, 443k on a pipe
    (callgrind, `bench/bench_service.py --instructions`).

    It breaks -- every call waiting fails with the error; its reader closes the socket and
    gives the connection back to the wire's idle ones (it connects again when next used) --
    when the connection fails or ends (a server gone while it is idle is seen at once: the
    reader is always reading, with no read timeout: a pipe is opened only on a connection
    without one), and when a reply comes that no call waits for. A call past its deadline
    (`timeout`) fails alone, as a batch past its own does, and the pipe retires: the calls
    sent after it wait for their own deadlines, and once none is left the socket is closed
    (a server frozen or too slow; as a round trip past its deadline closes its connection,
    so the next one connects again, to a new primary after a failover). The store opens
    another pipe after its next round trip that works."""

    __slots__ = ("_give_back", "_moving", "_on_broken", "_on_error", "_reader", "_timer",
                 "broken", "conn", "detached", "loop", "orphaned", "pending", "retiring",
                 "timeout",
                 "writer")

    def __init__(self, conn: Any, loop: asyncio.AbstractEventLoop, timeout: float | None, *,
                 on_broken: Callable[[_Pipe], None], give_back: Callable[[_Pipe], None],
                 on_error: Callable[[_Call, asyncio.Future[Any], Exception, float], None]
                 ) -> None:
        self.conn, self.loop, self.timeout = conn, loop, timeout
        self.writer: asyncio.StreamWriter = conn._writer
        self._on_broken, self._give_back, self._on_error = on_broken, give_back, on_error
        #: The futures of the calls written, in order, their deadlines (loop time), the
        #: calls, their tags (`untagged`).
        self.pending: deque[tuple[asyncio.Future[Any], float, _Call, int]] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self.broken = self.retiring = False
        #: Its connection is no longer its to give back (its loop closed under its reader).
        self.orphaned = False
        #: Its connection is no longer the store's (closed from another loop: `_drop_pipe`):
        #: its reader closes it, on its own loop, and gives it back to no one.
        self.detached = False
        #: redis-py 8 marks a connection to move (a maintenance notification): see `usable`.
        self._moving: Callable[[], bool] | None = getattr(conn, "should_reconnect", None)
        self._reader = loop.create_task(self._read())

    def usable(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Whether a batch on `loop` goes this way now (else the store's other path: a
        connection of its own, which waits for a full write buffer to drain). A connection
        redis-py marked to move takes no more: it retires."""
        if self.broken or self.retiring or loop is not self.loop:
            return False
        if self._moving is not None and self._moving():
            self.retire()
            return False
        return self.writer.transport.get_write_buffer_size() < _PIPE_BUFFER

    def retire(self) -> None:
        """Take no more calls; the reader answers those waiting, then gives the connection
        back (closed: it connects again, to where it moved, when next used)."""
        self.retiring = True
        self._on_broken(self)
        if not self.pending:
            self.fail(StoreUnavailable("the store's pipelined connection retired"))

    def send(self, data: list[bytes], batch: list[tuple[_Call, asyncio.Future[Any]]],
             tags: list[int]) -> None:
        """Write the packed commands `data`, the calls of `batch` tagged `tags`; their
        replies go to their futures, in order (an error reply to `on_error`, which may send
        it again). A reply that is not its call's (`ReplyMismatch`) breaks the pipe: the
        replies after it cannot be trusted either."""
        deadline = math.inf if self.timeout is None else self.loop.time() + self.timeout
        self.pending.extend([(f, deadline, c, t) for (c, f), t in zip(batch, tags, strict=True)])
        if self._timer is None and self.timeout is not None:
            self._timer = self.loop.call_at(deadline, self._check)
        try:
            self.writer.writelines(data)
        except Exception as e:  # a transport closing: its reader sees why too
            self.fail(e)

    async def _read(self) -> None:
        conn, pending = self.conn, self.pending
        try:
            while True:
                error = None
                try:
                    reply = await conn.read_response()
                except rex.ResponseError as e:  # the script's error; the next reply follows
                    error = e
                if not pending:
                    raise rex.ConnectionError("Redis sent a reply no call was waiting for")
                future, deadline, call, tag = pending.popleft()
                if error is None:
                    try:
                        reply = untagged(reply, tag)
                    except ReplyMismatch as e:
                        if not future.done():
                            future.set_exception(e)
                        raise
                if future.done():  # its caller has gone: the reply is dropped
                    pass
                elif error is None:
                    future.set_result(reply)
                else:
                    self._on_error(call, future, error, deadline)
                if self.retiring and not pending:
                    self.broken = True
                    return
        except asyncio.CancelledError:  # (`fail`, or the loop closing: `asyncio.run`)
            self.fail(StoreUnavailable("the store's pipelined connection was closed"))
            raise
        except Exception as e:
            self.fail(e)
        finally:
            # (here, once nothing reads from it: given back only when it can be used again)
            if not self.orphaned:
                await _close_quietly(conn)
                if not self.detached:
                    self._give_back(self)

    def _check(self) -> None:
        """Calls past their deadline fail, and the pipe retires; once no call is left
        waiting, it breaks (see the class)."""
        self._timer = None
        if self.broken:
            return
        now, expired, soonest = self.loop.time(), False, None
        for future, deadline, _, _ in self.pending:  # (in the order sent: deadlines rise)
            if future.done():
                continue
            if deadline > now:
                soonest = deadline
                break
            # (left in place, done: its reply, if it comes, is read and dropped in turn)
            future.set_exception(_no_reply(self.timeout))
            expired = True
        if expired and not self.retiring:
            self.retiring = True
            self._on_broken(self)
        if soonest is not None:
            self._timer = self.loop.call_at(soonest, self._check)
        elif self.retiring:  # the server is not answering, and no call waits for it
            self.fail(StoreUnavailable("the store's pipelined connection timed out"))

    def fail(self, exc: Exception) -> None:
        """Break the pipe: every call waiting gets `exc`; the connection goes back closed."""
        if self.broken:
            return
        self.broken = True
        self._on_broken(self)
        pending, self.pending = self.pending, deque()
        if self.loop.is_closed():  # nothing can wait on it, nor run its reader again
            return
        for future, _, _, _ in pending:
            if not future.done():
                future.set_exception(exc)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._reader is not asyncio.current_task(self.loop):
            self._reader.cancel()

    async def close(self) -> None:
        """Break the pipe (`aclose`), and wait until its reader has given its connection
        back."""
        self.fail(StoreUnavailable("the store was closed"))
        await asyncio.wait([self._reader])  # (its outcome is the calls', not this one's)


#: A pipe whose write buffer holds this much (a server not reading) takes no more batches.
_PIPE_BUFFER = 1 << 20
#: A pipelined call's error reply, for the store to send again: the call, its caller's
#: future, the error, the call's deadline (loop time).
_ErrorReply = tuple[_Call, "asyncio.Future[Any]", Exception, float]

#: redis-py connection options that its command path applies and the store's own
#: connections (`_Wire`) would not: set, the store keeps redis-py's commands (and with a
#: `retry` of its own given to `from_url`).
_RETRY_OPTIONS = ("retry_on_error", "retry_on_timeout", "health_check_interval")


def _script_command(call: _Call, how: str) -> tuple[Any, ...]:
    """`call` as the command `how` ("FCALL" where the script has a function, else
    "EVALSHA"; or "EVAL"): the script, the key count, the keys, the arguments. (By name, not
    redis-py's evalsha method, which its cluster pipelines refuse; they route it by keys.)"""
    script = call.script
    assert script is not None
    n = len(call.keys)
    if how == "FCALL" and script.fn:
        return ("FCALL", script.fn, n, *call.keys, *call.args)
    if how == "EVAL":
        return ("EVAL", script.text, n, *call.keys, *call.args)
    return ("EVALSHA", script.sha, n, *call.keys, *call.args)


def _raised(reply: Any) -> Any:
    """`reply`, or raised when it is an error reply (an exception, as `exchange` keeps it)."""
    if isinstance(reply, Exception):
        raise reply
    return reply


def _end_connection(conn: Any) -> None:
    """End `conn`'s connection now, whatever loop its socket is on (a loop that is not
    running cannot close it yet): the server sees it end at once; the socket itself is
    closed by its own loop (`_Pipe`'s reader, when that loop runs on)."""
    writer = getattr(conn, "_writer", None)
    sock = writer.get_extra_info("socket") if writer is not None else None
    if sock is None:
        return
    with contextlib.suppress(OSError, ValueError):
        # (a duplicate of the socket: shutting it down ends the connection both share,
        # and closing it leaves the loop's own descriptor as it is)
        dup = socket.fromfd(sock.fileno(), sock.family, sock.type)
        try:
            dup.shutdown(socket.SHUT_RDWR)
        finally:
            dup.close()


async def _close_quietly(conn: Any) -> None:
    """Close `conn`'s socket (it reconnects when next used); the error being handled, if
    any, is the one to raise, not one from closing."""
    with contextlib.suppress(Exception):
        await conn.disconnect(nowait=True)


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
        coalesce: bool = True,
        timeout: float | None = None,
        _describe: str | None = None,
        _owns_client: bool = False,
        _own_connections: bool = False,
        **options: Unpack[StoreOptions],
    ) -> None:
        if not isinstance(client, (redis.asyncio.Redis, redis.asyncio.cluster.RedisCluster)):
            raise ConfigError(
                f"{client!r} is not a redis.asyncio client; use RedisStore for synchronous ones"
            )
        super().__init__(cluster=isinstance(client, redis.asyncio.cluster.RedisCluster),
                         describe=_describe or _describe_client(client), **options)
        self._client = client
        self._owns_client = _owns_client
        self.coalesce = coalesce
        self.timeout = None if timeout is None else _check_timeout(timeout)
        #: This loop iteration's batch (its loop, the calls and their callers' futures).
        self._batch: tuple[asyncio.AbstractEventLoop,
                           list[tuple[_Call, asyncio.Future[Any]]]] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._deadlines = _Deadlines()
        #: The scripts' connections, for a client this store made (`_Wire`): redis-py's
        #: commands otherwise, honouring whatever a given client was configured with.
        self._wire = _Wire(client.connection_pool, remember=not self.uses_client_clock,
                           describe=self._describe) \
            if _own_connections and isinstance(client, redis.asyncio.Redis) else None
        #: The wire's connection that coalesced script calls are pipelined on (`_Pipe`),
        #: once a round trip has worked; and whether one is being opened.
        self._pipe: _Pipe | None = None
        self._opening = False
        #: Every pipe whose reader has not given its connection back (retiring ones too).
        self._open_pipes: set[_Pipe] = set()
        self._pipes = self._wire is not None  # (False: this store's connections cannot)
        #: This loop iteration's error replies from the pipe (its loop, and each call, its
        #: caller's future, the error and the call's deadline), sent again together.
        self._errors: tuple[asyncio.AbstractEventLoop, list[_ErrorReply]] | None = None

    @classmethod
    def _from_target(cls, target: _Target, kw: dict[str, Any], timeout: float,
                     **options: Any) -> AsyncRedisStore:
        options.setdefault("timeout", timeout)
        if options["timeout"] is not None and kw.get("socket_timeout") == timeout:
            # The store bounds every round trip itself (`timeout`); a socket read timeout
            # as well would cost an asyncio timer for each reply of every pipeline.
            kw = {**kw, "socket_timeout": None}
        retry_given = "retry" in kw  # (read before `async_client` puts its no-retry in)
        client = async_client(target, kw)
        # Retry and health-check options, given or in the URL, are applied by redis-py's
        # commands, not by the store's own connections (`_Wire`).
        ckw = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
        own = not retry_given and not any(ckw.get(k) for k in _RETRY_OPTIONS)
        return cls(client, _describe=options.pop("describe"), _owns_client=True,
                   _own_connections=own, **options)

    @property
    def client(self) -> Any:
        return self._client

    # -- I/O ------------------------------------------------------------------------------

    async def _attempt(self, call: _Call) -> _Outcome:
        breaker, refused = self._gate(call)
        try:
            return refused or self._answered(breaker, await self._send(call))
        except Exception as e:
            return self._raised(breaker, e)

    async def _send(self, call: _Call) -> Any:
        if self.coalesce and call.script is not None:
            return await self._submit(call)
        return await self._bounded(self._send_one(call))

    async def _bounded(self, aw: Any) -> Any:
        if self.timeout is None:
            return await aw
        return await self._deadlines.bound(aw, self.timeout)

    async def _send_one(self, call: _Call) -> Any:
        client, stats, script, wire = self._client, self.stats, call.script, self._wire
        if call.command == "scan":
            if wire is None:
                return [k async for k in client.scan_iter(match=call.args[0], count=1000)]
            found: list[Any] = []
            cursor: Any = 0
            while True:
                cursor, keys = await wire.one(("SCAN", cursor, "MATCH", call.args[0],
                                               "COUNT", 1000))
                found += keys
                if int(cursor) == 0:
                    return found
        if wire is not None:  # (every command: see `_Wire`)
            if script is not None:
                return _raised((await self._scripts([call]))[0])
            stats.calls += 1
            return await wire.one(("DEL", *call.keys) if call.keys else ("PING",))
        stats.calls += 1
        if script is None:
            return await (client.delete(*call.keys) if call.keys else client.ping())
        tag = next_tag()
        return await self._untag(await self._evaluate(script, len(call.keys),
                                                      (*call.keys, *call.args, tag)), tag)

    async def _evaluate(self, script: Script, n: int, keys_args: Sequence[Any]) -> Any:
        """`_send_one`'s script call on redis-py's client, `keys_args` ending with its tag."""
        client, stats = self._client, self.stats
        if script.fn and self._fcall:  # as `RedisStore._eval`
            try:
                return await client.execute_command("FCALL", script.fn, n, *keys_args)
            except rex.ResponseError as e:
                if not self._fcall_failed(e):
                    raise
            await self._load_library()
            stats.calls += 1
            if self._fcall:
                return await client.execute_command("FCALL", script.fn, n, *keys_args)
        try:
            return await client.execute_command("EVALSHA", script.sha, n, *keys_args)
        except rex.NoScriptError:
            stats.noscript_reloads += 1
            stats.calls += 1
            return await client.eval(script.text, n, *keys_args)

    async def _load_library(self) -> None:
        if self._fcall:
            try:
                load = ("FUNCTION", "LOAD", LIBRARY)
                await (self._wire.one(load) if self._wire is not None
                       else self._client.execute_command(*load))
            except rex.ResponseError as e:
                self._loaded(e)
            else:
                self._loaded(None)

    async def _submit(self, call: _Call) -> Any:
        """Queue `call` for this loop iteration's batch and wait for its reply.

        The batch is sent by its own task, so a caller cancelled while it waits cancels no
        one's round trip, its own included: the command still goes out and its connection
        stays open (redis-py drops a connection whose command was cancelled mid-reply, and
        gRPC cancels every call its client gave up on, as Envoy's 20 ms timeout does)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        batch = self._batch
        if batch is None or batch[0] is not loop:
            # A callback, not the batch's task itself: a task may start at once (an eager
            # task factory) or be cancelled before it starts, and either would strand it.
            # (A batch of another loop is gone with it: that loop closed before its flush.)
            batch = self._batch = (loop, [])
            loop.call_soon(self._flush, batch)
        batch[1].append((call, fut))
        return await fut

    def _flush(self, batch: tuple[asyncio.AbstractEventLoop,
                                  list[tuple[_Call, asyncio.Future[Any]]]]) -> None:
        if self._batch is batch:
            self._batch = None
        loop, calls = batch
        pipe = self._pipe
        if pipe is not None and pipe.usable(loop):
            try:
                self._pipelined(pipe, calls)
            except Exception as e:  # (a callback's error would strand its callers)
                pipe.fail(e)
                self._settle(calls, None, e)
            return
        task = loop.create_task(self._send_batch(calls))
        self._tasks.add(task)
        task.add_done_callback(functools.partial(self._sent, calls))

    def _pipelined(self, pipe: _Pipe, batch: list[tuple[_Call, asyncio.Future[Any]]]) -> None:
        """Write `batch` on `pipe`; its callers' futures get the replies (error replies:
        `_error_reply`). Counted as `_scripts` counts a round trip."""
        batch = [entry for entry in batch if not entry[1].done()]  # as `_send_batch`
        if not batch:
            return
        stats = self.stats
        if len(batch) > 1:
            stats.pipelines += 1
            stats.pipelined_calls += len(batch)
        stats.calls += len(batch)
        how = "FCALL" if self._fcall else "EVALSHA"
        assert self._wire is not None  # (a pipe is one of its connections)
        tags = [next_tag() for _ in batch]
        pipe.send(self._wire.pack(pipe.conn, [_script_command(c, how) for c, _ in batch],
                                  True, tags), batch, tags)

    def _error_reply(self, call: _Call, fut: asyncio.Future[Any], error: Exception,
                     deadline: float) -> None:
        """A pipelined call's error reply: those of one loop iteration are answered
        together (`_replied`: after a SCRIPT or FUNCTION FLUSH, every call on its way
        fails, and the library is loaded once and they are sent again as one pipeline),
        within what is left of the calls' deadline (loop time)."""
        loop = asyncio.get_running_loop()
        errors = self._errors
        if errors is None or errors[0] is not loop:  # (another loop's closed before it)
            errors = self._errors = (loop, [])
            loop.call_soon(self._flush_errors, errors)
        errors[1].append((call, fut, error, deadline))

    def _flush_errors(self, errors: tuple[asyncio.AbstractEventLoop, list[_ErrorReply]]
                      ) -> None:
        if self._errors is errors:  # (`aclose` may have answered them: see `_send_again`)
            self._errors = None
        loop, entries = errors
        batch = [(c, f) for c, f, _, _ in entries]
        task = loop.create_task(self._send_again(entries))
        self._tasks.add(task)
        # (a task cancelled before its first step, `aclose`, would leave its callers waiting)
        task.add_done_callback(functools.partial(self._sent, batch))

    async def _send_again(self, entries: list[_ErrorReply]) -> None:
        live = [entry for entry in entries if not entry[1].done()]
        batch = [(c, f) for c, f, _, _ in live]
        if not live:
            return
        if self.timeout is not None:  # what is left of the first call's deadline (as a
            left = live[0][3] - asyncio.get_running_loop().time()  # batch's resend)
            if left <= 0:  # (not sent: a resend would be cut off as it went)
                self._settle(batch, None, _no_reply(self.timeout))
                return
        again = self._replied([c for c, _, _, _ in live], [e for _, _, e, _ in live])
        if self.timeout is not None:
            again = self._deadlines.bound(again, left)
        await self._answer(batch, again)

    def _pipe_broken(self, pipe: _Pipe) -> None:
        if self._pipe is pipe:
            self._pipe = None

    def _pipe_done(self, pipe: _Pipe) -> None:
        """`pipe`'s reader has stopped: its connection, closed, is the wire's again."""
        self._open_pipes.discard(pipe)
        assert self._wire is not None
        self._wire._idle_again(pipe.conn)

    async def _open_pipe(self) -> None:
        """Open the pipe (`_Pipe`) on a connection of the wire's, after a round trip that
        worked; if that fails, the next one tries again."""
        wire = self._wire
        assert wire is not None
        self._pipe = None  # (None, or another loop's)
        for other in list(self._open_pipes):  # (retiring ones, too)
            if other.loop is not asyncio.get_running_loop():
                await self._drop_pipe(other)
        try:
            # (the connection the round trip just gave back, usually: none is opened)
            conn = await self._bounded(wire._take())
        except Exception:  # (the store's calls go the other way meanwhile)
            return
        try:
            await self._bounded(wire.checked(conn))
            if not conn.is_connected:
                await self._bounded(conn.connect())
        except BaseException as e:
            await _close_quietly(conn)
            wire._idle_again(conn)
            if not isinstance(e, Exception):
                raise
            return
        timeout = conn.socket_timeout
        if getattr(conn, "_writer", None) is None or timeout is not None:
            # Not a stream connection (redis-py's); or with a read timeout, which would
            # break an idle pipe each time it passes (`timeout` bounds a round trip): given
            # one (not one redis-py 8 relaxed for a while: maintenance notifications), no
            # pipe for this store.
            if wire._pool.connection_kwargs.get("socket_timeout") == timeout:
                self._pipes = False
            wire._idle_again(conn)
            return
        self._pipe = pipe = _Pipe(conn, asyncio.get_running_loop(), self.timeout,
                                  on_broken=self._pipe_broken, give_back=self._pipe_done,
                                  on_error=self._error_reply)
        self._open_pipes.add(pipe)

    def _opened(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._opening = False  # (also when cancelled before its first step: `aclose`)

    async def _drop_pipe(self, pipe: _Pipe) -> None:
        """`aclose`, or a pipe of another loop: closed on this one's; on a closed loop,
        broken and its connection left to its reader (below); on a loop that is neither,
        its connection is ended now and the store's no longer: its reader closes the socket
        when that loop runs on. (Given back when that loop ran on, its connection was
        still the pool's as the store closed: the pool's closing raised RuntimeError, the
        socket being another loop's, and left the connection open.)"""
        if pipe.loop is asyncio.get_running_loop():
            await pipe.close()
        elif not pipe.loop.is_closed():
            pipe.detached = True
            _end_connection(pipe.conn)
            gone = StoreUnavailable("the store's pipelined connection was closed from "
                                    "another event loop")
            if pipe.loop.is_running():  # (another thread's: `aclose` refused it, so rare)
                pipe.loop.call_soon_threadsafe(pipe.fail, gone)
            else:
                pipe.fail(gone)
            self._open_pipes.discard(pipe)
            in_use = getattr(getattr(self._wire, "_pool", None), "_in_use_connections", None)
            if in_use is not None:
                in_use.discard(pipe.conn)
        else:
            # Its reader may still run its cleanup when it is collected, on this
            # connection: the connection is left to it, and the pool stops counting it
            # (found by review: given back, it had two owners, one round trip each).
            pipe.fail(StoreUnavailable("its event loop is closed"))
            pipe.orphaned = True
            self._open_pipes.discard(pipe)
            in_use = getattr(getattr(self._wire, "_pool", None), "_in_use_connections", None)
            if in_use is not None:
                in_use.discard(pipe.conn)

    def _sent(self, calls: list[tuple[_Call, asyncio.Future[Any]]],
              task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        # A task cancelled before its first step (`aclose`) never ran: its callers would
        # wait for good. (One that ran answered every caller, whatever happened.)
        self._unsent(calls)

    def _unsent(self, calls: list[tuple[_Call, asyncio.Future[Any]]]) -> None:
        for _, fut in calls:
            if not fut.done():
                fut.set_exception(StoreUnavailable(
                    f"Redis store {self._describe} unavailable: it was closed before this "
                    "call was sent"))

    async def _send_batch(self, batch: list[tuple[_Call, asyncio.Future[Any]]]) -> None:
        # A caller gone before its command went out (cancelled, or failed by `aclose`)
        # charges nothing: its command is not sent.
        batch = [entry for entry in batch if not entry[1].done()]
        if not batch:
            return
        sent = self._listed(self._bounded(self._send_one(batch[0][0]))) if len(batch) == 1 \
            else self._bounded(self._scripts([c for c, _ in batch]))
        if not await self._answer(batch, sent):
            return
        pipe = self._pipe
        if self._pipes and not self._opening and (
                pipe is None or pipe.loop is not asyncio.get_running_loop()):
            # The server answers: later batches go on a pipe (`_Pipe`), once it is open.
            self._opening = True
            task = asyncio.get_running_loop().create_task(self._open_pipe())
            self._tasks.add(task)
            task.add_done_callback(self._opened)

    async def _answer(self, batch: list[tuple[_Call, asyncio.Future[Any]]],
                      replies: Awaitable[list[Any]]) -> bool:
        """Answer the callers of `batch` with `replies` (its round trip), or every one with
        its failure (False)."""
        try:
            results = await replies
        except BaseException as e:  # every waiter gets the failure
            self._settle(batch, None, e)
            if not isinstance(e, Exception):
                raise
            return False
        self._settle(batch, results)
        return True

    @staticmethod
    async def _listed(reply: Awaitable[Any]) -> list[Any]:
        return [await reply]

    @staticmethod
    def _settle(batch: list[tuple[_Call, asyncio.Future[Any]]], results: list[Any] | None,
                failure: BaseException | None = None) -> None:
        """Answer the callers of `batch` still waiting: each its result (an error reply
        raised), or every one `failure`."""
        assert results is None or len(results) == len(batch)
        for i, (_, fut) in enumerate(batch):
            if fut.done():
                continue
            r = failure if results is None else results[i]
            if isinstance(r, BaseException):
                fut.set_exception(r if isinstance(r, Exception) else StoreUnavailable(repr(r)))
            else:
                fut.set_result(r)

    async def _scripts(self, calls: list[_Call], retry: bool = True) -> list[Any]:
        """The replies to the script calls `calls`, in one round trip (a pipeline of them
        when there are several; an error reply as its exception); NOSCRIPT ones again with
        EVAL, those whose FCALL found no library again after loading it (when `retry`)."""
        stats = self.stats
        if len(calls) > 1:
            stats.pipelines += 1
            stats.pipelined_calls += len(calls)
        stats.calls += len(calls)
        results = await self._exchange([_script_command(c, "FCALL" if self._fcall
                                                        else "EVALSHA") for c in calls],
                                       [next_tag() for _ in calls])
        return await self._replied(calls, results, retry)

    async def _replied(self, calls: list[_Call], results: list[Any],
                       retry: bool = True) -> list[Any]:
        """`results`, the replies to the script calls `calls`, with the NOSCRIPT ones sent
        again with EVAL, and those whose FCALL found no library sent again after loading
        it (when `retry`)."""
        stats, fcall = self.stats, self._fcall
        again = [i for i, r in enumerate(results) if fcall and retry
                 and isinstance(r, rex.ResponseError) and not isinstance(r, rex.NoScriptError)
                 and calls[i].script.fn and self._fcall_failed(r)]  # type: ignore[union-attr]
        if again:  # our library was missing (load it, once), or functions are off
            await self._load_library()
            for i, r in zip(again, await self._scripts([calls[i] for i in again], False),
                            strict=True):
                results[i] = r
        redo = [i for i, r in enumerate(results) if isinstance(r, rex.NoScriptError)]
        if redo:
            stats.noscript_reloads += len(redo)
            stats.calls += len(redo)
            # (not remembered: an EVAL carries the script's whole text, and is sent only for
            # the calls on their way when the server lost its scripts)
            for i, r in zip(redo, await self._exchange(
                    [_script_command(calls[i], "EVAL") for i in redo],
                    [next_tag() for _ in redo], remember=False),
                    strict=True):
                results[i] = r
        return results

    async def _exchange(self, commands: list[tuple[Any, ...]], tags: list[int],
                        remember: bool = True) -> list[Any]:
        """The replies to the script calls `commands` (tagged `tags`: `untagged`) in one
        round trip, an error reply as its exception: on the store's own connections
        (`_Wire`; packed once per arguments when `remember`), or as a redis-py pipeline."""
        if self._wire is not None:
            return await self._wire.exchange(commands, remember=remember, tags=tags)
        pipe = self._client.pipeline(transaction=False)
        for args, tag in zip(commands, tags, strict=True):
            pipe.execute_command(*args, tag)
        results = await pipe.execute(raise_on_error=False)
        return [await self._untag(r, t) for r, t in zip(results, tags, strict=True)]

    async def _untag(self, reply: Any, tag: int) -> Any:
        """`untagged`, of a reply to redis-py's client; on a reply that is another call's,
        the client's idle connections are closed first (as `RedisStore._untag`)."""
        try:
            return untagged(reply, tag)
        except ReplyMismatch:
            client = self._client
            pool = getattr(client, "connection_pool", None)
            if pool is not None:
                await pool.disconnect(inuse_connections=False)
            else:  # a cluster client: connections per node
                for node in client.get_nodes():
                    drop = getattr(node, "disconnect_free_connections", None) or node.disconnect
                    await drop()
            raise

    async def _run(self, plan: _Plan[T]) -> T:
        try:
            done, x = _advance(plan, None)
            while not done:
                done, x = _advance(plan, await self._attempt(x))
        except StoreError as e:  # (a reply the plan could not read, or a call's, reported)
            self._misread(e)
            raise
        return x  # type: ignore[no-any-return]

    # -- the AsyncStore protocol (each method: see `RedisStore`'s without the ``a``) ---------

    async def adecide_one(self, limit: Limit, key: str, cost: float, now: float) -> Decision:
        return await self._run(self._decide_one_plan(limit, key, cost, now))

    def abind(self, limit: Limit) -> Callable[[str, float, float], Awaitable[Decision]]:
        """`adecide_one` for one fixed limit, ``(key, cost, now) -> Decision``: the asyncio
        hot path. Without a deny cache a one-limit decision is one call whatever happens, so
        it is built, sent (coalesced with concurrent ones) and parsed without a plan."""
        if self._deny is not None:
            return functools.partial(self.adecide_one, limit)
        one_call, attempt, parse = self._one_call, self._attempt, _PARSE_ONE[limit.algorithm]
        misread = self._misread

        async def decide(key: str, cost: float, now: float) -> Decision:
            ok, value = await attempt(one_call(limit, key, cost, now))
            if not ok:
                raise value
            try:
                return parse(value, limit, cost)
            except StoreError as e:
                misread(e)
                raise

        if self.cluster:  # (a breaker per node: `_attempt` finds it)
            return decide
        # One server: `RedisStore.bind`'s arguments (encoded once), sent with the breaker
        # read through `clean`, without `_attempt`'s frames.
        params = tuple(a.encode() for a in self._one_params(limit))
        script = ONE[limit.algorithm]
        head, tail = self.prefix + "{", "}" + _suffix(limit)
        client_clock, fast = self.uses_client_clock, script.straight
        min_ms = self._min_ms.encode()
        grace_ms = (self._grace_ms if client_clock else "0").encode()
        rest = params + tuple(a.encode() for a in self._fast_tail(""))
        call_server = self._call_server

        async def decide_one(key: str, cost: float, now: float) -> Decision:
            if "%" in key or "}" in key:
                key = _encode_key(key)
            c = b"1" if cost == 1 else repr(cost)
            if fast:
                args = [c, *params, min_ms, repr(float(now)), grace_ms] if client_clock \
                    else [c, *rest]
            else:
                args = [repr(float(now)) if client_clock else b"", c, min_ms, grace_ms, *params]
            reply = await call_server(new_call(_Call, (script, [f"{head}{key}{tail}"], args,
                                                       "")))
            try:
                return parse(reply, limit, cost)
            except StoreError as e:
                misread(e)
                raise

        return decide_one

    async def _call_server(self, call: _Call) -> Any:
        """`call`'s reply from the one server (not a cluster): `_attempt` without its
        outcome tuple, the breaker read through `clean` (the hot paths' round trip)."""
        breaker = self._breaker
        if not breaker.clean:
            self._short_circuit(breaker)  # raises while open, or lets this call probe
        try:
            reply = await (self._submit(call) if self.coalesce else self._send(call))
        except Exception as e:
            err = self._failed(breaker, e)
            if err is e:  # a StoreError already (a batch the store closed before it went)
                raise
            raise err from e
        if not breaker.clean:
            breaker.success()
        return reply

    async def adecide(self, checks: Sequence[Check], now: float,
                      consume: bool = True) -> tuple[list[Decision], float]:
        if self._deny is not None or self.cluster or not checks:
            return await self._run(self._decide_cached_plan(checks, now, consume))
        # One server, no deny cache: `_decide_plan`'s one call, without the plan.
        reply = await self._call_server(self._check_call(checks, self._now_arg(now), consume))
        try:
            decisions, at, _ = self._parse_check(reply, checks)
        except StoreError as e:
            self._misread(e)
            raise
        return decisions, at

    async def arefund(self, checks: Sequence[Check], now: float, at: float) -> None:
        await self._run(self._refund_all_plan(checks, now, at))

    async def areset(self, limits: Sequence[Limit], key: str) -> None:
        await self._run(self._reset_all_plan(limits, key))

    async def ainspect(self, limits: Sequence[Limit], key: str,
                       now: float | None = None) -> list[KeyState]:
        return await self._run(self._inspect_plan(limits, key, now))

    async def ascan(self, key: str) -> list[tuple[str, str, float | None, Any]]:
        return await self._run(self._scan_plan(key))

    async def astate(self, limit: Limit, key: str) -> Any:
        return await self._run(self._state_plan(limit, key))

    async def aping(self) -> bool:
        return await self._run(self._ping_plan())

    # -- lifecycle ------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the client if this store created it (`from_url`). A call still waiting for
        its batch to go gets `StoreUnavailable`; the batches on their way are cancelled
        (each of their callers gets `StoreUnavailable` too). On the loop the store runs on,
        or after it (`LoopInUse` while that loop runs in another thread)."""
        if self._wire is not None:
            self._wire.refuse_other_loop(asyncio.get_running_loop())
        batch, self._batch = self._batch, None
        if batch is not None and not batch[0].is_closed():
            self._unsent(batch[1])  # (its flush, when it runs, finds nothing to send)
        for task in list(self._tasks):
            if task.get_loop().is_closed():  # gone with its loop: nothing to cancel
                self._tasks.discard(task)
            else:
                task.cancel()
        errors, self._errors = self._errors, None
        if errors is not None and not errors[0].is_closed():
            self._unsent([(c, f) for c, f, _, _ in errors[1]])
        self._pipe = None
        for pipe in list(self._open_pipes):  # (retiring ones, too)
            await self._drop_pipe(pipe)
        if self._wire is not None:  # (the pool cannot close a closed loop's sockets)
            await self._wire.adopt(asyncio.get_running_loop())
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> AsyncRedisStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

