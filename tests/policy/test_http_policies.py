"""The ``[http]`` part of a policies file, decided as the middleware decides it.

Every test writes a small policies file, drives `decide_request` (the one plan the ASGI/WSGI
middleware, the service's ``/v1/http`` and replay run) on a `MemoryStore` with a
`ManualClock`, and checks verdicts against what the file says.
"""

from __future__ import annotations

import base64
import json
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from ratekeeper import Limit
from ratekeeper._errors import StoreUnavailable
from ratekeeper._types import Decision
from ratekeeper.core import run
from ratekeeper.http import RouteLimit
from ratekeeper.http._policy import _extra_of
from ratekeeper.http.wsgi import WSGIRateLimitMiddleware
from ratekeeper.policy import Engine, Policies, PolicyError, PolicyHolder
from ratekeeper.policy._decide import HTTPDecision, decide_request
from ratekeeper.policy._http import Extra
from ratekeeper.policy._loader import parse_policies_text
from ratekeeper.policy._request import RequestInfo
from ratekeeper.stores import MemoryStore
from ratekeeper.stores._base import Check
from ratekeeper.testing import ManualClock

from . import hooks

PER_IP = '''
[[domains.web.descriptors]]
key = "client_ip"
limits = [{ name = "per-ip", algorithm = "fixed-window", rate = "100/minute" }]
'''

TIERS = '''
[http]
domain = "web"
descriptors = [["client_ip"], ["plan", "user"]]

[http.attributes.user]
header = "X-User"

[http.attributes.plan]
header = "X-Plan"
values = ["free", "pro", "internal"]
default = "free"

[[domains.web.descriptors]]
key = "client_ip"
limits = [{ name = "per-ip", algorithm = "fixed-window", rate = "100/minute" }]

[[domains.web.descriptors]]
key = "plan"
value = "free"

  [[domains.web.descriptors.descriptors]]
  key = "user"
  limits = [{ name = "free", algorithm = "fixed-window", rate = "2/minute" }]

[[domains.web.descriptors]]
key = "plan"
value = "pro"

  [[domains.web.descriptors.descriptors]]
  key = "user"
  limits = [{ name = "pro", algorithm = "fixed-window", rate = "5/minute" }]

[[domains.web.descriptors]]
key = "plan"
value = "internal"

  [[domains.web.descriptors.descriptors]]
  key = "user"
  unlimited = true
'''


class Harness:
    """A policies snapshot on a memory store and a manual clock."""

    def __init__(self, text: str, store: Any = None) -> None:
        self.snap = parse_policies_text(textwrap.dedent(text))
        self.clock = ManualClock(1000.0)
        self.store = MemoryStore() if store is None else store
        self.engine = Engine(lambda: self.snap, self.store, clock=self.clock)

    def decide(self, path: str = "/", method: str = "GET", client: str = "192.0.2.1",
               extra: Any = None, **headers: str) -> HTTPDecision | None:
        req = RequestInfo(method, path, {k.replace("_", "-").lower(): v
                                         for k, v in headers.items()}, client)
        extras = () if extra is None else (extra,) if isinstance(extra, Extra) else extra
        return run(decide_request(self.engine, self.snap, req, self.clock(), extras))

    def verdicts(self, n: int, *args: Any, **kwargs: Any) -> list[str]:
        out = []
        for _ in range(n):
            hd = self.decide(*args, **kwargs)
            out.append("none" if hd is None else hd.verdict)
        return out


# -- tiers ------------------------------------------------------------------------------


def test_a_tier_from_a_header_chooses_the_limits() -> None:
    h = Harness(TIERS)
    assert h.verdicts(3, x_user="ann", x_plan="free") == ["allowed", "allowed", "rejected"]
    assert h.verdicts(6, x_user="bob", x_plan="pro") == ["allowed"] * 5 + ["rejected"]


