"""Ports of alisaifee/flask-limiter tests/test_decorators.py scenarios that use
flask-limiter's decorator arguments (key_func, override_defaults, deduct_when, exempt_when,
per_method, methods, cost, scope), callable limits, ``shared_limit`` and
``request_filter``, run against ``ratekeeper.http.flask.Limiter`` made as flask-limiter's
(conftest.py); hiro's frozen timeline is a `ManualClock`."""

from __future__ import annotations

import logging
from unittest import mock

import pytest
from flask import Blueprint, Flask, current_app, request
from werkzeug.exceptions import BadRequest

from ratekeeper.http.flask import Limiter
from ratekeeper.testing import ManualClock
from tests.compat.flask_limiter.conftest import Factory, get_ip_from_header


def test_multiple_decorators(extension_factory: Factory) -> None:
    """alisaifee/flask-limiter tests/test_decorators.py::test_multiple_decorators"""
    app, limiter = extension_factory(key_func=get_ip_from_header)

    @app.route("/t1")
    @limiter.limit("100 per minute", key_func=lambda: "test")  # one counter for all users
    @limiter.limit("50/minute")  # per Test-IP, the limiter's key_func
    def t1() -> str:
        return "test"

    with app.test_client() as cli:
        for i in range(100):
            assert (200 if i < 50 else 429) == cli.get(
                "/t1", headers={"Test-IP": "127.0.0.2"}).status_code
        for _ in range(50):
            assert cli.get("/t1").status_code == 200
        assert cli.get("/t1").status_code == 429
        assert cli.get("/t1", headers={"Test-IP": "127.0.0.3"}).status_code == 429


def test_decorated_limit_with_scope(extension_factory: Factory) -> None:
    """alisaifee/flask-limiter tests/test_decorators.py::test_decorated_limit_with_scope"""
    app, limiter = extension_factory()

    @app.route("/t/<path:path>")
    @limiter.limit("1/second", scope=lambda _: str((request.view_args or {})["path"]))
    def t(path: str) -> str:
        return "test"

    with app.test_client() as cli:
        assert cli.get("/t/1").status_code == 200
        assert cli.get("/t/1").status_code == 429
        assert cli.get("/t/2").status_code == 200
        assert cli.get("/t/2").status_code == 429


def test_decorated_limit_with_conditional_deduction(extension_factory: Factory,
                                                    clock: ManualClock) -> None:
    """alisaifee/flask-limiter tests/test_decorators.py::
    test_decorated_limit_with_conditional_deduction"""
    app, limiter = extension_factory()

    @app.route("/t/<path:path>")
    @limiter.limit("1/second", deduct_when=lambda resp: resp.status_code == 200)
    @limiter.limit("1/minute", deduct_when=lambda resp: resp.status_code == 400)
    def t(path: str) -> str:
        if path == "1":
            return "test"
        raise BadRequest()

    with app.test_client() as cli:
        assert cli.get("/t/1").status_code == 200
        assert cli.get("/t/1").status_code == 429
        clock.advance(1)
        assert cli.get("/t/2").status_code == 400
        clock.advance(1)
        assert cli.get("/t/1").status_code == 429
        assert cli.get("/t/2").status_code == 429
        clock.advance(60)
        assert cli.get("/t/1").status_code == 200


def test_shared_limit_with_conditional_deduction(extension_factory: Factory,
                                                 clock: ManualClock) -> None:
    """alisaifee/flask-limiter tests/test_decorators.py::
    test_shared_limit_with_conditional_deduction"""
    app, limiter = extension_factory()
    bp = Blueprint("main", __name__)
    limit = limiter.shared_limit("2/minute", "not_found",
                                 deduct_when=lambda response: response.status_code == 400)

    @app.route("/test/<path:path>")
    @limit
    def app_test(path: str) -> str:
        if path != "1":
            raise BadRequest()
        return path

    @bp.route("/test/<path:path>")
    def bp_test(path: str) -> str:
        if path != "1":
            raise BadRequest()
        return path

    limit(bp)
    app.register_blueprint(bp, url_prefix="/bp")

    with app.test_client() as cli:
        assert cli.get("/bp/test/1").status_code == 200
        assert cli.get("/bp/test/1").status_code == 200
        assert cli.get("/test/1").status_code == 200
        assert cli.get("/bp/test/2").status_code == 400
        assert cli.get("/test/2").status_code == 400
        assert cli.get("/bp/test/2").status_code == 429
        assert cli.get("/bp/test/1").status_code == 429
        assert cli.get("/test/1").status_code == 429
        assert cli.get("/test/2").status_code == 429
        clock.advance(60)
        assert cli.get("/bp/test/1").status_code == 200
        assert cli.get("/test/1").status_code == 200


