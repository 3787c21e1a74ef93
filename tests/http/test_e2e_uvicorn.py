"""End to end: a real uvicorn server on a free loopback port, real concurrent HTTP clients.

Policy: 20 per API key and 30 for everyone, per hour (token buckets: a spent token comes
back after 180 s per key and 120 s globally, far beyond this test's second or two, so
wall-clock timing cannot change a count). Two clients fire 25 requests each, all at once: exactly 30
are admitted (the global bucket empties; neither key can take more than 20) and exactly 20
are refused, each refusal with Retry-After and the RateLimit fields.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route as SRoute

from ratekeeper import Limit
from ratekeeper.http import APIKey, HTTPPolicy, RateLimitMiddleware
from ratekeeper.testing import ManualClock

PER_KEY = Limit("token-bucket", "20/hour", burst=20, name="per-key")
EVERYONE = Limit("token-bucket", "30/hour", burst=30, name="everyone", scope="global")


async def hello(request: Request) -> Response:
    await asyncio.sleep(0.01)  # let requests overlap inside the server
    return PlainTextResponse("hello")


@pytest.fixture
def server() -> Iterator[str]:
    app = RateLimitMiddleware(
        Starlette(routes=[SRoute("/", hello)]),
        HTTPPolicy(limits=[PER_KEY, EVERYONE], key=APIKey()),
        clock=ManualClock(),  # no refill however long a loaded machine takes (hourly limits)
    )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="off", ws="none",
                            http="h11", access_log=False)
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not srv.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        thread.join(10)
        sock.close()


@pytest.mark.timeout(60)
async def test_real_server_counts_match_the_policy_exactly(server: str) -> None:
    limits = httpx.Limits(max_connections=50, max_keepalive_connections=50)
    async with httpx.AsyncClient(base_url=server, limits=limits, timeout=20) as client:
        tasks = [
            client.get("/", headers={"X-API-Key": key})
            for _ in range(25)
            for key in ("alice", "bob")
        ]
        responses = await asyncio.gather(*tasks)

    codes = [r.status_code for r in responses]
    assert codes.count(200) == 30
    assert codes.count(429) == 20
    per_key = {
        key: sum(1 for i, r in enumerate(responses) if r.status_code == 200 and i % 2 == k)
        for k, key in enumerate(("alice", "bob"))
    }
    assert sum(per_key.values()) == 30 and max(per_key.values()) <= 20
    for r in responses:
        assert r.headers["RateLimit-Policy"] == '"per-key";q=20;w=3600, "everyone";q=30;w=3600'
        assert r.headers["RateLimit"].startswith(('"per-key";', '"everyone";'))
        if r.status_code == 429:
            assert int(r.headers["Retry-After"]) >= 100  # one token: 120 s or 180 s away
            assert r.headers["Cache-Control"] == "no-store"
            assert r.headers["Content-Type"] == "application/problem+json"
            assert r.json()["policy"] in ("per-key", "everyone")
        else:
            assert r.text == "hello"
