"""Flask's ``@limiter.limit`` / ``@limiter.exempt`` (flask-limiter's habit) through a real
app and its test client: the policy's defaults and a view's limits decided as one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask import request as flask_request
from flask.testing import FlaskClient

from ratekeeper import Limit
from ratekeeper.http import HTTPPolicy, RequestInfo
from ratekeeper.http.flask import Limiter, RateLimitExceeded, get_remote_address
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


def test_flask_async_view_under_limit_is_answered_then_rejected_not_a_500(
        clock: ManualClock) -> None:
    """Issue 29 defect 5: an ``async def`` view is run through ``app.ensure_sync``."""
    limiter = Limiter(clock=clock)
    app = Flask(__name__)
    limiter.init_app(app)

    @app.get("/slow")
    @limiter.limit("2/minute")
    async def slow() -> str:
        return "slow"

    c = client(app)
    assert get(c, "/slow").get_data(as_text=True) == "slow"
    assert statuses(c, 2, "/slow") == [200, 429]


def test_flask_second_limiter_on_one_app_enforces_its_own_limits(
        clock: ManualClock) -> None:
    """Issue 29 defect 6: each limiter has its own "decided" flag in ``flask.g``."""
    first = Limiter(clock=clock)
    second = Limiter(policy=Limit("fixed-window", "2/minute", name="second"), clock=clock)
    app = Flask(__name__)
    first.init_app(app)
    second.init_app(app)

    @app.get("/a")
    @first.limit("10/minute")
    def a() -> str:
        return "a"

    assert statuses(client(app), 3, "/a") == [200, 200, 429]


def test_flask_decorated_helper_called_by_a_view_is_limited_at_each_call(
        clock: ManualClock) -> None:
    """Issue 29 defect 9: as flask-limiter's (tests/test_decorators.py::
    test_non_route_decoration_static_limits), a decorated helper decides its own limits
    (not the defaults again) each time a view calls it; its 429 is raised from the helper."""
    limiter = Limiter(policy=Limit("fixed-window", "10/minute", name="default"), clock=clock)
    app = Flask(__name__)
    limiter.init_app(app)

    @limiter.limit("1/minute")
    def lookup() -> str:
        return "looked up"

    @app.get("/t1")
    def t1() -> str:
        return lookup()

    @app.get("/plain")
    def plain() -> str:
        return "plain"

    c = client(app)
    assert statuses(c, 2, "/t1") == [200, 429]
    assert statuses(c, 8, "/plain") == [200] * 8  # the defaults counted once per request
    assert statuses(c, 1, "/plain") == [429]


def test_flask_helper_defined_inside_a_view_is_limited_across_requests_not_refused(
        clock: ManualClock) -> None:
    """Issue 29 defect 9: a helper decorated inside a view (flask-limiter's
    tests/test_decorators.py::test_inner_function_decoration) is the same endpoint at each
    request, not a duplicate name (a 500), and its registry entry is replaced, not grown."""
    limiter = Limiter(clock=clock)
    app = Flask(__name__)
    limiter.init_app(app)

    @app.get("/t1")
    def t1() -> str:
        @limiter.limit("3/minute")
        def inner() -> str:
            return "inner"

        return inner()

    assert statuses(client(app), 4, "/t1") == [200, 200, 200, 429]
    assert len(limiter._registry.specs) == 1


def test_flask_static_files_are_not_limited(clock: ManualClock, tmp_path: Path) -> None:
    """flask-limiter exempts the app's static files; so does ratekeeper's Flask limiter."""
    (tmp_path / "image.txt").write_text("static")
    app = Flask(__name__, static_folder=str(tmp_path), static_url_path="/static")
    Limiter(app, policy=Limit("fixed-window", "1/minute", name="default"), clock=clock)
    c = client(app)
    for _ in range(3):
        with get(c, "/static/image.txt") as r:
            assert (r.status_code, r.get_data(as_text=True)) == (200, "static")
    assert statuses(c, 2, "/nothing") == [404, 429]


def test_flask_app_errorhandler_429_renders_the_rejection_with_its_headers(
        clock: ManualClock) -> None:
    """A rejection is a ``werkzeug.exceptions.TooManyRequests`` (RateLimitExceeded) raised,
    as flask-limiter's, so ``@app.errorhandler(429)`` runs; Retry-After is still sent."""
    limiter = Limiter(clock=clock)
    app = Flask(__name__)
    limiter.init_app(app)

    @app.get("/a")
    @limiter.limit("1/minute")
    def a() -> str:
        return "a"

    @app.errorhandler(429)
    def too_many(e: RateLimitExceeded) -> tuple[dict[str, Any], int]:
        return {"error": "slow down", "allowed": e.decision.allowed}, 429

    c = client(app)
    get(c, "/a")
    r = get(c, "/a")
    assert (r.status_code, r.get_json()) == (429, {"error": "slow down", "allowed": False})
    assert int(r.headers["Retry-After"]) > 0


