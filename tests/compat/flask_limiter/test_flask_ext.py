"""Ports of alisaifee/flask-limiter tests/test_flask_ext.py and test_configuration.py
scenarios: the defaults counted per route, and flask-limiter's ``RATELIMIT_*`` config keys
read from the app the `Limiter` is made with (conftest.py: flask-limiter's factory)."""

from __future__ import annotations

import pytest
from flask import Flask

from ratekeeper.http.flask import Limiter, get_remote_address
from ratekeeper.testing import ManualClock
from tests.compat.flask_limiter.conftest import Factory


def test_combined_rate_limits(extension_factory: Factory) -> None:
    """alisaifee/flask-limiter tests/test_flask_ext.py::test_combined_rate_limits: the
    defaults from ``RATELIMIT_DEFAULT`` (one string of two rates); a decorated view's own
    limits replace them"""
    app, limiter = extension_factory({"RATELIMIT_DEFAULT": "1 per hour; 10 per day"})

    @app.route("/t1")
    @limiter.limit("100 per hour;10/minute")
    def t1() -> str:
        return "t1"

    @app.route("/t2")
    def t2() -> str:
        return "t2"

    with app.test_client() as cli:
        assert cli.get("/t1").status_code == 200
        assert cli.get("/t2").status_code == 200
        assert cli.get("/t2").status_code == 429


def test_default_limits_count_per_route(extension_factory: Factory) -> None:
    """flask-limiter counts ``default_limits`` per route (alisaifee/flask-limiter
    tests/test_flask_ext.py::test_combined_rate_limits relies on it; its docs: "applied to
    every route"): a client that used /a's default quota still has /b's; the
    ``application_limits`` stay one counter across routes"""
    app, _limiter = extension_factory(default_limits=["1/minute"],
                                      application_limits=["3/minute"])

    @app.route("/a")
    def a() -> str:
        return "a"

    @app.route("/b")
    def b() -> str:
        return "b"

    @app.route("/c")
    def c() -> str:
        return "c"

    with app.test_client() as cli:
        assert cli.get("/a").status_code == 200
        assert cli.get("/a").status_code == 429
        assert cli.get("/b").status_code == 200
        assert cli.get("/c").status_code == 200
        assert cli.get("/b").status_code == 429


def test_config_keys_are_limiter_arguments(clock: ManualClock) -> None:
    """alisaifee/flask-limiter tests/test_configuration.py (its ConfigVars read at init):
    RATELIMIT_ENABLED, RATELIMIT_STORAGE_URI, RATELIMIT_STRATEGY, RATELIMIT_APPLICATION"""
    app = Flask(__name__)
    app.config.update(RATELIMIT_STORAGE_URI="memory://", RATELIMIT_STRATEGY="moving-window",
                      RATELIMIT_APPLICATION="2/minute", RATELIMIT_HEADERS_ENABLED=True)
    Limiter(get_remote_address, app=app, clock=clock)

    @app.route("/")
    def root() -> str:
        return "root"

    with app.test_client() as cli:
        got = [cli.get("/") for _ in range(3)]
        assert [r.status_code for r in got] == [200, 200, 429]
        assert "application:2/minute" in got[0].headers["RateLimit-Policy"]
    off = Flask(__name__)
    off.config["RATELIMIT_ENABLED"] = False
    Limiter(get_remote_address, app=off, default_limits=["1/minute"], clock=clock)
    off.add_url_rule("/", "root", root)
    with off.test_client() as cli:
        assert [cli.get("/").status_code for _ in range(3)] == [200, 200, 200]


def test_config_key_without_equivalent_is_refused_naming_the_alternative() -> None:
    """A flask-limiter config key ratekeeper cannot honour is refused when the Limiter is
    made, naming the key, its value and what to do instead (was silently ignored)."""
    app = Flask(__name__)
    app.config["RATELIMIT_SWALLOW_ERRORS"] = True
    with pytest.raises(ValueError, match=r"RATELIMIT_SWALLOW_ERRORS.*True.*failure='open'"):
        Limiter(get_remote_address, app=app)


def test_init_app_refuses_config_keys_it_would_not_read() -> None:
    """The app-factory pattern (Limiter(...) then init_app(app)) with RATELIMIT_* keys in
    the app's config is refused naming them and Limiter(key_func, app=app) (was silently
    ignored: the config's limits never applied)."""
    limiter = Limiter(get_remote_address)
    app = Flask(__name__)
    app.config["RATELIMIT_DEFAULT"] = "1/minute"
    with pytest.raises(ValueError, match=r"RATELIMIT_DEFAULT.*app=app"):
        limiter.init_app(app)
