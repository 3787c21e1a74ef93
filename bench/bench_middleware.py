"""Per-request overhead of the HTTP middleware: a bare app, today's `HTTPPolicy`, a file.

    .venv/bin/python bench/bench_middleware.py [--requests N] [--rounds R] [--json OUT]

Each contender is one application called the way a server calls it, without a server (no
sockets: the figure is the middleware's own cost): an ASGI app through a direct
``await app(scope, receive, send)`` and a WSGI app through ``app(environ, start_response)``.
Contenders of one kind run interleaved, round after round, and each round is `--requests`
requests from 1,000 client addresses; the report gives the median per-request time over the
rounds and the overhead over the bare app of the same kind, for the same limit set:

- ``bare``: the app alone (what a request costs without rate limiting);
- ``python-policy``: the middleware with `HTTPPolicy(limits=[gcra 10/s burst 20])`;
- ``file-policy``: the middleware with a policies file saying the same (`[http]` with
  ``descriptors = [["client_ip"]]`` and that limit), decided by the shared `Engine`.

Numbers drift on a shared machine; the overheads are comparable within one run. A
``--requests 200 --rounds 1`` run is the CI smoke test (`tests/test_bench_smoke.py`): it
checks that the script runs and reports every row, never a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ratekeeper import Limit
from ratekeeper.http import HTTPPolicy, RateLimitMiddleware, WSGIRateLimitMiddleware
from ratekeeper.testing import ManualClock

POLICIES = """
[http]
domain = "web"
descriptors = [["client_ip"]]

[[domains.web.descriptors]]
key = "client_ip"
limits = [{ name = "per-client", algorithm = "gcra", rate = "10/s", burst = 20 }]
"""
LIMIT = Limit("gcra", "10/s", burst=20, name="per-client")
CLIENTS = [f"198.51.{i // 250}.{i % 250 + 1}" for i in range(1000)]


async def bare_asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ok"})


def bare_wsgi(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]


async def _receive() -> dict[str, Any]:
    return {"type": "http.request", "body": b"", "more_body": False}


async def _send(message: dict[str, Any]) -> None:
    return None


def _scope(client: str) -> dict[str, Any]:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": "GET", "path": "/items", "raw_path": b"/items", "query_string": b"",
            "headers": [(b"host", b"app")], "client": (client, 40000),
            "server": ("127.0.0.1", 8000), "scheme": "http"}


def _environ(client: str) -> dict[str, Any]:
    return {"REQUEST_METHOD": "GET", "PATH_INFO": "/items", "REMOTE_ADDR": client,
            "HTTP_HOST": "app", "wsgi.url_scheme": "http"}


def _start_response(status: str, headers: list[tuple[str, str]], exc: Any = None) -> None:
    return None


def asgi_round(app: Any, n: int) -> float:
    scopes = [_scope(CLIENTS[i % len(CLIENTS)]) for i in range(n)]

    async def go() -> float:
        t0 = time.perf_counter()
        for scope in scopes:
            await app(scope, _receive, _send)
        return time.perf_counter() - t0

    return asyncio.run(go()) / n


def wsgi_round(app: Any, n: int) -> float:
    environs = [_environ(CLIENTS[i % len(CLIENTS)]) for i in range(n)]
    t0 = time.perf_counter()
    for env in environs:
        for _ in app(env, _start_response):
            pass
    return (time.perf_counter() - t0) / n


def contenders(path: Path) -> dict[str, tuple[str, Any]]:
    # A frozen clock: every request of a round is decided at one instant, as in a burst;
    # 1,000 addresses x burst 20 keeps every request admitted (the common case).
    return {
        "asgi bare": ("asgi", bare_asgi),
        "asgi python-policy": ("asgi", RateLimitMiddleware(
            bare_asgi, HTTPPolicy(limits=[LIMIT]), clock=ManualClock(1e6))),
        "asgi file-policy": ("asgi", RateLimitMiddleware(bare_asgi, path,
                                                         clock=ManualClock(1e6))),
        "wsgi bare": ("wsgi", bare_wsgi),
        "wsgi python-policy": ("wsgi", WSGIRateLimitMiddleware(
            bare_wsgi, HTTPPolicy(limits=[LIMIT]), clock=ManualClock(1e6))),
        "wsgi file-policy": ("wsgi", WSGIRateLimitMiddleware(bare_wsgi, path,
                                                             clock=ManualClock(1e6))),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=20_000, help="requests per round")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json", default=None, help="also write the figures as JSON")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "policies.toml"
        path.write_text(POLICIES)
        apps = contenders(path)
        runs: dict[str, list[float]] = {name: [] for name in apps}
        for _ in range(args.rounds):
            # Each round admits every request again: the clocks move past any refill.
            for name, (kind, app) in apps.items():
                clock = getattr(getattr(app, "engine", None), "clock", None)
                if isinstance(clock, ManualClock):
                    clock.advance(10.0)
                run: Callable[[Any, int], float] = asgi_round if kind == "asgi" else wsgi_round
                runs[name].append(run(app, args.requests))
    med = {name: statistics.median(v) * 1e6 for name, v in runs.items()}
    print(f"# middleware overhead: {args.rounds} rounds x {args.requests:,} requests, "
          f"1,000 clients, one gcra limit, memory store, Python {sys.version.split()[0]}")
    print("| app | us/request | overhead over bare, us |")
    print("| --- | ---: | ---: |")
    for name, us in med.items():
        bare = med[name.split()[0] + " bare"]
        print(f"| {name} | {us:.2f} | {us - bare:.2f} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"median_us": med, "runs_s": runs}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
