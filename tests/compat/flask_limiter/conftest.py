"""flask-limiter's ``extension_factory`` fixture as ratekeeper's: one Flask app and one
`Limiter` on a fresh `MemoryStore` (flask-limiter's ``memory://``), its wall clock (hiro's
frozen timeline) a `ManualClock`. flask-limiter's ``Limiter(key_func, app=app,
default_limits=[...])`` is written ``Limiter(app, policy=[...])`` here: the client's address
is the default key, and ``default_limits`` are the policy's limits."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
from flask import Flask

from ratekeeper.http.flask import Limiter, get_remote_address
from ratekeeper.testing import ManualClock

Factory = Callable[..., tuple[Flask, Limiter]]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(86400.0)


@pytest.fixture
def extension_factory(clock: ManualClock) -> Factory:
    def build(default_limits: Sequence[str] = ()) -> tuple[Flask, Limiter]:
        app = Flask(__name__)
        return app, Limiter(get_remote_address, app=app, default_limits=default_limits,
                            storage_uri="memory://", clock=clock)

    return build
