"""Flask's ``@limiter.limit`` / ``@limiter.exempt`` (flask-limiter's habit) through a real
app and its test client: the policy's defaults and a view's limits decided as one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from ratekeeper import Limit
from ratekeeper.http import HTTPPolicy, RequestInfo
from ratekeeper.http.flask import Limiter
from ratekeeper.testing import ManualClock
from tests.http.test_decorators_fastapi import POLICIES

PEER = "203.0.113.7"
DEFAULT = Limit("fixed-window", "3/minute", name="default")


def make_app(limiter: Limiter, *, attach: bool = True) -> Flask:
    app = Flask(__name__)
    if attach:
        limiter.init_app(app)

    @app.get("/search")
    @limiter.limit("2/minute")
    def search() -> dict[str, str]:
        return {"hits": "none"}

    @app.get("/roomy")
    @limiter.limit("10/minute")
    def roomy() -> str:
        return "roomy"

    @app.post("/upload")
    @limiter.limit("5/minute", mode="replace")
    def upload() -> str:
        return "uploaded"

    @app.get("/health")
    @limiter.exempt
    def health() -> str:
        return "ok"

    @app.get("/stacked")
    @limiter.limit("3/minute", mode="replace")
    @limiter.limit("4/hour", mode="replace")
    def stacked() -> str:
        return "stacked"

    @app.get("/keyed")
    @limiter.limit("2/minute", key="header:x-api-key", mode="replace")
    def keyed() -> str:
        return "keyed"

    @app.get("/other")
    def other() -> str:
        return "other"

    return app


def client(app: Flask) -> FlaskClient:
    return app.test_client()


def statuses(c: FlaskClient, n: int, path: str, method: str = "GET", **kw: Any) -> list[int]:
    return [c.open(path, method=method, environ_base={"REMOTE_ADDR": PEER}, **kw).status_code
            for _ in range(n)]


def get(c: FlaskClient, path: str, method: str = "GET", **kw: Any) -> Any:
    return c.open(path, method=method, environ_base={"REMOTE_ADDR": PEER}, **kw)


def test_flask_added_limit_rejects_after_its_count_and_defaults_still_count(
        clock: ManualClock) -> None:
    c = client(make_app(Limiter(policy=DEFAULT, clock=clock)))
    assert statuses(c, 3, "/search") == [200, 200, 429]
    # The rejected third /search charged nothing (all-or-nothing): one default left.
    assert statuses(c, 2, "/other") == [200, 429]


def test_flask_added_limit_the_default_rejects_when_the_route_has_room(
        clock: ManualClock) -> None:
    c = client(make_app(Limiter(policy=DEFAULT, clock=clock)))
    got = [get(c, "/roomy") for _ in range(4)]
    assert [r.status_code for r in got] == [200, 200, 200, 429]
    assert got[3].json["policy"] == "default"
    assert got[2].headers["RateLimit-Policy"] == \
        '"default";q=3;w=60, "roomy:10/minute";q=10;w=60'


def test_flask_replacing_limit_alone_applies(clock: ManualClock) -> None:
    c = client(make_app(Limiter(policy=DEFAULT, clock=clock)))
    up = [get(c, "/upload", "POST") for _ in range(6)]
    assert [r.status_code for r in up] == [200] * 5 + [429]
    assert up[0].headers["RateLimit-Policy"] == '"upload:5/minute";q=5;w=60'
    assert up[5].json["policy"] == "upload:5/minute"
    assert statuses(c, 4, "/other") == [200, 200, 200, 429]  # the defaults untouched


def test_flask_exempt_view_is_never_limited(clock: ManualClock) -> None:
    c = client(make_app(Limiter(policy=DEFAULT, clock=clock)))
    assert statuses(c, 3, "/other") == [200] * 3
    health = [get(c, "/health") for _ in range(5)]
    assert [r.status_code for r in health] == [200] * 5
    assert "RateLimit" not in health[0].headers
    assert statuses(c, 1, "/other") == [429]


def test_flask_stacked_limits_both_apply(clock: ManualClock) -> None:
    c = client(make_app(Limiter(policy=DEFAULT, clock=clock)))
    assert statuses(c, 4, "/stacked") == [200, 200, 200, 429]  # the minute limit: 3
    clock.advance(60)
    assert statuses(c, 2, "/stacked") == [200, 429]  # the hour limit: 4 in all
    r = get(c, "/stacked")
    assert r.json["policy"] == "stacked:4/hour"
    assert r.headers["RateLimit-Policy"] == \
        '"stacked:3/minute";q=3;w=60, "stacked:4/hour";q=4;w=3600'


def test_flask_limit_keyed_by_a_header(clock: ManualClock) -> None:
    c = client(make_app(Limiter(policy=DEFAULT, clock=clock)))
    assert statuses(c, 3, "/keyed", headers={"X-API-Key": "a"}) == [200, 200, 429]
    assert statuses(c, 2, "/keyed", headers={"X-API-Key": "b"}) == [200, 200]


def test_flask_headers_and_problem_body(clock: ManualClock) -> None:
    c = client(make_app(Limiter(policy=DEFAULT, clock=clock)))
    ok = get(c, "/search")
    get(c, "/search")
    rejected = get(c, "/search")
    assert ok.json == {"hits": "none"}
    assert ok.headers["RateLimit-Policy"] == '"default";q=3;w=60, "search:2/minute";q=2;w=60'
    assert ok.headers["RateLimit"] == '"search:2/minute";r=1;t=60'
    assert rejected.status_code == 429
    assert rejected.headers["Content-Type"] == "application/problem+json"
    assert rejected.headers["Retry-After"] == "60"
    assert rejected.headers["Cache-Control"] == "no-store"
    assert rejected.headers.getlist("RateLimit") == ['"search:2/minute";r=0;t=60']
    body = json.loads(rejected.data)
    assert body["status"] == 429 and body["title"] == "Too Many Requests"
    assert body["policy"] == "search:2/minute" and body["instance"] == "/search"


def test_flask_unknown_path_is_decided_with_the_defaults(clock: ManualClock) -> None:
    c = client(make_app(Limiter(policy=DEFAULT, clock=clock)))
    assert statuses(c, 4, "/nope") == [404, 404, 404, 429]


def test_flask_decorated_view_is_limited_without_init_app(clock: ManualClock) -> None:
    c = client(make_app(Limiter(policy=DEFAULT, clock=clock), attach=False))
    assert statuses(c, 3, "/search") == [200, 200, 429]
    roomy = [get(c, "/roomy") for _ in range(2)]  # the defaults: 1 of 3 left
    assert [r.status_code for r in roomy] == [200, 429]
    assert roomy[0].data == b"roomy" and "RateLimit" in roomy[0].headers
    assert statuses(c, 5, "/other") == [200] * 5  # undecorated: nothing decides it


def test_flask_init_app_later_with_a_python_policy_key(clock: ManualClock) -> None:
    def user(req: RequestInfo) -> str | None:
        return req.headers.get("x-user")

    limiter = Limiter(policy=HTTPPolicy(limits=DEFAULT, key=user), clock=clock)
    app = Flask(__name__)

    @app.get("/me")
    @limiter.limit("1/minute", key="key")  # the policy's key function: per user
    def me() -> str:
        return "me"

    limiter.init_app(app)
    c = client(app)
    assert statuses(c, 2, "/me", headers={"X-User": "alice"}) == [200, 429]
    assert statuses(c, 1, "/me", headers={"X-User": "bob"}) == [200]


def test_flask_decorators_with_a_policies_file(clock: ManualClock, tmp_path: Path) -> None:
    path = tmp_path / "policies.toml"
    path.write_text(POLICIES)
    app = Flask(__name__)
    limiter = Limiter(app, policy=path, clock=clock)

    @app.get("/search")
    @limiter.limit("2/minute", key="user")
    def search() -> str:
        return "s"

    @app.get("/bulk")
    @limiter.limit("5/minute", key="user", mode="replace")
    def bulk() -> str:
        return "b"

    @app.get("/other")
    def other() -> str:
        return "o"

    c = client(app)
    al = {"X-User": "al"}
    ok = get(c, "/search", headers=al)
    assert ok.headers["RateLimit-Policy"] == \
        '"web.per-ip";q=3;w=60, "search:2/minute";q=2;w=60'
    assert statuses(c, 2, "/search", headers=al) == [200, 429]
    assert statuses(c, 1, "/search", headers={"X-User": "bob"}) == [200]  # per-ip: 3 of 3
    # replace: the exhausted per-ip limit does not apply to /bulk.
    assert statuses(c, 6, "/bulk", headers=al) == [200] * 5 + [429]
    rejected = get(c, "/other")
    assert rejected.status_code == 429 and rejected.json["policy"] == "web.per-ip"


def test_flask_decorator_refuses_a_key_it_cannot_count_by() -> None:
    with pytest.raises(ValueError, match="with a Python HTTPPolicy"):
        Limiter(policy=DEFAULT).limit("1/s", key="user")
