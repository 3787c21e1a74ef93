"""Load benchmark of the decision service (`ratekeeper serve`) on loopback.

This is a benchmark, not a test: it never fails on a slow number. It starts the real service
in a subprocess (in-memory store, and Redis when available), drives it from load-generator
subprocesses for a fixed time per scenario (or, with ``--requests N``, until at least N
requests were answered, whatever the time: the smoke mode CI runs), and reports decisions per second and the
latency a caller sees (p50, p99, p99.9), for:

* ``http``: ``POST /v1/check`` over HTTP/1.1 keep-alive connections, with a minimal client
  written on asyncio streams (httpx would cost more CPU than the service does);
* ``grpc``: Envoy's ``ShouldRateLimit`` over grpc.aio, requests pre-encoded;

and, in the same run, the bare-transport floors the service is held to: ``http-floor``, a
Starlette endpoint that reads the body and answers a constant (the service's own answer,
captured) on the same uvicorn stack (uvloop + httptools when installed, as ``serve`` picks
them); ``grpc-floor``, a grpc.aio servicer that parses the RateLimitRequest and answers a
constant response, on the same server options; ``grpc-sync-floor``, the same on a sync
``grpc.server`` with 4 threads (the other grpcio server model). The ``x floor`` column is
the service's CPU per decision over the cheapest floor of its transport in the same run,
named in the ``fastest floor`` column (for gRPC, whichever server model measured cheaper);
the goal is at most 1.25. The Redis scenarios' floors are ``http-redis-floor`` and
``grpc-redis-floor``: the same bare servers making, per request, one ``EVALSHA`` of ``return 1`` through the
client the Redis store builds, with redis-py's own command API (the transport of a Redis
decision: the request in, one round trip to Redis, the answer out). The store itself sends
on connections of its own (`_Wire`), cheaper than that API; ``http-redis-own-floor`` and
``grpc-redis-own-floor`` make their ``EVALSHA`` that way too, and the ``x own floor`` column
holds the Redis scenarios to them: the stricter measure of what the service adds (``x floor``
is over the cheapest of the two, so it is often the same).

By default each client sends as fast as it is answered (a closed loop: the service saturates a
core, and a busier server batches more calls per wake-up); ``--rate N`` offers the same N
decisions per second to every scenario instead (an open loop, as a service that is not at its
limit sees traffic), so that each is measured under the same load.

Each check carries one descriptor ``[user=<one of --users>]`` against a GCRA limit of
1000/s per user (nearly all admitted) plus a global token bucket: a composite decision of
two limits, all-or-nothing, as a typical edge policy. The service's own CPU time per
decision is read from /proc, so the figures can be read even when the load generator and the
service share a small machine (they compete for the same cores).

    .venv/bin/python bench/bench_service.py                    # ~30 s: 5 s per scenario
    .venv/bin/python bench/bench_service.py --seconds 2 --only http-memory,grpc-memory
    .venv/bin/python bench/bench_service.py --seconds 0 --requests 40 --warmup 0 \
        --redis none                                               # smoke: 40 per scenario
    .venv/bin/python bench/bench_service.py --json bench/results/service.json
    .venv/bin/python bench/bench_service.py --rate 2000   # the same load offered to each
    .venv/bin/python bench/bench_service.py --rounds 5 --seconds 3   # interleaved, medians
    .venv/bin/python bench/bench_service.py --instructions --requests 2000 --users 1000
                                                    # instructions per decision (valgrind)

``--redis auto`` (the default) starts a throw-away ``redis-server`` (tests/servers.py) if the
binary and ratekeeper's Redis store are available; ``--redis URL`` uses yours (keys go under
a fresh prefix and expire on their own); ``--redis none`` skips those scenarios.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import importlib.util
import json
import math
import os
import platform
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "src"), str(REPO)]

POLICIES = """
[[domains.bench.descriptors]]
key = "user"
limits = [
  { name = "per-user", algorithm = "gcra", rate = "1000/s", burst = 1000 },
  { name = "everyone", algorithm = "token-bucket", rate = "10000000/s", scope = "global" },
]
"""
CLI = [sys.executable, "-c", "import sys; from ratekeeper.cli import main; sys.exit(main())"]
#: With ``--instructions``: the command every server runs under (callgrind, counting off
#: until `Service.count` turns it on for the measured requests).
VALGRIND: list[str] = []
METHOD = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"


# ------------------------------------------------------------------------------ service


class Service:
    def __init__(self, policies: Path, store: str | None, workdir: Path,
                 workers: int = 1) -> None:
        self.log = workdir / f"service-{uuid.uuid4().hex[:6]}.log"
        args = [*CLI, "serve", "--config", str(policies), "--http-port", "0", "--grpc-port",
                "0", "--log-level", "warning", "--grace", "1"]
        if store:
            args += ["--store", store, "--key-prefix", f"rk-bench-{uuid.uuid4().hex[:8]}:"]
        if workers > 1:
            args += ["--workers", str(workers)]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen([*VALGRIND, *args], stdout=out,
                                         stderr=subprocess.STDOUT)
        # The "listening" record is at info level: poll the ports instead.
        self.http_port, self.grpc_port = self._ports()

    def _ports(self) -> tuple[int, int]:
        wait = 300 if VALGRIND else 30  # (a program under callgrind starts ~50x slower)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"service exited:\n{self.log.read_text()}")
            ports = set().union(*(_listening_ports(pid) for pid in self.pids()))
            if len(ports) >= 2:
                http, grpc_ = _classify(sorted(ports))
                if http and grpc_:
                    return http, grpc_
            time.sleep(0.05)
        raise SystemExit(f"service did not listen within {wait} s:\n{self.log.read_text()}")

    def pids(self) -> list[int]:
        """The process and its children (the workers of ``--workers N``)."""
        pid = self.proc.pid
        try:
            kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            kids = []
        return [pid, *map(int, kids)]

    def cpu_seconds(self) -> float:
        ticks = os.sysconf("SC_CLK_TCK")
        total = 0.0
        for pid in self.pids():
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks  # utime + stime
        return total

    def count(self, work: Any) -> tuple[Any, int]:
        """`work()`'s result and the instructions this server ran meanwhile (all of its
        threads), with ``--instructions``: callgrind's counting on for `work` alone."""
        pid = str(self.proc.pid)
        subprocess.run(["callgrind_control", "-z", pid], capture_output=True, check=True)
        subprocess.run(["callgrind_control", "-i", "on", pid], capture_output=True, check=True)
        try:
            result = work()
        finally:
            subprocess.run(["callgrind_control", "-i", "off", pid], capture_output=True,
                           check=True)
        before = set(_CALLGRIND_OUT.glob(f"cg-{pid}.out*"))
        subprocess.run(["callgrind_control", "-d", pid], capture_output=True, check=True)
        deadline = time.monotonic() + 60
        while True:  # the dump is written by the program itself, when it next runs
            new = set(_CALLGRIND_OUT.glob(f"cg-{pid}.out*")) - before
            totals = [_callgrind_total(f) for f in new]
            if new and None not in totals:
                return result, sum(t for t in totals if t is not None)
            if time.monotonic() > deadline:
                raise SystemExit(f"callgrind wrote no counts for {pid} within 60 s")
            time.sleep(0.1)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


