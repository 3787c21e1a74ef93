"""laurentS/slowapi's tests/test_starlette_extension.py, run against ratekeeper with only
the imports changed (``slowapi.*`` -> ``ratekeeper.http.fastapi``) and time on a
`ManualClock` where the peer freezes it with hiro: ``@limiter.limit`` on plain Starlette
routes (``app.add_route``)."""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse

from ratekeeper.http.fastapi import (
    Limiter,
    RateLimitExceeded,
    _rate_limit_exceeded_handler,
    get_ipaddr,
    get_remote_address,
)
from ratekeeper.testing import ManualClock

from .conftest import TestClient


def build_starlette_app(clock: ManualClock,
                        **limiter_args: Any) -> tuple[Starlette, Limiter]:
    """The peer's tests/__init__.py fixture, with the clock injected."""
    limiter_args.setdefault("key_func", get_remote_address)
    limiter = Limiter(clock=clock, **limiter_args)
    app = Starlette(debug=True)
    app.state.limiter = limiter
    app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)
    return app, limiter


def test_single_decorator_async(clock: ManualClock) -> None:
    """laurentS/slowapi tests/test_starlette_extension.py::test_single_decorator_async"""
    app, limiter = build_starlette_app(clock, key_func=get_ipaddr)

    @limiter.limit("5/minute")
    async def t1(request: Request) -> PlainTextResponse:
        return PlainTextResponse("test")

    app.add_route("/t1", t1)
    client = TestClient(app)
    for i in range(10):
        response = client.get("/t1")
        assert response.status_code == (200 if i < 5 else 429)
        if i < 5:
            assert response.text == "test"


def test_single_decorator_sync(clock: ManualClock) -> None:
    """laurentS/slowapi tests/test_starlette_extension.py::test_single_decorator_sync"""
    app, limiter = build_starlette_app(clock, key_func=get_ipaddr)

    @limiter.limit("5/minute")
    def t1(request: Request) -> PlainTextResponse:
        return PlainTextResponse("test")

    app.add_route("/t1", t1)
    client = TestClient(app)
    for i in range(10):
        response = client.get("/t1")
        assert response.status_code == (200 if i < 5 else 429)
        if i < 5:
            assert response.text == "test"


def test_exempt_when_argument(clock: ManualClock) -> None:
    """laurentS/slowapi tests/test_starlette_extension.py::test_exempt_when_argument"""
    app, limiter = build_starlette_app(clock, key_func=get_ipaddr)

    def return_true() -> bool:
        return True

    def return_false() -> bool:
        return False

    def dynamic(request: Request) -> bool:
        user_agent = request.headers.get("User-Agent")
        if user_agent is None:
            return False
        return user_agent == "exempt"

    @limiter.limit("1/minute", exempt_when=return_true)
    def always_true(request: Request) -> PlainTextResponse:
        return PlainTextResponse("test")

    @limiter.limit("1/minute", exempt_when=return_false)
    def always_false(request: Request) -> PlainTextResponse:
        return PlainTextResponse("test")

    @limiter.limit("1/minute", exempt_when=dynamic)
    def always_dynamic(request: Request) -> PlainTextResponse:
        return PlainTextResponse("test")

    app.add_route("/true", always_true)
    app.add_route("/false", always_false)
    app.add_route("/dynamic", always_dynamic)
    client = TestClient(app)
    for _ in range(2):
        response = client.get("/true")
        assert response.status_code == 200 and response.text == "test"
    for i in range(2):
        response = client.get("/false")
        assert response.status_code == (200 if i < 1 else 429)
    for _ in range(2):
        response = client.get("/dynamic", headers={"User-Agent": "exempt"})
        assert response.status_code == 200 and response.text == "test"
    # httpx sends its own User-Agent where Starlette's TestClient sends "testclient".
    for i in range(2):
        response = client.get("/dynamic", headers={"User-Agent": "testclient"})
        assert response.status_code == (200 if i < 1 else 429)