def test_an_unknown_or_absent_tier_gets_the_default_tier() -> None:
    h = Harness(TIERS)
    # "gold" is not one of the values: the free tier's 2/minute, on the same counter as an
    # explicit free request of that user.
    assert h.verdicts(1, x_user="cat", x_plan="gold") == ["allowed"]
    assert h.verdicts(1, x_user="cat") == ["allowed"]
    assert h.verdicts(1, x_user="cat", x_plan="free") == ["rejected"]


def test_an_unlimited_tier_is_limited_only_by_its_other_descriptors() -> None:
    h = Harness(TIERS)
    got = [h.decide(x_user="svc", x_plan="internal") for _ in range(100)]
    assert all(hd is not None and hd.verdict == "allowed" for hd in got)
    last = got[-1]
    assert last is not None and last.decision.limit is not None
    assert last.decision.limit.name == "web.per-ip"  # the per-IP limit still counted ...
    assert last.decision.remaining == 0
    assert h.verdicts(1, x_user="svc", x_plan="internal") == ["rejected"]  # ... and binds


def test_a_tier_from_a_hook_is_cached_per_user_on_the_engines_clock() -> None:
    hooks.calls.clear()
    h = Harness(TIERS.replace('[http.attributes.plan]\nheader = "X-Plan"',
                              '[http.attributes.plan]\nhook = "tests.policy.hooks:plan_of"\n'
                              'cache_seconds = 30\ncache_by = "user"'))
    hooks.PLANS.update({"dee": "pro", "eve": "no-such-plan"})
    assert h.verdicts(6, x_user="dee") == ["allowed"] * 5 + ["rejected"]
    assert h.verdicts(3, x_user="eve") == ["allowed", "allowed", "rejected"]  # the default
    assert hooks.calls == ["dee", "eve"]  # one lookup per user while cached
    hooks.PLANS["dee"] = "free"
    h.clock.advance(29.0)
    h.decide(x_user="dee")
    assert hooks.calls == ["dee", "eve"]
    h.clock.advance(2.0)  # the cached answer expired: looked up again
    h.decide(x_user="dee")
    assert hooks.calls == ["dee", "eve", "dee"]


def test_a_hook_cache_is_bounded() -> None:
    hooks.calls.clear()
    h = Harness(TIERS.replace('[http.attributes.plan]\nheader = "X-Plan"',
                              '[http.attributes.plan]\nhook = "tests.policy.hooks:plan_of"\n'
                              'cache_seconds = 30\ncache_by = "user"\ncache_size = 3'))
    for i in range(10):
        h.decide(x_user=f"u{i}")
    attr = h.snap.http.attributes["plan"]  # type: ignore[union-attr]
    assert attr._cache is not None and len(attr._cache) == 3
    h.decide(x_user="u0")  # evicted long ago: looked up again
    assert hooks.calls.count("u0") == 2


def test_a_hook_that_raises_leaves_its_attribute_absent(caplog: pytest.LogCaptureFixture
                                                        ) -> None:
    h = Harness(TIERS.replace('[http.attributes.plan]\nheader = "X-Plan"',
                              '[http.attributes.plan]\nhook = "tests.policy.hooks:broken"'))
    hd = h.decide(x_user="fay")
    assert hd is not None and hd.verdict == "allowed"
    # absent -> the default tier ("free"): the user's free counter was charged
    assert [d.entries for d in hd.check.descriptors] == [
        (("client_ip", "192.0.2.1"),), (("plan", "free"), ("user", "fay"))]
    assert "its hook raised" in caplog.text


def test_a_jwt_claim_is_an_attribute() -> None:
    def token(claims: dict[str, Any]) -> str:
        body = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
        return f"Bearer e30.{body}.sig"

    h = Harness(TIERS.replace('[http.attributes.user]\nheader = "X-User"',
                              '[http.attributes.user]\nclaim = "sub"'))
    hd = h.decide(authorization=token({"sub": "gus"}))
    assert hd is not None
    assert (("plan", "free"), ("user", "gus")) in [d.entries for d in hd.check.descriptors]
    for bad in ("Bearer not-a-jwt", "Basic Z3VzOnB3", token({"sub": ["x"]}), "Bearer a.%%%.c"):
        hd = h.decide(authorization=bad)
        assert hd is not None and [d.entries for d in hd.check.descriptors] == [
            (("client_ip", "192.0.2.1"),)], bad


