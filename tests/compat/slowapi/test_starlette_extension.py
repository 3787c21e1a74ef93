"""laurentS/slowapi's tests/test_starlette_extension.py, run against ratekeeper with only
the imports changed (``slowapi.*`` -> ``ratekeeper.http.fastapi``) and time on a
`ManualClock` where the peer freezes it with hiro: ``@limiter.limit`` on plain Starlette
routes (``app.add_route``), under each of the peer's fixture parameters (SlowAPIMiddleware,
SlowAPIASGIMiddleware, and the latter with an async exception handler: conftest.py)."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from ratekeeper.http.fastapi import (
    Limiter,
    RateLimitExceeded,
    SlowAPIASGIMiddleware,
    SlowAPIMiddleware,
    get_ipaddr,
    get_remote_address,
)
from ratekeeper.testing import ManualClock

from .conftest import Factory, TestClient


def test_single_decorator_async(build_starlette_app: Factory) -> None:
    """laurentS/slowapi tests/test_starlette_extension.py::test_single_decorator_async"""
    app, limiter = build_starlette_app(key_func=get_ipaddr)

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


def test_single_decorator_sync(build_starlette_app: Factory) -> None:
    """laurentS/slowapi tests/test_starlette_extension.py::test_single_decorator_sync"""
    app, limiter = build_starlette_app(key_func=get_ipaddr)

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


def test_exempt_when_argument(build_starlette_app: Factory) -> None:
    """laurentS/slowapi tests/test_starlette_extension.py::test_exempt_when_argument"""
    app, limiter = build_starlette_app(key_func=get_ipaddr)

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


def test_default_and_decorator_limit_merging(build_starlette_app: Factory) -> None:
    """laurentS/slowapi tests/test_starlette_extension.py::
    test_default_and_decorator_limit_merging"""
    app, limiter = build_starlette_app(key_func=lambda: "test",
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


def test_cost(build_starlette_app: Factory) -> None:
    """laurentS/slowapi tests/test_starlette_extension.py::test_cost"""
    app, limiter = build_starlette_app(key_func=get_ipaddr)

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


def test_shared_decorator(build_starlette_app: Factory) -> None:
    """laurentS/slowapi tests/test_starlette_extension.py::test_shared_decorator"""
    app, limiter = build_starlette_app(key_func=get_ipaddr)

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


def test_headers_breach(build_starlette_app: Factory, clock: ManualClock) -> None:
    """laurentS/slowapi tests/test_starlette_extension.py::test_headers_breach (``@app.route``
    is ``app.add_route``: Starlette deprecates the decorator; hiro's frozen timeline is the
    ManualClock)."""
    app, limiter = build_starlette_app(headers_enabled=True,
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


def test_multiple_decorators(build_starlette_app: Factory) -> None:
    """laurentS/slowapi tests/test_starlette_extension.py::test_multiple_decorators"""
    app, limiter = build_starlette_app(key_func=get_ipaddr)

    @limiter.limit("10 per minute", lambda: "test")
    @limiter.limit("5/minute")  # per ip as per default key_func
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


def test_multiple_decorators_with_headers(build_starlette_app: Factory) -> None:
    """laurentS/slowapi tests/test_starlette_extension.py::
    test_multiple_decorators_with_headers. Deliberate difference (docs/migration.md,
    slowapi): Retry-After only on the 429s; the admitted ones carry the X-RateLimit and
    RateLimit fields."""
    app, limiter = build_starlette_app(key_func=get_ipaddr, headers_enabled=True)

    @limiter.limit("10 per minute", lambda: "test")
    @limiter.limit("5/minute")  # per ip as per default key_func
    async def t1(request: Request) -> PlainTextResponse:
        return PlainTextResponse("test")

    app.add_route("/t1", t1)
    cli = TestClient(app)
    for i in range(10):
        response = cli.get("/t1", headers={"X_FORWARDED_FOR": "127.0.0.2"})
        assert response.status_code == (200 if i < 5 else 429)
        assert ("Retry-After" in response.headers) == (i >= 5)
        assert "X-RateLimit-Remaining" in response.headers
    for _ in range(5):
        assert cli.get("/t1").status_code == 200
    assert cli.get("/t1").status_code == 429
    assert cli.get("/t1", headers={"X_FORWARDED_FOR": "127.0.0.3"}).status_code == 429


def test_headers_no_breach(build_starlette_app: Factory) -> None:
    """laurentS/slowapi tests/test_starlette_extension.py::test_headers_no_breach
    (``@app.route`` is ``app.add_route``). Deliberate differences (docs/migration.md,
    slowapi): no Retry-After on an admitted response; X-RateLimit-Reset in seconds from
    now (60 and 1 where slowapi sends now + 61 and now + 2 as epoch times)."""
    app, limiter = build_starlette_app(headers_enabled=True, key_func=get_remote_address)

    @limiter.limit("10/minute")
    def t1(request: Request) -> PlainTextResponse:
        return PlainTextResponse("test")

    @limiter.limit("2/second; 5 per minute; 10/hour")
    def t2(request: Request) -> PlainTextResponse:
        return PlainTextResponse("test")

    app.add_route("/t1", t1)
    app.add_route("/t2", t2)
    with TestClient(app) as cli:
        resp = cli.get("/t1")
        assert resp.headers.get("X-RateLimit-Limit") == "10"
        assert resp.headers.get("X-RateLimit-Remaining") == "9"
        assert resp.headers.get("X-RateLimit-Reset") == "60"
        assert "Retry-After" not in resp.headers
        resp = cli.get("/t2")
        assert resp.headers.get("X-RateLimit-Limit") == "2"
        assert resp.headers.get("X-RateLimit-Remaining") == "1"
        assert resp.headers.get("X-RateLimit-Reset") == "1"


def test_retry_after(build_starlette_app: Factory, clock: ManualClock) -> None:
    """laurentS/slowapi tests/test_starlette_extension.py::test_retry_after (the peer
    marks it "FIXME: this test is not actually running!"; it reads Retry-After from the
    admitted response). Here Retry-After comes with the 429 (the deliberate difference),
    and after waiting that long the request is admitted."""
    app, limiter = build_starlette_app(headers_enabled=True, key_func=get_remote_address)

    @limiter.limit("1/minute")
    def t(request: Request) -> PlainTextResponse:
        return PlainTextResponse("test")

    app.add_route("/t1", t)
    with TestClient(app) as cli:
        assert cli.get("/t1").status_code == 200
        resp = cli.get("/t1")
        assert resp.status_code == 429
        retry_after = int(resp.headers["Retry-After"])
        assert retry_after > 0
        clock.advance(retry_after)
        assert cli.get("/t1").status_code == 200


def test_exempt_decorator(build_starlette_app: Factory) -> None:
    """laurentS/slowapi tests/test_starlette_extension.py::test_exempt_decorator: the
    middleware applies the default limits to the undecorated /t1; @limiter.exempt routes
    (sync and async) are never limited."""
    app, limiter = build_starlette_app(headers_enabled=True, key_func=get_remote_address,
                                       default_limits=["1/minute"])

    def t1(request: Request) -> PlainTextResponse:
        return PlainTextResponse("test")

    app.add_route("/t1", t1)
    with TestClient(app) as cli:
        assert cli.get("/t1", headers={"X_FORWARDED_FOR": "127.0.0.10"}).status_code == 200
        assert cli.get("/t1", headers={"X_FORWARDED_FOR": "127.0.0.10"}).status_code == 429

    @limiter.exempt
    def t2(request: Request) -> PlainTextResponse:
        """Exempt a sync route"""
        return PlainTextResponse("test")

    app.add_route("/t2", t2)
    with TestClient(app) as cli:
        assert cli.get("/t2", headers={"X_FORWARDED_FOR": "127.0.0.10"}).status_code == 200
        assert cli.get("/t2", headers={"X_FORWARDED_FOR": "127.0.0.10"}).status_code == 200

    @limiter.exempt
    async def t3(request: Request) -> PlainTextResponse:
        """Exempt an async route"""
        return PlainTextResponse("test")

    app.add_route("/t3", t3)
    with TestClient(app) as cli:
        assert cli.get("/t3", headers={"X_FORWARDED_FOR": "127.0.0.10"}).status_code == 200
        assert cli.get("/t3", headers={"X_FORWARDED_FOR": "127.0.0.10"}).status_code == 200


def test_callable_cost(build_starlette_app: Factory) -> None:
    """laurentS/slowapi tests/test_starlette_extension.py::test_callable_cost"""
    app, limiter = build_starlette_app(key_func=get_ipaddr)

    @limiter.limit("50/minute", cost=lambda request: int(request.headers["foo"]))
    async def t1(request: Request) -> PlainTextResponse:
        return PlainTextResponse("test")

    app.add_route("/t1", t1)

    @limiter.limit("50/minute", cost=lambda request: int(request.headers["foo"]) * 1.5)
    async def t2(request: Request) -> PlainTextResponse:
        return PlainTextResponse("test")

    app.add_route("/t2", t2)
    client = TestClient(app)
    for i in range(10):
        response = client.get("/t1", headers={"foo": "10"})
        assert response.status_code == (200 if i < 5 else 429)
        if i < 5:
            assert response.text == "test"
        else:
            assert "error" in response.json()
        response = client.get("/t2", headers={"foo": "5"})
        assert response.status_code == (200 if i < 6 else 429)
        if i < 6:
            assert response.text == "test"
        else:
            assert "error" in response.json()


@pytest.mark.parametrize("key_style", ["url", "endpoint"])
def test_key_style(build_starlette_app: Factory, key_style: str) -> None:
    """laurentS/slowapi tests/test_starlette_extension.py::test_key_style (the peer's
    storage-key asserts read as the answers: per path, each path has its own count)."""
    app, limiter = build_starlette_app(key_func=lambda: "mock", key_style=key_style)

    @limiter.limit("1/minute")
    async def t1_func(request: Request) -> PlainTextResponse:
        return PlainTextResponse("test")

    app.add_route("/t1/{my_param}", t1_func)
    client = TestClient(app)
    assert client.get("/t1/param_one").status_code == 200
    second_call = client.get("/t1/param_two")
    if key_style == "url":
        assert second_call.status_code == 200
        assert client.get("/t1/param_one").status_code == 429
    else:
        assert second_call.status_code == 429


@pytest.mark.parametrize("key_style", ["url", "endpoint"])
def test_middleware_counts_the_default_limits_per_route(build_starlette_app: Factory,
                                                        key_style: str) -> None:
    """As slowapi's middleware: an undecorated route's default limits are counted per
    route (its path, or its endpoint with key_style="endpoint") and per client; a request
    for no route (a 404) is not limited."""
    app, _limiter = build_starlette_app(key_func=get_ipaddr, default_limits=["1/minute"],
                                       key_style=key_style)

    def item(request: Request) -> PlainTextResponse:
        return PlainTextResponse("item")

    def other(request: Request) -> PlainTextResponse:
        return PlainTextResponse("other")

    app.add_route("/items/{n}", item)
    app.add_route("/other", other)
    cli = TestClient(app)
    assert [cli.get("/other").status_code for _ in range(2)] == [200, 429]
    assert cli.get("/items/1").status_code == 200
    assert cli.get("/items/2").status_code == (200 if key_style == "url" else 429)
    assert cli.get("/items/1").status_code == 429
    assert cli.get("/other", headers={"X_FORWARDED_FOR": "10.0.0.1"}).status_code == 200
    assert [cli.get("/nowhere").status_code for _ in range(3)] == [404] * 3


def test_application_limits_count_every_route_of_a_client(
        build_starlette_app: Factory) -> None:
    """slowapi's ``application_limits``: one counter per client (key_func) across every
    route, decorated or not, beside each route's own limits."""
    app, limiter = build_starlette_app(key_func=get_ipaddr, default_limits=["10/minute"],
                                       application_limits=["3/minute"])

    def plain(request: Request) -> PlainTextResponse:
        return PlainTextResponse("plain")

    @limiter.limit("10/minute")
    def decorated(request: Request) -> PlainTextResponse:
        return PlainTextResponse("decorated")

    app.add_route("/plain", plain)
    app.add_route("/decorated", decorated)
    cli = TestClient(app)
    got = [cli.get(path).status_code for path in ("/plain", "/decorated", "/plain",
                                                  "/decorated")]
    assert got == [200, 200, 200, 429]
    assert cli.get("/plain").json()["error"] == "Rate limit exceeded: application:3/minute"
    assert cli.get("/plain", headers={"X_FORWARDED_FOR": "10.0.0.1"}).status_code == 200


