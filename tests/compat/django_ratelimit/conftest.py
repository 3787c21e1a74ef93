"""django-ratelimit's test settings as ratekeeper's: its ``RATELIMIT_USE_CACHE = "default"``
(a LocMemCache cleared in each ``setUp``) is one fresh `MemoryStore` per test, its wall
clock a `ManualClock`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import override_settings

from ratekeeper import MemoryStore
from ratekeeper.testing import ManualClock
from tests.http.conftest import django_configured

__all__ = ["django_configured"]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(86400.0)


@pytest.fixture(autouse=True)
def ratekeeper_settings(django_configured: None, clock: ManualClock) -> Iterator[None]:
    with override_settings(MIDDLEWARE=[], RATEKEEPER={"store": MemoryStore(), "clock": clock}):
        yield
