from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

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

    def __init__(self, app: Any) -> None:
        self._loop = asyncio.new_event_loop()
        transport = httpx.ASGITransport(app=app, client=("testclient", 50000))
        self._client = httpx.AsyncClient(transport=transport, base_url="http://testserver")
        _open.append(self)

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self._loop.run_until_complete(self._client.get(url, **kwargs))

    def close(self) -> None:
        self._loop.run_until_complete(self._client.aclose())
        self._loop.close()


_open: list[TestClient] = []


@pytest.fixture(autouse=True)
def _close_test_clients() -> Iterator[None]:
    yield
    while _open:
        _open.pop().close()
