"""flask-limiter's ``extension_factory`` fixture as ratekeeper's: one Flask app and one
`Limiter` on a fresh `MemoryStore` (flask-limiter's ``memory://``), its wall clock (hiro's
frozen timeline) a `ManualClock`. flask-limiter's ``Limiter(key_func, app=app,
default_limits=[...])`` is written ``Limiter(app, policy=[...])`` here: the client's address
is the default key, and ``default_limits`` are the policy's limits."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest
from flask import Flask, request

from ratekeeper.http.flask import Limiter, get_remote_address
from ratekeeper.testing import ManualClock

Factory = Callable[..., tuple[Flask, Limiter]]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(86400.0)


@pytest.fixture
def extension_factory(clock: ManualClock) -> Factory:
    """flask-limiter's ``extension_factory(config={}, **limiter_args)``."""
    def build(config: Mapping[str, Any] | None = None, *,
              key_func: Callable[[], str] = get_remote_address,
              **limiter_args: Any) -> tuple[Flask, Limiter]:
        app = Flask(__name__)
        for k, v in (config or {}).items():
            app.config.setdefault(k, v)
        return app, Limiter(key_func, app=app, storage_uri="memory://", clock=clock,
                            **limiter_args)

    return build


def get_ip_from_header() -> str:
    """flask-limiter's tests' key function: the ``Test-IP`` header."""
    return request.headers.get("Test-IP") or "127.0.0.1"