def test_flask_limiter_constructor_key_func_default_and_application_limits(
        clock: ManualClock) -> None:
    """flask-limiter's ``Limiter(key_func, app=app, default_limits=..., application_limits=...,
    storage_uri="memory://")``: the defaults per key_func's key, the application limit one
    counter for everyone."""
    app = Flask(__name__)
    Limiter(lambda: flask_request.headers.get("X-User", "anon"), app=app,
            default_limits=["2 per minute"], application_limits=["3/minute"],
            storage_uri="memory://", clock=clock)

    @app.get("/a")
    def a() -> str:
        return "a"

    c = client(app)
    ann = [c.get("/a", headers={"X-User": "ann"}).status_code for _ in range(3)]
    bob = [c.get("/a", headers={"X-User": "bob"}).status_code for _ in range(2)]
    assert (ann, bob) == ([200, 200, 429], [200, 429])  # the application's 3rd was bob's


def test_flask_limiter_get_remote_address_keeps_the_client_ip_key(clock: ManualClock) -> None:
    app = Flask(__name__)
    Limiter(get_remote_address, app=app, default_limits=["1/minute"], clock=clock)

    @app.get("/a")
    def a() -> str:
        return "a"

    c = client(app)
    assert statuses(c, 2, "/a") == [200, 429]
    assert c.get("/a", environ_base={"REMOTE_ADDR": "198.51.100.1"}).status_code == 200


def test_flask_limiter_moving_window_counts_the_last_period_not_the_clock_window(
        clock: ManualClock) -> None:
    """``strategy="moving-window"`` is sliding-window-log: a request 15 s after the clock's
    minute turned is still refused when the admitted one was 50 s into the last minute
    (a fixed window would admit it)."""
    app = Flask(__name__)
    Limiter(get_remote_address, app=app, default_limits=["1/minute"],
            strategy="moving-window", clock=clock)

    @app.get("/a")
    def a() -> str:
        return "a"

    c = client(app)
    clock.advance(60 - clock() % 60 + 50)  # 50 s into a clock minute
    assert statuses(c, 1, "/a") == [200]
    clock.advance(25)  # 15 s into the next
    assert statuses(c, 1, "/a") == [429]
    clock.advance(36)
    assert statuses(c, 1, "/a") == [200]


@pytest.mark.parametrize(("options", "message"), [
    ({"storage_uri": "memcached://localhost:11211"}, "use memory://, redis://"),
    ({"storage_uri": "mongodb://localhost:27017"}, "use memory://, redis://"),
    ({"strategy": "leaky"}, "strategy='leaky' is not one of flask-limiter's"),
    ({"headers_enabled": False}, "always sends the RateLimit fields"),
])
def test_flask_limiter_options_it_cannot_honour_are_refused_naming_the_alternative(
        options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):  # ConfigError is a ValueError
        Limiter(get_remote_address, **options)


def test_flask_limiter_enabled_false_limits_nothing(clock: ManualClock) -> None:
    app = Flask(__name__)
    limiter = Limiter(get_remote_address, app=app, default_limits=["1/minute"], enabled=False,
                      clock=clock)

    @app.get("/a")
    @limiter.limit("1/minute")
    def a() -> str:
        return "a"

    assert statuses(client(app), 3, "/a") == [200, 200, 200]


@pytest.mark.parametrize(("option", "value", "instead"), [
    ("key_prefix", "myapp", "prefix="),
    ("default_limits_per_method", True, "@limiter.limit"),
    ("default_limits_exempt_when", lambda: True, "exempt_keys"),
    ("on_breach", print, "errorhandler"),
    ("meta_limits", ["2/hour"], "a longer limit"),
])
def test_flask_limiter_options_without_an_equivalent_are_refused_naming_what_to_use(
        option: str, value: Any, instead: str) -> None:
    with pytest.raises(ValueError, match=f"flask-limiter's {option}=.*instead: .*{instead}"):
        Limiter(get_remote_address, **{option: value})
