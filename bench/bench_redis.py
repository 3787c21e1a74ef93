"""Side-by-side benchmark of Redis-backed rate limiters, reported as ratios to a ceiling.

This is a benchmark, not a test: it never fails on a slow number. It starts its own
``redis-server`` (free 127.0.0.1 port, ``--save "" --appendonly no``, temp dir; killed at the
end, even on error) and, in one process run, compares ``ratekeeper``'s Redis store with
``limits``, ``throttled-py`` and ``pyrate-limiter`` and with ``bare``: a plain ``EVALSHA``
loop on the same redis-py client running a small GCRA script -- the ceiling for "one atomic
script per decision, one round trip".

1. Sync, sequential: decisions/s on one hot key and on many keys, interleaved rounds (every
   contender runs one time-bounded batch per round, each between two ``bare`` batches, in
   an order that rotates); a batch's decisions/s divided by the mean of the two ``bare``
   batches around it; median over rounds (``x ceiling``: 1.00 = as fast as the bare loop).
2. Async, 64 concurrent tasks (``redis.asyncio``): the same, against a bare async EVALSHA
   loop run by 64 tasks. Coalescing concurrent decisions into pipelines can beat 1.00.
3. Cost per decision, measured on the server: round trips (``total_reads_processed`` of
   ``INFO stats``: one read event per request the client sends), server command calls
   (``INFO commandstats``; note it also counts the commands a Lua script runs) and, from a
   short ``MONITOR`` pass, the top-level commands the client sent.
4. Faults: (a) ``SIGSTOP`` the server for 3 s while one caller per library and setting keeps
   calling, then ``SIGCONT``: the longest single call, and whether calls resume; each
   library with its default client settings and with a 0.25 s socket timeout where it lets
   you set one; (b) ``SCRIPT FLUSH``, then a call: NOSCRIPT handled, or raised?
   (c) kill -9 the server and start it again on the same port: does the next call work?

``--script-instructions N`` measures instead what each of ratekeeper's single-limit scripts
costs the server, by counts rather than time: ``redis-server`` runs under callgrind
(valgrind), and for every algorithm, admitted and rejected (on a stored state), on the
server's clock and a client's, N ``Limiter.hit`` calls on 1,000 keys are counted: the
server's instructions per call. ``--src DIR`` picks the ratekeeper tree to measure (another
checkout's ``src``), so two trees can be compared on the same machine.

Run ``python bench/bench_redis.py --help`` for the options; ``bench/README.md`` ("Redis")
says how to read the output.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import importlib.metadata
import inspect
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "src"

RATE = 1_000_000  # per second: nearly every call is admitted, the admit path is measured
BURST = 1_000_000
TIMEOUT_S = 0.25  # the "short socket timeout" setting of the fault tests
CONCURRENCY = 64  # async tasks
CHUNK = 32  # sync calls between two clock reads
MONITOR_SYNC = 200  # decisions in the MONITOR pass (sync)
MONITOR_ASYNC = 640  # decisions in the MONITOR pass (async, 64 tasks)
FAULT_KEY = "fault"

# The ceiling's script: a GCRA on the server clock, as small as a real limiter's.
# KEYS[1] = state key (a float TAT, seconds); ARGV[1] = emission interval (s);
# ARGV[2] = burst tolerance (s). Reply: 1 admitted, 0 rejected.
BARE_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local new_tat = tat + tonumber(ARGV[1])
if new_tat - now > tonumber(ARGV[2]) then return 0 end
redis.call('SET', KEYS[1], string.format('%.6f', new_tat), 'PX',
           math.ceil((new_tat - now) * 1000) + 1)
return 1
"""
BARE_ARGS = (format(1 / RATE, ".9f"), format(BURST / RATE, ".9f"))

Hit = Callable[[str], bool]
AHit = Callable[[str], Awaitable[bool]]


class Skip(Exception):
    """A contender cannot run here (library missing, API not there yet, option unsupported)."""