def test_decorated_limits_with_combined_defaults(extension_factory: Factory,
                                                 clock: ManualClock) -> None:
    """alisaifee/flask-limiter tests/test_decorators.py::
    test_decorated_limits_with_combined_defaults"""
    app, limiter = extension_factory(default_limits=["2/minute"])

    @app.route("/")
    @limiter.limit("1/second", override_defaults=False)
    def root() -> str:
        return "root"

    with app.test_client() as cli:
        assert cli.get("/").status_code == 200
        assert cli.get("/").status_code == 429
        clock.advance(60)
        assert cli.get("/").status_code == 200
        clock.advance(1)
        assert cli.get("/").status_code == 200
        clock.advance(1)
        assert cli.get("/").status_code == 429


def test_decorated_dynamic_limits(extension_factory: Factory, clock: ManualClock) -> None:
    """alisaifee/flask-limiter tests/test_decorators.py::test_decorated_dynamic_limits"""
    app, limiter = extension_factory({"X": "2 per second"}, default_limits=["1/second"])

    def request_context_limit() -> str:
        limits = {"127.0.0.1": "10 per minute", "127.0.0.2": "1 per minute"}
        remote_addr = (request.headers.get("Test-IP") or "").split(",")[0] or "127.0.0.1"
        return limits.setdefault(remote_addr, "1 per minute")

    @app.route("/t1")
    @limiter.limit("20/day")
    @limiter.limit(lambda: current_app.config.get("X"))
    @limiter.limit(request_context_limit)
    def t1() -> str:
        return "42"

    @app.route("/t2")
    @limiter.limit(lambda: current_app.config.get("X"))
    def t2() -> str:
        return "42"

    r1 = {"Test-IP": "127.0.0.1, 127.0.0.0"}
    r2 = {"Test-IP": "127.0.0.2"}
    with app.test_client() as cli:
        for _ in range(10):
            assert cli.get("/t1", headers=r1).status_code == 200
            clock.advance(1)
        assert cli.get("/t1", headers=r1).status_code == 429
        assert cli.get("/t1", headers=r2).status_code == 200
        assert cli.get("/t1", headers=r2).status_code == 429
        clock.advance(60)
        assert cli.get("/t1", headers=r2).status_code == 200
        assert cli.get("/t2").status_code == 200
        assert cli.get("/t2").status_code == 200
        assert cli.get("/t2").status_code == 429
        clock.advance(1)
        assert cli.get("/t2").status_code == 200


def test_invalid_decorated_dynamic_limits(caplog: pytest.LogCaptureFixture,
                                          clock: ManualClock) -> None:
    """alisaifee/flask-limiter tests/test_decorators.py::test_invalid_decorated_dynamic_limits:
    a callable limit naming no rate is skipped with an error logged at each request, and the
    defaults decide. (The peer's "2 per sec" is a rate here, so this port's is "2 per
    parsec"; ratekeeper logs no INFO line for the rejection.)"""
    caplog.set_level(logging.INFO)
    app = Flask(__name__)
    app.config.setdefault("X", "2 per parsec")
    limiter = Limiter(get_ip_from_header, app=app, default_limits=["1/second"], clock=clock)

    @app.route("/t1")
    @limiter.limit(lambda: current_app.config.get("X"))
    def t1() -> str:
        return "42"

    with app.test_client() as cli:
        assert cli.get("/t1").status_code == 200
        assert cli.get("/t1").status_code == 429
    failed = [r for r in caplog.records if "failed to load ratelimit" in r.getMessage()]
    assert len(failed) == 2
    assert "'2 per parsec'" in failed[0].getMessage()


def test_decorated_limit_empty_exempt(caplog: pytest.LogCaptureFixture,
                                      clock: ManualClock) -> None:
    """alisaifee/flask-limiter tests/test_decorators.py::test_decorated_limit_empty_exempt"""
    app = Flask(__name__)
    limiter = Limiter(lambda: request.remote_addr or "", app=app, clock=clock)

    @app.route("/t1")
    @limiter.limit(lambda: "")
    def t1() -> str:
        return "42"

    with app.test_client() as cli:
        assert cli.get("/t1").status_code == 200
        assert cli.get("/t1").status_code == 200
    assert not caplog.records


def test_named_shared_limit(extension_factory: Factory) -> None:
    """alisaifee/flask-limiter tests/test_decorators.py::test_named_shared_limit"""
    app, limiter = extension_factory()
    shared_limit_a = limiter.shared_limit("1/minute", scope="a")
    shared_limit_b = limiter.shared_limit("1/minute", scope="b")

    @app.route("/t1")
    @shared_limit_a
    def route1() -> str:
        return "route1"

    @app.route("/t2")
    @shared_limit_a
    def route2() -> str:
        return "route2"

    @app.route("/t3")
    @shared_limit_b
    def route3() -> str:
        return "route3"

    with app.test_client() as cli:
        assert cli.get("/t1").status_code == 200
        assert cli.get("/t3").status_code == 200
        assert cli.get("/t2").status_code == 429