# -- several keys per request -------------------------------------------------------------


SEVERAL = '''
[http]
domain = "web"
descriptors = [["client_ip"], ["user"], [{ key = "all", value = "everyone" }]]

[http.attributes.user]
header = "X-User"

[[domains.web.descriptors]]
key = "client_ip"
limits = [{ name = "per-ip", algorithm = "fixed-window", rate = "3/minute" }]

[[domains.web.descriptors]]
key = "user"
limits = [{ name = "per-user", algorithm = "fixed-window", rate = "2/minute" }]

[[domains.web.descriptors]]
key = "all"
limits = [{ name = "global", algorithm = "fixed-window", rate = "4/minute", scope = "global" }]
'''


def test_per_ip_per_user_and_global_limits_are_decided_all_or_nothing() -> None:
    h = Harness(SEVERAL)
    assert h.verdicts(2, x_user="ann") == ["allowed", "allowed"]
    # ann's own limit rejects: nothing is charged, so her address keeps its third request
    assert h.verdicts(3, x_user="ann") == ["rejected"] * 3
    assert h.verdicts(1, x_user="bob") == ["allowed"]  # same address: its 3rd of 3
    assert h.verdicts(1, x_user="cat") == ["rejected"]  # per-ip spent
    # another address, and the global limit (4/minute) has one left
    assert h.verdicts(2, client="192.0.2.9", x_user="dan") == ["allowed", "rejected"]


def test_a_descriptor_with_an_absent_attribute_is_not_sent() -> None:
    h = Harness(SEVERAL)
    hd = h.decide()
    assert hd is not None
    assert [d.entries for d in hd.check.descriptors] == [
        (("client_ip", "192.0.2.1"),), (("all", "everyone"),)]


def test_a_client_cannot_make_an_attribute_value_unbounded() -> None:
    h = Harness(SEVERAL)
    hd = h.decide(x_user="x" * 5000)
    assert hd is not None
    value = dict(hd.check.descriptors[1].entries)["user"]
    assert value.startswith("sha256:") and len(value) == 39
    hd2 = h.decide(x_user="\x00evil")
    assert hd2 is not None and dict(hd2.check.descriptors[1].entries)["user"].startswith(
        "sha256:")


# -- routes, coverage, exemptions, costs ---------------------------------------------------


ROUTES = '''
[http]
domain = "web"
paths = ["/api/**", "/login"]
methods = ["GET", "POST"]
descriptors = [["client_ip"]]

[http.attributes.user]
header = "X-User"

[http.exempt]
paths = ["/api/health"]
networks = ["10.0.0.0/8"]
keys = { user = ["monitor"] }

[[http.routes]]
name = "login"
path = "/login"
methods = ["POST"]
descriptors = [["route", "client_ip"]]

[[http.routes]]
name = "export"
path = "/api/export"
mode = "replace"
descriptors = [["route", "user"]]
cost = { POST = 3, default = 1 }

[[http.routes]]
name = "public"
path = "/api/public/**"
exempt = true

[[domains.web.descriptors]]
key = "client_ip"
limits = [{ name = "per-ip", algorithm = "fixed-window", rate = "10/minute" }]

[[domains.web.descriptors]]
key = "route"
value = "login"

  [[domains.web.descriptors.descriptors]]
  key = "client_ip"
  limits = [{ name = "login", algorithm = "fixed-window", rate = "2/minute" }]

[[domains.web.descriptors]]
key = "route"
value = "export"

  [[domains.web.descriptors.descriptors]]
  key = "user"
  limits = [{ name = "export", algorithm = "fixed-window", rate = "6/minute" }]
'''