# =========================================================================== the server


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """A private redis-server on a free loopback port, in a temp dir, stopped by pid."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.port = _free_port()
        self.dir = tempfile.mkdtemp(prefix="rk-bench-redis-")
        self.proc: subprocess.Popen[bytes] | None = None
        self.stopped = False  # SIGSTOPped by us
        self.version = "?"
        self.wrapper: list[str] = []  # a command the server runs under (valgrind ...)
        self.start_timeout = 10.0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        cmd = [*self.wrapper, self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
               "--save", "", "--appendonly", "no", "--dir", self.dir,
               "--daemonize", "no", "--protected-mode", "yes", "--loglevel", "warning"]
        log = open(os.path.join(self.dir, "server.log"), "ab")  # noqa: SIM115
        try:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            log.close()
        deadline = time.monotonic() + self.start_timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.binary} exited with {self.proc.returncode}; "
                                   f"see {self.dir}/server.log")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.binary} did not answer PING on port {self.port}")
            time.sleep(0.02)

    def freeze(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)
        self.stopped = True

    def thaw(self) -> None:
        if self.proc is not None and self.stopped:
            os.kill(self.proc.pid, signal.SIGCONT)
        self.stopped = False

    def kill(self) -> None:
        """SIGKILL, as a crash would (a stopped process dies of SIGKILL too)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self.proc = None
        self.stopped = False

    def restart(self) -> None:
        self.kill()
        self.start()

    def close(self) -> None:
        try:
            if self.proc is not None and self.proc.poll() is None:
                self.thaw()
                self.proc.terminate()
                try:
                    self.proc.wait(5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(5)
            self.proc = None
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def _find_server(explicit: str | None) -> str:
    for cand in (explicit, shutil.which("redis-server"), "/usr/bin/redis-server"):
        if cand and os.access(cand, os.X_OK):
            return cand
    raise SystemExit("redis-server not found (apt-get install redis-server, or --server PATH)")


# =========================================================================== contenders


@dataclass
class Handle:
    """One configured limiter: ``hit(key) -> admitted``."""

    hit: Hit
    close: Callable[[], None] = lambda: None
    # ratekeeper only: how many decisions its failure policy made (store unavailable)
    store_errors: Callable[[], int] | None = None


@dataclass
class AHandle:
    hit: AHit
    aclose: Callable[[], Awaitable[None]] | None = None
    store_errors: Callable[[], int] | None = None


@dataclass(frozen=True)
class Contender:
    name: str
    dist: str | None  # distribution, for the version line
    make: Callable[[str, str, float | None], Handle] | None  # (url, prefix, timeout)
    amake: Callable[[str, str, float | None], Awaitable[AHandle]] | None
    note: str = ""


def _need(module: str, pip_name: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise Skip(f"{pip_name} not installed (pip install {pip_name}): {exc}") from exc


def _redis_kwargs(timeout: float | None) -> dict[str, Any]:
    return {} if timeout is None else {"socket_timeout": timeout}


async def _aclose_client(client: Any) -> None:
    closer = getattr(client, "aclose", None) or getattr(client, "close", None)
    if closer is not None:
        res = closer()
        if inspect.isawaitable(res):
            await res


# --------------------------------------------------------------------------- bare


def make_bare(url: str, prefix: str, timeout: float | None) -> Handle:
    import redis  # noqa: PLC0415

    client = redis.Redis.from_url(url, **_redis_kwargs(timeout))
    sha = client.script_load(BARE_LUA)
    evalsha = client.evalsha
    a1, a2 = BARE_ARGS

    def hit(key: str) -> bool:
        return evalsha(sha, 1, key, a1, a2) == 1  # type: ignore[no-any-return]

    return Handle(hit, client.close)


async def amake_bare(url: str, prefix: str, timeout: float | None) -> AHandle:
    import redis.asyncio as aredis  # noqa: PLC0415

    client = aredis.Redis.from_url(url, **_redis_kwargs(timeout))
    sha = await client.script_load(BARE_LUA)
    evalsha = client.evalsha
    a1, a2 = BARE_ARGS

    async def hit(key: str) -> bool:
        return await evalsha(sha, 1, key, a1, a2) == 1  # type: ignore[no-any-return]

    return AHandle(hit, partial(_aclose_client, client))


# --------------------------------------------------------------------------- limits

_LIMITS_STRATEGIES = {"fixed-window": "FixedWindowRateLimiter",
                      "moving-window": "MovingWindowRateLimiter"}


def _limits_maker(strategy: str) -> Callable[[str, str, float | None], Handle]:
    def make(url: str, prefix: str, timeout: float | None) -> Handle:
        _need("limits", "limits[redis]")
        from limits import RateLimitItemPerSecond, strategies  # noqa: PLC0415
        from limits.storage import RedisStorage  # noqa: PLC0415

        # Extra keyword arguments go to redis.from_url, so a socket timeout can be set.
        storage = RedisStorage(url, key_prefix=prefix.rstrip(":"), **_redis_kwargs(timeout))
        limiter = getattr(strategies, _LIMITS_STRATEGIES[strategy])(storage)
        item = RateLimitItemPerSecond(RATE)
        return Handle(partial(limiter.hit, item), storage.storage.close)

    return make


def _limits_amaker(strategy: str) -> Callable[[str, str, float | None], Awaitable[AHandle]]:
    async def amake(url: str, prefix: str, timeout: float | None) -> AHandle:
        _need("limits", "limits[async-redis]")
        from limits import RateLimitItemPerSecond  # noqa: PLC0415
        from limits.aio import strategies  # noqa: PLC0415
        from limits.aio.storage import RedisStorage  # noqa: PLC0415

        # The default async implementation is coredis; pick redis-py (same client as bare).
        storage = RedisStorage("async+" + url, implementation="redispy",
                               key_prefix=prefix.rstrip(":"), **_redis_kwargs(timeout))
        limiter = getattr(strategies, _LIMITS_STRATEGIES[strategy])(storage)
        item = RateLimitItemPerSecond(RATE)

        async def hit(key: str) -> bool:
            return await limiter.hit(item, key)

        return AHandle(hit, partial(_aclose_client, storage.bridge.storage))

    return amake


# --------------------------------------------------------------------------- throttled-py


def _throttled_options(timeout: float | None, is_async: bool) -> dict[str, Any]:
    # throttled-py caches connection pools process-wide, keyed by class and URL only: a
    # second store with another SOCKET_TIMEOUT would silently share the first one's pool.
    # REUSE_CONNECTION=False gives the store its own pool (and is the documented cure
    # for async pools bound to an old event loop).
    opts: dict[str, Any] = {}
    if timeout is not None:
        opts["SOCKET_TIMEOUT"] = timeout
    if timeout is not None or is_async:
        opts["REUSE_CONNECTION"] = False
    return opts


def _throttled_maker(using: str) -> Callable[[str, str, float | None], Handle]:
    def make(url: str, prefix: str, timeout: float | None) -> Handle:
        _need("throttled", "throttled-py[redis]")
        from throttled import RedisStore, Throttled  # noqa: PLC0415

        store = RedisStore(server=url, options=_throttled_options(timeout, False))
        throttle = Throttled(using=using, quota=f"{RATE}/s burst {BURST}", store=store)
        limit = throttle.limit

        def hit(key: str) -> bool:
            return not limit(key).limited

        def close() -> None:
            if timeout is not None:  # its own pool; the shared default pool stays
                store._backend.get_client().close()

        return Handle(hit, close)

    return make


def _throttled_amaker(using: str) -> Callable[[str, str, float | None], Awaitable[AHandle]]:
    async def amake(url: str, prefix: str, timeout: float | None) -> AHandle:
        _need("throttled", "throttled-py[redis]")
        from throttled.asyncio import RedisStore, Throttled  # noqa: PLC0415

        store = RedisStore(server=url, options=_throttled_options(timeout, True))
        throttle = Throttled(using=using, quota=f"{RATE}/s burst {BURST}", store=store)
        limit = throttle.limit

        async def hit(key: str) -> bool:
            return not (await limit(key)).limited

        async def aclose() -> None:
            await _aclose_client(store._backend.get_client())

        return AHandle(hit, aclose)

    return amake


# --------------------------------------------------------------------------- pyrate-limiter


# pyrate-limiter trims a RedisBucket's sorted set only from a background "leaker" (a thread,
# or a task on the caller's event loop) that runs one ZREMRANGEBYSCORE per bucket, one bucket
# after the other, every 10 s. With thousands of keys it runs for seconds at a time and takes
# its share of the GIL, the event loop and the server from whoever is being measured, so the
# throughput phases register RedisBuckets without it (its cost is reported apart, see the
# README); the fault phase keeps it, as deployed. StateBuckets (GCRA) have nothing to trim.
PYRATE_LOG_LEAKER = True


def _pyrate_factory(kind: str, client: Any, prefix: str, is_async: bool) -> Any:
    """Per-name routing as in pyrate-limiter's README: one Redis-backed bucket per key."""
    _need("pyrate_limiter", "pyrate-limiter")
    from pyrate_limiter import (  # noqa: PLC0415
        GCRA,
        BucketFactory,
        Rate,
        RateItem,
        RedisBucket,
        RedisStateStore,
        StateBucket,
        WallClock,
    )

    rates = [Rate(RATE, 1000, burst=BURST)]  # per 1000 ms

    class PerKeyFactory(BucketFactory):  # type: ignore[misc]
        def __init__(self) -> None:
            self.clock = WallClock()  # shared state across machines: wall clock, ms
            self.buckets: dict[str, Any] = {}

        def wrap_item(self, name: str, weight: int = 1) -> Any:
            return RateItem(name, self.clock.now(), weight=weight)

        def _new(self, name: str) -> Any:
            if kind == "log":
                # init() runs SCRIPT LOAD (a round trip per new key) and keeps the sha.
                return RedisBucket.init(rates, client, f"{prefix}{name}")
            store = RedisStateStore(client, f"{prefix}{name}")
            return StateBucket(rates, GCRA(), store)

        def _keep(self, name: str, bucket: Any) -> Any:
            if kind != "log" or PYRATE_LOG_LEAKER:
                self.schedule_leak(bucket)  # what create() does: register with the Leaker
            self.buckets[name] = bucket
            return bucket

        def get(self, item: Any) -> Any:
            bucket = self.buckets.get(item.name)
            if bucket is not None:
                return bucket
            made = self._new(item.name)
            if inspect.isawaitable(made):

                async def later() -> Any:
                    return self._keep(item.name, await made)

                return later()
            return self._keep(item.name, made)

    return PerKeyFactory()


def _pyrate_maker(kind: str) -> Callable[[str, str, float | None], Handle]:
    def make(url: str, prefix: str, timeout: float | None) -> Handle:
        _need("pyrate_limiter", "pyrate-limiter")
        import redis  # noqa: PLC0415
        from pyrate_limiter import Limiter  # noqa: PLC0415

        client = redis.Redis.from_url(url, **_redis_kwargs(timeout))  # the caller's client
        limiter = Limiter(_pyrate_factory(kind, client, prefix, False))
        # blocking=True (the default) would sleep on a rejection.
        acquire: Hit = partial(limiter.try_acquire, blocking=False)

        def close() -> None:
            limiter.close()
            client.close()

        return Handle(acquire, close)

    return make


def _pyrate_amaker(kind: str) -> Callable[[str, str, float | None], Awaitable[AHandle]]:
    async def amake(url: str, prefix: str, timeout: float | None) -> AHandle:
        _need("pyrate_limiter", "pyrate-limiter")
        import redis.asyncio as aredis  # noqa: PLC0415
        from pyrate_limiter import Limiter  # noqa: PLC0415

        client = aredis.Redis.from_url(url, **_redis_kwargs(timeout))
        limiter = Limiter(_pyrate_factory(kind, client, prefix, True))

        async def hit(key: str) -> bool:
            return await limiter.try_acquire_async(key, blocking=False)

        async def aclose() -> None:
            # close() sets the Leaker's stop event and drops it; its task sleeps on (10 s)
            leaker = getattr(limiter.bucket_factory, "_leaker", None)
            task = getattr(leaker, "aio_leak_task", None)
            limiter.close()
            if task is not None:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            await _aclose_client(client)

        return AHandle(hit, aclose)

    return amake


# --------------------------------------------------------------------------- ratekeeper


def _import_ratekeeper_redis() -> tuple[Any, Any]:
    # Benchmark the working tree, not whatever may be installed.
    if SRC.is_dir() and str(SRC) not in sys.path:
        sys.path.insert(0, str(SRC))
    try:
        rk = importlib.import_module("ratekeeper")
        rkr = importlib.import_module("ratekeeper.stores.redis")
        for mod, name in ((rk, "Limit"), (rk, "Limiter"), (rk, "AsyncLimiter"),
                          (rkr, "RedisStore"), (rkr, "AsyncRedisStore")):
            getattr(mod, name)
    except (ImportError, AttributeError) as exc:
        raise Skip(
            f"ratekeeper Redis store not importable yet ({type(exc).__name__}: {exc}); "
            "expected `from ratekeeper.stores.redis import RedisStore, AsyncRedisStore`"
        ) from exc
    return rk, rkr


def _rk_limit(rk: Any, algorithm: str) -> Any:
    if algorithm in ("gcra", "token-bucket"):
        return rk.Limit(algorithm, f"{RATE}/s", burst=BURST)
    return rk.Limit(algorithm, f"{RATE}/s")  # window algorithms take no burst


def _rk_store(cls: Any, url: str, prefix: str, timeout: float | None, is_async: bool) -> Any:
    """``Store.from_url(url, prefix=...)``; the short-timeout variant sets the store's own
    per-decision timeout when it has one, else passes a client with that socket timeout."""
    if timeout is None:
        return cls.from_url(url, prefix=prefix)
    params = inspect.signature(cls.from_url).parameters
    for name in ("timeout", "socket_timeout"):
        if name in params:
            return cls.from_url(url, prefix=prefix, **{name: timeout})
    import redis  # noqa: PLC0415
    import redis.asyncio as aredis  # noqa: PLC0415

    client = (aredis.Redis if is_async else redis.Redis).from_url(url, socket_timeout=timeout)
    return cls(client, prefix=prefix)


def _rk_maker(algorithm: str) -> Callable[[str, str, float | None], Handle]:
    def make(url: str, prefix: str, timeout: float | None) -> Handle:
        rk, rkr = _import_ratekeeper_redis()
        store = _rk_store(rkr.RedisStore, url, prefix, timeout, False)
        limiter = rk.Limiter(_rk_limit(rk, algorithm), store)
        rk_hit = limiter.hit

        def hit(key: str) -> bool:
            return rk_hit(key).allowed  # type: ignore[no-any-return]

        def close() -> None:
            closer = getattr(store, "close", None)
            if closer is not None:
                closer()

        return Handle(hit, close, lambda: int(limiter.store_errors))

    return make


def _rk_amaker(algorithm: str) -> Callable[[str, str, float | None], Awaitable[AHandle]]:
    async def amake(url: str, prefix: str, timeout: float | None) -> AHandle:
        rk, rkr = _import_ratekeeper_redis()
        store = _rk_store(rkr.AsyncRedisStore, url, prefix, timeout, True)
        limiter = rk.AsyncLimiter(_rk_limit(rk, algorithm), store)
        rk_hit = limiter.hit

        async def hit(key: str) -> bool:
            return (await rk_hit(key)).allowed  # type: ignore[no-any-return]

        async def aclose() -> None:
            await _aclose_client(store)

        return AHandle(hit, aclose, lambda: int(limiter.store_errors))

    return amake


CONTENDERS: list[Contender] = [
    Contender("bare", None, make_bare, amake_bare, "EVALSHA loop, GCRA script (ceiling)"),
    Contender("limits fixed-window", "limits", _limits_maker("fixed-window"),
              _limits_amaker("fixed-window")),
    Contender("limits moving-window", "limits", _limits_maker("moving-window"),
              _limits_amaker("moving-window")),
    Contender("throttled gcra", "throttled-py", _throttled_maker("gcra"),
              _throttled_amaker("gcra")),
    Contender("throttled token-bucket", "throttled-py", _throttled_maker("token_bucket"),
              _throttled_amaker("token_bucket")),
    Contender("pyrate RedisBucket", "pyrate-limiter", _pyrate_maker("log"),
              _pyrate_amaker("log"), "sliding log in a ZSET"),
    Contender("pyrate gcra RedisState", "pyrate-limiter", _pyrate_maker("gcra"),
              _pyrate_amaker("gcra"), "StateBucket(GCRA) on RedisStateStore"),
    Contender("ratekeeper gcra", "ratekeeper", _rk_maker("gcra"), _rk_amaker("gcra")),
    Contender("ratekeeper token-bucket", "ratekeeper", _rk_maker("token-bucket"),
              _rk_amaker("token-bucket")),
    Contender("ratekeeper sliding-log", "ratekeeper", _rk_maker("sliding-window-log"),
              _rk_amaker("sliding-window-log")),
]
BY_NAME = {c.name: c for c in CONTENDERS}


def _slug(name: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in name.lower())


# =========================================================================== server counters


@dataclass
class Snap:
    reads: int
    calls: dict[str, int]
    usec: dict[str, int]


_SCRIPT_CMDS = ("eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro")


def snapshot(admin: Any) -> Snap:
    info = admin.execute_command("INFO", "stats", "commandstats")
    stats = {k[len("cmdstat_"):]: v for k, v in info.items() if k.startswith("cmdstat_")}
    return Snap(int(info["total_reads_processed"]),
                {cmd: int(v["calls"]) for cmd, v in stats.items()},
                {cmd: int(v["usec"]) for cmd, v in stats.items()})


def delta(a: Snap, b: Snap) -> tuple[int, int, int]:
    """(read events, command calls, microseconds spent running scripts) between two
    snapshots, less the admin's INFO."""
    reads = b.reads - a.reads - 1  # the second INFO's own read
    calls = sum(n - a.calls.get(cmd, 0) for cmd, n in b.calls.items() if cmd != "info")
    usec = sum(b.usec.get(cmd, 0) - a.usec.get(cmd, 0) for cmd in _SCRIPT_CMDS)
    return reads, calls, usec


class Monitor:
    """A MONITOR connection that tells top-level commands from those a Lua script runs."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.sendall(b"MONITOR\r\n")
        ok = b""
        while not ok.endswith(b"\r\n"):  # +OK: monitoring is on before anything is sent
            chunk = self.sock.recv(5 - len(ok) if len(ok) < 5 else 1)
            if not chunk:
                raise RuntimeError("MONITOR connection closed")
            ok += chunk
        if ok != b"+OK\r\n":
            raise RuntimeError(f"MONITOR answered {ok!r}")
        self.lock = threading.Lock()
        self.top: Counter[str] = Counter()
        self.lua = 0
        self.seen: set[str] = set()
        self.cond = threading.Condition(self.lock)
        self.thread = threading.Thread(target=self._read, daemon=True, name="bench-monitor")
        self.thread.start()

    def _read(self) -> None:
        buf = b""
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except OSError:
                return
            if not data:
                return
            buf += data
            *lines, buf = buf.split(b"\r\n")
            with self.lock:
                for line in lines:
                    self._parse(line)
                self.cond.notify_all()

    def _parse(self, line: bytes) -> None:
        lb, rb = line.find(b"["), line.find(b"]")
        if not line.startswith(b"+") or lb < 0 or rb < 0 or line == b"+OK":
            return
        origin = line[lb + 1:rb].partition(b" ")[2]
        rest = line[rb + 2:]
        cmd = rest[1:rest.find(b'"', 1)].decode("ascii", "replace").lower()
        if cmd == "echo":
            self.seen.add(rest.decode("ascii", "replace"))
        elif origin == b"lua":
            self.lua += 1
        elif cmd != "info":
            self.top[cmd] += 1

    def reset(self) -> None:
        with self.lock:
            self.top.clear()
            self.lua = 0

    def sync(self, admin: Any) -> tuple[Counter[str], int]:
        """Wait until everything sent before now has been read; return the counts."""
        token = f"rk-bench-{uuid.uuid4().hex}"
        admin.echo(token)
        with self.cond:
            ok = self.cond.wait_for(lambda: any(token in s for s in self.seen), timeout=30)
            if not ok:
                raise RuntimeError("MONITOR stream fell behind")
            return Counter(self.top), self.lua

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


# =========================================================================== throughput


@dataclass
class Row:
    name: str
    skipped: str | None = None
    rates: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    rt: list[float] = field(default_factory=list)  # read events per decision, per round
    calls: list[float] = field(default_factory=list)  # commandstats calls per decision
    usec: list[float] = field(default_factory=list)  # server script time per decision
    cpu: list[float] = field(default_factory=list)  # client process CPU us per decision
    decisions: int = 0
    admitted: int = 0
    # MONITOR pass (hot key only)
    mon_cmds: float | None = None
    mon_lua: float | None = None
    mon_detail: str | None = None

    def med(self, xs: list[float]) -> float | None:
        return statistics.median(xs) if xs else None

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name, "skipped": self.skipped,
            "decisions_per_s": self.med(self.rates), "x_ceiling": self.med(self.ratios),
            "round_trips_per_decision": self.med(self.rt),
            "server_calls_per_decision": self.med(self.calls),
            "server_script_usec_per_decision": self.med(self.usec),
            "client_cpu_usec_per_decision": self.med(self.cpu),
            "client_commands_per_decision": self.mon_cmds,
            "in_script_calls_per_decision": self.mon_lua,
            "commands": self.mon_detail,
            "admitted_fraction": self.admitted / self.decisions if self.decisions else None,
            "rounds": {"decisions_per_s": self.rates, "x_ceiling": self.ratios},
        }


@dataclass
class Scenario:
    short: str
    label: str
    many: bool


def _keys(prefix: str, many: bool, n_keys: int) -> list[str]:
    if not many:
        return [f"{prefix}hot"]
    return [f"{prefix}u{i}" for i in range(n_keys)]


def _fmt_detail(top: Counter[str], n: int) -> str:
    return ", ".join(f"{cmd} {cnt / n:.2f}" for cmd, cnt in top.most_common()) or "-"


def _schedule(names: list[str], r: int) -> list[str]:
    """Round `r`: bare, then every other contender each followed by bare (A-B-A), in an
    order that rotates from round to round."""
    others = [n for n in names if n != "bare"]
    k = r % max(1, len(others))
    others = others[k:] + others[:k]
    if "bare" not in names:
        return others
    seq = ["bare"]
    for name in others:
        seq += [name, "bare"]
    return seq


class Pairer:
    """x ceiling of one batch = its rate / the mean rate of the bare batches around it."""

    def __init__(self, rows: dict[str, Row]) -> None:
        self.rows = rows
        self.last_bare: float | None = None
        self.pending: tuple[str, float] | None = None

    def add(self, name: str, rate: float | None) -> None:
        if name != "bare":
            self.pending = None if rate is None else (name, rate)
            return
        if self.pending is not None and self.last_bare and rate:
            other, r = self.pending
            self.rows[other].ratios.append(r / ((self.last_bare + rate) / 2))
        self.pending = None
        self.last_bare = rate


def _finish(rows: dict[str, Row]) -> None:
    bare = rows.get("bare")
    if bare is not None and bare.rates:
        bare.ratios = [1.0]


def run_sync(sc: Scenario, contenders: list[Contender], url: str, admin: Any, port: int,
             rounds: int, batch_s: float, n_keys: int) -> list[Row]:
    rows = {c.name: Row(c.name) for c in contenders}
    live: dict[str, tuple[Handle, list[list[str]]]] = {}
    for c in contenders:
        row = rows[c.name]
        if c.make is None:
            row.skipped = "no sync API"
            continue
        prefix = f"s-{sc.short}-{_slug(c.name)}:"
        keys = _keys(prefix, sc.many, n_keys)
        try:
            h = c.make(url, prefix, None)
            for k in keys if sc.many else keys * 64:  # warm: every key exists, scripts loaded
                h.hit(k)
        except Skip as exc:
            row.skipped = str(exc)
            continue
        except Exception as exc:
            row.skipped = f"failed to start: {type(exc).__name__}: {exc}"
            continue
        if not sc.many:
            keys = keys * CHUNK
        chunks = [keys[i:i + CHUNK] for i in range(0, len(keys), CHUNK)]
        live[c.name] = (h, chunks)
        print(f"    ready: {c.name}", file=sys.stderr, flush=True)

    pos = dict.fromkeys(live, 0)
    perf = time.perf_counter
    pairer = Pairer(rows)
    for r in range(rounds):
        for name in _schedule(list(live), r):
            if name not in live:
                continue
            h, chunks = live[name]
            hit = h.hit
            i, n, ok = pos[name], 0, 0
            s0 = snapshot(admin)
            try:
                c0 = time.process_time()
                t0 = perf()
                deadline = t0 + batch_s
                while True:
                    ok += sum(map(hit, chunks[i]))
                    n += len(chunks[i])
                    i = i + 1 if i + 1 < len(chunks) else 0
                    if perf() >= deadline:
                        break
                dt = perf() - t0
                cpu = time.process_time() - c0
            except Exception as exc:
                rows[name].skipped = f"raised mid-run: {type(exc).__name__}: {exc}"
                del live[name]
                pairer.add(name, None)
                continue
            reads, calls, usec = delta(s0, snapshot(admin))
            pos[name] = i
            pairer.add(name, n / dt)
            row = rows[name]
            row.rates.append(n / dt)
            row.rt.append(reads / n)
            row.calls.append(calls / n)
            row.usec.append(usec / n)
            row.cpu.append(cpu / n * 1e6)
            row.decisions += n
            row.admitted += ok
        print(f"    round {r + 1}/{rounds} done", file=sys.stderr, flush=True)

    if not sc.many and live:  # MONITOR pass: which commands does the client send?
        mon = Monitor(port)  # only now: MONITOR slows the server down
        try:
            for name, (h, chunks) in live.items():
                keys = chunks[0]
                mon.reset()
                for j in range(MONITOR_SYNC):
                    h.hit(keys[j % len(keys)])
                top, lua = mon.sync(admin)
                row = rows[name]
                row.mon_cmds = sum(top.values()) / MONITOR_SYNC
                row.mon_lua = lua / MONITOR_SYNC
                row.mon_detail = _fmt_detail(top, MONITOR_SYNC)
        finally:
            mon.close()

    for h, _ in live.values():
        with contextlib.suppress(Exception):
            h.close()
    _finish(rows)
    return [rows[c.name] for c in contenders]


async def _async_batch(hit: AHit, keys: list[str], budget_s: float | None,
                       count: int | None) -> tuple[int, int, float]:
    """64 tasks call ``hit`` until the time budget or the total count is spent."""
    perf = time.perf_counter
    n_keys = len(keys)
    t0 = perf()
    deadline = t0 + budget_s if budget_s is not None else float("inf")
    per_task = -(-count // CONCURRENCY) if count is not None else None

    async def worker(j: int) -> tuple[int, int]:
        n = ok = 0
        i = j % n_keys
        while perf() < deadline and (per_task is None or n < per_task):
            ok += await hit(keys[i])
            n += 1
            i += CONCURRENCY
            if i >= n_keys:
                i %= n_keys
        return n, ok

    done = await asyncio.gather(*(worker(j) for j in range(CONCURRENCY)))
    dt = perf() - t0
    return sum(d[0] for d in done), sum(d[1] for d in done), dt


async def run_async(sc: Scenario, contenders: list[Contender], url: str, admin: Any,
                    port: int, rounds: int, batch_s: float, n_keys: int) -> list[Row]:
    rows = {c.name: Row(c.name) for c in contenders}
    live: dict[str, tuple[AHandle, list[str]]] = {}
    for c in contenders:
        row = rows[c.name]
        if c.amake is None:
            row.skipped = "no async API"
            continue
        prefix = f"a-{sc.short}-{_slug(c.name)}:"
        keys = _keys(prefix, sc.many, n_keys)
        try:
            h = await c.amake(url, prefix, None)
            await _async_batch(h.hit, keys, None, len(keys) if sc.many else CONCURRENCY * 4)
        except Skip as exc:
            row.skipped = str(exc)
            continue
        except Exception as exc:
            row.skipped = f"failed to start: {type(exc).__name__}: {exc}"
            continue
        live[c.name] = (h, keys)
        print(f"    ready: {c.name}", file=sys.stderr, flush=True)

    pairer = Pairer(rows)
    for r in range(rounds):
        for name in _schedule(list(live), r):
            if name not in live:
                continue
            h, keys = live[name]
            s0 = snapshot(admin)
            try:
                c0 = time.process_time()
                n, ok, dt = await _async_batch(h.hit, keys, batch_s, None)
                cpu = time.process_time() - c0
            except Exception as exc:
                rows[name].skipped = f"raised mid-run: {type(exc).__name__}: {exc}"
                del live[name]
                pairer.add(name, None)
                continue
            reads, calls, usec = delta(s0, snapshot(admin))
            pairer.add(name, n / dt)
            row = rows[name]
            row.rates.append(n / dt)
            row.rt.append(reads / n)
            row.calls.append(calls / n)
            row.usec.append(usec / n)
            row.cpu.append(cpu / n * 1e6)
            row.decisions += n
            row.admitted += ok
        print(f"    round {r + 1}/{rounds} done", file=sys.stderr, flush=True)

    if not sc.many and live:
        mon = Monitor(port)
        try:
            for name, (h, keys) in live.items():
                mon.reset()
                n, _, _ = await _async_batch(h.hit, keys, None, MONITOR_ASYNC)
                top, lua = mon.sync(admin)
                row = rows[name]
                row.mon_cmds = sum(top.values()) / n
                row.mon_lua = lua / n
                row.mon_detail = _fmt_detail(top, n)
        finally:
            mon.close()

    for h, _ in live.values():
        if h.aclose is not None:
            with contextlib.suppress(Exception):
                await h.aclose()
    _finish(rows)
    return [rows[c.name] for c in contenders]


# =========================================================================== faults


@dataclass
class Call:
    t0: float
    t1: float
    outcome: str  # "ok", "degraded", or "raised <Type>"


@dataclass
class FaultRow:
    name: str
    mode: str  # sync | async
    setting: str  # default | timeout 0.25s
    skipped: str | None = None
    calls: list[Call] = field(default_factory=list)
    in_flight: float | None = None  # start time of a call still running when we stopped
    freeze_max_s: float | None = None
    freeze_outcomes: dict[str, int] = field(default_factory=dict)
    resumed_after_s: float | None = None  # from SIGCONT to the end of the first ok call
    flush: list[str] = field(default_factory=list)
    restart: list[str] = field(default_factory=list)
    restart_first_s: float | None = None

    @property
    def label(self) -> str:
        return f"{self.name} [{self.mode}, {self.setting}]"

    def summary(self) -> dict[str, Any]:
        d = {k: v for k, v in vars(self).items() if k not in ("calls", "in_flight")}
        d["calls"] = [(round(c.t0, 4), round(c.t1, 4), c.outcome) for c in self.calls]
        return d


def _outcome_of(errors_before: int | None, store_errors: Callable[[], int] | None) -> str:
    if errors_before is not None and store_errors is not None and store_errors() > errors_before:
        return "degraded"
    return "ok"


def _call_sync(h: Handle, key: str) -> tuple[str, float, float]:
    before = h.store_errors() if h.store_errors else None
    t0 = time.perf_counter()
    try:
        h.hit(key)
        out = _outcome_of(before, h.store_errors)
    except Exception as exc:
        out = f"raised {type(exc).__name__}"
    return out, t0, time.perf_counter()


async def _call_async(h: AHandle, key: str) -> tuple[str, float, float]:
    before = h.store_errors() if h.store_errors else None
    t0 = time.perf_counter()
    try:
        await h.hit(key)
        out = _outcome_of(before, h.store_errors)
    except Exception as exc:
        out = f"raised {type(exc).__name__}"
    return out, t0, time.perf_counter()


class AioThread:
    """An event loop in a thread, so async callers run while the main thread steers."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True,
                                       name="bench-aio")
        self.thread.start()

    def run(self, coro: Awaitable[Any], timeout: float = 60) -> Any:
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)  # type: ignore[arg-type]
        try:
            return fut.result(timeout)
        except FutureTimeout:
            fut.cancel()
            raise

    def close(self) -> None:
        async def drain() -> None:  # libraries' background tasks (pyrate's leaker)
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            self.run(drain(), timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        if not self.thread.is_alive():
            self.loop.close()


def run_faults(server: RedisServer, admin: Any, contenders: list[Contender],
               freeze_s: float, settle_max_s: float) -> list[FaultRow]:
    aio = AioThread()
    url = server.url
    rows: list[FaultRow] = []
    sync_h: dict[int, Handle] = {}
    async_h: dict[int, AHandle] = {}
    settings = (("default", None), (f"timeout {TIMEOUT_S:g}s", TIMEOUT_S))
    try:
        # Every default-setting handle is built (and connected) before any short-timeout
        # one: throttled-py caches pools per URL process-wide, and a store made with
        # REUSE_CONNECTION=False replaces the cached pool for every store made after it.
        for setting, timeout in settings:
            for c in contenders:
                for mode in ("sync", "async"):
                    row = FaultRow(c.name, mode, setting)
                    rows.append(row)
                    prefix = f"f{len(rows)}-{_slug(c.name)}:"
                    try:
                        if mode == "sync":
                            if c.make is None:
                                raise Skip("no sync API")
                            hs = c.make(url, prefix, timeout)
                            hs.hit(prefix + FAULT_KEY)
                            sync_h[len(rows) - 1] = hs
                        else:
                            if c.amake is None:
                                raise Skip("no async API")
                            ha: AHandle = aio.run(c.amake(url, prefix, timeout))
                            aio.run(ha.hit(prefix + FAULT_KEY))
                            async_h[len(rows) - 1] = ha
                    except Skip as exc:
                        row.skipped = str(exc)
                    except Exception as exc:
                        row.skipped = f"failed to start: {type(exc).__name__}: {exc}"
        keys = {i: f"f{i + 1}-{_slug(rows[i].name)}:{FAULT_KEY}" for i in range(len(rows))}

        # ---- (a) SIGSTOP for freeze_s while every handle keeps calling
        print(f"  faults: SIGSTOP for {freeze_s:g}s with {len(sync_h)} sync and "
              f"{len(async_h)} async callers ...", file=sys.stderr, flush=True)
        stop = threading.Event()
        in_flight: dict[int, float] = {}

        def sync_caller(i: int, h: Handle) -> None:
            while not stop.is_set():
                in_flight[i] = time.perf_counter()
                out, t0, t1 = _call_sync(h, keys[i])
                in_flight.pop(i, None)
                rows[i].calls.append(Call(t0, t1, out))
                stop.wait(0.02)

        async def async_caller(i: int, h: AHandle) -> None:
            while not stop.is_set():
                in_flight[i] = time.perf_counter()
                out, t0, t1 = await _call_async(h, keys[i])
                in_flight.pop(i, None)
                rows[i].calls.append(Call(t0, t1, out))
                await asyncio.sleep(0.02)

        async def all_async() -> None:
            await asyncio.gather(*(async_caller(i, h) for i, h in async_h.items()))

        threads = [threading.Thread(target=sync_caller, args=(i, h), daemon=True)
                   for i, h in sync_h.items()]
        for t in threads:
            t.start()
        afut = asyncio.run_coroutine_threadsafe(all_async(), aio.loop)
        time.sleep(0.5)
        t_freeze = time.perf_counter()
        server.freeze()
        try:
            time.sleep(freeze_s)
        finally:
            server.thaw()
        t_thaw = time.perf_counter()
        live = [i for i in range(len(rows)) if i in sync_h or i in async_h]

        def resumed(i: int) -> bool:
            return any(c.t0 >= t_thaw and c.outcome == "ok" for c in rows[i].calls)

        deadline = t_thaw + settle_max_s
        while time.perf_counter() < deadline and not all(resumed(i) for i in live):
            time.sleep(0.05)
        time.sleep(0.2)
        stop.set()
        t_stop = time.perf_counter()
        for t in threads:
            t.join(max(0.1, settle_max_s))
        with contextlib.suppress(Exception):
            afut.result(max(0.1, settle_max_s))
        for i, t0 in list(in_flight.items()):
            rows[i].in_flight = t0
        for i in live:
            row = rows[i]
            during = [c for c in row.calls if c.t1 >= t_freeze and c.t0 <= t_thaw]
            durations = [c.t1 - c.t0 for c in row.calls]
            if row.in_flight is not None:
                durations.append(t_stop - row.in_flight)
            row.freeze_max_s = max(durations) if durations else None
            row.freeze_outcomes = dict(Counter(c.outcome for c in during))
            if row.in_flight is not None:
                row.freeze_outcomes["still blocked at the end"] = 1
            firsts = [c.t1 for c in row.calls if c.t0 >= t_thaw and c.outcome == "ok"]
            row.resumed_after_s = min(firsts) - t_thaw if firsts else None

        # ---- (b) SCRIPT FLUSH, then two calls
        print("  faults: SCRIPT FLUSH ...", file=sys.stderr, flush=True)
        for i in live:
            admin.script_flush()  # before each handle: nobody else reloads its script
            for _ in range(2):
                if i in sync_h:
                    out, _, _ = _call_sync(sync_h[i], keys[i])
                else:
                    out, _, _ = aio.run(_call_async(async_h[i], keys[i]))
                rows[i].flush.append(out)

        # ---- (c) kill -9, start again on the same port, then two calls
        print("  faults: restart ...", file=sys.stderr, flush=True)
        server.restart()
        for i in live:
            admin.script_flush()  # the restart emptied it; keep handles from sharing loads
            for k in range(2):
                if i in sync_h:
                    out, t0, t1 = _call_sync(sync_h[i], keys[i])
                else:
                    out, t0, t1 = aio.run(_call_async(async_h[i], keys[i]))
                rows[i].restart.append(out)
                if k == 0:
                    rows[i].restart_first_s = t1 - t0
    finally:
        server.thaw()
        for hs in sync_h.values():
            with contextlib.suppress(Exception):
                hs.close()
        for ha in async_h.values():
            if ha.aclose is not None:
                with contextlib.suppress(Exception):
                    aio.run(ha.aclose(), timeout=5)
        aio.close()
    return rows


# =========================================================================== output


def _versions() -> dict[str, str]:
    out: dict[str, str] = {}
    for dist in ("redis", "hiredis", "limits", "throttled-py", "pyrate-limiter", "ratekeeper"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = "not installed"
    try:
        _import_ratekeeper_redis()
        out["ratekeeper.stores.redis"] = "present"
    except Skip:
        out["ratekeeper.stores.redis"] = "missing"
    return out


def _table(headers: list[str], rows: list[list[str]], right: set[int]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        parts = [c.rjust(w) if i in right else c.ljust(w)
                 for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        return "  ".join(parts).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), sep, *(line(r) for r in rows)])


def _n(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def render_throughput(title: str, rows: list[Row], with_monitor: bool) -> str:
    headers = ["contender", "decisions/s", "x ceiling", "min-max x", "RT/dec", "calls/dec",
               "script us/dec", "client CPU us/dec"]
    if with_monitor:
        headers += ["cmds/dec", "in-script/dec", "client commands per decision (MONITOR)"]
    out_rows = []
    for r in rows:
        if r.skipped:
            out_rows.append([r.name, "skipped", *["-"] * (len(headers) - 2)])
            continue
        spread = f"{min(r.ratios):.2f}-{max(r.ratios):.2f}" if r.ratios else "-"
        cells = [r.name, _n(r.med(r.rates), ",.0f"), _n(r.med(r.ratios), ".2f"), spread,
                 _n(r.med(r.rt), ".3f"), _n(r.med(r.calls), ".2f"), _n(r.med(r.usec), ".1f"),
                 _n(r.med(r.cpu), ".0f")]
        if with_monitor:
            cells += [_n(r.mon_cmds, ".3f"), _n(r.mon_lua, ".2f"), r.mon_detail or "-"]
        if r.decisions and r.admitted != r.decisions:
            cells[0] += f" (admitted {100 * r.admitted / r.decisions:.1f}%)"
        out_rows.append(cells)
    right = set(range(1, len(headers))) - {len(headers) - 1 if with_monitor else -1}
    return f"== {title} ==\n" + _table(headers, out_rows, right)


def _outs(xs: list[str]) -> str:
    return " / ".join(xs) if xs else "-"


def _short(outcome: str) -> str:
    return outcome.removeprefix("raised ").replace("degraded", "failure policy")


def _verdict(outs: list[str]) -> str:
    if not outs:
        return "-"
    first, then = outs[0], outs[-1]
    if first == "ok":
        return "ok"
    if then == "ok":
        return f"{_short(first)} once, then ok"
    if first == then:
        return f"{_short(first)} on every call"
    return f"{_short(first)}, then {_short(then)}"


def render_fault_summary(rows: list[FaultRow], freeze_s: float) -> str:
    order = list(dict.fromkeys(r.name for r in rows))
    cell: dict[tuple[str, str, str], FaultRow] = {(r.name, r.mode, r.setting): r for r in rows}
    headers = ["library", "longest call: sync default / 0.25s, async default / 0.25s",
               "after SCRIPT FLUSH (sync / async)", "after kill -9 + restart (sync / async)"]
    out_rows = []
    for name in order:
        got = [cell.get((name, m, s)) for m in ("sync", "async")
               for s in ("default", f"timeout {TIMEOUT_S:g}s")]
        if all(g is None or g.skipped for g in got):
            out_rows.append([name, "skipped", "-", "-"])
            continue
        longest = [("-" if g is None or g.skipped else _n(g.freeze_max_s, ".2f")) for g in got]
        d = [cell.get((name, m, "default")) for m in ("sync", "async")]
        flush = " / ".join("-" if g is None or g.skipped else _verdict(g.flush) for g in d)
        restart = " / ".join("-" if g is None or g.skipped else _verdict(g.restart) for g in d)
        out_rows.append([name, f"{longest[0]} / {longest[1]}, {longest[2]} / {longest[3]}",
                         flush, restart])
    return (f"== Faults, summary (SIGSTOP {freeze_s:g}s; seconds) ==\n"
            + _table(headers, out_rows, set()))


def render_faults(rows: list[FaultRow], freeze_s: float) -> str:
    headers = ["library", "mode", "setting", "longest call s", "calls during freeze",
               "resumed", "SCRIPT FLUSH: 1st / 2nd", "restart: 1st / 2nd", "1st after restart s"]
    out_rows = []
    rank = {name: i for i, name in enumerate(dict.fromkeys(r.name for r in rows))}
    for r in sorted(rows, key=lambda r: (rank[r.name], r.mode != "sync", r.setting)):
        if r.skipped:
            out_rows.append([r.name, r.mode, r.setting, "skipped", "-", "-", "-", "-", "-"])
            continue
        during = ", ".join(f"{k} x{v}" for k, v in sorted(r.freeze_outcomes.items())) or "-"
        resumed = "no" if r.resumed_after_s is None else f"+{r.resumed_after_s:.2f}s"
        out_rows.append([r.name, r.mode, r.setting, _n(r.freeze_max_s, ".2f"), during,
                         resumed, _outs(r.flush), _outs(r.restart),
                         _n(r.restart_first_s, ".3f")])
    return (f"== Faults: SIGSTOP {freeze_s:g}s, SCRIPT FLUSH, kill -9 + restart ==\n"
            + _table(headers, out_rows, {3, 8}))


LEGEND = """\
x ceiling = a batch's decisions/s / the mean of the bare batches run just before and just
  after it (A-B-A), median over rounds (1.00 = as fast as a bare EVALSHA loop on the same
  client; min-max = spread over rounds). decisions/s = median over that contender's batches.
RT/dec = round trips per decision: server read events (INFO stats total_reads_processed)
  per decision; 1.000 for one request per decision, below 1 when requests are pipelined.
calls/dec = INFO commandstats calls per decision; counts the commands a Lua script runs too.
script us/dec = server time spent in EVAL/EVALSHA per decision (commandstats usec).
client CPU us/dec = this process's CPU time (all threads) per decision.
cmds/dec = top-level commands the client sent per decision (MONITOR, hot key), with the
  in-script calls beside it; background work (pyrate's leaker) shows up when it runs.
faults: ok = a real decision; degraded = ratekeeper's failure policy answered (fail-open
  by default) because the store was unavailable; raised X = the exception reached the
  caller. 'resumed' = time from SIGCONT to the end of the first ok call that began after."""


# =========================================================================== main


#: (algorithm, limit arguments, outcome) of `script_instructions`: every key is stored once
#: first, so a limit of one per minute then rejects on a stored state.
SCRIPT_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("gcra", {"rate": "1000/s", "burst": 1000}, "admit"),
    ("gcra", {"rate": "1/minute"}, "reject"),
    ("token-bucket", {"rate": "1000/s", "burst": 1000}, "admit"),
    ("token-bucket", {"rate": "1/minute"}, "reject"),
    ("fixed-window", {"rate": "1000000/minute"}, "admit"),
    ("fixed-window", {"rate": "1/minute"}, "reject"),
    ("leaky-bucket", {"rate": "1000r/s", "burst": 1000}, "admit"),
    ("leaky-bucket", {"rate": "1r/m"}, "reject"),
    ("sliding-window-counter", {"rate": "1000000/minute"}, "admit"),
    ("sliding-window-counter", {"rate": "1/minute"}, "reject"),
    ("sliding-window-log", {"rate": "1000000/minute"}, "admit"),
    ("sliding-window-log", {"rate": "1/minute"}, "reject"),
]


def _callgrind_total(path: Path) -> int | None:
    """A callgrind dump's instruction total (None while it is still being written)."""
    try:
        text = path.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    return None


def script_instructions(binary: str, calls: int) -> list[dict[str, Any]]:
    """The server's instructions per single-limit decision (see the module docstring)."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("--script-instructions needs valgrind (apt install valgrind)")
    import redis  # noqa: PLC0415

    rk, rkr = _import_ratekeeper_redis()
    from ratekeeper.testing import ManualClock  # noqa: PLC0415

    out_dir = Path(tempfile.mkdtemp(prefix="rk-bench-callgrind-"))
    server = RedisServer(binary)
    # (counting off until `count` turns it on; a server under callgrind starts slowly)
    server.wrapper = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                      f"--callgrind-out-file={out_dir}/cg-%p.out"]
    server.start_timeout = 120.0

    def count(pid: int, work: Callable[[], None]) -> int:
        subprocess.run(["callgrind_control", "-z", str(pid)], capture_output=True, check=True)
        subprocess.run(["callgrind_control", "-i", "on", str(pid)], capture_output=True,
                       check=True)
        try:
            work()
        finally:
            subprocess.run(["callgrind_control", "-i", "off", str(pid)], capture_output=True,
                           check=True)
        before = set(out_dir.glob(f"cg-{pid}.out*"))
        subprocess.run(["callgrind_control", "-d", str(pid)], capture_output=True, check=True)
        deadline = time.monotonic() + 60
        while True:  # the dump is written by the server itself, when it next runs
            totals = [_callgrind_total(f) for f in set(out_dir.glob(f"cg-{pid}.out*")) - before]
            if totals and None not in totals:
                return sum(t for t in totals if t is not None)
            if time.monotonic() > deadline:
                raise SystemExit(f"callgrind wrote no counts for {pid} within 60 s")
            time.sleep(0.1)

    rows: list[dict[str, Any]] = []
    try:
        server.start()
        assert server.proc is not None
        client = redis.Redis.from_url(server.url)
        keys = [f"u{i}" for i in range(1000)]
        for client_clock in (False, True):
            for algorithm, kw, outcome in SCRIPT_CASES:
                client.flushall()
                clock = ManualClock(1_764_590_400.0)
                limiter = rk.Limiter(rk.Limit(algorithm, **kw),
                                     rkr.RedisStore(client, client_clock=client_clock),
                                     **({"clock": clock} if client_clock else {}))
                for key in keys:
                    limiter.hit(key)

                def work(limiter: Any = limiter, clock: Any = clock,
                         client_clock: bool = client_clock) -> None:
                    for i in range(calls):
                        if client_clock:
                            clock.advance(0.0001)
                        limiter.hit(keys[i % len(keys)])

                n = count(server.proc.pid, work)
                rows.append({"clock": "client" if client_clock else "server",
                             "algorithm": algorithm, "outcome": outcome,
                             "instructions_per_call": n / calls})
                print(f"  {rows[-1]['clock']:6} {algorithm:22} {outcome:6} "
                      f"{n / calls:9,.0f} instructions/call", file=sys.stderr, flush=True)
        client.close()
    finally:
        server.close()
        shutil.rmtree(out_dir, ignore_errors=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    global SRC  # noqa: PLW0603 - --src: read by _import_ratekeeper_redis
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small run, under a minute")
    p.add_argument("--rounds", type=int, help="interleaved rounds (default 7; quick 3)")
    p.add_argument("--batch-s", type=float, help="seconds per batch (default 0.25; quick 0.05)")
    p.add_argument("--keys", type=int, help="keys in the many-keys runs (default 10000; "
                   "quick 512)")
    p.add_argument("--freeze-s", type=float, default=3.0, help="SIGSTOP length (default 3)")
    p.add_argument("--json", type=Path, metavar="OUT", help="also write results as JSON")
    p.add_argument("--only", help="comma-separated contender names (bare is always kept)")
    p.add_argument("--skip-sync", action="store_true")
    p.add_argument("--skip-async", action="store_true")
    p.add_argument("--skip-faults", action="store_true")
    p.add_argument("--server", help="redis-server (or valkey-server) binary")
    p.add_argument("--list", action="store_true", help="list contender names and exit")
    p.add_argument("--script-instructions", type=int, metavar="N",
                   help="only count the server's instructions per single-limit decision "
                        "(callgrind; N calls per algorithm and outcome)")
    p.add_argument("--src", type=Path, default=SRC,
                   help="the ratekeeper source tree to measure (default: this checkout's)")
    args = p.parse_args(argv)

    if args.list:
        print("\n".join(c.name for c in CONTENDERS))
        return 0
    SRC = args.src
    if args.script_instructions:
        rows = script_instructions(_find_server(args.server), args.script_instructions)
        print(_table(["clock", "algorithm", "outcome", "server instructions/call"],
                     [[r["clock"], r["algorithm"], r["outcome"],
                       f"{r['instructions_per_call']:,.0f}"] for r in rows], {3}))
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"script_instructions": rows}, indent=2) + "\n")
        return 0
    rounds = args.rounds or (3 if args.quick else 7)
    batch_s = args.batch_s or (0.05 if args.quick else 0.25)
    n_keys = args.keys or (512 if args.quick else 10_000)
    contenders = CONTENDERS
    if args.only:
        wanted = {"bare", *(n.strip() for n in args.only.split(","))}
        unknown = wanted - set(BY_NAME)
        if unknown:
            p.error(f"unknown contender(s): {', '.join(sorted(unknown))}; see --list")
        contenders = [c for c in CONTENDERS if c.name in wanted]

    import redis  # noqa: PLC0415

    # SIGTERM/SIGHUP -> SystemExit, so the finally below stops the server.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: sys.exit(128 + signum))

    server = RedisServer(_find_server(args.server))
    started = time.time()
    sync_res: dict[str, list[Row]] = {}
    async_res: dict[str, list[Row]] = {}
    faults: list[FaultRow] = []
    versions = _versions()
    scenarios = [Scenario("hot", "one hot key", False),
                 Scenario("many", f"{n_keys:,} keys cycled", True)]
    global PYRATE_LOG_LEAKER  # noqa: PLW0603 - switched off for the throughput phases only
    try:
        server.start()
        admin = redis.Redis.from_url(server.url)
        sinfo = admin.info("server")
        server.version = str(sinfo.get("valkey_version") or sinfo.get("redis_version", "?"))
        header = (
            f"python {platform.python_version()}, {platform.system()} {platform.machine()}, "
            f"{os.cpu_count()} cpus; {Path(server.binary).name} {server.version} on "
            f"127.0.0.1:{server.port}; rounds={rounds} batch={batch_s:g}s keys={n_keys:,} "
            f"async tasks={CONCURRENCY}; limit {RATE:,}/s burst {BURST:,} (admit path); "
            f"load average at start {os.getloadavg()[0]:.1f}\n"
            "versions: " + ", ".join(f"{k} {v}" for k, v in versions.items())
        )
        print(header, file=sys.stderr, flush=True)
        PYRATE_LOG_LEAKER = False
        if not args.skip_sync:
            for sc in scenarios:
                print(f"  sync: {sc.label} ...", file=sys.stderr, flush=True)
                sync_res[sc.short] = run_sync(sc, contenders, server.url, admin, server.port,
                                              rounds, batch_s, n_keys)
        if not args.skip_async:
            for sc in scenarios:
                print(f"  async x{CONCURRENCY}: {sc.label} ...", file=sys.stderr, flush=True)
                async_res[sc.short] = asyncio.run(run_async(
                    sc, contenders, server.url, admin, server.port, rounds, batch_s, n_keys))
        PYRATE_LOG_LEAKER = True
        if not args.skip_faults:
            faults = run_faults(server, admin, contenders, args.freeze_s, settle_max_s=15)
        admin.close()
    finally:
        server.close()

    elapsed = time.time() - started
    out = ["", header]
    for sc in scenarios:
        if sc.short in sync_res:
            out += ["", render_throughput(f"Sync, sequential: {sc.label}", sync_res[sc.short],
                                          with_monitor=not sc.many)]
    for sc in scenarios:
        if sc.short in async_res:
            out += ["", render_throughput(f"Async, {CONCURRENCY} tasks: {sc.label}",
                                          async_res[sc.short], with_monitor=not sc.many)]
    if faults:
        out += ["", render_faults(faults, args.freeze_s)]
        out += ["", render_fault_summary(faults, args.freeze_s)]
    out += ["", LEGEND]
    skipped = {r.name: r.skipped for res in (*sync_res.values(), *async_res.values())
               for r in res if r.skipped}
    skipped.update({f.label: f.skipped for f in faults if f.skipped})
    if skipped:
        out += ["", "Skipped:"] + [f"  {k}: {v}" for k, v in skipped.items()]
    out.append(f"\n(total {elapsed:.0f}s)")
    print("\n".join(out), flush=True)

    if args.json:
        doc = {
            "meta": {
                "python": platform.python_version(), "platform": platform.platform(),
                "cpus": os.cpu_count(), "server": Path(server.binary).name,
                "server_version": server.version, "rounds": rounds, "batch_s": batch_s,
                "keys": n_keys, "concurrency": CONCURRENCY, "rate_per_s": RATE,
                "burst": BURST, "timeout_s": TIMEOUT_S, "freeze_s": args.freeze_s,
                "versions": versions, "elapsed_s": elapsed, "loadavg_end": os.getloadavg(),
                "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
            },
            "sync": {k: [r.summary() for r in v] for k, v in sync_res.items()},
            "async": {k: [r.summary() for r in v] for k, v in async_res.items()},
            "faults": [f.summary() for f in faults],
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
