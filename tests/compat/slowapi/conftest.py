from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response

from ratekeeper.http.fastapi import (
    Limiter,
    RateLimitExceeded,
    SlowAPIASGIMiddleware,
    SlowAPIMiddleware,
    _rate_limit_exceeded_handler,
    get_remote_address,
)
from ratekeeper.testing import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    """The peer freezes time with hiro; here it moves only when a test advances it."""
    return ManualClock(86400.0)  # a whole number of minutes and hours: windows start here


class TestClient:
    __test__ = False  # not a test class: the peer's name kept
    """Starlette's TestClient as the peer's tests use it (``client.get(path, headers=)``),
    on httpx's ASGI transport and one event loop of its own: Starlette's warns that it
    wants httpx2, and the suite runs with warnings as errors."""

    def __init__(self, app: Any, client: tuple[str, int] = ("testclient", 50000)) -> None:
        self._loop = asyncio.new_event_loop()
        transport = httpx.ASGITransport(app=app, client=client)
        self._client = httpx.AsyncClient(transport=transport, base_url="http://testserver")
        _open.append(self)

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self._loop.run_until_complete(self._client.get(url, **kwargs))

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        return self._loop.run_until_complete(self._client.post(url, **kwargs))

    def __enter__(self) -> TestClient:
        return self

    def __exit__(self, *exc: object) -> None:
        pass  # closed after the test (the peer's ``with TestClient(app) as cli``)

    def close(self) -> None:
        self._loop.run_until_complete(self._client.aclose())
        self._loop.close()


_open: list[TestClient] = []


@pytest.fixture(autouse=True)
def _close_test_clients() -> Iterator[None]:
    yield
    while _open:
        _open.pop().close()


async def _async_rate_limit_exceeded_handler(request: Request, exc: Exception) -> Response:
    """The peer's tests/__init__.py async handler (its ``asyncio.sleep(0)`` kept)."""
    await asyncio.sleep(0)
    return _rate_limit_exceeded_handler(request, exc)


#: The peer's fixture parameters (tests/__init__.py::TestSlowapi): each middleware, and
#: the ASGI one with a sync and an async exception handler.
MIDDLEWARES = [
    pytest.param((SlowAPIMiddleware, _rate_limit_exceeded_handler), id="SlowAPIMiddleware"),
    pytest.param((SlowAPIASGIMiddleware, _rate_limit_exceeded_handler),
                 id="SlowAPIASGIMiddleware"),
    pytest.param((SlowAPIASGIMiddleware, _async_rate_limit_exceeded_handler),
                 id="SlowAPIASGIMiddleware-async-handler"),
]

Factory = Callable[..., tuple[Any, Limiter]]


def _factory(app_class: type[Starlette], clock: ManualClock, param: Any) -> Factory:
    """The peer's ``_factory(config={}, **limiter_args)``, with the clock injected (its
    log-handler mock left out: nothing asserts on it)."""
    middleware, exception_handler = param

    def build(**limiter_args: Any) -> tuple[Any, Limiter]:
        limiter_args.setdefault("key_func", get_remote_address)
        limiter = Limiter(clock=clock, **limiter_args)
        app = app_class(debug=True) if app_class is Starlette else app_class()
        app.state.limiter = limiter
        app.add_exception_handler(RateLimitExceeded, exception_handler)
        app.add_middleware(middleware)
        return app, limiter

    return build


@pytest.fixture(params=MIDDLEWARES)
def build_starlette_app(request: pytest.FixtureRequest, clock: ManualClock) -> Factory:
    """laurentS/slowapi tests/__init__.py::TestSlowapi.build_starlette_app"""
    return _factory(Starlette, clock, request.param)


@pytest.fixture(params=MIDDLEWARES)
def build_fastapi_app(request: pytest.FixtureRequest, clock: ManualClock) -> Factory:
    """laurentS/slowapi tests/__init__.py::TestSlowapi.build_fastapi_app"""
    return _factory(FastAPI, clock, request.param)