def test_a_route_adds_to_the_default_descriptors() -> None:
    h = Harness(ROUTES)
    hd = h.decide("/login", "POST")
    assert hd is not None and hd.check.route == "login"
    assert [d.entries for d in hd.check.descriptors] == [
        (("client_ip", "192.0.2.1"),), (("route", "login"), ("client_ip", "192.0.2.1"))]
    assert h.verdicts(2, "/login", "POST") == ["allowed", "rejected"]
    # The rejected login charged nothing: per-ip has 10 - 2 = 8 left for other paths.
    assert h.verdicts(9, "/api/items") == ["allowed"] * 8 + ["rejected"]


def test_a_replacing_route_drops_the_defaults_and_costs_by_method() -> None:
    h = Harness(ROUTES)
    hd = h.decide("/api/export", "POST", x_user="ann")
    assert hd is not None
    assert [d.entries for d in hd.check.descriptors] == [(("route", "export"), ("user", "ann"))]
    assert hd.check.cost == 3
    assert h.verdicts(1, "/api/export", "POST", x_user="ann") == ["allowed"]  # 6 of 6
    assert h.verdicts(1, "/api/export", "GET", x_user="ann") == ["rejected"]
    assert h.verdicts(1, "/api/export", "GET", x_user="bob") == ["allowed"]


def test_requests_outside_the_coverage_or_exempt_are_not_limited() -> None:
    h = Harness(ROUTES)
    for path, method, client, headers in [
        ("/other", "GET", "192.0.2.1", {}),         # not under [http] paths
        ("/api/items", "DELETE", "192.0.2.1", {}),  # not one of [http] methods
        ("/api/health", "GET", "192.0.2.1", {}),    # exempt path
        ("/api/public/x", "GET", "192.0.2.1", {}),  # exempt route
        ("/api/items", "GET", "10.1.2.3", {}),      # exempt network
        ("/api/items", "GET", "192.0.2.1", {"x_user": "monitor"}),  # exempt key
    ]:
        assert h.decide(path, method, client, **headers) is None, (path, method, client)
    assert h.decide("/api/items", "GET", "192.0.2.1", x_user="ann") is not None


def test_a_decorator_route_limit_adds_or_replaces() -> None:
    h = Harness(ROUTES)
    add = _extra_of(RouteLimit((Limit("fixed-window", "1/minute", name="deco"),), "items"))
    assert h.verdicts(2, "/api/items", extra=add) == ["allowed", "rejected"]
    hd = h.decide("/api/items", extra=add)
    assert hd is not None and [d.entries for d in hd.check.descriptors] == [
        (("client_ip", "192.0.2.1"),), (("route", "items"), ("client_ip", "192.0.2.1"))]
    rep = _extra_of(RouteLimit((Limit("fixed-window", "5/minute", name="deco2"),), "items2",
                               key="user", mode="replace"))
    hd = h.decide("/api/items", extra=rep, x_user="ann")
    assert hd is not None and [d.entries for d in hd.check.descriptors] == [
        (("route", "items2"), ("user", "ann"))]


# -- failure policy per rule, queueing, dry run ----------------------------------------------


class DownStore(MemoryStore):
    """A store whose every decision fails as if Redis were unreachable."""

    def decide(self, checks: list[Check], now: float, consume: bool = True) -> Any:
        raise StoreUnavailable("connection refused (test)")

    def decide_one(self, limit: Limit, key: str, cost: float, now: float) -> Decision:
        raise StoreUnavailable("connection refused (test)")


def test_each_rule_keeps_its_own_failure_policy_when_the_store_is_down() -> None:
    text = ROUTES.replace('''  key = "client_ip"
  limits = [{ name = "login"''', '''  key = "client_ip"
  failure = "closed"
  limits = [{ name = "login"''')
    h = Harness(text, store=DownStore())
    hd = h.decide("/api/items")
    assert hd is not None and hd.verdict == "allowed" and hd.decision.degraded  # open
    hd = h.decide("/login", "POST")
    assert hd is not None and hd.verdict == "rejected" and hd.decision.degraded  # closed
    assert hd.decision.limit is not None and hd.decision.limit.name == "web.login"


