"""One policies file, unchanged, decides the same requests identically everywhere.

``examples/policies.toml`` drives a FastAPI app (the ASGI middleware), a Flask app (the
Flask extension), ``ratekeeper serve`` (a real process, ``POST /v1/http``) and
``ratekeeper simulate --policies`` (a request trace). The same sequence of requests goes
through each; every request's answer (its status, the limit its ``RateLimit`` field names
and the remaining count there) must be the same in all four.

The in-process ones run on a frozen `ManualClock`; the service runs on its own clock, so the
sequence is chosen to be time-proof over a minute: logins (a sliding log of 5 a minute:
entries leave only after 60 s) and free-tier users (a token bucket of 100 an hour: one token
per 36 s) from addresses of their own, so that the time the service takes changes nothing.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from flask import Flask

from ratekeeper.http import RateLimitMiddleware
from ratekeeper.http.flask import Limiter
from ratekeeper.testing import ManualClock
from tests.service._proc import ServiceProcess

ROOT = Path(__file__).resolve().parent
EXAMPLE = ROOT.parent / "examples" / "policies.toml"
CLI = [sys.executable, "-c", "import sys; from ratekeeper.cli import main; sys.exit(main())"]

#: (method, path, client, headers)
REQUESTS: list[tuple[str, str, str, dict[str, str]]] = [
    *[("POST", "/login", "198.51.100.1", {})] * 7,               # 5 a minute, then 429
    ("GET", "/health", "198.51.100.1", {}),                       # exempt
    *[("GET", "/api/items", "198.51.100.2", {"x-user": "ann"})] * 12,  # free: burst 10
    *[("GET", "/api/items", "198.51.100.3", {"x-user": "bob", "x-plan": "gold"})] * 3,
    ("POST", "/api/export", "198.51.100.4", {"x-user": "cat"}),   # costs 10 of 10
    ("POST", "/api/export", "198.51.100.4", {"x-user": "cat"}),   # nothing left
    ("POST", "/login", "198.51.100.2", {"x-user": "ann"}),        # ann's free tier is spent
]

Answer = tuple[int, str | None, int | None]
_FIELD = re.compile(r'^"([^"]+)";r=(\d+)')


def answer_of(status: int, headers: Any) -> Answer:
    """(status, the limit named in RateLimit, its remaining) from a response's fields."""
    m = _FIELD.match(headers.get("RateLimit") or headers.get("ratelimit") or "")
    return (status, m.group(1), int(m.group(2))) if m else (status, None, None)


async def through_fastapi() -> list[Answer]:
    app = FastAPI()

    @app.api_route("/{path:path}", methods=["GET", "POST"])
    async def anything(path: str) -> dict[str, str]:
        return {"path": path}

    app.add_middleware(RateLimitMiddleware, policy=str(EXAMPLE), clock=ManualClock(1000.0))
    out = []
    for method, path, client, headers in REQUESTS:
        transport = httpx.ASGITransport(app=app, client=(client, 40000))
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as c:
            r = await c.request(method, path, headers=headers)
        out.append(answer_of(r.status_code, r.headers))
    return out


def through_flask() -> list[Answer]:
    app = Flask(__name__)
    Limiter(app, policy=str(EXAMPLE), clock=ManualClock(1000.0))

    @app.route("/<path:path>", methods=["GET", "POST"])
    def anything(path: str) -> dict[str, str]:
        return {"path": path}

    tc = app.test_client()
    out = []
    for method, path, client, headers in REQUESTS:
        r = tc.open(path, method=method, headers=headers,
                    environ_base={"REMOTE_ADDR": client})
        out.append(answer_of(r.status_code, r.headers))
    return out


def through_serve(tmp_path: Path) -> list[Answer]:
    out = []
    with ServiceProcess(EXAMPLE, tmp_path / "service.log") as svc, \
            httpx.Client(base_url=svc.http) as http:
        for method, path, client, headers in REQUESTS:
            doc = http.post("/v1/http", json={"method": method, "path": path,
                                             "client": client, "headers": headers}).json()
            out.append(answer_of(doc["status"], doc["headers"]))
    return out


def through_simulate(tmp_path: Path) -> list[Answer]:
    trace = tmp_path / "requests.jsonl"
    trace.write_text("".join(
        json.dumps({"t": 0, "method": m, "path": p, "client": c, "headers": h}) + "\n"
        for m, p, c, h in REQUESTS))
    proc = subprocess.run([*CLI, "simulate", "--policies", str(EXAMPLE), "--trace",
                           str(trace)], capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    out = []
    for line in proc.stdout.splitlines():
        row = json.loads(line)
        name = row.get("limit")
        out.append((row["status"], name, row["remaining"] if name else None))
    return out


@pytest.mark.slow
async def test_one_policies_file_decides_identically_in_fastapi_flask_serve_and_simulate(
        tmp_path: Path) -> None:
    fastapi = await through_fastapi()
    # What the file says, worked out by hand: the reference all four must match.
    want: list[Answer] = [
        *[(200, "web.login", n) for n in (4, 3, 2, 1, 0)],
        (429, "web.login", 0), (429, "web.login", 0),
        (200, None, None),
        *[(200, "web.free", n) for n in range(9, -1, -1)],
        (429, "web.free", 0), (429, "web.free", 0),
        *[(200, "web.free", n) for n in (9, 8, 7)],   # "gold" is no plan: the free tier
        (200, "web.free", 0),                          # an export costs all 10
        (429, "web.free", 0),
        (429, "web.free", 0),                          # the login limit had room, ann's not
    ]
    assert fastapi == want
    assert through_flask() == want
    assert through_simulate(tmp_path) == want
    assert through_serve(tmp_path) == want