def test_dynamic_shared_limit(extension_factory: Factory) -> None:
    """alisaifee/flask-limiter tests/test_decorators.py::test_dynamic_shared_limit"""
    app, limiter = extension_factory()
    fn_a = mock.Mock(return_value="foo")
    fn_b = mock.Mock(return_value="bar")
    dy_limit_a = limiter.shared_limit("1/minute", scope=fn_a)
    dy_limit_b = limiter.shared_limit("1/minute", scope=fn_b)

    @app.route("/t1")
    @dy_limit_a
    def t1() -> str:
        return "route1"

    @app.route("/t2")
    @dy_limit_a
    def t2() -> str:
        return "route2"

    @app.route("/t3")
    @dy_limit_b
    def t3() -> str:
        return "route3"

    with app.test_client() as cli:
        assert cli.get("/t1").status_code == 200
        assert cli.get("/t3").status_code == 200
        assert cli.get("/t2").status_code == 429
        assert cli.get("/t3").status_code == 429
        assert fn_a.call_count == 2
        assert fn_b.call_count == 2
        fn_b.assert_called_with("t3")
        fn_a.assert_has_calls([mock.call("t1"), mock.call("t2")])


def test_conditional_limits(clock: ManualClock) -> None:
    """alisaifee/flask-limiter tests/test_decorators.py::test_conditional_limits"""
    app = Flask(__name__)
    limiter = Limiter(get_ip_from_header, app=app, clock=clock)
    is_exempt = False

    @app.route("/limited")
    @limiter.limit("1 per day")
    def limited_route() -> str:
        return "passed"

    @app.route("/unlimited")
    @limiter.limit("1 per day", exempt_when=lambda: True)
    def never_limited_route() -> str:
        return "should always pass"

    @app.route("/conditional")
    @limiter.limit("1 per day", exempt_when=lambda: is_exempt)
    def conditionally_limited_route() -> str:
        return "conditional"

    with app.test_client() as cli:
        assert cli.get("/limited").status_code == 200
        assert cli.get("/limited").status_code == 429
        assert cli.get("/unlimited").status_code == 200
        assert cli.get("/unlimited").status_code == 200
        assert cli.get("/conditional").status_code == 200
        assert cli.get("/conditional").status_code == 429
        is_exempt = True
        assert cli.get("/conditional").status_code == 200
        is_exempt = False
        assert cli.get("/conditional").status_code == 429


def test_conditional_shared_limits(clock: ManualClock) -> None:
    """alisaifee/flask-limiter tests/test_decorators.py::test_conditional_shared_limits"""
    app = Flask(__name__)
    limiter = Limiter(get_ip_from_header, app=app, clock=clock)
    is_exempt = False

    @app.route("/limited")
    @limiter.shared_limit("1 per day", "test_scope")
    def limited_route() -> str:
        return "passed"

    @app.route("/unlimited")
    @limiter.shared_limit("1 per day", "test_scope", exempt_when=lambda: True)
    def never_limited_route() -> str:
        return "should always pass"

    @app.route("/conditional")
    @limiter.shared_limit("1 per day", "test_scope", exempt_when=lambda: is_exempt)
    def conditionally_limited_route() -> str:
        return "conditional"

    with app.test_client() as cli:
        assert cli.get("/unlimited").status_code == 200
        assert cli.get("/unlimited").status_code == 200
        assert cli.get("/limited").status_code == 200
        assert cli.get("/limited").status_code == 429
        assert cli.get("/conditional").status_code == 429
        is_exempt = True
        assert cli.get("/conditional").status_code == 200
        is_exempt = False
        assert cli.get("/conditional").status_code == 429


def test_whitelisting(clock: ManualClock) -> None:
    """alisaifee/flask-limiter tests/test_decorators.py::test_whitelisting"""
    app = Flask(__name__)
    limiter = Limiter(get_ip_from_header, app=app, default_limits=["1/minute"],
                      headers_enabled=True, clock=clock)

    @app.route("/")
    def t() -> str:
        return "test"

    @limiter.request_filter
    def w() -> bool:
        return request.headers.get("internal", None) == "true"

    with app.test_client() as cli:
        assert cli.get("/").status_code == 200
        assert cli.get("/").status_code == 429
        clock.advance(60)
        assert cli.get("/").status_code == 200
        for _ in range(10):
            assert cli.get("/", headers={"internal": "true"}).status_code == 200