QUEUE = '''
[http]
domain = "web"
descriptors = [["client_ip"]]
max_delay = 1.0

[[domains.web.descriptors]]
key = "client_ip"
limits = [{ name = "q", algorithm = "leaky-bucket", rate = "1r/s", burst = 5 }]
'''


def test_a_request_that_would_queue_past_max_delay_is_rejected_and_refunded() -> None:
    h = Harness(QUEUE)
    assert h.verdicts(2) == ["allowed", "delayed"]
    hd = h.decide()
    assert hd is not None and hd.verdict == "rejected"  # would wait 2 s > 1 s
    # refunded: the next request queues behind the same two, not three
    h.clock.advance(1.0)
    hd = h.decide()
    assert hd is not None and hd.verdict == "delayed" and hd.decision.delay == pytest.approx(1.0)


def test_a_dry_run_route_never_rejects_but_counts() -> None:
    h = Harness(ROUTES.replace('name = "login"\npath = "/login"',
                               'name = "login"\npath = "/login"\ndry_run = true'))
    assert h.verdicts(3, "/login", "POST") == ["allowed", "allowed", "shadow-rejected"]


# -- the middleware: file, reload, one snapshot per request ----------------------------------


def _write(path: Path, text: str) -> None:
    path.write_text(textwrap.dedent(text))


def _wsgi_call(mw: WSGIRateLimitMiddleware, path: str = "/", **headers: str
               ) -> tuple[str, dict[str, str]]:
    env = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "REMOTE_ADDR": "192.0.2.1",
           **{"HTTP_" + k.upper(): v for k, v in headers.items()}}
    got: dict[str, Any] = {}

    def start_response(status: str, hdrs: list[tuple[str, str]], exc: Any = None) -> None:
        got["status"], got["headers"] = status, dict(hdrs)

    b"".join(mw(env, cast(Any, start_response)))
    return got["status"], got["headers"]


