"""A Python `HTTPPolicy` is a way to build the policies model: `to_policies()` gives the
``[http]`` part and domain that decide exactly as the middleware decides the policy.

Random request sequences go through the middleware's engine for the `HTTPPolicy` and
through the policies-file engine for its `to_policies()` (each on its own memory store, the
same `ManualClock` steps): every outcome (pass or reject, status, delay, headers) and every
decision (verdict, remaining, wait, deciding limit) must be equal.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ratekeeper import Limit, MemoryStore
from ratekeeper.core import run
from ratekeeper.http import APIKey, ClientIP, HTTPPolicy, RequestInfo, Route
from ratekeeper.http._policy import _Engine, _PoliciesEngine
from ratekeeper.testing import ManualClock

PER_CLIENT = Limit("gcra", "2/s", burst=4, name="per-client")
EVERYONE = Limit("fixed-window", "12/10s", name="everyone", scope="global")
SEARCH = Limit("sliding-window-log", "3/5s", name="search")
QUEUE = Limit("leaky-bucket", "2r/s", burst=3, name="queue")

POLICIES = {
    "defaults-only": HTTPPolicy(limits=[PER_CLIENT, EVERYONE]),
    "routes": HTTPPolicy(
        limits=[PER_CLIENT, EVERYONE],
        routes=[Route("/search", [SEARCH], methods=["GET"]),
                Route("/report", [PER_CLIENT, EVERYONE], cost=2),
                Route("/items/{id}", [SEARCH], mode="add"),
                Route("/health", exempt=True)],
        key=APIKey("x-api-key", valid={"k1", "k2"}.__contains__),
        client_ip=ClientIP(["10.0.0.0/8"]),
        exempt_paths=["/metrics"], exempt_networks=["192.0.2.128/25"],
        exempt_keys={APIKey.key_for("k2")}),
    "queue-and-dry-run": HTTPPolicy(
        limits=[QUEUE], routes=[Route("/shadow", [SEARCH], dry_run=True)],
        max_delay=1.0, cost=lambda r: 2.0 if r.method == "POST" else 1.0),
}

PATHS = ["/", "/search", "/report", "/items/7", "/health", "/metrics", "/shadow"]
PEERS = ["192.0.2.1", "192.0.2.2", "192.0.2.200", "10.1.1.1", "2001:db8::1"]

requests = st.lists(st.tuples(
    st.floats(0, 1.5), st.sampled_from(PATHS), st.sampled_from(["GET", "POST"]),
    st.sampled_from(PEERS), st.sampled_from([None, "k1", "k2", "bogus"]),
    st.sampled_from([None, "203.0.113.9", "garbage"])), min_size=1, max_size=40)


def _outcome(out: Any) -> Any:
    if out is None:
        return None
    d = out.decision
    return (out.action, out.status, out.delay, out.headers, out.body, d.allowed,
            d.remaining, d.retry_after, d.delay, d.limit.name if d.limit else None)


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from(sorted(POLICIES)), steps=requests)
def test_a_python_policy_and_its_policies_model_decide_identically(
        name: str, steps: list[tuple[float, str, str, str, str | None, str | None]]) -> None:
    policy = POLICIES[name]
    # Each its own clock, moved alike (a queued request's sleep moves its engine's clock).
    c1, c2 = ManualClock(1000.0), ManualClock(1000.0)
    direct = _Engine(policy, MemoryStore(), clock=c1, sleep=c1.sleep)
    snap = policy.to_policies()
    model = _PoliciesEngine(lambda: snap, MemoryStore(), clock=c2, sleep=c2.sleep)
    for dt, path, method, peer, key, xff in steps:
        c1.advance(dt)
        c2.advance(dt)
        headers = {k: v for k, v in (("x-api-key", key), ("x-forwarded-for", xff)) if v}
        a = run(direct.handle(RequestInfo(method, path, dict(headers), peer)))
        b = run(model.handle(RequestInfo(method, path, dict(headers), peer)))
        assert _outcome(a) == _outcome(b), (path, method, peer, key, xff)
        assert c1.now == c2.now
    assert direct.stats == model.stats