def test_separate_method_limits(extension_factory: Factory) -> None:
    """alisaifee/flask-limiter tests/test_decorators.py::test_separate_method_limits"""
    app, limiter = extension_factory()

    @app.route("/", methods=["GET", "POST"])
    @limiter.limit("1/second", per_method=True)
    def root() -> str:
        return "root"

    with app.test_client() as cli:
        assert cli.get("/").status_code == 200
        assert cli.get("/").status_code == 429
        assert cli.post("/").status_code == 200
        assert cli.post("/").status_code == 429


def test_explicit_method_limits(extension_factory: Factory) -> None:
    """alisaifee/flask-limiter tests/test_decorators.py::test_explicit_method_limits"""
    app, limiter = extension_factory(default_limits=["2/second"])

    @app.route("/", methods=["GET", "POST"])
    @limiter.limit("1/second", methods=["GET"])
    def root() -> str:
        return "root"

    with app.test_client() as cli:
        assert cli.get("/").status_code == 200
        assert cli.get("/").status_code == 429
        assert cli.post("/").status_code == 200
        assert cli.post("/").status_code == 200
        assert cli.post("/").status_code == 429


def test_limit_multiple_cost(extension_factory: Factory) -> None:
    """alisaifee/flask-limiter tests/test_decorators.py::test_limit_multiple_cost"""
    app, limiter = extension_factory()

    @app.route("/root")
    @limiter.limit("4/second", cost=2)
    def root() -> str:
        return "root"

    with app.test_client() as cli:
        assert cli.get("/root").status_code == 200
        assert cli.get("/root").status_code == 200
        assert cli.get("/root").status_code == 429


def test_limit_multiple_cost_callable(extension_factory: Factory) -> None:
    """alisaifee/flask-limiter tests/test_decorators.py::test_limit_multiple_cost_callable"""
    app, limiter = extension_factory()

    @app.route("/root")
    @limiter.limit("4/second", cost=lambda: 2)
    def root() -> str:
        return "root"

    with app.test_client() as cli:
        assert cli.get("/root").status_code == 200
        assert cli.get("/root").status_code == 200
        assert cli.get("/root").status_code == 429


@pytest.mark.parametrize("cost", [2, lambda: 2], ids=["number", "callable"])
def test_shared_limit_multiple_cost(extension_factory: Factory, cost: object) -> None:
    """alisaifee/flask-limiter tests/test_decorators.py::test_shared_limit_multiple_cost and
    ::test_shared_limit_multiple_cost_callable"""
    app, limiter = extension_factory()
    shared_limit = limiter.shared_limit("4/minute", scope="a", cost=cost)

    @app.route("/t1")
    @shared_limit
    def route1() -> str:
        return "route1"

    @app.route("/t2")
    @shared_limit
    def route2() -> str:
        return "route2"

    with app.test_client() as cli:
        assert cli.get("/t1").status_code == 200
        assert cli.get("/t2").status_code == 200
        assert cli.get("/t2").status_code == 429


def test_inner_function_decoration(extension_factory: Factory) -> None:
    """alisaifee/flask-limiter tests/test_decorators.py::test_inner_function_decoration: a
    helper ``l1`` defined inside two views is two endpoints (their qualified names), was a
    duplicate-name 500 at the second view's request"""
    app, limiter = extension_factory()

    @app.route("/t1")
    def route1() -> str:
        @limiter.limit("5/second")
        def l1() -> str:
            return "l1"

        return l1()

    @app.route("/t2")
    def route2() -> str:
        @limiter.limit("1/second")
        def l1() -> str:
            return "l1"

        return l1()

    with app.test_client() as cli:
        assert cli.get("/t1").status_code == 200
        assert cli.get("/t2").status_code == 200
        for _ in range(4):
            assert cli.get("/t1").status_code == 200
        assert cli.get("/t1").status_code == 429
        assert cli.get("/t2").status_code == 429


def test_flask_limiter_arguments_without_equivalent_are_refused_naming_the_alternative(
        extension_factory: Factory) -> None:
    """flask-limiter's decorator arguments ratekeeper cannot honour (error_message,
    on_breach, meta_limits) are refused when applied, naming the alternative, not a 500."""
    _app, limiter = extension_factory()
    with pytest.raises(ValueError, match=r"error_message=.*@app.errorhandler\(429\)"):
        limiter.limit("1/second", error_message="slow down")
    with pytest.raises(ValueError, match=r"on_breach=.*@app.errorhandler\(429\)"):
        limiter.limit("1/second", on_breach=print)
    with pytest.raises(ValueError, match=r"meta_limits=.*a longer limit"):
        limiter.limit("1/second", meta_limits=["2/minute"])