def _app(environ: Any, start_response: Any) -> Iterator[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    yield b"ok"


def test_the_middleware_reloads_a_good_file_and_keeps_the_old_policy_on_a_bad_one(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "policies.toml"
    _write(path, TIERS)
    clock = ManualClock(1000.0)
    mw = WSGIRateLimitMiddleware(_app, path, clock=clock)
    assert [_wsgi_call(mw, x_user="ann")[0][:3] for _ in range(3)] == ["200", "200", "429"]
    _write(path, TIERS.replace('rate = "2/minute"', 'rate = "4/minute"'))
    assert mw.reload() is True
    # a new snapshot, the same counters: 2 used of the free tier's new 4
    assert [_wsgi_call(mw, x_user="ann")[0][:3] for _ in range(3)] == ["200", "200", "429"]
    _write(path, TIERS.replace('rate = "2/minute"', 'rate = "4/minut"').replace(
        'default = "free"', 'default = "gold"'))
    assert mw.reload() is False
    assert "NOT reloaded: 2 error(s)" in caplog.text
    assert "default 'gold' is not one of its values" in caplog.text
    assert _wsgi_call(mw, x_user="bob")[1]["RateLimit-Policy"].count('"web.free";q=4') == 1
    _write(path, PER_IP)  # valid policies, but no [http] part: refused for a middleware
    assert mw.reload() is False
    assert "a middleware needs the [http] part" in caplog.text


def test_a_watched_file_is_polled_on_requests_by_the_injected_clock(tmp_path: Path) -> None:
    path = tmp_path / "policies.toml"
    _write(path, TIERS)
    watch_clock = ManualClock(0.0)
    mw = WSGIRateLimitMiddleware(_app, path, clock=ManualClock(1000.0), watch=5.0,
                                 watch_clock=watch_clock)
    policy = _wsgi_call(mw, x_user="ann")[1]["RateLimit-Policy"]
    assert '"web.free";q=2' in policy
    _write(path, TIERS.replace('rate = "2/minute"', 'rate = "7/minute"'))
    watch_clock.advance(4.9)
    assert '"web.free";q=2' in _wsgi_call(mw, x_user="ann")[1]["RateLimit-Policy"]
    watch_clock.advance(0.2)
    assert '"web.free";q=7' in _wsgi_call(mw, x_user="ann")[1]["RateLimit-Policy"]


def test_no_request_sees_half_of_a_policy_while_it_is_reloaded(tmp_path: Path) -> None:
    path = tmp_path / "policies.toml"
    versions = [TIERS.replace('"2/minute"', f'"{n}/minute"').replace(
        '"100/minute"', f'"{1000 + n}/minute"') for n in range(2, 6)]
    _write(path, versions[0])
    mw = WSGIRateLimitMiddleware(_app, path, clock=ManualClock(1000.0))
    seen: list[str] = []
    stop = threading.Event()

    def hammer() -> None:
        while not stop.is_set():
            seen.append(_wsgi_call(mw, x_user="ann")[1]["RateLimit-Policy"])

    threads = [threading.Thread(target=hammer) for _ in range(3)]
    for t in threads:
        t.start()
    reloads = 0
    for i in range(1, 40):
        _write(path, versions[i % len(versions)])
        reloads += mw.reload()
        while len(seen) < 10 * i:  # bounded by the work done, not by time
            stop.wait(0.001)
    stop.set()
    for t in threads:
        t.join()
    assert reloads == 39
    # Each response names the per-ip and free limits of ONE version (n and 1000 + n).
    for policy in seen:
        n = int(policy.split('"web.free";q=')[1].split(";")[0])
        assert f'"web.per-ip";q={1000 + n};' in policy, policy
    assert len({p for p in seen}) >= 2


def test_a_middleware_needs_an_http_part_and_takes_no_python_failure_policy(
        tmp_path: Path) -> None:
    path = tmp_path / "policies.toml"
    _write(path, PER_IP)
    with pytest.raises(PolicyError, match="a middleware needs the"):
        WSGIRateLimitMiddleware(_app, path)
    _write(path, TIERS)
    with pytest.raises(TypeError, match=r"\[service\] failure"):
        WSGIRateLimitMiddleware(_app, path, failure="closed")
    snap: Policies = PolicyHolder(path).current
    mw = WSGIRateLimitMiddleware(_app, snap)  # a snapshot works too
    assert _wsgi_call(mw, x_user="ann")[0].startswith("200")


def test_an_exempt_key_of_a_hashed_attribute_is_compared_as_its_digest() -> None:
    h = Harness(SEVERAL.replace('[http.attributes.user]\nheader = "X-User"',
                                '[http.attributes.user]\nheader = "X-Api-Key"\nhash = true\n\n'
                                '[http.exempt]\nkeys = { user = ["internal-secret"] }'))
    assert h.decide(x_api_key="internal-secret") is None
    hd = h.decide(x_api_key="someone-else")
    assert hd is not None and dict(hd.check.descriptors[1].entries)["user"].startswith(
        "sha256:")


def test_a_missing_host_header_is_an_absent_host() -> None:
    h = Harness(PER_IP + '''
[http]
domain = "web"
descriptors = [["client_ip"], ["host"]]
''')
    hd = h.decide()
    assert hd is not None and [d.entries for d in hd.check.descriptors] == [
        (("client_ip", "192.0.2.1"),)]
    hd = h.decide(host="API.example.com")
    assert hd is not None and hd.check.descriptors[1].entries == (("host", "api.example.com"),)


def test_watch_polls_on_the_adapters_clock_unless_given_its_own(tmp_path: Path) -> None:
    path = tmp_path / "policies.toml"
    _write(path, TIERS)
    clock = ManualClock(1000.0)
    mw = WSGIRateLimitMiddleware(_app, path, clock=clock, watch=5.0)
    _write(path, TIERS.replace('rate = "2/minute"', 'rate = "7/minute"'))
    assert '"web.free";q=2' in _wsgi_call(mw, x_user="ann")[1]["RateLimit-Policy"]
    clock.advance(6.0)
    assert '"web.free";q=7' in _wsgi_call(mw, x_user="ann")[1]["RateLimit-Policy"]


def test_a_degraded_answer_names_the_failure_policy_of_the_rule_that_decided(
        tmp_path: Path) -> None:
    path = tmp_path / "policies.toml"
    _write(path, ROUTES.replace('''  key = "client_ip"
  limits = [{ name = "login"''', '''  key = "client_ip"
  failure = "closed"
  limits = [{ name = "login"'''))
    mw = WSGIRateLimitMiddleware(_app, path, store=DownStore(), clock=ManualClock(1000.0))
    status, headers = _wsgi_call(mw, "/api/items")
    assert status.startswith("200") and headers["X-RateLimit-Degraded"] == "open"
    env_login = {"REQUEST_METHOD": "POST", "PATH_INFO": "/login", "REMOTE_ADDR": "192.0.2.1"}
    got: dict[str, Any] = {}

    def start_response(status: str, hdrs: list[tuple[str, str]], exc: Any = None) -> None:
        got["status"], got["headers"] = status, dict(hdrs)

    b"".join(mw(env_login, cast(Any, start_response)))
    assert got["status"].startswith("429") and got["headers"]["X-RateLimit-Degraded"] == "closed"


LIMITS_FOR = SEVERAL.replace('[http.attributes.user]', '''[http.limits_for]
hook = "tests.policy.hooks:contract_limits"
key = "user"
cache_seconds = 60
max_limits = 2

[http.attributes.user]''')


def test_limits_from_a_hook_apply_per_customer_with_the_files_all_or_nothing() -> None:
    hooks.contract_calls.clear()
    hooks.CONTRACTS.update({
        "acme": Limit("fixed-window", "1/minute", name="contract"),
        "big": [Limit("fixed-window", "5/minute", name="contract"),
                Limit("fixed-window", "100/hour", name="contract-hourly")],
    })
    h = Harness(LIMITS_FOR)
    hd = h.decide(client="192.0.2.10", x_user="acme")
    assert hd is not None and hd.verdict == "allowed"
    assert hd.check.descriptors[-1].entries == (("user", "acme"),)
    # acme's contract (1/minute) rejects its second request; nothing else is charged, so the
    # per-user limit (2/minute) still has one left for a request that meets no contract.
    assert h.verdicts(1, client="192.0.2.10", x_user="acme") == ["rejected"]
    hooks.CONTRACTS.pop("acme")
    assert h.verdicts(1, client="192.0.2.10", x_user="acme") == ["rejected"]  # cached
    h.clock.advance(61.0)  # the cache and the windows expired: no contract now
    assert h.verdicts(2, client="192.0.2.10", x_user="acme") == ["allowed", "allowed"]
    # "big" has two limits of its own, counted separately from acme's "contract" counter
    assert h.verdicts(2, client="192.0.2.11", x_user="big") == ["allowed", "allowed"]
    assert hooks.contract_calls == ["acme", "acme", "big"]


def test_a_limits_hooks_bad_answers_give_no_limits_of_its_own(
        caplog: pytest.LogCaptureFixture) -> None:
    hooks.CONTRACTS.update({"many": [Limit("fixed-window", "1/minute", name=f"c{i}")
                                     for i in range(3)],
                            "junk": "10/s", "none": None})
    h = Harness(LIMITS_FOR)
    for user in ("many", "junk", "none"):
        hd = h.decide(client="192.0.2.20", x_user=user)
        assert hd is not None and [d.entries[0][0] for d in hd.check.descriptors] == [
            "client_ip", "user", "all"], user
    assert "more than max_limits=2" in caplog.text
    assert "expected a Limit, a list of them or None" in caplog.text
    h2 = Harness(LIMITS_FOR.replace("hooks:contract_limits", "hooks:broken_limits"))
    hd = h2.decide(x_user="acme")
    assert hd is not None and hd.verdict == "allowed"
    assert "limits_for hook raised" in caplog.text
