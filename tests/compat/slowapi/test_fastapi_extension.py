"""laurentS/slowapi's tests/test_fastapi_extension.py, run against ratekeeper with only the
imports changed (``slowapi.*`` -> ``ratekeeper.http.fastapi``) and time on a `ManualClock`
where the peer freezes it with hiro. The peer's fixture also adds SlowAPIMiddleware, which
only applies default_limits to undecorated routes; these apps have no defaults, so it is
left out here (see docs/migration.md, slowapi)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from ratekeeper.http.fastapi import (
    Limiter,
    RateLimitExceeded,
    _rate_limit_exceeded_handler,
    get_ipaddr,
    get_remote_address,
)
from ratekeeper.testing import ManualClock

from .conftest import TestClient


def build_fastapi_app(clock: ManualClock, **limiter_args: Any) -> tuple[FastAPI, Limiter]:
    """The peer's tests/__init__.py fixture, with the clock injected."""
    limiter_args.setdefault("key_func", get_remote_address)
    limiter = Limiter(clock=clock, **limiter_args)
    app = FastAPI()
    app.state.limiter = limiter
    app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)
    return app, limiter


def test_single_decorator(clock: ManualClock) -> None:
    """laurentS/slowapi tests/test_fastapi_extension.py::test_single_decorator"""
    app, limiter = build_fastapi_app(clock, key_func=get_ipaddr)

    @app.get("/t1")
    @limiter.limit("5/minute")
    async def t1(request: Request) -> PlainTextResponse:
        return PlainTextResponse("test")

    client = TestClient(app)
    for i in range(10):
        response = client.get("/t1")
        assert response.status_code == (200 if i < 5 else 429)


def test_single_decorator_not_response(clock: ManualClock) -> None:
    """laurentS/slowapi tests/test_fastapi_extension.py::test_single_decorator_not_response"""
    app, limiter = build_fastapi_app(clock, key_func=get_ipaddr)

    @app.get("/t1")
    @limiter.limit("5/minute")
    async def t1(request: Request, response: Response) -> dict[str, str]:
        return {"key": "value"}

    client = TestClient(app)
    for i in range(10):
        got = client.get("/t1")
        assert got.status_code == (200 if i < 5 else 429)


@pytest.mark.parametrize("returns_response", [True, False])
def test_multiple_decorators(clock: ManualClock, returns_response: bool) -> None:
    """laurentS/slowapi tests/test_fastapi_extension.py::test_multiple_decorators and
    ::test_multiple_decorators_not_response"""
    app, limiter = build_fastapi_app(clock, key_func=get_ipaddr)

    @app.get("/t1")
    @limiter.limit("100 per minute", lambda: "test")  # a limit for all users
    @limiter.limit("50/minute")  # per ip as per default key_func
    async def t1(request: Request, response: Response) -> Any:
        return PlainTextResponse("test") if returns_response else {"key": "value"}

    cli = TestClient(app)
    for i in range(100):
        got = cli.get("/t1", headers={"X_FORWARDED_FOR": "127.0.0.2"})
        assert got.status_code == (200 if i < 50 else 429)
    for _ in range(50):
        assert cli.get("/t1").status_code == 200
    assert cli.get("/t1").status_code == 429
    assert cli.get("/t1", headers={"X_FORWARDED_FOR": "127.0.0.3"}).status_code == 429


def test_disabled_limiter(clock: ManualClock) -> None:
    """laurentS/slowapi tests/test_fastapi_extension.py::test_disabled_limiter"""
    app, limiter = build_fastapi_app(clock, key_func=get_ipaddr, enabled=False)

    @app.get("/t1")
    @limiter.limit("5/minute")
    async def t1(request: Request) -> PlainTextResponse:
        return PlainTextResponse("test")

    @app.get("/t2")
    @limiter.limit("5/minute")
    def t2(request: Request) -> PlainTextResponse:
        return PlainTextResponse("test")

    @app.get("/t3")
    def t3(request: Request) -> PlainTextResponse:
        return PlainTextResponse("also a test")

    client = TestClient(app)
    for path in ("/t1", "/t2", "/t3"):
        assert [client.get(path).status_code for _ in range(10)] == [200] * 10


