"""flask-limiter's ``extension_factory`` fixture as ratekeeper's: one Flask app and one
`Limiter` on a fresh `MemoryStore` (flask-limiter's ``memory://``), its wall clock (hiro's
frozen timeline) a `ManualClock`. flask-limiter's ``Limiter(key_func, app=app,
default_limits=[...])`` is written ``Limiter(app, policy=[...])`` here: the client's address
is the default key, and ``default_limits`` are the policy's limits."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
from flask import Flask

from ratekeeper import Limit
from ratekeeper.http.flask import Limiter
from ratekeeper.testing import ManualClock

Factory = Callable[..., tuple[Flask, Limiter]]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(86400.0)


@pytest.fixture
def extension_factory(clock: ManualClock) -> Factory:
    def build(default_limits: Sequence[str] = ()) -> tuple[Flask, Limiter]:
        app = Flask(__name__)
        policy = [Limit("fixed-window", rate, name=f"default:{rate}")
                  for rate in default_limits]
        return app, Limiter(app, policy=policy, clock=clock)

    return build
