"""The ASGI middleware and the FastAPI dependency, driven through real Starlette/FastAPI apps
in-process (httpx ASGITransport). Time is a ManualClock; sleeps are recorded, not waited."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import Depends, FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route as SRoute

from ratekeeper import Decision, Limit
from ratekeeper.http import (
    APIKey,
    ClientIP,
    HTTPPolicy,
    Outcome,
    RateLimitMiddleware,
    Route,
)
from ratekeeper.http.fastapi import RateLimit, RateLimited, install_problem_handler
from ratekeeper.testing import ManualClock
from tests.http.conftest import DownStore, Sleeps

PEER = "203.0.113.7"
PER_KEY = Limit("fixed-window", "2/minute", name="per-client")
GLOBAL = Limit("fixed-window", "3/minute", name="everyone", scope="global")


async def home(request: Request) -> Response:
    d: Decision | None = request.scope.get("ratekeeper.decision")
    return JSONResponse({"delay": d.delay if d is not None else None})


async def stream(request: Request) -> Response:
    async def chunks() -> AsyncIterator[bytes]:
        yield b"a"
        yield b"b"

    return StreamingResponse(chunks())


def make_app() -> Starlette:
    return Starlette(routes=[
        SRoute("/", home),
        SRoute("/search", home, methods=["GET", "POST"]),
        SRoute("/expensive", home),
        SRoute("/healthz", lambda r: PlainTextResponse("ok")),
        SRoute("/stream", stream),
    ])


def client(app: Any, peer: str = PEER) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(peer, 1234))
    return httpx.AsyncClient(transport=transport, base_url="http://testserver")


def limited(policy: Any, clock: ManualClock, **kw: Any) -> RateLimitMiddleware:
    return RateLimitMiddleware(make_app(), policy, clock=clock, **kw)


async def test_headers_on_every_response_and_problem_json(clock: ManualClock) -> None:
    app = limited(HTTPPolicy(limits=Limit("fixed-window", "3/minute", name="default"),
                             exempt_paths=["/healthz"]), clock)
    async with client(app) as c:
        ok = await c.get("/")
        missing = await c.get("/nope")  # the router's 404 gets the fields too
        streamed = await c.get("/stream")
        rejected = await c.get("/")
        health = await c.get("/healthz")
    assert ok.status_code == 200
    assert ok.headers["RateLimit-Policy"] == '"default";q=3;w=60'
    assert ok.headers["RateLimit"] == '"default";r=2;t=60'
    assert "Retry-After" not in ok.headers
    assert missing.status_code == 404 and missing.headers["RateLimit"] == '"default";r=1;t=60'
    assert streamed.text == "ab" and streamed.headers["RateLimit"] == '"default";r=0;t=60'
    assert rejected.status_code == 429
    assert rejected.headers["Retry-After"] == "60"
    assert rejected.headers["Cache-Control"] == "no-store"
    assert rejected.headers["Content-Type"] == "application/problem+json"
    assert rejected.headers["RateLimit"] == '"default";r=0;t=60'
    assert int(rejected.headers["Content-Length"]) == len(rejected.content)
    problem = rejected.json()
    assert problem["status"] == 429 and problem["policy"] == "default"
    assert problem["title"] == "Too Many Requests" and problem["retry_after"] == 60
    assert health.status_code == 200 and "RateLimit" not in health.headers
    assert app.stats["allowed"] == 3 and app.stats["rejected"] == 1 and app.stats["exempt"] == 1


async def test_retry_after_rounds_up_and_admits_when_it_says(clock: ManualClock) -> None:
    app = limited(Limit("token-bucket", "1/1500ms", burst=1, name="tb"), clock)
    async with client(app) as c:
        assert (await c.get("/")).status_code == 200
        clock.advance(0.2)
        r = await c.get("/")
        assert r.status_code == 429 and r.headers["Retry-After"] == "2"  # 1.3 s -> 2
        clock.advance(2)
        assert (await c.get("/")).status_code == 200


async def test_per_key_and_global_are_all_or_nothing(clock: ManualClock) -> None:
    app = limited(HTTPPolicy(limits=[PER_KEY, GLOBAL], key=APIKey()), clock)
    async with client(app) as c:
        a = [(await c.get("/", headers={"x-api-key": "a"})).status_code for _ in range(3)]
        b1 = await c.get("/", headers={"x-api-key": "b"})
        b2 = await c.get("/", headers={"x-api-key": "b"})
    # a's third request was rejected by its per-key limit and did NOT use global quota,
    # so b gets the one global unit left.
    assert a == [200, 200, 429]
    assert b1.status_code == 200
    assert b1.headers["RateLimit-Policy"] == '"per-client";q=2;w=60, "everyone";q=3;w=60'
    assert b2.status_code == 429 and b2.json()["policy"] == "everyone"


async def test_per_route_cost_methods_and_status(clock: ManualClock) -> None:
    units = Limit("fixed-window", "10/minute", name="units")
    app = limited(HTTPPolicy(
        routes=[Route("/expensive", units, cost=4), Route("/search", units, methods=["POST"])],
        status=503,
    ), clock)
    async with client(app) as c:
        codes = [(await c.get("/expensive")).status_code for _ in range(3)]
        assert codes == [200, 200, 503]
        r = await c.post("/search")
        assert r.status_code == 200 and r.headers["RateLimit"] == '"units";r=1;t=60'
        r = await c.get("/search")  # GET is not in the route: not limited
        assert r.status_code == 200 and "RateLimit" not in r.headers
        r = await c.get("/expensive")
        assert r.json()["status"] == 503 and r.json()["title"] == "Service Unavailable"


async def test_legacy_headers(clock: ManualClock) -> None:
    app = limited(HTTPPolicy(limits=PER_KEY, legacy_headers=True), clock)
    async with client(app) as c:
        r = await c.get("/")
    assert r.headers["X-RateLimit-Limit"] == "2"
    assert r.headers["X-RateLimit-Remaining"] == "1"
    assert r.headers["X-RateLimit-Reset"] == "60"


# -- trusted proxies ---------------------------------------------------------------------

async def test_forged_x_forwarded_for_from_untrusted_peer_does_not_change_key(
    clock: ManualClock,
) -> None:
    app = limited(HTTPPolicy(limits=PER_KEY, client_ip=ClientIP(["10.0.0.0/8"])), clock)
    async with client(app, peer=PEER) as c:
        codes = [
            (await c.get("/", headers={"x-forwarded-for": f"198.51.100.{i}"})).status_code
            for i in range(4)
        ]
    assert codes == [200, 200, 429, 429]


async def test_x_forwarded_for_from_trusted_proxy_changes_key(clock: ManualClock) -> None:
    app = limited(HTTPPolicy(limits=PER_KEY, client_ip=ClientIP(["10.0.0.0/8"])), clock)
    async with client(app, peer="10.0.0.2") as c:
        codes = [
            (await c.get("/", headers={"x-forwarded-for": f"1.1.1.1, 198.51.100.{i % 2}"}))
            .status_code
            for i in range(6)
        ]
    # Two real clients behind the proxy, each with its own 2/minute.
    assert codes == [200, 200, 200, 200, 429, 429]


async def test_forwarded_header(clock: ManualClock) -> None:
    policy = HTTPPolicy(limits=PER_KEY, client_ip=ClientIP(["10.0.0.0/8"], header="forwarded"))
    app = limited(policy, clock)
    async with client(app, peer="10.0.0.2") as c:
        for i in range(2):
            h = {"forwarded": f'for="[2001:db8:1:2::{i}]"'}  # one /64: one key
            assert (await c.get("/", headers=h)).status_code == 200
        h = {"forwarded": 'for="[2001:db8:1:2::ff]:443"'}
        assert (await c.get("/", headers=h)).status_code == 429
        assert (await c.get("/", headers={"forwarded": "for=198.51.100.9"})).status_code == 200


# -- queueing (nginx limit_req without nodelay) ------------------------------------------

async def test_queueing_seven_simultaneous_requests(clock: ManualClock, sleeps: Sleeps) -> None:
    """rate=1r/s burst=5: served after 0,1,2,3,4,5 s; the seventh gets 429."""
    lb = Limit("leaky-bucket", "1r/s", burst=5, name="queue")
    app = limited(lb, clock, sleep=sleeps.asleep)
    async with client(app) as c:
        responses = await asyncio.gather(*(c.get("/") for _ in range(7)))
    codes = sorted(r.status_code for r in responses)
    assert codes == [200] * 6 + [429]
    served_after = sorted(r.json()["delay"] for r in responses if r.status_code == 200)
    assert served_after == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert sorted(sleeps.calls) == [1.0, 2.0, 3.0, 4.0, 5.0]  # awaited before the app ran
    (rejected,) = [r for r in responses if r.status_code == 429]
    assert rejected.headers["Retry-After"] == "1"


async def test_queueing_with_delay_d_and_nodelay(clock: ManualClock, sleeps: Sleeps) -> None:
    two_stage = Limit("leaky-bucket", "1r/s", burst=5, delay=3, name="two-stage")
    app = limited(two_stage, clock, sleep=sleeps.asleep)
    async with client(app) as c:
        codes = [(await c.get("/")).status_code for _ in range(7)]
    assert codes == [200] * 6 + [429]
    assert sleeps.calls == [1.0, 2.0]  # the first 1 + D=3 pass at once

    sleeps.calls.clear()
    app = limited(Limit("leaky-bucket", "1r/s", burst=5, nodelay=True, name="nd"), clock,
                  sleep=sleeps.asleep)
    async with client(app) as c:
        codes = [(await c.get("/")).status_code for _ in range(7)]
    assert codes == [200] * 6 + [429] and sleeps.calls == []


async def test_max_delay_rejects_and_refunds(clock: ManualClock, sleeps: Sleeps) -> None:
    lb = Limit("leaky-bucket", "1r/s", burst=5, name="queue")
    app = limited(HTTPPolicy(limits=lb, max_delay=2.5), clock, sleep=sleeps.asleep)
    async with client(app) as c:
        rs = [await c.get("/") for _ in range(5)]
        assert [r.status_code for r in rs] == [200, 200, 200, 429, 429]
        assert rs[3].headers["Retry-After"] == "1"  # would wait 3 s, 0.5 s over the bound
        assert sleeps.calls == [1.0, 2.0]
        clock.advance(1.0)
        # Had the rejected requests stayed queued, this one would wait 4 s; it waits 2.
        r = await c.get("/")
        assert r.status_code == 200 and r.json()["delay"] == 2.0


# -- dry run and store failures -----------------------------------------------------------

async def test_dry_run_never_rejects_but_reports(
    clock: ManualClock, sleeps: Sleeps, caplog: pytest.LogCaptureFixture
) -> None:
    verdicts: list[str] = []
    policy = HTTPPolicy(limits=Limit("leaky-bucket", "1r/s", burst=1, name="new"),
                        dry_run=True, on_decision=lambda r, d, v: verdicts.append(v))
    app = limited(policy, clock, sleep=sleeps.asleep)
    with caplog.at_level(logging.INFO, logger="ratekeeper.http"):
        async with client(app) as c:
            rs = [await c.get("/") for _ in range(3)]
    assert [r.status_code for r in rs] == [200, 200, 200]
    assert sleeps.calls == []  # not even delayed
    assert rs[2].headers["RateLimit"] == '"new";r=0;t=2'
    assert verdicts == ["allowed", "shadow-delayed", "shadow-rejected"]
    assert app.stats["shadow-rejected"] == 1
    assert "dry run: would reject GET /" in caplog.text


async def test_dry_run_per_route(clock: ManualClock) -> None:
    new = Limit("fixed-window", "1/minute", name="new")
    app = limited(HTTPPolicy(limits=new, routes=[Route("/search", new, dry_run=True)]), clock)
    async with client(app) as c:
        assert [(await c.get("/search")).status_code for _ in range(2)] == [200, 200]
        assert [(await c.get("/")).status_code for _ in range(2)] == [429, 429]


@pytest.mark.parametrize(
    ("failure", "status"), [("open", 200), ("local", 200), ("closed", 429)]
)
async def test_store_failure_is_visible_never_500(
    clock: ManualClock, failure: Any, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    app = limited(PER_KEY, clock, store=DownStore(), failure=failure)
    async with client(app) as c:
        r = await c.get("/")
    assert r.status_code == status
    assert r.headers["X-RateLimit-Degraded"] == failure
    assert "RateLimit" in r.headers
    assert app.stats["degraded"] == 1
    assert "store" in caplog.text or "failed" in caplog.text


def test_asgi_middleware_and_fastapi_dependency_refuse_failure_raise(clock: ManualClock) -> None:
    with pytest.raises(ValueError, match=r"failure='raise'.*'open'"):
        limited(PER_KEY, clock, store=DownStore(), failure="raise")
    with pytest.raises(ValueError, match=r"failure='raise'.*'open'"):
        RateLimit(PER_KEY, failure="raise")  # type: ignore[arg-type]


async def test_degraded_header_can_be_turned_off(clock: ManualClock) -> None:
    app = limited(HTTPPolicy(limits=PER_KEY, degraded_header=None), clock, store=DownStore())
    async with client(app) as c:
        r = await c.get("/")
    assert r.status_code == 200 and "X-RateLimit-Degraded" not in r.headers


# -- scope types ------------------------------------------------------------------------

class Recorder:
    def __init__(self) -> None:
        self.scopes: list[str] = []
        self.sent: list[dict[str, Any]] = []

    async def app(self, scope: Any, receive: Any, send: Any) -> None:
        self.scopes.append(scope["type"])
        if scope["type"] == "websocket":
            await receive()
            await send({"type": "websocket.accept", "headers": [(b"x-app", b"1")]})

    async def send(self, message: Any) -> None:
        self.sent.append(message)


async def _connect() -> dict[str, Any]:
    return {"type": "websocket.connect"}


def ws_scope(**extra: Any) -> dict[str, Any]:
    return {"type": "websocket", "path": "/ws", "headers": [], "client": (PEER, 1), **extra}


async def test_lifespan_and_websockets_pass_through(clock: ManualClock) -> None:
    rec = Recorder()
    mw = RateLimitMiddleware(rec.app, Limit("fixed-window", "1/minute", name="x"), clock=clock)
    await mw({"type": "lifespan"}, _connect, rec.send)
    for _ in range(3):
        await mw(ws_scope(), _connect, rec.send)
    assert rec.scopes == ["lifespan", "websocket", "websocket", "websocket"]
    assert all(m["headers"] == [(b"x-app", b"1")] for m in rec.sent)


async def test_websockets_limited_when_configured(clock: ManualClock) -> None:
    rec = Recorder()
    policy = HTTPPolicy(limits=Limit("fixed-window", "1/minute", name="ws"), websockets=True)
    mw = RateLimitMiddleware(rec.app, policy, clock=clock)
    await mw(ws_scope(), _connect, rec.send)
    accept = rec.sent[0]
    assert accept["type"] == "websocket.accept"
    assert (b"ratelimit", b'"ws";r=0;t=60') in accept["headers"]
    await mw(ws_scope(), _connect, rec.send)
    assert rec.sent[1] == {"type": "websocket.close", "code": 1008,
                           "reason": "rate limit exceeded"}
    rec.sent.clear()
    await mw(ws_scope(extensions={"websocket.http.response": {}}), _connect, rec.send)
    start, body = rec.sent
    assert start["type"] == "websocket.http.response.start" and start["status"] == 429
    assert json.loads(body["body"])["policy"] == "ws"
    assert rec.scopes == ["websocket"]


# -- FastAPI -----------------------------------------------------------------------------

def fastapi_app(clock: ManualClock, *, problem: bool = True) -> FastAPI:
    app = FastAPI()
    if problem:
        install_problem_handler(app)
    search = RateLimit([Limit("fixed-window", "2/minute", name="search")], clock=clock)

    @app.get("/search", dependencies=[Depends(search)])
    async def do_search() -> dict[str, str]:
        return {"hits": "none"}

    @app.get("/decision")
    async def decision(d: Decision | None = Depends(search)) -> dict[str, Any]:  # noqa: B008
        return {"remaining": d.remaining if d else None}

    @app.get("/free")
    async def free() -> dict[str, str]:
        return {"ok": "yes"}

    app.add_middleware(RateLimitMiddleware, policy=HTTPPolicy(
        limits=[Limit("fixed-window", "100/minute", name="per-client"),
                Limit("fixed-window", "1000/minute", name="all", scope="global")],
    ), clock=clock)
    return app


async def test_fastapi_dependency_and_middleware(clock: ManualClock) -> None:
    app = fastapi_app(clock)
    async with client(app) as c:
        r1 = await c.get("/search")
        r2 = await c.get("/decision")  # shares the "search" limit
        r3 = await c.get("/search")
        free = await c.get("/free")
    assert r1.status_code == 200 and r1.json() == {"hits": "none"}
    # Both the middleware's and the dependency's policies are reported.
    assert r1.headers.get_list("RateLimit") == ['"search";r=1;t=60', '"per-client";r=99;t=60']
    assert r2.json() == {"remaining": 0}
    assert r3.status_code == 429
    assert r3.headers["Content-Type"] == "application/problem+json"
    assert r3.headers["Retry-After"] == "60"
    assert r3.headers["Cache-Control"] == "no-store"
    assert r3.json()["policy"] == "search"
    assert free.status_code == 200 and free.headers["RateLimit"] == '"per-client";r=96;t=60'


async def test_fastapi_dependency_without_problem_handler(clock: ManualClock) -> None:
    app = fastapi_app(clock, problem=False)
    async with client(app) as c:
        for _ in range(2):
            await c.get("/search")
        r = await c.get("/search")
    assert r.status_code == 429
    assert r.headers["Retry-After"] == "60"
    assert r.json()["detail"]["policy"] == "search"


def test_rate_limited_carries_the_decision() -> None:
    d = Decision(False, 0, 1.0, 1.0, 0.0, PER_KEY)
    exc = RateLimited(Outcome("reject", d, [("Retry-After", "1")], status=429, body=b""))
    assert exc.decision is d and exc.headers == {"Retry-After": "1"}
