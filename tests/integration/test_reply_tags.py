"""A script's reply identifies its call (issue 28 item 6): behind a proxy that answers one
command twice, every later reply on that connection is another call's. Each script call
carries a tag and its reply echoes it; a reply with another tag is `StoreUnavailable`, and
the connection it came on is closed, so no decision carries another call's numbers.

The proxy (`DoublingProxy`) forwards commands once each and, on every connection, sends
its `after`-th reply again in front of the next one. Each decision is on a key of its own
with a cost of its own, so its right answer is the pure function's on a fresh key
(`MemoryStore`, at the same client-clock instant) and any other call's answer differs.
Bounded by counts: a fixed number of decisions, no sleeps.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis.exceptions as rex

from ratekeeper import Decision, Limit, StoreError, StoreUnavailable
from ratekeeper.stores import MemoryStore
from ratekeeper.stores.redis import AsyncRedisStore, RedisStore
from ratekeeper.stores.redis._core import ReplyMismatch, next_tag, untagged
from tests.servers import RedisServer

LIMITS = [Limit("gcra", "1000/s", burst=100, name="g"),
          Limit("token-bucket", "500/s", burst=100, name="t")]
#: Decisions per test; the proxy doubles a reply once per connection, every AFTER replies.
DECISIONS = 240
AFTER = 12


def reply_end(buf: bytes, pos: int) -> int | None:
    """Where the RESP reply starting at `pos` ends, or None if `buf` does not hold it all."""
    nl = buf.find(b"\r\n", pos)
    if nl < 0:
        return None
    kind, head, end = buf[pos:pos + 1], buf[pos + 1:nl], nl + 2
    if kind in (b"+", b"-", b":", b"_", b",", b"#"):
        return end
    if kind in (b"$", b"!", b"="):
        n = int(head)
        if n < 0:
            return end
        return end + n + 2 if len(buf) >= end + n + 2 else None
    if kind in (b"*", b"~", b">", b"%"):
        n = int(head) * (2 if kind == b"%" else 1)
        for _ in range(max(n, 0)):
            found = reply_end(buf, end)
            if found is None:
                return None
            end = found
        return end
    raise AssertionError(f"not a RESP reply: {buf[pos:pos + 20]!r}")


class DoublingProxy:
    """A loopback TCP proxy to `upstream` (on a loop in a thread of its own) that, on every
    connection, sends its `after`-th reply a second time, in front of the next reply: from
    there on the connection's replies are shifted by one, each call reading the one before."""

    def __init__(self, upstream: tuple[str, int], after: int) -> None:
        self.upstream, self.after = upstream, after
        self.connections = self.doubled = 0
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._writers: list[asyncio.StreamWriter] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._handle, "127.0.0.1", 0), self.loop).result(10)
        self.port: int = self._server.sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        self._writers += [writer, up_writer]
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)

        async def commands() -> None:
            while data := await reader.read(65536):
                up_writer.write(data)
                await up_writer.drain()
            up_writer.close()

        async def replies() -> None:
            buf, count, held = b"", 0, None
            while data := await up_reader.read(65536):
                buf += data
                out, pos = [], 0
                while (end := reply_end(buf, pos)) is not None:
                    reply, pos = buf[pos:end], end
                    count += 1
                    if held is not None:  # the held reply again, in front of this one
                        out.append(held)
                        held = None
                        self.doubled += 1
                    out.append(reply)
                    if count == self.after:
                        held = reply
                buf = buf[pos:]
                writer.write(b"".join(out))
                await writer.drain()
            writer.close()

        try:
            await asyncio.gather(commands(), replies())
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()
            up_writer.close()

    async def _stop(self) -> None:
        self._server.close()
        for w in self._writers:
            w.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


@pytest.fixture
def proxy(redis_server: RedisServer) -> Iterator[DoublingProxy]:
    p = DoublingProxy(redis_server.address, AFTER)
    try:
        yield p
    finally:
        p.close()


def step(i: int) -> tuple[str, float, float]:
    """Decision i's key, cost and client-clock instant: a fresh key, and a cost that differs
    from its neighbours', so another call's reply gives other numbers."""
    return f"k{i}", float(1 + i % 37), 1000.0 + i / 8


def reference(i: int, composite: bool) -> list[Decision]:
    key, cost, now = step(i)
    memory = MemoryStore()
    if composite:
        return memory.decide([(lim, key, cost) for lim in LIMITS], now)[0]
    return [memory.decide_one(LIMITS[0], key, cost, now)]


def judge(outcomes: list[tuple[int, bool, Any]]) -> tuple[int, int]:
    """(right, unavailable) of `outcomes` (decision i, composite, its decisions or error);
    fails on any answer that is not decision i's own."""
    wrong = [(i, got) for i, composite, got in outcomes
             if not isinstance(got, StoreUnavailable) and got != reference(i, composite)]
    assert not wrong, f"{len(wrong)} answers carried another call's numbers: {wrong[:3]}"
    unavailable = sum(isinstance(got, StoreUnavailable) for _, _, got in outcomes)
    return len(outcomes) - unavailable, unavailable