def test_middleware_renders_a_rejection_with_the_apps_own_handler(clock: ManualClock) -> None:
    """The middleware's 429 for an undecorated route is the app's RateLimitExceeded handler
    (slowapi's middleware looks it up in ``app.exception_handlers``)."""
    limiter = Limiter(key_func=get_remote_address, default_limits=["1/minute"], clock=clock)
    app = Starlette()
    app.state.limiter = limiter

    async def teapot(request: Request, exc: Exception) -> Response:
        return PlainTextResponse("slow down", status_code=429)

    app.add_exception_handler(RateLimitExceeded, teapot)
    app.add_middleware(SlowAPIMiddleware)
    app.add_route("/t", lambda request: PlainTextResponse("ok"))
    cli = TestClient(app)
    assert cli.get("/t").text == "ok"
    assert cli.get("/t").text == "slow down"


def test_middleware_without_the_limiter_in_app_state_names_the_fix() -> None:
    """``app.add_middleware(SlowAPIMiddleware)`` without ``app.state.limiter``: an error
    saying what to set, not an AttributeError from inside."""
    app = Starlette()
    app.add_middleware(SlowAPIASGIMiddleware)
    app.add_route("/t", lambda request: PlainTextResponse("ok"))
    with pytest.raises(TypeError, match=r"app\.state\.limiter = limiter"):
        TestClient(app).get("/t")
