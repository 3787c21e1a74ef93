"""Ports of alisaifee/flask-limiter tests/test_blueprints.py. flask-limiter's route and
blueprint limits replace the defaults unless told otherwise; ratekeeper's add to them unless
``mode="replace"`` (docs/migration.md), so the ports write ``mode="replace"`` where the peer
relies on its default."""

from __future__ import annotations

from pathlib import Path

from flask import Blueprint

from tests.compat.flask_limiter.conftest import Factory


def test_blueprint(extension_factory: Factory) -> None:
    """alisaifee/flask-limiter tests/test_blueprints.py::test_blueprint"""
    app, limiter = extension_factory(default_limits=["1/minute"])
    bp = Blueprint("main", __name__)

    @bp.route("/t1")
    def t1() -> str:
        return "test"

    @bp.route("/t2")
    @limiter.limit("10 per minute", mode="replace")
    def t2() -> str:
        return "test"

    app.register_blueprint(bp)

    with app.test_client() as cli:
        assert cli.get("/t1").status_code == 200
        assert cli.get("/t1").status_code == 429
        for _ in range(10):
            assert cli.get("/t2").status_code == 200
        assert cli.get("/t2").status_code == 429


def test_blueprint_static_exempt(extension_factory: Factory, tmp_path: Path) -> None:
    """alisaifee/flask-limiter tests/test_blueprints.py::test_blueprint_static_exempt"""
    (tmp_path / "image.png").write_bytes(b"\x89PNG")
    app, _limiter = extension_factory(default_limits=["1/minute"])
    bp = Blueprint("main", __name__, static_folder=str(tmp_path), static_url_path="/static")
    app.register_blueprint(bp, url_prefix="/bp")

    with app.test_client() as cli:
        for _ in range(2):
            with cli.get("/bp/static/image.png") as r:
                assert r.status_code == 200


def test_blueprint_limit_with_route_limits(extension_factory: Factory) -> None:
    """alisaifee/flask-limiter tests/test_blueprints.py::test_blueprint_limit_with_route_limits,
    its /, /t1 and /t2 (its /t3, ``override_defaults=False`` adding to the *blueprint's*
    limits, has no equivalent: ``mode="add"`` adds to the policy's; docs/migration.md)."""
    app, limiter = extension_factory(default_limits=["1/minute"])
    bp = Blueprint("main", __name__)

    @app.route("/")
    def root() -> str:
        return "root"

    @bp.route("/t1")
    def t1() -> str:
        return "test"

    @bp.route("/t2")
    @limiter.limit("10 per minute", mode="replace")
    def t2() -> str:
        return "test"

    limiter.limit("2/minute", mode="replace")(bp)
    app.register_blueprint(bp)

    with app.test_client() as cli:
        assert cli.get("/").status_code == 200
        assert cli.get("/").status_code == 429
        assert cli.get("/t1").status_code == 200
        assert cli.get("/t1").status_code == 200
        assert cli.get("/t1").status_code == 429
        for _ in range(10):
            assert cli.get("/t2").status_code == 200
        assert cli.get("/t2").status_code == 429


def test_nested_blueprint_exemption_explicit(extension_factory: Factory) -> None:
    """alisaifee/flask-limiter tests/test_blueprints.py::test_nested_blueprint_exemption_explicit"""
    app, limiter = extension_factory(default_limits=["1/minute"])
    parent_bp = Blueprint("parent", __name__, url_prefix="/parent")
    child_bp = Blueprint("child", __name__, url_prefix="/child")

    limiter.exempt(parent_bp)
    limiter.exempt(child_bp)

    @app.route("/")
    def root() -> str:
        return "42"

    @parent_bp.route("/")
    def parent() -> str:
        return "41"

    @child_bp.route("/")
    def child() -> str:
        return "40"

    parent_bp.register_blueprint(child_bp)
    app.register_blueprint(parent_bp)

    with app.test_client() as cli:
        assert cli.get("/").status_code == 200
        assert cli.get("/").status_code == 429
        assert cli.get("/parent/").status_code == 200
        assert cli.get("/parent/").status_code == 200
        assert cli.get("/parent/child/").status_code == 200
        assert cli.get("/parent/child/").status_code == 200


def test_nested_blueprint_child_limit_is_its_own(extension_factory: Factory) -> None:
    """A limit on a child blueprint (registered in a parent) applies to its views, not the
    parent's (flask-limiter's tests/test_blueprints.py::
    test_nested_blueprint_child_explicit_limit, in ratekeeper's ``mode="replace"``)."""
    app, limiter = extension_factory(default_limits=["1/minute"])
    parent_bp = Blueprint("parent", __name__, url_prefix="/parent")
    child_bp = Blueprint("child", __name__, url_prefix="/child")
    limiter.exempt(parent_bp)
    limiter.limit("2/minute", mode="replace")(child_bp)

    @parent_bp.route("/")
    def parent() -> str:
        return "41"

    @child_bp.route("/")
    def child() -> str:
        return "40"

    parent_bp.register_blueprint(child_bp)
    app.register_blueprint(parent_bp)

    with app.test_client() as cli:
        assert [cli.get("/parent/child/").status_code for _ in range(3)] == [200, 200, 429]
        assert [cli.get("/parent/").status_code for _ in range(3)] == [200, 200, 200]