#: Where callgrind writes (``--instructions``); set by `main`.
_CALLGRIND_OUT = Path(tempfile.gettempdir())


def _callgrind_total(path: Path) -> int | None:
    """A callgrind dump's instruction total (None while it is still being written)."""
    try:
        text = path.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("totals:"):  # (its "summary:" line is of the part dumped last)
            return int(line.split()[1])
    return None


def _listening_ports(pid: int) -> set[int]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if parts[3] == "0A" and parts[9] in inodes:  # LISTEN
                ports.add(int(parts[1].rsplit(":", 1)[1], 16))
    return ports


def _classify(ports: list[int]) -> tuple[int | None, int | None]:
    http = grpc_ = None
    for port in ports:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                head = s.recv(64)
        except OSError:
            continue
        if head.startswith(b"HTTP/1.1"):
            http = port
        else:
            grpc_ = port
    return http, grpc_


# ------------------------------------------------------------------- bare-transport floors


class Floor:
    """A bare server in a subprocess (`floor_main`): the transport alone, no decision."""

    def __init__(self, kind: str, answer: bytes, workdir: Path,
                 redis_url: str | None = None) -> None:
        body = workdir / f"answer-{kind}.bin"
        body.write_bytes(answer)
        extra = [] if redis_url is None else ["--redis", redis_url]
        self.proc = subprocess.Popen([*VALGRIND, sys.executable, __file__, "--floor", kind,
                                      "--answer", str(body), *extra], stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"the {kind} floor server did not start")
        self.port = int(line)

    pids = Service.pids
    cpu_seconds = Service.cpu_seconds
    count = Service.count
    stop = Service.stop