def test_sync_store_behind_a_proxy_answering_twice_gives_no_other_calls_numbers(
        proxy: DoublingProxy) -> None:
    store = RedisStore.from_url(proxy.url, client_clock=True, breaker_failures=10**6,
                                prefix="rk-tags-sync:")
    bound = store.bind(LIMITS[0])
    outcomes: list[tuple[int, bool, Any]] = []
    try:
        for i in range(DECISIONS):
            key, cost, now = step(i)
            composite = i % 3 == 2  # check.lua (the composite path) beside the one-limit one
            got: list[Decision] | StoreError
            try:
                got = (store.decide([(lim, key, cost) for lim in LIMITS], now)[0] if composite
                       else [bound(key, cost, now)])
            except StoreError as e:
                got = e
            outcomes.append((i, composite, got))
        right, unavailable = judge(outcomes)
        assert proxy.doubled >= 1 and unavailable >= 1, (proxy.doubled, unavailable)
        assert right >= DECISIONS // 2
        # each mismatch was a breaker failure counted in the store's stats
        assert store.stats.unavailable >= unavailable
    finally:
        store.close()


def test_asyncio_store_behind_a_proxy_answering_twice_gives_no_other_calls_numbers(
        proxy: DoublingProxy) -> None:
    async def main() -> list[tuple[int, bool, Any]]:
        store = AsyncRedisStore.from_url(proxy.url, client_clock=True, breaker_failures=10**6,
                                         prefix="rk-tags-async:")
        bound = store.abind(LIMITS[0])

        async def one(i: int) -> tuple[int, bool, Any]:
            key, cost, now = step(i)
            composite = i % 3 == 2
            got: list[Decision] | StoreError
            try:
                got = ((await store.adecide([(lim, key, cost) for lim in LIMITS], now))[0]
                       if composite else [await bound(key, cost, now)])
            except StoreError as e:
                got = e
            return i, composite, got

        try:
            out: list[tuple[int, bool, Any]] = []
            for first in range(0, DECISIONS, 8):  # 8 at once: pipelined, coalesced calls
                out += await asyncio.gather(*(one(i) for i in range(first, first + 8)))
            return out
        finally:
            await store.aclose()

    right, unavailable = judge(asyncio.run(main()))
    assert proxy.doubled >= 1 and unavailable >= 1, (proxy.doubled, unavailable)
    assert right >= DECISIONS // 2


def test_a_reply_with_another_tag_is_unavailability_and_its_connection_is_closed(
        proxy: DoublingProxy) -> None:
    """The first doubled reply: the call that reads it fails as unavailable (counted, told
    to on_error, a breaker failure), its connection is closed, and the next call, on a new
    connection, gets its own answer."""
    seen: list[StoreError] = []
    store = RedisStore.from_url(proxy.url, client_clock=True, on_error=seen.append,
                                prefix="rk-tags-one:")
    bound = store.bind(LIMITS[0])
    try:
        outcomes: list[tuple[int, bool, Any]] = []
        failed: StoreError | None = None
        for i in range(2 * AFTER):  # (bounded: the AFTER-th reply is doubled)
            try:
                outcomes.append((i, False, [bound(*step(i))]))
            except StoreError as e:
                failed = e
                break
        judge(outcomes)  # every call before it had its own answer
        assert isinstance(failed, StoreUnavailable) and "not its call's" in str(failed)
        assert proxy.doubled == 1 and proxy.connections == 1
        assert seen == [failed] and store.stats.unavailable == 1
        assert not store.breaker.clean  # a breaker failure
        assert [bound(*step(i + 1))] == reference(i + 1, False)
        assert proxy.connections == 2  # the shifted connection was closed, a new one opened
    finally:
        store.close()


def test_untagged_takes_the_reply_out_of_its_own_tag_only() -> None:
    tag = next_tag()
    assert untagged([tag, [1, 99, b"0"]], tag) == [1, 99, b"0"]
    assert untagged([tag, b"1.5"], tag) == b"1.5"
    error = rex.ResponseError("RKSTATE bad state")
    assert untagged(error, tag) is error  # an error reply carries no tag
    for other in ([tag - 1, [1, 99, b"0"]], [1, 99, b"0", b"1", b"0"], b"garbage", [tag]):
        with pytest.raises(ReplyMismatch, match=f"tag {tag} expected"):
            untagged(other, tag)
    assert issubclass(ReplyMismatch, rex.ConnectionError)  # so: StoreUnavailable
    assert 0 < next_tag() < 2**31
