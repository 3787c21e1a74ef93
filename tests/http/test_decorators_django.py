"""Django's ``@ratelimit`` (django-ratelimit's habit) through Django's test client: with
the middleware the view's limits and the policy's are one decision (in ``process_view``);
without it the decorator alone limits the view. This module is its own URLconf."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.test import Client, RequestFactory, override_settings
from django.urls import path
from django.utils.decorators import method_decorator
from django.views import View

from ratekeeper import Limit
from ratekeeper.http import ClientIP, HTTPPolicy
from ratekeeper.http.django import exempt, ratelimit
from ratekeeper.stores import MemoryStore
from ratekeeper.testing import ManualClock
from tests.http.conftest import DownStore
from tests.http.test_decorators_fastapi import POLICIES

pytestmark = pytest.mark.usefixtures("django_configured")

MW = "ratekeeper.http.django.RateLimitMiddleware"
AUTH = "tests.http.test_decorators_django.HeaderUser"
DEFAULT = Limit("fixed-window", "3/minute", name="default")


class HeaderUser:
    """Stands in for AuthenticationMiddleware: ``request.user`` from an X-User header."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        pk = request.headers.get("X-User")
        request.user = SimpleNamespace(pk=pk, is_authenticated=pk is not None)
        return self.get_response(request)


def ok(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"limited": getattr(request, "limited", None)})


search = ratelimit(group="search", key="ip", rate="2/m")(ok)
roomy = ratelimit(group="roomy", rate="10/m")(ok)
upload = ratelimit(group="upload", rate="5/m", mode="replace")(ok)
stacked = ratelimit(group="stacked", rate="3/m", mode="replace")(
    ratelimit(group="stacked", rate="4/h", mode="replace")(ok))
keyed = ratelimit(group="keyed", key="header:x-api-key", rate="2/m", mode="replace")(ok)
per_user = ratelimit(group="per-user", key="user", rate="1/m", mode="replace")(ok)
posts = ratelimit(group="posts", rate="1/m", method="POST", mode="replace")(ok)
soft = ratelimit(group="soft", rate="1/m", block=False, mode="replace")(ok)
# django-ratelimit's login idiom: per username AND per address, stacked with two keys.
login = ratelimit(group="login", key="post:username", rate="2/m", mode="replace")(
    ratelimit(group="login", key="ip", rate="3/m", mode="replace")(ok))