def _redis_round_trip(url: str | None, own: bool = False) -> Any:
    """None, or an async function making one bare ``EVALSHA`` (``return 1``, no keys) with
    the client the Redis store builds for `url` (`own`: on the store's own connections, as
    it sends its scripts): a Redis decision's round trip, no work."""
    if url is None:
        return None
    from ratekeeper.service._server import open_store  # noqa: PLC0415

    store, _ = open_store(url)
    client: Any = store._client  # type: ignore[attr-defined]  # the store's own client
    send = store._wire.one if own else (  # type: ignore[attr-defined]
        lambda args: client.execute_command(*args))
    sha = hashlib.sha1(b"return 1").hexdigest()  # Redis names a script by its SHA-1

    async def round_trip() -> None:
        try:
            await send(("EVALSHA", sha, 0))
        except Exception:  # NOSCRIPT on the first call
            await send(("EVAL", "return 1", 0))

    return round_trip


async def _http_floor(answer: bytes, redis_url: str | None = None, own: bool = False) -> None:
    import uvicorn  # noqa: PLC0415
    from starlette.applications import Starlette  # noqa: PLC0415
    from starlette.requests import Request  # noqa: PLC0415
    from starlette.responses import Response  # noqa: PLC0415
    from starlette.routing import Route  # noqa: PLC0415

    from ratekeeper.service._server import _UvicornServer, bind_tcp, http_parser  # noqa: PLC0415

    round_trip = _redis_round_trip(redis_url, own)

    async def check(request: Request) -> Response:
        await request.body()
        if round_trip is not None:
            await round_trip()
        return Response(answer, media_type="application/json")

    app = Starlette(routes=[Route("/v1/check", check, methods=["POST"])])
    # The options `serve` gives uvicorn (ratekeeper.service._server).
    config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="off",
                            http=http_parser(), server_header=False)
    sock = bind_tcp("127.0.0.1", 0)
    server = _UvicornServer(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.005)
    print(sock.getsockname()[1], flush=True)
    await task


def _grpc_floor_handlers(answer: bytes, redis_url: str | None = None,
                         own: bool = False) -> Any:
    import grpc  # noqa: PLC0415

    from ratekeeper.service._grpc import SERVICE  # noqa: PLC0415
    from ratekeeper.service.proto.envoy.service.ratelimit.v3 import rls_pb2  # noqa: PLC0415

    response = rls_pb2.RateLimitResponse.FromString(answer)
    round_trip = _redis_round_trip(redis_url, own)

    def should_rate_limit(request: Any, context: Any) -> Any:
        return response

    async def should_rate_limit_async(request: Any, context: Any) -> Any:
        if round_trip is not None:
            await round_trip()
        return response

    return grpc, SERVICE, rls_pb2, should_rate_limit, should_rate_limit_async


