"""laurentS/slowapi's tests/test_fastapi_extension.py, run against ratekeeper with only the
imports changed (``slowapi.*`` -> ``ratekeeper.http.fastapi``) and time on a `ManualClock`
where the peer freezes it with hiro. Every scenario runs under each of the peer's fixture
parameters: SlowAPIMiddleware, SlowAPIASGIMiddleware, and the latter with an async
exception handler (conftest.py)."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from ratekeeper.http.fastapi import (
    Limiter,
    get_ipaddr,
    get_remote_address,
)

from .conftest import Factory, TestClient


def test_single_decorator(build_fastapi_app: Factory) -> None:
    """laurentS/slowapi tests/test_fastapi_extension.py::test_single_decorator"""
    app, limiter = build_fastapi_app(key_func=get_ipaddr)

    @app.get("/t1")
    @limiter.limit("5/minute")
    async def t1(request: Request) -> PlainTextResponse:
        return PlainTextResponse("test")

    client = TestClient(app)
    for i in range(10):
        response = client.get("/t1")
        assert response.status_code == (200 if i < 5 else 429)


def test_single_decorator_not_response(build_fastapi_app: Factory) -> None:
    """laurentS/slowapi tests/test_fastapi_extension.py::test_single_decorator_not_response"""
    app, limiter = build_fastapi_app(key_func=get_ipaddr)

    @app.get("/t1")
    @limiter.limit("5/minute")
    async def t1(request: Request, response: Response) -> dict[str, str]:
        return {"key": "value"}

    client = TestClient(app)
    for i in range(10):
        got = client.get("/t1")
        assert got.status_code == (200 if i < 5 else 429)


@pytest.mark.parametrize("returns_response", [True, False])
def test_multiple_decorators(build_fastapi_app: Factory, returns_response: bool) -> None:
    """laurentS/slowapi tests/test_fastapi_extension.py::test_multiple_decorators and
    ::test_multiple_decorators_not_response"""
    app, limiter = build_fastapi_app(key_func=get_ipaddr)

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


def test_disabled_limiter(build_fastapi_app: Factory) -> None:
    """laurentS/slowapi tests/test_fastapi_extension.py::test_disabled_limiter"""
    app, limiter = build_fastapi_app(key_func=get_ipaddr, enabled=False)

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


def test_cost(build_fastapi_app: Factory) -> None:
    """laurentS/slowapi tests/test_fastapi_extension.py::test_cost"""
    app, limiter = build_fastapi_app(key_func=get_ipaddr)

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


def test_callable_cost(build_fastapi_app: Factory) -> None:
    """laurentS/slowapi tests/test_fastapi_extension.py::test_callable_cost"""
    app, limiter = build_fastapi_app(key_func=get_ipaddr)

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
    ({"strategy": "fixed-window-elastic-expiry"}, "sliding-window-log"),
    ({"key_style": "path"}, "'url'"),
    ({"auto_check": False}, "RateLimit dependency"),
    ({"in_memory_fallback": ["1/second"]}, "failure='local'"),
    ({"retry_after": "http-date"}, "seconds"),
    ({"config_filename": ".env"}, "pass the settings"),
    ({"default_limits": [str]}, "callable in default_limits"),
    ({"application_limits": [str]}, "callable in application_limits"),
])
def test_slowapi_limiter_options_ratekeeper_cannot_honour_are_refused_when_made(
        options: dict[str, Any], named: str) -> None:
    """What slowapi's Limiter accepts and ratekeeper cannot honour is a ValueError naming
    the alternative when the Limiter is made, never a 500 at a request."""
    with pytest.raises(ValueError, match=named) as refused:
        Limiter(key_func=get_remote_address, **options)
    given = next(iter(options.values()))
    assert repr(given[0] if isinstance(given, list) and callable(given[0]) else given) \
        in str(refused.value)


def test_a_misspelt_limiter_option_is_a_type_error_naming_it_and_the_accepted_ones() -> None:
    """``stroe=`` was dropped unseen (every request then counted in a store of its own
    making); it is a TypeError naming the argument and what the Limiter takes."""
    with pytest.raises(TypeError, match=r"'stroe'; it takes .*storage_uri.*\bstore\b"):
        Limiter(key_func=get_remote_address, stroe="redis://")  # type: ignore[call-arg]


def test_slowapi_methods_argument_is_refused_when_applied_naming_the_alternative() -> None:
    """slowapi's ``methods=`` (a limit for some of a route's methods): FastAPI routes are
    per method, so the alternative is the decorator on that method's endpoint."""
    limiter = Limiter(key_func=get_remote_address)
    with pytest.raises(ValueError, match=r"methods=\['POST'\] is not supported.*@app.post"):
        limiter.limit("5/minute", methods=["POST"])


