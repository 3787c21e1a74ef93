"""The WSGI middleware through a real Flask app (Flask's test client), plus a bare WSGI app.
Time is a ManualClock; queueing sleeps are recorded, not waited."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pytest
from flask import Flask, Response, request

from ratekeeper import Limit
from ratekeeper.http import APIKey, ClientIP, HTTPPolicy, WSGIRateLimitMiddleware
from ratekeeper.testing import ManualClock
from tests.http.conftest import DownStore, Sleeps

PER_KEY = Limit("fixed-window", "2/minute", name="per-client")
GLOBAL = Limit("fixed-window", "3/minute", name="everyone", scope="global")


def flask_app(policy: Any, clock: ManualClock, **kw: Any) -> tuple[Flask, WSGIRateLimitMiddleware]:
    app = Flask(__name__)

    @app.get("/")
    def home() -> dict[str, Any]:
        d = request.environ.get("ratekeeper.decision")
        return {"delay": d.delay if d is not None else None}

    @app.get("/stream")
    def stream() -> Response:
        return Response(iter([b"a", b"b"]))

    @app.get("/healthz")
    def health() -> str:
        return "ok"

    mw = WSGIRateLimitMiddleware(app.wsgi_app, policy, clock=clock, **kw)
    app.wsgi_app = mw  # type: ignore[method-assign]
    return app, mw


def test_flask_headers_and_rejection(clock: ManualClock) -> None:
    app, mw = flask_app(HTTPPolicy(limits=Limit("fixed-window", "3/minute", name="default"),
                                   exempt_paths=["/healthz"], legacy_headers=True), clock)
    c = app.test_client()
    ok = c.get("/")
    missing = c.get("/nope")
    streamed = c.get("/stream")
    rejected = c.get("/")
    health = c.get("/healthz")
    assert ok.status_code == 200
    assert ok.headers["RateLimit-Policy"] == '"default";q=3;w=60'
    assert ok.headers["RateLimit"] == '"default";r=2;t=60'
    assert ok.headers["X-RateLimit-Remaining"] == "2"
    assert missing.status_code == 404 and missing.headers["RateLimit"] == '"default";r=1;t=60'
    assert streamed.data == b"ab" and streamed.headers["RateLimit"] == '"default";r=0;t=60'
    assert rejected.status_code == 429
    assert rejected.status == "429 Too Many Requests"
    assert rejected.headers["Retry-After"] == "60"
    assert rejected.headers["Cache-Control"] == "no-store"
    assert rejected.headers["Content-Type"] == "application/problem+json"
    assert int(rejected.headers["Content-Length"]) == len(rejected.data)
    assert json.loads(rejected.data)["policy"] == "default"
    assert health.status_code == 200 and "RateLimit" not in health.headers
    assert mw.stats["rejected"] == 1


def test_flask_per_key_and_global_all_or_nothing(clock: ManualClock) -> None:
    app, _ = flask_app(HTTPPolicy(limits=[PER_KEY, GLOBAL], key=APIKey()), clock)
    c = app.test_client()
    a = [c.get("/", headers={"X-API-Key": "a"}).status_code for _ in range(3)]
    b = [c.get("/", headers={"X-API-Key": "b"}).status_code for _ in range(2)]
    assert a == [200, 200, 429] and b == [200, 429]


def test_flask_trusted_proxies(clock: ManualClock) -> None:
    app, _ = flask_app(HTTPPolicy(limits=PER_KEY, client_ip=ClientIP(["10.0.0.0/8"])), clock)
    c = app.test_client()
    forged = [
        c.get("/", headers={"X-Forwarded-For": f"198.51.100.{i}"},
              environ_base={"REMOTE_ADDR": "203.0.113.7"}).status_code
        for i in range(3)
    ]
    assert forged == [200, 200, 429]
    proxied = [
        c.get("/", headers={"X-Forwarded-For": f"6.6.6.6, 198.51.100.{i % 2}"},
              environ_base={"REMOTE_ADDR": "10.0.0.2"}).status_code
        for i in range(6)
    ]
    assert proxied == [200, 200, 200, 200, 429, 429]


def test_flask_queueing(clock: ManualClock, sleeps: Sleeps) -> None:
    app, _ = flask_app(Limit("leaky-bucket", "1r/s", burst=5, name="queue"), clock,
                       sleep=sleeps)
    c = app.test_client()
    rs = [c.get("/") for _ in range(7)]
    assert [r.status_code for r in rs] == [200] * 6 + [429]
    assert [r.json["delay"] for r in rs[:6]] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]  # type: ignore[index]
    assert sleeps.calls == [1.0, 2.0, 3.0, 4.0, 5.0]


def test_flask_queueing_sleep_advances_a_manual_clock() -> None:
    """ManualClock.sleep advances the clock: each queued request is served when its turn
    comes, so sequential requests after their sleeps all pass without queueing up."""
    clock = ManualClock(0.0)
    app, _ = flask_app(Limit("leaky-bucket", "1r/s", burst=5, name="queue"), clock,
                       sleep=clock.sleep)
    c = app.test_client()
    rs = [c.get("/") for _ in range(3)]
    assert [r.json["delay"] for r in rs] == [0.0, 1.0, 1.0]  # type: ignore[index]
    assert clock.slept == [1.0, 1.0]


def test_flask_max_delay(clock: ManualClock, sleeps: Sleeps) -> None:
    lb = Limit("leaky-bucket", "1r/s", burst=5, name="queue")
    app, _ = flask_app(HTTPPolicy(limits=lb, max_delay=1), clock, sleep=sleeps)
    c = app.test_client()
    assert [c.get("/").status_code for _ in range(4)] == [200, 200, 429, 429]
    clock.advance(1)
    assert c.get("/").status_code == 200


def test_flask_dry_run(clock: ManualClock) -> None:
    app, mw = flask_app(HTTPPolicy(limits=PER_KEY, dry_run=True), clock)
    c = app.test_client()
    assert [c.get("/").status_code for _ in range(4)] == [200] * 4
    assert mw.stats["shadow-rejected"] == 2


@pytest.mark.parametrize(("failure", "status"), [("open", 200), ("closed", 429), ("local", 200)])
def test_flask_store_failure_visible(clock: ManualClock, failure: Any, status: int) -> None:
    app, _ = flask_app(PER_KEY, clock, store=DownStore(), failure=failure)
    r = app.test_client().get("/")
    assert r.status_code == status
    assert r.headers["X-RateLimit-Degraded"] == failure


def test_wsgi_middleware_refuses_failure_raise(clock: ManualClock) -> None:
    with pytest.raises(ValueError, match=r"failure='raise'"):
        flask_app(PER_KEY, clock, store=DownStore(), failure="raise")


def test_plain_wsgi_app_and_exc_info(clock: ManualClock) -> None:
    calls: list[Any] = []

    def wsgi(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        start_response("500 Internal Server Error", [("Content-Type", "text/plain")],
                       None)
        return [b"x"]

    mw = WSGIRateLimitMiddleware(wsgi, PER_KEY, clock=clock)

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        calls.append((status, headers, exc_info))
        return lambda b: None

    env = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "REMOTE_ADDR": "203.0.113.7"}
    assert list(mw(env, start_response)) == [b"x"]
    status, headers, _ = calls[0]
    assert status.startswith("500") and ("RateLimit", '"per-client";r=1;t=60') in headers
