"""The scripts as Redis Functions (FCALL of `LIBRARY`) on Redis 7 and Valkey 8: they decide
exactly as the same scripts sent by EVALSHA, the library is loaded when it is missing (a
new server, FUNCTION FLUSH) and a server without functions gets EVALSHA.

No test waits for rate-limit time: decisions are made at explicit instants (client clock).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from ratekeeper import AsyncLimiter, Limit, Limiter, MemoryStore
from ratekeeper.stores._lua import CHECK, LIBRARY_NAME, ONE, REFUND
from ratekeeper.stores.redis import AsyncRedisStore, RedisStore
from ratekeeper.testing import ManualClock
from tests.integration.conftest import StoreTarget

ALGORITHMS = ["token-bucket", "gcra", "leaky-bucket", "fixed-window", "sliding-window-log",
              "sliding-window-counter"]


def limit(algorithm: str, name: str = "l", scope: str = "key") -> Limit:
    if "window" in algorithm:
        return Limit(algorithm, "5/s", name=name, scope=scope)
    return Limit(algorithm, "5/s", burst=4, name=name, scope=scope)


def fcalls(target: StoreTarget) -> tuple[int, int]:
    stats = target.admin.info("commandstats")
    return (int(stats.get("cmdstat_fcall", {}).get("calls", 0)),
            int(stats.get("cmdstat_evalsha", {}).get("calls", 0)))


def test_the_scripts_with_helpers_are_library_functions() -> None:
    """Every script that defines functions (check, refund, one.lua's) has one; the
    straight-line ones, which define none, stay EVALSHA scripts."""
    assert CHECK.fn and REFUND.fn and LIBRARY_NAME.startswith("ratekeeper_")
    assert {name for name, s in ONE.items() if s.fn} == {"sliding-window-log"}
    assert not any(s.fn for s in ONE.values() if s.straight)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_functions_decide_as_evalsha(standalone: StoreTarget, algorithm: str) -> None:
    """One trace (single limit, composite with a global limit, peeks, a reservation
    cancelled) on two namespaces of one server, one store calling the library's functions
    and one sending the scripts: equal decisions, equal states after every step."""
    fn_store = standalone.store(client_clock=True, prefix=f"rk-fn-{uuid.uuid4().hex[:6]}:")
    sha_store = standalone.store(client_clock=True, prefix=f"rk-sha-{uuid.uuid4().hex[:6]}:")
    sha_store._fcall = False
    one, glob = limit(algorithm), limit("sliding-window-counter", "all", "global")
    clock = ManualClock(1_000.0)
    pair = [(Limiter(one, s, clock=clock, failure="raise"),
             Limiter([one, glob], s, clock=clock, failure="raise")) for s in (fn_store,
                                                                              sha_store)]
    before = fcalls(standalone)
    for i in range(40):
        clock.set(1_000.0 + i * 0.09 - (0.3 if i == 20 else 0.0))  # once backwards
        key, cost = f"k{i % 3}", 1 + i % 2
        got = []
        for single, composite in pair:
            got.append((single.hit(key, cost), composite.hit(key + "c", cost),
                        composite.peek(key + "c")))
            r = composite.reserve(key + "r")
            if i % 4 == 0:
                r.cancel()
        assert got[0] == got[1], i
        assert fn_store.state(one, key) == sha_store.state(one, key), i
        assert fn_store.state(one, key + "r") == sha_store.state(one, key + "r"), i
    fcall, _ = fcalls(standalone)
    assert fcall - before[0] >= 40 * (3 if ONE[algorithm].fn else 2)
    assert fn_store._fcall and not sha_store._fcall


def test_a_flushed_library_is_loaded_again(standalone: StoreTarget) -> None:
    store = standalone.store(client_clock=True, prefix=f"rk-fn-{uuid.uuid4().hex[:6]}:")
    limiter = Limiter([limit("gcra"), limit("fixed-window", "w", "global")], store,
                      clock=ManualClock(5.0), failure="raise")
    assert limiter.hit("k").remaining == 3
    loads = store.stats.function_loads
    standalone.admin.execute_command("FUNCTION", "FLUSH")
    assert limiter.hit("k").remaining == 2
    assert store.stats.function_loads == loads + 1
    assert limiter.hit("k").remaining == 1
    assert store.stats.function_loads == loads + 1
    libraries = standalone.admin.execute_command("FUNCTION", "LIST", "LIBRARYNAME",
                                                 LIBRARY_NAME)
    assert len(libraries) == 1


def test_a_flushed_library_is_loaded_again_under_a_pipeline(standalone: StoreTarget) -> None:
    """48 concurrent composite decisions (one pipeline) after FUNCTION FLUSH: every one
    answered, the library loaded once. (Once: their error replies come in one read, so
    the pipeline is under the 16 KB the server reads at a time; 64 tagged calls are not.)"""

    async def main() -> None:
        store = AsyncRedisStore.from_url(standalone.url, client_clock=True,
                                         prefix=f"rk-fn-{uuid.uuid4().hex[:6]}:")
        try:
            limiter = AsyncLimiter([Limit("gcra", "100/s", burst=100),
                                    limit("sliding-window-log", "w", "global")], store,
                                   clock=ManualClock(5.0), failure="raise")
            await limiter.hit("warm")
            standalone.admin.execute_command("FUNCTION", "FLUSH")
            loads = store.stats.function_loads
            ds = await asyncio.gather(*[limiter.hit(f"k{i}") for i in range(48)])
            assert sum(d.allowed for d in ds) == 4  # the global log holds 5, 1 was taken
            assert store.stats.function_loads == loads + 1
            assert store.stats.pipelines >= 1
        finally:
            await store.aclose()

    asyncio.run(main())


@pytest.mark.parametrize("kind", ["redis", "valkey"])
def test_a_server_without_functions_gets_evalsha(server_factory: Callable[..., Any],
                                                 kind: str) -> None:
    """FCALL and FUNCTION renamed away (as on Redis < 7, or an ACL without them): the
    first call finds out, then every script goes by EVALSHA, sync and asyncio."""
    server = server_factory(kind, extra_args=["--rename-command", "FCALL", "",
                                              "--rename-command", "FUNCTION", ""])
    limits = [limit("leaky-bucket"), limit("fixed-window", "w", "global")]
    store = RedisStore.from_url(server.url, client_clock=True)
    try:
        memory = Limiter(limits, MemoryStore(), clock=ManualClock(5.0))
        limiter = Limiter(limits, store, clock=ManualClock(5.0), failure="raise")
        assert [limiter.hit("k") for _ in range(6)] == [memory.hit("k") for _ in range(6)]
        one = Limiter(limits[0], store, clock=ManualClock(5.0), failure="raise")
        assert one.hit("j") == Limiter(limits[0], clock=ManualClock(5.0)).hit("j")
        assert not store._fcall
        assert store.stats.function_loads == 0  # (no FUNCTION to load with)
    finally:
        store.close()

    async def main() -> None:
        astore = AsyncRedisStore.from_url(server.url, client_clock=True, prefix="a:")
        try:
            alimiter = AsyncLimiter(limits, astore, clock=ManualClock(5.0), failure="raise")
            ds = await asyncio.gather(*[alimiter.hit(f"k{i}") for i in range(8)])
            assert sum(d.allowed for d in ds) == 5  # the global window holds 5
            assert not astore._fcall
        finally:
            await astore.aclose()

    asyncio.run(main())