def test_dynamic_limit_provider_depending_on_key(build_fastapi_app: Factory) -> None:
    """laurentS/slowapi tests/test_fastapi_extension.py::
    test_dynamic_limit_provider_depending_on_key: a deliberate difference (docs/migration.md,
    slowapi): a callable limit is refused when applied, naming the alternative, instead of
    failing at the first request."""
    def custom_key_func(request: Request) -> str:
        return "admin" if request.headers.get("TOKEN") == "secret" else "user"

    def dynamic_limit_provider(key: str) -> str:
        return "10/minute" if key == "admin" else "5/minute"

    _app, limiter = build_fastapi_app(key_func=custom_key_func)
    with pytest.raises(ValueError, match=r"callable limit .* policies file"):
        limiter.limit(dynamic_limit_provider)  # type: ignore[arg-type]


def test_multiple_decorators_not_response_with_headers(build_fastapi_app: Factory) -> None:
    """laurentS/slowapi tests/test_fastapi_extension.py::
    test_multiple_decorators_not_response_with_headers"""
    app, limiter = build_fastapi_app(key_func=get_ipaddr, headers_enabled=True)

    @app.get("/t1")
    @limiter.limit("100 per minute", lambda: "test")  # a limit for all users
    @limiter.limit("50/minute")  # per ip as per default key_func
    async def t1(request: Request, response: Response) -> dict[str, str]:
        return {"key": "value"}

    cli = TestClient(app)
    for i in range(100):
        got = cli.get("/t1", headers={"X_FORWARDED_FOR": "127.0.0.2"})
        assert got.status_code == (200 if i < 50 else 429)
        assert "X-RateLimit-Limit" in got.headers
    for _ in range(50):
        assert cli.get("/t1").status_code == 200
    assert cli.get("/t1").status_code == 429
    assert cli.get("/t1", headers={"X_FORWARDED_FOR": "127.0.0.3"}).status_code == 429


@pytest.mark.parametrize("key_style", ["url", "endpoint"])
def test_key_style(build_fastapi_app: Factory, key_style: str) -> None:
    """laurentS/slowapi tests/test_fastapi_extension.py::test_key_style. The peer reads its
    storage keys (``LIMITER/mock//t1/param_one/1/1/minute``); here the counts show in the
    answers: per path, /t1/param_one is used up and /t1/param_two is not."""
    app, limiter = build_fastapi_app(key_func=lambda: "mock", key_style=key_style)

    @app.get("/t1/{my_param}")
    @limiter.limit("1/minute")
    async def t1_func(my_param: str, request: Request) -> PlainTextResponse:
        return PlainTextResponse("test")

    client = TestClient(app)
    assert client.get("/t1/param_one").status_code == 200
    second_call = client.get("/t1/param_two")
    if key_style == "url":
        assert second_call.status_code == 200
        assert client.get("/t1/param_one").status_code == 429
        assert client.get("/t1/param_two").status_code == 429
    else:
        assert second_call.status_code == 429


@pytest.mark.parametrize("message", ["slow down", lambda: "slow down"])
def test_error_message_is_the_429s_error_and_detail(build_fastapi_app: Factory,
                                                     message: Any) -> None:
    """slowapi's ``error_message=`` (a string, or a function of nothing): the rejection's
    ``error`` is ``"Rate limit exceeded: <message>"`` as slowapi words it, and the
    problem's ``detail``; a refusal by another limit keeps the limit's name."""
    app, limiter = build_fastapi_app(key_func=get_remote_address)

    @app.get("/t1")
    @limiter.limit("1/minute", error_message=message)
    @limiter.limit("5/minute", lambda: "everyone")
    async def t1(request: Request) -> dict[str, str]:
        return {"key": "value"}

    client = TestClient(app)
    assert client.get("/t1").status_code == 200
    refused = client.get("/t1")
    assert refused.status_code == 429
    assert refused.json()["error"] == "Rate limit exceeded: slow down"
    assert refused.json()["detail"] == "slow down"
    for n in range(4):  # four other addresses use up the shared limit
        assert TestClient(app, client=(f"198.51.100.{n}", 1)).get("/t1").status_code == 200
    other = TestClient(app, client=("198.51.100.9", 1)).get("/t1")
    assert other.json()["error"] == "Rate limit exceeded: t1:5/minute"


def test_per_method_counts_each_method_apart(build_fastapi_app: Factory) -> None:
    """slowapi's ``per_method=True``: one route of two methods, each counted on its own."""
    app, limiter = build_fastapi_app(key_func=get_remote_address)

    @app.api_route("/t1", methods=["GET", "POST"])
    @limiter.limit("1/minute", per_method=True)
    async def t1(request: Request) -> dict[str, str]:
        return {"key": "value"}

    client = TestClient(app)
    assert client.get("/t1").status_code == 200
    assert client.post("/t1").status_code == 200
    assert client.get("/t1").status_code == 429
    assert client.post("/t1").status_code == 429


@pytest.mark.parametrize("returns_response", [True, False])
def test_single_decorator_with_headers(build_fastapi_app: Factory, returns_response: bool) -> None:
    """laurentS/slowapi tests/test_fastapi_extension.py::test_single_decorator_with_headers
    and ::test_single_decorator_not_response_with_headers. Deliberate difference
    (docs/migration.md, slowapi): an admitted response has no Retry-After (it means "wait",
    so only a 429 carries it)."""
    app, limiter = build_fastapi_app(key_func=get_ipaddr, headers_enabled=True)

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
