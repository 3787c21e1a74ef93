"""Ports of alisaifee/flask-limiter tests/test_views.py: Flask's pluggable views (``View``,
``MethodView``) and flask-restful / flask-restx resources limited through their
``decorators`` list, against ``ratekeeper.http.flask.Limiter`` made as flask-limiter's
(conftest.py); hiro's frozen timeline is the `clock` fixture."""

from __future__ import annotations

from typing import Any, ClassVar

import flask_restful  # type: ignore[import-untyped]
import flask_restx  # type: ignore[import-untyped]
from flask import request
from flask.views import MethodView, View

from ratekeeper.testing import ManualClock
from tests.compat.flask_limiter.conftest import Factory


def test_pluggable_views(extension_factory: Factory, clock: ManualClock) -> None:
    """alisaifee/flask-limiter tests/test_views.py::test_pluggable_views"""
    app, limiter = extension_factory(default_limits=["1/hour"])

    class Va(View):
        methods: ClassVar[list[str]] = ["GET", "POST"]
        decorators: ClassVar[list[Any]] = [limiter.limit("2/second")]

        def dispatch_request(self) -> str:
            return request.method.lower()

    class Vb(View):
        methods: ClassVar[list[str]] = ["GET"]
        decorators: ClassVar[list[Any]] = [limiter.limit("1/second, 3/minute")]

        def dispatch_request(self) -> str:
            return request.method.lower()

    class Vc(View):
        methods: ClassVar[list[str]] = ["GET"]

        def dispatch_request(self) -> str:
            return request.method.lower()

    app.add_url_rule("/a", view_func=Va.as_view("a"))
    app.add_url_rule("/b", view_func=Vb.as_view("b"))
    app.add_url_rule("/c", view_func=Vc.as_view("c"))
    with app.test_client() as cli:
        assert cli.get("/a").status_code == 200
        assert cli.get("/a").status_code == 200
        assert cli.post("/a").status_code == 429
        assert cli.get("/b").status_code == 200
        clock.advance(1)
        assert cli.get("/b").status_code == 200
        clock.advance(1)
        assert cli.get("/b").status_code == 200
        clock.advance(1)
        assert cli.get("/b").status_code == 429
        assert cli.get("/c").status_code == 200
        assert cli.get("/c").status_code == 429


def test_pluggable_method_views(extension_factory: Factory, clock: ManualClock) -> None:
    """alisaifee/flask-limiter tests/test_views.py::test_pluggable_method_views"""
    app, limiter = extension_factory(default_limits=["1/hour"])

    class Va(MethodView):
        decorators: ClassVar[list[Any]] = [limiter.limit("2/second")]

        def get(self) -> str:
            return request.method.lower()

        def post(self) -> str:
            return request.method.lower()

    class Vb(MethodView):
        decorators: ClassVar[list[Any]] = [limiter.limit("1/second, 3/minute")]

        def get(self) -> str:
            return request.method.lower()

    class Vc(MethodView):
        def get(self) -> str:
            return request.method.lower()

    class Vd(MethodView):
        decorators: ClassVar[list[Any]] = [limiter.limit("1/minute", methods=["get"])]

        def get(self) -> str:
            return request.method.lower()

        def post(self) -> str:
            return request.method.lower()

    app.add_url_rule("/a", view_func=Va.as_view("a"))
    app.add_url_rule("/b", view_func=Vb.as_view("b"))
    app.add_url_rule("/c", view_func=Vc.as_view("c"))
    app.add_url_rule("/d", view_func=Vd.as_view("d"))
    with app.test_client() as cli:
        assert cli.get("/a").status_code == 200
        assert cli.get("/a").status_code == 200
        assert cli.get("/a").status_code == 429
        assert cli.post("/a").status_code == 429
        assert cli.get("/b").status_code == 200
        clock.advance(1)
        assert cli.get("/b").status_code == 200
        clock.advance(1)
        assert cli.get("/b").status_code == 200
        clock.advance(1)
        assert cli.get("/b").status_code == 429
        assert cli.get("/c").status_code == 200
        assert cli.get("/c").status_code == 429
        assert cli.get("/d").status_code == 200
        assert cli.get("/d").status_code == 429
        # POST is not among the decorator's methods: the defaults (1/hour) decide it
        assert cli.post("/d").status_code == 200
        assert cli.post("/d").status_code == 429
        clock.advance(3600)
        assert cli.post("/d").status_code == 200