def test_default_and_decorator_limit_merging(clock: ManualClock) -> None:
    """laurentS/slowapi tests/test_starlette_extension.py::
    test_default_and_decorator_limit_merging"""
    app, limiter = build_starlette_app(clock, key_func=lambda: "test",
                                       default_limits=["10/minute"])

    @limiter.limit("5 per minute", key_func=get_ipaddr, override_defaults=False)
    async def t1(request: Request) -> PlainTextResponse:
        return PlainTextResponse("test")

    app.add_route("/t1", t1)
    cli = TestClient(app)
    for i in range(10):
        response = cli.get("/t1", headers={"X_FORWARDED_FOR": "127.0.0.2"})
        assert response.status_code == (200 if i < 5 else 429)
    for _ in range(5):
        assert cli.get("/t1").status_code == 200
    assert cli.get("/t1").status_code == 429
    assert cli.get("/t1", headers={"X_FORWARDED_FOR": "127.0.0.3"}).status_code == 429


def test_cost(clock: ManualClock) -> None:
    """laurentS/slowapi tests/test_starlette_extension.py::test_cost"""
    app, limiter = build_starlette_app(clock, key_func=get_ipaddr)

    @limiter.limit("50/minute", cost=10)
    async def t1(request: Request) -> PlainTextResponse:
        return PlainTextResponse("test")

    app.add_route("/t1", t1)

    @limiter.limit("50/minute", cost=15)
    async def t2(request: Request) -> PlainTextResponse:
        return PlainTextResponse("test")

    app.add_route("/t2", t2)
    client = TestClient(app)
    for i in range(10):
        response = client.get("/t1")
        assert response.status_code == (200 if i < 5 else 429)
        if i < 5:
            assert response.text == "test"
        else:
            assert "error" in response.json()
        response = client.get("/t2")
        assert response.status_code == (200 if i < 3 else 429)
        if i < 3:
            assert response.text == "test"
        else:
            assert "error" in response.json()


def test_shared_decorator(clock: ManualClock) -> None:
    """laurentS/slowapi tests/test_starlette_extension.py::test_shared_decorator"""
    app, limiter = build_starlette_app(clock, key_func=get_ipaddr)

    shared_lim = limiter.shared_limit("5/minute", "somescope")

    @shared_lim
    def t1(request: Request) -> PlainTextResponse:
        return PlainTextResponse("test")

    @shared_lim
    def t2(request: Request) -> PlainTextResponse:
        return PlainTextResponse("test")

    app.add_route("/t1", t1)
    app.add_route("/t2", t2)
    client = TestClient(app)
    for i in range(10):
        response = client.get("/t1")
        assert response.status_code == (200 if i < 5 else 429)
    # the shared limit has already been hit via t1
    assert client.get("/t2").status_code == 429


def test_headers_breach(clock: ManualClock) -> None:
    """laurentS/slowapi tests/test_starlette_extension.py::test_headers_breach (``@app.route``
    is ``app.add_route``: Starlette deprecates the decorator; hiro's frozen timeline is the
    ManualClock)."""
    app, limiter = build_starlette_app(clock, headers_enabled=True,
                                       key_func=get_remote_address)

    @limiter.limit("2/second; 10 per minute; 20/hour")
    def t(request: Request) -> PlainTextResponse:
        return PlainTextResponse("test")

    app.add_route("/t1", t)
    cli = TestClient(app)
    for _ in range(11):
        resp = cli.get("/t1")
        clock.advance(1)
    assert resp.status_code == 429
    assert resp.headers.get("X-RateLimit-Limit") == "10"
    assert resp.headers.get("X-RateLimit-Remaining") == "0"
    assert resp.headers.get("Retry-After") == "50"
    # Deliberate difference (docs/migration.md): seconds from now, as RateLimit's t=, where
    # slowapi sends the epoch time of the reset.
    assert resp.headers.get("X-RateLimit-Reset") == "50"
