"""The asyncio store's edges (issue 28): a full connection pool, a transport closed under
uvloop, a store used from two running loops, parse-time errors, the packed-command memo."""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis
import redis.asyncio
import uvloop

from ratekeeper import AsyncLimiter, Limit
from ratekeeper._errors import StoreError, StoreUnavailable
from ratekeeper.policy._engine import Engine
from ratekeeper.policy._rules import DescriptorRequest
from ratekeeper.service import parse_policies
from ratekeeper.stores._lua import CHECK, LIBRARY, ONE
from ratekeeper.stores.memory import MemoryStore
from ratekeeper.stores.redis import AsyncRedisStore, RedisStore
from ratekeeper.testing import ManualClock
from tests.integration.conftest import FUNCTIONAL_TIMEOUT
from tests.servers import RedisServer


def open_store(server: RedisServer, **options: object) -> AsyncRedisStore:
    options.setdefault("timeout", FUNCTIONAL_TIMEOUT)
    return AsyncRedisStore.from_url(server.url, prefix=f"rk-edges-{uuid.uuid4().hex[:8]}:",
                                    **options)  # type: ignore[arg-type]


async def test_more_concurrent_calls_than_the_pool_holds_wait_for_a_connection(
        redis_server: RedisServer) -> None:
    # Without coalescing each concurrent call takes a connection of its own; redis-py's pool
    # holds 100 and raised MaxConnectionsError for the 101st, a StoreUnavailable: five of
    # them opened the breaker on a healthy server (200 tasks: 37 % of calls failed).
    async with open_store(redis_server, coalesce=False) as store:
        limiter = AsyncLimiter(Limit("gcra", "1000/s", burst=1000), store,
                               clock=ManualClock(0.0), failure="raise")
        decisions = await asyncio.gather(*(limiter.hit(f"k{i % 7}") for i in range(300)))
        assert all(d.allowed for d in decisions)
        assert store.stats.errors == 0
        assert store.breaker.opened == 0
        pool = store._client.connection_pool
        assert len(pool._in_use_connections) + len(pool._available_connections) \
            <= pool.max_connections


async def test_a_full_pool_of_a_given_client_is_no_breaker_failure(
        redis_server: RedisServer) -> None:
    # A client given to the store is used through redis-py, whose pool refuses the call
    # past its max_connections: the call fails (the caller's policy decides), but the
    # server is not at fault, so the breaker does not count it.
    client = redis.asyncio.Redis.from_url(redis_server.url, max_connections=2)
    store = AsyncRedisStore(client, coalesce=False, breaker_failures=1,
                            prefix=f"rk-edges-{uuid.uuid4().hex[:8]}:")
    limiter = AsyncLimiter(Limit("gcra", "1000/s", burst=1000), store,
                           clock=ManualClock(0.0), failure="raise")
    try:
        outcomes = await asyncio.gather(*(limiter.hit(f"k{i}") for i in range(20)),
                                        return_exceptions=True)
        refused = [o for o in outcomes if isinstance(o, BaseException)]
        assert refused, "the pool of 2 held 20 calls at once"
        assert all(isinstance(o, StoreUnavailable) and "max_connections" in str(o)
                   for o in refused), refused
        assert store.breaker.opened == 0 and store.breaker.state == "closed"
    finally:
        await client.aclose()


async def _a_closed_uvloop_transport_error() -> RuntimeError:
    """The error uvloop raises for a write to a transport already closed (made for real)."""
    ours, theirs = socket.socketpair()
    try:
        _, writer = await asyncio.open_connection(sock=ours)
        writer.transport.abort()
        for _ in range(10):  # (closed=True once its close callback has run)
            if "closed=True" in repr(writer.transport):
                break
            await asyncio.sleep(0)
        try:
            writer.write(b"PING\r\n")
        except RuntimeError as e:
            return e
        raise AssertionError(f"uvloop wrote to a closed transport: {writer.transport!r}")
    finally:
        theirs.close()


def test_a_write_to_a_closed_uvloop_transport_is_unavailability(
        redis_server: RedisServer) -> None:
    # uvloop (which `serve` runs on) raises RuntimeError for a write to a transport just
    # reset; it was translated to StoreError and counted as a breaker success, resetting
    # the consecutive failures in the middle of an outage.
    error = uvloop.run(_a_closed_uvloop_transport_error())
    store = open_store(redis_server, breaker_failures=2)
    failures = [store._failed(store.breaker, error) for _ in range(2)]
    assert all(isinstance(f, StoreUnavailable) for f in failures), failures
    assert store.breaker.opened == 1
    assert store.stats.unavailable == 2