@exempt
def health(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


urlpatterns = [
    path("search", search), path("roomy", roomy), path("upload", upload),
    path("stacked", stacked), path("keyed", keyed), path("me", per_user),
    path("posts", posts), path("soft", soft), path("health", health), path("other", ok),
    path("login", login),
]


@pytest.fixture
def configure(clock: ManualClock) -> Iterator[Callable[..., Client]]:
    stack: list[Any] = []

    def apply(middleware: list[str] | None = None, **ratekeeper: Any) -> Client:
        ratekeeper.setdefault("clock", clock)
        o = override_settings(MIDDLEWARE=[AUTH, MW] if middleware is None else middleware,
                              RATEKEEPER=ratekeeper,
                              ROOT_URLCONF="tests.http.test_decorators_django")
        o.enable()
        stack.append(o)
        return Client(REMOTE_ADDR="203.0.113.7")

    yield apply
    for o in reversed(stack):
        o.disable()


def codes(c: Client, n: int, url: str, method: str = "get", **kw: Any) -> list[int]:
    return [getattr(c, method)(url, **kw).status_code for _ in range(n)]


def test_django_added_limit_rejects_after_its_count_and_defaults_still_count(
        configure: Any) -> None:
    c = configure(policy=DEFAULT)
    assert codes(c, 3, "/search") == [200, 200, 429]
    # The rejected third /search charged nothing (all-or-nothing): one default left.
    assert codes(c, 2, "/other") == [200, 429]


def test_django_added_limit_the_default_rejects_when_the_route_has_room(
        configure: Any) -> None:
    c = configure(policy=DEFAULT)
    got = [c.get("/roomy") for _ in range(4)]
    assert [r.status_code for r in got] == [200, 200, 200, 429]
    assert json.loads(got[3].content)["policy"] == "default"
    assert got[2]["RateLimit-Policy"] == '"default";q=3;w=60, "roomy:10/m";q=10;w=60'


def test_django_replacing_limit_alone_applies(configure: Any) -> None:
    c = configure(policy=DEFAULT)
    up = [c.get("/upload") for _ in range(6)]
    assert [r.status_code for r in up] == [200] * 5 + [429]
    assert up[0]["RateLimit-Policy"] == '"upload:5/m";q=5;w=60'
    assert codes(c, 4, "/other") == [200, 200, 200, 429]  # the defaults untouched


def test_django_exempt_view_is_never_limited(configure: Any) -> None:
    c = configure(policy=DEFAULT)
    assert codes(c, 3, "/other") == [200] * 3
    health = [c.get("/health") for _ in range(5)]
    assert [r.status_code for r in health] == [200] * 5
    assert not health[0].has_header("RateLimit")
    assert codes(c, 1, "/other") == [429]


def test_django_stacked_limits_both_apply(configure: Any, clock: ManualClock) -> None:
    c = configure(policy=DEFAULT)
    assert codes(c, 4, "/stacked") == [200, 200, 200, 429]  # 3 per minute
    clock.advance(60)
    assert codes(c, 2, "/stacked") == [200, 429]  # 4 per hour in all
    r = c.get("/stacked")
    assert json.loads(r.content)["policy"] == "stacked:4/h"
    assert r["RateLimit-Policy"] == '"stacked:3/m";q=3;w=60, "stacked:4/h";q=4;w=3600'


def test_django_stacked_limits_with_two_keys_count_each_by_its_own_key(
        configure: Any) -> None:
    # One store for both clients (each Django test client builds its own middleware).
    c = configure(policy=DEFAULT, store=MemoryStore())
    other = Client(REMOTE_ADDR="198.51.100.9")
    assert codes(c, 3, "/login", "post", data={"username": "ann"}) == [200, 200, 429]
    # ann's third attempt was refused: nothing charged, so this address has one left ...
    assert codes(c, 2, "/login", "post", data={"username": "bob"}) == [200, 429]
    # ... and ann is refused from any address: her own counter is spent.
    assert codes(other, 1, "/login", "post", data={"username": "ann"}) == [429]
    assert codes(other, 1, "/login", "post", data={"username": "cat"}) == [200]


def test_django_limit_keyed_by_a_header(configure: Any) -> None:
    c = configure(policy=DEFAULT)
    assert codes(c, 3, "/keyed", headers={"X-API-Key": "a"}) == [200, 200, 429]
    assert codes(c, 2, "/keyed", headers={"X-API-Key": "b"}) == [200, 200]


def test_django_limit_keyed_by_the_user(configure: Any) -> None:
    c = configure(policy=DEFAULT)
    assert codes(c, 2, "/me", headers={"X-User": "1"}) == [200, 429]
    assert codes(c, 1, "/me", headers={"X-User": "2"}) == [200]  # the same address
    assert codes(c, 2, "/me") == [200, 429]  # anonymous: by the client IP


def test_django_method_limits_only_those_methods(configure: Any) -> None:
    c = configure(policy=[])  # no defaults: only the decorator limits anything
    assert codes(c, 2, "/posts", "post") == [200, 429]
    gets = [c.get("/posts") for _ in range(3)]
    assert [r.status_code for r in gets] == [200] * 3 and not gets[0].has_header("RateLimit")


def test_django_block_false_marks_the_request_limited(configure: Any) -> None:
    c = configure(policy=DEFAULT)
    first, second = c.get("/soft"), c.get("/soft")
    assert first.status_code == 200 and json.loads(first.content) == {"limited": False}
    assert second.status_code == 200 and json.loads(second.content) == {"limited": True}


def test_django_headers_and_problem_body(configure: Any) -> None:
    c = configure(policy=HTTPPolicy(limits=DEFAULT))
    good = c.get("/search")
    c.get("/search")
    rejected = c.get("/search")
    assert good["RateLimit-Policy"] == '"default";q=3;w=60, "search:2/m";q=2;w=60'
    assert good["RateLimit"] == '"search:2/m";r=1;t=60'
    assert rejected.status_code == 429
    assert rejected["Content-Type"] == "application/problem+json"
    assert rejected["Retry-After"] == "60"
    body = json.loads(rejected.content)
    assert body["status"] == 429 and body["title"] == "Too Many Requests"
    assert body["policy"] == "search:2/m" and body["instance"] == "/search"


def test_django_unknown_path_is_decided_with_the_defaults(configure: Any) -> None:
    c = configure(policy=DEFAULT)
    assert codes(c, 4, "/nope") == [404, 404, 404, 429]


def test_django_decorator_alone_limits_a_view_without_the_middleware(
        configure: Any) -> None:
    c = configure(middleware=[AUTH])  # settings.RATEKEEPER gives only the clock
    got = [c.get("/search") for _ in range(3)]
    assert [r.status_code for r in got] == [200, 200, 429]
    assert got[0]["RateLimit-Policy"] == '"search:2/m";q=2;w=60'  # no defaults
    assert json.loads(got[2].content)["policy"] == "search:2/m"
    assert codes(c, 5, "/other") == [200] * 5  # undecorated: nothing limits it
    assert [json.loads(c.get("/soft").content)["limited"] for _ in range(2)] == [False, True]


def test_django_decorators_with_a_policies_file(configure: Any, tmp_path: Path) -> None:
    file = tmp_path / "policies.toml"
    file.write_text(POLICIES)
    c = configure(policy=str(file))
    first = c.get("/search")
    assert first["RateLimit-Policy"] == '"web.per-ip";q=3;w=60, "search:2/m";q=2;w=60'
    assert codes(c, 2, "/search") == [200, 429]
    assert codes(c, 1, "/other") == [200]  # per-ip: 3 of 3
    assert codes(c, 6, "/upload") == [200] * 5 + [429]  # replace: per-ip does not apply
    assert json.loads(c.get("/other").content)["policy"] == "web.per-ip"


def test_django_ratelimit_rate_syntax_and_keys() -> None:
    for rate, period in (("5/m", 60), ("100/h", 3600), ("10/s", 1), ("1000/d", 86400)):
        view = ratelimit(group="g", rate=rate)(ok)
        lim = view._ratekeeper_view.spec.limits[0]  # type: ignore[attr-defined]
        assert lim.period == period and lim.name == f"g:{rate}"
    with pytest.raises(ValueError, match="'ip', 'user'"):
        ratelimit(key="cookie", rate="1/s")(ok)


# -- issue 29: django-ratelimit's idioms ----------------------------------------------------

class Article(View):
    """django-ratelimit's class-based-view idiom: ``@method_decorator(ratelimit(...))``."""

    @method_decorator(ratelimit(group="article", rate="1/m", mode="replace"))
    def get(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("article")


@method_decorator(ratelimit(group="board", rate="2/m", mode="replace"), name="dispatch")
class Board(View):
    def get(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("board")


urlpatterns += [path("article", Article.as_view()), path("board", Board.as_view())]


def test_django_method_decorator_on_a_class_based_view_is_enforced_with_the_middleware(
        configure: Any) -> None:
    c = configure(policy=DEFAULT, store=MemoryStore())  # one store: a second count shows
    article = [c.get("/article") for _ in range(2)]
    assert [r.status_code for r in article] == [200, 429]
    assert article[0]["RateLimit-Policy"] == '"article:1/m";q=1;w=60'  # replace: alone
    assert codes(c, 3, "/board") == [200, 200, 429]  # decorated dispatch, too


def test_django_request_limited_is_set_when_the_method_is_not_covered(
        configure: Any) -> None:
    for middleware in (None, [AUTH]):  # with the middleware, and the decorator alone
        c = configure(middleware=middleware, policy=[], store=MemoryStore())
        got = [json.loads(c.get("/posts").content) for _ in range(2)]
        assert got == [{"limited": False}] * 2


def test_django_decorator_alone_honours_failure_closed(configure: Any) -> None:
    c = configure(middleware=[AUTH], store=DownStore(), failure="closed")
    r = c.get("/search")  # was admitted: the decorator alone always failed open
    assert r.status_code == 429 and r["X-RateLimit-Degraded"] == "closed"


def test_django_decorator_alone_believes_the_policys_trusted_proxies(configure: Any) -> None:
    policy = HTTPPolicy(client_ip=ClientIP(trusted_proxies=["10.0.0.0/8"]))
    configure(middleware=[AUTH], policy=policy)
    proxy = Client(REMOTE_ADDR="10.0.0.1")
    ann = {"X-Forwarded-For": "198.51.100.1"}
    bob = {"X-Forwarded-For": "198.51.100.2"}
    assert codes(proxy, 3, "/search", headers=ann) == [200, 200, 429]
    assert codes(proxy, 2, "/search", headers=bob) == [200, 200]  # bob's own quota


def test_django_empty_remote_addr_is_refused_naming_the_setting(configure: Any) -> None:
    for middleware in (None, [AUTH]):
        configure(middleware=middleware, policy=DEFAULT)
        with pytest.raises(ImproperlyConfigured, match=r"REMOTE_ADDR.*trusted_proxies"):
            Client(REMOTE_ADDR="").get("/search")


def test_django_empty_remote_addr_with_unix_trusted_reads_the_forwarding_header(
        configure: Any) -> None:
    configure(policy=HTTPPolicy(limits=DEFAULT, client_ip=ClientIP(trusted_proxies=["unix"])))
    c = Client(REMOTE_ADDR="")
    assert codes(c, 3, "/search", headers={"X-Forwarded-For": "198.51.100.1"}) \
        == [200, 200, 429]
    assert codes(c, 1, "/search", headers={"X-Forwarded-For": "198.51.100.2"}) == [200]


def test_django_decorator_alone_passes_a_view_result_that_is_not_a_response_through(
        configure: Any) -> None:
    configure(middleware=[])

    @ratelimit(group="plain", rate="2/m", block=False)
    def view(request: HttpRequest) -> object:
        return {"limited": request.limited}

    rf = RequestFactory(REMOTE_ADDR="203.0.113.7")
    assert [view(rf.get("/")) for _ in range(3)] == [
        {"limited": False}, {"limited": False}, {"limited": True}]


def test_django_ratelimit_enable_false_disables_the_decorators(configure: Any) -> None:
    for middleware in (None, [AUTH]):
        c = configure(middleware=middleware, policy=[])
        with override_settings(RATELIMIT_ENABLE=False):
            got = [c.get("/soft") for _ in range(3)]
            assert [json.loads(r.content) for r in got] == [{"limited": False}] * 3
            assert codes(c, 3, "/search") == [200] * 3


def by_plan(group: str, request: HttpRequest) -> str | None:
    """django-ratelimit's callable rate: None (not limited) for staff, else by plan."""
    plan = request.headers.get("X-Plan")
    return None if plan == "staff" else "3/m" if plan == "pro" else "1/m"


planned = ratelimit(group="planned", rate=by_plan, mode="replace")(ok)
urlpatterns += [path("planned", planned)]


def test_django_callable_rate_decides_per_request_with_the_middleware(configure: Any) -> None:
    c = configure(policy=DEFAULT)
    assert codes(c, 2, "/planned") == [200, 429]
    assert codes(c, 4, "/planned", headers={"X-Plan": "pro"}) == [200, 200, 200, 429]
    assert codes(c, 3, "/other") == [200] * 3  # replace: the plans charged no default
    # None: no limits of the view's own, so the policy's apply (spent above).
    assert codes(c, 1, "/planned", headers={"X-Plan": "staff"}) == [429]


def test_django_middleware_refuses_django_ratelimit_settings_it_cannot_honour(
        configure: Any) -> None:
    c = configure(policy=DEFAULT)  # no "store": counters would be per process
    with override_settings(RATELIMIT_IP_META_KEY="HTTP_X_REAL_IP"), \
            pytest.raises(ImproperlyConfigured, match=r"RATELIMIT_IP_META_KEY.*ClientIP"):
        c.get("/search")
    with override_settings(RATELIMIT_USE_CACHE="default"), \
            pytest.raises(ImproperlyConfigured, match=r"RATELIMIT_USE_CACHE.*'store'"):
        c.get("/search")
    c = configure(policy=DEFAULT, store=MemoryStore())
    with override_settings(RATELIMIT_USE_CACHE="default"):
        assert codes(c, 1, "/search") == [200]


def test_django_example_project_uses_django_ratelimit_idioms(clock: ManualClock) -> None:
    """examples/django_project: the login view (stacked, block=False) and the class-based
    view (method_decorator) are limited under the project's middleware and policy."""
    project = str(Path(__file__).parents[2] / "examples" / "django_project")
    sys.path.insert(0, project)
    try:
        example = importlib.import_module("example_site.settings")
        conf = dict(example.RATEKEEPER, clock=clock, store=MemoryStore())
        with override_settings(ROOT_URLCONF=example.ROOT_URLCONF,
                               MIDDLEWARE=example.MIDDLEWARE, RATEKEEPER=conf):
            c = Client(REMOTE_ADDR="203.0.113.7")
            got = [c.post("/login/", {"username": "ann"}) for _ in range(6)]
            assert [r.status_code for r in got] == [200] * 5 + [429]
            assert json.loads(got[5].content)["error"].startswith("too many attempts")
            assert c.post("/login/", {"username": "bob"}).status_code == 200
            clock.advance(2)  # the policy's per-client bucket (5/s, bursts of 10) refills
            assert codes(c, 4, "/comments/", "post") == [201, 201, 201, 429]
            assert codes(c, 4, "/comments/") == [200] * 4  # GET: the policy's limits only
            clock.advance(60)
            assert codes(c, 1, "/comments/", "post") == [201]
    finally:
        sys.path.remove(project)
