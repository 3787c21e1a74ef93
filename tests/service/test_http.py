"""The HTTP JSON API of the real service, over real HTTP (httpx) on loopback.

Policies: tests/service/policies/service.toml (rates per hour: nothing refills mid-test).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.service._proc import ServiceProcess


@pytest.fixture(scope="module")
def client(service: ServiceProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=service.http, timeout=10) as c:
        yield c


def check(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    r = client.post("/v1/check", json=body)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    out: dict[str, Any] = r.json()
    return out


def user(uid: str, **more: str) -> dict[str, str]:
    return {"user": uid, **more}


# -- decisions and headers -----------------------------------------------------------------


def test_fixed_window_per_user_then_rejection_with_headers(client: httpx.Client, uid: str) -> None:
    seen = []
    for _ in range(3):
        out = check(client, {"domain": "t", "descriptors": [user(uid)]})
        assert out["allowed"] is True and out["code"] == "OK"
        assert out["decision"]["limit"] == "t.user"
        assert out["headers"]["RateLimit-Policy"] == '"t.user";q=3;w=3600'
        seen.append(out["headers"]["RateLimit"])
        assert "Retry-After" not in out["headers"]
    assert [s.split(";")[1] for s in seen] == ["r=2", "r=1", "r=0"]

    out = check(client, {"domain": "t", "descriptors": [user(uid)]})
    assert out["allowed"] is False and out["code"] == "OVER_LIMIT"
    d = out["decision"]
    assert d["allowed"] is False and d["remaining"] == 0 and 0 < d["retry_after"] <= 3600
    h = out["headers"]
    assert 1 <= int(h["Retry-After"]) <= 3600
    assert h["Cache-Control"] == "no-store"
    assert h["RateLimit"].startswith('"t.user";r=0;t=')
    assert out["statuses"] == [{"code": "OVER_LIMIT", "outcome": "rejected", "rule": "user",
                                "limits": ["t.user"], "decision": d}]
    assert out["problem"]["status"] == 429 and out["problem"]["policy"] == "t.user"
    assert out["problem"]["retry_after"] == int(h["Retry-After"])


def test_envoy_form_and_short_form_are_the_same_descriptor(client: httpx.Client, uid: str) -> None:
    envoy = {"entries": [{"key": "user", "value": uid}]}
    a = check(client, {"domain": "t", "descriptors": [envoy]})
    b = check(client, {"domain": "t", "descriptors": [user(uid)]})
    assert a["decision"]["remaining"] == 2 and b["decision"]["remaining"] == 1


def test_rule_costs_draw_from_a_budget_shared_by_user(client: httpx.Client, uid: str) -> None:
    # budget: token bucket, 100 per hour (capacity 100), counted by user only.
    out = check(client, {"domain": "t", "descriptors": [user(uid, op="export")]})
    assert out["decision"]["limit"] == "t.budget" and out["decision"]["remaining"] == 90
    out = check(client, {"domain": "t", "descriptors": [user(uid, op="search")]})
    assert out["decision"]["remaining"] == 89  # a different rule, the same counter
    out = check(client, {"domain": "t", "descriptors": [user(uid, op="export")], "cost": 2})
    assert out["decision"]["remaining"] == 69  # request cost 2 x rule cost 10
    out = check(client, {"domain": "t", "descriptors": [
        {"entries": [{"key": "user", "value": uid}, {"key": "op", "value": "x"}], "cost": 9}]})
    assert out["decision"]["remaining"] == 60  # per-descriptor cost


def test_several_descriptors_are_all_or_nothing(client: httpx.Client, uid: str) -> None:
    for _ in range(3):
        assert check(client, {"domain": "t", "descriptors": [user(uid)]})["allowed"]
    out = check(client, {"domain": "t", "descriptors": [user(uid), user(uid, op="export")]})
    assert out["allowed"] is False
    assert [s["outcome"] for s in out["statuses"]] == ["rejected", "allowed"]
    assert out["decision"]["limit"] == "t.user"
    assert out["headers"]["RateLimit-Policy"] == '"t.user";q=3;w=3600, "t.budget";q=100;w=3600'
    # The export was not charged: the whole check was rejected.
    out = check(client, {"domain": "t", "descriptors": [user(uid, op="export")]})
    assert out["decision"]["remaining"] == 90


def test_unlimited_shadow_and_unmatched(client: httpx.Client, uid: str) -> None:
    out = check(client, {"domain": "t", "descriptors": [user(f"vip-{uid}")]})
    assert out["allowed"] and out["statuses"][0]["outcome"] == "unlimited"
    assert out["decision"] is None and out["headers"] == {}

    first = check(client, {"domain": "t", "descriptors": [user(f"trial-{uid}")]})
    second = check(client, {"domain": "t", "descriptors": [user(f"trial-{uid}")]})
    assert first["statuses"][0]["outcome"] == "allowed"
    assert second["allowed"] is True and second["code"] == "OK"
    assert second["statuses"][0]["outcome"] == "shadow_rejected"
    assert second["statuses"][0]["decision"]["allowed"] is False  # what it would have done
    assert second["headers"] == {}  # a shadow rule never shapes the answer

    out = check(client, {"domain": "t", "descriptors": [{"nothing": "matches"}]})
    assert out["allowed"] and out["statuses"][0] == {
        "code": "OK", "outcome": "unmatched", "rule": None, "limits": [], "decision": None}
    # Deeper than the rules go: no match (envoyproxy/ratelimit's rule).
    out = check(client, {"domain": "t", "descriptors": [user(uid, op="x", extra="y")]})
    assert out["statuses"][0]["outcome"] == "unmatched"


def test_per_tenant_and_global_limits_together(client: httpx.Client, uid: str) -> None:
    outs = [check(client, {"domain": "t", "descriptors": [{"tenant": uid}]}) for _ in range(6)]
    assert [o["allowed"] for o in outs] == [True] * 5 + [False]
    assert outs[-1]["decision"]["limit"] == "t.per-tenant"
    assert outs[0]["headers"]["RateLimit-Policy"] == (
        '"t.per-tenant";q=5;w=9000, "t.all-tenants";q=1000;w=3600')


def test_key_shorthand_and_whole_number_costs(client: httpx.Client, uid: str) -> None:
    assert check(client, {"domain": "t", "key": uid})["allowed"]
    assert check(client, {"domain": "t", "key": uid})["allowed"]
    out = check(client, {"domain": "t", "key": uid})
    assert not out["allowed"] and out["decision"]["limit"] == "t.k"
    r = client.post("/v1/check", json={"domain": "t", "key": uid + "x", "cost": 0.5})
    assert r.status_code == 400
    assert "whole number" in r.json()["detail"]


def test_hits_addend_is_accepted_as_the_envoy_name_of_cost(client: httpx.Client, uid: str) -> None:
    out = check(client, {"domain": "t", "descriptors": [user(uid)], "hits_addend": 3})
    assert out["allowed"] and out["decision"]["remaining"] == 0


def test_an_unknown_domain_and_empty_descriptors_are_allowed_and_unmatched(
        client: httpx.Client, uid: str) -> None:
    # envoyproxy/ratelimit: no limits for an unknown domain or an entry-less descriptor
    # (test/config/config_test.go, TestBasicConfig: GetLimit("foo_domain", ...) is nil).
    out = check(client, {"domain": "nope", "descriptors": [user(uid)]})
    assert out["allowed"] and out["decision"] is None
    assert [s["outcome"] for s in out["statuses"]] == ["unmatched"]
    out = check(client, {"domain": "t", "descriptors": [{}, {"entries": []}, user(uid)]})
    assert out["allowed"]
    assert [s["outcome"] for s in out["statuses"]] == ["unmatched", "unmatched", "allowed"]


def test_a_descriptor_cost_of_zero_checks_without_charging(client: httpx.Client,
                                                           uid: str) -> None:
    # As Envoy's per-descriptor hits_addend 0 (envoyproxy/ratelimit src/utils/utilities.go,
    # GetHitsAddends): the limit is checked and nothing is charged.
    look = {"entries": [{"key": "user", "value": uid}], "cost": 0}
    out = check(client, {"domain": "t", "descriptors": [look], "cost": 2})
    assert out["allowed"] and out["statuses"][0]["decision"]["remaining"] == 3
    out = check(client, {"domain": "t", "descriptors": [user(uid)]})
    assert out["decision"]["remaining"] == 2


# -- bad input: a clear 4xx, never a crash ----------------------------------------------------

GOOD = '{"domain": "t", "descriptors": [{"user": "bad-input"}]'

BAD: list[tuple[str, bytes | dict[str, Any] | list[Any], int, str]] = [
    ("malformed JSON", b'{"domain": "t", "descriptors": [', 400, "not valid JSON"),
    ("not UTF-8", b'{"domain": "\xff\xfe"}', 400, "not valid JSON"),
    ("empty body", b"", 400, "not valid JSON"),
    ("array body", [1, 2], 400, "must be a JSON object"),
    ("NaN cost", (GOOD + ', "cost": NaN}').encode(), 400, "NaN is not a JSON number"),
    ("Infinity cost", (GOOD + ', "cost": Infinity}').encode(), 400, "Infinity"),
    ("overflowing cost", (GOOD + ', "cost": 1e999}').encode(), 400, "finite number above 0"),
    ("negative cost", (GOOD + ', "cost": -1}').encode(), 400, "finite number above 0"),
    ("zero cost", (GOOD + ', "cost": 0}').encode(), 400, "finite number above 0"),
    ("cost over max_cost", (GOOD + ', "cost": 1000000000}').encode(), 400, "max_cost"),
    ("cost with 5000 digits", (GOOD + ', "cost": ' + "9" * 5000 + "}").encode(), 400,
     "not valid JSON"),
    ("string cost", (GOOD + ', "cost": "3"}').encode(), 400, "must be a number"),
    ("boolean cost", (GOOD + ', "cost": true}').encode(), 400, "must be a number"),
    ("cost and hits_addend", (GOOD + ', "cost": 1, "hits_addend": 1}').encode(), 400,
     "either cost or hits_addend"),
    ("deep nesting", b"[" * 30000, 400, "not valid JSON"),
    ("missing domain", {"descriptors": [{"user": "x"}]}, 400, "domain must be"),
    ("empty domain", {"domain": "", "descriptors": [{"user": "x"}]}, 400, "domain must be"),
    ("empty descriptors", {"domain": "t", "descriptors": []}, 400, "descriptors is empty"),
    ("descriptors not a list", {"domain": "t", "descriptors": {"user": "x"}}, 400,
     "must be a list"),
    ("neither key nor descriptors", {"domain": "t"}, 400, "either"),
    ("both key and descriptors", {"domain": "t", "key": "a", "descriptors": [{"a": "b"}]}, 400,
     "either"),
    ("empty key", {"domain": "t", "key": ""}, 400, "key must be a non-empty string"),
    ("unknown member", {"domain": "t", "key": "a", "costs": 2}, 400, "unknown member"),
    ("negative descriptor cost", {"domain": "t", "descriptors": [
        {"entries": [{"key": "user", "value": "x"}], "cost": -1}]}, 400, "0 or more"),
    ("entry not an object", {"domain": "t", "descriptors": [{"entries": ["user"]}]}, 400,
     "entries[0] must be"),
    ("number value", {"domain": "t", "descriptors": [{"user": 5}]}, 400, "must be a string"),
    ("empty entry key", {"domain": "t", "descriptors": [{"": "x"}]}, 400, "non-empty string"),
    ("long entry key", {"domain": "t", "descriptors": [{"k" * 300: "x"}]}, 400, "at most 256"),
    ("long value", {"domain": "t", "descriptors": [{"user": "v" * 2000}]}, 400, "at most 1024"),
    ("too many entries", {"domain": "t", "descriptors": [{f"k{i}": "v" for i in range(40)}]},
     400, "at most 32"),
    ("too many descriptors", {"domain": "t", "descriptors": [{"user": "x"}] * 65}, 400,
     "at most 64"),
    ("descriptor not an object", {"domain": "t", "descriptors": ["user=x"]}, 400,
     "must be an object"),
]


@pytest.mark.parametrize(("body", "status", "detail"), [b[1:] for b in BAD],
                         ids=[b[0] for b in BAD])
def test_bad_input_is_a_clear_4xx(client: httpx.Client, body: Any, status: int,
                                  detail: str) -> None:
    if isinstance(body, bytes):
        r = client.post("/v1/check", content=body,
                        headers={"content-type": "application/json"})
    else:
        r = client.post("/v1/check", json=body)
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    problem = r.json()
    assert problem["status"] == status
    assert detail in problem["detail"], problem
    if status == 404:
        assert problem["known_domains"] == ["t", "other"]


def test_huge_bodies_are_refused_with_413(client: httpx.Client) -> None:
    big = {"domain": "t", "descriptors": [{"user": "x" * 1000}] * 100}  # > 64 KiB
    r = client.post("/v1/check", json=big)
    assert r.status_code == 413 and "65536-byte limit" in r.json()["detail"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: the stream is cut at the limit
        yield b'{"domain": "t", "descriptors": ['
        for _ in range(200):
            yield b'{"user": "' + b"x" * 1000 + b'"},'
        yield b'{"user": "x"}]}'

    r = client.post("/v1/check", content=chunks())
    assert r.status_code == 413


def test_unknown_routes_and_methods_are_problem_json(client: httpx.Client) -> None:
    r = client.get("/v1/check")
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    assert r.headers["content-type"] == "application/problem+json"
    r = client.get("/nothing-here")
    assert r.status_code == 404 and r.json()["title"] == "Not Found"


def test_service_survives_bad_input(client: httpx.Client, uid: str) -> None:
    for body, _, _ in [b[1:] for b in BAD]:
        if isinstance(body, bytes):
            client.post("/v1/check", content=body)
        else:
            client.post("/v1/check", json=body)
    assert client.get("/healthz").json() == {"status": "ok"}
    assert check(client, {"domain": "t", "descriptors": [user(uid)]})["allowed"]


# -- the other endpoints ----------------------------------------------------------------------


def test_policies_document_the_limits(client: httpx.Client) -> None:
    doc = client.get("/v1/policies").json()
    assert doc["generation"] == 1 and doc["last_reload_error"] is None
    assert doc["service"]["failure"] == "open" and doc["service"]["max_cost"] == 1000
    t = doc["domains"]["t"]
    assert t["description"] == "the test domain"
    first = t["descriptors"][0]
    assert first["key"] == "user" and first["rule"] == "user"
    assert first["limits"] == [{
        "name": "t.user", "algorithm": "fixed-window", "rate": "3/h",
        "per_second": round(3 / 3600, 9), "quota": 3, "window_seconds": 3600,
        "counter": "per descriptor"}]
    export = first["descriptors"][0]
    assert export["value"] == "export" and export["cost"] == 10
    assert export["limits"][0]["counter"] == "by user"
    assert export["limits"][0]["description"] == "a budget per user shared by every operation"
    vip = t["descriptors"][1]
    assert vip == {"key": "user", "value": "vip-*", "rule": "user=vip-*", "unlimited": True}
    tenant = t["descriptors"][3]
    assert [lim["counter"] for lim in tenant["limits"]] == ["per descriptor", "global"]


def test_health_readiness_and_metrics(client: httpx.Client, uid: str,
                                      service: ServiceProcess) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    # pid: which process answered (one of `serve --workers N`).
    assert ready.json() == {"status": "ready", "store": "memory", "pid": service.pid,
                            "generation": 1}

    check(client, {"domain": "t", "descriptors": [user(uid), {"tenant": uid}]})
    client.post("/v1/check", json={"domain": f"unknown-{uid}", "key": uid})
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    assert uid not in text  # no series per client key, and none per unknown domain
    assert ('ratekeeper_decisions_total{domain="t",outcome="allowed",policy="t.user",'
            'rule="user"}') in text
    assert 'ratekeeper_requests_total{result="unknown_domain",transport="http"}' in text
    assert "ratekeeper_store_latency_seconds_bucket" in text
    assert 'ratekeeper_failure_policy_decisions_total{policy="open"} 0.0' in text
    assert "ratekeeper_config_generation 1.0" in text
    assert 'ratekeeper_config_reloads_total{result="ok"} 1.0' in text
    for line in text.splitlines():  # every label value comes from the policies
        if line.startswith("ratekeeper_decisions_total{"):
            labels = line[line.index("{") + 1:line.index("}")]
            assert json.dumps(uid) not in labels


def test_a_rejected_leaky_bucket_decision_has_the_library_delay_of_zero(
        client: httpx.Client, uid: str) -> None:
    # domains.other: leaky bucket 1r/m, burst 1, nodelay: two admitted, the third rejected.
    outs = [check(client, {"domain": "other", "descriptors": [{"a": uid}]}) for _ in range(3)]
    assert [o["allowed"] for o in outs] == [True, True, False]
    rejected = outs[-1]
    assert rejected["decision"]["delay"] == 0.0  # Decision.delay: 0.0 unless admitted late
    assert rejected["statuses"][0]["decision"]["delay"] == 0.0
    assert [o["decision"]["delay"] for o in outs[:2]] == [0.0, 0.0]
