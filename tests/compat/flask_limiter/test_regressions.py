"""Ports of alisaifee/flask-limiter tests/test_regressions.py (its Redis-only tests,
test_redis_request_slower_than_*_window and test_custom_key_prefix_with_headers, are out
of this suite's scope), against ``ratekeeper.http.flask.Limiter`` made as flask-limiter's
(conftest.py); hiro's frozen timeline is the `clock` fixture."""

from __future__ import annotations

import pytest
from flask import Blueprint

from ratekeeper.testing import ManualClock
from tests.compat.flask_limiter.conftest import Factory


def test_dynamic_limits(extension_factory: Factory, clock: ManualClock) -> None:
    """alisaifee/flask-limiter tests/test_regressions.py::test_dynamic_limits"""
    app, limiter = extension_factory({"RATELIMIT_STRATEGY": "moving-window",
                                      "RATELIMIT_HEADERS_ENABLED": True})

    def func(*a: object) -> str:
        return "1/second; 2/minute"

    @app.route("/t1")
    @limiter.limit(func)
    def t1() -> str:
        return "t1"

    with app.test_client() as cli:
        assert cli.get("/t1").status_code == 200
        assert cli.get("/t1").status_code == 429
        clock.advance(2)
        assert cli.get("/t1").status_code == 200
        assert cli.get("/t1").status_code == 429


def test_invalid_ratelimit_key(extension_factory: Factory) -> None:
    """alisaifee/flask-limiter tests/test_regressions.py::test_invalid_ratelimit_key, a
    documented difference (docs/migration.md): flask-limiter leaves out a limit whose
    key_func returns None (the request goes unlimited); ratekeeper counts the client's
    address then, so two clients without a key are two counters"""
    app, limiter = extension_factory({"RATELIMIT_HEADERS_ENABLED": True})

    def func(*a: object) -> None:
        return None

    @app.route("/t1")
    @limiter.limit("2/second", key_func=func)  # type: ignore[arg-type]
    def t1() -> str:
        return "t1"

    with app.test_client() as cli:
        assert [cli.get("/t1").status_code for _ in range(3)] == [200, 200, 429]
        other = {"REMOTE_ADDR": "10.0.0.2"}
        assert cli.get("/t1", environ_base=other).status_code == 200


def test_default_limits_with_per_route_limit(extension_factory: Factory,
                                             clock: ManualClock) -> None:
    """alisaifee/flask-limiter tests/test_regressions.py::
    test_default_limits_with_per_route_limit, a documented difference (docs/migration.md):
    the application_limits are part of the defaults, so /explicit (its decorator replaces
    them) does not count on the application's 3/minute; /default alone spends it"""
    app, limiter = extension_factory(application_limits=["3/minute"])

    @app.route("/explicit")
    @limiter.limit("1/minute")
    def explicit() -> str:
        return "explicit"

    @app.route("/default")
    def default() -> str:
        return "default"

    with app.test_client() as cli:
        assert cli.get("/explicit").status_code == 200
        assert cli.get("/explicit").status_code == 429
        # flask-limiter: 429 here (the two /explicit requests counted on 3/minute)
        assert [cli.get("/default").status_code for _ in range(4)] == [200, 200, 200, 429]
        clock.advance(60)
        assert cli.get("/explicit").status_code == 200
        assert cli.get("/default").status_code == 200


def test_application_limits_from_config(extension_factory: Factory) -> None:
    """alisaifee/flask-limiter tests/test_regressions.py::test_application_limits_from_config:
    a documented difference (docs/migration.md): RATELIMIT_DEFAULTS_PER_METHOD is refused
    when the Limiter is made, naming the alternative (the views' own @limiter.limit)"""
    with pytest.raises(ValueError, match=r"default_limits_per_method.*@limiter\.limit"):
        extension_factory(config={"RATELIMIT_APPLICATION": "4/second",
                                  "RATELIMIT_DEFAULT": "1/second",
                                  "RATELIMIT_DEFAULTS_PER_METHOD": True})


def test_endpoint_with_dot_but_not_blueprint(extension_factory: Factory) -> None:
    """alisaifee/flask-limiter tests/test_regressions.py::
    test_endpoint_with_dot_but_not_blueprint"""
    app, limiter = extension_factory(default_limits=["2/day"])

    def route() -> str:
        return "42"

    app.add_url_rule("/teapot/iam", "_teapot.iam", route)
    bp = Blueprint("teapot", __name__, url_prefix="/teapot")

    @bp.route("/")
    def bp_route() -> str:
        return "43"

    app.register_blueprint(bp)
    limiter.limit("1/day")(bp)

    with app.test_client() as cli:
        assert cli.get("/teapot/iam").status_code == 200
        assert cli.get("/teapot/iam").status_code == 200
        assert cli.get("/teapot/iam").status_code == 429
        assert cli.get("/teapot/").status_code == 200
        assert cli.get("/teapot/").status_code == 429
