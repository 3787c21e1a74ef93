"""Shared fixtures for the HTTP tests: injected time, a store that fails, Django settings.

Nothing here sleeps: `ManualClock` is the limiter's clock and `Sleeps` records the delays
the middleware asks for (optionally advancing the clock), so queueing is asserted exactly.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import django
import pytest
from django.conf import settings

from ratekeeper import Decision, Limit, MemoryStore, StoreUnavailable
from ratekeeper.stores._base import Check
from ratekeeper.testing import ManualClock


class Sleeps:
    """Records every requested sleep; sync and async callables, no waiting."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)

    async def asleep(self, seconds: float) -> None:
        self.calls.append(seconds)


class DownStore(MemoryStore):
    """A store whose every decision fails as if Redis were unreachable."""

    def decide_one(self, limit: Limit, key: str, cost: float, now: float) -> Decision:
        raise StoreUnavailable("connection refused (test)")

    def decide(self, checks: Sequence[Check], now: float, consume: bool = True) -> Any:
        raise StoreUnavailable("connection refused (test)")

    async def adecide_one(self, limit: Limit, key: str, cost: float, now: float) -> Decision:
        raise StoreUnavailable("connection refused (test)")

    async def adecide(self, checks: Sequence[Check], now: float, consume: bool = True) -> Any:
        raise StoreUnavailable("connection refused (test)")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(86400.0)  # a whole number of minutes and hours: windows start here


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture(scope="session")
def django_configured() -> Iterator[None]:
    """Configure Django once per session; tests override what they need."""
    if not settings.configured:
        settings.configure(
            DEBUG=False,
            SECRET_KEY="test-only-not-secret",
            ALLOWED_HOSTS=["testserver", "localhost"],
            INSTALLED_APPS=[],
            DATABASES={},
            MIDDLEWARE=[],
            ROOT_URLCONF="tests.http.django_urls",
            USE_TZ=True,
            DEFAULT_CHARSET="utf-8",
        )
        django.setup()
    yield