def test_cost(clock: ManualClock) -> None:
    """laurentS/slowapi tests/test_fastapi_extension.py::test_cost"""
    app, limiter = build_fastapi_app(clock, key_func=get_ipaddr)

    @app.get("/t1")
    @limiter.limit("50/minute", cost=10)
    async def t1(request: Request) -> PlainTextResponse:
        return PlainTextResponse("test")

    @app.get("/t2")
    @limiter.limit("50/minute", cost=15)
    async def t2(request: Request) -> PlainTextResponse:
        return PlainTextResponse("test")

    client = TestClient(app)
    for i in range(10):
        assert client.get("/t1").status_code == (200 if i < 5 else 429)
        assert client.get("/t2").status_code == (200 if i < 3 else 429)


def test_callable_cost(clock: ManualClock) -> None:
    """laurentS/slowapi tests/test_fastapi_extension.py::test_callable_cost"""
    app, limiter = build_fastapi_app(clock, key_func=get_ipaddr)

    @app.get("/t1")
    @limiter.limit("50/minute", cost=lambda request: int(request.headers["foo"]))
    async def t1(request: Request) -> PlainTextResponse:
        return PlainTextResponse("test")

    @app.get("/t2")
    @limiter.limit("50/minute", cost=lambda request: int(request.headers["foo"]) * 1.5)
    async def t2(request: Request) -> PlainTextResponse:
        return PlainTextResponse("test")

    client = TestClient(app)
    for i in range(10):
        assert client.get("/t1", headers={"foo": "10"}).status_code == (200 if i < 5 else 429)
        assert client.get("/t2", headers={"foo": "5"}).status_code == (200 if i < 6 else 429)


@pytest.mark.parametrize(("options", "named"), [
    ({"application_limits": ["1000/minute"]}, "scope='global'"),
    ({"key_style": "endpoint"}, "name= on the decorator"),
    ({"strategy": "fixed-window-elastic-expiry"}, "sliding-window-log"),
])
def test_slowapi_limiter_options_ratekeeper_cannot_honour_are_refused_when_made(
        options: dict[str, Any], named: str) -> None:
    """What slowapi's Limiter accepts and ratekeeper cannot honour is a ValueError naming
    the alternative when the Limiter is made, never a 500 at a request."""
    with pytest.raises(ValueError, match=named):
        Limiter(key_func=get_remote_address, **options)


@pytest.mark.parametrize("argument", [{"error_message": "slow down"}, {"per_method": True},
                                      {"methods": ["POST"]}])
def test_slowapi_decorator_arguments_ratekeeper_cannot_honour_are_refused_when_applied(
        argument: dict[str, Any]) -> None:
    """slowapi decorator arguments ratekeeper has no equivalent for: refused at
    decoration, naming docs/migration.md."""
    limiter = Limiter(key_func=get_remote_address)
    with pytest.raises(ValueError, match=r"not supported; use .*docs/migration.md"):
        limiter.limit("5/minute", **argument)


def test_dynamic_limit_provider_depending_on_key() -> None:
    """laurentS/slowapi tests/test_fastapi_extension.py::
    test_dynamic_limit_provider_depending_on_key: a deliberate difference (docs/migration.md,
    slowapi): a callable limit is refused when applied, naming the alternative, instead of
    failing at the first request."""
    def custom_key_func(*args: Any, **kwargs: Any) -> str:
        return "test"

    def dynamic_limit_provider(key: str) -> str:
        return "5/minute" if key == "test" else "10/minute"

    _app, limiter = build_fastapi_app(ManualClock(), key_func=custom_key_func)
    with pytest.raises(ValueError, match=r"callable limit .* policies file"):
        limiter.limit(dynamic_limit_provider)  # type: ignore[arg-type]


@pytest.mark.parametrize("returns_response", [True, False])
def test_single_decorator_with_headers(clock: ManualClock, returns_response: bool) -> None:
    """laurentS/slowapi tests/test_fastapi_extension.py::test_single_decorator_with_headers
    and ::test_single_decorator_not_response_with_headers. Deliberate difference
    (docs/migration.md, slowapi): an admitted response has no Retry-After (it means "wait",
    so only a 429 carries it)."""
    app, limiter = build_fastapi_app(clock, key_func=get_ipaddr, headers_enabled=True)

    @app.get("/t1")
    @limiter.limit("5/minute")
    async def t1(request: Request, response: Response) -> Any:
        return PlainTextResponse("test") if returns_response else {"key": "value"}

    client = TestClient(app)
    for i in range(10):
        response = client.get("/t1")
        assert response.status_code == (200 if i < 5 else 429)
        assert response.headers.get("X-RateLimit-Limit") == "5"
        assert ("Retry-After" in response.headers) == (i >= 5)