async def _grpc_aio_floor(answer: bytes, redis_url: str | None = None,
                          own: bool = False) -> None:
    grpc, service, rls_pb2, _, handler = _grpc_floor_handlers(answer, redis_url, own)
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])  # as start_grpc_server
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, {
        "ShouldRateLimit": grpc.unary_unary_rpc_method_handler(
            handler, request_deserializer=rls_pb2.RateLimitRequest.FromString,
            response_serializer=rls_pb2.RateLimitResponse.SerializeToString)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    await server.wait_for_termination()


def _grpc_sync_floor(answer: bytes) -> None:
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

    grpc, service, rls_pb2, handler, _ = _grpc_floor_handlers(answer)
    server = grpc.server(ThreadPoolExecutor(max_workers=4),
                         options=[("grpc.so_reuseport", 0)])
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, {
        "ShouldRateLimit": grpc.unary_unary_rpc_method_handler(
            handler, request_deserializer=rls_pb2.RateLimitRequest.FromString,
            response_serializer=rls_pb2.RateLimitResponse.SerializeToString)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    server.wait_for_termination()


def floor_main(args: argparse.Namespace) -> None:
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # a bare server: nothing to close
    answer = Path(args.answer).read_bytes()
    if args.floor == "grpc-sync":
        _grpc_sync_floor(answer)
        return
    from ratekeeper.service._server import run  # noqa: PLC0415 (the loop `serve` runs on)

    url = args.redis if "-redis" in args.floor else None
    own = args.floor.endswith("-own")
    run(_http_floor(answer, url, own) if args.floor.startswith("http")
        else _grpc_aio_floor(answer, url, own))


def _capture_http(port: int) -> bytes:
    """One real /v1/check answer's body (the http floor answers it)."""
    body = _body(0)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"POST /v1/check HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json"
                  b"\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return data.split(b"\r\n\r\n", 1)[1]


def _capture_grpc(port: int) -> bytes:
    """One real ShouldRateLimit answer, serialized (the grpc floors answer it)."""
    import grpc  # noqa: PLC0415

    from ratekeeper.service.proto.envoy.service.ratelimit.v3 import rls_pb2  # noqa: PLC0415

    req = rls_pb2.RateLimitRequest(domain="bench")
    req.descriptors.add().entries.add(key="user", value="u0")
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        call = ch.unary_unary(METHOD, request_serializer=None, response_deserializer=None)
        answer: bytes = call(req.SerializeToString(), timeout=10)
    return answer


# ------------------------------------------------------------------------- load clients


def _body(user: int) -> bytes:
    return b'{"domain":"bench","descriptors":[{"user":"u%d"}]}' % user


class Users:
    """Which user the next request is for: at random among `users`, or with `cover` each
    user once first, in order (a warm-up that meets the whole population, so that the timed
    run measures returning users, whose parses and plans the service remembers)."""

    def __init__(self, users: int, cover: bool = False) -> None:
        self.users = users
        self.first = iter(range(users)) if cover else iter(())
        self.rnd = random.Random()

    def next(self) -> int:
        u = next(self.first, None)
        return self.rnd.randrange(self.users) if u is None else u


async def _http_worker(port: int, users: Users, until: Until, lat: list[float],
                       errors: list[str]) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    n = 0
    perf = time.perf_counter
    try:
        while await until.go():
            body = _body(users.next())
            req = (b"POST /v1/check HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json"
                   b"\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            t0 = perf()
            writer.write(req)
            status = await reader.readline()
            length = 0
            while True:
                line = await reader.readline()
                if line in (b"\r\n", b""):
                    break
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            await reader.readexactly(length)
            lat.append(perf() - t0)
            if not status.startswith(b"HTTP/1.1 200"):
                errors.append(status.decode(errors="replace").strip())
            n += 1
    finally:
        writer.close()
    return n


async def _grpc_workers(port: int, users: Users, until: Until, concurrency: int,
                        lat: list[float], errors: list[str]) -> None:
    import grpc  # noqa: PLC0415 (client processes only)

    from ratekeeper.service.proto.envoy.service.ratelimit.v3 import rls_pb2  # noqa: PLC0415

    pool = []
    for u in range(users.users):
        req = rls_pb2.RateLimitRequest(domain="bench")
        req.descriptors.add().entries.add(key="user", value=f"u{u}")
        pool.append(req.SerializeToString())
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        call = ch.unary_unary(METHOD, request_serializer=None, response_deserializer=None)

        async def worker() -> None:
            perf = time.perf_counter
            while await until.go():
                data = pool[users.next()]
                t0 = perf()
                try:
                    await call(data, timeout=10)
                except grpc.RpcError as e:
                    errors.append(str(e.code()))
                lat.append(perf() - t0)

        await asyncio.gather(*(worker() for _ in range(concurrency)))


class Until:
    """When a client's connections stop: once the deadline has passed *and* at least
    `requests` were sent (counted when sent, so all connections together send exactly
    `requests` when the deadline is already past: the work asked for, whatever the time).

    With a `rate` (requests per second, this client's share), `go` also paces the sends: the
    n-th waits for its slot, ``start + n / rate`` (an open-loop load: a server that keeps up
    is offered the same calls per second whatever its speed; one that does not gets them as
    fast as it answers)."""

    def __init__(self, deadline: float, requests: int, rate: float = 0.0) -> None:
        self.deadline = deadline
        self.left = requests
        self.interval = 1.0 / rate if rate > 0 else 0.0
        self.next = time.perf_counter()

    def more(self) -> bool:
        self.left -= 1
        return self.left >= 0 or time.perf_counter() < self.deadline

    async def go(self) -> bool:
        if not self.more():
            return False
        if self.interval:
            slot, self.next = self.next, self.next + self.interval
            wait = slot - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
        return True


def client_main(args: argparse.Namespace) -> None:
    """One load-generator process: prints its latencies (microseconds) as JSON."""
    lat: list[float] = []
    errors: list[str] = []
    start = time.perf_counter()
    until = Until(start + args.seconds, args.requests, args.rate)
    users = Users(args.users, args.cover)

    async def run() -> None:
        if args.client == "http":
            await asyncio.gather(*(_http_worker(args.port, users, until, lat, errors)
                                   for _ in range(args.concurrency)))
        else:
            await _grpc_workers(args.port, users, until, args.concurrency, lat, errors)

    asyncio.run(run())
    json.dump({"lat_us": [round(x * 1e6) for x in lat], "errors": errors[:20],
               "elapsed_s": time.perf_counter() - start,
               "error_count": len(errors)}, sys.stdout)


def _drive(kind: str, port: int, seconds: float, clients: int, concurrency: int,
           users: int, requests: int = 0, rate: float = 0.0,
           cover: bool = False) -> dict[str, Any]:
    per_client = -(-requests // clients)  # at least `requests` in all
    cmd = [sys.executable, __file__, "--client", kind, "--port", str(port), "--seconds",
           str(seconds), "--concurrency", str(concurrency), "--users", str(users),
           "--requests", str(per_client), "--rate", str(rate / clients),
           *(["--cover"] if cover else [])]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE) for _ in range(clients)]
    # No time limit with --requests: the work asked for decides when a client is done.
    limit = None if requests else seconds + 60
    outs = [json.loads(p.communicate(timeout=limit)[0]) for p in procs]
    lat = sorted(x for o in outs for x in o["lat_us"])
    return {"lat_us": lat, "errors": sum(o["error_count"] for o in outs),
            "elapsed_s": max(o["elapsed_s"] for o in outs),
            "error_samples": [e for o in outs for e in o["errors"]][:5]}


def _pct(sorted_us: list[int], p: float) -> float:
    if not sorted_us:
        return float("nan")
    i = min(len(sorted_us) - 1, round(p / 100 * (len(sorted_us) - 1)))
    return sorted_us[i] / 1000.0  # ms


# ------------------------------------------------------------------------------- main


def _redis(choice: str, stack: list[Any]) -> str | None:
    if choice == "none":
        return None
    if importlib.util.find_spec("ratekeeper.stores.redis") is None:
        print("redis scenarios skipped: ratekeeper.stores.redis is not available",
              file=sys.stderr)
        return None
    if choice != "auto":
        return choice
    if shutil.which("redis-server") is None:
        print("redis scenarios skipped: no redis-server on PATH", file=sys.stderr)
        return None
    from tests.servers import RedisServer  # noqa: PLC0415 (only with --redis auto)

    server = RedisServer("redis", name="bench-service").start()
    stack.append(server)
    return str(server.url)


def hold_to_fastest_floor(results: list[dict[str, Any]], measure: str) -> None:
    """Give each row its ``x_floor``: its `measure` over the cheapest floor of the same run
    for its transport (with a Redis round trip for the Redis rows), named in ``floor``;
    which server model is cheapest depends on the machine and the measure (grpc.aio or a
    sync ``grpc.server``; the store's own connections or redis-py's API), so the service is
    held to whichever it is. ``x_own_floor``: the Redis rows over ``*-redis-own-floor``,
    whatever is cheapest. A floor that measured nothing (0 clock ticks) is no floor."""
    cost = {r["scenario"]: r[measure] for r in results}
    for r in results:
        redis_row = "redis" in r["scenario"]
        floors = {name: c for name, c in cost.items()
                  if name.endswith("-floor") and name.startswith(f"{r['transport']}-")
                  and ("-redis" in name) == redis_row and c > 0}
        fastest = min(floors, key=floors.__getitem__, default="")
        own = cost.get(f"{r['transport']}-redis-own-floor") if redis_row else None
        r["floor"] = fastest
        r["x_floor"] = r[measure] / floors[fastest] if fastest else float("nan")
        r["x_own_floor"] = r[measure] / own if own else float("nan")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=5.0, help="measured seconds per scenario")
    p.add_argument("--requests", type=int, default=0,
                   help="each scenario sends at least this many requests, however long "
                        "that takes (with --seconds 0: bounded by work, not time)")
    p.add_argument("--warmup", type=float, default=1.0,
                   help="unmeasured seconds first (and every user once; 0: none)")
    p.add_argument("--clients", type=int, default=1, help="load-generator processes")
    p.add_argument("--concurrency", type=int, default=16,
                   help="connections (http) or calls in flight (grpc) per client")
    p.add_argument("--users", type=int, default=10_000, help="distinct keys")
    p.add_argument("--rate", type=float, default=0.0,
                   help="offer this many decisions per second in all (an open-loop load, "
                        "the same for every scenario); 0 (default): as fast as answered")
    p.add_argument("--redis", default="auto", help="auto, none or a redis:// URL")
    p.add_argument("--only", default="", help="comma-separated scenario names")
    p.add_argument("--workers", type=int, default=2,
                   help="also run the Redis scenarios on `serve --workers N` (1: skip)")
    p.add_argument("--rounds", type=int, default=1,
                   help="measure every scenario this many times, interleaved (the CPU per "
                        "decision reported is the median)")
    p.add_argument("--instructions", action="store_true",
                   help="count each server's instructions per decision with callgrind "
                        "(valgrind) instead of reading its CPU time: the same count however "
                        "busy the machine is (needs --requests; no --workers scenario)")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    # client mode (internal)
    p.add_argument("--client", choices=("http", "grpc"), help=argparse.SUPPRESS)
    p.add_argument("--cover", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--floor", choices=("http", "grpc", "grpc-sync", "http-redis", "grpc-redis",
                                       "http-redis-own", "grpc-redis-own"),
                   help=argparse.SUPPRESS)
    p.add_argument("--answer", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.client:
        client_main(args)
        return
    if args.floor:
        floor_main(args)
        return

    stack: list[Any] = []
    workdir = Path(tempfile.mkdtemp(prefix="rk-bench-"))
    if args.instructions:
        global _CALLGRIND_OUT  # noqa: PLW0603 (read by `count`, set once here)
        if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
            raise SystemExit("--instructions needs valgrind (apt install valgrind)")
        if not args.requests:
            raise SystemExit("--instructions counts a fixed amount of work: give --requests N")
        _CALLGRIND_OUT = workdir
        VALGRIND[:] = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                       f"--callgrind-out-file={workdir}/cg-%p.out"]
        args.workers = 1  # (callgrind would follow one process of several)
    policies = workdir / "policies.toml"
    policies.write_text(POLICIES)
    stores: list[tuple[str, str | None, int]] = [("memory", None, 1)]
    try:
        redis_url = _redis(args.redis, stack)
        if redis_url:
            stores.append(("redis", redis_url, 1))
            if args.workers > 1:
                stores.append((f"redis-{args.workers}w", redis_url, args.workers))
        only = set(filter(None, args.only.split(",")))
        # Every server is started first and stays up: each round measures every scenario
        # once, in the opposite order to the round before, so a machine whose speed drifts
        # (neighbours, thermal) weighs on all of them alike; a scenario's CPU per decision is
        # its median over the rounds.
        plan: list[tuple[str, str, Any, int]] = []
        answers: dict[str, bytes] = {}
        for store_name, url, workers in stores:
            if only and not any(s.endswith(f"-{store_name}") for s in only):
                continue
            svc = Service(policies, url, workdir, workers)
            stack.append(svc)
            answers.setdefault("http", _capture_http(svc.http_port))
            answers.setdefault("grpc", _capture_grpc(svc.grpc_port))
            for kind in ("http", "grpc"):
                name = f"{kind}-{store_name}"
                if not only or name in only:
                    plan.append((name, kind, svc, svc.http_port if kind == "http" else
                                 svc.grpc_port))
        floors = [("http-floor", "http", "http"), ("grpc-floor", "grpc", "grpc"),
                  ("grpc-sync-floor", "grpc", "grpc-sync")]
        if redis_url:
            floors += [("http-redis-floor", "http", "http-redis"),
                       ("grpc-redis-floor", "grpc", "grpc-redis"),
                       ("http-redis-own-floor", "http", "http-redis-own"),
                       ("grpc-redis-own-floor", "grpc", "grpc-redis-own")]
        chosen = {name for name, *_ in plan}
        for name, kind, floor_kind in floors:
            redis_floor = "-redis" in floor_kind
            wanted = {s for s in chosen if s.startswith(f"{kind}-")
                      and ("redis" in s) == redis_floor}
            if kind not in answers or (only and name not in only and not wanted):
                continue
            floor = Floor(floor_kind, answers[kind], workdir,
                          redis_url if redis_floor else None)
            stack.append(floor)
            plan.append((name, kind, floor, floor.port))

        runs: dict[str, list[dict[str, Any]]] = {name: [] for name, *_ in plan}
        if args.warmup > 0:  # --warmup seconds, and every user at least once
            for _, kind, _, port in plan:
                # (twice under callgrind, whose server answers few calls in --warmup)
                for _ in range(2 if args.instructions else 1):
                    _drive(kind, port, args.warmup, args.clients, args.concurrency,
                           args.users, args.users * args.clients, rate=args.rate, cover=True)
        for r in range(args.rounds):
            for name, kind, server, port in (plan if r % 2 == 0 else plan[::-1]):
                cpu0 = server.cpu_seconds()
                t0 = time.perf_counter()

                def work(kind: str = kind, port: int = port) -> dict[str, Any]:
                    return _drive(kind, port, 0 if args.instructions else args.seconds,
                                  args.clients, args.concurrency, args.users, args.requests,
                                  args.rate)

                run, instructions = server.count(work) if args.instructions else (work(), 0)
                run["wall_s"] = time.perf_counter() - t0
                run["cpu_s"] = server.cpu_seconds() - cpu0
                n = len(run["lat_us"])
                run["instructions_per_decision"] = instructions / n if n else float("nan")
                runs[name].append(run)
                shown = (f"{run['instructions_per_decision']:9,.0f} instructions/decision"
                         if args.instructions else
                         f"CPU {run['cpu_s'] / n * 1e6 if n else float('nan'):5.0f} "
                         "us/decision")
                print(f"{name:<22} round {r + 1}: {n / run['elapsed_s']:>9,.0f}/s  {shown}  "
                      f"errors {run['errors']}", file=sys.stderr)
        results: list[dict[str, Any]] = []
        for name, kind, _, _ in plan:
            rounds = runs[name]
            lat = sorted(x for run in rounds for x in run["lat_us"])
            n = len(lat)
            per_round = [run["cpu_s"] / len(run["lat_us"]) * 1e6 if run["lat_us"]
                         else float("nan") for run in rounds]
            elapsed = sum(run["elapsed_s"] for run in rounds)
            results.append({
                "scenario": name, "transport": kind, "decisions": n,
                # over the time the load took (--requests may take longer than --seconds)
                "per_second": n / elapsed if elapsed else float("nan"),
                "p50_ms": _pct(lat, 50), "p99_ms": _pct(lat, 99), "p999_ms": _pct(lat, 99.9),
                "mean_ms": statistics.fmean(lat) / 1000 if lat else float("nan"),
                "service_cpu_us_per_decision": statistics.median(per_round),
                "cpu_us_per_decision_by_round": per_round,
                **({"instructions_per_decision": statistics.median(
                    run["instructions_per_decision"] for run in rounds)}
                   if args.instructions else {}),
                "errors": sum(run["errors"] for run in rounds),
                "error_samples": [e for run in rounds for e in run["error_samples"]][:5],
                "wall_s": sum(run["wall_s"] for run in rounds),
            })
        # (with --instructions, the ratios are of instructions per decision)
        measure = "instructions_per_decision" if args.instructions \
            else "service_cpu_us_per_decision"
        hold_to_fastest_floor(results, measure)
    finally:
        for s in reversed(stack):  # (the servers, then the Redis they use)
            s.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    env = {"python": platform.python_version(), "machine": platform.machine(),
           "cpus": os.cpu_count(), "loadavg": os.getloadavg(), "seconds": args.seconds,
           "requests": args.requests, "rounds": args.rounds, "clients": args.clients,
           "concurrency": args.concurrency, "users": args.users, "rate": args.rate,
           "measure": "callgrind instructions" if args.instructions else "CPU time"}
    span = f"{args.seconds:g} s" + (f" and {args.requests} requests" if args.requests else "")
    if args.instructions:
        span = f"{args.requests} requests counted with callgrind"
    if args.rounds > 1:
        span += f" in each of {args.rounds} interleaved rounds (CPU: the median)"
    offered = f"{args.rate:,.0f} decisions/s offered" if args.rate else "as fast as answered"
    print(f"\n# ratekeeper serve on loopback: {args.clients} client process(es) x "
          f"{args.concurrency} in flight ({offered}), at least {span} per scenario, "
          f"{env['cpus']} CPUs, load average {env['loadavg'][0]:.1f} at the end")
    cost = "server instructions/decision" if args.instructions else "server CPU us/decision"
    print(f"| scenario | decisions/s | p50 ms | p99 ms | p99.9 ms | {cost} "
          "| x floor | fastest floor | x own floor | errors |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |")
    for r in results:
        own = "" if math.isnan(r["x_own_floor"]) else f"{r['x_own_floor']:.2f}"
        print(f"| {r['scenario']} | {r['per_second']:,.0f} | {r['p50_ms']:.2f} | "
              f"{r['p99_ms']:.2f} | {r['p999_ms']:.2f} | "
              f"{r[measure]:,.0f} | {r['x_floor']:.2f} | {r['floor']} | {own} | "
              f"{r['errors']} |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"env": env, "results": results}, indent=2))


if __name__ == "__main__":
    main()