def test_flask_restful_resource(extension_factory: Factory, clock: ManualClock) -> None:
    """alisaifee/flask-limiter tests/test_views.py::test_flask_restful_resource"""
    app, limiter = extension_factory(default_limits=["1/hour"])
    api = flask_restful.Api(app)

    class Va(flask_restful.Resource):  # type: ignore[misc]
        decorators: ClassVar[list[Any]] = [limiter.limit("2/second")]

        def get(self) -> str:
            return request.method.lower()

        def post(self) -> str:
            return request.method.lower()

    class Vb(flask_restful.Resource):  # type: ignore[misc]
        decorators: ClassVar[list[Any]] = [limiter.limit("1/second, 3/minute")]

        def get(self) -> str:
            return request.method.lower()

    class Vc(flask_restful.Resource):  # type: ignore[misc]
        def get(self) -> str:
            return request.method.lower()

    class Vd(flask_restful.Resource):  # type: ignore[misc]
        decorators: ClassVar[list[Any]] = [
            limiter.limit("2/second", methods=["GET"]),
            limiter.limit("1/second", methods=["POST"]),
        ]

        def get(self) -> str:
            return request.method.lower()

        def post(self) -> str:
            return request.method.lower()

    api.add_resource(Va, "/a")
    api.add_resource(Vb, "/b")
    api.add_resource(Vc, "/c")
    api.add_resource(Vd, "/d")
    with app.test_client() as cli:
        assert cli.get("/a").status_code == 200
        assert cli.get("/a").status_code == 200
        assert cli.get("/a").status_code == 429
        assert cli.post("/a").status_code == 429
        assert cli.get("/b").status_code == 200
        assert cli.get("/d").status_code == 200
        assert cli.get("/d").status_code == 200
        assert cli.get("/d").status_code == 429
        assert cli.post("/d").status_code == 200
        assert cli.post("/d").status_code == 429
        clock.advance(1)
        assert cli.get("/b").status_code == 200
        clock.advance(1)
        assert cli.get("/b").status_code == 200
        clock.advance(1)
        assert cli.get("/b").status_code == 429
        assert cli.get("/c").status_code == 200
        assert cli.get("/c").status_code == 429


def test_flask_restx_resource(extension_factory: Factory, clock: ManualClock) -> None:
    """alisaifee/flask-limiter tests/test_views.py::test_flask_restx_resource (an xfail
    there): ``per_method=True`` on a flask-restx resource counts GET and POST apart"""
    app, limiter = extension_factory()
    api = flask_restx.Api(app)
    ns = api.namespace("test")

    @ns.route("/a")
    class Va(flask_restx.Resource):  # type: ignore[misc]
        decorators: ClassVar[list[Any]] = [limiter.limit("2/second", per_method=True)]

        def get(self) -> Any:
            return request.method.lower()

        def post(self) -> Any:
            return request.method.lower()

    with app.test_client() as cli:
        assert cli.get("/test/a").status_code == 200
        assert cli.get("/test/a").status_code == 200
        assert cli.post("/test/a").status_code == 200
        assert cli.post("/test/a").status_code == 200
        assert cli.get("/test/a").status_code == 429
        assert cli.post("/test/a").status_code == 429
        clock.advance(1)
        assert cli.get("/test/a").status_code == 200
        assert cli.post("/test/a").status_code == 200
