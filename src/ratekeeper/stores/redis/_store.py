"""The two thin drivers: `RedisStore` (sync) and `AsyncRedisStore` (asyncio)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
import redis.exceptions as rex
from redis.backoff import NoBackoff
from redis.retry import Retry

from ..._errors import ConfigError, StoreError, StoreUnavailable
from ..._types import Decision, Limit
from .._base import Check
from .._lua import ONE, ONE_FAST, STATE
from .._url import redact
from ._client import (
    _asyncio_timeout,
    _AsyncSentinel,
    _check_timeout,
    _client_kwargs,
    _describe_client,
    _FailFastPool,
    _parse_target,
    _StoreCluster,
    _SyncSentinel,
)
from ._core import (
    DEFAULT_PREFIX,
    DEFAULT_TIMEOUT,
    KeyState,
    T,
    _bad_reply,
    _Call,
    _encode_key,
    _glob_escape,
    _Plan,
    _RedisCore,
    _str,
    _suffix,
)

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