def connected_clients_settle(server: RedisServer, admin: redis.Redis, expected: int) -> int:
    """The server's client count once it is `expected`, or after 1000 reads (the server
    sees a socket's end in its own time): bounded by work, not by time."""
    count = -1
    for _ in range(1000):
        count = admin.info("clients")["connected_clients"]
        if count == expected:
            break
    return count


def test_aclose_with_a_pipe_on_another_open_loop_closes_its_connection(
        redis_server: RedisServer) -> None:
    # A pipe left on a loop that is still open (not running): aclose() on another loop
    # raised RuntimeError (redis-py's pool closing that loop's socket: "attached to a
    # different loop") and the server kept the connection.
    admin = redis.Redis.from_url(redis_server.url)
    alone = admin.info("clients")["connected_clients"]
    store = open_store(redis_server)
    limiter = AsyncLimiter(Limit("gcra", "100/s", burst=100), store, clock=ManualClock(0.0),
                           failure="raise")
    first = asyncio.new_event_loop()
    try:
        async def open_a_pipe() -> None:
            assert (await limiter.hit("k")).allowed
            for _ in range(100):  # (it opens after a round trip that worked)
                if store._pipe is not None and not store._tasks:
                    return
                await asyncio.sleep(0)
            raise AssertionError("no pipe opened")

        first.run_until_complete(open_a_pipe())
        asyncio.run(store.aclose())
        assert connected_clients_settle(redis_server, admin, alone) == alone
        first.run_until_complete(asyncio.sleep(0))  # its reader ends, on its own loop
        assert not store._open_pipes
    finally:
        first.close()
        admin.close()


def test_a_store_used_from_two_running_loops_is_refused_with_a_clear_error(
        redis_server: RedisServer) -> None:
    # Two threads, each with its running loop, on one store: each switch left a pipe and a
    # connection behind, until tens of thousands of StoreUnavailable followed, none saying
    # why. The second loop's call is refused, naming the fix.
    store = open_store(redis_server)
    limiter = AsyncLimiter(Limit("gcra", "100/s", burst=100), store, clock=ManualClock(0.0),
                           failure="open")
    other = asyncio.new_event_loop()
    thread = threading.Thread(target=other.run_forever)
    thread.start()
    try:
        assert asyncio.run_coroutine_threadsafe(limiter.hit("k"), other).result(10).allowed
        pool = store._client.connection_pool
        held = len(pool._in_use_connections)
        for _ in range(3):  # (each a switch: refused every time, nothing leaked)
            with pytest.raises(RuntimeError, match="one store per event loop"):
                asyncio.run(limiter.hit("k"))
            assert len(pool._in_use_connections) == held
        assert asyncio.run_coroutine_threadsafe(limiter.hit("k"), other).result(10).allowed
        assert store.stats.errors == 0
        assert len(store._open_pipes) <= 1
        asyncio.run_coroutine_threadsafe(store.aclose(), other).result(10)
    finally:
        other.call_soon_threadsafe(other.stop)
        thread.join(10)
        other.close()


def answering_garbage(server: RedisServer) -> None:
    """Replace the store's library on `server` (a private one) with functions of the same
    names that answer what no script of ours does: every FCALL's reply is unreadable (though
    it carries its call's tag, the last argument, as every script's reply does)."""
    name = LIBRARY.split("name=", 1)[1].split()[0]
    functions = {CHECK.fn, *(s.fn for s in ONE.values() if s.fn)}
    answer = "return {tonumber(a[#a]), 'garbage'}"
    body = "\n".join(f"redis.register_function('{fn}', function(k, a) {answer} end)"
                     for fn in sorted(functions))
    with server.admin() as admin:
        admin.execute_command("FUNCTION", "LOAD", "REPLACE", f"#!lua name={name}\n{body}")


LIMITS = [Limit("gcra", "10/s", burst=10, name="a"), Limit("token-bucket", "5/s", name="b")]


