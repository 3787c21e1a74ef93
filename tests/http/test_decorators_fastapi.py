"""FastAPI's ``@limiter.limit`` / ``@limiter.exempt`` (slowapi's habit) through a real app:
the policy's defaults and an endpoint's limits decided as one, added or replacing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import Depends, FastAPI, Request, Response
from fastapi.responses import PlainTextResponse
from starlette.requests import Request as StarletteRequest

from ratekeeper import Limit
from ratekeeper.http import HTTPPolicy, RequestInfo
from ratekeeper.http.fastapi import Limiter, RateLimit, install_problem_handler
from ratekeeper.stores import MemoryStore
from ratekeeper.testing import ManualClock

from .conftest import DownStore

PEER = "203.0.113.7"
DEFAULT = Limit("fixed-window", "3/minute", name="default")

# The shape of a policies file's [http] part (as /docs/policies.md): per-client defaults and
# a user attribute from a header.
POLICIES = """
[http]
domain = "web"
descriptors = [["client_ip"]]

[http.attributes.user]
header = "X-User"

[[domains.web.descriptors]]
key = "client_ip"
limits = [{ name = "per-ip", algorithm = "fixed-window", rate = "3/minute" }]
"""


def client(app: Any, peer: str = PEER) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(peer, 1234))
    return httpx.AsyncClient(transport=transport, base_url="http://testserver")


def make_app(limiter: Limiter, *, global_dependency: bool = True) -> FastAPI:
    app = FastAPI(dependencies=[Depends(limiter)] if global_dependency else [])
    install_problem_handler(app)

    @app.get("/search")
    @limiter.limit("2/minute")
    async def search() -> dict[str, str]:
        return {"hits": "none"}

    @app.get("/roomy")
    @limiter.limit("10/minute")
    def roomy() -> dict[str, str]:  # a sync endpoint (FastAPI's thread pool)
        return {"ok": "roomy"}

    @app.post("/upload")
    @limiter.limit("5/minute", mode="replace")
    async def upload() -> dict[str, str]:
        return {"ok": "uploaded"}

    @app.get("/health")
    @limiter.exempt
    async def health() -> str:
        return "ok"

    @app.get("/stacked")
    @limiter.limit("3/minute", mode="replace")
    @limiter.limit("4/hour", mode="replace")
    async def stacked() -> dict[str, str]:
        return {"ok": "stacked"}

    @app.get("/keyed")
    @limiter.limit("2/minute", key="header:x-api-key", mode="replace")
    async def keyed() -> dict[str, str]:
        return {"ok": "keyed"}

    @app.get("/other")
    async def other() -> dict[str, str]:
        return {"ok": "other"}

    return app


async def statuses(c: httpx.AsyncClient, n: int, path: str, method: str = "GET",
                   **kw: Any) -> list[int]:
    return [(await c.request(method, path, **kw)).status_code for _ in range(n)]


async def test_fastapi_added_limit_rejects_after_its_count_and_defaults_still_count(
        clock: ManualClock) -> None:
    limiter = Limiter(DEFAULT, clock=clock)
    async with client(make_app(limiter)) as c:
        search = await statuses(c, 3, "/search")
        other = await statuses(c, 2, "/other")  # the default: 2 of 3 used by /search
    assert search == [200, 200, 429]
    # The rejected third /search charged nothing (all-or-nothing): one default left.
    assert other == [200, 429]


async def test_fastapi_added_limit_the_default_rejects_when_the_route_has_room(
        clock: ManualClock) -> None:
    limiter = Limiter(DEFAULT, clock=clock)
    async with client(make_app(limiter)) as c:
        got = [await c.get("/roomy") for _ in range(4)]
    assert [r.status_code for r in got] == [200, 200, 200, 429]
    assert got[3].json()["policy"] == "default"
    assert got[2].headers["RateLimit-Policy"] == \
        '"default";q=3;w=60, "roomy:10/minute";q=10;w=60'


async def test_fastapi_replacing_limit_alone_applies(clock: ManualClock) -> None:
    limiter = Limiter(DEFAULT, clock=clock)
    async with client(make_app(limiter)) as c:
        up = [await c.post("/upload") for _ in range(6)]
        other = await statuses(c, 4, "/other")  # the defaults untouched by the uploads
    assert [r.status_code for r in up] == [200] * 5 + [429]
    assert up[0].headers["RateLimit-Policy"] == '"upload:5/minute";q=5;w=60'
    assert up[5].json()["policy"] == "upload:5/minute"
    assert other == [200, 200, 200, 429]


async def test_fastapi_exempt_endpoint_is_never_limited(clock: ManualClock) -> None:
    limiter = Limiter(DEFAULT, clock=clock)
    async with client(make_app(limiter)) as c:
        assert await statuses(c, 3, "/other") == [200] * 3
        health = [await c.get("/health") for _ in range(5)]
        assert (await c.get("/other")).status_code == 429
    assert [r.status_code for r in health] == [200] * 5
    assert "RateLimit" not in health[0].headers


async def test_fastapi_stacked_limits_both_apply(clock: ManualClock) -> None:
    limiter = Limiter(DEFAULT, clock=clock)
    async with client(make_app(limiter)) as c:
        first = await statuses(c, 4, "/stacked")  # the minute limit: 3
        clock.advance(60)
        second = await statuses(c, 2, "/stacked")  # the hour limit: 4 in all
        r = await c.get("/stacked")
    assert first == [200, 200, 200, 429]
    assert second == [200, 429]
    assert r.json()["policy"] == "stacked:4/hour"
    # In the order the decorators are written.
    assert r.headers["RateLimit-Policy"] == \
        '"stacked:3/minute";q=3;w=60, "stacked:4/hour";q=4;w=3600'


async def test_fastapi_limit_keyed_by_a_header(clock: ManualClock) -> None:
    limiter = Limiter(DEFAULT, clock=clock)
    async with client(make_app(limiter)) as c:
        a = await statuses(c, 3, "/keyed", headers={"X-API-Key": "a"})
        b = await statuses(c, 2, "/keyed", headers={"X-API-Key": "b"})  # the same address
    assert a == [200, 200, 429] and b == [200, 200]


async def test_fastapi_headers_and_problem_body(clock: ManualClock) -> None:
    limiter = Limiter(DEFAULT, clock=clock)
    async with client(make_app(limiter)) as c:
        ok = await c.get("/search")
        await c.get("/search")
        rejected = await c.get("/search")
    assert ok.json() == {"hits": "none"}
    assert ok.headers["RateLimit-Policy"] == '"default";q=3;w=60, "search:2/minute";q=2;w=60'
    assert ok.headers["RateLimit"] == '"search:2/minute";r=1;t=60'
    assert rejected.status_code == 429
    assert rejected.headers["Content-Type"] == "application/problem+json"
    assert rejected.headers["Retry-After"] == "60"
    body = json.loads(rejected.content)
    assert body["status"] == 429 and body["title"] == "Too Many Requests"
    assert body["policy"] == "search:2/minute" and body["instance"] == "/search"


async def test_fastapi_decorated_endpoint_is_limited_without_the_global_dependency(
        clock: ManualClock) -> None:
    limiter = Limiter(DEFAULT, clock=clock)
    async with client(make_app(limiter, global_dependency=False)) as c:
        search = await statuses(c, 3, "/search")
        roomy = [await c.get("/roomy") for _ in range(2)]  # default: 1 of 3 left
        other = await statuses(c, 5, "/other")  # undecorated: nothing decides it
    assert search == [200, 200, 429]
    assert [r.status_code for r in roomy] == [200, 429]
    assert roomy[0].json() == {"ok": "roomy"} and "RateLimit" in roomy[0].headers
    assert other == [200] * 5


async def test_fastapi_decorator_with_a_python_policy_key(clock: ManualClock) -> None:
    def user(req: RequestInfo) -> str | None:
        return req.headers.get("x-user")

    limiter = Limiter(HTTPPolicy(limits=DEFAULT, key=user), clock=clock)
    app = FastAPI(dependencies=[Depends(limiter)])

    @app.get("/me")
    @limiter.limit("1/minute", key="key")  # the policy's key function: per user
    async def me() -> str:
        return "me"

    async with client(app) as c:
        alice = await statuses(c, 2, "/me", headers={"X-User": "alice"})
        bob = await statuses(c, 1, "/me", headers={"X-User": "bob"})
    assert alice == [200, 429] and bob == [200]


async def test_fastapi_decorators_with_a_policies_file(clock: ManualClock,
                                                       tmp_path: Path) -> None:
    path = tmp_path / "policies.toml"
    path.write_text(POLICIES)
    limiter = Limiter(str(path), clock=clock)
    app = FastAPI(dependencies=[Depends(limiter)])
    install_problem_handler(app)

    @app.get("/search")
    @limiter.limit("2/minute", key="user")
    async def search() -> str:
        return "s"

    @app.get("/bulk")
    @limiter.limit("5/minute", key="user", mode="replace")
    async def bulk() -> str:
        return "b"

    @app.get("/other")
    async def other() -> str:
        return "o"

    async with client(app) as c:
        ok = await c.get("/search", headers={"X-User": "al"})
        searches = await statuses(c, 2, "/search", headers={"X-User": "al"})
        bob = await c.get("/search", headers={"X-User": "bob"})  # per-ip: 3 of 3
        bulks = await statuses(c, 6, "/bulk", headers={"X-User": "al"})
        others = await c.get("/other")
    assert ok.headers["RateLimit-Policy"] == '"web.per-ip";q=3;w=60, "search:2/minute";q=2;w=60'
    assert searches == [200, 429]
    assert bob.status_code == 200
    assert bulks == [200] * 5 + [429]  # replace: the exhausted per-ip limit does not apply
    assert others.status_code == 429 and others.json()["policy"] == "web.per-ip"


def test_fastapi_decorator_refuses_a_key_it_cannot_count_by(tmp_path: Path) -> None:
    limiter = Limiter(DEFAULT)
    with pytest.raises(ValueError, match="with a Python HTTPPolicy"):
        limiter.limit("1/s", key="user")
    path = tmp_path / "policies.toml"
    path.write_text(POLICIES)
    with pytest.raises(ValueError, match=r"'plan' .* not an attribute .*'user'"):
        Limiter(str(path)).limit("1/s", key="plan")(lambda: None)


def test_fastapi_stacked_decorators_must_agree_on_mode() -> None:
    limiter = Limiter(DEFAULT)

    async def f() -> None: ...

    with pytest.raises(ValueError, match="differ in mode"):
        limiter.limit("1/s", mode="replace")(limiter.limit("2/minute")(f))


# Issue 29 defect 1: an endpoint naming its own Request / Response (slowapi requires
# ``request: Request``) is served, not a 500 from a parameter FastAPI filled only once.

def own_parameter_app(limiter: Limiter, *, global_dependency: bool) -> FastAPI:
    app = FastAPI(dependencies=[Depends(limiter)] if global_dependency else [])
    install_problem_handler(app)

    def user_agent(request: StarletteRequest) -> str:
        return request.headers.get("user-agent", "")

    @app.get("/fastapi-request")
    @limiter.limit("2/minute")
    async def fastapi_request(request: Request) -> dict[str, str]:
        return {"path": request.url.path}

    @app.get("/starlette-request")
    @limiter.limit("2/minute")
    def starlette_request(request: StarletteRequest) -> dict[str, str]:  # sync
        return {"path": request.url.path}

    @app.get("/response")
    @limiter.limit("2/minute")
    async def with_response(q: str, response: Response,
                            agent: str = Depends(user_agent)) -> dict[str, str]:
        response.headers["X-Own"] = "kept"
        return {"q": q, "agent": agent}

    @app.get("/returns-response")
    @limiter.limit("2/minute")
    async def returns_response(request: Request) -> PlainTextResponse:
        return PlainTextResponse(request.url.path)

    return app


@pytest.mark.parametrize("global_dependency", [True, False])
async def test_fastapi_endpoint_with_its_own_request_or_response_parameter_is_served(
        clock: ManualClock, global_dependency: bool) -> None:
    limiter = Limiter(Limit("fixed-window", "100/minute", name="default"), clock=clock)
    app = own_parameter_app(limiter, global_dependency=global_dependency)
    async with client(app) as c:
        for path in ("/fastapi-request", "/starlette-request"):
            got = [await c.get(path) for _ in range(3)]
            assert [r.status_code for r in got] == [200, 200, 429], path
            assert got[0].json() == {"path": path}
            assert got[0].headers["RateLimit"].endswith(";r=1;t=60")
        got = [await c.get("/response", params={"q": "x"},
                           headers={"User-Agent": "ua"}) for _ in range(3)]
    assert [r.status_code for r in got] == [200, 200, 429]
    assert got[0].json() == {"q": "x", "agent": "ua"}
    assert got[0].headers["X-Own"] == "kept" and "RateLimit" in got[0].headers


@pytest.mark.parametrize("global_dependency", [True, False])
async def test_fastapi_endpoint_returning_a_response_gets_the_ratelimit_fields(
        clock: ManualClock, global_dependency: bool) -> None:
    limiter = Limiter(Limit("fixed-window", "100/minute", name="default"), clock=clock)
    app = own_parameter_app(limiter, global_dependency=global_dependency)
    async with client(app) as c:
        got = [await c.get("/returns-response") for _ in range(3)]
    assert [r.status_code for r in got] == [200, 200, 429]
    assert got[0].text == "/returns-response"
    assert got[0].headers["RateLimit"] == '"returns_response:2/minute";r=1;t=60'
    assert "returns_response:2/minute" in got[0].headers["RateLimit-Policy"]


def test_a_misspelt_adapter_option_is_a_type_error_naming_it_and_the_accepted_ones() -> None:
    """Every adapter's keyword arguments (here the RateLimit dependency's) refuse a name
    they do not take, instead of dropping it: ``stroe=`` left the limits in a store of
    their own making, unseen."""
    with pytest.raises(TypeError, match=r"RateLimit: unexpected keyword argument 'stroe'; "
                                        r"it takes clock, .*store, watch, watch_clock"):
        RateLimit([DEFAULT], stroe=object())  # type: ignore[call-arg]


def slowapi_app(limiter: Limiter) -> FastAPI:
    """A slowapi app: the decorator alone, no global dependency."""
    app = FastAPI()
    app.state.limiter = limiter

    @app.get("/t")
    @limiter.limit("1/minute")
    async def t(request: Request) -> dict[str, str]:
        return {"ok": "yes"}

    return app


async def test_slowapi_in_memory_fallback_enabled_keeps_limiting_while_the_store_is_down(
        clock: ManualClock) -> None:
    """slowapi's ``in_memory_fallback_enabled=True`` is ``failure="local"``: with the store
    down, the limit is still decided in-process (the second request is refused); without
    it the limiter fails open, as ``swallow_errors=True`` does."""
    for fallback, second in ((True, 429), (False, 200)):
        limiter = Limiter(key_func=lambda: "k", store=DownStore(), clock=clock,
                          in_memory_fallback_enabled=fallback)
        async with client(slowapi_app(limiter)) as c:
            assert [(await c.get("/t")).status_code for _ in range(2)] == [200, second]


async def test_slowapi_key_prefix_counts_two_limiters_on_one_store_apart(
        clock: ManualClock) -> None:
    """slowapi's ``key_prefix``: two apps on one store, counted apart when their prefixes
    differ and together when they are the same."""
    store = MemoryStore()

    def limiter(prefix: str) -> Limiter:
        return Limiter(key_func=lambda: "k", key_prefix=prefix, store=store, clock=clock)

    async with client(slowapi_app(limiter("a"))) as a, \
            client(slowapi_app(limiter("b"))) as b, client(slowapi_app(limiter("b"))) as b2:
        assert (await a.get("/t")).status_code == 200
        assert (await b.get("/t")).status_code == 200
        assert (await b2.get("/t")).status_code == 429
