"""HTTPPolicy and Route: matching, keys, costs, exemptions and outcomes (no framework)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from ratekeeper import Decision, Limit, MemoryStore
from ratekeeper.core import run
from ratekeeper.http import APIKey, ClientIP, HTTPPolicy, RequestInfo, Route, compile_path
from ratekeeper.http._policy import _Engine
from ratekeeper.testing import ManualClock


def req(path: str = "/", method: str = "GET", peer: str = "203.0.113.7", **h: str) -> RequestInfo:
    return RequestInfo(method, path, {k.replace("_", "-"): v for k, v in h.items()}, peer)


def engine(policy: HTTPPolicy, clock: ManualClock | None = None) -> _Engine:
    c = clock or ManualClock()
    return _Engine(policy, MemoryStore(), clock=c, sleep=c.sleep)


@pytest.mark.parametrize(
    ("pattern", "yes", "no"),
    [
        ("/health", ["/health"], ["/health/", "/healthz", "/x/health"]),
        ("/items/{id}", ["/items/1", "/items/abc"], ["/items/", "/items/1/2"]),
        ("/files/{p:path}", ["/files/a/b/c"], ["/files/"]),
        ("/static/*", ["/static/a.css", "/static/"], ["/static/a/b.css"]),
        ("/api/**", ["/api/", "/api/a/b/c"], ["/api", "/apix/"]),
        ("/a.b", ["/a.b"], ["/aXb"]),
        (re.compile(r"/v\d+/.*"), ["/v1/x"], ["/vx/x"]),
    ],
)
def test_compile_path(pattern: Any, yes: list[str], no: list[str]) -> None:
    rx = compile_path(pattern)
    assert all(rx.fullmatch(p) for p in yes)
    assert not any(rx.fullmatch(p) for p in no)


def test_compile_path_rejects_relative() -> None:
    with pytest.raises(ValueError, match="starting with '/'"):
        compile_path("health")


SEARCH = Limit("fixed-window", "2/minute", name="search")
DEFAULT = Limit("fixed-window", "100/minute", name="default")


def test_first_matching_route_wins_and_methods_filter() -> None:
    post = Limit("fixed-window", "1/minute", name="post")
    e = engine(HTTPPolicy(
        limits=DEFAULT,
        routes=[Route("/search", SEARCH), Route("/items/**", post, methods=["post"])],
    ))
    p = e.plan(req("/search"))
    assert p is not None and p.limits == (SEARCH,)
    p = e.plan(req("/items/1", "POST"))
    assert p is not None and p.limits == (post,)
    p = e.plan(req("/items/1", "GET"))
    assert p is not None and p.limits == (DEFAULT,)


def test_unmatched_without_default_is_not_limited() -> None:
    e = engine(HTTPPolicy(routes=[Route("/search", SEARCH)]))
    assert e.plan(req("/other")) is None


def test_routes_with_the_same_limits_share_one_limit_set() -> None:
    e = engine(HTTPPolicy(limits=SEARCH, routes=[Route("/a", SEARCH), Route("/b", [SEARCH])]))
    assert len(e.limits) == 1


def test_exemptions() -> None:
    e = engine(HTTPPolicy(
        limits=DEFAULT,
        routes=[Route("/internal/**", exempt=True)],
        key=APIKey(),
        exempt_paths=["/healthz", "/metrics"],
        exempt_keys=[APIKey.key_for("admin"), "ip:198.51.100.1"],
        exempt_networks=["192.0.2.0/24", "2001:db8::/32"],
    ))
    assert e.plan(req("/healthz")) is None
    assert e.plan(req("/internal/x")) is None
    assert e.plan(req("/", peer="192.0.2.9")) is None
    assert e.plan(req("/", peer="2001:db8::1")) is None
    assert e.plan(req("/", x_api_key="admin")) is None
    assert e.plan(req("/", peer="198.51.100.1")) is None
    assert e.plan(req("/", x_api_key="other")) is not None
    assert e.stats["exempt"] == 6


def test_exempt_network_uses_the_resolved_client_not_the_proxy() -> None:
    e = engine(HTTPPolicy(
        limits=DEFAULT,
        client_ip=ClientIP(["10.0.0.0/8"]),
        exempt_networks=["10.0.0.0/8"],
    ))
    # The proxy's own network is exempt, but the client behind it is not.
    assert e.plan(req("/", peer="10.0.0.2", x_forwarded_for="203.0.113.5")) is not None
    assert e.plan(req("/", peer="10.0.0.2")) is None


def test_keys_fall_back_to_client_ip() -> None:
    e = engine(HTTPPolicy(limits=DEFAULT, key=APIKey()))
    p = e.plan(req(x_api_key="k"))
    assert p is not None and p.key == APIKey.key_for("k")
    p = e.plan(req())
    assert p is not None and p.key == "ip:203.0.113.7"


def test_route_key_and_cost() -> None:
    e = engine(HTTPPolicy(
        limits=DEFAULT,
        routes=[Route("/upload", DEFAULT, key=lambda r: "tenant:" + r.headers.get("x-t", ""),
                      cost=lambda r: int(r.headers.get("content-length", "1")))],
        cost=2,
    ))
    p = e.plan(req("/upload", x_t="acme", content_length="7"))
    assert p is not None and (p.key, p.cost) == ("tenant:acme", 7.0)
    p = e.plan(req("/"))
    assert p is not None and p.cost == 2.0


def test_key_function_results_are_made_safe() -> None:
    e = engine(HTTPPolicy(limits=DEFAULT, key=lambda r: "x\n" * 400))
    p = e.plan(req())
    assert p is not None and p.key.startswith("h:")


def test_outcome_reject_and_pass() -> None:
    e = engine(HTTPPolicy(limits=SEARCH, legacy_headers=True, status=503))
    out = run(e.handle(req("/s")))
    assert out is not None
    assert out.action == "pass" and dict(out.headers)["X-RateLimit-Remaining"] == "1"
    run(e.handle(req("/s")))
    out = run(e.handle(req("/s")))
    assert out is not None and out.action == "reject" and out.status == 503
    body = json.loads(out.body)
    assert body["status"] == 503 and body["title"] == "Service Unavailable"
    assert body["policy"] == "search" and body["instance"] == "/s"
    assert e.stats["rejected"] == 1 and e.stats["allowed"] == 2


def test_head_rejection_has_no_body() -> None:
    e = engine(HTTPPolicy(limits=SEARCH))
    plan = e.plan(req("/", "HEAD"))
    assert plan is not None
    out = e.outcome(plan, Decision(False, 0, 5.0, 5.0, 0.0, SEARCH))
    assert out.action == "reject" and out.body == b""


def test_on_decision_hook_errors_are_swallowed(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[str] = []

    def hook(r: RequestInfo, d: Decision, verdict: str) -> None:
        seen.append(verdict)
        raise RuntimeError("metrics down")

    e = engine(HTTPPolicy(limits=SEARCH, on_decision=hook))
    plan = e.plan(req())
    assert plan is not None
    e.outcome(plan, Decision(True, 1, 0.0, 1.0, 0.0, SEARCH))
    assert seen == ["allowed"]
    assert "on_decision hook raised" in caplog.text


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"status": 200}, "4xx or 5xx"),
        ({"status": True}, "4xx or 5xx"),
        ({"max_delay": -1}, "max_delay"),
        ({"cost": 0}, "cost"),
        ({"exempt_networks": ["nope"]}, "exempt network"),
        ({"limits": [SEARCH, SEARCH]}, "distinct names"),
    ],
)
def test_policy_config_errors(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        HTTPPolicy(**kwargs)


def test_one_name_one_limit() -> None:
    other = Limit("fixed-window", "5/minute", name="search")
    with pytest.raises(ValueError, match="names two different limits"):
        HTTPPolicy(limits=SEARCH, routes=[Route("/x", other)])


def test_policy_type_errors() -> None:
    with pytest.raises(TypeError, match="Route objects"):
        HTTPPolicy(routes=["/x"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="lists"):
        HTTPPolicy(exempt_paths="/healthz")
    with pytest.raises(TypeError, match="Limit objects"):
        HTTPPolicy(limits=["10/s"])  # type: ignore[list-item]


def test_route_config_errors() -> None:
    with pytest.raises(ValueError, match="no limits"):
        Route("/x")
    with pytest.raises(TypeError, match="collection"):
        Route("/x", SEARCH, methods="GET")
    with pytest.raises(ValueError, match="cost"):
        Route("/x", SEARCH, cost=-1)


def test_policy_of() -> None:
    p = HTTPPolicy(limits=SEARCH)
    assert HTTPPolicy.of(p) is p
    assert HTTPPolicy.of(SEARCH).limits == (SEARCH,)
    assert HTTPPolicy.of([SEARCH, DEFAULT]).limits == (SEARCH, DEFAULT)


def test_a_fixed_cost_above_a_limits_capacity_is_a_configuration_error() -> None:
    # Every such request would be rejected for ever: say so when the policy is built.
    small = Limit("gcra", "1/s", burst=2, name="small")
    with pytest.raises(ValueError, match=r"cost 5 exceeds the capacity of limit 'small' \(2\)"):
        Route("/export", [small], cost=5)
    with pytest.raises(ValueError, match="exceeds the capacity"):
        HTTPPolicy(limits=[small], cost=3)
    assert Route("/export", [small], cost=2).cost == 2  # at capacity is fine
    assert Route("/export", [small], cost=lambda info: 5).limits == (small,)  # checked per call


def test_a_route_without_a_cost_charges_the_policys_cost() -> None:
    heavy = Limit("fixed-window", "20/minute", name="heavy")
    e = engine(HTTPPolicy(limits=DEFAULT, cost=5, routes=[
        Route("/r", heavy),                # inherits the policy's cost
        Route("/cheap", heavy, cost=1),    # says its own
    ]))
    assert [e.plan(req(path)).cost for path in ("/r", "/cheap", "/other")] == [  # type: ignore[union-attr]
        5.0, 1.0, 5.0]


def test_an_inherited_cost_above_a_routes_capacity_is_a_configuration_error() -> None:
    small = Limit("fixed-window", "2/minute", name="small")
    with pytest.raises(ValueError, match=r"cost 5 exceeds the capacity of limit 'small'"):
        HTTPPolicy(limits=DEFAULT, cost=5, routes=[Route("/r", small)])


def test_failure_raise_is_refused_by_the_http_layer_with_what_to_use_instead() -> None:
    # A middleware must answer every request: "raise" used to be turned into "open" silently.
    with pytest.raises(ValueError, match=r"failure='raise'.*'open'.*'closed'.*'local'"):
        _Engine(HTTPPolicy(limits=DEFAULT), MemoryStore(), sleep=print, failure="raise")
    with pytest.raises(ValueError, match=r"failure='sometimes'"):
        _Engine(HTTPPolicy(limits=DEFAULT), MemoryStore(), sleep=print, failure="sometimes")


def test_a_route_in_add_mode_is_decided_with_the_default_limits() -> None:
    default = Limit("fixed-window", "3/minute", name="default")
    route = Limit("fixed-window", "10/minute", name="route")
    for mode, want in (("add", ["pass"] * 3 + ["reject"]), ("replace", ["pass"] * 4)):
        e = engine(HTTPPolicy(limits=[default], routes=[Route("/r", [route], mode=mode)]))
        outs = [run(e.handle(RequestInfo("GET", "/r", {}, "192.0.2.1"))) for _ in range(4)]
        assert [o.action for o in outs if o is not None] == want, mode
        assert outs[0] is not None
        names = next(h for h in outs[0].headers if h[0] == "RateLimit-Policy")[1]
        assert ('"default"' in names) == (mode == "add") and '"route"' in names
    with pytest.raises(ValueError, match="mode must be 'add'"):
        Route("/r", [route], mode="merge")  # type: ignore[arg-type]