def test_an_unreadable_reply_is_counted_and_reported_by_the_sync_store(
        server_factory: Callable[..., RedisServer]) -> None:
    # The docstring: on_error gets "every StoreError / StoreUnavailable the store raises"
    # and stats counts them; a reply that failed to parse reached neither.
    server = server_factory("redis")
    seen: list[StoreError] = []
    store = RedisStore.from_url(server.url, timeout=FUNCTIONAL_TIMEOUT, on_error=seen.append,
                                prefix=f"rk-edges-{uuid.uuid4().hex[:8]}:")
    try:
        store.decide([(lim, "k", 1.0) for lim in LIMITS], 0.0)  # (loads the library)
        answering_garbage(server)
        with pytest.raises(StoreError, match="unexpected reply") as raised:
            store.decide([(lim, "k", 1.0) for lim in LIMITS], 0.0)
        assert seen == [raised.value]
        assert store.stats.errors == 1
        assert store.breaker.state == "closed"
    finally:
        store.close()


async def test_an_unreadable_reply_is_counted_and_reported_by_the_asyncio_store(
        server_factory: Callable[..., RedisServer]) -> None:
    server = server_factory("redis")
    seen: list[StoreError] = []
    async with open_store(server, on_error=seen.append) as store:
        await store.adecide([(lim, "k", 1.0) for lim in LIMITS], 0.0)
        answering_garbage(server)
        with pytest.raises(StoreError, match="unexpected reply") as raised:
            await store.adecide([(lim, "k", 1.0) for lim in LIMITS], 0.0)
        assert seen == [raised.value]
        assert store.stats.errors == 1


def retained_bytes(memo: dict[Any, Any]) -> int:
    """What `memo`'s entries keep alive, measured (not the memo's own accounting): its keys
    and values, through the containers in them, each object once; not the objects of the
    policies (limits, rules, snapshots), which the memo shares with them."""
    seen: set[int] = set()
    total = 0
    todo: list[object] = [*memo.keys(), *memo.values()]
    while todo:
        obj = todo.pop()
        if id(obj) in seen or not isinstance(obj, (tuple, list, dict, str, bytes, int, float)):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, dict):
            todo += [*obj.keys(), *obj.values()]
        elif isinstance(obj, (tuple, list)):
            todo += obj
    return total


async def test_the_packed_command_memo_is_bounded_in_bytes(redis_server: RedisServer) -> None:
    # 10,000 distinct 53 KB /v1/check requests took `serve --store redis://` from 63 MB to
    # 1,023 MB: the memo was bounded by count alone. 700 distinct calls of ~50 KB each
    # (100 keys of ~500 characters) are 35 MB of packed bytes, and as much again of keys.
    limit = Limit("gcra", "1000/s", burst=1000)
    async with open_store(redis_server) as store:
        for call in range(700):
            checks = [(limit, f"{call:04}-{i:03}-" + "k" * 480, 1.0) for i in range(100)]
            decisions, _ = await store.adecide(checks, 0.0)
            assert all(d.allowed for d in decisions)
        memo = store._wire._packed
        assert memo is not None and len(memo) > 100  # (large calls are remembered too)
        assert retained_bytes(memo) <= 32 << 20
        assert retained_bytes(memo) <= memo.held <= memo.max_bytes  # (over, not under)


async def test_the_plan_memos_are_bounded_in_bytes() -> None:
    # The engine's memos of plans and of plain checks, by request: 10,000 requests of 53 KB
    # each held as much again, and more, of entries and the counter keys built from them.
    snap = parse_policies({"domains": {"d": {"descriptors": [{"key": "user", "limits": [
        {"algorithm": "gcra", "rate": "10/s"}, {"rate": "100/minute"}]}]}}})
    engine = Engine(lambda: snap, MemoryStore(), clock=ManualClock(0.0))
    for request in range(600):  # (each 60 descriptors of ~880 characters: ~53 KB)
        descriptors = [DescriptorRequest((("user", f"{request:04}-{i:03}-" + "u" * 870),))
                       for i in range(60)]
        assert (await engine.check("d", descriptors)).allowed
        engine.simple_checks(snap, "d", descriptors, 1.0)
    for memo in (engine._plans, engine._simple):
        assert len(memo) > 10  # (large requests are remembered too)
        assert retained_bytes(memo) <= 32 << 20
        assert retained_bytes(memo) <= memo.held <= memo.max_bytes  # (over, not under)
